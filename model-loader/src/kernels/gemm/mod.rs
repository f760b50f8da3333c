//! Products of many rows (prefill) with weights stored `[out, in]`, through the `gemm` crate.
//!
//! `gemm` packs its operands into panels before multiplying. Asked for `Y = X Wᵀ` with a
//! row-major `Y`, it transposes the whole problem and must then gather the `[out, in]` weight
//! one element at a time, which costs a quarter of a 128-row prefill. Asked instead for `Yᵀ`
//! (column-major `[rows, out]`), it reads the weight as a column-major right-hand side, which
//! it packs with vector copies; transposing the small `[out, rows]` result back is cheap.
//!
//! Packed weights (bfloat16, and Q8_0 and Q4_1 on CPUs without AVX2) are widened to `f32` one
//! projection at a time before the product: over many rows that costs little next to the
//! product. The widened weight and gemm's result live in the pass's [`workspace`], reused from
//! one projection to the next and released when the pass ends. Q8_0 and Q4_1 weights on CPUs
//! with AVX-512 VNNI or AVX2 go to their integer kernels instead, with inputs kept at about 15 bits
//! as for few rows (module `q8_0`), so that a row's product does not depend on the rows beside
//! it.

mod transpose;
pub mod workspace;

use super::gemv::{project_rows_at, ProjectionRef, WeightRef};
use super::q8_0::InputPrecision;
use crate::quant::dequantize_rows_into as dequantize;
use gemm::Parallelism;
use transpose::{transpose_with_bias, Tiles};

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
            .all(|p| matches!(p.weight, WeightRef::Q8_0(_) | WeightRef::Q4_1(_)))
    {
        // The kernel and precision of `project_rows`: the same bits per row.
        return project_rows_at(x, rows, d_in, projections, InputPrecision::Split);
    }
    let tiles = Tiles::best();
    workspace::with_workspace(|workspace| {
        projections
            .iter()
            .map(|p| project(x, rows, d_in, p, workspace, tiles))
            .collect()
    })
}

/// One projection of [`project_rows_gemm`], its widened weight and gemm's result in
/// `workspace`.
fn project(
    x: &[f32],
    rows: usize,
    d_in: usize,
    p: &ProjectionRef<'_>,
    workspace: &mut workspace::Workspace,
    tiles: Tiles,
) -> Vec<f32> {
    let out = p.weight.rows(d_in);
    if let Some(bias) = p.bias {
        assert_eq!(bias.len(), out, "bias length must equal outputs");
    }
    let widened_len = match p.weight {
        WeightRef::F32(_) => 0,
        WeightRef::Q8_0(_) | WeightRef::Bf16(_) | WeightRef::Q4_1(_) => out * d_in,
    };
    // Buffers of the call's own where the OS refuses the workspace's memory.
    let mut spare: (Vec<f32>, Vec<f32>);
    let (widened, transposed) = match workspace.buffers(widened_len, out * rows) {
        Some(buffers) => buffers,
        None => {
            spare = (vec![0.0; widened_len], vec![0.0; out * rows]);
            (&mut spare.0[..], &mut spare.1[..])
        }
    };
    let weight: &[f32] = match p.weight {
        WeightRef::F32(w) => w,
        packed => {
            dequantize(widened, d_in, |r, row| packed.widen_row(r, row));
            widened
        }
    };
    assert_eq!(weight.len(), out * d_in, "weight rows must be d_in wide");
    product_transposed(x, rows, d_in, weight, out, transposed);
    let mut output = vec![0.0f32; rows * out];
    transpose_with_bias(transposed, out, rows, p.bias, &mut output, tiles);
    output
}

/// `(X Wᵀ)ᵀ` as a row-major `[out, rows]` matrix in `result` (`out * rows` values).
fn product_transposed(
    x: &[f32],
    rows: usize,
    d_in: usize,
    weight: &[f32],
    out: usize,
    result: &mut [f32],
) {
    assert_eq!(result.len(), out * rows, "result is not [out, rows]");
    if rows == 0 || out == 0 {
        return;
    }
    if d_in == 0 {
        result.fill(0.0);
        return;
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
    fn packed_weights_match_their_widened_values() {
        use crate::quant::{Bf16Matrix, Q4_1Matrix, Q8_0Matrix};
        let (rows, d_in, out) = (40, 96, 37);
        let x = values(rows * d_in, 0.25);
        let dense = values(out * d_in, 2.0);
        let bias = values(out, 5.0);
        let q8_0 = Q8_0Matrix::quantize(&dense, out, d_in).unwrap();
        let bf16 = Bf16Matrix::from_f32(&dense, out, d_in);
        let q4_1 = Q4_1Matrix::quantize(&dense, out, d_in).unwrap();
        let cases = [
            WeightRef::Q8_0(&q8_0),
            WeightRef::Bf16(&bf16),
            WeightRef::Q4_1(&q4_1),
        ];
        for weight in cases {
            let widened = crate::quant::dequantize_rows(out, d_in, |r, v| weight.widen_row(r, v));
            let packed = ProjectionRef {
                weight,
                bias: Some(&bias),
            };
            let unpacked = ProjectionRef {
                weight: WeightRef::F32(&widened),
                bias: Some(&bias),
            };
            // Twice through the same workspace, then with it released: the same values.
            for _ in 0..2 {
                let got = project_rows_gemm(&x, rows, d_in, &[packed, unpacked]);
                for (a, b) in got[0].iter().zip(&got[1]) {
                    // Integer kernels take Q8_0 and Q4_1 weights, with 15-bit inputs.
                    assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{a} vs {b}");
                }
                workspace::release();
            }
        }
    }

    /// Where an integer kernel runs, a Q8_0 or Q4_1 product gives each row the same bits
    /// through this entry (prefill, verification of a large batch) as through `project_rows`
    /// alone (decoding), so that a request's logits and a drafter's drafts do not depend on
    /// the requests beside it.
    #[test]
    fn integer_kernel_rows_get_the_same_bits_alone_and_among_many() {
        use crate::quant::{Q4_1Matrix, Q8_0Matrix};
        if !super::super::q8_0::has_integer_kernel() {
            eprintln!("skipped: no integer kernel on this CPU (prefill widens the weights)");
            return;
        }
        let (rows, d_in, out) = (40, 96, 37);
        let x = values(rows * d_in, 0.3);
        let dense = values(out * d_in, 1.3);
        let q8_0 = Q8_0Matrix::quantize(&dense, out, d_in).unwrap();
        let q4_1 = Q4_1Matrix::quantize(&dense, out, d_in).unwrap();
        let bias = values(out, 4.0);
        for weight in [WeightRef::Q8_0(&q8_0), WeightRef::Q4_1(&q4_1)] {
            let p = ProjectionRef {
                weight,
                bias: Some(&bias),
            };
            let many = project_rows_gemm(&x, rows, d_in, &[p]).remove(0);
            for (r, got) in many.chunks_exact(out).enumerate() {
                let alone = project_rows(&x[r * d_in..][..d_in], 1, d_in, &[p]).remove(0);
                let same = got
                    .iter()
                    .zip(&alone)
                    .all(|(g, a)| g.to_bits() == a.to_bits());
                assert!(
                    same,
                    "{weight:?}: row {r} of {rows} differs from the row alone"
                );
            }
        }
    }
}
