//! [`super::KernelBackend::cached_attention`] on the CPU kernel of [`crate::kernels::attention`].

use super::storage::{f32_storage, tensor_of, values};
use crate::kernels::attention::{grouped_query_attention, AttentionShape, Visibility};
use crate::model::{AttentionContext, KvCache, SequenceSpan, SpanVisibility};
use burn::backend::Flex;
use burn::tensor::Tensor;
use burn_flex::FlexTensor;
use rayon::prelude::*;

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
    // Each sequence's new keys and values, head-major as the cache keeps them.
    let histories: Vec<(FlexTensor, FlexTensor)> = context
        .spans()
        .iter()
        .map(|span| {
            let new_rows = span.start * kv_width..(span.start + span.len) * kv_width;
            let new_entries = |storage: &FlexTensor| {
                let entries = head_major(&values(storage)[new_rows.clone()], kv_heads, head_dim);
                tensor_of(entries, [kv_heads, span.len, head_dim])
            };
            let (keys, vals) = cache.append(layer, span.slot, new_entries(&k), new_entries(&v));
            (contiguous_storage(keys), contiguous_storage(vals))
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
    type Job<'a> = (
        &'a SequenceSpan<Flex>,
        &'a (FlexTensor, FlexTensor),
        &'a mut [f32],
    );
    let run = |(span, (keys, vals), out): Job<'_>| {
        let shape = AttentionShape {
            rows: span.len,
            len: span.cached + span.len,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
        };
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
