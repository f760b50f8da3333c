//! Products of a few rows with Q8_0 weights ([`Q8_0Matrix`]), for [`super::gemv`]: the input
//! rows are quantized once per call, per block of 32 as the weights are ([`QuantizedRows`]),
//! and each block's product is an integer dot product scaled by both blocks' scales.
//!
//! On AVX-512 with VNNI, `vpdpbusd` multiplies 64 unsigned weight bytes (`q + 128`) with 64
//! signed input bytes per instruction; the `128 · Σ x` that the offset adds is subtracted by
//! starting each block's accumulator at `-128 · Σ x`, computed once per input row.

use crate::quant::{Q8_0Matrix, Q8_0_BLOCK};

/// Input values one 512-bit vector covers: two blocks.
const PAIR: usize = 2 * Q8_0_BLOCK;

/// Lanes per block in a 16-lane vector of per-block values.
const LANES_PER_BLOCK: usize = 8;

/// Input rows quantized to Q8_0 blocks, laid out per pair of blocks for the kernels: per row
/// and pair, 64 signed bytes (zero past the row's end), and 16 lanes each of the blocks'
/// scales and of `-128 · Σ q` spread over their 8 lanes (lanes 0-7 the first block, 8-15 the
/// second).
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    pairs: usize,
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
        let pairs = d_in.div_ceil(PAIR);
        let mut quants = vec![0i8; rows * pairs * PAIR];
        let mut offsets = vec![0i32; rows * pairs * 16];
        let mut scales = vec![0.0f32; rows * pairs * 16];
        let blocks = d_in / Q8_0_BLOCK;
        for (r, row) in x.chunks_exact(d_in.max(1)).enumerate().take(rows) {
            let quants = &mut quants[r * pairs * PAIR..][..blocks * Q8_0_BLOCK];
            let lanes = r * pairs * 16..r * pairs * 16 + blocks * LANES_PER_BLOCK;
            let (offsets, scales) = (&mut offsets[lanes.clone()], &mut scales[lanes]);
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
                let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
                offsets[b * LANES_PER_BLOCK..][..LANES_PER_BLOCK].fill(-16 * sum);
                scales[b * LANES_PER_BLOCK..][..LANES_PER_BLOCK].fill(d);
            }
        }
        Self {
            pairs,
            quants,
            offsets,
            scales,
        }
    }

    fn row_quants(&self, row: usize) -> &[i8] {
        &self.quants[row * self.pairs * PAIR..(row + 1) * self.pairs * PAIR]
    }

    fn block_scale(&self, row: usize, block: usize) -> f32 {
        self.scales[row * self.pairs * 16 + block * LANES_PER_BLOCK]
    }
}

