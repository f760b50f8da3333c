//! A branch-free `exp` for f32 that the compiler vectorizes, for softmax over large
//! vocabularies (the C library's `expf` is called one element at a time).
//!
//! Method: `exp(x) = 2^n · exp(r)` with `n = round(x / ln 2)` and `r = x − n ln 2` computed
//! in two parts (Cody–Waite), `exp(r)` on `|r| <= ln 2 / 2` by a degree-7 Taylor polynomial
//! in Horner form (truncation error below 1.5e-8 relative, under one f32 ulp), and `2^n` built
//! from exponent bits. Accuracy is within a few ulp of the exact value over the whole range.

/// Below this, `exp` is not a normal f32; the result is 0 (which also makes `exp(-inf) = 0`).
const MIN_INPUT: f32 = -87.336_55;
/// Above this, `2^n` would overflow; inputs are clamped here (softmax inputs are <= 0).
const MAX_INPUT: f32 = 88.0;
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `n · LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Adding and subtracting `1.5 · 2^23` rounds to the nearest integer without a `round` call.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `e^x` in f32; 0 for `x < -87.34` (including `-inf`), `e^88` for `x > 88`. NaN gives 0.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let clamped = x.clamp(MIN_INPUT, MAX_INPUT);
    let shifted = clamped * LOG2_E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let r = (clamped - n * LN2_HI) - n * LN2_LO;
    let mut poly = 1.0 / 5040.0;
    for coefficient in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        poly = poly * r + coefficient;
    }
    // The low mantissa bits of `shifted` hold n (two's complement): integer ops only, so the
    // loop stays vectorized (a float-to-int cast would be saturating and scalar).
    let biased_exponent = shifted
        .to_bits()
        .wrapping_sub(ROUND_MAGIC.to_bits())
        .wrapping_add(127);
    let scale = f32::from_bits(biased_exponent << 23);
    if x >= MIN_INPUT {
        poly * scale
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_f64_exp_within_a_few_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let exact = f64::from(x).exp();
            let relative = (f64::from(exp(x)) - exact).abs() / exact;
            worst = worst.max(relative);
            x += 0.000_71;
        }
        assert!(worst < 4e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn edges_are_exact() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::NAN), 0.0);
        assert!(exp(f32::INFINITY).is_finite());
    }
}
