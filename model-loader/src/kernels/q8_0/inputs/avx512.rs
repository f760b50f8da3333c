//! Input rows quantized per block on AVX-512 (F, BW and VL): the scalar path's integers and
//! scales, 16 values per instruction.

use super::{InputPrecision, RowOut, SPLIT_LIMIT};
use crate::quant::Q8_0_BLOCK;
use std::arch::x86_64::*;

/// `row` quantized per block of 32 as the scalar path does (the same integers and scales:
/// for bytes, rounding half away from zero as [`crate::quant::q8_0_block`]; for split
/// values, to nearest even), into `out`.
///
/// # Safety
/// AVX-512 F, BW and VL must be available; `row` must hold whole blocks, and `out` room
/// for all of them (and low parts for [`InputPrecision::Split`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn quantize_row(row: &[f32], precision: InputPrecision, out: RowOut<'_>) {
    let blocks = row.len() / Q8_0_BLOCK;
    assert!(out.holds(blocks, precision));
    let limit = _mm512_set1_ps(precision.limit());
    for b in 0..blocks {
        // SAFETY: block b's 32 values are inside `row`.
        let halves = unsafe {
            let at = row.as_ptr().add(b * Q8_0_BLOCK);
            [_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(16))]
        };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(
            _mm512_abs_ps(halves[0]),
            _mm512_abs_ps(halves[1]),
        ));
        let d = amax / precision.limit();
        let inverse = _mm512_set1_ps(if d == 0.0 { 0.0 } else { 1.0 / d });
        let mut sum = 0;
        for (h, &v) in halves.iter().enumerate() {
            let scaled = _mm512_mul_ps(v, inverse);
            let at = b * Q8_0_BLOCK + 16 * h;
            let ints = match precision {
                InputPrecision::Byte => {
                    let ints = round_half_away(scaled, limit);
                    // SAFETY: the 16 bytes at `at` are inside `out.quants`.
                    unsafe { store_bytes(out.quants.as_mut_ptr().add(at), ints) };
                    ints
                }
                InputPrecision::Split => {
                    let ints = _mm512_max_epi32(
                        _mm512_min_epi32(
                            _mm512_cvtps_epi32(scaled),
                            _mm512_set1_epi32(SPLIT_LIMIT),
                        ),
                        _mm512_set1_epi32(-SPLIT_LIMIT),
                    );
                    let high =
                        _mm512_srai_epi32::<7>(_mm512_add_epi32(ints, _mm512_set1_epi32(64)));
                    let low = _mm512_sub_epi32(ints, _mm512_slli_epi32::<7>(high));
                    // SAFETY: the 16 bytes at `at` are inside both planes.
                    unsafe {
                        store_bytes(out.quants.as_mut_ptr().add(at), high);
                        store_bytes(out.low.as_mut_ptr().add(at), low);
                    }
                    ints
                }
            };
            sum += _mm512_reduce_add_epi32(ints);
        }
        out.offsets[b] = -128 * sum;
        out.scales[b] = d;
    }
}

/// `scaled` rounded half away from zero (as `f32::round`) and clamped to `±limit`, as
/// integers.
#[target_feature(enable = "avx512f")]
fn round_half_away(scaled: __m512, limit: __m512) -> __m512i {
    // Truncate, then step one away from zero where the dropped fraction is at least a half.
    let truncated = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
    let dropped = _mm512_abs_ps(_mm512_sub_ps(scaled, truncated));
    let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(dropped, _mm512_set1_ps(0.5));
    let step = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(_mm512_castps_si512(scaled), _mm512_set1_epi32(i32::MIN)),
        _mm512_castps_si512(_mm512_set1_ps(1.0)),
    ));
    let rounded = _mm512_mask_add_ps(truncated, away, truncated, step);
    let clamped = _mm512_max_ps(
        _mm512_min_ps(rounded, limit),
        _mm512_sub_ps(_mm512_setzero_ps(), limit),
    );
    _mm512_cvttps_epi32(clamped)
}

/// The low bytes of 16 integers (each within a signed byte) stored at `at`.
///
/// # Safety
/// `at` must be valid for 16 bytes of writes.
#[target_feature(enable = "avx512f")]
unsafe fn store_bytes(at: *mut i8, ints: __m512i) {
    // SAFETY: the caller's guarantee.
    unsafe { _mm_storeu_si128(at.cast(), _mm512_cvtepi32_epi8(ints)) };
}
