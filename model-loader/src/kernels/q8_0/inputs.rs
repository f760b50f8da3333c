//! Input rows quantized per block of 32 for the Q8_0 kernel, at one of two precisions.
//!
//! The kernel multiplies unsigned weight bytes (`q + 128`) with signed input bytes
//! (`vpdpbusd`). [`InputPrecision::Byte`] keeps one signed byte per input value, as llama.cpp
//! does for Q8_0 weights. [`InputPrecision::Split`] keeps about 15 bits: each value is an
//! integer `v = 128 · high + low` with `|v| ≤ 16,256`, `high` in `[-127, 127]` and `low` in
//! `[-64, 63]`, stored as two byte planes, so the same byte kernel computes
//! `Σ w · v = 128 · Σ w · high + Σ w · low` with twice the integer work and an input error
//! about a hundred times smaller.

use crate::quant::Q8_0_BLOCK;

/// How finely the input values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputPrecision {
    /// One signed byte per value (scale `amax / 127`).
    Byte,
    /// Two signed bytes per value, `v = 128 · high + low` (scale `amax / 16,256`).
    Split,
}

impl InputPrecision {
    /// The largest integer a value becomes.
    fn limit(self) -> f32 {
        match self {
            InputPrecision::Byte => 127.0,
            InputPrecision::Split => SPLIT_LIMIT as f32,
        }
    }
}

/// The largest `|v|` of [`InputPrecision::Split`]: `127 · 128`, so that `high` fits in a
/// signed byte whatever the rounding of `low`.
const SPLIT_LIMIT: i32 = 127 * 128;

/// Input rows quantized per block: per row and block, 32 signed bytes (the values, or their
/// high parts), for [`InputPrecision::Split`] 32 more (the low parts), the block's
/// `-128 · Σ v` and its scale.
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    /// Blocks per row.
    pub(super) blocks: usize,
    /// How the values are kept.
    pub(super) precision: InputPrecision,
    /// `[rows, d_in]`: the values ([`InputPrecision::Byte`]) or their high parts.
    pub(super) quants: Vec<i8>,
    /// `[rows, d_in]` low parts ([`InputPrecision::Split`]); empty for bytes.
    pub(super) low: Vec<i8>,
    /// `[rows, d_in]` whole values `v` as `i16` ([`InputPrecision::Split`] on CPUs whose kernel
    /// multiplies 16-bit inputs: AVX2 without VNNI); empty otherwise.
    pub(super) wide: Vec<i16>,
    /// `[rows, blocks]`: `-128 · Σ v` over the block, which cancels the weights' offset.
    pub(super) offsets: Vec<i32>,
    /// `[rows, blocks]`: the blocks' scales.
    pub(super) scales: Vec<f32>,
}

impl QuantizedRows {
    /// `x` (`[rows, d_in]`, `d_in` a multiple of 32) quantized per block at `precision`.
    ///
    /// # Panics
    /// If `d_in` is not a multiple of [`Q8_0_BLOCK`] or `x` is not `rows * d_in` long.
    pub fn new(x: &[f32], rows: usize, d_in: usize, precision: InputPrecision) -> Self {
        assert!(
            d_in.is_multiple_of(Q8_0_BLOCK) && x.len() == rows * d_in,
            "QuantizedRows: bad shape"
        );
        let blocks = d_in / Q8_0_BLOCK;
        let split = precision == InputPrecision::Split;
        let mut quants = vec![0i8; rows * d_in];
        let mut low = vec![0i8; if split { rows * d_in } else { 0 }];
        let mut offsets = vec![0i32; rows * blocks];
        let mut scales = vec![0.0f32; rows * blocks];
        for (r, row) in x.chunks_exact(d_in.max(1)).enumerate().take(rows) {
            let row_out = RowOut {
                quants: &mut quants[r * d_in..][..d_in],
                low: if split {
                    &mut low[r * d_in..][..d_in]
                } else {
                    &mut []
                },
                offsets: &mut offsets[r * blocks..][..blocks],
                scales: &mut scales[r * blocks..][..blocks],
            };
            quantize_row(row, precision, row_out);
        }
        let wide = if split && super::wants_wide_inputs() {
            quants
                .iter()
                .zip(&low)
                .map(|(&high, &low)| 128 * i16::from(high) + i16::from(low))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            blocks,
            precision,
            quants,
            low,
            wide,
            offsets,
            scales,
        }
    }

