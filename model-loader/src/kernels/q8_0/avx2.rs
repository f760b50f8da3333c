//! The Q8_0 kernel for x86-64 CPUs with AVX2, FMA and F16C but no AVX-512 VNNI
//! ([`crate::kernels::has_avx2`]), for inputs quantized to bytes or split into two byte planes.
//!
//! It reads the matrix's interleaved groups (four bytes of 16 rows per 64 bytes) as two 32-byte
//! halves of eight rows and does what `vpdpbusd` does in three instructions: the weight bytes
//! `q + 128` are turned back into signed `q`, `vpmaddubsw` multiplies `|q|` with the input
//! bytes carrying `q`'s sign (a pair of products stays within `2 · 128 · 127`, inside `i16`),
//! and `vpmaddwd` with ones adds the pairs into one `i32` per row and four bytes. Split inputs
//! (`v = 128 · high + low`, at most 16,256 in magnitude) are multiplied whole as `i16`: the
//! weight bytes are widened to `i16` (four rows per vector), `vpmaddwd` with the four inputs
//! broadcast gives two pair sums per row and `vphaddd` adds them, so the rows of a vector come
//! out in the order 0, 1, 4, 5, 2, 3, 6, 7, which the scales follow and the store undoes. The
//! integers are those of the VNNI kernel (at most `32 · 127 · 16,256` per block).

use super::{Output, QuantizedRows};
use crate::quant::{Q8_0Matrix, Q8_0_BLOCK, Q8_0_GROUP};
use std::arch::x86_64::*;

/// Input rows one call multiplies: two `i32` sums and two `f32` accumulators per row, beside
/// the weights (the dispatch in [`super::project_groups`] lists the row counts 1 to this).
pub(super) const MAX_ROWS: usize = 4;

/// How far ahead (in bytes) the kernel prefetches weights, every cache line, into L2 (on a
/// Zen 3 machine the hardware prefetchers alone left decoding a fifth slower).
const PREFETCH_BYTES: usize = 16 * 1024;

/// The 16 outputs of Q8_0 weight group `group` for `H` quantized input rows from `row0`, plus
/// the bias, written to `out`; `SPLIT`: the inputs are [`super::InputPrecision::Split`].
///
/// # Safety
/// AVX2, FMA and F16C must be available; the group and rows must exist, the inputs be of the
/// precision `SPLIT` names and the output be writable as [`super::project_groups`] requires.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group_dots<const H: usize, const SPLIT: bool>(
    w: &Q8_0Matrix,
    group: usize,
    x: &QuantizedRows,
    row0: usize,
    bias: Option<&[f32]>,
    out: Output,
) {
    let blocks = x.blocks;
    let group_block_bytes = Q8_0_GROUP * Q8_0_BLOCK;
    let (quants, scales) = w.group(group);
    assert!(
        quants.len() == blocks * group_block_bytes
            && scales.len() == blocks * Q8_0_GROUP
            && row0 + H <= x.rows()
            && x.quants.len() == x.rows() * blocks * Q8_0_BLOCK
            && (!SPLIT || x.wide.len() == x.quants.len())
    );
    let wq = quants.as_ptr();
    let inputs = x.quants.as_ptr().wrapping_add(row0 * blocks * Q8_0_BLOCK);
    let wide = x.wide.as_ptr().wrapping_add(row0 * blocks * Q8_0_BLOCK);
    let offset = _mm256_set1_epi8(i8::MIN);
    let ones = _mm256_set1_epi16(1);
    // Per input row, rows 0-7 and 8-15 of the group.
    let mut acc = [[_mm256_setzero_ps(); 2]; H];
    for b in 0..blocks {
        let block = wq.wrapping_add(b * group_block_bytes);
        for line in 0..group_block_bytes / 64 {
            _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
        }
        let mut ints = [[_mm256_setzero_si256(); 2]; H];
        for j in 0..Q8_0_BLOCK / 4 {
            for half in 0..2 {
                // SAFETY: bytes 64j + 32 half.. + 32 lie inside block b of the group.
                let wv = unsafe { _mm256_loadu_si256(block.add(j * 64 + half * 32).cast()) };
                let q = _mm256_xor_si256(wv, offset);
                let magnitude = _mm256_sign_epi8(q, q);
                let widened = widen(q);
                for (h, ints) in ints.iter_mut().enumerate() {
                    let at = (h * blocks + b) * Q8_0_BLOCK + 4 * j;
                    let sums = if SPLIT {
                        // SAFETY: values 4j..4j + 4 of block b of input row row0 + h (the
                        // wide values have the layout of the bytes, asserted).
                        let four = unsafe { wide.add(at).cast::<i64>().read_unaligned() };
                        wide_dots(widened, _mm256_set1_epi64x(four))
                    } else {
                        // SAFETY: bytes 4j..4j + 4 of block b of input row row0 + h.
                        let four = unsafe { inputs.add(at).cast::<i32>().read_unaligned() };
                        byte_dots(magnitude, q, four, ones)
                    };
                    ints[half] = _mm256_add_epi32(ints[half], sums);
                }
            }
        }
        let w_scales = halves::<SPLIT>(&scales[b * Q8_0_GROUP..][..Q8_0_GROUP]);
        for (h, acc) in acc.iter_mut().enumerate() {
            let x_scale = _mm256_set1_ps(x.scales[(row0 + h) * blocks + b]);
            for half in 0..2 {
                let both = _mm256_mul_ps(w_scales[half], x_scale);
                let sums = _mm256_cvtepi32_ps(ints[h][half]);
                acc[half] = _mm256_fmadd_ps(sums, both, acc[half]);
            }
        }
    }
    // SAFETY: the caller's guarantee for the output.
    unsafe { store_group::<H, SPLIT>(&acc, group, row0, bias, out) };
}

