//! [`Q8_0Matrix`]: a row-major matrix in ggml's Q8_0 format (per block of 32 values, an `f16`
//! scale `d` and 32 signed bytes `q`, value `d · q`), stored in the order the kernels read it.
//!
//! Rows are kept in groups of [`Q8_0_GROUP`] (the last group padded with zero rows), and per
//! group and block the 16 rows are interleaved four bytes at a time: first bytes 0-3 of the
//! block of each of the 16 rows, then bytes 4-7 of each, and so on. One 64-byte load then
//! holds the same four positions of 16 rows, which VNNI's `vpdpbusd` multiplies with four
//! input bytes broadcast to all lanes, so that each lane accumulates one row's dot product and
//! a block's 16 dot products come out in one vector, ready to be scaled by the 16 rows' block
//! scales (stored per group and block, 16 `f16` together). Each value is stored as `q + 128`,
//! the unsigned operand `vpdpbusd` wants.

use half::f16;
use rayon::prelude::*;
use std::ops::Range;

/// Values per Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;

/// Rows interleaved together (one per lane of a 512-bit vector of `i32`).
pub const Q8_0_GROUP: usize = 16;

/// Bytes of one group's block: 16 rows of 32 values.
const GROUP_BLOCK_BYTES: usize = Q8_0_GROUP * Q8_0_BLOCK;

/// Bytes of each row that the interleaving keeps together.
const CHUNK: usize = 4;

/// A `[rows, cols]` matrix in Q8_0 blocks, interleaved per group of rows (see the module
/// docs); `cols` is a multiple of [`Q8_0_BLOCK`].
#[derive(Clone, Debug, PartialEq)]
pub struct Q8_0Matrix {
    rows: usize,
    cols: usize,
    /// `[groups, blocks, 8 chunks, 16 rows, 4]`: each value's `q + 128`.
    quants: Vec<u8>,
    /// `[groups, blocks, 16 rows]`: each block's scale.
    scales: Vec<f16>,
}

impl Q8_0Matrix {
    /// The matrix whose block `b` of row `r` is `block(r, b)` (scale and integers), its values
    /// backed by huge pages where the OS allows.
    fn from_blocks(
        rows: usize,
        cols: usize,
        block: impl Fn(usize, usize) -> (f16, [i8; Q8_0_BLOCK]) + Sync,
    ) -> Self {
        let mut matrix = Self::zeroed(rows, cols);
        matrix.fill_groups(0..rows.div_ceil(Q8_0_GROUP), block);
        crate::huge_pages::back_with_huge_pages(&matrix.quants);
        matrix
    }

    /// A `[rows, cols]` matrix of zeros.
    fn zeroed(rows: usize, cols: usize) -> Self {
        let (blocks, groups) = (cols / Q8_0_BLOCK, rows.div_ceil(Q8_0_GROUP));
        Self {
            rows,
            cols,
            quants: vec![0x80u8; groups * blocks * GROUP_BLOCK_BYTES],
            scales: vec![f16::ZERO; groups * blocks * Q8_0_GROUP],
        }
    }

