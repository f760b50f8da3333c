//! Grouped-query scaled-dot-product attention, flash-attention style.
//!
//! Keys are visited in blocks of [`KEY_BLOCK`]; each query keeps a running maximum, a running
//! sum of exponentials and an f32 accumulator of the weighted values (online softmax), so no
//! score matrix larger than one block of a few queries exists.
//!
//! Work is split into tasks of (key/value head, block of [`ROW_BLOCK`] query rows); a task
//! handles every query head of its key/value group for its rows, so each block of keys and
//! values is reused from cache by all of them. Tasks run on rayon when the problem is large
//! enough to pay for it (prefill), serially otherwise (decode).
//!
//! The AVX-512 path takes a task's queries a few at a time (a tile: for SmolLM2-135M's 9/3
//! heads of 64, the three heads of one row) and keeps the tile's query vectors in registers.
//! Each 16-lane chunk of a key row is loaded once and multiplied into every query of the tile
//! (head dimension in the lanes); a transpose-and-add reduction then leaves the scores of 16
//! keys in one vector, which is exponentiated with [`super::exp::exp_avx512`]. The weighted
//! sum of values likewise loads each value row once for the whole tile. Sharing the loads
//! matters: a 512-bit load issues about once per cycle, half the rate of fused multiply-adds.
//! The scalar path (other CPUs, head dimensions above 256) runs the same online softmax one
//! query and one key at a time.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::exp::exp_scalar;
use rayon::prelude::*;

/// Keys per block of the online softmax.
pub const KEY_BLOCK: usize = 64;

/// Query rows per task.
pub const ROW_BLOCK: usize = 16;

/// `rows * len * head_dim * num_heads` above which the tasks run on rayon.
const PARALLEL_MIN_WORK: usize = 1 << 20;

/// Largest head dimension the AVX-512 path handles (larger ones take the scalar path).
#[cfg(target_arch = "x86_64")]
const SIMD_MAX_HEAD_DIM: usize = 256;

/// Sizes of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query rows (new tokens).
    pub rows: usize,
    /// Keys and values per key/value head (cached plus new tokens).
    pub len: usize,
    /// Query heads; a multiple of `num_kv_heads`.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Dimension of every query, key and value head.
    pub head_dim: usize,
}

impl AttentionShape {
    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// Which keys each query row may attend to.
#[derive(Clone, Copy, Debug)]
pub enum Visibility<'a> {
    /// Every row sees every key.
    All,
    /// Causal: row i sees keys 0..=cached + i (len == cached + rows).
    Causal {
        /// Keys before the first query row (the KV-cache length before this call).
        cached: usize,
    },
    /// Explicit `[rows, len]` row-major, `true` = visible.
    Mask(&'a [bool]),
}

impl Visibility<'_> {
    /// End (exclusive) of the keys `row` may see; keys before it may still be masked.
    fn key_end(&self, row: usize, len: usize) -> usize {
        match *self {
            Visibility::Causal { cached } => (cached + row + 1).min(len),
            Visibility::All | Visibility::Mask(_) => len,
        }
    }

    /// The mask row of `row` (`len` flags), if the visibility is an explicit mask.
    fn mask_row(&self, row: usize, len: usize) -> Option<&[bool]> {
        match *self {
            Visibility::Mask(mask) => Some(&mask[row * len..(row + 1) * len]),
            Visibility::All | Visibility::Causal { .. } => None,
        }
    }
}

/// Grouped-query scaled-dot-product attention: `out = softmax(q k^T / sqrt(head_dim)) v` per
/// query head, over the keys that `visibility` lets each row see.
///
/// Layouts (all row-major): `query` and `out` are `[rows, num_heads, head_dim]` (`out` is
/// fully overwritten); `keys` and `values` are `[num_kv_heads, len, head_dim]`. Query head `h`
/// uses key/value head `h / (num_heads / num_kv_heads)`. A row that sees no key gets zeros.
/// Scores, softmax and accumulation are in f32.
///
/// # Panics
///
/// If the shape is inconsistent (zero `head_dim` or `num_kv_heads`, `num_heads` not a multiple
/// of `num_kv_heads`), a slice length does not match it, a causal `cached + rows != len` or a
/// mask is not `rows * len` long.
pub fn grouped_query_attention(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &mut [f32],
) {
    attention_with(query, keys, values, shape, visibility, out, true);
}

