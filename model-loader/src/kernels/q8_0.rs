//! Products of a few input rows with Q8_0 weights ([`Q8_0Matrix`]), for [`super::gemv`]
//! (decoding, verification): the input rows are quantized once per call, per block of 32 as
//! the weights are ([`QuantizedRows`]), as llama.cpp does, and each block's product is an
//! integer dot product scaled by both blocks' scales. Prefill keeps `f32` inputs (widened
//! weights through [`super::gemm`]): 8-bit inputs move the logits enough to change the
//! greedy token at a few teacher-forced positions in a hundred, more than the Q8_0 quality
//! bar allows.
//!
//! On AVX-512 with VNNI the kernel works on one group of 16 weight rows at a time (the
//! matrix's interleaved layout): per block, eight 64-byte loads each hold four bytes of all 16
//! rows, and `vpdpbusd` multiplies each with four input bytes broadcast to every lane, so one
//! vector collects the block's 16 dot products. The weights are stored as unsigned `q + 128`;
//! the `128 · Σ x` that the offset adds is cancelled by starting each block's accumulator at
//! `-128 · Σ x`, computed once per input row and block. The block's integer sums are then
//! scaled by the 16 rows' scales times the input block's scale, with no horizontal sum: the
//! 16 lanes are 16 outputs.

use crate::quant::{Q8_0Matrix, Q8_0_BLOCK, Q8_0_GROUP};

/// Input rows one kernel call multiplies at most: with more, the compiler spills the per-row
/// accumulators and broadcast inputs out of the 32 vector registers.
const MAX_ROWS_PER_CALL: usize = 4;

/// Input rows quantized to Q8_0 blocks: per row and block, 32 signed bytes, `-128 · Σ q` and
/// the block's scale.
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    blocks: usize,
    quants: Vec<i8>,
    offsets: Vec<i32>,
    scales: Vec<f32>,
}

impl QuantizedRows {
    /// `x` (`[rows, d_in]`, `d_in` a multiple of 32) quantized per block.
    ///
    /// # Panics
    /// If `d_in` is not a multiple of [`Q8_0_BLOCK`] or `x` is not `rows * d_in` long.
    pub fn new(x: &[f32], rows: usize, d_in: usize) -> Self {
        assert!(
            d_in.is_multiple_of(Q8_0_BLOCK) && x.len() == rows * d_in,
            "QuantizedRows: bad shape"
        );
        let blocks = d_in / Q8_0_BLOCK;
        let mut quants = vec![0i8; rows * d_in];
        let mut offsets = vec![0i32; rows * blocks];
        let mut scales = vec![0.0f32; rows * blocks];
        for (r, row) in x.chunks_exact(d_in.max(1)).enumerate().take(rows) {
            let quants = &mut quants[r * d_in..][..d_in];
            let offsets = &mut offsets[r * blocks..][..blocks];
            let scales = &mut scales[r * blocks..][..blocks];
            #[cfg(target_arch = "x86_64")]
            if has_vnni() {
                // SAFETY: AVX-512 F/BW/VL are available (checked above); the slices hold the
                // row's blocks.
                unsafe { avx512::quantize_row(row, quants, offsets, scales) };
                continue;
            }
            for (b, block) in row.chunks_exact(Q8_0_BLOCK).enumerate() {
                let (d, q) = crate::quant::q8_0_block(block);
                quants[b * Q8_0_BLOCK..][..Q8_0_BLOCK].copy_from_slice(&q);
                offsets[b] = -128 * q.iter().map(|&v| i32::from(v)).sum::<i32>();
                scales[b] = d;
            }
        }
        Self {
            blocks,
            quants,
            offsets,
            scales,
        }
    }

    /// Input rows.
    fn rows(&self) -> usize {
        self.offsets.len() / self.blocks.max(1)
    }
}

/// Where [`project_groups`] writes: `[rows, n]` row-major, `n` the weight's rows.
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
                    dispatch_height!(height, avx512::group_dots(w, group, x, row0, bias, out))
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
                let xq = &x.quants[(r * x.blocks + b) * Q8_0_BLOCK..][..Q8_0_BLOCK];
                let int: i32 = ints
                    .iter()
                    .zip(xq)
                    .map(|(&w, &x)| i32::from(w) * i32::from(x))
                    .sum();
                dot += int as f32 * (d.to_f32() * x.scales[r * x.blocks + b]);
            }
            let value = dot + bias.map_or(0.0, |bias| bias[c]);
            // SAFETY: (r, c) is inside the output (the caller's guarantee).
            unsafe { *out.values.add(r * out.n + c) = value };
        }
    }
}

