//! The 8-lane kernel for x86-64 CPUs with AVX2 and FMA but no AVX-512
//! ([`super::has_avx2`]): the weight-streaming products of decoding and verification with
//! `f32` and bfloat16 weights (Q8_0 weights have theirs in `super::q8_0`).
//!
//! Unlike the AVX-512 kernel, which multiplies tiles of weight rows read side by side and
//! prefetches ahead, it reads the weight rows one after another ([`dot_rows`]), prefetching
//! only where several input rows meet them.

use crate::quant::Bf16Matrix;
use std::arch::x86_64::*;

/// A run of weight rows: `f32` or bfloat16 values, `d_in` per row.
#[derive(Clone, Copy)]
pub(super) enum WeightRows<'a> {
    /// Row-major `f32` rows.
    F32(&'a [f32]),
    /// Rows `col0..` of a bfloat16 matrix.
    Bf16(&'a Bf16Matrix, usize),
}

impl WeightRows<'_> {
    /// Where weight row `c` of the tile starts.
    fn row(&self, c: usize, d_in: usize) -> *const u8 {
        match *self {
            WeightRows::F32(rows) => rows[c * d_in..][..d_in].as_ptr().cast(),
            WeightRows::Bf16(matrix, col0) => matrix.row(col0 + c).as_ptr().cast(),
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

/// `out(r, c, xs[r] · weight row c)` for the `count` weight rows of `rows` and the `height`
/// input rows of `xs` (`[height, d_in]`).
///
/// The weight rows are read one after another, each once: every thread streams one contiguous
/// run of memory, which the hardware prefetchers follow (tiles of rows read side by side, two
/// to four streams at once, drew less bandwidth on Zen 3). Each row, in L1 once loaded, meets
/// the input rows [`ROW_GROUP`] at a time; a pass over several input rows also prefetches
/// [`PREFETCH_DISTANCE`] ahead.
///
/// # Safety
/// AVX2 and FMA must be available; `rows` must hold `count` rows of `d_in` values and `xs`
/// `height`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_rows(
    rows: WeightRows<'_>,
    count: usize,
    xs: &[f32],
    height: usize,
    d_in: usize,
    out: impl FnMut(usize, usize, f32),
) {
    assert!(xs.len() >= height * d_in);
    // One loop per element type, so that the type is no test inside the loop.
    // SAFETY: the caller's guarantees.
    unsafe {
        match rows {
            WeightRows::F32(_) => dot_rows_of::<false>(rows, count, xs, height, d_in, out),
            WeightRows::Bf16(..) => dot_rows_of::<true>(rows, count, xs, height, d_in, out),
        }
    }
}

/// Input rows that one pass over a weight row multiplies: with [`ACCUMULATORS`] each, twelve
/// accumulators in all, beside one weight vector, within the 16 vector registers. A k = 3
/// verification's four rows meet each weight line in one pass, so the line's arithmetic is
/// spread evenly over the stream rather than repeated from L1 while no load is in flight.
/// Taller inputs pass over the row again, from L1.
pub(super) const ROW_GROUP: usize = 4;

/// Independent accumulators per input row, enough chains in flight to hide the latency of the
/// FMAs. The same for every group size, so that a row's dot product is summed in one order
/// whatever the number of input rows beside it: a request's logits do not depend on the batch.
const ACCUMULATORS: usize = 3;

/// Bytes ahead of the current weight vector that a pass over several input rows asks the
/// CPU to fetch into L2. The arithmetic of several input rows per weight vector slows the
/// demand loads enough that the hardware prefetchers alone let the memory stream idle; one
/// input row keeps up with them unaided, and asks for nothing.
const PREFETCH_DISTANCE: usize = 2048;

/// [`dot_rows`] for rows of bfloat16 (`BF16`) or `f32` values.
///
/// # Safety
/// As for [`dot_rows`]; `BF16` must say whether `rows` is [`WeightRows::Bf16`].
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_of<const BF16: bool>(
    rows: WeightRows<'_>,
    count: usize,
    xs: &[f32],
    height: usize,
    d_in: usize,
    mut out: impl FnMut(usize, usize, f32),
) {
    let mut dots = [0.0; ROW_GROUP];
    for c in 0..count {
        let row = rows.row(c, d_in);
        let mut row0 = 0;
        while row0 < height {
            let group = (height - row0).min(ROW_GROUP);
            let x = &xs[row0 * d_in..(row0 + group) * d_in];
            // SAFETY: AVX2 and FMA (the caller's guarantee); `row` holds d_in values and `x`
            // `group` input rows of d_in.
            unsafe {
                match group {
                    1 => row_dots::<1, BF16>(row, x, d_in, &mut dots),
                    2 => row_dots::<2, BF16>(row, x, d_in, &mut dots),
                    3 => row_dots::<3, BF16>(row, x, d_in, &mut dots),
                    _ => row_dots::<4, BF16>(row, x, d_in, &mut dots),
                }
            }
            for (r, &dot) in dots.iter().enumerate().take(group) {
                out(row0 + r, c, dot);
            }
            row0 += group;
        }
    }
}

/// `dots[r] = xs[r] · row` for `H` input rows, with [`ACCUMULATORS`] per input row.
///
/// # Safety
/// AVX2 and FMA must be available; `row` must hold `d_in` values and `xs` `H` rows of `d_in`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_dots<const H: usize, const BF16: bool>(
    row: *const u8,
    xs: &[f32],
    d_in: usize,
    dots: &mut [f32; ROW_GROUP],
) {
    assert!(H <= ROW_GROUP && xs.len() >= H * d_in);
    let x = xs.as_ptr();
    let mut acc = [[_mm256_setzero_ps(); ACCUMULATORS]; H];
    let step = 8 * ACCUMULATORS;
    let mut k = 0;
    let bytes_per_value = if BF16 { 2 } else { 4 };
    while k + step <= d_in {
        if H > 1 {
            // A prefetch never faults, so lines past the task's last row may be asked for; the
            // address is computed with wrapping arithmetic for that reason.
            let ahead = row.wrapping_add(k * bytes_per_value + PREFETCH_DISTANCE);
            for line in (0..step * bytes_per_value).step_by(64) {
                _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line).cast());
            }
        }
        for a in 0..ACCUMULATORS {
            // SAFETY: k + 8a + 8 <= d_in, inside the weight row and every input row.
            unsafe {
                let w = load8(row, BF16, k + 8 * a);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm256_loadu_ps(x.add(r * d_in + k + 8 * a));
                    acc[a] = _mm256_fmadd_ps(w, xv, acc[a]);
                }
            }
        }
        k += step;
    }
    while k + 8 <= d_in {
        // SAFETY: k + 8 <= d_in, as above.
        unsafe {
            let w = load8(row, BF16, k);
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x.add(r * d_in + k)), acc[0]);
            }
        }
        k += 8;
    }
    for (r, acc) in acc.iter().enumerate() {
        let sum = acc[1..].iter().fold(acc[0], |s, &a| _mm256_add_ps(s, a));
        let tail: f32 = (k..d_in)
            // SAFETY: j < d_in, inside the weight row and input row r.
            .map(|j| unsafe { value(row, BF16, j) * *x.add(r * d_in + j) })
            .sum();
        dots[r] = sum_lanes(sum) + tail;
    }
}
