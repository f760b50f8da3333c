//! Products of input rows with Q8_0 weights ([`Q8_0Matrix`]) for [`super::gemv`] and
//! [`super::gemm`]: the input rows are quantized once per call, per block of 32 as the weights
//! are ([`QuantizedRows`]), and each block's product is an integer dot product scaled by both
//! blocks' scales. Every product keeps the inputs at about 15 bits ([`InputPrecision::Split`]),
//! decoding and verification as well as prefill: 8-bit inputs ([`InputPrecision::Byte`], as
//! llama.cpp quantizes them) move the logits enough to change the greedy token at a few
//! teacher-forced positions in a hundred, more than the Q8_0 quality bar allows, and one
//! precision for every row count gives a row the same bits whether it is decoded alone,
//! verified beside other requests or prefilled, which greedy speculative decoding needs to give
//! the plain engine's tokens. Bytes stay available to compare against
//! ([`super::gemv::project_rows_at`]).
//!
//! On AVX-512 with VNNI the kernel works on one group of 16 weight rows at a time (the
//! matrix's interleaved layout): per block, eight 64-byte loads each hold four bytes of all 16
//! rows, and `vpdpbusd` multiplies each with four input bytes broadcast to every lane, so one
//! vector collects the block's 16 dot products (split inputs take one `vpdpbusd` per byte
//! plane). The weights are stored as unsigned `q + 128`; the `128 · Σ x` that the offset adds
//! is cancelled by starting each block's accumulator at `-128 · Σ x`, computed once per input
//! row and block. The block's integer sums are then scaled by the 16 rows' scales times the
//! input block's scale, with no horizontal sum: the 16 lanes are 16 outputs.

#[cfg(target_arch = "x86_64")]
pub(in crate::kernels) mod avx2;
mod inputs;

use crate::quant::{Q8_0Matrix, Q8_0_BLOCK, Q8_0_GROUP};
pub use inputs::{InputPrecision, QuantizedRows};

/// Input rows one kernel call multiplies at most: each 64-byte load of weights serves this many
/// rows, and with split inputs the three vectors per row (two integer sums and the output)
/// still leave registers for the weights and scales.
const MAX_ROWS_PER_CALL: usize = 6;

/// Where [`project_groups`] (and the Q4_1 kernel's) writes: `[rows, n]` row-major, `n` the
/// weight's rows.
#[derive(Clone, Copy)]
pub(super) struct Output {
    /// The first value.
    pub values: *mut f32,
    /// Values per row (the weight's rows).
    pub n: usize,
}

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
    w: &Q8_0Matrix,
    groups: std::ops::Range<usize>,
    x: &QuantizedRows,
    bias: Option<&[f32]>,
    out: Output,
) {
    assert!(x.blocks * Q8_0_BLOCK == w.cols() && groups.end <= w.groups() && out.n == w.rows());
    assert!(bias.is_none_or(|b| b.len() == w.rows()));
    let rows = x.rows();
    for group in groups {
        let mut row0 = 0;
        while row0 < rows {
            let height = (rows - row0).min(MAX_ROWS_PER_CALL);
            #[cfg(target_arch = "x86_64")]
            if has_vnni() {
                // SAFETY: AVX-512 F/BW/VL/VNNI and F16C are available (checked above); the
                // asserts above bound the group and rows, and the caller the output.
                unsafe {
                    dispatch_rows!(
                        x.precision,
                        height,
                        [1, 2, 3, 4, 5, 6],
                        avx512::group_dots(w, group, x, row0, bias, out)
                    )
                };
                row0 += height;
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if crate::kernels::has_avx2() {
                const {
                    assert!(
                        avx2::MAX_ROWS == 4,
                        "the dispatch below lists heights 1 to 4"
                    )
                };
                let height = height.min(avx2::MAX_ROWS);
                // SAFETY: AVX2, FMA and F16C are available (checked above); the asserts above
                // bound the group and rows, and the caller the output; split inputs carry their
                // 16-bit values where this kernel runs.
                unsafe {
                    dispatch_rows!(
                        x.precision,
                        height,
                        [1, 2, 3, 4],
                        avx2::group_dots(w, group, x, row0, bias, out)
                    )
                };
                row0 += height;
                continue;
            }
            // SAFETY: as above.
            unsafe { portable_group_dots(w, group, x, row0..row0 + height, bias, out) };
            row0 += height;
        }
    }
}

/// The portable twin of the AVX-512 kernel for input rows `rows`.
///
/// # Safety
/// As for [`project_groups`].
unsafe fn portable_group_dots(
    w: &Q8_0Matrix,
    group: usize,
    x: &QuantizedRows,
    rows: std::ops::Range<usize>,
    bias: Option<&[f32]>,
    out: Output,
) {
    let first = group * Q8_0_GROUP;
    for c in first..(first + Q8_0_GROUP).min(w.rows()) {
        for r in rows.clone() {
            let mut dot = 0.0f32;
            for b in 0..x.blocks {
                let (d, ints) = w.block(c, b);
                let int: i32 = ints
                    .iter()
                    .enumerate()
                    .map(|(k, &w)| i32::from(w) * x.value(r, b, k))
                    .sum();
                dot += int as f32 * (d.to_f32() * x.scales[r * x.blocks + b]);
            }
            let value = dot + bias.map_or(0.0, |bias| bias[c]);
            // SAFETY: (r, c) is inside the output (the caller's guarantee).
            unsafe { *out.values.add(r * out.n + c) = value };
        }
    }
}

/// Whether products with Q8_0 weights run on an integer kernel (AVX-512 VNNI, or AVX2) rather
/// than its portable twin.
pub(in crate::kernels) fn has_integer_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    return has_vnni() || crate::kernels::has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Whether split inputs are multiplied as 16-bit values (the AVX2 kernel, where VNNI is
/// missing) rather than as two byte planes.
pub(in crate::kernels) fn wants_wide_inputs() -> bool {
    #[cfg(target_arch = "x86_64")]
    return !has_vnni() && crate::kernels::has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Whether the CPU has what the VNNI kernel uses (checked once).
#[cfg(target_arch = "x86_64")]
pub(in crate::kernels) fn has_vnni() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        super::has_avx512()
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c")
    })
}