    /// Writes the rows of groups `groups`, block `b` of row `r` being `block(r, b)`.
    fn fill_groups(
        &mut self,
        groups: Range<usize>,
        block: impl Fn(usize, usize) -> (f16, [i8; Q8_0_BLOCK]) + Sync,
    ) {
        let blocks = self.cols / Q8_0_BLOCK;
        if blocks == 0 {
            return;
        }
        let rows = self.rows;
        let quants = &mut self.quants[groups.start * blocks * GROUP_BLOCK_BYTES..]
            [..groups.len() * blocks * GROUP_BLOCK_BYTES];
        let scales = &mut self.scales[groups.start * blocks * Q8_0_GROUP..]
            [..groups.len() * blocks * Q8_0_GROUP];
        quants
            .par_chunks_mut(blocks * GROUP_BLOCK_BYTES)
            .zip(scales.par_chunks_mut(blocks * Q8_0_GROUP))
            .zip(groups)
            .for_each(|((quants, scales), g)| {
                let group_rows = (rows - g * Q8_0_GROUP).min(Q8_0_GROUP);
                for i in 0..group_rows {
                    for b in 0..blocks {
                        let (d, ints) = block(g * Q8_0_GROUP + i, b);
                        scales[b * Q8_0_GROUP + i] = d;
                        let at = &mut quants[b * GROUP_BLOCK_BYTES..][..GROUP_BLOCK_BYTES];
                        for (j, chunk) in ints.chunks_exact(CHUNK).enumerate() {
                            let place = &mut at[(j * Q8_0_GROUP + i) * CHUNK..][..CHUNK];
                            for (q, &v) in place.iter_mut().zip(chunk) {
                                *q = (v as u8) ^ 0x80;
                            }
                        }
                    }
                }
            });
    }

