//! Products of many rows (prefill) with weights stored `[out, in]`, through the `gemm` crate.
//!
//! `gemm` packs its operands into panels before multiplying. Asked for `Y = X Wᵀ` with a
//! row-major `Y`, it transposes the whole problem and must then gather the `[out, in]` weight
//! one element at a time, which costs a quarter of a 128-row prefill. Asked instead for `Yᵀ`
//! (column-major `[rows, out]`), it reads the weight as a column-major right-hand side, which
//! it packs with vector copies; transposing the small `[out, rows]` result back is cheap.
//!
//! Packed weights (bfloat16, and Q8_0 on CPUs without AVX-512 VNNI) are widened to `f32` one
//! projection at a time before the product: over many rows that costs little next to the
//! product, and the buffer lives only as long as the projection's product. Q8_0 weights on
//! VNNI CPUs go to their integer kernel instead, with inputs kept at about 15 bits
//! (module `q8_0`), which multiplies twice as many values per instruction as `f32` FMAs.

use super::gemv::{project_rows_at, ProjectionRef, WeightRef};
use super::q8_0::InputPrecision;
use crate::quant::dequantize_rows as dequantize;
use gemm::Parallelism;
use rayon::prelude::*;

/// Rows of the output transposed per parallel task.
const TRANSPOSE_BLOCK: usize = 64;

/// Multiply-adds below which one thread does the whole product.
const SERIAL_WORK: usize = 1 << 20;

