//! `LlamaModel`: embeddings, decoder layers, final norm and lm_head, with batched forward
//! passes over a KV cache and feature taps for EAGLE drafters.

use super::decoder_layer::{DecoderLayer, DecoderLayerSpec};
use super::rms_norm::{load_rms_norm, RmsNorm};
use super::{
    AttentionContext, FeatureTap, ForwardBatch, ForwardOutput, KvCache, ModelError, Rope,
    SplitLinear, WeightLoader,
};
use crate::checkpoint::{transpose, Checkpoint};
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

/// How a model is laid out in memory when loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Column blocks per linear layer, multiplied in parallel (see [`SplitLinear`]). The
    /// default is one per worker thread, for CPU decoding; use 1 on accelerators.
    pub column_blocks: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            column_blocks: rayon::current_num_threads(),
        }
    }
}

/// A Llama-family decoder-only language model.
#[derive(Module, Debug)]
pub struct LlamaModel<B: Backend> {
    embed_tokens: Embedding<B>,
    layers: Vec<DecoderLayer<B>>,
    norm: RmsNorm<B>,
    /// `[hidden, vocab]`. A tied model keeps a transposed copy of the embedding table here:
    /// the CPU matmul of a few rows (decode, draft verification) is 5-25% faster on it than on
    /// a transposed view of the table, for one more table's worth of memory.
    lm_head: SplitLinear<B>,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    rope: Rope,
}

impl<B: Backend> LlamaModel<B> {
    /// Loads `config.json` and the safetensors checkpoint of a Hugging Face model directory.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, LoadError> {
        Self::load_with(dir, device, &LoadOptions::default())
    }

    /// [`LlamaModel::load`] with explicit options.
    pub fn load_with(
        dir: &Path,
        device: &B::Device,
        options: &LoadOptions,
    ) -> Result<Self, LoadError> {
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let checkpoint = Checkpoint::open(dir)?;
        Self::from_checkpoint_with(config, &checkpoint, device, options)
    }

    /// Builds the model from a checkpoint in Hugging Face layout. Every tensor must be present
    /// with the shape `config` implies and none may be left over (RoPE `inv_freq` buffers
    /// excepted); a tied model without `lm_head.weight` uses the embedding table.
    pub fn from_checkpoint(
        config: LlamaConfig,
        checkpoint: &Checkpoint,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        Self::from_checkpoint_with(config, checkpoint, device, &LoadOptions::default())
    }

    /// [`LlamaModel::from_checkpoint`] with explicit options.
    pub fn from_checkpoint_with(
        config: LlamaConfig,
        checkpoint: &Checkpoint,
        device: &B::Device,
        options: &LoadOptions,
    ) -> Result<Self, LoadError> {
        let mut loader =
            WeightLoader::new(checkpoint, device).with_column_blocks(options.column_blocks);
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
        let lm_head = if loader.reader().contains(LM_HEAD) || !config.tie_word_embeddings {
            loader.linear("lm_head", hidden, vocab, false)
        } else {
            embed.as_ref().map(|table| {
                loader.split_linear(&transpose(table, vocab, hidden), None, hidden, vocab, 1)
            })
        };
        let embed_tokens = Embedding {
            weight: Param::from_tensor(loader.tensor(embed?, [vocab, hidden])),
        };
        Some(Self {
            embed_tokens,
            layers: layers.into_iter().collect::<Option<_>>()?,
            norm: norm?,
            lm_head: lm_head?,
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
        let context = AttentionContext::try_new(
            batch,
            cache,
            &self.rope,
            config.num_attention_heads,
            config.num_key_value_heads,
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
                let normed = self.norm.forward(x);
                let picked = select_rows(normed.clone(), &logits_rows, &device);
                (self.lm_head(picked), Some(normed))
            }
            FeatureTap::AuxLayers(_) => {
                let picked = select_rows(x, &logits_rows, &device);
                (
                    self.lm_head(self.norm.forward(picked)),
                    Some(Tensor::cat(aux, 1)),
                )
            }
            FeatureTap::None => {
                let picked = select_rows(x, &logits_rows, &device);
                (self.lm_head(self.norm.forward(picked)), None)
            }
        };
        Ok(ForwardOutput { logits, features })
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

    /// Logits `[n, vocab]` of already-normed hidden rows `[n, hidden]`.
    pub fn lm_head(&self, hidden: Tensor<B, 2>) -> Tensor<B, 2> {
        self.lm_head.forward(hidden)
    }

    /// The final norm (applied before the lm_head).
    pub fn final_norm(&self) -> &RmsNorm<B> {
        &self.norm
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
