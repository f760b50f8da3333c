//! The AVX-512 path of the attention kernel: tiles of queries sharing every key and value load.

use super::*;

/// AVX-512 path of one task. `NC` is the number of 16-lane vectors per head (exact for
/// `NC < 16`, an upper bound for `NC == 16`); `T` is the number of queries processed together.
///
/// The task's queries (row-major over its rows, then the heads of the group) are taken `T` at a
/// time: every key and value row loaded for a block serves all `T` queries, which is what keeps
/// the kernel from being bound by loads. For each block of keys, the visibility of each row is
/// worked out once, then each tile of queries updates its online softmax and accumulators.
///
/// # Safety
///
/// The CPU must support AVX-512F, and `head_dim.div_ceil(16)` must equal `NC` (`NC < 16`) or
/// be at most 16 (`NC == 16`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run_task_avx512<const NC: usize, const T: usize>(
    inputs: &Inputs<'_>,
    task: Task<'_>,
) {
    let AttentionShape { len, head_dim, .. } = inputs.shape;
    assert!(if NC < 16 {
        head_dim.div_ceil(16) == NC
    } else {
        head_dim <= 16 * NC
    });
    let group = inputs.shape.group_size();
    let (keys, values) = inputs.kv_head(task.kv_head);
    let rows = task.outs.len();
    let queries = rows * group;
    let tiles = queries.div_ceil(T);
    // Padding slots of the last tile: a zero query that sees nothing, with its own state.
    let slots = tiles * T;
    let mut running = vec![
        Running {
            max: f32::NEG_INFINITY,
            sum: 0.0
        };
        slots
    ];
    let mut acc = vec![0.0_f32; slots * head_dim];
    let zero_query = vec![0.0_f32; head_dim];
    let visibility = &inputs.visibility;
    let task_end = visibility.key_end(task.first_row + rows - 1, len);
    let mut row_bits = vec![[0_u16; KEY_BLOCK / 16]; rows];

    let mut block_start = 0;
    while block_start < task_end {
        let block_end = (block_start + KEY_BLOCK).min(task_end);
        // Which keys of the block each row sees (bit i of entry b: key 16 b + i).
        for (r, bits) in row_bits.iter_mut().enumerate() {
            let row = task.first_row + r;
            *bits = [0; KEY_BLOCK / 16];
            // Causal rows end inside or before this block: later blocks are never visited.
            let end = visibility.key_end(row, len).min(block_end);
            if end <= block_start {
                continue;
            }
            let count = end - block_start;
            let mask = visibility
                .mask_row(row, len)
                .map(|mask| &mask[block_start..end]);
            for (b, bits) in bits.iter_mut().enumerate().take(count.div_ceil(16)) {
                let first = 16 * b;
                *bits = crate::kernels::tail_mask(count - first);
                if let Some(mask) = mask {
                    *bits &= flag_bits(&mask[first..(first + 16).min(count)]);
                }
            }
        }
        for tile in 0..tiles {
            let mut visible = [[0_u16; KEY_BLOCK / 16]; T];
            let mut tile_queries: [&[f32]; T] = [&zero_query; T];
            for t in 0..T {
                let index = tile * T + t;
                if index < queries {
                    let (r, g) = (index / group, index % group);
                    visible[t] = row_bits[r];
                    tile_queries[t] = inputs.query(task.first_row + r, task.kv_head * group + g);
                }
            }
            // Keys up to the last one any query of the tile sees.
            let mut union = [0_u16; KEY_BLOCK / 16];
            for bits in &visible {
                for (u, &b) in union.iter_mut().zip(bits) {
                    *u |= b;
                }
            }
            let Some(last) = union.iter().rposition(|&bits| bits != 0) else {
                continue;
            };
            let count = 16 * last + 16 - union[last].leading_zeros() as usize;
            let range = block_start * head_dim..(block_start + count) * head_dim;
            let slots = tile * T..(tile + 1) * T;
            // SAFETY: AVX-512F is enabled here; the queries have `head_dim` elements, the
            // blocks `count` rows of `head_dim` (`count <= KEY_BLOCK`), `visible` only has
            // bits below `count`, `running` and `acc` hold `T` slots; `head_dim` fits `NC`
            // (this function's contract).
            unsafe {
                attend_tile::<NC, T>(
                    &tile_queries,
                    &keys[range.clone()],
                    &values[range],
                    &visible,
                    inputs.scale,
                    &mut running[slots.clone()],
                    &mut acc[slots.start * head_dim..slots.end * head_dim],
                );
            }
        }
        block_start = block_end;
    }

    for (r, out_row) in task.outs.into_iter().enumerate() {
        for (g, out) in out_row.chunks_exact_mut(head_dim).enumerate() {
            let index = r * group + g;
            let sum = running[index].sum;
            let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
            let acc = &acc[index * head_dim..(index + 1) * head_dim];
            for (o, &a) in out.iter_mut().zip(acc) {
                *o = a * inv;
            }
        }
    }
}

