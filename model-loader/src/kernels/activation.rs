//! SwiGLU activation: `silu(gate) * up`, in place.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::exp::exp_scalar;
use super::PARALLEL_MIN_ELEMENTS;
use rayon::prelude::*;

/// Elements per rayon task for large inputs (a multiple of the 16-lane vector width).
const CHUNK: usize = 1 << 14;

/// `gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i]` for every `i` (SiLU of the gate projection
/// times the up projection, the element-wise part of a Llama MLP).
///
/// Runs on rayon over chunks when there are more than 64K elements.
///
/// # Panics
///
/// If `gate` and `up` differ in length.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    silu_mul_with(gate, up, true);
}

/// [`silu_mul`], allowed (`simd`) or not to take a vector path.
fn silu_mul_with(gate: &mut [f32], up: &[f32], simd: bool) {
    assert_eq!(
        gate.len(),
        up.len(),
        "silu_mul: gate has {} elements but up has {}",
        gate.len(),
        up.len()
    );
    if gate.len() > PARALLEL_MIN_ELEMENTS {
        gate.par_chunks_mut(CHUNK)
            .zip(up.par_chunks(CHUNK))
            .for_each(|(gate, up)| silu_mul_serial(gate, up, simd));
    } else {
        silu_mul_serial(gate, up, simd);
    }
}

/// One thread's share: the widest vector path allowed and available, else the scalar one.
fn silu_mul_serial(gate: &mut [f32], up: &[f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd && super::has_avx512() {
        // SAFETY: AVX-512F is available (checked just above).
        unsafe { silu_mul_avx512(gate, up) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if simd && super::has_avx2() {
        // SAFETY: AVX2 and FMA are available (checked just above).
        unsafe { silu_mul_avx2(gate, up) };
        return;
    }
    let _ = simd;
    silu_mul_scalar(gate, up);
}

/// Portable fallback.
fn silu_mul_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_scalar(-*g)) * u;
    }
}

/// AVX-512 path, 16 elements per step, masked loads and stores for the tail; the division
/// is a reciprocal estimate refined by one Newton step.
///
/// # Safety
///
/// The CPU must support AVX-512F; `gate` and `up` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    let len = gate.len();
    let one = _mm512_set1_ps(1.0);
    let two = _mm512_set1_ps(2.0);
    let mut i = 0;
    while i < len {
        let mask = super::tail_mask(len - i);
        // SAFETY: `mask` selects only lanes `i..min(i + 16, len)`, inside both slices (same
        // length); masked-off lanes are neither read nor written.
        unsafe {
            let g = _mm512_maskz_loadu_ps(mask, gate.as_ptr().add(i));
            let u = _mm512_maskz_loadu_ps(mask, up.as_ptr().add(i));
            let e = super::exp::exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
            // 1 / (1 + e): 14-bit reciprocal estimate, one Newton step (about 2^-28 relative
            // error, far cheaper than a division).
            let d = _mm512_add_ps(one, e);
            let r = _mm512_rcp14_ps(d);
            let r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
            let y = _mm512_mul_ps(_mm512_mul_ps(g, r), u);
            _mm512_mask_storeu_ps(gate.as_mut_ptr().add(i), mask, y);
        }
        i += 16;
    }
}

/// AVX2 path, 8 elements per step; the tail takes the scalar path.
///
/// # Safety
///
/// The CPU must support AVX2 and FMA; `gate` and `up` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    let full = gate.len() - gate.len() % 8;
    let one = _mm256_set1_ps(1.0);
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= the length of both slices.
        unsafe {
            let g = _mm256_loadu_ps(gate.as_ptr().add(i));
            let u = _mm256_loadu_ps(up.as_ptr().add(i));
            let e = super::exp::exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
            let y = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
            _mm256_storeu_ps(gate.as_mut_ptr().add(i), y);
        }
    }
    silu_mul_scalar(&mut gate[full..], &up[full..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{assert_close, Lcg};

    fn reference(gate: &[f32], up: &[f32]) -> Vec<f64> {
        gate.iter()
            .zip(up)
            .map(|(&g, &u)| {
                let g = g as f64;
                g / (1.0 + (-g).exp()) * u as f64
            })
            .collect()
    }

    #[test]
    fn matches_reference_for_odd_sizes() {
        let mut rng = Lcg::new(7);
        for len in [0, 1, 3, 15, 16, 17, 31, 33, 100, 1000, 4099, 70_001] {
            let gate = rng.vec(len, -12.0, 12.0);
            let up = rng.vec(len, -3.0, 3.0);
            let want = reference(&gate, &up);
            for simd in [false, true] {
                let mut got = gate.clone();
                silu_mul_with(&mut got, &up, simd);
                assert_close(
                    &got,
                    &want,
                    1e-5,
                    &format!("silu_mul len {len} simd {simd}"),
                );
            }
            let mut got = gate.clone();
            silu_mul(&mut got, &up);
            assert_close(&got, &want, 1e-5, &format!("silu_mul len {len}"));
        }
    }

    #[test]
    fn saturates_without_nan() {
        let gate = [-1000.0_f32, -100.0, -88.0, 0.0, 88.0, 100.0, 1000.0];
        let up = [2.0_f32; 7];
        for simd in [false, true] {
            let mut got = gate;
            silu_mul_with(&mut got, &up, simd);
            assert!(got.iter().all(|v| v.is_finite()), "{got:?}");
            assert!(got[0].abs() < 1e-30 && got[1].abs() < 1e-30, "{got:?}");
            assert_eq!(got[3], 0.0);
            assert_eq!(got[5], 200.0);
            assert_eq!(got[6], 2000.0);
        }
    }

    #[test]
    #[should_panic(expected = "silu_mul: gate has 3 elements but up has 2")]
    fn rejects_mismatched_lengths() {
        silu_mul(&mut [0.0; 3], &[0.0; 2]);
    }
}