/// `dots[r][c]` = input row `row0 + r` of `x` · weight row `col0 + c` of `w`, for `height`
/// input rows and `width` weight rows (at most 8 and 4).
pub(super) fn dot_tile(
    w: &Q8_0Matrix,
    col0: usize,
    width: usize,
    x: &QuantizedRows,
    row0: usize,
    height: usize,
    dots: &mut super::gemv::Dots,
) {
    assert!(height <= 8 && width <= 4 && col0 + width <= w.rows());
    assert!(
        x.pairs == w.cols().div_ceil(PAIR) && (row0 + height) * x.pairs * PAIR <= x.quants.len()
    );
    #[cfg(target_arch = "x86_64")]
    if has_vnni() {
        // SAFETY: AVX-512 F/BW/VL/VNNI and F16C are available (checked above); the
        // asserts above bound every row the kernel reads.
        dispatch_tile!(width, height, avx512::dot_tile(w, col0, x, row0, dots));
        return;
    }
    let blocks = w.cols() / Q8_0_BLOCK;
    for (r, dots) in dots.iter_mut().enumerate().take(height) {
        let xq = x.row_quants(row0 + r);
        for (c, dot) in dots.iter_mut().enumerate().take(width) {
            let (wq, ws) = (w.row_quants(col0 + c), w.row_scales(col0 + c));
            let mut acc = 0.0f32;
            for (b, w_scale) in ws.iter().enumerate().take(blocks) {
                let range = b * Q8_0_BLOCK..(b + 1) * Q8_0_BLOCK;
                let int: i32 = wq[range.clone()]
                    .iter()
                    .zip(&xq[range])
                    .map(|(&w, &x)| i32::from((w ^ 0x80) as i8) * i32::from(x))
                    .sum();
                acc += int as f32 * (w_scale.to_f32() * x.block_scale(row0 + r, b));
            }
            *dot = acc;
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{QuantizedRows, LANES_PER_BLOCK, PAIR};
    use crate::quant::{Q8_0Matrix, Q8_0_BLOCK};
    use std::arch::x86_64::*;

    /// `row` quantized per block of 32 as [`crate::quant::q8_0_block`] does (the same
    /// integers and scales: rounding half away from zero), into `quants` (32 per block) and
    /// each block's `-16 · Σ q` and scale, 8 lanes each, into `offsets` and `scales`.
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
                && offsets.len() >= blocks * LANES_PER_BLOCK
                && scales.len() >= blocks * LANES_PER_BLOCK
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
            offsets[b * LANES_PER_BLOCK..][..LANES_PER_BLOCK].fill(-16 * sum);
            scales[b * LANES_PER_BLOCK..][..LANES_PER_BLOCK].fill(d);
        }
    }

    /// How far ahead (in weight rows, about 9 KB of a SmolLM2 row) the kernel prefetches,
    /// into L2 (see [`crate::kernels::gemv`]'s kernel for why L2).
    const PREFETCH_ROWS: usize = 16;

    /// Block pairs whose scales one 8-value `f16` load covers.
    const PAIRS_PER_SCALE_LOAD: usize = 4;

    /// `dots[r][c]` for `H` input rows from `row0` and `W` weight rows from `col0`.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL and VNNI and F16C must be available; `col0 + W` weight rows and
    /// `row0 + H` input rows must exist, with as many pairs of blocks as the weights.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
    pub(super) unsafe fn dot_tile<const W: usize, const H: usize>(
        w: &Q8_0Matrix,
        col0: usize,
        x: &QuantizedRows,
        row0: usize,
        dots: &mut crate::kernels::gemv::Dots,
    ) {
        let cols = w.cols();
        let blocks = cols / Q8_0_BLOCK;
        let pairs = x.pairs;
        assert!(col0 + W <= w.rows() && (row0 + H) * pairs * 16 <= x.scales.len());
        let wq: [*const u8; W] = std::array::from_fn(|c| w.row_quants(col0 + c).as_ptr());
        let ws: [*const u16; W] =
            std::array::from_fn(|c| w.row_scales(col0 + c).as_ptr().cast::<u16>());
        let xq = x.quants.as_ptr().wrapping_add(row0 * pairs * PAIR);
        let xo = x.offsets.as_ptr().wrapping_add(row0 * pairs * 16);
        let xs = x.scales.as_ptr().wrapping_add(row0 * pairs * 16);
        let mut acc = [[_mm512_setzero_ps(); W]; H];
        let mut scales = [_mm512_setzero_ps(); W];
        for p in 0..pairs {
            let first_block = 2 * p;
            let j = p % PAIRS_PER_SCALE_LOAD;
            if j == 0 {
                let left = (blocks - first_block).min(2 * PAIRS_PER_SCALE_LOAD);
                let mask: __mmask8 = ((1u16 << left) - 1) as __mmask8;
                for (c, s) in scales.iter_mut().enumerate() {
                    // SAFETY: the mask limits the load to the row's remaining block scales.
                    let half =
                        unsafe { _mm_maskz_loadu_epi16(mask, ws[c].add(first_block).cast()) };
                    *s = _mm512_castps256_ps512(_mm256_cvtph_ps(half));
                }
            }
            let lo = (2 * j) as i32;
            let index = _mm512_set_epi32(
                lo + 1,
                lo + 1,
                lo + 1,
                lo + 1,
                lo + 1,
                lo + 1,
                lo + 1,
                lo + 1,
                lo,
                lo,
                lo,
                lo,
                lo,
                lo,
                lo,
                lo,
            );
            // One block left over: load its 32 bytes only.
            let byte_mask: __mmask64 = if first_block + 1 < blocks {
                u64::MAX
            } else {
                u32::MAX as u64
            };
            let mut wv = [_mm512_setzero_si512(); W];
            let mut wd = [_mm512_setzero_ps(); W];
            for (c, (v, d)) in wv.iter_mut().zip(wd.iter_mut()).enumerate() {
                // SAFETY: the mask limits the load to the row's remaining values.
                *v = unsafe { _mm512_maskz_loadu_epi8(byte_mask, wq[c].add(p * PAIR).cast()) };
                _mm_prefetch::<_MM_HINT_T1>(
                    wq[c].wrapping_add(p * PAIR + PREFETCH_ROWS * cols).cast(),
                );
                *d = _mm512_permutexvar_ps(index, scales[c]);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: input rows hold `pairs` whole pairs (zero-padded).
                let (xv, offset, scale) = unsafe {
                    (
                        _mm512_loadu_si512(xq.add(r * pairs * PAIR + p * PAIR).cast()),
                        _mm512_loadu_si512(xo.add((r * pairs + p) * 16).cast()),
                        _mm512_loadu_ps(xs.add((r * pairs + p) * 16)),
                    )
                };
                for ((a, v), d) in acc.iter_mut().zip(&wv).zip(&wd) {
                    let int = _mm512_dpbusd_epi32(offset, *v, xv);
                    let both = _mm512_mul_ps(scale, *d);
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(int), both, *a);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                dots[r][c] = _mm512_reduce_add_ps(*a);
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
                assert_eq!(&q.row_quants(r)[b * Q8_0_BLOCK..][..Q8_0_BLOCK], &ints);
                assert_eq!(q.block_scale(r, b), d);
                let lanes = r * q.pairs * 16 + b * LANES_PER_BLOCK;
                assert_eq!(q.offsets[lanes..lanes + LANES_PER_BLOCK], [-16 * sum; 8]);
            }
        }
    }

    #[test]
    fn tiles_match_a_reference() {
        let mut rng = Lcg::new(7);
        // Even and odd block counts.
        for cols in [64, 96, 576, 32] {
            let weights = rng.vec(5 * cols, -1.0, 1.0);
            let w = Q8_0Matrix::quantize(&weights, 5, cols).unwrap();
            let x = rng.vec(9 * cols, -2.0, 2.0);
            let q = QuantizedRows::new(&x, 9, cols);
            for (width, height) in [(1, 1), (4, 4), (3, 8), (2, 5), (4, 1)] {
                for (col0, row0) in [(0, 0), (5 - width, 9 - height)] {
                    let mut dots = [[0.0; 4]; 8];
                    dot_tile(&w, col0, width, &q, row0, height, &mut dots);
                    for (r, row) in dots.iter().enumerate().take(height) {
                        for (c, &dot) in row.iter().enumerate().take(width) {
                            let want = reference(&w, col0 + c, &x[(row0 + r) * cols..][..cols]);
                            let got = f64::from(dot);
                            assert!(
                                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "{cols} cols, {width}x{height}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
