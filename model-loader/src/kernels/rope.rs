//! Rotary position embedding in the Hugging Face "rotate half" layout, in place.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::PARALLEL_MIN_ELEMENTS;
use rayon::prelude::*;

/// Rotates `x` of shape `[rows, heads, head_dim]` (row-major) in place by per-row angles.
///
/// `cos` and `sin` have shape `[rows, head_dim / 2]`: the cosine and sine of the angle of row
/// `r` and pair `i`. Pair `i` of every head is elements `i` and `i + head_dim / 2` ("rotate
/// half", as Hugging Face Llama), and becomes
/// `x1' = x1 * cos - x2 * sin`, `x2' = x2 * cos + x1 * sin`.
/// Runs on rayon over rows when `x` has more than 64K elements.
///
/// # Panics
///
/// If `head_dim` is zero or odd, or a slice length does not match the shape.
pub fn apply_rope(
    x: &mut [f32],
    rows: usize,
    heads: usize,
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    apply_rope_with(x, rows, heads, head_dim, cos, sin, true);
}

/// [`apply_rope`], allowed (`simd`) or not to take the AVX-512 path.
fn apply_rope_with(
    x: &mut [f32],
    rows: usize,
    heads: usize,
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
    simd: bool,
) {
    assert!(
        head_dim > 0 && head_dim.is_multiple_of(2),
        "apply_rope: head_dim {head_dim} must be even and positive"
    );
    let half = head_dim / 2;
    assert_eq!(
        x.len(),
        rows * heads * head_dim,
        "apply_rope: x has {} elements, expected rows {rows} x heads {heads} x head_dim {head_dim}",
        x.len()
    );
    assert_eq!(
        cos.len(),
        rows * half,
        "apply_rope: cos has {} elements, expected rows {rows} x head_dim / 2 {half}",
        cos.len()
    );
    assert_eq!(
        sin.len(),
        rows * half,
        "apply_rope: sin has {} elements, expected rows {rows} x head_dim / 2 {half}",
        sin.len()
    );
    if x.is_empty() {
        return;
    }
    let row_len = heads * head_dim;
    if x.len() > PARALLEL_MIN_ELEMENTS {
        let min_rows = (4096 / row_len).max(1);
        x.par_chunks_mut(row_len)
            .zip(cos.par_chunks(half).zip(sin.par_chunks(half)))
            .with_min_len(min_rows)
            .for_each(|(x, (cos, sin))| rope_row(x, head_dim, cos, sin, simd));
    } else {
        for (x, (cos, sin)) in x
            .chunks_mut(row_len)
            .zip(cos.chunks(half).zip(sin.chunks(half)))
        {
            rope_row(x, head_dim, cos, sin, simd);
        }
    }
}

/// One row (all heads): the AVX-512 path when allowed and available, else the scalar one.
fn rope_row(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32], simd: bool) {
    for head in x.chunks_exact_mut(head_dim) {
        let (x1, x2) = head.split_at_mut(head_dim / 2);
        #[cfg(target_arch = "x86_64")]
        if simd && super::has_avx512() {
            // SAFETY: AVX-512F is available (checked just above); `x1`, `x2`, `cos` and `sin`
            // all have `head_dim / 2` elements.
            unsafe { rotate_avx512(x1, x2, cos, sin) };
            continue;
        }
        let _ = simd;
        rotate_scalar(x1, x2, cos, sin);
    }
}

/// Portable fallback for one head.
fn rotate_scalar(x1: &mut [f32], x2: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
        let (u, v) = (*a, *b);
        *a = u * c - v * s;
        *b = v * c + u * s;
    }
}

