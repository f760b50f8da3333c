//! Products of input rows with Q4_1 weights ([`Q4_1Matrix`]) for [`super::gemv`] and
//! [`super::gemm`], on the input rows the Q8_0 kernel quantizes ([`QuantizedRows`], about 15
//! bits per value: [`InputPrecision::Split`]).
//!
//! A block's product is `Σ (d q + m) · s v = d s · Σ q v + m s · Σ v` for the input block's
//! scale `s` and integers `v`: one integer dot product of the four-bit `q` with `v`, scaled by
//! both scales, plus the weight's minimum times the input block's sum, which the quantized
//! inputs already carry (their offset is `-128 · Σ v`). The weight loads hold eight values of
//! 16 rows (module [`crate::quant`]'s Q4_1 layout); masking and shifting their nibbles gives
//! two vectors in the Q8_0 layout, multiplied as the Q8_0 kernels multiply theirs: with
//! `vpdpbusd` on AVX-512 VNNI (the nibbles are the unsigned operand as they are), with
//! `vpmaddubsw` or 16-bit products on AVX2. Per weight byte that is twice the integer work of
//! Q8_0 for half the bytes read, which is what decoding waits for.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use super::q8_0::{dispatch_rows, InputPrecision, Output, QuantizedRows};
use crate::quant::{Q4_1Matrix, Q4_1_BLOCK, Q4_1_GROUP};

/// Bytes of one group's block: 16 rows of 32 four-bit values.
const GROUP_BLOCK_BYTES: usize = Q4_1_GROUP * Q4_1_BLOCK / 2;

/// 64-byte loads per group block (each eight values of the 16 rows).
const LOADS_PER_BLOCK: usize = GROUP_BLOCK_BYTES / 64;

/// `out[r, c] = x_r · w_c + bias[c]` for every input row `r` of `x` and the weight rows `c` of
/// groups `groups` (16 rows each, the last one cut at the weight's rows).
///
/// # Safety
/// `out.values` must be valid for writes of `x`'s rows times `out.n` values, `out.n` must be
/// `w.rows()`, and no one else may access the columns of these groups meanwhile.
///
/// # Panics
/// If `x` was not quantized for `w`'s width, `groups` goes past `w`'s groups, or `bias` is
/// not `w.rows()` long.
pub(super) unsafe fn project_groups(
    w: &Q4_1Matrix,
    groups: std::ops::Range<usize>,
    x: &QuantizedRows,
    bias: Option<&[f32]>,
    out: Output,
) {
    assert!(x.blocks * Q4_1_BLOCK == w.cols() && groups.end <= w.groups() && out.n == w.rows());
    assert!(bias.is_none_or(|b| b.len() == w.rows()));
    let rows = x.rows();
    for group in groups {
        let mut row0 = 0;
        while row0 < rows {
            let height = (rows - row0).min(max_rows_per_call());
            // SAFETY: the kernel chosen by `max_rows_per_call` runs only where the CPU has what
            // it uses; the asserts above bound the group and rows, and the caller the output;
            // split inputs carry their 16-bit values where the AVX2 kernel runs.
            unsafe { group_dots(w, group, x, row0, height, bias, out) };
            row0 += height;
        }
    }
}

/// Input rows one kernel call takes on this CPU.
fn max_rows_per_call() -> usize {
    #[cfg(target_arch = "x86_64")]
    if super::q8_0::has_vnni() {
        return avx512::MAX_ROWS;
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        return avx2::MAX_ROWS;
    }
    PORTABLE_ROWS
}

/// Input rows the portable kernel takes per call.
const PORTABLE_ROWS: usize = 8;

