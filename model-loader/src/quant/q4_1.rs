//! [`Q4_1Matrix`]: a row-major matrix in ggml's Q4_1 format (per block of 32 values, an `f16`
//! scale `d`, an `f16` minimum `m` and 32 four-bit integers `q` in `0..16`, value `d · q + m`),
//! stored in the order the kernels read it.
//!
//! Rows are kept in groups of [`Q4_1_GROUP`] (the last group padded with zero rows), as
//! [`super::Q8_0Matrix`] keeps them, so that one vector of 16 `i32` lanes collects a block's
//! dot products of 16 rows. Per group and block, four loads of 64 bytes each hold eight values
//! of all 16 rows: byte `(row i, k)` of load `p` carries value `8p + k` of row `i` in its low
//! nibble and value `8p + 4 + k` in its high nibble (`k` in `0..4`). Masking the low nibbles
//! of a load gives four values of 16 rows in the Q8_0 matrix's interleaved layout, shifting
//! gives the next four, so the kernels multiply both with the byte products of Q8_0. The 16
//! rows' scales and minimums of a block sit together.
//!
//! Weights that came from a Q4_1 file and were widened to `f32` quantize back to the very same
//! blocks: the block's minimum is `m` and its maximum `m + 15 d` (tested on SmolLM2).

use half::f16;
use rayon::prelude::*;
use std::ops::Range;

/// Values per Q4_1 block.
pub const Q4_1_BLOCK: usize = 32;

/// Rows interleaved together (one per lane of a 512-bit vector of `i32`).
pub const Q4_1_GROUP: usize = 16;

/// Bytes of one group's block: 16 rows of 32 four-bit values.
const GROUP_BLOCK_BYTES: usize = Q4_1_GROUP * Q4_1_BLOCK / 2;

/// Values of a row that one 64-byte load holds (four in the low nibbles, four in the high).
const VALUES_PER_LOAD: usize = 8;

/// Bytes of each row that one load keeps together.
const CHUNK: usize = 4;

/// The largest four-bit integer.
const MAX_Q: u8 = 15;

/// One block of a row: scale `d`, minimum `m` and the 32 integers `q` (value `d · q + m`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q4_1Block {
    /// The scale.
    pub d: f16,
    /// The minimum.
    pub m: f16,
    /// The integers, each in `0..16`.
    pub q: [u8; Q4_1_BLOCK],
}

impl Q4_1Block {
    /// The block's values, `d · q + m` in `f32` (as a GGUF file's values widen).
    pub fn values(&self) -> [f32; Q4_1_BLOCK] {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        self.q.map(|q| d * f32::from(q) + m)
    }

    /// `values` quantized as ggml quantizes Q4_1: `m = min v`, `d = (max v - m) / 15`, and
    /// `q = ⌊(v - m) / d + ½⌋` capped at 15 (all zeros for a constant block).
    pub fn quantize(values: &[f32]) -> Self {
        assert_eq!(values.len(), Q4_1_BLOCK, "a Q4_1 block holds 32 values");
        let min = values.iter().copied().fold(f32::INFINITY, f32::min);
        let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / f32::from(MAX_Q);
        let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
        let q = std::array::from_fn(|i| (((values[i] - min) * inverse + 0.5) as u8).min(MAX_Q));
        Self {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            q,
        }
    }
}

/// A `[rows, cols]` matrix in Q4_1 blocks, interleaved per group of rows (see the module
/// docs); `cols` is a multiple of [`Q4_1_BLOCK`].
#[derive(Clone, Debug, PartialEq)]
pub struct Q4_1Matrix {
    rows: usize,
    cols: usize,
    /// `[groups, blocks, 4 loads, 16 rows, 4]`: two values per byte.
    quants: Vec<u8>,
    /// `[groups, blocks, 16 rows]`: each block's scale.
    scales: Vec<f16>,
    /// `[groups, blocks, 16 rows]`: each block's minimum.
    mins: Vec<f16>,
}

/// One group's blocks as the kernels read them.
#[derive(Clone, Copy, Debug)]
pub struct Q4_1Group<'a> {
    /// `blocks × 256` bytes of interleaved values (see the module docs).
    pub quants: &'a [u8],
    /// `blocks × 16` scales.
    pub scales: &'a [f16],
    /// `blocks × 16` minimums.
    pub mins: &'a [f16],
}

impl Q4_1Matrix {
    /// A `[rows, cols]` matrix of zeros.
    fn zeroed(rows: usize, cols: usize) -> Self {
        let (blocks, groups) = (cols / Q4_1_BLOCK, rows.div_ceil(Q4_1_GROUP));
        Self {
            rows,
            cols,
            quants: vec![0; groups * blocks * GROUP_BLOCK_BYTES],
            scales: vec![f16::ZERO; groups * blocks * Q4_1_GROUP],
            mins: vec![f16::ZERO; groups * blocks * Q4_1_GROUP],
        }
    }