/// Calls the `unsafe` kernel `$module::$kernel::<H, SPLIT>$args` for the runtime `$height`,
/// one of the row counts `$heights` the kernel is built for, with `SPLIT` following the inputs'
/// `$precision` ([`InputPrecision::Split`]): one dispatch for every CPU's kernel.
macro_rules! dispatch_rows {
    ($precision:expr, $height:expr, [$($h:literal),+], $module:ident::$kernel:ident $args:tt) => {
        match $precision {
            InputPrecision::Byte => {
                dispatch_rows!(@rows $height, [$($h),+], $module::$kernel::<false> $args)
            }
            InputPrecision::Split => {
                dispatch_rows!(@rows $height, [$($h),+], $module::$kernel::<true> $args)
            }
        }
    };
    (@rows $height:expr, [$($h:literal),+], $module:ident::$kernel:ident::<$split:literal> $args:tt) => {
        match $height {
            $($h => $module::$kernel::<$h, $split> $args,)+
            _ => unreachable!("a kernel is called only with a row count it is built for"),
        }
    };
}
pub(in crate::kernels) use dispatch_rows;

#[cfg(target_arch = "x86_64")]
pub(in crate::kernels) mod avx512 {
    use super::{Output, QuantizedRows};
    use crate::quant::{Q8_0Matrix, Q8_0_BLOCK, Q8_0_GROUP};
    use std::arch::x86_64::*;

    /// How far ahead (in bytes of the group's values, about two groups of a SmolLM2
    /// projection) the kernel prefetches, into L2 (see [`crate::kernels::gemv`]'s kernel for
    /// why L2).
    const PREFETCH_BYTES: usize = 16 * 1024;

    /// Bytes of one group's block.
    const GROUP_BLOCK_BYTES: usize = Q8_0_GROUP * Q8_0_BLOCK;

    /// 64-byte loads per group block (each four bytes of the 16 rows).
    const LOADS_PER_BLOCK: usize = GROUP_BLOCK_BYTES / 64;

