//! The EAGLE-3 head: `fc` over the target's auxiliary features (first step of a round only), a
//! `midlayer` attending over `[input_layernorm(embedding), hidden_norm(hidden)]`, optionally
//! more standard decoder layers after it (`layers.1`, ... for `num_hidden_layers > 1`, as vLLM
//! reads such heads), and its own norm and lm_head over a draft vocabulary mapped to target
//! ids by `d2t`.

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::checkpoint::{Checkpoint, ExportedTensor};
use aquila_model_loader::config::{eagle3_config_json, Eagle3Config, LlamaConfig};
use aquila_model_loader::model::{
    export_rms_norm, export_tensor, init_rms_norm, load_rms_norm, materialize, rms_norm, Attention,
    AttentionContext, AttentionSpec, DecoderLayer, DecoderLayerSpec, FeatureTap, KvCache,
    LlamaModel, Mlp, MlpSpec, RmsNorm, Rope, SplitLinear, WeightLoader, WeightStorage,
};
use burn::module::{Module, Param};
use burn::nn::Embedding;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::compat::{check_eagle3, require_equal};
use super::growth::pass_through_layers;
use super::{DraftVocabMap, EagleError};

/// Checkpoint name of the head's own embedding table (optional).
const EMBED_TOKENS: &str = "embed_tokens.weight";
/// Checkpoint name of the head's lm_head (optional when it would equal the target's).
const LM_HEAD: &str = "lm_head.weight";

/// An EAGLE-3 draft head (checkpoint keys `fc.weight`, `midlayer.*`, `layers.{i}.*` for
/// `1 <= i < num_hidden_layers`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`).
///
/// The hidden input of a row is `fc(target features)` on the first draft forward of a round
/// and the head's own pre-norm output afterwards; the output is recycled pre-norm, and logits
/// come from `lm_head(norm(output))`.
#[derive(Module, Debug)]
pub struct Eagle3Head<B: Backend> {
    /// `[n_aux * H_target, H]`; `None` when the head consumes the last hidden state directly.
    fc: Option<SplitLinear<B>>,
    hidden_norm: RmsNorm<B>,
    input_norm: RmsNorm<B>,
    /// Reads `2H`-wide rows `[embedding, hidden]`.
    attention: Attention<B>,
    post_attention_norm: RmsNorm<B>,
    mlp: Mlp<B>,
    /// Standard pre-norm decoder layers over the midlayer's output (`layers.{i}`, `i >= 1`);
    /// none for the usual one-layer head.
    layers: Vec<DecoderLayer<B>>,
    norm: RmsNorm<B>,
    /// `[H, draft_vocab]`; `None` shares the target's lm_head (same vocabulary and width).
    lm_head: Option<SplitLinear<B>>,
    /// The head's own embedding table; `None` uses the target's.
    embed_tokens: Option<Embedding<B>>,
    #[module(skip)]
    vocab_map: DraftVocabMap,
    #[module(skip)]
    feature_tap: FeatureTap,
    /// Width of the target feature rows (`fc`'s input width, or the hidden size without `fc`).
    #[module(skip)]
    feature_width: usize,
    #[module(skip)]
    norm_before_residual: bool,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    rope: Rope,
}