/// The outputs of group `group` for input rows `row0..row0 + height`, on the CPU's best kernel.
///
/// # Safety
/// As for [`project_groups`], with `height` at most [`max_rows_per_call`].
unsafe fn group_dots(
    w: &Q4_1Matrix,
    group: usize,
    x: &QuantizedRows,
    row0: usize,
    height: usize,
    bias: Option<&[f32]>,
    out: Output,
) {
    #[cfg(target_arch = "x86_64")]
    if super::q8_0::has_vnni() {
        // SAFETY: AVX-512 F/BW/VL/VNNI and F16C are available (checked above); the rest is the
        // caller's guarantee.
        unsafe {
            dispatch_rows!(
                x.precision,
                height,
                [1, 2, 3, 4, 5, 6],
                avx512::group_dots(w, group, x, row0, bias, out)
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: AVX2, FMA and F16C are available (checked above); the rest is the caller's.
        unsafe {
            dispatch_rows!(
                x.precision,
                height,
                [1, 2, 3, 4],
                avx2::group_dots(w, group, x, row0, bias, out)
            )
        };
        return;
    }
    // SAFETY: the caller's guarantee.
    unsafe { portable_group_dots(w, group, x, row0..row0 + height, bias, out) };
}

/// The integer sum `Σ v` of block `b` of input row `r`, from the offset that carries it.
fn block_sum(x: &QuantizedRows, r: usize, b: usize) -> i32 {
    x.offsets[r * x.blocks + b] / -128
}

/// The portable twin of the vector kernels for input rows `rows`.
///
/// # Safety
/// As for [`project_groups`].
unsafe fn portable_group_dots(
    w: &Q4_1Matrix,
    group: usize,
    x: &QuantizedRows,
    rows: std::ops::Range<usize>,
    bias: Option<&[f32]>,
    out: Output,
) {
    let first = group * Q4_1_GROUP;
    for c in first..(first + Q4_1_GROUP).min(w.rows()) {
        for r in rows.clone() {
            let mut dot = 0.0f32;
            for b in 0..x.blocks {
                let block = w.block(c, b);
                let int: i32 = (0..Q4_1_BLOCK)
                    .map(|k| i32::from(block.q[k]) * x.value(r, b, k))
                    .sum();
                let scale = x.scales[r * x.blocks + b];
                dot += int as f32 * (block.d.to_f32() * scale);
                dot += block.m.to_f32() * (scale * block_sum(x, r, b) as f32);
            }
            let value = dot + bias.map_or(0.0, |bias| bias[c]);
            // SAFETY: (r, c) is inside the output (the caller's guarantee).
            unsafe { *out.values.add(r * out.n + c) = value };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::group_kernel_tests::{
        check_against_reference, impl_group_weights, outputs, Kernel,
    };
    use crate::kernels::test_util::Lcg;

    impl_group_weights!(Q4_1Matrix);

    #[test]
    fn groups_match_a_reference() {
        let mut rng = Lcg::new(11);
        // Odd block counts, a padded last group, and more rows than one call takes.
        for (cols, n, rows) in [(64, 37, 9), (96, 16, 1), (576, 20, 7), (32, 5, 17)] {
            // Weights off zero, so that the minimums matter.
            let weights = rng.vec(n * cols, -0.5, 1.5);
            let w = Q4_1Matrix::quantize(&weights, n, cols).unwrap();
            check_against_reference(&w, rows, &mut rng);
        }
    }

    #[test]
    fn a_row_gets_the_same_bits_beside_any_rows() {
        let mut rng = Lcg::new(5);
        let (cols, n) = (192, 48);
        let w = Q4_1Matrix::quantize(&rng.vec(n * cols, -1.0, 1.0), n, cols).unwrap();
        let x = rng.vec(9 * cols, -2.0, 2.0);
        let bias = vec![0.0; n];
        let all = QuantizedRows::new(&x, 9, cols, InputPrecision::Split);
        let together = outputs(&w, &all, &bias, Kernel::Dispatched);
        for r in 0..9 {
            let alone = QuantizedRows::new(&x[r * cols..][..cols], 1, cols, InputPrecision::Split);
            let alone = outputs(&w, &alone, &bias, Kernel::Dispatched);
            assert_eq!(alone, together[r * n..][..n], "row {r}");
        }
    }
}
