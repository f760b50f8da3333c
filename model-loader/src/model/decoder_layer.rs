//! One pre-norm Llama decoder layer:
//! `x = x + attention(input_norm(x)); x = x + mlp(post_attention_norm(x))`.
//! The input norm is optional (EAGLE-1's layer 0 has none).

use super::attention::{Attention, AttentionSpec};
use super::mlp::{Mlp, MlpSpec};
use super::rms_norm::{export_rms_norm, init_rms_norm, load_rms_norm, rms_norm, RmsNorm};
use super::{AttentionContext, KvCache, WeightLoader};
use crate::backend::KernelBackend;
use crate::checkpoint::ExportedTensor;
use crate::config::LlamaConfig;
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Shape of a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecoderLayerSpec {
    /// The attention block.
    pub attention: AttentionSpec,
    /// The MLP.
    pub mlp: MlpSpec,
    /// Whether the layer normalizes its input before attention.
    pub input_norm: bool,
    /// Epsilon of the RMSNorms.
    pub rms_norm_eps: f64,
}

impl DecoderLayerSpec {
    /// A layer of `config`, with an input norm.
    pub fn from_config(config: &LlamaConfig) -> Self {
        Self {
            attention: AttentionSpec::from_config(config),
            mlp: MlpSpec::from_config(config),
            input_norm: true,
            rms_norm_eps: config.rms_norm_eps,
        }
    }

    /// The same layer without input norm (EAGLE-1's first layer).
    pub fn without_input_norm(self) -> Self {
        Self {
            input_norm: false,
            ..self
        }
    }
}

/// A pre-norm decoder layer.
#[derive(Module, Debug)]
pub struct DecoderLayer<B: Backend> {
    input_norm: Option<RmsNorm<B>>,
    attention: Attention<B>,
    post_attention_norm: RmsNorm<B>,
    mlp: Mlp<B>,
}

impl<B: Backend> DecoderLayer<B> {
    /// A randomly initialized layer (for training a draft head).
    pub fn init(spec: &DecoderLayerSpec, device: &B::Device) -> Self {
        Self::with_blocks(
            spec,
            Attention::init(&spec.attention, device),
            Mlp::init(&spec.mlp, device),
            device,
        )
    }

    /// A layer that passes its input through unchanged until trained: random attention and
    /// MLP inputs, zero output projections (`o_proj`, `down_proj`). Appended to a trained
    /// stack it adds depth without changing what the stack computes, and gradients reach its
    /// output projections from the first step.
    pub fn init_pass_through(spec: &DecoderLayerSpec, device: &B::Device) -> Self {
        Self::with_blocks(
            spec,
            Attention::init_silent(&spec.attention, device),
            Mlp::init_silent(&spec.mlp, device),
            device,
        )
    }

    /// A layer of `attention` and `mlp` with unit norms.
    fn with_blocks(
        spec: &DecoderLayerSpec,
        attention: Attention<B>,
        mlp: Mlp<B>,
        device: &B::Device,
    ) -> Self {
        let hidden = spec.attention.output_size;
        Self {
            input_norm: spec
                .input_norm
                .then(|| init_rms_norm(spec.attention.input_size, spec.rms_norm_eps, device)),
            attention,
            post_attention_norm: init_rms_norm(hidden, spec.rms_norm_eps, device),
            mlp,
        }
    }

    /// Loads `{prefix}.input_layernorm.weight` (if `spec.input_norm`), `{prefix}.self_attn.*`,
    /// `{prefix}.post_attention_layernorm.weight` and `{prefix}.mlp.*`, e.g. with prefix
    /// `model.layers.3`.
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        prefix: &str,
        spec: &DecoderLayerSpec,
    ) -> Option<Self> {
        let eps = spec.rms_norm_eps;
        let input_norm = if spec.input_norm {
            let name = format!("{prefix}.input_layernorm.weight");
            Some(load_rms_norm(loader, &name, spec.attention.input_size, eps))
        } else {
            None
        };
        let attention = Attention::load(loader, &format!("{prefix}.self_attn"), &spec.attention);
        let post_name = format!("{prefix}.post_attention_layernorm.weight");
        let post_attention_norm =
            load_rms_norm(loader, &post_name, spec.attention.output_size, eps);
        let mlp = Mlp::load(loader, &format!("{prefix}.mlp"), &spec.mlp);
        let input_norm = match input_norm {
            Some(loaded) => Some(loaded?),
            None => None,
        };
        Some(Self {
            input_norm,
            attention: attention?,
            post_attention_norm: post_attention_norm?,
            mlp: mlp?,
        })
    }

    /// The weights as [`DecoderLayer::load`] reads them: `{prefix}.input_layernorm.weight`
    /// (only if the layer has an input norm), `{prefix}.self_attn.*`,
    /// `{prefix}.post_attention_layernorm.weight` and `{prefix}.mlp.*`.
    pub fn export(&self, prefix: &str) -> Vec<ExportedTensor> {
        let mut out = Vec::new();
        if let Some(norm) = &self.input_norm {
            out.push(export_rms_norm(
                norm,
                &format!("{prefix}.input_layernorm.weight"),
            ));
        }
        out.extend(self.attention.export(&format!("{prefix}.self_attn")));
        out.push(export_rms_norm(
            &self.post_attention_norm,
            &format!("{prefix}.post_attention_layernorm.weight"),
        ));
        out.extend(self.mlp.export(&format!("{prefix}.mlp")));
        out
    }

    /// Whether the layer normalizes its input before attention (EAGLE-1's first layer does
    /// not).
    pub fn has_input_norm(&self) -> bool {
        self.input_norm.is_some()
    }

    /// The attention block.
    pub fn attention(&self) -> &Attention<B> {
        &self.attention
    }

    /// The MLP.
    pub fn mlp(&self) -> &Mlp<B> {
        &self.mlp
    }

    /// The post-attention norm.
    pub fn post_attention_norm(&self) -> &RmsNorm<B> {
        &self.post_attention_norm
    }
}

impl<B: KernelBackend> DecoderLayer<B> {
    /// `[rows, hidden]` -> `[rows, hidden]`, appending the rows' keys and values to `layer` of
    /// `cache`.
    pub fn forward(
        &self,
        x: Tensor<B, 2>,
        context: &AttentionContext<B>,
        cache: &mut KvCache<B>,
        layer: usize,
    ) -> Tensor<B, 2> {
        let attention_input = match &self.input_norm {
            Some(norm) => rms_norm(norm, x.clone()),
            None => x.clone(),
        };
        let x = x + self
            .attention
            .forward(attention_input, context, cache, layer);
        let mlp_out = self
            .mlp
            .forward(rms_norm(&self.post_attention_norm, x.clone()));
        x + mlp_out
    }
}