/// Writes the accumulators `acc` (per input row, weight rows 0-7 and 8-15 of group `group`;
/// with `SPLIT`, lanes in the order of [`wide_dots`]) plus the bias to rows `row0..row0 + H`
/// of `out`, cut at the weight's rows.
///
/// # Safety
/// AVX2 must be available; rows `row0..row0 + H` and the group's columns of `out` must be the
/// caller's to write.
#[target_feature(enable = "avx2")]
pub(in crate::kernels) unsafe fn store_group<const H: usize, const SPLIT: bool>(
    acc: &[[__m256; 2]; H],
    group: usize,
    row0: usize,
    bias: Option<&[f32]>,
    out: Output,
) {
    let order = split_order();
    let first = group * Q8_0_GROUP;
    let columns = (out.n - first).min(Q8_0_GROUP);
    for (h, acc) in acc.iter().enumerate() {
        let acc = if SPLIT {
            acc.map(|lanes| _mm256_permutevar8x32_ps(lanes, order))
        } else {
            *acc
        };
        let mut values = [0.0f32; Q8_0_GROUP];
        // SAFETY: `values` holds the 16 lanes of both halves.
        unsafe {
            _mm256_storeu_ps(values.as_mut_ptr(), acc[0]);
            _mm256_storeu_ps(values.as_mut_ptr().add(8), acc[1]);
        }
        for (c, &v) in values.iter().enumerate().take(columns) {
            let v = v + bias.map_or(0.0, |bias| bias[first + c]);
            // SAFETY: row row0 + h, column first + c (inside the weight's rows) is the
            // caller's to write.
            unsafe { *out.values.add((row0 + h) * out.n + first + c) = v };
        }
    }
}

/// The 16 `f16` values of `rows` (one per weight row of a group) as `f32`, rows 0-7 and 8-15;
/// with `SPLIT`, in the lane order of [`wide_dots`]'s sums, to scale them.
#[target_feature(enable = "avx2,f16c")]
pub(in crate::kernels) fn halves<const SPLIT: bool>(rows: &[half::f16]) -> [__m256; 2] {
    assert_eq!(rows.len(), Q8_0_GROUP);
    // SAFETY: `rows` holds 16 values (asserted).
    let halves = [0, 8]
        .map(|first| unsafe { _mm256_cvtph_ps(_mm_loadu_si128(rows.as_ptr().add(first).cast())) });
    if SPLIT {
        halves.map(|values| _mm256_permutevar8x32_ps(values, split_order()))
    } else {
        halves
    }
}

/// The lane permutation between rows 0-7 in order and the order of [`wide_dots`]'s sums (0, 1,
/// 4, 5, 2, 3, 6, 7); it is its own inverse.
#[target_feature(enable = "avx2")]
pub(in crate::kernels) fn split_order() -> __m256i {
    _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7)
}

/// Per weight row of `q` (eight rows, four signed bytes each, `magnitude = |q|`), the dot
/// product of its four bytes with the four input bytes of `four`, as one `i32` each.
#[target_feature(enable = "avx2")]
pub(in crate::kernels) fn byte_dots(
    magnitude: __m256i,
    q: __m256i,
    four: i32,
    ones: __m256i,
) -> __m256i {
    let signed = _mm256_sign_epi8(_mm256_set1_epi32(four), q);
    _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed), ones)
}

/// The weight bytes of `q` (eight rows, four signed bytes each) as `i16`: rows 0-3, rows 4-7.
#[target_feature(enable = "avx2")]
pub(in crate::kernels) fn widen(q: __m256i) -> [__m256i; 2] {
    [
        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)),
        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(q)),
    ]
}

/// Per weight row of `rows` ([`widen`]'s halves), the dot product of its four weights with the
/// four `i16` inputs repeated in `four`, as one `i32` each, rows in the order 0, 1, 4, 5, 2, 3,
/// 6, 7.
#[target_feature(enable = "avx2")]
pub(in crate::kernels) fn wide_dots(rows: [__m256i; 2], four: __m256i) -> __m256i {
    _mm256_hadd_epi32(
        _mm256_madd_epi16(rows[0], four),
        _mm256_madd_epi16(rows[1], four),
    )
}
