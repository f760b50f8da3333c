//! [`super::KernelBackend::cached_attention`] on the CPU kernel of [`crate::kernels::attention`].

use super::storage::{f32_storage, tensor_of, update_in_place_or, values};
use crate::kernels::attention::{grouped_query_attention, AttentionShape, Visibility};
use crate::model::{AttentionContext, KvCache, SequenceSpan, SpanVisibility};
use burn::backend::Flex;
use burn::tensor::{DType, Tensor};
use burn_flex::FlexTensor;
use rayon::prelude::*;
use std::ops::Range;

/// A slot's key and value buffers in one layer and their rows per head.
type History = (FlexTensor, FlexTensor, usize);

/// Appends each sequence's keys and values to its cache slot and returns the attended rows
/// `[rows, heads * head_dim]`, or `None` (touching nothing) when the query, keys or values are
/// not contiguous `f32` tensors.
pub(super) fn attend_on_kernels(
    query: &Tensor<Flex, 3>,
    key: &Tensor<Flex, 3>,
    value: &Tensor<Flex, 3>,
    context: &AttentionContext<Flex>,
    cache: &mut KvCache<Flex>,
    layer: usize,
) -> Option<Tensor<Flex, 2>> {
    let (q, k, v) = (f32_storage(query)?, f32_storage(key)?, f32_storage(value)?);
    let [rows, heads, head_dim] = query.dims();
    let kv_heads = key.dims()[1];
    let kv_width = kv_heads * head_dim;
    let device = Default::default();
    // Each sequence's new keys and values, written into its cache buffers in place.
    let histories: Vec<History> = context
        .spans()
        .iter()
        .map(|span| {
            let new_rows = span.start * kv_width..(span.start + span.len) * kv_width;
            let (keys, vals) = cache.append_with(
                layer,
                span.slot,
                span.len,
                [kv_heads, head_dim],
                (&device, DType::F32),
                |keys, vals, at| {
                    let write = |buffer, storage: &FlexTensor| {
                        write_rows(buffer, at.clone(), &values(storage)[new_rows.clone()])
                    };
                    (write(keys, &k), write(vals, &v))
                },
            );
            let capacity = keys.dims()[1];
            (contiguous_storage(keys), contiguous_storage(vals), capacity)
        })
        .collect();

    let width = heads * head_dim;
    let mut out = vec![0.0f32; rows * width];
    let mut jobs = Vec::with_capacity(histories.len());
    let mut rest = out.as_mut_slice();
    for (span, history) in context.spans().iter().zip(&histories) {
        let (mine, tail) = rest.split_at_mut(span.len * width);
        jobs.push((span, history, mine));
        rest = tail;
    }
    let query = values(&q);
    type Job<'a> = (&'a SequenceSpan<Flex>, &'a History, &'a mut [f32]);
    let run = |(span, (keys, vals, kv_capacity), out): Job<'_>| {
        let shape =
            AttentionShape::new(span.len, span.cached + span.len, heads, kv_heads, head_dim)
                .with_kv_capacity(*kv_capacity);
        let visibility = match &span.visibility {
            SpanVisibility::Causal => Visibility::Causal {
                cached: span.cached,
            },
            SpanVisibility::Explicit(visible) => Visibility::Mask(visible),
        };
        let rows = span.start * width..(span.start + span.len) * width;
        grouped_query_attention(
            &query[rows],
            values(keys),
            values(vals),
            &shape,
            &visibility,
            out,
        );
    };
    if jobs.len() > 1 {
        jobs.into_par_iter().for_each(run);
    } else {
        jobs.into_iter().for_each(run);
    }
    Some(tensor_of(out, [rows, width]))
}

/// `buffer` (`[heads, capacity, head_dim]`) with `rows` (`[n, heads, head_dim]`, `n` the
/// length of `at`) written at rows `at` of every head: in place when the buffer is `f32`
/// and no other handle shares it.
fn write_rows(buffer: Tensor<Flex, 3>, at: Range<usize>, rows: &[f32]) -> Tensor<Flex, 3> {
    let [heads, capacity, head_dim] = buffer.dims();
    let row_width = heads * head_dim;
    update_in_place_or(
        buffer,
        |buffer| {
            for (r, row) in rows.chunks_exact(row_width).enumerate() {
                for (h, head) in row.chunks_exact(head_dim).enumerate() {
                    let start = (h * capacity + at.start + r) * head_dim;
                    buffer[start..start + head_dim].copy_from_slice(head);
                }
            }
        },
        |buffer| {
            let entries = head_major(rows, heads, head_dim);
            let new = tensor_of(entries, [heads, at.len(), head_dim]);
            buffer.slice_assign([0..heads, at.clone(), 0..head_dim], new)
        },
    )
}

/// `[rows, heads, head_dim]` values as `[heads, rows, head_dim]`.
fn head_major(rows: &[f32], heads: usize, head_dim: usize) -> Vec<f32> {
    let n = rows.len() / (heads * head_dim).max(1);
    let mut out = Vec::with_capacity(rows.len());
    for h in 0..heads {
        for r in 0..n {
            let start = (r * heads + h) * head_dim;
            out.extend_from_slice(&rows[start..start + head_dim]);
        }
    }
    out
}

/// The CPU storage of a cache tensor, copied to a contiguous buffer if it is a view.
fn contiguous_storage(tensor: Tensor<Flex, 3>) -> FlexTensor {
    f32_storage(&tensor).unwrap_or_else(|| {
        let copy = Tensor::<Flex, 3>::from_data(tensor.into_data(), &Default::default());
        f32_storage(&copy).expect("a fresh CPU tensor is contiguous")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(tensor: &Tensor<Flex, 3>) -> *const f32 {
        values(&f32_storage(tensor).expect("an f32 buffer")).as_ptr()
    }

    #[test]
    fn rows_are_written_head_major_into_the_buffer_in_place() {
        let buffer = Tensor::<Flex, 3>::zeros([2, 4, 3], &Default::default());
        let before = address(&buffer);
        // Two rows of two heads of three: row r, head h holds 10r + 3h + i.
        let rows: Vec<f32> = (0..2)
            .flat_map(|r| (0..6).map(move |i| (10 * r + i) as f32))
            .collect();
        let written = write_rows(buffer, 1..3, &rows);
        assert_eq!(address(&written), before);
        let got = written.into_data().to_vec::<f32>().unwrap();
        let head = |h: usize| got[h * 12..(h + 1) * 12].to_vec();
        assert_eq!(head(0), [0., 0., 0., 0., 1., 2., 10., 11., 12., 0., 0., 0.]);
        assert_eq!(head(1), [0., 0., 0., 3., 4., 5., 13., 14., 15., 0., 0., 0.]);
    }

    #[test]
    fn a_shared_buffer_is_copied_before_writing() {
        let buffer = Tensor::<Flex, 3>::zeros([1, 2, 2], &Default::default());
        let kept = buffer.clone();
        let written = write_rows(buffer, 0..1, &[1.0, 2.0]);
        assert_eq!(
            written.into_data().to_vec::<f32>().unwrap(),
            [1., 2., 0., 0.]
        );
        assert_eq!(kept.into_data().to_vec::<f32>().unwrap(), [0.; 4]);
    }
}