/// AVX-512 path for one head, 16 pairs per step, masked tails.
///
/// # Safety
///
/// The CPU must support AVX-512F; the four slices must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rotate_avx512(x1: &mut [f32], x2: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = x1.len();
    assert!(x2.len() == half && cos.len() == half && sin.len() == half);
    let mut i = 0;
    while i < half {
        let mask = super::tail_mask(half - i);
        // SAFETY: `mask` selects only lanes `i..min(i + 16, half)`, inside all four slices
        // (same length); masked-off lanes are neither read nor written.
        unsafe {
            let u = _mm512_maskz_loadu_ps(mask, x1.as_ptr().add(i));
            let v = _mm512_maskz_loadu_ps(mask, x2.as_ptr().add(i));
            let c = _mm512_maskz_loadu_ps(mask, cos.as_ptr().add(i));
            let s = _mm512_maskz_loadu_ps(mask, sin.as_ptr().add(i));
            let a = _mm512_fmsub_ps(u, c, _mm512_mul_ps(v, s));
            let b = _mm512_fmadd_ps(v, c, _mm512_mul_ps(u, s));
            _mm512_mask_storeu_ps(x1.as_mut_ptr().add(i), mask, a);
            _mm512_mask_storeu_ps(x2.as_mut_ptr().add(i), mask, b);
        }
        i += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{assert_close, Lcg};

    fn reference(
        x: &[f32],
        rows: usize,
        heads: usize,
        head_dim: usize,
        cos: &[f32],
        sin: &[f32],
    ) -> Vec<f64> {
        let half = head_dim / 2;
        let mut out = vec![0.0; x.len()];
        for r in 0..rows {
            for h in 0..heads {
                let base = (r * heads + h) * head_dim;
                for i in 0..half {
                    let (c, s) = (cos[r * half + i] as f64, sin[r * half + i] as f64);
                    let (u, v) = (x[base + i] as f64, x[base + half + i] as f64);
                    out[base + i] = u * c - v * s;
                    out[base + half + i] = v * c + u * s;
                }
            }
        }
        out
    }

    /// Angles like Llama's: position `p` (row + offset) times `theta^(-2i / head_dim)`.
    fn angles(rows: usize, head_dim: usize, offset: usize) -> (Vec<f32>, Vec<f32>) {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(rows * half);
        let mut sin = Vec::with_capacity(rows * half);
        for r in 0..rows {
            for i in 0..half {
                let inv_freq = 10_000_f64.powf(-2.0 * i as f64 / head_dim as f64);
                let angle = (r + offset) as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        (cos, sin)
    }

    #[test]
    fn matches_reference_for_odd_sizes() {
        let mut rng = Lcg::new(13);
        // (rows, heads, head_dim); the last one exceeds the parallel threshold.
        for (rows, heads, head_dim) in [
            (0, 3, 8),
            (1, 1, 2),
            (2, 3, 6),
            (3, 2, 32),
            (5, 9, 64),
            (4, 3, 80),
            (3, 2, 128),
            (2, 1, 34),
            (120, 9, 64),
        ] {
            let x = rng.vec(rows * heads * head_dim, -2.0, 2.0);
            let (cos, sin) = angles(rows, head_dim, 5);
            let want = reference(&x, rows, heads, head_dim, &cos, &sin);
            for simd in [false, true] {
                let mut got = x.clone();
                apply_rope_with(&mut got, rows, heads, head_dim, &cos, &sin, simd);
                let what = format!("rope {rows}x{heads}x{head_dim} simd {simd}");
                assert_close(&got, &want, 1e-5, &what);
            }
            let mut got = x.clone();
            apply_rope(&mut got, rows, heads, head_dim, &cos, &sin);
            assert_close(
                &got,
                &want,
                1e-5,
                &format!("rope {rows}x{heads}x{head_dim}"),
            );
        }
    }

    #[test]
    fn zero_angle_is_identity() {
        let x: Vec<f32> = (0..2 * 3 * 18).map(|i| i as f32 * 0.25 - 3.0).collect();
        let (cos, sin) = (vec![1.0; 2 * 9], vec![0.0; 2 * 9]);
        for simd in [false, true] {
            let mut got = x.clone();
            apply_rope_with(&mut got, 2, 3, 18, &cos, &sin, simd);
            assert_eq!(got, x);
        }
    }

    #[test]
    #[should_panic(expected = "apply_rope: head_dim 7 must be even and positive")]
    fn rejects_odd_head_dim() {
        apply_rope(&mut [0.0; 7], 1, 1, 7, &[0.0; 3], &[0.0; 3]);
    }

    #[test]
    #[should_panic(expected = "apply_rope: cos has 3 elements")]
    fn rejects_short_cos() {
        apply_rope(&mut [0.0; 16], 2, 1, 8, &[0.0; 3], &[0.0; 8]);
    }
}
