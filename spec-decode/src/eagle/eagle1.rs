//! The EAGLE-1 head: `fc` over `[token embedding, feature]`, then Llama decoder layers whose
//! first has no input norm, and no final norm; the target's embeddings and lm_head are shared.

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::checkpoint::{Checkpoint, ExportedTensor};
use aquila_model_loader::config::{eagle1_config_json, Eagle1Config, LlamaConfig};
use aquila_model_loader::model::{
    materialize, AttentionContext, DecoderLayer, DecoderLayerSpec, KvCache, LlamaModel, Rope,
    SplitLinear, WeightLoader, WeightStorage,
};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::compat::{check_eagle1, check_unused_shape};
use super::growth::pass_through_layers;
use super::{DraftVocabMap, EagleError};

/// Checkpoint name of the optional embedding copy (ignored: the target's table is used).
const EMBED_TOKENS: &str = "embed_tokens.weight";

/// An EAGLE-1 draft head (checkpoint keys `fc.*`, `layers.{i}.*`).
///
/// Row `t` takes the embedding of token `x_{t+1}` and a feature `f_t` (the target's last
/// normed hidden state at `t`, or the head's own previous output while drafting) and returns
/// `f̂`, which is both the next step's feature and the input of the target's lm_head.
#[derive(Module, Debug)]
pub struct Eagle1Head<B: Backend> {
    /// `[2H, H]`: the concatenation `[embedding, feature]` to the hidden width.
    fc: SplitLinear<B>,
    /// Decoder layers; the first has no input norm.
    layers: Vec<DecoderLayer<B>>,
    #[module(skip)]
    fc_bias: bool,
    /// The identity over the target vocabulary (the lm_head is the target's).
    #[module(skip)]
    vocab_map: DraftVocabMap,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    rope: Rope,
}

impl<B: KernelBackend> Eagle1Head<B> {
    /// Loads a head from its checkpoint after checking it against the target: every tensor
    /// must have the shape the config implies, none may be missing or left over, and `fc.bias`
    /// must agree with the config's `bias` (absent follows the checkpoint). An
    /// `embed_tokens.weight` copy is accepted if shaped `[vocab, H]` and not used.
    pub fn load(
        config: &Eagle1Config,
        checkpoint: &Checkpoint,
        target: &LlamaConfig,
        device: &B::Device,
        storage: WeightStorage,
    ) -> Result<Self, EagleError> {
        check_eagle1(config, target)?;
        let layer = &config.layer;
        let hidden = layer.hidden_size;
        let fc_bias = config.resolve_fc_bias(checkpoint.contains("fc.bias"))?;
        check_unused_shape(
            checkpoint,
            EMBED_TOKENS,
            &[target.vocab_size, target.hidden_size],
        )?;

        let mut loader = WeightLoader::new(checkpoint, device).with_storage(storage);
        loader
            .reader()
            .skip_where(|name| name == EMBED_TOKENS || name.ends_with("rotary_emb.inv_freq"));
        let fc = loader.linear("fc", 2 * hidden, hidden, fc_bias);
        let spec = DecoderLayerSpec::from_config(layer);
        let layers: Vec<Option<DecoderLayer<B>>> = (0..layer.num_hidden_layers)
            .map(|i| {
                let spec = if i == 0 {
                    spec.without_input_norm()
                } else {
                    spec
                };
                DecoderLayer::load(&mut loader, &format!("layers.{i}"), &spec)
            })
            .collect();
        loader.finish()?;
        let missing = "every weight problem is reported by the loader";
        Ok(Self {
            fc: fc.expect(missing),
            layers: layers.into_iter().collect::<Option<_>>().expect(missing),
            fc_bias,
            vocab_map: DraftVocabMap::identity(target.vocab_size),
            rope: Rope::new(&layer.rope, layer.head_dim),
            config: layer.clone(),
        })
    }

