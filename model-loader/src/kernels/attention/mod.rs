//! Grouped-query scaled-dot-product attention, flash-attention style.
//!
//! Keys are visited in blocks of [`KEY_BLOCK`]; each query keeps a running maximum, a running
//! sum of exponentials and an f32 accumulator of the weighted values (online softmax), so no
//! score matrix larger than one block of a few queries exists.
//!
//! Work is split into tasks of (key/value head, block of [`ROW_BLOCK`] query rows, or one row
//! when there are fewer); a task handles every query head of its key/value group for its rows,
//! so each block of keys and values is reused from cache by all of them. Tasks run on rayon
//! when the problem is large enough to pay for it (prefill, verification, long contexts),
//! serially otherwise (decoding a short context).
//!
//! The AVX-512 path takes a task's queries a few at a time (a tile: for SmolLM2-135M's 9/3
//! heads of 64, the three heads of one row) and keeps the tile's query vectors in registers.
//! Each 16-lane chunk of a key row is loaded once and multiplied into every query of the tile
//! (head dimension in the lanes); a transpose-and-add reduction then leaves the scores of 16
//! keys in one vector, which is exponentiated with [`super::exp::exp_avx512`]. The weighted
//! sum of values likewise loads each value row once for the whole tile. Sharing the loads
//! matters: a 512-bit load issues about once per cycle, half the rate of fused multiply-adds.
//! CPUs with AVX2 but no AVX-512 take one query at a time on 8-lane vectors (module `avx2`).
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

/// `rows * len * head_dim * num_heads` above which the tasks run on rayon: a k = 3
/// verification's four rows over a couple of hundred keys, or one row over several hundred, are
/// worth splitting; a single row over fewer keys is not.
const PARALLEL_MIN_WORK: usize = 1 << 18;

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
    /// Rows each key/value head occupies in the key and value buffers, at least `len`: a KV
    /// cache's preallocated buffers hold `[num_kv_heads, kv_capacity, head_dim]` of which the
    /// first `len` rows per head are read.
    pub kv_capacity: usize,
}

impl AttentionShape {
    /// The shape of keys and values exactly `len` rows per head.
    pub fn new(
        rows: usize,
        len: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
    ) -> Self {
        Self {
            rows,
            len,
            num_heads,
            num_kv_heads,
            head_dim,
            kv_capacity: len,
        }
    }

    /// The same shape over buffers of `kv_capacity` rows per key/value head.
    pub fn with_kv_capacity(self, kv_capacity: usize) -> Self {
        Self {
            kv_capacity,
            ..self
        }
    }

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

impl<'a> Visibility<'a> {
    /// End (exclusive) of the keys `row` may see; keys before it may still be masked.
    fn key_end(&self, row: usize, len: usize) -> usize {
        match *self {
            Visibility::Causal { cached } => (cached + row + 1).min(len),
            Visibility::All | Visibility::Mask(_) => len,
        }
    }

    /// The mask row of `row` (`len` flags), if the visibility is an explicit mask.
    fn mask_row(&self, row: usize, len: usize) -> Option<&'a [bool]> {
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
/// fully overwritten); `keys` and `values` are `[num_kv_heads, kv_capacity, head_dim]`, of
/// which the first `len` rows of each head are read. Query head `h`
/// uses key/value head `h / (num_heads / num_kv_heads)`. A row that sees no key gets zeros.
/// Scores, softmax and accumulation are in f32.
///
/// # Panics
///
/// If the shape is inconsistent (zero `head_dim` or `num_kv_heads`, `num_heads` not a multiple
/// of `num_kv_heads`, `kv_capacity` below `len`), a slice length does not match it, a causal
/// `cached + rows != len` or a mask is not `rows * len` long.
pub fn grouped_query_attention(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &mut [f32],
) {
    attention_with(query, keys, values, shape, visibility, out, Allowed::Any);
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
        kv_capacity,
    } = *shape;
    assert!(head_dim > 0, "attention: head_dim must be positive");
    assert!(num_kv_heads > 0, "attention: num_kv_heads must be positive");
    assert!(
        num_heads.is_multiple_of(num_kv_heads),
        "attention: num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}"
    );
    assert!(
        kv_capacity >= len,
        "attention: kv_capacity {kv_capacity} is below len {len}"
    );
    let query_len = rows * num_heads * head_dim;
    let kv_len = num_kv_heads * kv_capacity * head_dim;
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
        "attention: keys have {} elements, expected num_kv_heads {num_kv_heads} x kv_capacity {kv_capacity} x head_dim {head_dim}",
        keys.len()
    );
    assert_eq!(
        values.len(),
        kv_len,
        "attention: values have {} elements, expected num_kv_heads {num_kv_heads} x kv_capacity {kv_capacity} x head_dim {head_dim}",
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
        let head_dim = self.shape.head_dim;
        let start = kv_head * self.shape.kv_capacity * head_dim;
        let range = start..start + self.shape.len * head_dim;
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

/// Which implementation runs the tasks of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// Tiles of queries on 16-lane vectors.
    Avx512,
    /// One query at a time on 8-lane vectors, with this many vectors per head.
    Avx2(usize),
    /// Scalar.
    Portable,
}

/// The widest implementation a call may take (the tests pin each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Allowed {
    /// The scalar path only.
    Scalar,
    /// The AVX2 path where the CPU has it, even where it has AVX-512 (only tests ask).
    #[cfg_attr(not(test), allow(dead_code))]
    Avx2,
    /// The widest path the CPU has.
    Any,
}