    /// Writes the rows of groups `groups`, block `b` of row `r` being `block(r, b)`.
    fn fill_groups(
        &mut self,
        groups: Range<usize>,
        block: impl Fn(usize, usize) -> Q4_1Block + Sync,
    ) {
        let blocks = self.cols / Q4_1_BLOCK;
        if blocks == 0 {
            return;
        }
        let rows = self.rows;
        let per_group = blocks * Q4_1_GROUP;
        let quants = &mut self.quants[groups.start * blocks * GROUP_BLOCK_BYTES..]
            [..groups.len() * blocks * GROUP_BLOCK_BYTES];
        let scales = &mut self.scales[groups.start * per_group..][..groups.len() * per_group];
        let mins = &mut self.mins[groups.start * per_group..][..groups.len() * per_group];
        quants
            .par_chunks_mut(blocks * GROUP_BLOCK_BYTES)
            .zip(scales.par_chunks_mut(per_group))
            .zip(mins.par_chunks_mut(per_group))
            .zip(groups)
            .for_each(|(((quants, scales), mins), g)| {
                let group_rows = (rows - g * Q4_1_GROUP).min(Q4_1_GROUP);
                for i in 0..group_rows {
                    for b in 0..blocks {
                        let Q4_1Block { d, m, q } = block(g * Q4_1_GROUP + i, b);
                        scales[b * Q4_1_GROUP + i] = d;
                        mins[b * Q4_1_GROUP + i] = m;
                        let at = &mut quants[b * GROUP_BLOCK_BYTES..][..GROUP_BLOCK_BYTES];
                        for (p, values) in q.chunks_exact(VALUES_PER_LOAD).enumerate() {
                            let place = &mut at[(p * Q4_1_GROUP + i) * CHUNK..][..CHUNK];
                            for (k, byte) in place.iter_mut().enumerate() {
                                *byte = values[k] | (values[CHUNK + k] << 4);
                            }
                        }
                    }
                }
            });
    }

    /// Quantizes a `[rows, cols]` matrix as [`Q4_1Matrix::quantize`] does, taking its values
    /// from `read` a range of rows at a time (`read(range)` returns those rows, row-major),
    /// so that the whole matrix is never held as `f32`. `None` when `cols` is not a multiple
    /// of [`Q4_1_BLOCK`].
    ///
    /// # Panics
    /// If `read` returns other than `range.len() * cols` values.
    pub fn quantize_rows(
        rows: usize,
        cols: usize,
        read: impl FnMut(Range<usize>) -> Vec<f32>,
    ) -> Option<Self> {
        if !cols.is_multiple_of(Q4_1_BLOCK) {
            return None;
        }
        let mut matrix = Self::zeroed(rows, cols);
        super::read_group_ranges(rows, cols, Q4_1_GROUP, read, |start, values| {
            let end = start + values.len() / cols;
            matrix.fill_groups(start / Q4_1_GROUP..end.div_ceil(Q4_1_GROUP), |r, b| {
                Q4_1Block::quantize(&values[(r - start) * cols + b * Q4_1_BLOCK..][..Q4_1_BLOCK])
            });
        });
        crate::huge_pages::back_with_huge_pages(&matrix.quants);
        Some(matrix)
    }

