//! `LlamaModel`: embeddings, decoder layers, final norm and lm_head, with batched forward
//! passes over a KV cache and feature taps for EAGLE drafters.

use super::decoder_layer::{DecoderLayer, DecoderLayerSpec};
use super::rms_norm::{load_rms_norm, rms_norm, RmsNorm};
use super::{
    AttentionContext, FeatureTap, ForwardBatch, ForwardOutput, KvCache, ModelError, Rope,
    SplitLinear, WeightLoader,
};
use crate::backend::KernelBackend;
use crate::checkpoint::Checkpoint;
use crate::config::LlamaConfig;
use crate::LoadError;
use burn::module::{Module, Param};
use burn::nn::Embedding;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use std::path::Path;

/// Checkpoint name of the token embedding table.
pub const EMBED_TOKENS: &str = "model.embed_tokens.weight";
/// Checkpoint name of the lm_head weight.
pub const LM_HEAD: &str = "lm_head.weight";
/// Checkpoint name of the final norm weight.
pub const FINAL_NORM: &str = "model.norm.weight";

/// A Llama-family decoder-only language model.
#[derive(Module, Debug)]
pub struct LlamaModel<B: Backend> {
    embed_tokens: Embedding<B>,
    layers: Vec<DecoderLayer<B>>,
    norm: RmsNorm<B>,
    /// `[vocab, hidden]`; a tied model shares the embedding table's storage here.
    lm_head: SplitLinear<B>,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    rope: Rope,
}

impl<B: Backend> LlamaModel<B> {
    /// Loads `config.json` and the safetensors checkpoint of a Hugging Face model directory.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, LoadError> {
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let checkpoint = Checkpoint::open(dir)?;
        Self::from_checkpoint(config, &checkpoint, device)
    }

    /// Builds the model from a checkpoint in Hugging Face layout. Every tensor must be present
    /// with the shape `config` implies and none may be left over (RoPE `inv_freq` buffers
    /// excepted); a tied model without `lm_head.weight` uses the embedding table.
    pub fn from_checkpoint(
        config: LlamaConfig,
        checkpoint: &Checkpoint,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        let mut loader = WeightLoader::new(checkpoint, device);
        loader
            .reader()
            .skip_where(|name| name.ends_with("rotary_emb.inv_freq"));
        let model = Self::load_weights(&mut loader, config);
        loader.finish()?;
        Ok(model.expect("every weight problem is reported by the loader"))
    }

    fn load_weights(loader: &mut WeightLoader<'_, B>, config: LlamaConfig) -> Option<Self> {
        let (vocab, hidden) = (config.vocab_size, config.hidden_size);
        let embed = loader.reader().f32(EMBED_TOKENS, &[vocab, hidden]);
        let spec = DecoderLayerSpec::from_config(&config);
        let layers: Vec<Option<DecoderLayer<B>>> = (0..config.num_hidden_layers)
            .map(|i| DecoderLayer::load(loader, &format!("model.layers.{i}"), &spec))
            .collect();
        let norm = load_rms_norm(loader, FINAL_NORM, hidden, config.rms_norm_eps);
        let separate_head = loader.reader().contains(LM_HEAD) || !config.tie_word_embeddings;
        let lm_head = separate_head.then(|| loader.linear("lm_head", hidden, vocab, false));
        let table = loader.tensor(embed?, [vocab, hidden]);
        let lm_head = match lm_head {
            Some(head) => head?,
            None => SplitLinear::from_weight(table.clone()),
        };
        let embed_tokens = Embedding {
            weight: Param::from_tensor(table),
        };
        Some(Self {
            embed_tokens,
            layers: layers.into_iter().collect::<Option<_>>()?,
            norm: norm?,
            lm_head,
            rope: Rope::new(&config.rope, config.head_dim),
            config,
        })
    }

    /// The model's architecture.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The model's RoPE.
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The decoder layers.
    pub fn layers(&self) -> &[DecoderLayer<B>] {
        &self.layers
    }

    /// An empty KV cache with `num_slots` sequence slots for this model.
    pub fn new_kv_cache(&self, num_slots: usize) -> KvCache<B> {
        KvCache::new(self.config.num_hidden_layers, num_slots)
    }

    /// The device holding the weights.
    pub fn device(&self) -> B::Device {
        self.embed_tokens.weight.device()
    }

    /// Embeddings of `tokens`, `[n, hidden]`.
    ///
    /// # Panics
    /// If a token is outside the vocabulary (use [`LlamaModel::try_embed`] for unchecked ids).
    pub fn embed(&self, tokens: &[u32]) -> Tensor<B, 2> {
        self.try_embed(tokens)
            .unwrap_or_else(|e| panic!("embed: {e}"))
    }

    /// Embeddings of `tokens`, `[n, hidden]`, or an error naming a token outside the
    /// vocabulary.
    pub fn try_embed(&self, tokens: &[u32]) -> Result<Tensor<B, 2>, ModelError> {
        let vocab_size = self.config.vocab_size;
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(ModelError::UnknownToken { token, vocab_size });
        }
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids =
            Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [tokens.len()]), &self.device());
        Ok(self.embed_tokens.weight.val().select(0, ids))
    }

    /// The final norm (applied before the lm_head).
    pub fn final_norm(&self) -> &RmsNorm<B> {
        &self.norm
    }
}

