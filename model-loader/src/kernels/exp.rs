//! Vectorized `exp` for 16 and 8 f32 lanes, and its scalar twin for the fallback paths.
//!
//! The vector version reduces `x = n ln2 + r` with `n = round(x / ln2)` and `|r| <= ln2 / 2`
//! (two-constant Cody-Waite reduction, so `r` is accurate to a few ulps of `r` even for
//! `|n| = 128`), evaluates the degree-7 Taylor polynomial of `exp(r)` with fused multiply-adds
//! and scales by `2^n` by adding `n` to the IEEE exponent field. Inputs are clamped to
//! [`EXP_INPUT_MIN`, `EXP_INPUT_MAX`] so the result is always a finite normal number: very
//! negative inputs (including `-inf`) give about `1.2e-38` instead of `0`, which callers that
//! need exact zeros mask out. NaN stays NaN.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Smallest input that is not clamped: `exp(-87.3)` is still a normal f32 (about `1.2e-38`).
pub const EXP_INPUT_MIN: f32 = -87.3;

/// Largest input that is not clamped: `exp(88.7)` is about `3.3e38`, below `f32::MAX`.
pub const EXP_INPUT_MAX: f32 = 88.7;

/// `exp(x)` for one f32 with the same input clamping as [`exp_avx512`].
#[inline]
pub fn exp_scalar(x: f32) -> f32 {
    x.clamp(EXP_INPUT_MIN, EXP_INPUT_MAX).exp()
}

/// `1 / ln 2`.
#[cfg(target_arch = "x86_64")]
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// High part of `ln 2`: few significant bits, so `n * LN2_HI` is exact for `|n| <= 128`.
#[cfg(target_arch = "x86_64")]
const LN2_HI: f32 = 0.693_359_4;
/// `ln 2 - LN2_HI`.
#[cfg(target_arch = "x86_64")]
const LN2_LO: f32 = -2.121_944_4e-4;

/// Coefficients of the degree-7 Taylor polynomial of `exp(r)`, highest degree first.
#[cfg(target_arch = "x86_64")]
const TAYLOR: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `exp` of each of the 16 lanes of `x` (relative error below `2e-7` against `f32::exp`).
///
/// Inputs are clamped to [`EXP_INPUT_MIN`, `EXP_INPUT_MAX`]; NaN lanes stay NaN.
///
/// # Safety
///
/// The CPU must support AVX-512F (see [`super::has_avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn exp_avx512(x: __m512) -> __m512 {
    // `max`/`min` return their second operand when either is NaN: keep `x` second so NaN
    // survives the clamp.
    let x = _mm512_max_ps(_mm512_set1_ps(EXP_INPUT_MIN), x);
    let x = _mm512_min_ps(_mm512_set1_ps(EXP_INPUT_MAX), x);
    // n = round(x / ln2), in -126..=128 after the clamp.
    let n_int = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(LOG2_E)));
    let n = _mm512_cvtepi32_ps(n_int);
    // r = x - n ln2, in two steps (the first is exact).
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    // exp(r) = sum r^k / k!, k = 0..=7 (truncation error below 6e-9 for |r| <= ln2 / 2).
    let mut p = _mm512_set1_ps(TAYLOR[0]);
    for coefficient in &TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*coefficient));
    }
    // p * 2^n: p is in [0.7, 1.42], so adding n to its exponent stays in the normal range.
    let bits = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32::<23>(n_int));
    _mm512_castsi512_ps(bits)
}