impl<B: KernelBackend> Eagle3Head<B> {
    /// Loads a head from its checkpoint after checking it against the target (vocabulary,
    /// feature width, auxiliary layers). Every tensor must have the shape the config implies
    /// and none may be missing or left over. `d2t` is required when the draft vocabulary is
    /// smaller than the target's, `t2d` is checked against it when present, and a mapping in a
    /// full-vocabulary head must be the identity. `embed_tokens.weight` is used when present
    /// (required when the head is narrower than the target); `lm_head.weight` may only be
    /// absent when the target's lm_head fits (same vocabulary and width). A config with
    /// `num_hidden_layers > 1` needs the later layers as `layers.1.*`, `layers.2.*`, ...
    pub fn load(
        config: &Eagle3Config,
        checkpoint: &Checkpoint,
        target: &LlamaConfig,
        device: &B::Device,
        storage: WeightStorage,
    ) -> Result<Self, EagleError> {
        let feature_tap = check_eagle3(config, target)?;
        let layer = &config.layer;
        let (hidden, vocab, draft_vocab) =
            (layer.hidden_size, layer.vocab_size, config.draft_vocab_size);
        let own_embedding = checkpoint.contains(EMBED_TOKENS);
        if !own_embedding {
            require_equal(
                "hidden_size (no embed_tokens.weight to embed with)",
                hidden,
                target.hidden_size,
            )?;
        }
        let own_lm_head =
            checkpoint.contains(LM_HEAD) || draft_vocab != vocab || hidden != target.hidden_size;

        let mut loader = WeightLoader::new(checkpoint, device).with_storage(storage);
        loader
            .reader()
            .skip_where(|name| name.ends_with("rotary_emb.inv_freq"));
        let (fc, feature_width) = match &feature_tap {
            FeatureTap::AuxLayers(ids) => {
                let width = ids.len() * target.hidden_size;
                (Some(loader.linear("fc", width, hidden, false)), width)
            }
            _ => (None, hidden),
        };
        let eps = layer.rms_norm_eps;
        let hidden_norm = load_rms_norm(&mut loader, "midlayer.hidden_norm.weight", hidden, eps);
        let input_norm = load_rms_norm(&mut loader, "midlayer.input_layernorm.weight", hidden, eps);
        let spec = AttentionSpec::from_config(layer).with_input_size(2 * hidden);
        let attention = Attention::load(&mut loader, "midlayer.self_attn", &spec);
        let post_name = "midlayer.post_attention_layernorm.weight";
        let post_attention_norm = load_rms_norm(&mut loader, post_name, hidden, eps);
        let mlp = Mlp::load(&mut loader, "midlayer.mlp", &MlpSpec::from_config(layer));
        let later = DecoderLayerSpec::from_config(layer);
        let layers: Vec<Option<DecoderLayer<B>>> = (1..layer.num_hidden_layers)
            .map(|i| DecoderLayer::load(&mut loader, &format!("layers.{i}"), &later))
            .collect();
        let norm = load_rms_norm(&mut loader, "norm.weight", hidden, eps);
        // A vocabulary projection, stored in the format's table format (Q8_0 beside Q4_1).
        let table = loader.storage().for_table();
        let lm_head =
            own_lm_head.then(|| loader.linear_stored("lm_head", hidden, draft_vocab, false, table));
        let embed_tokens = own_embedding.then(|| loader.take(EMBED_TOKENS, [vocab, hidden]));
        let mapping = read_vocab_mapping(&mut loader, draft_vocab, vocab);
        loader.finish()?;

        let missing = "every weight problem is reported by the loader";
        let vocab_map = match mapping.expect(missing) {
            Some(stored) => {
                DraftVocabMap::from_checkpoint(&stored.d2t, stored.t2d.as_deref(), vocab)?
            }
            None => DraftVocabMap::identity(vocab),
        };
        Ok(Self {
            fc: fc.map(|fc| fc.expect(missing)),
            hidden_norm: hidden_norm.expect(missing),
            input_norm: input_norm.expect(missing),
            attention: attention.expect(missing),
            post_attention_norm: post_attention_norm.expect(missing),
            mlp: mlp.expect(missing),
            layers: layers.into_iter().collect::<Option<_>>().expect(missing),
            norm: norm.expect(missing),
            lm_head: lm_head.map(|head| head.expect(missing)),
            embed_tokens: embed_tokens.map(|table| Embedding {
                weight: Param::from_tensor(table.expect(missing)),
            }),
            vocab_map,
            feature_tap,
            feature_width,
            norm_before_residual: config.norm_before_residual,
            rope: Rope::new(&layer.rope, layer.head_dim),
            config: layer.clone(),
        })
    }