/// Panics with a message naming the first inconsistency between the shape and the slices.
fn validate(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &[f32],
) {
    let AttentionShape {
        rows,
        len,
        num_heads,
        num_kv_heads,
        head_dim,
    } = *shape;
    assert!(head_dim > 0, "attention: head_dim must be positive");
    assert!(num_kv_heads > 0, "attention: num_kv_heads must be positive");
    assert!(
        num_heads.is_multiple_of(num_kv_heads),
        "attention: num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}"
    );
    let query_len = rows * num_heads * head_dim;
    let kv_len = num_kv_heads * len * head_dim;
    assert_eq!(
        query.len(),
        query_len,
        "attention: query has {} elements, expected rows {rows} x num_heads {num_heads} x head_dim {head_dim}",
        query.len()
    );
    assert_eq!(
        out.len(),
        query_len,
        "attention: out has {} elements, expected rows {rows} x num_heads {num_heads} x head_dim {head_dim}",
        out.len()
    );
    assert_eq!(
        keys.len(),
        kv_len,
        "attention: keys have {} elements, expected num_kv_heads {num_kv_heads} x len {len} x head_dim {head_dim}",
        keys.len()
    );
    assert_eq!(
        values.len(),
        kv_len,
        "attention: values have {} elements, expected num_kv_heads {num_kv_heads} x len {len} x head_dim {head_dim}",
        values.len()
    );
    match *visibility {
        Visibility::All => {}
        Visibility::Causal { cached } => assert_eq!(
            cached + rows,
            len,
            "attention: causal cached {cached} + rows {rows} must equal len {len}"
        ),
        Visibility::Mask(mask) => assert_eq!(
            mask.len(),
            rows * len,
            "attention: mask has {} flags, expected rows {rows} x len {len}",
            mask.len()
        ),
    }
}

/// Inputs shared by all tasks of one call.
struct Inputs<'a> {
    query: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    shape: AttentionShape,
    visibility: Visibility<'a>,
    /// `1 / sqrt(head_dim)`.
    scale: f32,
}

impl<'a> Inputs<'a> {
    /// Keys and values `[len, head_dim]` of one key/value head.
    fn kv_head(&self, kv_head: usize) -> (&'a [f32], &'a [f32]) {
        let size = self.shape.len * self.shape.head_dim;
        let range = kv_head * size..(kv_head + 1) * size;
        (&self.keys[range.clone()], &self.values[range])
    }

    /// The query vector of `row` and query head `head`.
    fn query(&self, row: usize, head: usize) -> &'a [f32] {
        let head_dim = self.shape.head_dim;
        let start = (row * self.shape.num_heads + head) * head_dim;
        &self.query[start..start + head_dim]
    }
}

/// One unit of work: one key/value head and consecutive query rows.
struct Task<'o> {
    kv_head: usize,
    first_row: usize,
    /// Per row, the outputs of the key/value head's query heads (`group * head_dim`).
    outs: Vec<&'o mut [f32]>,
}

/// [`grouped_query_attention`], allowed (`simd`) or not to take the AVX-512 path.
fn attention_with(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &mut [f32],
    simd: bool,
) {
    validate(query, keys, values, shape, visibility, out);
    if out.is_empty() {
        return;
    }
    let AttentionShape {
        rows,
        len,
        num_heads,
        num_kv_heads,
        head_dim,
    } = *shape;
    #[cfg(target_arch = "x86_64")]
    let simd = simd && super::has_avx512() && head_dim <= SIMD_MAX_HEAD_DIM;
    #[cfg(not(target_arch = "x86_64"))]
    let simd = {
        let _ = simd;
        false
    };

    let row_width = num_heads * head_dim;
    let group_width = shape.group_size() * head_dim;
    let mut tasks = Vec::with_capacity(rows.div_ceil(ROW_BLOCK) * num_kv_heads);
    for (block, out_rows) in out.chunks_mut(ROW_BLOCK * row_width).enumerate() {
        let mut per_kv_head: Vec<Vec<&mut [f32]>> = (0..num_kv_heads)
            .map(|_| Vec::with_capacity(ROW_BLOCK))
            .collect();
        for out_row in out_rows.chunks_mut(row_width) {
            for (outs, part) in per_kv_head.iter_mut().zip(out_row.chunks_mut(group_width)) {
                outs.push(part);
            }
        }
        tasks.extend(
            per_kv_head
                .into_iter()
                .enumerate()
                .map(|(kv_head, outs)| Task {
                    kv_head,
                    first_row: block * ROW_BLOCK,
                    outs,
                }),
        );
    }

    let inputs = Inputs {
        query,
        keys,
        values,
        shape: *shape,
        visibility: *visibility,
        scale: 1.0 / (head_dim as f32).sqrt(),
    };
    let run = |task: Task<'_>| run_task(&inputs, task, simd);
    let work = rows
        .saturating_mul(len)
        .saturating_mul(head_dim)
        .saturating_mul(num_heads);
    if work > PARALLEL_MIN_WORK && tasks.len() > 1 {
        tasks.into_par_iter().for_each(run);
    } else {
        tasks.into_iter().for_each(run);
    }
}