    /// Quantizes a `[rows, cols]` matrix as [`Q8_0Matrix::quantize`] does, taking its values
    /// from `read` a range of rows at a time (`read(range)` returns those rows, row-major),
    /// so that the whole matrix is never held as `f32`. `None` when `cols` is not a multiple
    /// of [`Q8_0_BLOCK`].
    ///
    /// # Panics
    /// If `read` returns other than `range.len() * cols` values.
    pub fn quantize_rows(
        rows: usize,
        cols: usize,
        read: impl FnMut(Range<usize>) -> Vec<f32>,
    ) -> Option<Self> {
        if !cols.is_multiple_of(Q8_0_BLOCK) {
            return None;
        }
        let mut matrix = Self::zeroed(rows, cols);
        super::read_group_ranges(rows, cols, Q8_0_GROUP, read, |start, values| {
            let end = start + values.len() / cols;
            matrix.fill_groups(start / Q8_0_GROUP..end.div_ceil(Q8_0_GROUP), |r, b| {
                let block = &values[(r - start) * cols + b * Q8_0_BLOCK..][..Q8_0_BLOCK];
                let (d, ints) = quantize_block(block);
                (f16::from_f32(d), ints)
            });
        });
        crate::huge_pages::back_with_huge_pages(&matrix.quants);
        Some(matrix)
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
        Some(Self::from_blocks(rows, cols, |r, b| {
            let (d, ints) = quantize_block(&values[r * cols + b * Q8_0_BLOCK..][..Q8_0_BLOCK]);
            (f16::from_f32(d), ints)
        }))
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
        let per_row = cols / Q8_0_BLOCK;
        Some(Self::from_blocks(rows, cols, |r, b| {
            let bytes = &blocks[(r * per_row + b) * BLOCK_BYTES..][..BLOCK_BYTES];
            let ints = std::array::from_fn(|i| bytes[2 + i] as i8);
            (f16::from_le_bytes([bytes[0], bytes[1]]), ints)
        }))
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (a multiple of [`Q8_0_BLOCK`]).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Groups of [`Q8_0_GROUP`] rows (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(Q8_0_GROUP)
    }

    /// Bytes of values and scales (with the padding rows of the last group).
    pub fn bytes(&self) -> usize {
        self.quants.len() + 2 * self.scales.len()
    }

    /// Group `group`'s interleaved values (`blocks × 512` bytes, see the module docs) and
    /// block scales (`blocks × 16`).
    pub fn group(&self, group: usize) -> (&[u8], &[f16]) {
        let blocks = self.cols / Q8_0_BLOCK;
        (
            &self.quants[group * blocks * GROUP_BLOCK_BYTES..][..blocks * GROUP_BLOCK_BYTES],
            &self.scales[group * blocks * Q8_0_GROUP..][..blocks * Q8_0_GROUP],
        )
    }

    /// Block `block` of row `row`: its scale and 32 integers.
    ///
    /// # Panics
    /// If `row` or `block` is out of range.
    pub fn block(&self, row: usize, block: usize) -> (f16, [i8; Q8_0_BLOCK]) {
        assert!(
            row < self.rows && block < self.cols / Q8_0_BLOCK,
            "block out of range"
        );
        let (quants, scales) = self.group(row / Q8_0_GROUP);
        let i = row % Q8_0_GROUP;
        let at = &quants[block * GROUP_BLOCK_BYTES..][..GROUP_BLOCK_BYTES];
        let ints = std::array::from_fn(|v| {
            let (j, t) = (v / CHUNK, v % CHUNK);
            (at[(j * Q8_0_GROUP + i) * CHUNK + t] ^ 0x80) as i8
        });
        (scales[block * Q8_0_GROUP + i], ints)
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
        let (quants, scales) = self.group(row / Q8_0_GROUP);
        let i = row % Q8_0_GROUP;
        // Straight from the interleaved layout: the row's four bytes of chunk j of a block sit
        // at (j * 16 + i) * 4, which the compiler widens four at a time.
        for ((out, at), scales) in out
            .chunks_exact_mut(Q8_0_BLOCK)
            .zip(quants.chunks_exact(GROUP_BLOCK_BYTES))
            .zip(scales.chunks_exact(Q8_0_GROUP))
        {
            let d = scales[i].to_f32();
            for (j, out) in out.chunks_exact_mut(CHUNK).enumerate() {
                let chunk = &at[(j * Q8_0_GROUP + i) * CHUNK..][..CHUNK];
                for (o, &q) in out.iter_mut().zip(chunk) {
                    *o = d * f32::from((q ^ 0x80) as i8);
                }
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
        let (blocks, q) = ([m.block(0, 0), m.block(0, 1)], |i: usize| {
            m.block(0, i / 32).1[i % 32]
        });
        assert_eq!([blocks[0].0, blocks[1].0], [d0, d1]);
        assert_eq!((q(0), q(1), q(2), q(3), q(40)), (127, -50, 1, 0, -127));
        let mut out = vec![0.0; 64];
        m.dequantize_row(0, &mut out);
        assert_eq!(out[1], -50.0 * d0.to_f32());
        assert_eq!(out[40], -127.0 * d1.to_f32());
    }

    #[test]
    fn reads_ggml_blocks() {
        // 19 rows: a whole group and a padded one.
        let values: Vec<f32> = (0..19 * 64).map(|i| (i as f32 * 0.3).cos()).collect();
        let m = Q8_0Matrix::quantize(&values, 19, 64).unwrap();
        let mut blocks = Vec::new();
        for r in 0..19 {
            for b in 0..2 {
                let (d, q) = m.block(r, b);
                let want = quantize_block(&values[r * 64 + b * 32..][..32]);
                assert_eq!((d, q), (f16::from_f32(want.0), want.1));
                blocks.extend(d.to_le_bytes());
                blocks.extend(q.iter().map(|&q| q as u8));
            }
        }
        assert_eq!(Q8_0Matrix::from_ggml_blocks(&blocks, 19, 64), Some(m));
        assert_eq!(Q8_0Matrix::from_ggml_blocks(&blocks[1..], 19, 64), None);
    }

    #[test]
    fn rows_widen_as_their_blocks_say() {
        // 37 rows over three groups, the last padded; three blocks per row.
        let values: Vec<f32> = (0..37 * 96).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let m = Q8_0Matrix::quantize(&values, 37, 96).unwrap();
        let mut out = vec![f32::NAN; 96];
        for r in 0..37 {
            m.dequantize_row(r, &mut out);
            for (b, out) in out.chunks_exact(Q8_0_BLOCK).enumerate() {
                let (d, q) = m.block(r, b);
                let want = q.map(|q| d.to_f32() * f32::from(q));
                assert_eq!(out, want, "row {r}, block {b}");
            }
        }
    }

    #[test]
    fn widths_off_the_block_size_are_refused() {
        assert!(Q8_0Matrix::quantize(&[0.0; 33], 1, 33).is_none());
    }
}