    /// A randomly initialized head (burn's default initializers; unit norms) with the
    /// structure a trainer produces: `fc` over the auxiliary target features (none when the
    /// config has `use_aux_hidden_state: false`), the midlayer with attention reading `2H`,
    /// its norms, `num_hidden_layers - 1` decoder layers after it, the final norm and an own
    /// lm_head of `config.draft_vocab_size` rows; no own embedding (the target's is used, so
    /// the hidden sizes must agree). The head is checked against the target like a loaded one;
    /// `vocab_map` must cover the target vocabulary with `config.draft_vocab_size` draft rows
    /// (the identity for a full vocabulary).
    pub fn init(
        config: &Eagle3Config,
        target: &LlamaConfig,
        vocab_map: DraftVocabMap,
        device: &B::Device,
    ) -> Result<Self, EagleError> {
        let feature_tap = check_eagle3(config, target)?;
        let layer = &config.layer;
        let hidden = layer.hidden_size;
        require_equal(
            "hidden_size (no embed_tokens.weight to embed with)",
            hidden,
            target.hidden_size,
        )?;
        let vocab_map = check_vocab_map(vocab_map, config, target)?;
        let (fc, feature_width) = match &feature_tap {
            FeatureTap::AuxLayers(ids) => {
                let width = ids.len() * target.hidden_size;
                (
                    Some(SplitLinear::init(width, &[hidden], false, device)),
                    width,
                )
            }
            _ => (None, hidden),
        };
        let eps = layer.rms_norm_eps;
        let attention = AttentionSpec::from_config(layer).with_input_size(2 * hidden);
        Ok(materialize(Self {
            fc,
            hidden_norm: init_rms_norm(hidden, eps, device),
            input_norm: init_rms_norm(hidden, eps, device),
            attention: Attention::init(&attention, device),
            post_attention_norm: init_rms_norm(hidden, eps, device),
            mlp: Mlp::init(&MlpSpec::from_config(layer), device),
            layers: (1..layer.num_hidden_layers)
                .map(|_| DecoderLayer::init(&DecoderLayerSpec::from_config(layer), device))
                .collect(),
            norm: init_rms_norm(hidden, eps, device),
            lm_head: Some(SplitLinear::init(
                hidden,
                &[config.draft_vocab_size],
                false,
                device,
            )),
            embed_tokens: None,
            vocab_map,
            feature_tap,
            feature_width,
            norm_before_residual: config.norm_before_residual,
            rope: Rope::new(&layer.rope, layer.head_dim),
            config: layer.clone(),
        }))
    }