/// Loads 16 lanes at `$row + 16 $c` (unsafe): a plain load for the full chunks `$c + 1 < $nc`,
/// a masked load with `$last` for the last, possibly partial, chunk of the head dimension.
#[cfg(target_arch = "x86_64")]
macro_rules! load_chunk {
    ($row:expr, $c:expr, $nc:expr, $last:expr) => {{
        let c: usize = $c;
        if c + 1 < $nc {
            _mm512_loadu_ps($row.add(16 * c))
        } else {
            _mm512_maskz_loadu_ps($last, $row.add(16 * c))
        }
    }};
}

/// `T` queries against one block of keys: scores, online-softmax updates, weighted values.
///
/// `keys` and `values` hold the block's `count` rows of `head_dim`; bit `i` of
/// `visible[t][b]` says whether query `t` sees key `16 b + i` (bits at or past `count` are
/// clear). A query that sees no key of the block is left unchanged.
///
/// # Safety
///
/// The CPU must support AVX-512F; every query has `head_dim` elements, `keys` and `values`
/// hold the same `count <= KEY_BLOCK` rows of `head_dim`, `running` has `T` entries and `acc`
/// `T * head_dim`; `head_dim.div_ceil(16)` equals `NC` (`NC < 16`) or is at most 16
/// (`NC == 16`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn attend_tile<const NC: usize, const T: usize>(
    queries: &[&[f32]; T],
    keys: &[f32],
    values: &[f32],
    visible: &[[u16; KEY_BLOCK / 16]; T],
    scale: f32,
    running: &mut [Running],
    acc: &mut [f32],
) {
    let head_dim = queries[0].len();
    let count = keys.len() / head_dim;
    let nc = if NC < 16 { NC } else { head_dim.div_ceil(16) };
    let sub_blocks = count.div_ceil(16);
    assert!(nc <= NC && values.len() == keys.len() && count <= KEY_BLOCK);
    assert!(running.len() == T && acc.len() == T * head_dim);
    assert!(queries.iter().all(|q| q.len() == head_dim));
    // Lanes of the last chunk of a head row.
    let last = crate::kernels::tail_mask(head_dim - 16 * (nc - 1));
    let any_visible = |b: usize| visible.iter().any(|bits| bits[b] != 0);

    let mut qv = [[_mm512_setzero_ps(); NC]; T];
    for (qv, q) in qv.iter_mut().zip(queries) {
        for (c, qv) in qv.iter_mut().enumerate().take(nc) {
            // SAFETY: chunk `c < nc` of `q`; the last one is masked to `head_dim`.
            *qv = unsafe { load_chunk!(q.as_ptr(), c, nc, last) };
        }
    }

    // Scores of the visible keys (scaled), -inf elsewhere, and their maxima.
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let scale = _mm512_set1_ps(scale);
    let mut scores = [[neg_inf; KEY_BLOCK / 16]; T];
    let mut block_max = [neg_inf; T];
    for b in 0..sub_blocks {
        if !any_visible(b) {
            continue;
        }
        let rows = (count - 16 * b).min(16);
        // SAFETY: rows `16 b..16 b + rows` of `keys` exist (`16 b < count`).
        let dots = unsafe {
            let first = keys.as_ptr().add(16 * b * head_dim);
            if rows == 16 {
                dot_tile::<NC, T, true>(&qv, nc, last, first, head_dim, rows)
            } else {
                dot_tile::<NC, T, false>(&qv, nc, last, first, head_dim, rows)
            }
        };
        for t in 0..T {
            let s = _mm512_mask_mul_ps(neg_inf, visible[t][b], dots[t], scale);
            scores[t][b] = s;
            block_max[t] = _mm512_max_ps(block_max[t], s);
        }
    }

    // Per query: new maximum, rescaling factor of the old state, probabilities, sum.
    let mut probs = [[0.0_f32; KEY_BLOCK]; T];
    let mut alpha = [1.0_f32; T];
    for t in 0..T {
        let block_max = _mm512_reduce_max_ps(block_max[t]);
        if block_max == f32::NEG_INFINITY {
            continue;
        }
        let state = &mut running[t];
        let max = state.max.max(block_max);
        alpha[t] = if state.max == f32::NEG_INFINITY {
            0.0
        } else {
            exp_scalar(state.max - max)
        };
        let max_v = _mm512_set1_ps(max);
        let mut sum = _mm512_setzero_ps();
        for b in 0..sub_blocks {
            let bits = visible[t][b];
            if bits == 0 {
                continue;
            }
            // SAFETY: AVX-512F is enabled here.
            let e = unsafe { crate::kernels::exp::exp_avx512(_mm512_sub_ps(scores[t][b], max_v)) };
            let p = _mm512_maskz_mov_ps(bits, e);
            sum = _mm512_add_ps(sum, p);
            // SAFETY: `16 b + 16 <= 16 sub_blocks <= KEY_BLOCK`, inside `probs[t]`.
            unsafe { _mm512_storeu_ps(probs[t].as_mut_ptr().add(16 * b), p) };
        }
        state.sum = state.sum * alpha[t] + _mm512_reduce_add_ps(sum);
        state.max = max;
    }

    // acc = acc * alpha + sum_j p_j v_j; each value row is loaded once for the T queries.
    let mut out = [[_mm512_setzero_ps(); NC]; T];
    for (t, out) in out.iter_mut().enumerate() {
        let alpha = _mm512_set1_ps(alpha[t]);
        for (c, out) in out.iter_mut().enumerate().take(nc) {
            // SAFETY: chunk `c < nc` of slot `t` of `acc`; the last one is masked.
            let a = unsafe { load_chunk!(acc.as_ptr().add(t * head_dim), c, nc, last) };
            *out = _mm512_mul_ps(a, alpha);
        }
    }
    for b in 0..sub_blocks {
        if !any_visible(b) {
            continue;
        }
        for j in 16 * b..(16 * b + 16).min(count) {
            let mut v = [_mm512_setzero_ps(); NC];
            for (c, v) in v.iter_mut().enumerate().take(nc) {
                // SAFETY: chunk `c < nc` of row `j < count` of `values`; the last is masked.
                *v = unsafe { load_chunk!(values.as_ptr().add(j * head_dim), c, nc, last) };
            }
            for (out, probs) in out.iter_mut().zip(&probs) {
                let p = _mm512_set1_ps(probs[j]);
                for (out, &v) in out.iter_mut().zip(&v).take(nc) {
                    *out = _mm512_fmadd_ps(p, v, *out);
                }
            }
        }
    }
    for (t, out) in out.iter().enumerate() {
        for (c, &a) in out.iter().enumerate().take(nc) {
            let mask = if c + 1 < nc { u16::MAX } else { last };
            // SAFETY: chunk `c < nc` of slot `t` of `acc`, masked to `head_dim` for the last.
            unsafe { _mm512_mask_storeu_ps(acc.as_mut_ptr().add(t * head_dim + 16 * c), mask, a) };
        }
    }
}