/// `x` (`[rows, d_in]`) times every projection of `projections`: output `b` is
/// `[rows, out_b]` with `out_b[r, j] = x[r] · weight_b[j] + bias_b[j]` (as
/// [`super::gemv::project_rows`], for any number of rows).
///
/// # Panics
/// If a weight is not a whole number of `d_in`-wide rows, a bias has the wrong length, or `x`
/// is not `rows * d_in` long.
pub fn project_rows_gemm(
    x: &[f32],
    rows: usize,
    d_in: usize,
    projections: &[ProjectionRef<'_>],
) -> Vec<Vec<f32>> {
    assert_eq!(
        x.len(),
        rows * d_in,
        "project_rows_gemm: x is not [rows, d_in]"
    );
    if super::q8_0::has_integer_kernel()
        && projections
            .iter()
            .all(|p| matches!(p.weight, WeightRef::Q8_0(_)))
    {
        return project_rows_at(x, rows, d_in, projections, InputPrecision::Split);
    }
    projections
        .iter()
        .map(|p| {
            let out = p.weight.rows(d_in);
            let widened;
            let weight: &[f32] = match p.weight {
                WeightRef::F32(w) => w,
                WeightRef::Q8_0(m) => {
                    widened = dequantize(out, m.cols(), |r, row| m.dequantize_row(r, row));
                    &widened
                }
                WeightRef::Bf16(m) => {
                    widened = dequantize(out, m.cols(), |r, row| m.dequantize_row(r, row));
                    &widened
                }
            };
            assert_eq!(weight.len(), out * d_in, "weight rows must be d_in wide");
            if let Some(bias) = p.bias {
                assert_eq!(bias.len(), out, "bias length must equal outputs");
            }
            let transposed = product_transposed(x, rows, d_in, weight, out);
            transpose_with_bias(&transposed, out, rows, p.bias)
        })
        .collect()
}

/// `(X Wᵀ)ᵀ` as a row-major `[out, rows]` buffer.
fn product_transposed(x: &[f32], rows: usize, d_in: usize, weight: &[f32], out: usize) -> Vec<f32> {
    let mut result = vec![0.0f32; out * rows];
    if rows == 0 || out == 0 || d_in == 0 {
        return result;
    }
    let threads = rayon::current_num_threads();
    let parallelism = if rows * d_in * out < SERIAL_WORK || threads < 2 {
        Parallelism::None
    } else {
        Parallelism::Rayon(threads)
    };
    // SAFETY: dst is an `[rows, out]` matrix stored column-major in `result` (out * rows
    // values: row stride 1, column stride rows); lhs is `x`, `[rows, d_in]` row-major (rows *
    // d_in values); rhs is `Wᵀ`, `[d_in, out]` read column-major from the `[out, d_in]`
    // row-major `weight` (out * d_in values). Every index gemm forms stays inside these
    // buffers, which do not overlap, and read_dst = false ignores the zeros in `result`.
    unsafe {
        gemm::gemm(
            rows,
            out,
            d_in,
            result.as_mut_ptr(),
            rows as isize,
            1,
            false,
            x.as_ptr(),
            1,
            d_in as isize,
            weight.as_ptr(),
            d_in as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
    result
}

/// `[rows, cols]` row-major `source` as `[cols, rows]`, plus `bias` (`[rows]`) on every
/// output row.
fn transpose_with_bias(source: &[f32], rows: usize, cols: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let mut out = vec![0.0f32; rows * cols];
    if rows == 0 || cols == 0 {
        return out;
    }
    // Output rows `first..first + n` are source columns `first..first + n`.
    let fill = |(block, chunk): (usize, &mut [f32])| {
        let first = block * TRANSPOSE_BLOCK;
        let n = chunk.len() / rows;
        transpose_block(source, rows, cols, first, n, bias, chunk);
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
    out
}

/// Writes source columns `first..first + n` (plus `bias`) as the rows of `out` (`[n, rows]`).
fn transpose_block(
    source: &[f32],
    rows: usize,
    cols: usize,
    first: usize,
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (mut full_rows, mut full_cols) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        (full_rows, full_cols) = (rows - rows % 16, n - n % 16);
        for r in (0..full_rows).step_by(16) {
            for i in (0..full_cols).step_by(16) {
                // SAFETY: AVX-512F is available; rows r..r + 16 and columns first + i..+16 of
                // `source` and rows i..i + 16, columns r..r + 16 of `out` are in bounds.
                unsafe { avx512::transpose_16x16(source, cols, r, first + i, out, rows, i) };
            }
        }
    }
    let value = |r: usize, c: usize| source[r * cols + c];
    for i in 0..n {
        let row = &mut out[i * rows..(i + 1) * rows];
        // Columns the SIMD tiles covered only need their edge rows; the rest need all.
        let start = if i < full_cols { full_rows } else { 0 };
        for (r, v) in row.iter_mut().enumerate().skip(start) {
            *v = value(r, first + i);
        }
        if let Some(bias) = bias {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Copies the 16x16 tile at (`row`, `col`) of `source` (`cols` wide) transposed to
    /// (`out_row`, `row`) of `out` (`out_cols` wide).
    ///
    /// # Safety
    /// AVX-512F must be available and both tiles must lie inside their buffers.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_16x16(
        source: &[f32],
        cols: usize,
        row: usize,
        col: usize,
        out: &mut [f32],
        out_cols: usize,
        out_row: usize,
    ) {
        assert!((row + 15) * cols + col + 16 <= source.len());
        assert!((out_row + 15) * out_cols + row + 16 <= out.len());
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, v) in r.iter_mut().enumerate() {
            // SAFETY: row + i < rows and col + 16 <= cols (caller).
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
                // SAFETY: out_row + c < out rows and row + 16 <= out_cols (caller).
                unsafe {
                    _mm512_storeu_ps(out.as_mut_ptr().add((out_row + c) * out_cols + row), v)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gemv::project_rows;
    use super::super::test_util::{sine_values as values, Projections};
    use super::*;

    #[test]
    fn agrees_with_the_weight_streaming_kernel() {
        for (rows, d_in, outs) in [(1, 7, vec![3]), (17, 64, vec![40, 9]), (130, 96, vec![200])] {
            let x = values(rows * d_in, 0.5);
            let fixture = Projections::new(d_in, &outs);
            let projections = fixture.refs(|i| i == 0);
            let large = project_rows_gemm(&x, rows, d_in, &projections);
            let small = project_rows(&x, rows, d_in, &projections);
            for (a, b) in large.iter().zip(&small) {
                assert_eq!(a.len(), b.len());
                for (a, b) in a.iter().zip(b) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn transposes_and_adds_the_bias() {
        let source = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
        let out = transpose_with_bias(&source, 2, 3, Some(&[10.0, 20.0]));
        assert_eq!(out, [11.0, 24.0, 12.0, 25.0, 13.0, 26.0]);
        // Whole SIMD tiles, their edges and several blocks.
        for (rows, cols) in [(16, 16), (33, 70), (48, 200), (5, 40)] {
            let source = values(rows * cols, 1.0);
            let bias = values(rows, 3.0);
            let out = transpose_with_bias(&source, rows, cols, Some(&bias));
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        out[c * rows + r],
                        source[r * cols + c] + bias[r],
                        "{rows}x{cols} ({r}, {c})"
                    );
                }
            }
        }
    }
}
