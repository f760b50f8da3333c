//! RMSNorm over the rows of a row-major `[rows, dim]` matrix.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::PARALLEL_MIN_ELEMENTS;
use rayon::prelude::*;

/// `out = x / sqrt(mean(x^2) + eps) * weight`, row by row, for `x` of shape `[rows, dim]`
/// row-major with `dim = weight.len()`.
///
/// As in PyTorch / Hugging Face Llama, the mean of squares is accumulated in f32 and the
/// normalized row is multiplied by the weight last. Runs on rayon over rows when `x` has more
/// than 64K elements.
///
/// # Panics
///
/// If `weight` is empty, `x.len()` is not a multiple of `weight.len()` or `out.len() != x.len()`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_with(x, weight, eps, out, true);
}

/// [`rms_norm`], allowed (`simd`) or not to take the AVX-512 path.
fn rms_norm_with(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32], simd: bool) {
    let dim = weight.len();
    assert!(dim > 0, "rms_norm: weight is empty");
    assert!(
        x.len().is_multiple_of(dim),
        "rms_norm: x has {} elements, not a multiple of dim {dim}",
        x.len()
    );
    assert_eq!(
        out.len(),
        x.len(),
        "rms_norm: out has {} elements but x has {}",
        out.len(),
        x.len()
    );
    if x.len() > PARALLEL_MIN_ELEMENTS {
        // At least ~4K elements per task so small rows are not scheduled one by one.
        let min_rows = (4096 / dim).max(1);
        x.par_chunks(dim)
            .zip(out.par_chunks_mut(dim))
            .with_min_len(min_rows)
            .for_each(|(x, out)| rms_norm_row(x, weight, eps, out, simd));
    } else {
        for (x, out) in x.chunks(dim).zip(out.chunks_mut(dim)) {
            rms_norm_row(x, weight, eps, out, simd);
        }
    }
}

/// One row: the AVX-512 path when allowed and available, else the scalar one.
fn rms_norm_row(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd && super::has_avx512() {
        // SAFETY: AVX-512F is available (checked just above); the three slices have the same
        // length (the caller splits `x` and `out` into rows of `weight.len()`).
        unsafe { rms_norm_row_avx512(x, weight, eps, out) };
        return;
    }
    let _ = simd;
    rms_norm_row_scalar(x, weight, eps, out);
}

/// Portable fallback for one row.
fn rms_norm_row_scalar(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let sum_squares: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (sum_squares / x.len() as f32 + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = v * inv * w;
    }
}

/// AVX-512 path for one row: two accumulators for the sum of squares, masked tails.
///
/// # Safety
///
/// The CPU must support AVX-512F; `x`, `weight` and `out` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rms_norm_row_avx512(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert!(x.len() == weight.len() && x.len() == out.len());
    let dim = x.len();
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut i = 0;
    while i < dim {
        let mask = super::tail_mask(dim - i);
        // SAFETY: `mask` selects only lanes `i..min(i + 16, dim)`, inside `x`.
        let v = unsafe { _mm512_maskz_loadu_ps(mask, x.as_ptr().add(i)) };
        acc[(i / 16) & 1] = _mm512_fmadd_ps(v, v, acc[(i / 16) & 1]);
        i += 16;
    }
    let sum_squares = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    let inv = _mm512_set1_ps(1.0 / (sum_squares / dim as f32 + eps).sqrt());
    let mut i = 0;
    while i < dim {
        let mask = super::tail_mask(dim - i);
        // SAFETY: `mask` selects only lanes `i..min(i + 16, dim)`, inside all three slices
        // (same length); masked-off lanes are neither read nor written.
        unsafe {
            let v = _mm512_maskz_loadu_ps(mask, x.as_ptr().add(i));
            let w = _mm512_maskz_loadu_ps(mask, weight.as_ptr().add(i));
            let y = _mm512_mul_ps(_mm512_mul_ps(v, inv), w);
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), mask, y);
        }
        i += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{assert_close, Lcg};

    fn reference(x: &[f32], weight: &[f32], eps: f32) -> Vec<f64> {
        let dim = weight.len();
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks(dim) {
            let mean = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / dim as f64;
            let inv = 1.0 / (mean + eps as f64).sqrt();
            out.extend(
                row.iter()
                    .zip(weight)
                    .map(|(&v, &w)| v as f64 * inv * w as f64),
            );
        }
        out
    }

    #[test]
    fn matches_reference_for_odd_sizes() {
        let mut rng = Lcg::new(11);
        // (rows, dim); the last two exceed the parallel threshold.
        for (rows, dim) in [
            (0, 8),
            (1, 1),
            (3, 5),
            (2, 16),
            (4, 17),
            (5, 63),
            (7, 64),
            (3, 576),
            (9, 1000),
            (300, 250),
            (130, 576),
        ] {
            let x = rng.vec(rows * dim, -4.0, 4.0);
            let weight = rng.vec(dim, 0.5, 1.5);
            let eps = 1e-5;
            let want = reference(&x, &weight, eps);
            for simd in [false, true] {
                let mut got = vec![f32::NAN; x.len()];
                rms_norm_with(&x, &weight, eps, &mut got, simd);
                let what = format!("rms_norm {rows}x{dim} simd {simd}");
                assert_close(&got, &want, 1e-5, &what);
            }
            let mut got = vec![f32::NAN; x.len()];
            rms_norm(&x, &weight, eps, &mut got);
            assert_close(&got, &want, 1e-5, &format!("rms_norm {rows}x{dim}"));
        }
    }

    #[test]
    fn zero_row_gives_zeros_with_eps() {
        for simd in [false, true] {
            let mut out = [1.0_f32; 20];
            rms_norm_with(&[0.0; 20], &[2.0; 20], 1e-6, &mut out, simd);
            assert!(out.iter().all(|&v| v == 0.0), "{out:?}");
        }
    }

    #[test]
    #[should_panic(expected = "rms_norm: x has 7 elements, not a multiple of dim 2")]
    fn rejects_ragged_rows() {
        rms_norm(&[0.0; 7], &[1.0; 2], 1e-5, &mut [0.0; 7]);
    }

    #[test]
    #[should_panic(expected = "rms_norm: out has 3 elements but x has 4")]
    fn rejects_short_output() {
        rms_norm(&[0.0; 4], &[1.0; 2], 1e-5, &mut [0.0; 3]);
    }
}