/// Dot products of `T` queries (`qv[t]`, `nc` vectors, the last one with lanes `last`) with
/// `rows <= 16` consecutive key rows of `head_dim` at `keys`: lane `j < rows` of result `t`
/// holds query `t` times key row `j`; lanes past `rows` repeat the last row's product. `FULL`
/// says `rows == 16`.
///
/// Keys are taken four rows at a time; each loaded chunk feeds the `T` queries, and the four
/// accumulators of each query are folded into one vector (partial sums per 128-bit lane) right
/// away, so that only a few vectors per query stay live. The final fold across 128-bit lanes
/// leaves the 16 products in key order.
///
/// # Safety
///
/// The CPU must support AVX-512F; `rows` is in `1..=16` (16 when `FULL`), `keys` points to
/// `rows` readable rows of `head_dim` f32 and `nc = head_dim.div_ceil(16) <= NC`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn dot_tile<const NC: usize, const T: usize, const FULL: bool>(
    qv: &[[__m512; NC]; T],
    nc: usize,
    last: u16,
    keys: *const f32,
    head_dim: usize,
    rows: usize,
) -> [__m512; T] {
    assert!((1..=16).contains(&rows) && (!FULL || rows == 16));
    let mut pending = [_mm512_setzero_ps(); T];
    let mut first_half = [_mm512_setzero_ps(); T];
    let mut out = [_mm512_setzero_ps(); T];
    for quad in 0..4 {
        let mut row_ptrs = [keys; 4];
        for (i, ptr) in row_ptrs.iter_mut().enumerate() {
            let row = 4 * quad + i;
            let row = if FULL { row } else { row.min(rows - 1) };
            // SAFETY: `row < rows`, a readable row.
            *ptr = unsafe { keys.add(row * head_dim) };
        }
        let mut sums = [[_mm512_setzero_ps(); 4]; T];
        for c in 0..nc {
            for (i, &ptr) in row_ptrs.iter().enumerate() {
                // SAFETY: chunk `c < nc` of a readable row; the last one is masked.
                let k = unsafe { load_chunk!(ptr, c, nc, last) };
                for (sums, qv) in sums.iter_mut().zip(qv) {
                    sums[i] = _mm512_fmadd_ps(qv[c], k, sums[i]);
                }
            }
        }
        for t in 0..T {
            let [a, b, c, d] = sums[t];
            let folded = fold_quads(fold_pairs(a, b), fold_pairs(c, d));
            match quad {
                0 | 2 => pending[t] = folded,
                1 => first_half[t] = fold_lanes(pending[t], folded),
                _ => out[t] = fold_lanes(first_half[t], fold_lanes(pending[t], folded)),
            }
        }
    }
    out
}

/// Per 128-bit lane of `x` and `y`: `[x0 + x2, y0 + y2, x1 + x3, y1 + y3]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn fold_pairs(x: __m512, y: __m512) -> __m512 {
    _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
}

/// From `fold_pairs(a, b)` and `fold_pairs(c, d)`: per 128-bit lane, partial sums of the four
/// inputs in order `[a, b, c, d]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn fold_quads(ab: __m512, cd: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x44>(ab, cd),
        _mm512_shuffle_ps::<0xEE>(ab, cd),
    )
}

/// Adds 128-bit lanes 0 + 1 and 2 + 3 of each input: `[x01, x23, y01, y23]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn fold_lanes(x: __m512, y: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(x, y),
        _mm512_shuffle_f32x4::<0xDD>(x, y),
    )
}