/// Runs one task on the AVX-512 path (`simd`, already checked against the CPU and the head
/// dimension) or the scalar one.
fn run_task(inputs: &Inputs<'_>, task: Task<'_>, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY (every arm): `simd` is only true when AVX-512F is available and
        // `head_dim <= SIMD_MAX_HEAD_DIM`, i.e. at most 16 vectors of 16 lanes; the exact
        // instances get `NC == head_dim.div_ceil(16)`, the last one `NC == 16 >=` that. The
        // tile sizes keep `T * NC <= 12` query vectors in registers.
        unsafe {
            match inputs.shape.head_dim.div_ceil(16) {
                1 => run_task_avx512::<1, 3>(inputs, task),
                2 => run_task_avx512::<2, 3>(inputs, task),
                3 => run_task_avx512::<3, 3>(inputs, task),
                4 => run_task_avx512::<4, 3>(inputs, task),
                5 => run_task_avx512::<5, 2>(inputs, task),
                6 => run_task_avx512::<6, 2>(inputs, task),
                7 => run_task_avx512::<7, 1>(inputs, task),
                8 => run_task_avx512::<8, 1>(inputs, task),
                _ => run_task_avx512::<16, 1>(inputs, task),
            }
        }
        return;
    }
    let _ = simd;
    run_task_scalar(inputs, task);
}

/// Portable fallback: per query, an online softmax over its visible keys, one at a time.
fn run_task_scalar(inputs: &Inputs<'_>, task: Task<'_>) {
    let AttentionShape { len, head_dim, .. } = inputs.shape;
    let group = inputs.shape.group_size();
    let (keys, values) = inputs.kv_head(task.kv_head);
    for (r, out_row) in task.outs.into_iter().enumerate() {
        let row = task.first_row + r;
        let end = inputs.visibility.key_end(row, len);
        let mask = inputs.visibility.mask_row(row, len);
        for (g, out) in out_row.chunks_exact_mut(head_dim).enumerate() {
            let q = inputs.query(row, task.kv_head * group + g);
            out.fill(0.0);
            let mut max = f32::NEG_INFINITY;
            let mut sum = 0.0_f32;
            for j in 0..end {
                if mask.is_some_and(|mask| !mask[j]) {
                    continue;
                }
                let k = &keys[j * head_dim..(j + 1) * head_dim];
                let score = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * inputs.scale;
                if score > max {
                    if max > f32::NEG_INFINITY {
                        let alpha = exp_scalar(max - score);
                        sum *= alpha;
                        out.iter_mut().for_each(|o| *o *= alpha);
                    }
                    max = score;
                }
                let p = exp_scalar(score - max);
                sum += p;
                let v = &values[j * head_dim..(j + 1) * head_dim];
                for (o, &v) in out.iter_mut().zip(v) {
                    *o += p * v;
                }
            }
            if sum > 0.0 {
                let inv = 1.0 / sum;
                out.iter_mut().for_each(|o| *o *= inv);
            }
        }
    }
}

/// Running maximum and sum of exponentials of one query's online softmax.
#[derive(Clone, Copy)]
struct Running {
    max: f32,
    sum: f32,
}