    /// The head with its output layer taken from `target`: the final norm's weight and the
    /// target's lm_head rows of the draft vocabulary. A head starting here turns an output
    /// close to the target's last hidden state into the target's own prediction, so training
    /// has to learn that hidden state rather than a vocabulary projection from scratch. With
    /// `trainable: false` the copied lm_head stays fixed (no gradient, no optimizer state).
    pub fn with_output_from(mut self, target: &LlamaModel<B>, trainable: bool) -> Self {
        let hidden = self.config.hidden_size;
        let device = target.device();
        // lm_head(I) is `[H, vocab]`: column v holds the target's lm_head row of token v.
        let columns = target.lm_head(Tensor::<B, 2>::eye(hidden, &device));
        let draft_ids: Vec<i64> = (0..self.vocab_map.draft_vocab_size())
            .map(|d| i64::from(self.vocab_map.to_target(d as u32)))
            .collect();
        let count = draft_ids.len();
        let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(draft_ids, [count]), &device);
        let rows = columns.select(1, ids).transpose().detach();
        let lm_head = SplitLinear::from_weight(rows);
        self.lm_head = Some(if trainable {
            lm_head
        } else {
            lm_head.no_grad()
        });
        let gamma = target.final_norm().gamma.val().detach();
        self.norm = RmsNorm {
            gamma: Param::from_tensor(gamma),
            epsilon: self.config.rms_norm_eps,
        };
        self
    }

    /// The head deepened by `count` decoder layers after its last one, each passing its input
    /// through unchanged until trained ([`DecoderLayer::init_pass_through`]): the deeper head
    /// drafts exactly as this one does, so training it further starts from what this head has
    /// learned, with the capacity of the new layers to add. The new layers take the shape of
    /// the head's own (its `config.json`'s width and heads).
    pub fn with_added_layers(mut self, count: usize, device: &B::Device) -> Self {
        let added = pass_through_layers(&self.config, count, device);
        self.layers.extend(added);
        self.config.num_hidden_layers = self.num_layers();
        self
    }

    /// The weights in the checkpoint layout [`Eagle3Head::load`] reads: `fc.weight` (if the
    /// head has `fc`), `midlayer.hidden_norm.weight`, `midlayer.input_layernorm.weight`,
    /// `midlayer.self_attn.*`, `midlayer.post_attention_layernorm.weight`, `midlayer.mlp.*`,
    /// `layers.{i}.*` for each layer after the midlayer (`i >= 1`), `norm.weight`,
    /// `lm_head.weight` (if the head has its own), `embed_tokens.weight` (if the head has its
    /// own), `d2t` (i64) and `t2d` (bool).
    pub fn export(&self) -> Vec<ExportedTensor> {
        let mut out = Vec::new();
        if let Some(fc) = &self.fc {
            out.extend(fc.export_projection("fc"));
        }
        out.push(export_rms_norm(
            &self.hidden_norm,
            "midlayer.hidden_norm.weight",
        ));
        out.push(export_rms_norm(
            &self.input_norm,
            "midlayer.input_layernorm.weight",
        ));
        out.extend(self.attention.export("midlayer.self_attn"));
        out.push(export_rms_norm(
            &self.post_attention_norm,
            "midlayer.post_attention_layernorm.weight",
        ));
        out.extend(self.mlp.export("midlayer.mlp"));
        for (index, layer) in self.layers.iter().enumerate() {
            out.extend(layer.export(&format!("layers.{}", index + 1)));
        }
        out.push(export_rms_norm(&self.norm, "norm.weight"));
        if let Some(lm_head) = &self.lm_head {
            out.extend(lm_head.export_projection("lm_head"));
        }
        if let Some(table) = &self.embed_tokens {
            out.push(export_tensor(EMBED_TOKENS, table.weight.val()));
        }
        let map = &self.vocab_map;
        out.push(ExportedTensor::i64(
            "d2t",
            vec![map.draft_vocab_size()],
            map.d2t(),
        ));
        out.push(ExportedTensor::bool(
            "t2d",
            vec![map.target_vocab_size()],
            map.t2d(),
        ));
        out
    }

    /// The head's `config.json` (decoder architecture, draft vocabulary size, target feature
    /// width, auxiliary layers, `norm_before_residual`), which parses back to the same values.
    pub fn config_json(&self) -> serde_json::Value {
        let (aux_layer_ids, target_hidden_size) = match &self.feature_tap {
            FeatureTap::AuxLayers(ids) => {
                (Some(ids.as_slice()), self.feature_width / ids.len().max(1))
            }
            _ => (None, self.feature_width),
        };
        eagle3_config_json(
            &self.config,
            self.vocab_map.draft_vocab_size(),
            target_hidden_size,
            aux_layer_ids,
            self.norm_before_residual,
        )
    }

    /// The head's decoder architecture (from its own `config.json`).
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Number of decoder layers, the midlayer included (one per KV-cache layer).
    pub fn num_layers(&self) -> usize {
        1 + self.layers.len()
    }

    /// The head's RoPE (from its own config).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The target features the head consumes.
    pub fn feature_tap(&self) -> &FeatureTap {
        &self.feature_tap
    }

    /// The norm applied to outputs before the lm_head (never to recycled hidden states).
    pub fn final_norm(&self) -> &RmsNorm<B> {
        &self.norm
    }

    /// The draft-to-target vocabulary mapping.
    pub fn vocab_map(&self) -> &DraftVocabMap {
        &self.vocab_map
    }

    /// Whether the head has its own embedding table (otherwise it embeds with the target's).
    pub fn has_own_embedding(&self) -> bool {
        self.embed_tokens.is_some()
    }

    /// Whether the head has its own lm_head (otherwise it uses the target's).
    pub fn has_own_lm_head(&self) -> bool {
        self.lm_head.is_some()
    }

    /// Width of the target feature rows the head consumes (`fc`'s input width, or the hidden
    /// size for a head without `fc`).
    pub fn feature_width(&self) -> usize {
        self.feature_width
    }

    /// Embeddings `[n, H]` of tokens inside the vocabulary: the head's own table, or the
    /// target's.
    pub fn embed(&self, target: &LlamaModel<B>, tokens: &[u32]) -> Tensor<B, 2> {
        match &self.embed_tokens {
            Some(table) => {
                let weight = table.weight.val();
                let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
                let ids = Tensor::<B, 1, Int>::from_data(
                    TensorData::new(ids, [tokens.len()]),
                    &weight.device(),
                );
                weight.select(0, ids)
            }
            None => target.embed(tokens),
        }
    }

    /// Hidden inputs from target features: `fc` over the auxiliary features (identity for a
    /// head that consumes the last hidden state). Only target features go through `fc`;
    /// recycled head outputs are already hidden-wide.
    pub fn project(&self, features: Tensor<B, 2>) -> Tensor<B, 2> {
        match &self.fc {
            Some(fc) => fc.forward(features),
            None => features,
        }
    }

    /// The midlayer over `[rows, H]` embeddings and hidden inputs, then the layers after it,
    /// appending the rows' keys and values to `cache` (layer `i` of the head to cache layer
    /// `i`; the caller advances its lengths). Returns the pre-norm output, which is recycled
    /// as the next step's hidden input.
    pub fn forward(
        &self,
        embeddings: Tensor<B, 2>,
        hidden: Tensor<B, 2>,
        context: &AttentionContext<B>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 2> {
        let normed_hidden = rms_norm(&self.hidden_norm, hidden.clone());
        let residual = if self.norm_before_residual {
            normed_hidden.clone()
        } else {
            hidden
        };
        let attention_input = Tensor::cat(
            vec![rms_norm(&self.input_norm, embeddings), normed_hidden],
            1,
        );
        let x = residual + self.attention.forward(attention_input, context, cache, 0);
        let mlp_out = self
            .mlp
            .forward(rms_norm(&self.post_attention_norm, x.clone()));
        let mut x = x + mlp_out;
        for (index, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x, context, cache, index + 1);
        }
        x
    }

    /// Draft-vocabulary logits `lm_head(norm(outputs))` (map ids with
    /// [`Eagle3Head::vocab_map`]).
    pub fn logits(&self, target: &LlamaModel<B>, outputs: Tensor<B, 2>) -> Tensor<B, 2> {
        let normed = rms_norm(&self.norm, outputs);
        match &self.lm_head {
            Some(lm_head) => lm_head.forward(normed),
            None => target.lm_head(normed),
        }
    }
}

