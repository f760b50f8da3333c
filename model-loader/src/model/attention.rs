//! Grouped-query self-attention with RoPE over an external [`KvCache`]: the q, k and v
//! projections of all rows of the batch at once (the large matrix products), then attention
//! per sequence against that sequence's cached keys and values.

use super::context::{SequenceSpan, SpanVisibility};
use super::weights::Projection;
use super::{AttentionContext, KvCache, SplitLinear, WeightLoader};
use crate::checkpoint::ExportedTensor;
use crate::config::LlamaConfig;
use crate::kernels::attention::{grouped_query_attention, AttentionShape, Visibility};
use crate::kernels::flex::{f32_storage, values};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Tensor, TensorData};
use burn_flex::FlexTensor;
use rayon::prelude::*;

/// Shape of an attention block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionSpec {
    /// Width of the input rows (the hidden size; twice it for an EAGLE-3 midlayer).
    pub input_size: usize,
    /// Width of the output rows (the hidden size).
    pub output_size: usize,
    /// Number of query heads.
    pub num_heads: usize,
    /// Number of key/value heads; divides `num_heads`.
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Whether q, k and v projections have biases.
    pub qkv_bias: bool,
    /// Whether the output projection has a bias.
    pub o_bias: bool,
}

impl AttentionSpec {
    /// The attention of a layer of `config` (input and output `hidden_size` wide).
    pub fn from_config(config: &LlamaConfig) -> Self {
        Self {
            input_size: config.hidden_size,
            output_size: config.hidden_size,
            num_heads: config.num_attention_heads,
            num_kv_heads: config.num_key_value_heads,
            head_dim: config.head_dim,
            qkv_bias: config.qkv_bias,
            o_bias: config.o_bias,
        }
    }

    /// The same attention reading rows `input_size` wide.
    pub fn with_input_size(self, input_size: usize) -> Self {
        Self { input_size, ..self }
    }

    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// Grouped-query self-attention with RoPE.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// q, k and v projections, one block each.
    qkv: SplitLinear<B>,
    /// Output projection `[heads * head_dim, output]`.
    o_proj: SplitLinear<B>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl<B: Backend> Attention<B> {
    /// Randomly initialized attention (for training a draft head).
    pub fn init(spec: &AttentionSpec, device: &B::Device) -> Self {
        let (q, kv) = (
            spec.num_heads * spec.head_dim,
            spec.num_kv_heads * spec.head_dim,
        );
        Self {
            qkv: SplitLinear::init(spec.input_size, &[q, kv, kv], spec.qkv_bias, device),
            o_proj: SplitLinear::init(q, &[spec.output_size], spec.o_bias, device),
            num_heads: spec.num_heads,
            num_kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
        }
    }

    /// Loads `{prefix}.{q,k,v,o}_proj.weight` (and biases as `spec` says), e.g. with prefix
    /// `model.layers.3.self_attn`.
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        prefix: &str,
        spec: &AttentionSpec,
    ) -> Option<Self> {
        let (q_width, kv_width) = (
            spec.num_heads * spec.head_dim,
            spec.num_kv_heads * spec.head_dim,
        );
        let (q, k, v) = (
            format!("{prefix}.q_proj"),
            format!("{prefix}.k_proj"),
            format!("{prefix}.v_proj"),
        );
        let qkv = loader.projections(
            &[
                Projection {
                    prefix: &q,
                    out: q_width,
                },
                Projection {
                    prefix: &k,
                    out: kv_width,
                },
                Projection {
                    prefix: &v,
                    out: kv_width,
                },
            ],
            spec.input_size,
            spec.qkv_bias,
        );
        let o_proj = loader.linear(
            &format!("{prefix}.o_proj"),
            q_width,
            spec.output_size,
            spec.o_bias,
        );
        Some(Self {
            qkv: qkv?,
            o_proj: o_proj?,
            num_heads: spec.num_heads,
            num_kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
        })
    }

