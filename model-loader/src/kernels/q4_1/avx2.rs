//! The Q4_1 kernel for x86-64 CPUs with AVX2, FMA and F16C but no AVX-512 VNNI. Each 32-byte
//! half of a weight load holds eight values of eight rows; its low and high nibbles are two
//! vectors in the Q8_0 layout, multiplied as the Q8_0 AVX2 kernel multiplies its bytes:
//! `vpmaddubsw` of the unsigned nibbles with input bytes, or, for split inputs, 16-bit
//! products with the whole values (rows then come out in the order 0, 1, 4, 5, 2, 3, 6, 7,
//! which the scales and minimums follow and the store undoes).

use super::{block_sum, Output, QuantizedRows, GROUP_BLOCK_BYTES, LOADS_PER_BLOCK};
use crate::kernels::q8_0::avx2::{halves, store_group, wide_dots, widen};
use crate::quant::{Q4_1Matrix, Q4_1_BLOCK, Q4_1_GROUP};
use std::arch::x86_64::*;

/// Input rows one call multiplies: two `i32` sums and two `f32` accumulators per row, beside
/// the weights.
pub(super) const MAX_ROWS: usize = 4;

/// How far ahead (in bytes) the kernel prefetches weights into L2.
const PREFETCH_BYTES: usize = 8 * 1024;

/// The 16 outputs of Q4_1 weight group `group` for `H` quantized input rows from `row0`, plus
/// the bias, written to `out`; `SPLIT`: the inputs are [`super::InputPrecision::Split`].
///
/// # Safety
/// AVX2, FMA and F16C must be available; the group and rows must exist, the inputs be of the
/// precision `SPLIT` names and the output be writable as [`super::project_groups`] requires.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group_dots<const H: usize, const SPLIT: bool>(
    w: &Q4_1Matrix,
    group: usize,
    x: &QuantizedRows,
    row0: usize,
    bias: Option<&[f32]>,
    out: Output,
) {
    let blocks = x.blocks;
    let g = w.group(group);
    assert!(
        g.quants.len() == blocks * GROUP_BLOCK_BYTES
            && g.scales.len() == blocks * Q4_1_GROUP
            && g.mins.len() == blocks * Q4_1_GROUP
            && row0 + H <= x.rows()
            && x.quants.len() == x.rows() * blocks * Q4_1_BLOCK
            && (!SPLIT || x.wide.len() == x.quants.len())
    );
    let wq = g.quants.as_ptr();
    let inputs = x.quants.as_ptr().wrapping_add(row0 * blocks * Q4_1_BLOCK);
    let wide = x.wide.as_ptr().wrapping_add(row0 * blocks * Q4_1_BLOCK);
    let nibble = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    // Per input row, rows 0-7 and 8-15 of the group.
    let mut acc = [[_mm256_setzero_ps(); 2]; H];
    for b in 0..blocks {
        let block = wq.wrapping_add(b * GROUP_BLOCK_BYTES);
        for line in 0..LOADS_PER_BLOCK {
            _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
        }
        let mut ints = [[_mm256_setzero_si256(); 2]; H];
        for p in 0..LOADS_PER_BLOCK {
            for half in 0..2 {
                // SAFETY: bytes 64p + 32 half.. + 32 lie inside block b of the group.
                let wv = unsafe { _mm256_loadu_si256(block.add(p * 64 + half * 32).cast()) };
                let low = _mm256_and_si256(wv, nibble);
                let high = _mm256_and_si256(_mm256_srli_epi16::<4>(wv), nibble);
                // Values 8p..8p + 4 of each row, then 8p + 4..8p + 8.
                for (first_value, q) in [(8 * p, low), (8 * p + 4, high)] {
                    let widened = widen(q);
                    for (h, ints) in ints.iter_mut().enumerate() {
                        let at = (h * blocks + b) * Q4_1_BLOCK + first_value;
                        let sums = if SPLIT {
                            // SAFETY: values at..at + 4 of block b of input row row0 + h (the
                            // wide values have the layout of the bytes, asserted).
                            let four = unsafe { wide.add(at).cast::<i64>().read_unaligned() };
                            wide_dots(widened, _mm256_set1_epi64x(four))
                        } else {
                            // SAFETY: bytes at..at + 4 of input row row0 + h.
                            let four = unsafe { inputs.add(at).cast::<i32>().read_unaligned() };
                            let pairs = _mm256_maddubs_epi16(q, _mm256_set1_epi32(four));
                            _mm256_madd_epi16(pairs, ones)
                        };
                        ints[half] = _mm256_add_epi32(ints[half], sums);
                    }
                }
            }
        }
        let at = b * Q4_1_GROUP..(b + 1) * Q4_1_GROUP;
        let (d, m) = (
            halves::<SPLIT>(&g.scales[at.clone()]),
            halves::<SPLIT>(&g.mins[at]),
        );
        for (h, acc) in acc.iter_mut().enumerate() {
            let scale = x.scales[(row0 + h) * blocks + b];
            let x_scale = _mm256_set1_ps(scale);
            let x_sum = _mm256_set1_ps(scale * block_sum(x, row0 + h, b) as f32);
            for half in 0..2 {
                let sums = _mm256_cvtepi32_ps(ints[h][half]);
                acc[half] = _mm256_fmadd_ps(sums, _mm256_mul_ps(d[half], x_scale), acc[half]);
                acc[half] = _mm256_fmadd_ps(m[half], x_sum, acc[half]);
            }
        }
    }
    // SAFETY: the caller's guarantee for the output.
    unsafe { store_group::<H, SPLIT>(&acc, group, row0, bias, out) };
}