/// Checks that `map` fits a head of `config` for `target` (one row per draft token, the
/// target's vocabulary, every id in place when the draft vocabulary is the whole vocabulary)
/// and returns it, as [`DraftVocabMap::identity`] for a full vocabulary (as loading does).
fn check_vocab_map(
    map: DraftVocabMap,
    config: &Eagle3Config,
    target: &LlamaConfig,
) -> Result<DraftVocabMap, EagleError> {
    if map.target_vocab_size() != target.vocab_size {
        return Err(EagleError::VocabMap(format!(
            "the map covers a target vocabulary of {}, but the target has {}",
            map.target_vocab_size(),
            target.vocab_size
        )));
    }
    if map.draft_vocab_size() != config.draft_vocab_size {
        return Err(EagleError::VocabMap(format!(
            "the map has {} draft tokens, but draft_vocab_size is {}",
            map.draft_vocab_size(),
            config.draft_vocab_size
        )));
    }
    if config.draft_vocab_size < target.vocab_size {
        return Ok(map);
    }
    match (0..target.vocab_size as u32).find(|&id| map.to_target(id) != id) {
        Some(id) => Err(EagleError::VocabMap(format!(
            "a draft vocabulary of every target token must be the identity, but draft token {id} \
             stands for target token {}",
            map.to_target(id)
        ))),
        None => Ok(DraftVocabMap::identity(target.vocab_size)),
    }
}

/// The vocabulary mapping as stored in a checkpoint.
struct StoredMapping {
    /// Offsets, one per draft token.
    d2t: Vec<i64>,
    /// Membership, one per target token, if stored.
    t2d: Option<Vec<bool>>,
}

/// Reads `d2t` (required when the draft vocabulary is smaller than the target's) and `t2d`
/// (optional), or `Some(None)` when a full-vocabulary head stores neither. `None` means a
/// problem was recorded by the loader.
fn read_vocab_mapping<B: KernelBackend>(
    loader: &mut WeightLoader<'_, B>,
    draft_vocab: usize,
    vocab: usize,
) -> Option<Option<StoredMapping>> {
    let reader = loader.reader();
    if draft_vocab == vocab && !reader.contains("d2t") && !reader.contains("t2d") {
        return Some(None);
    }
    let d2t = reader.i64("d2t", &[draft_vocab]);
    let t2d = if reader.contains("t2d") {
        Some(reader.bool("t2d", &[vocab])?)
    } else {
        None
    };
    Some(Some(StoredMapping { d2t: d2t?, t2d }))
}
