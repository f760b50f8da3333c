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

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

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
    pub(in crate::kernels) blocks: usize,
    /// How the values are kept.
    pub(in crate::kernels) precision: InputPrecision,
    /// `[rows, d_in]`: the values ([`InputPrecision::Byte`]) or their high parts.
    pub(in crate::kernels) quants: Vec<i8>,
    /// `[rows, d_in]` low parts ([`InputPrecision::Split`]); empty for bytes.
    pub(in crate::kernels) low: Vec<i8>,
    /// `[rows, d_in]` whole values `v` as `i16` ([`InputPrecision::Split`] on CPUs whose kernel
    /// multiplies 16-bit inputs: AVX2 without VNNI); empty otherwise.
    pub(in crate::kernels) wide: Vec<i16>,
    /// `[rows, blocks]`: `-128 · Σ v` over the block, which cancels the weights' offset.
    pub(in crate::kernels) offsets: Vec<i32>,
    /// `[rows, blocks]`: the blocks' scales.
    pub(in crate::kernels) scales: Vec<f32>,
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
            wide_values(&quants, &low)
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

    /// The rows with their split values also as `i16`, as the AVX2 kernels read them, on any
    /// CPU (tests run those kernels where VNNI would be chosen).
    #[cfg(test)]
    pub(in crate::kernels) fn with_wide_values(mut self) -> Self {
        if self.precision == InputPrecision::Split {
            self.wide = wide_values(&self.quants, &self.low);
        }
        self
    }

    /// Input rows.
    pub(in crate::kernels) fn rows(&self) -> usize {
        self.offsets.len() / self.blocks.max(1)
    }

    /// The integer value `c` of block `b` of row `r` (`v`, whatever the precision).
    pub(in crate::kernels) fn value(&self, r: usize, b: usize, c: usize) -> i32 {
        let at = (r * self.blocks + b) * Q8_0_BLOCK + c;
        match self.precision {
            InputPrecision::Byte => i32::from(self.quants[at]),
            InputPrecision::Split => 128 * i32::from(self.quants[at]) + i32::from(self.low[at]),
        }
    }
}

/// Split values `128 · high + low` as `i16`.
fn wide_values(high: &[i8], low: &[i8]) -> Vec<i16> {
    high.iter()
        .zip(low)
        .map(|(&high, &low)| 128 * i16::from(high) + i16::from(low))
        .collect()
}

/// Where one row's blocks are written.
struct RowOut<'a> {
    quants: &'a mut [i8],
    low: &'a mut [i8],
    offsets: &'a mut [i32],
    scales: &'a mut [f32],
}

impl RowOut<'_> {
    /// Whether there is room for `blocks` blocks at `precision` (low parts only for
    /// [`InputPrecision::Split`]).
    fn holds(&self, blocks: usize, precision: InputPrecision) -> bool {
        let values = blocks * Q8_0_BLOCK;
        self.quants.len() >= values
            && (precision == InputPrecision::Byte || self.low.len() >= values)
            && self.offsets.len() >= blocks
            && self.scales.len() >= blocks
    }
}

/// One row's blocks, on AVX-512 or AVX2 where the CPU has them.
fn quantize_row(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::has_vnni() {
            // SAFETY: AVX-512 F/BW/VL are available (checked above); `out` holds the row's
            // blocks (the caller cut it so).
            unsafe { avx512::quantize_row(row, precision, out) };
            return;
        }
        if crate::kernels::has_avx2() {
            // SAFETY: AVX2 is available (checked above); `out` holds the row's blocks.
            unsafe { avx2::quantize_row(row, precision, out) };
            return;
        }
    }
    quantize_row_scalar(row, precision, out);
}

/// One row's blocks, one value at a time: the reference of the vector paths.
fn quantize_row_scalar(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
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
        // Ties of the split precision: its scale is 1 where the block's largest value is the
        // split limit.
        for (i, v) in x[160..192].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
        x[191] = SPLIT_LIMIT as f32;
        x
    }

    /// One row's blocks quantized by `quantize` into fresh buffers: the values (or high
    /// parts), the low parts, the offsets and the scales.
    fn quantize_with(
        row: &[f32],
        precision: InputPrecision,
        quantize: impl Fn(&[f32], InputPrecision, RowOut<'_>),
    ) -> (Vec<i8>, Vec<i8>, Vec<i32>, Vec<f32>) {
        let blocks = row.len() / Q8_0_BLOCK;
        let (mut quants, mut low) = (vec![0i8; row.len()], vec![0i8; row.len()]);
        let (mut offsets, mut scales) = (vec![0i32; blocks], vec![0.0f32; blocks]);
        let out = RowOut {
            quants: &mut quants,
            low: &mut low,
            offsets: &mut offsets,
            scales: &mut scales,
        };
        quantize(row, precision, out);
        (quants, low, offsets, scales)
    }

    #[test]
    fn vector_paths_quantize_as_the_scalar_path_does() {
        let mut x = awkward_inputs();
        // Blocks of very different magnitudes, where a scale's reciprocal rounds.
        let mut lcg = Lcg::new(5);
        for magnitude in [1e-6f32, 0.37, 3e4] {
            x.extend(lcg.vec(64, -magnitude, magnitude));
        }
        for precision in [InputPrecision::Byte, InputPrecision::Split] {
            let want = quantize_with(&x, precision, quantize_row_scalar);
            #[cfg(target_arch = "x86_64")]
            {
                if crate::kernels::has_avx2() {
                    // SAFETY: AVX2 is available (checked above); the buffers hold every block.
                    let avx2 = |row: &[f32], precision, out: RowOut<'_>| unsafe {
                        avx2::quantize_row(row, precision, out)
                    };
                    assert_eq!(quantize_with(&x, precision, avx2), want, "{precision:?}");
                }
                if super::super::has_vnni() {
                    // SAFETY: AVX-512 F/BW/VL are available (checked above); the buffers hold
                    // every block.
                    let avx512 = |row: &[f32], precision, out: RowOut<'_>| unsafe {
                        avx512::quantize_row(row, precision, out)
                    };
                    assert_eq!(quantize_with(&x, precision, avx512), want, "{precision:?}");
                }
            }
        }
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