    /// The weights as [`Attention::load`] reads them: `{prefix}.{q,k,v,o}_proj.weight`
    /// (`[out, in]`) and their biases if the attention has them.
    pub fn export(&self, prefix: &str) -> Vec<ExportedTensor> {
        let (q, k, v) = (
            format!("{prefix}.q_proj"),
            format!("{prefix}.k_proj"),
            format!("{prefix}.v_proj"),
        );
        let mut out = self.qkv.export_projections(&[&q, &k, &v]);
        out.extend(self.o_proj.export_projection(&format!("{prefix}.o_proj")));
        out
    }

    /// Attends the rows `x` (`[rows, input]`, the batch's sequences one after another) to
    /// themselves and to their slots' history in `layer` of `cache`, appending their keys and
    /// values there. Returns `[rows, output]`.
    ///
    /// `context` must have been built for this batch and this attention's group size.
    pub fn forward(
        &self,
        x: Tensor<B, 2>,
        context: &AttentionContext<B>,
        cache: &mut KvCache<B>,
        layer: usize,
    ) -> Tensor<B, 2> {
        let (heads, kv_heads, head_dim) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let group = heads / kv_heads;
        assert_eq!(
            group,
            context.group_size(),
            "attention context built for another group size"
        );
        let [rows, _] = x.dims();
        let [query, key, value]: [Tensor<B, 2>; 3] = self
            .qkv
            .forward_blocks(x)
            .try_into()
            .unwrap_or_else(|_| panic!("the q/k/v layer has three projections"));
        let query = context.rope().apply(query.reshape([rows, heads, head_dim]));
        let key = context
            .rope()
            .apply(key.reshape([rows, kv_heads, head_dim]));
        let value = value.reshape([rows, kv_heads, head_dim]);
        if let Some(attended) = attend_on_cpu(&query, &key, &value, context, cache, layer) {
            return self.o_proj.forward(attended);
        }

        let mut outputs: Vec<Tensor<B, 2>> = context
            .spans()
            .iter()
            .map(|span| {
                let n = span.len;
                let rows_of = |t: &Tensor<B, 3>| t.clone().narrow(0, span.start, n);
                let (query, key, value) = (rows_of(&query), rows_of(&key), rows_of(&value));
                let mask = span.generic_mask(group, &query.device());
                let (keys, values) =
                    cache.append(layer, span.slot, key.swap_dims(0, 1), value.swap_dims(0, 1));
                // Query heads of one key/value head become consecutive row blocks.
                let query = query
                    .reshape([n, kv_heads, group, head_dim])
                    .permute([1, 2, 0, 3])
                    .reshape([1, kv_heads, group * n, head_dim]);
                let attended = attend(query, keys.unsqueeze_dim(0), values.unsqueeze_dim(0), mask);
                attended
                    .reshape([kv_heads, group, n, head_dim])
                    .permute([2, 0, 1, 3])
                    .reshape([n, heads * head_dim])
            })
            .collect();
        let attended = if outputs.len() == 1 {
            outputs.pop().expect("one output")
        } else {
            Tensor::cat(outputs, 0)
        };
        self.o_proj.forward(attended)
    }
}