    /// Quantizes row-major `values` per block as ggml does ([`Q4_1Block::quantize`]). `None`
    /// when `cols` is not a multiple of [`Q4_1_BLOCK`].
    ///
    /// # Panics
    /// If `values` does not hold `rows * cols` values.
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Option<Self> {
        assert_eq!(
            values.len(),
            rows * cols,
            "quantize: values are not [rows, cols]"
        );
        Self::quantize_rows(rows, cols, |range| {
            values[range.start * cols..range.end * cols].to_vec()
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (a multiple of [`Q4_1_BLOCK`]).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Groups of [`Q4_1_GROUP`] rows (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(Q4_1_GROUP)
    }

    /// Bytes of values, scales and minimums (with the padding rows of the last group).
    pub fn bytes(&self) -> usize {
        self.quants.len() + 2 * (self.scales.len() + self.mins.len())
    }

    /// Group `group`'s blocks (see the module docs).
    pub fn group(&self, group: usize) -> Q4_1Group<'_> {
        let blocks = self.cols / Q4_1_BLOCK;
        let per_group = blocks * Q4_1_GROUP;
        Q4_1Group {
            quants: &self.quants[group * blocks * GROUP_BLOCK_BYTES..]
                [..blocks * GROUP_BLOCK_BYTES],
            scales: &self.scales[group * per_group..][..per_group],
            mins: &self.mins[group * per_group..][..per_group],
        }
    }

    /// Block `block` of row `row`.
    ///
    /// # Panics
    /// If `row` or `block` is out of range.
    pub fn block(&self, row: usize, block: usize) -> Q4_1Block {
        assert!(
            row < self.rows && block < self.cols / Q4_1_BLOCK,
            "block out of range"
        );
        let group = self.group(row / Q4_1_GROUP);
        let i = row % Q4_1_GROUP;
        let at = &group.quants[block * GROUP_BLOCK_BYTES..][..GROUP_BLOCK_BYTES];
        let q = std::array::from_fn(|v| {
            let (p, within) = (v / VALUES_PER_LOAD, v % VALUES_PER_LOAD);
            let byte = at[(p * Q4_1_GROUP + i) * CHUNK + within % CHUNK];
            if within < CHUNK {
                byte & 0x0F
            } else {
                byte >> 4
            }
        });
        Q4_1Block {
            d: group.scales[block * Q4_1_GROUP + i],
            m: group.mins[block * Q4_1_GROUP + i],
            q,
        }
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
        for (b, out) in out.chunks_exact_mut(Q4_1_BLOCK).enumerate() {
            out.copy_from_slice(&self.block(row, b).values());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_like_ggml() {
        // One block from -1 to 2: d = 0.2, m = -1.
        let mut values: Vec<f32> = (0..32).map(|i| -1.0 + 3.0 * i as f32 / 31.0).collect();
        values[5] = 0.09; // (0.09 + 1) / 0.2 = 5.45: rounds down to 5.
        values[6] = 0.11; // 5.55: rounds up to 6.
        let block = Q4_1Block::quantize(&values);
        assert_eq!(block.m, f16::from_f32(-1.0));
        assert_eq!(block.d, f16::from_f32(0.2));
        assert_eq!(
            (block.q[0], block.q[5], block.q[6], block.q[31]),
            (0, 5, 6, 15)
        );
        let constant = Q4_1Block::quantize(&[0.75; 32]);
        assert_eq!(
            (constant.d, constant.m, constant.q),
            (f16::ZERO, f16::from_f32(0.75), [0; 32])
        );
        assert_eq!(constant.values(), [0.75; 32]);
    }

    #[test]
    fn widened_blocks_quantize_back_to_themselves() {
        // Blocks as a Q4_1 file holds them, widened to f32, then quantized again.
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state >> 8
        };
        for _ in 0..2000 {
            let d = f16::from_f32((next() % 1000) as f32 * 1e-4 + 1e-5);
            let m = f16::from_f32(-((next() % 1000) as f32) * 1e-3);
            let mut q: [u8; 32] = std::array::from_fn(|_| (next() % 16) as u8);
            // ggml's blocks hold their minimum and their maximum.
            (q[(next() % 16) as usize], q[16 + (next() % 16) as usize]) = (0, 15);
            let block = Q4_1Block { d, m, q };
            assert_eq!(Q4_1Block::quantize(&block.values()), block);
        }
    }

    #[test]
    fn rows_keep_their_blocks_through_the_interleaving() {
        // 37 rows over three groups, the last padded; three blocks per row.
        let values: Vec<f32> = (0..37 * 96).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let m = Q4_1Matrix::quantize(&values, 37, 96).unwrap();
        assert_eq!((m.rows(), m.cols(), m.groups()), (37, 96, 3));
        assert_eq!(m.bytes(), 3 * 3 * (256 + 64));
        let mut out = vec![f32::NAN; 96];
        for r in 0..37 {
            m.dequantize_row(r, &mut out);
            for (b, out) in out.chunks_exact(Q4_1_BLOCK).enumerate() {
                let want = Q4_1Block::quantize(&values[r * 96 + b * 32..][..32]);
                assert_eq!(m.block(r, b), want, "row {r}, block {b}");
                assert_eq!(out, want.values(), "row {r}, block {b}");
                for (o, v) in out.iter().zip(&values[r * 96 + b * 32..][..32]) {
                    // Half a step, plus the rounding of d and m to f16 (15 steps of d).
                    let step = want.d.to_f32();
                    assert!(
                        (o - v).abs() <= step * (0.5 + 15.0 / 1024.0) + 1e-3,
                        "{o} vs {v}"
                    );
                }
            }
        }
        // Rows 0 and 1, values 0-3 and 4-7 of their first block, in the first load.
        let group = m.group(0);
        let (q0, q1) = (m.block(0, 0).q, m.block(1, 0).q);
        assert_eq!(group.quants[0], q0[0] | (q0[4] << 4));
        assert_eq!(group.quants[3], q0[3] | (q0[7] << 4));
        assert_eq!(group.quants[4], q1[0] | (q1[4] << 4));
        assert_eq!(group.quants[64], q0[8] | (q0[12] << 4));
    }

    #[test]
    fn widths_off_the_block_size_are_refused() {
        assert!(Q4_1Matrix::quantize(&[0.0; 33], 1, 33).is_none());
    }
}