    /// Input rows.
    pub(super) fn rows(&self) -> usize {
        self.offsets.len() / self.blocks.max(1)
    }

    /// The integer value `c` of block `b` of row `r` (`v`, whatever the precision).
    pub(super) fn value(&self, r: usize, b: usize, c: usize) -> i32 {
        let at = (r * self.blocks + b) * Q8_0_BLOCK + c;
        match self.precision {
            InputPrecision::Byte => i32::from(self.quants[at]),
            InputPrecision::Split => 128 * i32::from(self.quants[at]) + i32::from(self.low[at]),
        }
    }
}

/// Where one row's blocks are written.
struct RowOut<'a> {
    quants: &'a mut [i8],
    low: &'a mut [i8],
    offsets: &'a mut [i32],
    scales: &'a mut [f32],
}

/// One row's blocks, on AVX-512 where the CPU has it.
fn quantize_row(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
    #[cfg(target_arch = "x86_64")]
    if super::has_vnni() {
        // SAFETY: AVX-512 F/BW/VL are available (checked above); `out` holds the row's
        // blocks (the caller cut it so).
        unsafe { avx512::quantize_row(row, precision, out) };
        return;
    }
    for (b, block) in row.chunks_exact(Q8_0_BLOCK).enumerate() {
        let (d, values) = match precision {
            InputPrecision::Byte => {
                let (d, q) = crate::quant::q8_0_block(block);
                (d, q.map(i32::from))
            }
            InputPrecision::Split => split_block(block),
        };
        for (c, &v) in values.iter().enumerate() {
            let (high, low) = match precision {
                InputPrecision::Byte => (v, 0),
                InputPrecision::Split => split(v),
            };
            out.quants[b * Q8_0_BLOCK + c] = high as i8;
            if precision == InputPrecision::Split {
                out.low[b * Q8_0_BLOCK + c] = low as i8;
            }
        }
        out.offsets[b] = -128 * values.iter().sum::<i32>();
        out.scales[b] = d;
    }
}

/// A block's scale and integers at [`InputPrecision::Split`] (rounding to nearest, ties to
/// even, as the vector conversion does).
fn split_block(block: &[f32]) -> (f32, [i32; Q8_0_BLOCK]) {
    let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / InputPrecision::Split.limit();
    let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
    let values = std::array::from_fn(|c| {
        ((block[c] * inverse).round_ties_even() as i32).clamp(-SPLIT_LIMIT, SPLIT_LIMIT)
    });
    (d, values)
}