    /// The 16 outputs of weight group `group` for `H` input rows from `row0`, plus the bias,
    /// written to `out`; `SPLIT` says that the inputs are [`super::InputPrecision::Split`].
    ///
    /// # Safety
    /// AVX-512 F, BW, VL and VNNI and F16C must be available; the group and rows must exist
    /// and the output be writable as [`super::project_groups`] requires.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
    pub(super) unsafe fn group_dots<const H: usize, const SPLIT: bool>(
        w: &Q8_0Matrix,
        group: usize,
        x: &QuantizedRows,
        row0: usize,
        bias: Option<&[f32]>,
        out: Output,
    ) {
        let blocks = x.blocks;
        let (quants, scales) = w.group(group);
        let input_values = x.rows() * blocks * Q8_0_BLOCK;
        assert!(
            quants.len() == blocks * GROUP_BLOCK_BYTES
                && row0 + H <= x.rows()
                && x.quants.len() == input_values
                && (!SPLIT || x.low.len() == input_values)
        );
        let (wq, ws) = (quants.as_ptr(), scales.as_ptr());
        let at_row = row0 * blocks * Q8_0_BLOCK;
        let high = x.quants.as_ptr().wrapping_add(at_row);
        let low = x.low.as_ptr().wrapping_add(at_row);
        // Byte inputs up to three rows: two accumulators per row halve the chain of dependent
        // `vpdpbusd`s; from four rows on, the rows' chains overlap enough, and the registers
        // are needed. Split inputs: one accumulator per byte plane.
        let two_chains = SPLIT || H < 4;
        let mut acc = [_mm512_setzero_ps(); H];
        for b in 0..blocks {
            let block = wq.wrapping_add(b * GROUP_BLOCK_BYTES);
            // SAFETY: the group holds 16 scales per block.
            let w_scales =
                _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(ws.add(b * Q8_0_GROUP).cast()) });
            // `first` takes the offset and the (high) bytes; `second` the low bytes of split
            // inputs, or every other load of bytes.
            let mut first: [__m512i; H] =
                std::array::from_fn(|h| _mm512_set1_epi32(x.offsets[(row0 + h) * blocks + b]));
            let mut second = [_mm512_setzero_si512(); H];
            for j in 0..LOADS_PER_BLOCK {
                // SAFETY: load j of block b lies inside the group's values.
                let wv = unsafe { _mm512_loadu_si512(block.add(j * 64).cast()) };
                _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(j * 64 + PREFETCH_BYTES).cast());
                for h in 0..H {
                    let at = (h * blocks + b) * Q8_0_BLOCK + 4 * j;
                    // SAFETY: bytes 4j..4j + 4 of block b of input row row0 + h, in each plane
                    // the inputs have.
                    let four = |plane: *const i8| unsafe {
                        _mm512_set1_epi32(plane.add(at).cast::<i32>().read_unaligned())
                    };
                    if SPLIT {
                        first[h] = _mm512_dpbusd_epi32(first[h], wv, four(low));
                        second[h] = _mm512_dpbusd_epi32(second[h], wv, four(high));
                    } else if two_chains && j % 2 == 1 {
                        second[h] = _mm512_dpbusd_epi32(second[h], wv, four(high));
                    } else {
                        first[h] = _mm512_dpbusd_epi32(first[h], wv, four(high));
                    }
                }
            }
            for h in 0..H {
                let ints = match (SPLIT, two_chains) {
                    (true, _) => _mm512_add_epi32(first[h], _mm512_slli_epi32::<7>(second[h])),
                    (false, true) => _mm512_add_epi32(first[h], second[h]),
                    (false, false) => first[h],
                };
                let both =
                    _mm512_mul_ps(w_scales, _mm512_set1_ps(x.scales[(row0 + h) * blocks + b]));
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), both, acc[h]);
            }
        }
        // SAFETY: the caller's guarantee for the output.
        unsafe { store_group(&acc, group, row0, bias, out) };
    }

    /// Writes the accumulators `acc` (per input row, the 16 weight rows of group `group`) plus
    /// the bias to rows `row0..row0 + H` of `out`, cut at the weight's rows.
    ///
    /// # Safety
    /// AVX-512 F must be available; rows `row0..row0 + H` and the group's columns of `out`
    /// must be the caller's to write.
    #[target_feature(enable = "avx512f")]
    pub(in crate::kernels) unsafe fn store_group<const H: usize>(
        acc: &[__m512; H],
        group: usize,
        row0: usize,
        bias: Option<&[f32]>,
        out: Output,
    ) {
        let first = group * Q8_0_GROUP;
        let mask = crate::kernels::tail_mask(out.n - first);
        let bias = match bias {
            // SAFETY: the mask limits the load to the group's columns.
            Some(bias) => unsafe { _mm512_maskz_loadu_ps(mask, bias.as_ptr().add(first)) },
            None => _mm512_setzero_ps(),
        };
        for (h, acc) in acc.iter().enumerate() {
            // SAFETY: row row0 + h, columns first.. (masked to the weight's rows) are the
            // caller's to write.
            unsafe {
                _mm512_mask_storeu_ps(
                    out.values.add((row0 + h) * out.n + first),
                    mask,
                    _mm512_add_ps(*acc, bias),
                );
            }
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

    impl_group_weights!(Q8_0Matrix);

    #[test]
    fn groups_match_a_reference() {
        let mut rng = Lcg::new(7);
        // Odd block counts, a padded last group, and more rows than one call takes.
        for (cols, n, rows) in [(64, 37, 9), (96, 16, 1), (576, 20, 4), (32, 5, 17)] {
            let weights = rng.vec(n * cols, -1.0, 1.0);
            let w = Q8_0Matrix::quantize(&weights, n, cols).unwrap();
            check_against_reference(&w, rows, &mut rng);
        }
    }

    #[test]
    fn split_inputs_nearly_match_f32_inputs() {
        let mut rng = Lcg::new(3);
        let (cols, n, rows) = (576, 48, 6);
        let w = Q8_0Matrix::quantize(&rng.vec(n * cols, -1.0, 1.0), n, cols).unwrap();
        let x = rng.vec(rows * cols, -2.0, 2.0);
        let bias = vec![0.0; n];
        let error = |precision| {
            let out = outputs(
                &w,
                &QuantizedRows::new(&x, rows, cols, precision),
                &bias,
                Kernel::Dispatched,
            );
            let mut widened = vec![0.0; cols];
            let mut worst = 0.0f64;
            for c in 0..n {
                w.dequantize_row(c, &mut widened);
                for r in 0..rows {
                    let exact: f64 = x[r * cols..][..cols]
                        .iter()
                        .zip(&widened)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    worst = worst.max((f64::from(out[r * n + c]) - exact).abs());
                }
            }
            worst
        };
        let (bytes, split) = (error(InputPrecision::Byte), error(InputPrecision::Split));
        assert!(
            split < 2e-3 && split * 50.0 < bytes,
            "split {split}, bytes {bytes}"
        );
    }
}
