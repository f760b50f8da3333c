//! Grouped-query scaled-dot-product attention, flash-attention style.
//!
//! Keys are visited in blocks of [`KEY_BLOCK`]; each query keeps a running maximum, a running
//! sum of exponentials and an f32 accumulator of the weighted values (online softmax), so no
//! score matrix larger than one block of one query exists. The AVX-512 path computes 16 dot
//! products at a time (head dimension in the lanes, then a transpose-and-add reduction that
//! leaves the 16 scores in one vector), exponentiates them with [`super::exp::exp_avx512`] and
//! accumulates the weighted values 16 dimensions per instruction.
//!
//! Work is split into tasks of (key/value head, block of [`ROW_BLOCK`] query rows); a task
//! handles every query head of its key/value group for its rows, so each block of keys and
//! values is loaded once and reused from cache by all of them. Tasks run on rayon when the
//! problem is large enough to pay for it (prefill), serially otherwise (decode).

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
        num_heads % num_kv_heads == 0,
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
        // instances get `NC == head_dim.div_ceil(16)`, the last one `NC == 16 >=` that.
        unsafe {
            match inputs.shape.head_dim.div_ceil(16) {
                1 => run_task_avx512::<1>(inputs, task),
                2 => run_task_avx512::<2>(inputs, task),
                3 => run_task_avx512::<3>(inputs, task),
                4 => run_task_avx512::<4>(inputs, task),
                5 => run_task_avx512::<5>(inputs, task),
                6 => run_task_avx512::<6>(inputs, task),
                7 => run_task_avx512::<7>(inputs, task),
                8 => run_task_avx512::<8>(inputs, task),
                _ => run_task_avx512::<16>(inputs, task),
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

/// AVX-512 path of one task; `NC` is the number of 16-lane vectors per head (exact for
/// `NC < 16`, an upper bound for `NC == 16`).
///
/// For each block of keys, each row of the task works out which keys it sees (shared by the
/// query heads of the group), then each query head updates its online softmax and accumulator.
///
/// # Safety
///
/// The CPU must support AVX-512F, and `head_dim.div_ceil(16)` must equal `NC` (`NC < 16`) or
/// be at most 16 (`NC == 16`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_task_avx512<const NC: usize>(inputs: &Inputs<'_>, task: Task<'_>) {
    let AttentionShape { len, head_dim, .. } = inputs.shape;
    debug_assert!(if NC < 16 {
        head_dim.div_ceil(16) == NC
    } else {
        head_dim <= 16 * NC
    });
    let group = inputs.shape.group_size();
    let (keys, values) = inputs.kv_head(task.kv_head);
    let rows = task.outs.len();
    let mut running = vec![
        Running {
            max: f32::NEG_INFINITY,
            sum: 0.0
        };
        rows * group
    ];
    let mut acc = vec![0.0_f32; rows * group * head_dim];
    let visibility = &inputs.visibility;
    let task_end = visibility.key_end(task.first_row + rows - 1, len);

    let mut block_start = 0;
    while block_start < task_end {
        let block_end = (block_start + KEY_BLOCK).min(task_end);
        for r in 0..rows {
            let row = task.first_row + r;
            // Causal rows end inside or before this block: later blocks are never visited.
            let end = visibility.key_end(row, len).min(block_end);
            if end <= block_start {
                continue;
            }
            let count = end - block_start;
            let mask = visibility
                .mask_row(row, len)
                .map(|mask| &mask[block_start..end]);
            let mut visible = [0_u16; KEY_BLOCK / 16];
            let sub_blocks = count.div_ceil(16);
            for (b, bits) in visible[..sub_blocks].iter_mut().enumerate() {
                let first = 16 * b;
                *bits = super::tail_mask(count - first);
                if let Some(mask) = mask {
                    *bits &= flag_bits(&mask[first..(first + 16).min(count)]);
                }
            }
            if visible.iter().all(|&bits| bits == 0) {
                continue;
            }
            let block_keys = &keys[block_start * head_dim..end * head_dim];
            let block_values = &values[block_start * head_dim..end * head_dim];
            for g in 0..group {
                let index = r * group + g;
                let q = inputs.query(row, task.kv_head * group + g);
                // SAFETY: AVX-512F is enabled here; `q` has `head_dim` elements, the blocks
                // `count` rows of `head_dim`, `visible` one entry per 16 keys of the block
                // and `acc` `head_dim` elements; `head_dim` fits `NC` (this function's
                // contract).
                unsafe {
                    attend_block::<NC>(
                        q,
                        block_keys,
                        block_values,
                        &visible[..sub_blocks],
                        inputs.scale,
                        &mut running[index],
                        &mut acc[index * head_dim..(index + 1) * head_dim],
                    );
                }
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

/// One query against one block of keys: scores, online-softmax update, weighted values.
///
/// `keys` and `values` hold the block's `count` rows of `head_dim = q.len()`; bit `i` of
/// `visible[b]` says whether key `16 b + i` is visible (bits at or past `count` are clear).
///
/// # Safety
///
/// The CPU must support AVX-512F; `acc.len() == q.len()`, `keys` and `values` hold the same
/// whole number of rows of `q.len()`, `visible.len() == count.div_ceil(16) <= KEY_BLOCK / 16`
/// and `q.len().div_ceil(16)` equals `NC` (`NC < 16`) or is at most 16 (`NC == 16`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn attend_block<const NC: usize>(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    visible: &[u16],
    scale: f32,
    running: &mut Running,
    acc: &mut [f32],
) {
    let head_dim = q.len();
    let count = keys.len() / head_dim;
    let nc = if NC < 16 { NC } else { head_dim.div_ceil(16) };
    debug_assert!(nc <= NC && acc.len() == head_dim && values.len() == keys.len());
    debug_assert!(visible.len() == count.div_ceil(16) && visible.len() <= KEY_BLOCK / 16);

    let mut masks = [0_u16; NC];
    let mut qv = [_mm512_setzero_ps(); NC];
    for c in 0..nc {
        masks[c] = super::tail_mask(head_dim - 16 * c);
        // SAFETY: the mask selects lanes `16 c..min(16 c + 16, head_dim)`, inside `q`.
        qv[c] = unsafe { _mm512_maskz_loadu_ps(masks[c], q.as_ptr().add(16 * c)) };
    }

    // Scores of the visible keys (scaled), -inf elsewhere, and their maximum.
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let scale = _mm512_set1_ps(scale);
    let mut scores = [neg_inf; KEY_BLOCK / 16];
    let mut block_max = neg_inf;
    for (b, &bits) in visible.iter().enumerate() {
        if bits == 0 {
            continue;
        }
        let rows = (count - 16 * b).min(16);
        // SAFETY: rows `16 b..16 b + rows` of `keys` exist (`16 b < count`).
        let dots = unsafe {
            dot16::<NC>(
                &qv,
                &masks,
                nc,
                keys.as_ptr().add(16 * b * head_dim),
                head_dim,
                rows,
            )
        };
        let s = _mm512_mask_mul_ps(neg_inf, bits, dots, scale);
        scores[b] = s;
        block_max = _mm512_max_ps(block_max, s);
    }
    let block_max = _mm512_reduce_max_ps(block_max);
    if block_max == f32::NEG_INFINITY {
        return;
    }

    // Rescale the running sum (and below the accumulator) to the new maximum.
    let max = running.max.max(block_max);
    let alpha = if running.max == f32::NEG_INFINITY {
        0.0
    } else {
        exp_scalar(running.max - max)
    };
    let max_v = _mm512_set1_ps(max);
    let mut probs = [0.0_f32; KEY_BLOCK];
    let mut sum = _mm512_setzero_ps();
    for (b, &bits) in visible.iter().enumerate() {
        if bits == 0 {
            continue;
        }
        // SAFETY: AVX-512F is enabled here.
        let e = unsafe { super::exp::exp_avx512(_mm512_sub_ps(scores[b], max_v)) };
        let p = _mm512_maskz_mov_ps(bits, e);
        sum = _mm512_add_ps(sum, p);
        // SAFETY: `16 b + 16 <= 16 visible.len() <= KEY_BLOCK`, inside `probs`.
        unsafe { _mm512_storeu_ps(probs.as_mut_ptr().add(16 * b), p) };
    }
    running.sum = running.sum * alpha + _mm512_reduce_add_ps(sum);
    running.max = max;

    // acc = acc * alpha + sum_j p_j v_j, two keys at a time into two accumulator sets.
    let alpha = _mm512_set1_ps(alpha);
    let mut even = [_mm512_setzero_ps(); NC];
    let mut odd = [_mm512_setzero_ps(); NC];
    for c in 0..nc {
        // SAFETY: the mask selects lanes `16 c..min(16 c + 16, head_dim)`, inside `acc`.
        let a = unsafe { _mm512_maskz_loadu_ps(masks[c], acc.as_ptr().add(16 * c)) };
        even[c] = _mm512_mul_ps(a, alpha);
    }
    for (b, &bits) in visible.iter().enumerate() {
        if bits == 0 {
            continue;
        }
        let first = 16 * b;
        let last = (first + 16).min(count);
        let mut j = first;
        while j + 2 <= last {
            let p0 = _mm512_set1_ps(probs[j]);
            let p1 = _mm512_set1_ps(probs[j + 1]);
            for c in 0..nc {
                // SAFETY: rows `j` and `j + 1 < count` of `values` exist; the mask keeps
                // the lanes inside the row.
                unsafe {
                    let v0 = values.as_ptr().add(j * head_dim + 16 * c);
                    let v1 = v0.add(head_dim);
                    let v0 = _mm512_maskz_loadu_ps(masks[c], v0);
                    let v1 = _mm512_maskz_loadu_ps(masks[c], v1);
                    even[c] = _mm512_fmadd_ps(p0, v0, even[c]);
                    odd[c] = _mm512_fmadd_ps(p1, v1, odd[c]);
                }
            }
            j += 2;
        }
        if j < last {
            let p0 = _mm512_set1_ps(probs[j]);
            for c in 0..nc {
                // SAFETY: row `j < count` of `values` exists; the mask keeps the lanes
                // inside the row.
                unsafe {
                    let v0 = values.as_ptr().add(j * head_dim + 16 * c);
                    let v0 = _mm512_maskz_loadu_ps(masks[c], v0);
                    even[c] = _mm512_fmadd_ps(p0, v0, even[c]);
                }
            }
        }
    }
    for c in 0..nc {
        let a = _mm512_add_ps(even[c], odd[c]);
        // SAFETY: the mask selects lanes `16 c..min(16 c + 16, head_dim)`, inside `acc`.
        unsafe { _mm512_mask_storeu_ps(acc.as_mut_ptr().add(16 * c), masks[c], a) };
    }
}

/// Dot products of the query (`qv`, `nc` vectors, lane masks `masks`) with `rows <= 16`
/// consecutive key rows of `head_dim` starting at `keys`: lane `j < rows` holds the product
/// with row `j`; lanes past `rows` repeat the last row's product.
///
/// # Safety
///
/// The CPU must support AVX-512F; `rows` is in `1..=16` and `keys` points to `rows` readable
/// rows of `head_dim` f32; `masks[c]` selects lanes `16 c..min(16 c + 16, head_dim)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dot16<const NC: usize>(
    qv: &[__m512; NC],
    masks: &[u16; NC],
    nc: usize,
    keys: *const f32,
    head_dim: usize,
    rows: usize,
) -> __m512 {
    debug_assert!((1..=16).contains(&rows));
    let mut dots = [_mm512_setzero_ps(); 16];
    for (j, dot) in dots.iter_mut().enumerate() {
        // SAFETY: `j.min(rows - 1) < rows`, a readable row.
        let row = unsafe { keys.add(j.min(rows - 1) * head_dim) };
        let mut sum = _mm512_setzero_ps();
        for c in 0..nc {
            // SAFETY: the mask keeps the lanes inside the row.
            let k = unsafe { _mm512_maskz_loadu_ps(masks[c], row.add(16 * c)) };
            sum = _mm512_fmadd_ps(qv[c], k, sum);
        }
        *dot = sum;
    }
    transpose_sum16(&dots)
}

/// Lane `j` of the result is the sum of the 16 lanes of `v[j]`.
///
/// Three rounds of shuffles and adds halve the number of vectors while keeping partial sums
/// of every input: pairs within 128-bit lanes (unpack), quadruples within 128-bit lanes
/// (`shuffle_ps`), then across 128-bit lanes twice (`shuffle_f32x4`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose_sum16(v: &[__m512; 16]) -> __m512 {
    // Per 128-bit lane: [x0 + x2, y0 + y2, x1 + x3, y1 + y3].
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn pairs(x: __m512, y: __m512) -> __m512 {
        _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
    }
    // Per 128-bit lane: partial sums of inputs [a, b, c, d] from pairs (a, b) and (c, d).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn quads(ab: __m512, cd: __m512) -> __m512 {
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(ab, cd),
            _mm512_shuffle_ps::<0xEE>(ab, cd),
        )
    }
    // Adds 128-bit lanes 0 + 1 and 2 + 3 of each input: [x01, x23, y01, y23].
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn lanes(x: __m512, y: __m512) -> __m512 {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        )
    }
    let q0 = quads(pairs(v[0], v[1]), pairs(v[2], v[3]));
    let q1 = quads(pairs(v[4], v[5]), pairs(v[6], v[7]));
    let q2 = quads(pairs(v[8], v[9]), pairs(v[10], v[11]));
    let q3 = quads(pairs(v[12], v[13]), pairs(v[14], v[15]));
    lanes(lanes(q0, q1), lanes(q2, q3))
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
    /// head dims 32, 80 (not a multiple of 16), 128 and a few odd ones.
    const HEADS: [(usize, usize, usize); 8] = [
        (9, 3, 64),
        (2, 2, 32),
        (3, 1, 80),
        (4, 4, 128),
        (6, 2, 80),
        (3, 3, 7),
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
    fn transpose_sum_matches_lane_sums() {
        #[cfg(target_arch = "x86_64")]
        if super::super::has_avx512() {
            let mut rng = Lcg::new(26);
            let data = rng.vec(256, -1.0, 1.0);
            let mut got = [0.0_f32; 16];
            // SAFETY: AVX-512F is available; the loads read 16 rows of 16 from `data` (256
            // elements) and the store writes the 16 elements of `got`.
            unsafe {
                let mut v = [_mm512_setzero_ps(); 16];
                for (j, v) in v.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(data.as_ptr().add(16 * j));
                }
                _mm512_storeu_ps(got.as_mut_ptr(), transpose_sum16(&v));
            }
            let want: Vec<f64> = data
                .chunks(16)
                .map(|row| row.iter().map(|&x| x as f64).sum())
                .collect();
            assert_close(&got, &want, 1e-6, "transpose_sum16");
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
