//! `[rows, cols]` to `[cols, rows]` with a bias per source row: gemm's column-major result
//! back to the row-major layout of activations. Square tiles go through vector registers (16 x
//! 16 on AVX-512, 8 x 8 on AVX2); the edges are copied one value at a time.

use super::SERIAL_WORK;
use rayon::prelude::*;

/// Rows of the output transposed per parallel task.
const TRANSPOSE_BLOCK: usize = 64;

/// How the tiles of a transposition are moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tiles {
    /// One value at a time.
    Scalar,
    /// 8 x 8 tiles in AVX2 registers.
    Avx2,
    /// 16 x 16 tiles in AVX-512 registers.
    Avx512,
}

impl Tiles {
    /// The widest tiles the CPU has.
    pub(super) fn best() -> Self {
        if super::super::has_avx512() {
            Tiles::Avx512
        } else if super::super::has_avx2() {
            Tiles::Avx2
        } else {
            Tiles::Scalar
        }
    }

    /// Side of a tile; 1 for values one at a time.
    fn side(self) -> usize {
        match self {
            Tiles::Scalar => 1,
            Tiles::Avx2 => 8,
            Tiles::Avx512 => 16,
        }
    }
}

/// `source` (`[rows, cols]` row-major) as `[cols, rows]` in `out`, plus `bias` (`[rows]`) on
/// every output row.
///
/// # Panics
/// If `source` or `out` is not `rows * cols` long, or `bias` not `rows` long.
pub(super) fn transpose_with_bias(
    source: &[f32],
    rows: usize,
    cols: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
    tiles: Tiles,
) {
    assert!(source.len() == rows * cols && out.len() == rows * cols);
    assert!(
        bias.is_none_or(|b| b.len() == rows),
        "bias length must equal rows"
    );
    if rows == 0 || cols == 0 {
        return;
    }
    // Output rows `first..first + n` are source columns `first..first + n`.
    let fill = |(block, chunk): (usize, &mut [f32])| {
        let first = block * TRANSPOSE_BLOCK;
        let n = chunk.len() / rows;
        transpose_block(source, rows, cols, first..first + n, bias, chunk, tiles);
    };
    if rows * cols >= SERIAL_WORK / 16 {
        out.par_chunks_mut(TRANSPOSE_BLOCK * rows)
            .enumerate()
            .for_each(fill);
    } else {
        out.chunks_mut(TRANSPOSE_BLOCK * rows)
            .enumerate()
            .for_each(fill);
    }
}

/// Writes source columns `columns` (plus `bias`) as the rows of `out`
/// (`[columns.len(), rows]`).
fn transpose_block(
    source: &[f32],
    rows: usize,
    cols: usize,
    columns: std::ops::Range<usize>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    tiles: Tiles,
) {
    let (first, n) = (columns.start, columns.len());
    let side = tiles.side();
    let (full_rows, full_cols) = if side > 1 {
        (rows - rows % side, n - n % side)
    } else {
        (0, 0)
    };
    for r in (0..full_rows).step_by(side) {
        for i in (0..full_cols).step_by(side) {
            let tile = Tile {
                row: r,
                col: first + i,
                out_row: i,
            };
            // SAFETY: `tiles` is one the CPU has (the caller chose it with `Tiles::best` or
            // checked it); rows r..r + side and columns first + i..+ side of `source` and rows
            // i..i + side, columns r..r + side of `out` lie inside both buffers.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                match tiles {
                    Tiles::Avx512 => x86::transpose_16x16(source, cols, out, rows, tile),
                    Tiles::Avx2 => x86::transpose_8x8(source, cols, out, rows, tile),
                    Tiles::Scalar => unreachable!("scalar tiles have side 1"),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("vector tiles only on x86-64: {tile:?}");
        }
    }
    for i in 0..n {
        let row = &mut out[i * rows..(i + 1) * rows];
        // Columns the vector tiles covered only need their edge rows; the rest need all.
        let start = if i < full_cols { full_rows } else { 0 };
        for (r, v) in row.iter_mut().enumerate().skip(start) {
            *v = source[r * cols + first + i];
        }
        if let Some(bias) = bias {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        }
    }
}

/// Where one square tile goes: source rows from `row`, source columns from `col`, to output
/// rows from `out_row` (columns from `row`).
#[derive(Debug, Clone, Copy)]
struct Tile {
    row: usize,
    col: usize,
    out_row: usize,
}

