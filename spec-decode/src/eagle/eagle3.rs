//! The EAGLE-3 head: `fc` over the target's auxiliary features (first step of a round only), a
//! `midlayer` attending over `[input_layernorm(embedding), hidden_norm(hidden)]`, and its own
//! norm and lm_head over a draft vocabulary mapped to target ids by `d2t`.

use aquila_model_loader::checkpoint::Checkpoint;
use aquila_model_loader::config::{Eagle3Config, LlamaConfig};
use aquila_model_loader::model::{
    load_rms_norm, Attention, AttentionContext, AttentionSpec, FeatureTap, KvCache, LlamaModel,
    LoadOptions, Mlp, MlpSpec, RmsNorm, Rope, SplitLinear, WeightLoader,
};
use burn::module::{Module, Param};
use burn::nn::Embedding;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::compat::{check_eagle3, require_equal};
use super::{DraftVocabMap, EagleError};

/// Checkpoint name of the head's own embedding table (optional).
const EMBED_TOKENS: &str = "embed_tokens.weight";
/// Checkpoint name of the head's lm_head (optional when it would equal the target's).
const LM_HEAD: &str = "lm_head.weight";

/// An EAGLE-3 draft head (checkpoint keys `fc.weight`, `midlayer.*`, `norm.weight`,
/// `lm_head.weight`, `d2t`, `t2d`).
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

impl<B: Backend> Eagle3Head<B> {
    /// Loads a head from its checkpoint after checking it against the target (vocabulary,
    /// feature width, auxiliary layers). Every tensor must have the shape the config implies
    /// and none may be missing or left over. `d2t` is required when the draft vocabulary is
    /// smaller than the target's, `t2d` is checked against it when present, and a mapping in a
    /// full-vocabulary head must be the identity. `embed_tokens.weight` is used when present
    /// (required when the head is narrower than the target); `lm_head.weight` may only be
    /// absent when the target's lm_head fits (same vocabulary and width).
    pub fn load(
        config: &Eagle3Config,
        checkpoint: &Checkpoint,
        target: &LlamaConfig,
        device: &B::Device,
        options: &LoadOptions,
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

        let mut loader =
            WeightLoader::new(checkpoint, device).with_column_blocks(options.column_blocks);
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
        let norm = load_rms_norm(&mut loader, "norm.weight", hidden, eps);
        let lm_head = own_lm_head.then(|| loader.linear("lm_head", hidden, draft_vocab, false));
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

    /// The head's decoder architecture (from its own `config.json`).
    pub fn config(&self) -> &LlamaConfig {
        &self.config
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

    /// The midlayer over `[rows, H]` embeddings and hidden inputs, appending the rows' keys
    /// and values to `cache` (the caller advances its lengths). Returns the pre-norm output,
    /// which is recycled as the next step's hidden input.
    pub fn forward(
        &self,
        embeddings: Tensor<B, 2>,
        hidden: Tensor<B, 2>,
        context: &AttentionContext<B>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 2> {
        let normed_hidden = self.hidden_norm.forward(hidden.clone());
        let residual = if self.norm_before_residual {
            normed_hidden.clone()
        } else {
            hidden
        };
        let attention_input =
            Tensor::cat(vec![self.input_norm.forward(embeddings), normed_hidden], 1);
        let x = residual + self.attention.forward(attention_input, context, cache, 0);
        let mlp_out = self
            .mlp
            .forward(self.post_attention_norm.forward(x.clone()));
        x + mlp_out
    }

    /// Draft-vocabulary logits `lm_head(norm(outputs))` (map ids with
    /// [`Eagle3Head::vocab_map`]).
    pub fn logits(&self, target: &LlamaModel<B>, outputs: Tensor<B, 2>) -> Tensor<B, 2> {
        let normed = self.norm.forward(outputs);
        match &self.lm_head {
            Some(lm_head) => lm_head.forward(normed),
            None => target.lm_head(normed),
        }
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
fn read_vocab_mapping<B: Backend>(
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