impl<B: KernelBackend> LlamaModel<B> {
    /// Runs the new tokens of every sequence of `batch` through the model, appending them to
    /// their slots of `cache`. Returns logits of the requested rows and the features `tap`
    /// asks for, both in batch order. The batch is validated first; on error nothing changes.
    pub fn forward(
        &self,
        batch: &ForwardBatch,
        cache: &mut KvCache<B>,
        tap: &FeatureTap,
    ) -> Result<ForwardOutput<B>, ModelError> {
        let config = &self.config;
        batch.validate(
            config.vocab_size,
            config.max_position_embeddings,
            cache.num_slots(),
        )?;
        tap.validate(config.num_hidden_layers)?;
        let device = self.device();
        let context = AttentionContext::try_new_windowed(
            batch,
            cache,
            &self.rope,
            (config.num_attention_heads, config.num_key_value_heads),
            config.sliding_window,
            &device,
        )?;

        let tokens: Vec<u32> = batch
            .sequences
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        let mut x = self.embed(&tokens);
        let mut aux = Vec::new();
        for (index, layer) in self.layers.iter().enumerate() {
            if tap.captures_layer(index) {
                aux.push(x.clone());
            }
            x = layer.forward(x, &context, cache, index);
        }
        for sequence in &batch.sequences {
            cache.advance(sequence.slot, sequence.len());
        }

        let logits_rows = logits_row_indices(batch);
        let (logits, features) = match tap {
            FeatureTap::LastHidden => {
                let normed = rms_norm(&self.norm, x);
                let picked = select_rows(normed.clone(), &logits_rows, &device);
                (self.lm_head(picked), Some(normed))
            }
            FeatureTap::AuxLayers(_) => {
                let picked = select_rows(x, &logits_rows, &device);
                (
                    self.lm_head(rms_norm(&self.norm, picked)),
                    Some(Tensor::cat(aux, 1)),
                )
            }
            FeatureTap::None => {
                let picked = select_rows(x, &logits_rows, &device);
                (self.lm_head(rms_norm(&self.norm, picked)), None)
            }
        };
        Ok(ForwardOutput { logits, features })
    }

    /// Logits `[n, vocab]` of already-normed hidden rows `[n, hidden]`.
    pub fn lm_head(&self, hidden: Tensor<B, 2>) -> Tensor<B, 2> {
        self.lm_head.forward(hidden)
    }
}

/// Flattened-batch indices of the rows that need logits, in batch order.
fn logits_row_indices(batch: &ForwardBatch) -> Vec<usize> {
    let mut start = 0;
    let mut rows = Vec::with_capacity(batch.num_logits_rows());
    for sequence in &batch.sequences {
        rows.extend(sequence.logits_rows.iter().map(|&r| start + r));
        start += sequence.len();
    }
    rows
}

/// The rows `rows` of `x` (all of them, without a copy, when they are `0..n` in order).
fn select_rows<B: Backend>(x: Tensor<B, 2>, rows: &[usize], device: &B::Device) -> Tensor<B, 2> {
    let [n, width] = x.dims();
    if rows.is_empty() {
        return Tensor::zeros([0, width], device);
    }
    if rows.len() == n && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return x;
    }
    if let [row] = rows {
        return x.narrow(0, *row, 1);
    }
    let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    x.select(
        0,
        Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [rows.len()]), device),
    )
}
