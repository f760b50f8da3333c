//! The 8-lane tile kernel for x86-64 CPUs with AVX2 and FMA but no AVX-512
//! ([`super::has_avx2`]): the weight-streaming products of decoding and verification with
//! `f32` and bfloat16 weights (Q8_0 weights have theirs in `super::q8_0`).
//!
//! It is the AVX-512 kernel at half the width: a tile of up to
//! four weight rows is multiplied with [`TILE_HEIGHT`] input rows while it sits in registers
//! (eight accumulators, four weight vectors and one input vector: 13 of the 16 registers); a
//! taller tile is taken [`TILE_HEIGHT`] input rows at a time, its weight rows then coming from
//! L1.

use super::gemv::MAX_TILE_WIDTH;
use crate::quant::Bf16Matrix;
use std::arch::x86_64::*;

/// Input rows one call of the tile kernel multiplies (see the module docs).
pub(super) const TILE_HEIGHT: usize = 2;

/// How far ahead (in bytes) the kernel prefetches weights, into L2 (see [`super::gemv`]'s
/// AVX-512 kernel for why L2).
const PREFETCH_BYTES: usize = 16 * 1024;

/// The weight rows of one tile: `f32` or bfloat16 values, `d_in` per row.
#[derive(Clone, Copy)]
pub(super) enum TileRows<'a> {
    /// Row-major `f32` rows.
    F32(&'a [f32]),
    /// Rows `col0..` of a bfloat16 matrix.
    Bf16(&'a Bf16Matrix, usize),
}

impl TileRows<'_> {
    /// Where weight row `c` of the tile starts.
    fn row(&self, c: usize, d_in: usize) -> *const u8 {
        match *self {
            TileRows::F32(rows) => rows[c * d_in..][..d_in].as_ptr().cast(),
            TileRows::Bf16(matrix, col0) => matrix.row(col0 + c).as_ptr().cast(),
        }
    }
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
}

/// 8 values of a weight row from element `k`: `f32`, or bfloat16 widened (a bfloat16 is the
/// upper half of an `f32`).
///
/// # Safety
/// AVX2 must be available and elements `k..k + 8` of the row readable.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load8(row: *const u8, bf16: bool, k: usize) -> __m256 {
    if bf16 {
        // SAFETY: the caller guarantees elements k..k + 8 (16 bytes) are readable.
        let half = unsafe { _mm_loadu_si128(row.cast::<u16>().add(k).cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(half)))
    } else {
        // SAFETY: as above (32 bytes).
        unsafe { _mm256_loadu_ps(row.cast::<f32>().add(k)) }
    }
}

/// Element `k` of a weight row as `f32`.
///
/// # Safety
/// Element `k` of the row must be readable.
unsafe fn value(row: *const u8, bf16: bool, k: usize) -> f32 {
    // SAFETY: the caller guarantees element k is readable.
    unsafe {
        if bf16 {
            f32::from_bits(u32::from(row.cast::<u16>().add(k).read_unaligned()) << 16)
        } else {
            row.cast::<f32>().add(k).read_unaligned()
        }
    }
}

/// `dots[r][c] = xs[r] · weight row c` for `H` input rows (`xs`, `[H, d_in]`) and `W` weight
/// rows.
///
/// # Safety
/// AVX2 and FMA must be available; `rows` must hold `W` rows of `d_in` values and `xs` `H`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_tile<const W: usize, const H: usize>(
    rows: TileRows<'_>,
    xs: &[f32],
    d_in: usize,
    dots: &mut [[f32; MAX_TILE_WIDTH]],
) {
    // One loop per element type, so that the type is no test inside the loop.
    // SAFETY: the caller's guarantees.
    unsafe {
        match rows {
            TileRows::F32(_) => dot_tile_of::<W, H, false>(rows, xs, d_in, dots),
            TileRows::Bf16(..) => dot_tile_of::<W, H, true>(rows, xs, d_in, dots),
        }
    }
}

/// [`dot_tile`] for rows of bfloat16 (`BF16`) or `f32` values.
///
/// # Safety
/// As for [`dot_tile`]; `BF16` must say whether `rows` is [`TileRows::Bf16`].
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_tile_of<const W: usize, const H: usize, const BF16: bool>(
    rows: TileRows<'_>,
    xs: &[f32],
    d_in: usize,
    dots: &mut [[f32; MAX_TILE_WIDTH]],
) {
    assert!(W <= MAX_TILE_WIDTH && xs.len() >= H * d_in && dots.len() >= H);
    let wp: [*const u8; W] = std::array::from_fn(|c| rows.row(c, d_in));
    // Bytes of weights per prefetch: one cache line.
    let values_per_line = if BF16 { 32 } else { 16 };
    let bytes_per_value = if BF16 { 2 } else { 4 };
    let x = xs.as_ptr();
    let mut acc = [[_mm256_setzero_ps(); W]; H];
    let mut wv = [_mm256_setzero_ps(); W];
    let full = d_in - d_in % 8;
    let mut k = 0;
    while k < full {
        for (v, &row) in wv.iter_mut().zip(&wp) {
            // SAFETY: k + 8 <= d_in, inside the weight row.
            *v = unsafe { load8(row, BF16, k) };
            if k % values_per_line == 0 {
                let ahead = row.wrapping_add(k * bytes_per_value + PREFETCH_BYTES);
                _mm_prefetch::<_MM_HINT_T1>(ahead.cast());
            }
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: k + 8 <= d_in, inside input row r.
            let xv = unsafe { _mm256_loadu_ps(x.add(r * d_in + k)) };
            for (a, v) in acc.iter_mut().zip(&wv) {
                *a = _mm256_fmadd_ps(*v, xv, *a);
            }
        }
        k += 8;
    }
    for (r, acc) in acc.iter().enumerate() {
        for (c, a) in acc.iter().enumerate() {
            let tail: f32 = (full..d_in)
                // SAFETY: k < d_in, inside weight row c and input row r.
                .map(|k| unsafe { value(wp[c], BF16, k) * *x.add(r * d_in + k) })
                .sum();
            dots[r][c] = sum_lanes(*a) + tail;
        }
    }
}