/// Whether the CPU has what the VNNI kernel uses (checked once).
#[cfg(target_arch = "x86_64")]
pub(super) fn has_vnni() -> bool {
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

/// Calls the `unsafe` kernel `$kernel::<H>($args)` for the runtime `$height` (1 to
/// [`MAX_ROWS_PER_CALL`]).
macro_rules! dispatch_height {
    ($height:expr, $($kernel:ident)::+ ($($arg:expr),*)) => {
        match $height {
            1 => $($kernel)::+::<1>($($arg),*),
            2 => $($kernel)::+::<2>($($arg),*),
            3 => $($kernel)::+::<3>($($arg),*),
            4 => $($kernel)::+::<4>($($arg),*),
            _ => unreachable!("at most MAX_ROWS_PER_CALL input rows per call"),
        }
    };
}
use dispatch_height;

#[cfg(target_arch = "x86_64")]
mod avx512 {
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

    /// `row` quantized per block of 32 as [`crate::quant::q8_0_block`] does (the same
    /// integers and scales: rounding half away from zero), into `quants` (32 per block) and
    /// each block's `-128 · Σ q` and scale into `offsets` and `scales`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL must be available; `row` must hold whole blocks, and the outputs
    /// room for all of them.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row(
        row: &[f32],
        quants: &mut [i8],
        offsets: &mut [i32],
        scales: &mut [f32],
    ) {
        let blocks = row.len() / Q8_0_BLOCK;
        assert!(
            quants.len() >= blocks * Q8_0_BLOCK
                && offsets.len() >= blocks
                && scales.len() >= blocks
        );
        let sign_bit = _mm512_set1_epi32(i32::MIN);
        let (half, one, limit) = (
            _mm512_set1_ps(0.5),
            _mm512_set1_ps(1.0),
            _mm512_set1_ps(127.0),
        );
        for b in 0..blocks {
            // SAFETY: block b's 32 values are inside `row`.
            let halves = unsafe {
                let at = row.as_ptr().add(b * Q8_0_BLOCK);
                [_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(16))]
            };
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(
                _mm512_abs_ps(halves[0]),
                _mm512_abs_ps(halves[1]),
            ));
            let d = amax / 127.0;
            let inverse = _mm512_set1_ps(if d == 0.0 { 0.0 } else { 1.0 / d });
            let mut sum = 0;
            for (h, &v) in halves.iter().enumerate() {
                let scaled = _mm512_mul_ps(v, inverse);
                // Half away from zero, as `f32::round`: truncate, then step one away from
                // zero where the dropped fraction is at least a half.
                let truncated =
                    _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
                let dropped = _mm512_abs_ps(_mm512_sub_ps(scaled, truncated));
                let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(dropped, half);
                let step = _mm512_castsi512_ps(_mm512_or_si512(
                    _mm512_and_si512(_mm512_castps_si512(scaled), sign_bit),
                    _mm512_castps_si512(one),
                ));
                let rounded = _mm512_mask_add_ps(truncated, away, truncated, step);
                let clamped = _mm512_max_ps(
                    _mm512_min_ps(rounded, limit),
                    _mm512_sub_ps(_mm512_setzero_ps(), limit),
                );
                let ints = _mm512_cvttps_epi32(clamped);
                sum += _mm512_reduce_add_epi32(ints);
                // SAFETY: the 16 bytes of this half of block b are inside `quants`.
                unsafe {
                    _mm_storeu_si128(
                        quants.as_mut_ptr().add(b * Q8_0_BLOCK + 16 * h).cast(),
                        _mm512_cvtepi32_epi8(ints),
                    );
                }
            }
            offsets[b] = -128 * sum;
            scales[b] = d;
        }
    }

    /// The 16 outputs of weight group `group` for `H` input rows from `row0`, plus the bias,
    /// written to `out`.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL and VNNI and F16C must be available; the group and rows must exist
    /// and the output be writable as [`super::project_groups`] requires.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
    pub(super) unsafe fn group_dots<const H: usize>(
        w: &Q8_0Matrix,
        group: usize,
        x: &QuantizedRows,
        row0: usize,
        bias: Option<&[f32]>,
        out: Output,
    ) {
        let blocks = x.blocks;
        let (quants, scales) = w.group(group);
        assert!(
            quants.len() == blocks * GROUP_BLOCK_BYTES && (row0 + H) * blocks <= x.offsets.len()
        );
        let (wq, ws) = (quants.as_ptr(), scales.as_ptr());
        let xq = x.quants.as_ptr().wrapping_add(row0 * blocks * Q8_0_BLOCK);
        let mut acc = [_mm512_setzero_ps(); H];
        for b in 0..blocks {
            let block = wq.wrapping_add(b * GROUP_BLOCK_BYTES);
            // SAFETY: the group holds 16 scales per block.
            let w_scales =
                _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(ws.add(b * Q8_0_GROUP).cast()) });
            // Up to three rows, two accumulators per row halve the chain of dependent
            // `vpdpbusd`s; from four rows on, the rows' chains overlap enough, and the
            // registers are needed.
            let split = H < 4;
            let mut even: [__m512i; H] =
                std::array::from_fn(|h| _mm512_set1_epi32(x.offsets[(row0 + h) * blocks + b]));
            let mut odd = [_mm512_setzero_si512(); H];
            for j in 0..LOADS_PER_BLOCK {
                // SAFETY: load j of block b lies inside the group's values.
                let wv = unsafe { _mm512_loadu_si512(block.add(j * 64).cast()) };
                _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(j * 64 + PREFETCH_BYTES).cast());
                for h in 0..H {
                    // SAFETY: bytes 4j..4j + 4 of block b of input row row0 + h.
                    let four = unsafe {
                        xq.add((h * blocks + b) * Q8_0_BLOCK + 4 * j)
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    let xv = _mm512_set1_epi32(four);
                    if split && j % 2 == 1 {
                        odd[h] = _mm512_dpbusd_epi32(odd[h], wv, xv);
                    } else {
                        even[h] = _mm512_dpbusd_epi32(even[h], wv, xv);
                    }
                }
            }
            for h in 0..H {
                let ints = if split {
                    _mm512_add_epi32(even[h], odd[h])
                } else {
                    even[h]
                };
                let both =
                    _mm512_mul_ps(w_scales, _mm512_set1_ps(x.scales[(row0 + h) * blocks + b]));
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), both, acc[h]);
            }
        }
        let first = group * Q8_0_GROUP;
        let mask = crate::kernels::tail_mask(out.n - first);
        let bias = match bias {
            // SAFETY: the mask limits the load to the group's columns.
            Some(bias) => unsafe { _mm512_maskz_loadu_ps(mask, bias.as_ptr().add(first)) },
            None => _mm512_setzero_ps(),
        };
        for (h, acc) in acc.iter().enumerate() {
            // SAFETY: row row0 + h, columns first.. (masked to the weight's rows) are this
            // call's to write.
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
    use crate::kernels::test_util::Lcg;

    /// Σ over blocks of d_w · d_x · Σ q_w q_x in f64.
    fn reference(w: &Q8_0Matrix, c: usize, x: &[f32]) -> f64 {
        let mut row = vec![0.0; w.cols()];
        w.dequantize_row(c, &mut row);
        x.chunks_exact(Q8_0_BLOCK)
            .zip(row.chunks_exact(Q8_0_BLOCK))
            .map(|(xb, wb)| {
                let (d, q) = crate::quant::q8_0_block(xb);
                wb.iter()
                    .zip(q)
                    .map(|(&w, q)| f64::from(w) * f64::from(q) * f64::from(d))
                    .sum::<f64>()
            })
            .sum()
    }

    #[test]
    fn inputs_quantize_as_the_scalar_blocks_do() {
        let mut rng = Lcg::new(11);
        let mut x = rng.vec(3 * 96, -3.0, 3.0);
        // A zero block, and a block whose scale is 1 with values on rounding ties.
        x[32..64].fill(0.0);
        for (i, v) in x[96..128].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
        x[127] = 127.0;
        let q = QuantizedRows::new(&x, 3, 96);
        for (r, row) in x.chunks_exact(96).enumerate() {
            for (b, block) in row.chunks_exact(Q8_0_BLOCK).enumerate() {
                let (d, ints) = crate::quant::q8_0_block(block);
                let sum: i32 = ints.iter().map(|&v| i32::from(v)).sum();
                let at = r * q.blocks + b;
                assert_eq!(q.quants[at * Q8_0_BLOCK..][..Q8_0_BLOCK], ints);
                assert_eq!((q.scales[at], q.offsets[at]), (d, -128 * sum));
            }
        }
    }

    #[test]
    fn groups_match_a_reference() {
        let mut rng = Lcg::new(7);
        // Odd block counts, a padded last group, and more rows than one call takes.
        for (cols, n, rows) in [(64, 37, 9), (96, 16, 1), (576, 20, 4), (32, 5, 17)] {
            let weights = rng.vec(n * cols, -1.0, 1.0);
            let w = Q8_0Matrix::quantize(&weights, n, cols).unwrap();
            let x = rng.vec(rows * cols, -2.0, 2.0);
            let bias = rng.vec(n, -1.0, 1.0);
            let q = QuantizedRows::new(&x, rows, cols);
            let mut out = vec![f32::NAN; rows * n];
            let output = Output {
                values: out.as_mut_ptr(),
                n,
            };
            // SAFETY: `out` is [rows, n] and only this call writes it.
            unsafe { project_groups(&w, 0..w.groups(), &q, Some(&bias), output) };
            for r in 0..rows {
                for c in 0..n {
                    let want = reference(&w, c, &x[r * cols..][..cols]) + f64::from(bias[c]);
                    let got = f64::from(out[r * n + c]);
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{cols} cols, row {r}, column {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