    /// A randomly initialized head (burn's default initializers; unit norms) with the
    /// structure [`Eagle1Head::load`] builds: `fc` `[2H, H]` with a bias if `fc_bias`, and
    /// `config.layer.num_hidden_layers` decoder layers whose first has no input norm. The head
    /// is checked against the target like a loaded one, and an explicit `bias` in `config`
    /// must agree with `fc_bias`.
    pub fn init(
        config: &Eagle1Config,
        target: &LlamaConfig,
        fc_bias: bool,
        device: &B::Device,
    ) -> Result<Self, EagleError> {
        check_eagle1(config, target)?;
        let fc_bias = config.resolve_fc_bias(fc_bias)?;
        let layer = &config.layer;
        let hidden = layer.hidden_size;
        let spec = DecoderLayerSpec::from_config(layer);
        let layers = (0..layer.num_hidden_layers)
            .map(|i| {
                let spec = if i == 0 {
                    spec.without_input_norm()
                } else {
                    spec
                };
                DecoderLayer::init(&spec, device)
            })
            .collect();
        Ok(materialize(Self {
            fc: SplitLinear::init(2 * hidden, &[hidden], fc_bias, device),
            layers,
            fc_bias,
            vocab_map: DraftVocabMap::identity(target.vocab_size),
            rope: Rope::new(&layer.rope, layer.head_dim),
            config: layer.clone(),
        }))
    }

    /// The weights in the checkpoint layout [`Eagle1Head::load`] reads: `fc.weight`,
    /// `fc.bias` (if any), and per layer `i` `layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
    /// `layers.{i}.input_layernorm.weight` (`i > 0`), `layers.{i}.post_attention_layernorm.weight`
    /// and `layers.{i}.mlp.{gate,up,down}_proj.weight` (plus biases the config asks for).
    pub fn export(&self) -> Vec<ExportedTensor> {
        let mut out = self.fc.export_projection("fc");
        for (i, layer) in self.layers.iter().enumerate() {
            out.extend(layer.export(&format!("layers.{i}")));
        }
        out
    }

    /// The head's `config.json` (its decoder architecture and the `bias` key of `fc`), which
    /// parses back to the same values.
    pub fn config_json(&self) -> serde_json::Value {
        eagle1_config_json(&self.config, self.fc_bias)
    }

    /// The head's decoder architecture (from its own `config.json`).
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Whether `fc` has a bias (config `bias` and the checkpoint's `fc.bias` agree on it).
    pub fn has_fc_bias(&self) -> bool {
        self.fc_bias
    }

    /// The identity map over the target vocabulary (EAGLE-1 drafts with the target's lm_head).
    pub fn vocab_map(&self) -> &DraftVocabMap {
        &self.vocab_map
    }

    /// The head's RoPE (from its own config: `rope_theta`, default 10000, and `rope_scaling`).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// Number of decoder layers (one per KV-cache layer).
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// The head deepened by `count` decoder layers after its last one, each passing its input
    /// through unchanged until trained ([`DecoderLayer::init_pass_through`]): the deeper head
    /// drafts exactly as this one does, so training it further starts from what this head has
    /// learned. The new layers take the shape of the head's own.
    pub fn with_added_layers(mut self, count: usize, device: &B::Device) -> Self {
        let added = pass_through_layers(&self.config, count, device);
        self.layers.extend(added);
        self.config.num_hidden_layers = self.num_layers();
        self
    }

    /// `f̂ = layers(fc([embeddings, features]))` for `[rows, H]` embeddings and features,
    /// appending the rows' keys and values to `cache` (the caller advances its lengths).
    pub fn forward(
        &self,
        embeddings: Tensor<B, 2>,
        features: Tensor<B, 2>,
        context: &AttentionContext<B>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 2> {
        let mut x = self.fc.forward(Tensor::cat(vec![embeddings, features], 1));
        for (index, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x, context, cache, index);
        }
        x
    }

    /// Target-vocabulary logits of head outputs: the target's lm_head, without a norm.
    pub fn logits(&self, target: &LlamaModel<B>, outputs: Tensor<B, 2>) -> Tensor<B, 2> {
        target.lm_head(outputs)
    }
}