/// [`Attention::forward`]'s attention on the CPU backend in `f32`, by the kernel of
/// [`crate::kernels::attention`]: appends each sequence's keys and values to its cache slot
/// and returns `[rows, heads * head_dim]`, or `None` (touching nothing) when the tensors are
/// not the CPU backend's.
fn attend_on_cpu<B: Backend>(
    query: &Tensor<B, 3>,
    key: &Tensor<B, 3>,
    value: &Tensor<B, 3>,
    context: &AttentionContext<B>,
    cache: &mut KvCache<B>,
    layer: usize,
) -> Option<Tensor<B, 2>> {
    let (q, k, v) = (f32_storage(query)?, f32_storage(key)?, f32_storage(value)?);
    let [rows, heads, head_dim] = query.dims();
    let kv_heads = key.dims()[1];
    let device = query.device();
    let kv_width = kv_heads * head_dim;
    // Each sequence's new keys and values, head-major as the cache keeps them.
    let histories: Vec<(FlexTensor, FlexTensor)> = context
        .spans()
        .iter()
        .map(|span| {
            let new_rows = span.start * kv_width..(span.start + span.len) * kv_width;
            let new_entries = |storage: &FlexTensor| {
                let entries = head_major(&values(storage)[new_rows.clone()], kv_heads, head_dim);
                Tensor::<B, 3>::from_data(
                    TensorData::new(entries, [kv_heads, span.len, head_dim]),
                    &device,
                )
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
    type Job<'a, B> = (
        &'a SequenceSpan<B>,
        &'a (FlexTensor, FlexTensor),
        &'a mut [f32],
    );
    let run = |(span, (keys, vals), out): Job<'_, B>| {
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
    Some(Tensor::from_data(
        TensorData::new(out, [rows, width]),
        &device,
    ))
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
fn contiguous_storage<B: Backend>(tensor: Tensor<B, 3>) -> FlexTensor {
    f32_storage(&tensor).unwrap_or_else(|| {
        let device = tensor.device();
        let copy = Tensor::<B, 3>::from_data(tensor.into_data(), &device);
        f32_storage(&copy).expect("a fresh CPU tensor is contiguous")
    })
}

/// Multiply-adds from which the CPU backend parallelizes one matrix product by itself.
const PARALLEL_WORK: usize = 192 * 192 * 192;

/// Scaled dot-product attention of `query` (`[1, kv_heads, rows, head_dim]`) over `keys` and
/// `values` (`[1, kv_heads, len, head_dim]`), `mask` (`[1, 1, rows, len]`, `true` = hidden).
///
/// The CPU backend computes attention on one thread; when the work is large (a long prefill)
/// the key/value heads are attended on separate worker threads.
fn attend<B: Backend>(
    query: Tensor<B, 4>,
    keys: Tensor<B, 4>,
    values: Tensor<B, 4>,
    mask: Option<Tensor<B, 4, Bool>>,
) -> Tensor<B, 4> {
    let [_, kv_heads, rows, head_dim] = query.dims();
    let len = keys.dims()[2];
    let options = AttentionModuleOptions::default();
    if kv_heads == 1 || rows * len * head_dim < PARALLEL_WORK {
        return attention(query, keys, values, mask, None, options);
    }
    let per_head: Vec<Tensor<B, 4>> = (0..kv_heads)
        .into_par_iter()
        .map(|h| {
            let head = |t: &Tensor<B, 4>| t.clone().narrow(1, h, 1);
            attention(
                head(&query),
                head(&keys),
                head(&values),
                mask.clone(),
                None,
                options,
            )
        })
        .collect();
    Tensor::cat(per_head, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::Distribution;

    type B = Flex;

    #[test]
    fn head_parallel_attention_equals_one_call() {
        let device = Default::default();
        // 2 heads, 256 query rows over 256 keys of width 128: above the parallel threshold.
        let shape = [1, 2, 256, 128];
        let query = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let keys = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let values = Tensor::<B, 4>::random(shape, Distribution::Default, &device);
        let causal: Vec<bool> = (0..256 * 256).map(|i| i % 256 > i / 256).collect();
        let mask = Tensor::<B, 4, Bool>::from_data(
            burn::tensor::TensorData::new(causal, [1, 1, 256, 256]),
            &device,
        );
        const { assert!(256 * 256 * 128 >= PARALLEL_WORK) };
        let split: Vec<f32> = attend(
            query.clone(),
            keys.clone(),
            values.clone(),
            Some(mask.clone()),
        )
        .into_data()
        .to_vec()
        .unwrap();
        let whole: Vec<f32> = attention(
            query,
            keys,
            values,
            Some(mask),
            None,
            AttentionModuleOptions::default(),
        )
        .into_data()
        .to_vec()
        .unwrap();
        assert_eq!(split.len(), whole.len());
        for (a, b) in split.iter().zip(&whole) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
