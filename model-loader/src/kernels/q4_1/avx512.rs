//! The Q4_1 kernel for x86-64 CPUs with AVX-512 VNNI: per block, four 64-byte loads each hold
//! eight values of the group's 16 rows; the masked low nibbles and the shifted high nibbles are
//! the unsigned operands of `vpdpbusd` with four input bytes broadcast, so one vector collects
//! the block's 16 integer dot products (split inputs take one `vpdpbusd` per byte plane).

use super::{block_sum, Output, QuantizedRows, GROUP_BLOCK_BYTES, LOADS_PER_BLOCK};
use crate::kernels::q8_0::avx512::store_group;
use crate::quant::{Q4_1Matrix, Q4_1_BLOCK, Q4_1_GROUP};
use std::arch::x86_64::*;

/// Input rows one call multiplies: three vectors per row (two integer sums and the output)
/// leave registers for the weights, scales and minimums.
pub(super) const MAX_ROWS: usize = 6;

/// How far ahead (in bytes of the group's values) the kernel prefetches, into L2.
const PREFETCH_BYTES: usize = 8 * 1024;

/// The 16 outputs of weight group `group` for `H` input rows from `row0`, plus the bias,
/// written to `out`; `SPLIT` says that the inputs are [`super::InputPrecision::Split`].
///
/// # Safety
/// AVX-512 F, BW, VL and VNNI and F16C must be available; the group and rows must exist and
/// the output be writable as [`super::project_groups`] requires.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
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
    let input_values = x.rows() * blocks * Q4_1_BLOCK;
    assert!(
        g.quants.len() == blocks * GROUP_BLOCK_BYTES
            && g.scales.len() == blocks * Q4_1_GROUP
            && g.mins.len() == blocks * Q4_1_GROUP
            && row0 + H <= x.rows()
            && x.quants.len() == input_values
            && (!SPLIT || x.low.len() == input_values)
    );
    let (wq, ws, wm) = (g.quants.as_ptr(), g.scales.as_ptr(), g.mins.as_ptr());
    let at_row = row0 * blocks * Q4_1_BLOCK;
    let high = x.quants.as_ptr().wrapping_add(at_row);
    let low = x.low.as_ptr().wrapping_add(at_row);
    let nibble = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); H];
    for b in 0..blocks {
        let block = wq.wrapping_add(b * GROUP_BLOCK_BYTES);
        // SAFETY: the group holds 16 scales and 16 minimums per block.
        let (d, m) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(ws.add(b * Q4_1_GROUP).cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(wm.add(b * Q4_1_GROUP).cast())),
            )
        };
        // Split inputs: `first` the low plane, `second` the high one. Bytes: `first` the low
        // nibbles' products, `second` the high ones'.
        let mut first = [_mm512_setzero_si512(); H];
        let mut second = [_mm512_setzero_si512(); H];
        for p in 0..LOADS_PER_BLOCK {
            // SAFETY: load p of block b lies inside the group's values.
            let wv = unsafe { _mm512_loadu_si512(block.add(p * 64).cast()) };
            _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(p * 64 + PREFETCH_BYTES).cast());
            let low_nibbles = _mm512_and_si512(wv, nibble);
            let high_nibbles = _mm512_and_si512(_mm512_srli_epi16::<4>(wv), nibble);
            for h in 0..H {
                let at = (h * blocks + b) * Q4_1_BLOCK + 8 * p;
                // SAFETY: bytes at..at + 8 of input row row0 + h, in each plane the inputs
                // have.
                let four = |plane: *const i8, from: usize| unsafe {
                    _mm512_set1_epi32(plane.add(at + from).cast::<i32>().read_unaligned())
                };
                if SPLIT {
                    first[h] = _mm512_dpbusd_epi32(first[h], low_nibbles, four(low, 0));
                    first[h] = _mm512_dpbusd_epi32(first[h], high_nibbles, four(low, 4));
                    second[h] = _mm512_dpbusd_epi32(second[h], low_nibbles, four(high, 0));
                    second[h] = _mm512_dpbusd_epi32(second[h], high_nibbles, four(high, 4));
                } else {
                    first[h] = _mm512_dpbusd_epi32(first[h], low_nibbles, four(high, 0));
                    second[h] = _mm512_dpbusd_epi32(second[h], high_nibbles, four(high, 4));
                }
            }
        }
        for h in 0..H {
            let ints = if SPLIT {
                _mm512_add_epi32(first[h], _mm512_slli_epi32::<7>(second[h]))
            } else {
                _mm512_add_epi32(first[h], second[h])
            };
            let scale = x.scales[(row0 + h) * blocks + b];
            let both = _mm512_mul_ps(d, _mm512_set1_ps(scale));
            acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), both, acc[h]);
            let x_sum = _mm512_set1_ps(scale * block_sum(x, row0 + h, b) as f32);
            acc[h] = _mm512_fmadd_ps(m, x_sum, acc[h]);
        }
    }
    // SAFETY: the caller's guarantee for the output.
    unsafe { store_group(&acc, group, row0, bias, out) };
}