/// `exp` of each of the 8 lanes of `x`: [`exp_avx512`]'s reduction and polynomial at half the
/// width, with the same clamping and accuracy.
///
/// # Safety
///
/// The CPU must support AVX2 and FMA (see [`super::has_avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub unsafe fn exp_avx2(x: __m256) -> __m256 {
    let x = _mm256_max_ps(_mm256_set1_ps(EXP_INPUT_MIN), x);
    let x = _mm256_min_ps(_mm256_set1_ps(EXP_INPUT_MAX), x);
    let n_int = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)));
    let n = _mm256_cvtepi32_ps(n_int);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(TAYLOR[0]);
    for coefficient in &TAYLOR[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*coefficient));
    }
    let bits = _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32::<23>(n_int));
    _mm256_castsi256_ps(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_clamps_and_matches_std() {
        for x in [-3.0_f32, -0.5, 0.0, 0.25, 1.0, 10.0, 80.0] {
            assert_eq!(exp_scalar(x), x.exp());
        }
        assert_eq!(exp_scalar(-1000.0), EXP_INPUT_MIN.exp());
        assert_eq!(exp_scalar(f32::NEG_INFINITY), EXP_INPUT_MIN.exp());
        assert_eq!(exp_scalar(1000.0), EXP_INPUT_MAX.exp());
        assert!(exp_scalar(EXP_INPUT_MAX).is_finite());
        assert!(exp_scalar(EXP_INPUT_MIN).is_normal());
        assert!(exp_scalar(f32::NAN).is_nan());
    }

    /// `exp_avx2` of each value, 8 at a time.
    #[cfg(target_arch = "x86_64")]
    fn exp_avx2_values(xs: &[f32]) -> Vec<f32> {
        assert!(super::super::has_avx2());
        xs.chunks(8)
            .flat_map(|input| {
                let mut lanes = [0.0_f32; 8];
                lanes[..input.len()].copy_from_slice(input);
                let mut result = [0.0_f32; 8];
                // SAFETY: AVX2 and FMA were checked above; the loads and stores cover exactly
                // the 8 elements of `lanes` and `result`.
                unsafe {
                    _mm256_storeu_ps(
                        result.as_mut_ptr(),
                        exp_avx2(_mm256_loadu_ps(lanes.as_ptr())),
                    )
                };
                result.into_iter().take(input.len())
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn eight_lanes_agree_with_std_and_clamp() {
        if !super::super::has_avx2() {
            return;
        }
        let mut xs: Vec<f32> = (0..20_001)
            .map(|i| -80.0 + 160.0 * i as f32 / 20_000.0)
            .collect();
        xs.extend([f32::NEG_INFINITY, -1000.0, 1000.0, f32::NAN]);
        for (&x, &y) in xs.iter().zip(&exp_avx2_values(&xs)) {
            if x.is_nan() {
                assert!(y.is_nan(), "exp(NaN) = {y}");
                continue;
            }
            let want = exp_scalar(x) as f64;
            let rel = ((y as f64 - want) / want).abs();
            assert!(rel < 2e-7, "exp({x}) = {y}, expected {want}");
        }
    }

    /// `exp_avx512` of each value, 16 at a time.
    #[cfg(target_arch = "x86_64")]
    fn exp_vector(xs: &[f32]) -> Vec<f32> {
        assert!(super::super::has_avx512());
        let mut out = vec![0.0_f32; xs.len()];
        for (input, output) in xs.chunks(16).zip(out.chunks_mut(16)) {
            let mut lanes = [0.0_f32; 16];
            lanes[..input.len()].copy_from_slice(input);
            let mut result = [0.0_f32; 16];
            // SAFETY: AVX-512F was checked above; the loads and stores cover exactly the 16
            // elements of `lanes` and `result`.
            unsafe {
                let v = exp_avx512(_mm512_loadu_ps(lanes.as_ptr()));
                _mm512_storeu_ps(result.as_mut_ptr(), v);
            }
            output.copy_from_slice(&result[..input.len()]);
        }
        out
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_relative_error_over_range() {
        if !super::super::has_avx512() {
            return;
        }
        // Dense grid over [-80, 80] plus the exact points where n changes sign and r = 0.
        let count = 1_600_001;
        let mut xs: Vec<f32> = (0..count)
            .map(|i| -80.0 + 160.0 * i as f32 / (count - 1) as f32)
            .collect();
        xs.extend([
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            std::f32::consts::LN_2,
            -0.346_573_6,
        ]);
        let got = exp_vector(&xs);
        let mut worst = 0.0_f64;
        for (&x, &y) in xs.iter().zip(&got) {
            let want = x.exp() as f64;
            let rel = ((y as f64 - want) / want).abs();
            worst = worst.max(rel);
            assert!(
                rel < 2e-7,
                "exp({x}) = {y}, f32::exp = {want}, relative error {rel:e}"
            );
        }
        assert!(worst > 0.0, "the grid should exercise rounding differences");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_edges() {
        if !super::super::has_avx512() {
            return;
        }
        let xs = [
            f32::NEG_INFINITY,
            -1000.0,
            EXP_INPUT_MIN,
            -87.0,
            87.0,
            EXP_INPUT_MAX,
            1000.0,
            f32::INFINITY,
            f32::NAN,
        ];
        let got = exp_vector(&xs);
        for (&x, &y) in xs.iter().zip(&got) {
            if x.is_nan() {
                assert!(y.is_nan(), "exp(NaN) = {y}");
                continue;
            }
            let want = exp_scalar(x) as f64;
            assert!(y.is_normal(), "exp({x}) = {y} should be a normal number");
            let rel = ((y as f64 - want) / want).abs();
            assert!(rel < 2e-7, "exp({x}) = {y}, expected {want}");
        }
    }
}