/// Visibility bits of up to 16 keys (bit `i` = `flags[i]`).
fn flag_bits(flags: &[bool]) -> u16 {
    flags
        .iter()
        .enumerate()
        .fold(0, |bits, (i, &flag)| bits | (u16::from(flag) << i))
}

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
unsafe fn run_task_avx512<const NC: usize, const T: usize>(inputs: &Inputs<'_>, task: Task<'_>) {
    let AttentionShape { len, head_dim, .. } = inputs.shape;
    debug_assert!(if NC < 16 {
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
                *bits = super::tail_mask(count - first);
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
unsafe fn attend_tile<const NC: usize, const T: usize>(
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
    debug_assert!(nc <= NC && values.len() == keys.len() && count <= KEY_BLOCK);
    debug_assert!(running.len() == T && acc.len() == T * head_dim);
    debug_assert!(queries.iter().all(|q| q.len() == head_dim));
    // Lanes of the last chunk of a head row.
    let last = super::tail_mask(head_dim - 16 * (nc - 1));
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
            let e = unsafe { super::exp::exp_avx512(_mm512_sub_ps(scores[t][b], max_v)) };
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
unsafe fn dot_tile<const NC: usize, const T: usize, const FULL: bool>(
    qv: &[[__m512; NC]; T],
    nc: usize,
    last: u16,
    keys: *const f32,
    head_dim: usize,
    rows: usize,
) -> [__m512; T] {
    debug_assert!((1..=16).contains(&rows) && (!FULL || rows == 16));
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
fn fold_pairs(x: __m512, y: __m512) -> __m512 {
    _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
}

/// From `fold_pairs(a, b)` and `fold_pairs(c, d)`: per 128-bit lane, partial sums of the four
/// inputs in order `[a, b, c, d]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn fold_quads(ab: __m512, cd: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x44>(ab, cd),
        _mm512_shuffle_ps::<0xEE>(ab, cd),
    )
}

/// Adds 128-bit lanes 0 + 1 and 2 + 3 of each input: `[x01, x23, y01, y23]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn fold_lanes(x: __m512, y: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(x, y),
        _mm512_shuffle_f32x4::<0xDD>(x, y),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{assert_close, Lcg};

    /// Naive attention in f64 with a materialized score row.
    fn reference(
        query: &[f32],
        keys: &[f32],
        values: &[f32],
        shape: &AttentionShape,
        visibility: &Visibility<'_>,
    ) -> Vec<f64> {
        let AttentionShape {
            rows,
            len,
            num_heads,
            head_dim,
            ..
        } = *shape;
        let group = shape.group_size();
        let scale = 1.0 / (head_dim as f64).sqrt();
        let mut out = vec![0.0; rows * num_heads * head_dim];
        for r in 0..rows {
            for h in 0..num_heads {
                let kv = h / group;
                let q = &query[(r * num_heads + h) * head_dim..][..head_dim];
                let seen: Vec<usize> = (0..len)
                    .filter(|&j| match *visibility {
                        Visibility::All => true,
                        Visibility::Causal { cached } => j <= cached + r,
                        Visibility::Mask(mask) => mask[r * len + j],
                    })
                    .collect();
                if seen.is_empty() {
                    continue;
                }
                let scores: Vec<f64> = seen
                    .iter()
                    .map(|&j| {
                        let k = &keys[(kv * len + j) * head_dim..][..head_dim];
                        q.iter()
                            .zip(k)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                let o = &mut out[(r * num_heads + h) * head_dim..][..head_dim];
                for (&j, &w) in seen.iter().zip(&weights) {
                    let v = &values[(kv * len + j) * head_dim..][..head_dim];
                    for (o, &v) in o.iter_mut().zip(v) {
                        *o += w / total * v as f64;
                    }
                }
            }
        }
        out
    }

    struct Case {
        shape: AttentionShape,
        query: Vec<f32>,
        keys: Vec<f32>,
        values: Vec<f32>,
    }

    impl Case {
        fn new(rng: &mut Lcg, shape: AttentionShape) -> Self {
            let q_len = shape.rows * shape.num_heads * shape.head_dim;
            let kv_len = shape.num_kv_heads * shape.len * shape.head_dim;
            // Wide enough queries and keys for peaked softmaxes (scores up to ~±20).
            Self {
                shape,
                query: rng.vec(q_len, -2.0, 2.0),
                keys: rng.vec(kv_len, -2.0, 2.0),
                values: rng.vec(kv_len, -1.0, 1.0),
            }
        }

        /// Checks the public function and both paths against the reference.
        fn check(&self, visibility: &Visibility<'_>, what: &str) {
            let want = reference(
                &self.query,
                &self.keys,
                &self.values,
                &self.shape,
                visibility,
            );
            let run = |simd: Option<bool>| {
                let mut out = vec![f32::NAN; want.len()];
                match simd {
                    None => grouped_query_attention(
                        &self.query,
                        &self.keys,
                        &self.values,
                        &self.shape,
                        visibility,
                        &mut out,
                    ),
                    Some(simd) => attention_with(
                        &self.query,
                        &self.keys,
                        &self.values,
                        &self.shape,
                        visibility,
                        &mut out,
                        simd,
                    ),
                }
                out
            };
            for simd in [None, Some(false), Some(true)] {
                let what = format!("{what} {:?} simd {simd:?}", self.shape);
                assert_close(&run(simd), &want, 1e-5, &what);
            }
        }
    }

    fn shape(
        rows: usize,
        len: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
    ) -> AttentionShape {
        AttentionShape {
            rows,
            len,
            num_heads,
            num_kv_heads,
            head_dim,
        }
    }

    /// (num_heads, num_kv_heads, head_dim): SmolLM2-135M's 9/3/64, group 1 and group 3 with
    /// head dims 32, 80 (not a multiple of 16) and 128, and one head dim for each other
    /// register-tile instance of the AVX-512 path (1 to 8 and 16 vectors) plus one past it
    /// (scalar path).
    const HEADS: [(usize, usize, usize); 12] = [
        (9, 3, 64),
        (2, 2, 32),
        (6, 2, 32),
        (3, 1, 80),
        (6, 2, 80),
        (4, 4, 128),
        (3, 3, 7),
        (6, 2, 48),
        (4, 2, 96),
        (2, 1, 112),
        (2, 1, 200),
        (2, 2, 300),
    ];

    #[test]
    fn all_visible() {
        let mut rng = Lcg::new(21);
        for (num_heads, num_kv_heads, head_dim) in HEADS {
            for (rows, len) in [(1, 1), (1, 600), (3, 17), (8, 130), (20, 64), (5, 0)] {
                let case = Case::new(
                    &mut rng,
                    shape(rows, len, num_heads, num_kv_heads, head_dim),
                );
                case.check(&Visibility::All, "all");
            }
        }
    }

    #[test]
    fn causal_prefill_and_with_cache() {
        let mut rng = Lcg::new(22);
        for (num_heads, num_kv_heads, head_dim) in HEADS {
            for (rows, cached) in [
                (1, 0),
                (7, 0),
                (33, 0),
                (70, 0),
                (1, 599),
                (5, 100),
                (17, 63),
            ] {
                let len = cached + rows;
                let case = Case::new(
                    &mut rng,
                    shape(rows, len, num_heads, num_kv_heads, head_dim),
                );
                case.check(
                    &Visibility::Causal { cached },
                    &format!("causal cached {cached}"),
                );
            }
        }
    }

    #[test]
    fn explicit_masks_with_a_hidden_row() {
        let mut rng = Lcg::new(23);
        for (num_heads, num_kv_heads, head_dim) in HEADS {
            for (rows, len, density) in [(1, 40, 0.5), (6, 150, 0.3), (18, 70, 0.8), (4, 200, 0.05)]
            {
                let case = Case::new(
                    &mut rng,
                    shape(rows, len, num_heads, num_kv_heads, head_dim),
                );
                let mut mask: Vec<bool> =
                    (0..rows * len).map(|_| rng.next_unit() < density).collect();
                // Row 0 sees nothing; the last row sees only its last key.
                mask[..len].fill(false);
                if rows > 1 {
                    let last = &mut mask[(rows - 1) * len..];
                    last.fill(false);
                    last[len - 1] = true;
                }
                case.check(&Visibility::Mask(&mask), &format!("mask density {density}"));
            }
        }
    }

    #[test]
    fn parallel_prefill() {
        // Large enough for rayon: several row blocks and kv heads, causal with a cache.
        let mut rng = Lcg::new(24);
        let case = Case::new(&mut rng, shape(100, 140, 9, 3, 64));
        case.check(&Visibility::Causal { cached: 40 }, "parallel causal");
        case.check(&Visibility::All, "parallel all");
    }

    #[test]
    fn mask_matching_causal_gives_same_output() {
        let mut rng = Lcg::new(25);
        let (rows, cached) = (9, 50);
        let len = rows + cached;
        let case = Case::new(&mut rng, shape(rows, len, 9, 3, 64));
        let mask: Vec<bool> = (0..rows * len)
            .map(|i| i % len <= cached + i / len)
            .collect();
        let mut causal = vec![0.0; case.query.len()];
        let mut masked = vec![0.0; case.query.len()];
        let args = (&case.query, &case.keys, &case.values, &case.shape);
        grouped_query_attention(
            args.0,
            args.1,
            args.2,
            args.3,
            &Visibility::Causal { cached },
            &mut causal,
        );
        grouped_query_attention(
            args.0,
            args.1,
            args.2,
            args.3,
            &Visibility::Mask(&mask),
            &mut masked,
        );
        assert_eq!(causal, masked);
    }

    #[test]
    fn dot_tile_matches_scalar_dots() {
        #[cfg(target_arch = "x86_64")]
        if super::super::has_avx512() {
            let mut rng = Lcg::new(26);
            let head_dim = 50;
            let queries = rng.vec(3 * head_dim, -1.0, 1.0);
            let keys = rng.vec(16 * head_dim, -1.0, 1.0);
            for rows in [16, 7, 1] {
                let mut got = [[0.0_f32; 16]; 3];
                // SAFETY: AVX-512F is available; the loads read the 3 queries of `head_dim`
                // (4 chunks, the last masked to 2 lanes), `dot_tile` reads `rows <= 16` rows
                // of `keys`, and the stores write the 16 elements of each `got[t]`.
                unsafe {
                    let mut qv = [[_mm512_setzero_ps(); 4]; 3];
                    for (t, qv) in qv.iter_mut().enumerate() {
                        for (c, qv) in qv.iter_mut().enumerate() {
                            let mask = super::super::tail_mask(head_dim - 16 * c);
                            let q = queries.as_ptr().add(t * head_dim + 16 * c);
                            *qv = _mm512_maskz_loadu_ps(mask, q);
                        }
                    }
                    let last = super::super::tail_mask(head_dim - 48);
                    let dots = if rows == 16 {
                        dot_tile::<4, 3, true>(&qv, 4, last, keys.as_ptr(), head_dim, rows)
                    } else {
                        dot_tile::<4, 3, false>(&qv, 4, last, keys.as_ptr(), head_dim, rows)
                    };
                    for (got, dots) in got.iter_mut().zip(dots) {
                        _mm512_storeu_ps(got.as_mut_ptr(), dots);
                    }
                }
                for (t, got) in got.iter().enumerate() {
                    let q = &queries[t * head_dim..(t + 1) * head_dim];
                    let want: Vec<f64> = (0..16)
                        .map(|j| {
                            let k = &keys[j.min(rows - 1) * head_dim..][..head_dim];
                            q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum()
                        })
                        .collect();
                    assert_close(got, &want, 1e-5, &format!("dot_tile rows {rows} query {t}"));
                }
            }
        }
    }

    #[test]
    fn empty_inputs() {
        let mut out = [];
        grouped_query_attention(
            &[],
            &[],
            &[],
            &shape(0, 0, 9, 3, 64),
            &Visibility::All,
            &mut out,
        );
        let mut out = [1.0_f32; 6];
        let s = shape(1, 0, 2, 1, 3);
        grouped_query_attention(&[0.5; 6], &[], &[], &s, &Visibility::All, &mut out);
        assert_eq!(out, [0.0; 6]);
    }

    #[test]
    #[should_panic(expected = "attention: num_heads 9 is not a multiple of num_kv_heads 2")]
    fn rejects_bad_grouping() {
        let s = shape(1, 1, 9, 2, 4);
        grouped_query_attention(
            &[0.0; 36],
            &[0.0; 8],
            &[0.0; 8],
            &s,
            &Visibility::All,
            &mut [0.0; 36],
        );
    }

    #[test]
    #[should_panic(expected = "attention: causal cached 3 + rows 2 must equal len 6")]
    fn rejects_inconsistent_causal_length() {
        let s = shape(2, 6, 1, 1, 4);
        let visibility = Visibility::Causal { cached: 3 };
        grouped_query_attention(
            &[0.0; 8],
            &[0.0; 24],
            &[0.0; 24],
            &s,
            &visibility,
            &mut [0.0; 8],
        );
    }

    #[test]
    #[should_panic(expected = "attention: mask has 5 flags, expected rows 2 x len 3")]
    fn rejects_short_mask() {
        let s = shape(2, 3, 1, 1, 4);
        let mask = [true; 5];
        let visibility = Visibility::Mask(&mask);
        grouped_query_attention(
            &[0.0; 8],
            &[0.0; 12],
            &[0.0; 12],
            &s,
            &visibility,
            &mut [0.0; 8],
        );
    }

    #[test]
    #[should_panic(expected = "attention: keys have 11 elements")]
    fn rejects_short_keys() {
        let s = shape(2, 3, 1, 1, 4);
        grouped_query_attention(
            &[0.0; 8],
            &[0.0; 11],
            &[0.0; 12],
            &s,
            &Visibility::All,
            &mut [0.0; 8],
        );
    }
}