/// `v` as `(high, low)` with `v = 128 · high + low` and `low` in `[-64, 63]`.
fn split(v: i32) -> (i32, i32) {
    let high = (v + 64) >> 7;
    (high, v - 128 * high)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{InputPrecision, RowOut, SPLIT_LIMIT};
    use crate::quant::Q8_0_BLOCK;
    use std::arch::x86_64::*;

    /// `row` quantized per block of 32 as the scalar path does (the same integers and scales:
    /// for bytes, rounding half away from zero as [`crate::quant::q8_0_block`]; for split
    /// values, to nearest even), into `out`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL must be available; `row` must hold whole blocks, and `out` room
    /// for all of them (and low parts for [`InputPrecision::Split`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
        let blocks = row.len() / Q8_0_BLOCK;
        let split = precision == InputPrecision::Split;
        assert!(
            out.quants.len() >= blocks * Q8_0_BLOCK
                && (!split || out.low.len() >= blocks * Q8_0_BLOCK)
                && out.offsets.len() >= blocks
                && out.scales.len() >= blocks
        );
        let limit = _mm512_set1_ps(precision.limit());
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
            let d = amax / precision.limit();
            let inverse = _mm512_set1_ps(if d == 0.0 { 0.0 } else { 1.0 / d });
            let mut sum = 0;
            for (h, &v) in halves.iter().enumerate() {
                let scaled = _mm512_mul_ps(v, inverse);
                let at = b * Q8_0_BLOCK + 16 * h;
                let ints = match precision {
                    InputPrecision::Byte => {
                        let ints = round_half_away(scaled, limit);
                        // SAFETY: the 16 bytes at `at` are inside `out.quants`.
                        unsafe { store_bytes(out.quants.as_mut_ptr().add(at), ints) };
                        ints
                    }
                    InputPrecision::Split => {
                        let ints = _mm512_max_epi32(
                            _mm512_min_epi32(
                                _mm512_cvtps_epi32(scaled),
                                _mm512_set1_epi32(SPLIT_LIMIT),
                            ),
                            _mm512_set1_epi32(-SPLIT_LIMIT),
                        );
                        let high =
                            _mm512_srai_epi32::<7>(_mm512_add_epi32(ints, _mm512_set1_epi32(64)));
                        let low = _mm512_sub_epi32(ints, _mm512_slli_epi32::<7>(high));
                        // SAFETY: the 16 bytes at `at` are inside both planes.
                        unsafe {
                            store_bytes(out.quants.as_mut_ptr().add(at), high);
                            store_bytes(out.low.as_mut_ptr().add(at), low);
                        }
                        ints
                    }
                };
                sum += _mm512_reduce_add_epi32(ints);
            }
            out.offsets[b] = -128 * sum;
            out.scales[b] = d;
        }
    }

    /// `scaled` rounded half away from zero (as `f32::round`) and clamped to `±limit`, as
    /// integers.
    #[target_feature(enable = "avx512f")]
    fn round_half_away(scaled: __m512, limit: __m512) -> __m512i {
        // Truncate, then step one away from zero where the dropped fraction is at least a half.
        let truncated = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
        let dropped = _mm512_abs_ps(_mm512_sub_ps(scaled, truncated));
        let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(dropped, _mm512_set1_ps(0.5));
        let step = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_and_si512(_mm512_castps_si512(scaled), _mm512_set1_epi32(i32::MIN)),
            _mm512_castps_si512(_mm512_set1_ps(1.0)),
        ));
        let rounded = _mm512_mask_add_ps(truncated, away, truncated, step);
        let clamped = _mm512_max_ps(
            _mm512_min_ps(rounded, limit),
            _mm512_sub_ps(_mm512_setzero_ps(), limit),
        );
        _mm512_cvttps_epi32(clamped)
    }

    /// The low bytes of 16 integers (each within a signed byte) stored at `at`.
    ///
    /// # Safety
    /// `at` must be valid for 16 bytes of writes.
    #[target_feature(enable = "avx512f")]
    unsafe fn store_bytes(at: *mut i8, ints: __m512i) {
        // SAFETY: the caller's guarantee.
        unsafe { _mm_storeu_si128(at.cast(), _mm512_cvtepi32_epi8(ints)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::Lcg;

    /// Inputs with a zero block, a block of rounding ties at scale 1, and random blocks.
    fn awkward_inputs() -> Vec<f32> {
        let mut x = Lcg::new(11).vec(3 * 96, -3.0, 3.0);
        x[32..64].fill(0.0);
        for (i, v) in x[96..128].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
        x[127] = 127.0;
        x
    }

    #[test]
    fn bytes_quantize_as_the_scalar_blocks_do() {
        let x = awkward_inputs();
        let q = QuantizedRows::new(&x, 3, 96, InputPrecision::Byte);
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
    fn split_values_rebuild_the_inputs_within_half_a_step() {
        let x = awkward_inputs();
        let q = QuantizedRows::new(&x, 3, 96, InputPrecision::Split);
        for (r, row) in x.chunks_exact(96).enumerate() {
            for (b, block) in row.chunks_exact(Q8_0_BLOCK).enumerate() {
                let (d, values) = split_block(block);
                let at = r * q.blocks + b;
                assert_eq!(q.scales[at], d);
                assert_eq!(q.offsets[at], -128 * values.iter().sum::<i32>());
                for (c, &want) in values.iter().enumerate() {
                    let (high, low) = (q.quants[at * Q8_0_BLOCK + c], q.low[at * Q8_0_BLOCK + c]);
                    assert!((-127..=127).contains(&high) && (-64..=63).contains(&low));
                    assert_eq!(q.value(r, b, c), want);
                    let error = (want as f32 * d - block[c]).abs();
                    assert!(error <= 0.5 * d * (1.0 + 1e-5), "{error} for scale {d}");
                }
            }
        }
    }

    #[test]
    fn splits_cover_the_whole_range() {
        for v in -SPLIT_LIMIT..=SPLIT_LIMIT {
            let (high, low) = split(v);
            assert_eq!(128 * high + low, v);
            assert!(
                (-127..=127).contains(&high) && (-64..=63).contains(&low),
                "{v}"
            );
        }
    }
}
