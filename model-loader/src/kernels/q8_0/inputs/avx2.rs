//! Input rows quantized per block on AVX2: the scalar path's integers and scales, 8 values per
//! instruction (CPUs without AVX-512, where the scalar rounding is a library call per value).

use super::{InputPrecision, RowOut, SPLIT_LIMIT};
use crate::quant::Q8_0_BLOCK;
use std::arch::x86_64::*;

/// `row` quantized per block of 32 as the scalar path does (the same integers and scales: for
/// bytes, rounding half away from zero as [`crate::quant::q8_0_block`]; for split values, to
/// nearest even), into `out`.
///
/// # Safety
/// AVX2 must be available; `row` must hold whole blocks, and `out` room for all of them (and
/// low parts for [`InputPrecision::Split`]).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_row(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
    let blocks = row.len() / Q8_0_BLOCK;
    assert!(out.holds(blocks, precision));
    let limit = _mm256_set1_ps(precision.limit());
    for b in 0..blocks {
        let at = b * Q8_0_BLOCK;
        // SAFETY: block b's 32 values are inside `row`.
        let quarters: [__m256; 4] =
            std::array::from_fn(|q| unsafe { _mm256_loadu_ps(row.as_ptr().add(at + 8 * q)) });
        let amax = max_abs(quarters);
        let d = amax / precision.limit();
        let inverse = _mm256_set1_ps(if d == 0.0 { 0.0 } else { 1.0 / d });
        let scaled = quarters.map(|v| _mm256_mul_ps(v, inverse));
        let ints = match precision {
            InputPrecision::Byte => {
                let ints = scaled.map(|v| round_half_away(v, limit));
                // SAFETY: the block's 32 bytes are inside `out.quants`.
                unsafe { store_bytes(out.quants.as_mut_ptr().add(at), ints) };
                ints
            }
            InputPrecision::Split => {
                let ints = scaled.map(|v| {
                    _mm256_max_epi32(
                        _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(SPLIT_LIMIT)),
                        _mm256_set1_epi32(-SPLIT_LIMIT),
                    )
                });
                let high = ints
                    .map(|v| _mm256_srai_epi32::<7>(_mm256_add_epi32(v, _mm256_set1_epi32(64))));
                let low: [__m256i; 4] = std::array::from_fn(|q| {
                    _mm256_sub_epi32(ints[q], _mm256_slli_epi32::<7>(high[q]))
                });
                // SAFETY: the block's 32 bytes are inside both planes.
                unsafe {
                    store_bytes(out.quants.as_mut_ptr().add(at), high);
                    store_bytes(out.low.as_mut_ptr().add(at), low);
                }
                ints
            }
        };
        out.offsets[b] = -128 * sum(ints);
        out.scales[b] = d;
    }
}

/// The largest `|v|` of the block's 32 values.
#[target_feature(enable = "avx2")]
fn max_abs(quarters: [__m256; 4]) -> f32 {
    let sign = _mm256_set1_ps(-0.0);
    let [a, b, c, d] = quarters.map(|v| _mm256_andnot_ps(sign, v));
    let eight = _mm256_max_ps(_mm256_max_ps(a, b), _mm256_max_ps(c, d));
    let four = _mm_max_ps(
        _mm256_castps256_ps128(eight),
        _mm256_extractf128_ps::<1>(eight),
    );
    let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
    let one = _mm_max_ss(two, _mm_shuffle_ps::<0b01>(two, two));
    _mm_cvtss_f32(one)
}

/// `scaled` rounded half away from zero (as `f32::round`) and clamped to `±limit`, as
/// integers.
#[target_feature(enable = "avx2")]
fn round_half_away(scaled: __m256, limit: __m256) -> __m256i {
    // Truncate, then step one away from zero where the dropped fraction is at least a half.
    let truncated = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
    let sign = _mm256_set1_ps(-0.0);
    let dropped = _mm256_andnot_ps(sign, _mm256_sub_ps(scaled, truncated));
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(dropped, _mm256_set1_ps(0.5));
    let step = _mm256_or_ps(_mm256_and_ps(scaled, sign), _mm256_set1_ps(1.0));
    let rounded = _mm256_add_ps(truncated, _mm256_and_ps(away, step));
    let clamped = _mm256_max_ps(
        _mm256_min_ps(rounded, limit),
        _mm256_sub_ps(_mm256_setzero_ps(), limit),
    );
    _mm256_cvttps_epi32(clamped)
}

/// The sum of the block's 32 integers.
#[target_feature(enable = "avx2")]
fn sum(ints: [__m256i; 4]) -> i32 {
    let eight = _mm256_add_epi32(
        _mm256_add_epi32(ints[0], ints[1]),
        _mm256_add_epi32(ints[2], ints[3]),
    );
    let four = _mm_add_epi32(
        _mm256_castsi256_si128(eight),
        _mm256_extracti128_si256::<1>(eight),
    );
    let two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
    let one = _mm_add_epi32(two, _mm_shuffle_epi32::<0b01>(two));
    _mm_cvtsi128_si32(one)
}

/// The low bytes of the block's 32 integers (each within a signed byte) stored in order at
/// `at`.
///
/// # Safety
/// `at` must be valid for 32 bytes of writes.
#[target_feature(enable = "avx2")]
unsafe fn store_bytes(at: *mut i8, ints: [__m256i; 4]) {
    // The packs work per 128-bit lane, leaving the four-value groups in the order 0, 2, 4, 6,
    // 1, 3, 5, 7 of the block; the permutation puts them back.
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(ints[0], ints[1]),
        _mm256_packs_epi32(ints[2], ints[3]),
    );
    let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: the caller's guarantee.
    unsafe { _mm256_storeu_si256(at.cast(), ordered) };
}
