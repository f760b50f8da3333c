//! [`Q8_0Matrix`]: a row-major matrix in ggml's Q8_0 format, stored for the kernels: each row's
//! 8-bit values contiguous (offset by 128, so that they are unsigned bytes, the operand VNNI's
//! `vpdpbusd` multiplies as unsigned), and each row's block scales contiguous.

use half::f16;

/// Values per Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;

/// A `[rows, cols]` matrix in Q8_0 blocks (see the module docs); `cols` is a multiple of
/// [`Q8_0_BLOCK`].
#[derive(Clone, Debug, PartialEq)]
pub struct Q8_0Matrix {
    rows: usize,
    cols: usize,
    /// `[rows, cols]`: each value's `q + 128`.
    quants: Vec<u8>,
    /// `[rows, cols / 32]`: each block's scale.
    scales: Vec<f16>,
}

impl Q8_0Matrix {
    /// The matrix of these buffers, its values backed by huge pages where the OS allows.
    fn new(rows: usize, cols: usize, quants: Vec<u8>, scales: Vec<f16>) -> Self {
        crate::huge_pages::back_with_huge_pages(&quants);
        Self {
            rows,
            cols,
            quants,
            scales,
        }
    }

    /// Quantizes row-major `values` as ggml does: per block, `d = max|v| / 127` (stored as
    /// `f16`) and `q = round(v / d)`. `None` when `cols` is not a multiple of
    /// [`Q8_0_BLOCK`].
    ///
    /// # Panics
    /// If `values` does not hold `rows * cols` values.
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Option<Self> {
        assert_eq!(
            values.len(),
            rows * cols,
            "quantize: values are not [rows, cols]"
        );
        if !cols.is_multiple_of(Q8_0_BLOCK) {
            return None;
        }
        let blocks = values.len() / Q8_0_BLOCK;
        let mut quants = vec![0u8; values.len()];
        let mut scales = vec![f16::ZERO; blocks];
        for ((block, q), scale) in values
            .chunks_exact(Q8_0_BLOCK)
            .zip(quants.chunks_exact_mut(Q8_0_BLOCK))
            .zip(&mut scales)
        {
            let (d, ints) = quantize_block(block);
            *scale = f16::from_f32(d);
            for (q, i) in q.iter_mut().zip(ints) {
                *q = (i as u8) ^ 0x80;
            }
        }
        Some(Self::new(rows, cols, quants, scales))
    }

    /// A matrix from ggml Q8_0 blocks as a GGUF file stores them (per block: `f16` scale,
    /// then 32 `i8`), `[rows, cols]` row-major. `None` when `cols` is not a multiple of
    /// [`Q8_0_BLOCK`] or `blocks` has the wrong length.
    pub fn from_ggml_blocks(blocks: &[u8], rows: usize, cols: usize) -> Option<Self> {
        const BLOCK_BYTES: usize = 2 + Q8_0_BLOCK;
        if !cols.is_multiple_of(Q8_0_BLOCK)
            || blocks.len() != rows * cols / Q8_0_BLOCK * BLOCK_BYTES
        {
            return None;
        }
        let mut quants = Vec::with_capacity(rows * cols);
        let mut scales = Vec::with_capacity(rows * cols / Q8_0_BLOCK);
        for block in blocks.chunks_exact(BLOCK_BYTES) {
            scales.push(f16::from_le_bytes([block[0], block[1]]));
            quants.extend(block[2..].iter().map(|&q| q ^ 0x80));
        }
        Some(Self::new(rows, cols, quants, scales))
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (a multiple of [`Q8_0_BLOCK`]).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of values and scales.
    pub fn bytes(&self) -> usize {
        self.quants.len() + 2 * self.scales.len()
    }

    /// Row `row`'s values, each `q + 128`.
    pub fn row_quants(&self, row: usize) -> &[u8] {
        &self.quants[row * self.cols..(row + 1) * self.cols]
    }

    /// Row `row`'s block scales.
    pub fn row_scales(&self, row: usize) -> &[f16] {
        let blocks = self.cols / Q8_0_BLOCK;
        &self.scales[row * blocks..(row + 1) * blocks]
    }

    /// Row `row` as `f32` in `out`.
    ///
    /// # Panics
    /// If `row >= rows` or `out` is not `cols` long.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        assert!(
            row < self.rows && out.len() == self.cols,
            "dequantize_row: bad row or length"
        );
        for ((out, q), d) in out
            .chunks_exact_mut(Q8_0_BLOCK)
            .zip(self.row_quants(row).chunks_exact(Q8_0_BLOCK))
            .zip(self.row_scales(row))
        {
            let d = d.to_f32();
            for (o, &q) in out.iter_mut().zip(q) {
                *o = d * f32::from((q ^ 0x80) as i8);
            }
        }
    }
}

/// One block's scale and integers: `d = max|v| / 127`, `q = round(v / d)` (0 for an all-zero
/// block). Weights store `d` as `f16`; quantized inputs keep it as `f32`.
pub(crate) fn quantize_block(block: &[f32]) -> (f32, [i8; Q8_0_BLOCK]) {
    let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut q = [0i8; Q8_0_BLOCK];
    for (q, &v) in q.iter_mut().zip(block) {
        *q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
    }
    (d, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_like_ggml() {
        let mut values = vec![0.0f32; 64];
        values[0] = 1.27;
        values[1] = -0.5;
        values[2] = 0.005;
        values[40] = -2.54;
        let m = Q8_0Matrix::quantize(&values, 1, 64).unwrap();
        let d0 = f16::from_f32(1.27 / 127.0);
        let d1 = f16::from_f32(2.54 / 127.0);
        assert_eq!(m.row_scales(0), [d0, d1]);
        let q = |i: usize| (m.row_quants(0)[i] ^ 0x80) as i8;
        assert_eq!((q(0), q(1), q(2), q(3), q(40)), (127, -50, 1, 0, -127));
        let mut out = vec![0.0; 64];
        m.dequantize_row(0, &mut out);
        assert_eq!(out[1], -50.0 * d0.to_f32());
        assert_eq!(out[40], -127.0 * d1.to_f32());
    }

    #[test]
    fn reads_ggml_blocks() {
        let values: Vec<f32> = (0..2 * 64).map(|i| (i as f32 * 0.3).cos()).collect();
        let m = Q8_0Matrix::quantize(&values, 2, 64).unwrap();
        let mut blocks = Vec::new();
        for r in 0..2 {
            for (d, q) in m.row_scales(r).iter().zip(m.row_quants(r).chunks_exact(32)) {
                blocks.extend(d.to_le_bytes());
                blocks.extend(q.iter().map(|&q| q ^ 0x80));
            }
        }
        assert_eq!(Q8_0Matrix::from_ggml_blocks(&blocks, 2, 64), Some(m));
        assert_eq!(Q8_0Matrix::from_ggml_blocks(&blocks[1..], 2, 64), None);
    }

    #[test]
    fn widths_off_the_block_size_are_refused() {
        assert!(Q8_0Matrix::quantize(&[0.0; 33], 1, 33).is_none());
    }
}