/// One query of a task: the end of its row's visible keys and its mask row, its vector and
/// its output.
struct Query<'a, 'o> {
    end: usize,
    mask: Option<&'a [bool]>,
    q: &'a [f32],
    out: &'o mut [f32],
}

impl Task<'_> {
    /// Calls `f` on every query of the task: row by row, the query heads of its key/value
    /// head in order.
    fn for_each_query<'a>(self, inputs: &Inputs<'a>, mut f: impl FnMut(Query<'a, '_>)) {
        let AttentionShape { len, head_dim, .. } = inputs.shape;
        let group = inputs.shape.group_size();
        for (r, out_row) in self.outs.into_iter().enumerate() {
            let row = self.first_row + r;
            let end = inputs.visibility.key_end(row, len);
            let mask = inputs.visibility.mask_row(row, len);
            for (g, out) in out_row.chunks_exact_mut(head_dim).enumerate() {
                let q = inputs.query(row, self.kv_head * group + g);
                f(Query { end, mask, q, out });
            }
        }
    }
}

/// [`grouped_query_attention`] on at most the path `allowed`.
fn attention_with(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &mut [f32],
    allowed: Allowed,
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
        ..
    } = *shape;
    #[cfg(target_arch = "x86_64")]
    let path = if allowed == Allowed::Any && super::has_avx512() && head_dim <= SIMD_MAX_HEAD_DIM {
        Path::Avx512
    } else if allowed != Allowed::Scalar && super::has_avx2() && avx2::fits(head_dim) {
        Path::Avx2(head_dim / 8)
    } else {
        Path::Portable
    };
    #[cfg(not(target_arch = "x86_64"))]
    let path = {
        let _ = allowed;
        Path::Portable
    };

    let row_width = num_heads * head_dim;
    let group_width = shape.group_size() * head_dim;
    // Fewer rows than a block (verification, a few decoding rows) get one task per row and
    // key/value head, so that the two halves of a parallel call are about even.
    let row_block = if rows < ROW_BLOCK { 1 } else { ROW_BLOCK };
    let mut tasks = Vec::with_capacity(rows.div_ceil(row_block) * num_kv_heads);
    for (block, out_rows) in out.chunks_mut(row_block * row_width).enumerate() {
        let mut per_kv_head: Vec<Vec<&mut [f32]>> = (0..num_kv_heads)
            .map(|_| Vec::with_capacity(row_block))
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
                    first_row: block * row_block,
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
    let run = |task: Task<'_>| run_task(&inputs, task, path);
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

/// Runs one task on `path` (already checked against the CPU and the head dimension).
fn run_task(inputs: &Inputs<'_>, task: Task<'_>, path: Path) {
    #[cfg(target_arch = "x86_64")]
    if path == Path::Avx512 {
        // SAFETY (every arm): the AVX-512 path is only chosen when AVX-512F is available and
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
    #[cfg(target_arch = "x86_64")]
    if let Path::Avx2(vectors) = path {
        // SAFETY (every arm): the AVX2 path is only chosen when AVX2 and FMA are available
        // and `head_dim` is `8 * vectors` with `vectors <= 16` (`avx2::fits`).
        unsafe {
            match vectors {
                1 => avx2::run_task_avx2::<1>(inputs, task),
                2 => avx2::run_task_avx2::<2>(inputs, task),
                4 => avx2::run_task_avx2::<4>(inputs, task),
                8 => avx2::run_task_avx2::<8>(inputs, task),
                12 => avx2::run_task_avx2::<12>(inputs, task),
                16 => avx2::run_task_avx2::<16>(inputs, task),
                _ => run_task_scalar(inputs, task),
            }
        }
        return;
    }
    let _ = path;
    run_task_scalar(inputs, task);
}

/// Portable fallback: per query, an online softmax over its visible keys, one at a time.
fn run_task_scalar(inputs: &Inputs<'_>, task: Task<'_>) {
    let head_dim = inputs.shape.head_dim;
    let (keys, values) = inputs.kv_head(task.kv_head);
    task.for_each_query(inputs, |Query { end, mask, q, out }| {
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
    });
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

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
use avx512::*;

#[cfg(test)]
mod tests;