impl Tile {
    /// Panics unless a `side` x `side` tile here lies inside `source` (`cols` wide) and its
    /// transpose inside `out` (`out_cols` wide).
    fn assert_inside(self, side: usize, source: (&[f32], usize), out: (&[f32], usize)) {
        let ((source, cols), (out, out_cols)) = (source, out);
        assert!((self.row + side - 1) * cols + self.col + side <= source.len());
        assert!((self.out_row + side - 1) * out_cols + self.row + side <= out.len());
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Tile;
    use std::arch::x86_64::*;

    /// Copies the 16 x 16 tile at `tile` of `source` (`cols` wide) transposed into `out`
    /// (`out_cols` wide).
    ///
    /// # Safety
    /// AVX-512F must be available and both tiles must lie inside their buffers.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_16x16(
        source: &[f32],
        cols: usize,
        out: &mut [f32],
        out_cols: usize,
        tile: Tile,
    ) {
        tile.assert_inside(16, (source, cols), (out, out_cols));
        let Tile { row, col, out_row } = tile;
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, v) in r.iter_mut().enumerate() {
            // SAFETY: row + i < rows and col + 16 <= cols (asserted above).
            *v = unsafe { _mm512_loadu_ps(source.as_ptr().add((row + i) * cols + col)) };
        }
        // Interleave pairs of rows (32-bit), then pairs of pairs (64-bit): lane group g of
        // u[4k + j] holds column 4g + j of rows 4k..4k + 4.
        let mut t = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for k in 0..4 {
            let (lo0, hi0) = (_mm512_castps_pd(t[4 * k]), _mm512_castps_pd(t[4 * k + 2]));
            let (lo1, hi1) = (
                _mm512_castps_pd(t[4 * k + 1]),
                _mm512_castps_pd(t[4 * k + 3]),
            );
            u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, hi0));
            u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, hi0));
            u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo1, hi1));
            u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo1, hi1));
        }
        // Gather 128-bit lane groups: column 4g + j is lane group g of u[j], u[4 + j],
        // u[8 + j], u[12 + j].
        for j in 0..4 {
            let v0 = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
            let v1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
            let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
            let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
            let columns = [
                (j, _mm512_shuffle_f32x4::<0x88>(v0, w0)),
                (8 + j, _mm512_shuffle_f32x4::<0xDD>(v0, w0)),
                (4 + j, _mm512_shuffle_f32x4::<0x88>(v1, w1)),
                (12 + j, _mm512_shuffle_f32x4::<0xDD>(v1, w1)),
            ];
            for (c, v) in columns {
                // SAFETY: out_row + c < out rows and row + 16 <= out_cols (asserted above).
                unsafe {
                    _mm512_storeu_ps(out.as_mut_ptr().add((out_row + c) * out_cols + row), v)
                };
            }
        }
    }

    /// Copies the 8 x 8 tile at `tile` of `source` (`cols` wide) transposed into `out`
    /// (`out_cols` wide).
    ///
    /// # Safety
    /// AVX must be available and both tiles must lie inside their buffers.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn transpose_8x8(
        source: &[f32],
        cols: usize,
        out: &mut [f32],
        out_cols: usize,
        tile: Tile,
    ) {
        tile.assert_inside(8, (source, cols), (out, out_cols));
        let Tile { row, col, out_row } = tile;
        // SAFETY: row + i < rows and col + 8 <= cols (asserted above).
        let r: [__m256; 8] = std::array::from_fn(|i| unsafe {
            _mm256_loadu_ps(source.as_ptr().add((row + i) * cols + col))
        });
        // Pairs of rows interleaved: t[2k] holds columns 0, 1 | 4, 5 of rows 2k, 2k + 1, and
        // t[2k + 1] columns 2, 3 | 6, 7.
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // Four rows together: u[4h + c] holds column c | c + 4 of rows 4h..4h + 4.
        let u: [__m256; 8] = std::array::from_fn(|i| {
            let (h, c) = (i / 4, i % 4);
            let (a, b) = (t[4 * h + c / 2], t[4 * h + 2 + c / 2]);
            if c % 2 == 0 {
                _mm256_shuffle_ps::<0x44>(a, b)
            } else {
                _mm256_shuffle_ps::<0xEE>(a, b)
            }
        });
        for c in 0..4 {
            let columns = [
                (c, _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c])),
                (c + 4, _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c])),
            ];
            for (c, v) in columns {
                // SAFETY: out_row + c < out rows and row + 8 <= out_cols (asserted above).
                unsafe {
                    _mm256_storeu_ps(out.as_mut_ptr().add((out_row + c) * out_cols + row), v)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::sine_values as values;
    use super::*;

    /// Every kind of tile this CPU can run.
    fn available_tiles() -> Vec<Tiles> {
        let mut tiles = vec![Tiles::Scalar];
        if crate::kernels::has_avx2() || crate::kernels::has_avx512() {
            tiles.push(Tiles::Avx2);
        }
        if crate::kernels::has_avx512() {
            tiles.push(Tiles::Avx512);
        }
        tiles
    }

    #[test]
    fn transposes_and_adds_the_bias() {
        for tiles in available_tiles() {
            let source = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
            let mut out = [0.0; 6];
            transpose_with_bias(&source, 2, 3, Some(&[10.0, 20.0]), &mut out, tiles);
            assert_eq!(out, [11.0, 24.0, 12.0, 25.0, 13.0, 26.0]);
            // Whole tiles of both sizes, their edges and several blocks.
            for (rows, cols) in [(16, 16), (8, 8), (33, 70), (48, 200), (5, 40), (9, 300)] {
                let source = values(rows * cols, 1.0);
                let bias = values(rows, 3.0);
                let mut out = vec![f32::NAN; rows * cols];
                transpose_with_bias(&source, rows, cols, Some(&bias), &mut out, tiles);
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(
                            out[c * rows + r],
                            source[r * cols + c] + bias[r],
                            "{tiles:?} {rows}x{cols} ({r}, {c})"
                        );
                    }
                }
            }
        }
    }
}
