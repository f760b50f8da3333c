//! Grouped-query self-attention with RoPE over an external [`KvCache`]: the q, k and v
//! projections of all rows of the batch at once (the large matrix products), then attention
//! per sequence against that sequence's cached keys and values.

use super::weights::Projection;
use super::{AttentionContext, KvCache, SplitLinear, WeightLoader};
use crate::backend::KernelBackend;
use crate::checkpoint::ExportedTensor;
use crate::config::LlamaConfig;
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

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
        Self::init_with_output(spec, SplitLinear::init, device)
    }

    /// Attention with random q, k and v projections and a zero output projection: it outputs
    /// zeros until trained, so a residual block around it starts as the identity.
    pub fn init_silent(spec: &AttentionSpec, device: &B::Device) -> Self {
        Self::init_with_output(spec, SplitLinear::zeros, device)
    }

    /// Random q, k and v projections and the output projection `output` makes.
    fn init_with_output(
        spec: &AttentionSpec,
        output: fn(usize, &[usize], bool, &B::Device) -> SplitLinear<B>,
        device: &B::Device,
    ) -> Self {
        let (q, kv) = (
            spec.num_heads * spec.head_dim,
            spec.num_kv_heads * spec.head_dim,
        );
        Self {
            qkv: SplitLinear::init(spec.input_size, &[q, kv, kv], spec.qkv_bias, device),
            o_proj: output(q, &[spec.output_size], spec.o_bias, device),
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
}

impl<B: KernelBackend> Attention<B> {
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
        let attended = B::cached_attention(query, key, value, context, cache, layer);
        self.o_proj.forward(attended)
    }
}
