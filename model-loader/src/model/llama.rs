//! `LlamaModel`: embeddings, decoder layers, final norm and lm_head, with batched forward
//! passes over a KV cache and feature taps for EAGLE drafters.

use super::decoder_layer::{DecoderLayer, DecoderLayerSpec};
use super::rms_norm::{load_rms_norm, rms_norm, RmsNorm};
use super::WeightStorage;
use super::{
    AttentionContext, FeatureTap, ForwardBatch, ForwardOutput, KvCache, ModelError, Rope,
    SplitLinear, WeightLoader,
};
use crate::backend::KernelBackend;
use crate::checkpoint::Checkpoint;
use crate::config::LlamaConfig;
use crate::quant::{PackedWeight, WeightFormat};
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
    /// The token embedding table; `None` when a tied lm_head holds it packed (rows are
    /// widened from there).
    embed_tokens: Option<Embedding<B>>,
    layers: Vec<DecoderLayer<B>>,
    norm: RmsNorm<B>,
    /// `[vocab, hidden]`; a tied model shares the embedding table's storage here.
    lm_head: SplitLinear<B>,
    #[module(skip)]
    config: LlamaConfig,
    #[module(skip)]
    rope: Rope,
    /// Bytes of the packed weights.
    #[module(skip)]
    packed_bytes: usize,
    /// Whether the lm_head's weight is the float embedding table itself.
    #[module(skip)]
    table_is_lm_head: bool,
}

impl<B: Backend> LlamaModel<B> {
    /// Loads `config.json` and the safetensors checkpoint of a Hugging Face model directory.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, LoadError> {
        Self::load_stored(dir, WeightStorage::default(), device)
    }

    /// [`LlamaModel::load`] with the projections and the lm_head stored as `storage` says.
    pub fn load_stored(
        dir: &Path,
        storage: WeightStorage,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let checkpoint = Checkpoint::open(dir)?;
        Self::from_checkpoint_stored(config, &checkpoint, storage, device)
    }

    /// Builds the model from a checkpoint in Hugging Face layout. Every tensor must be present
    /// with the shape `config` implies and none may be left over (RoPE `inv_freq` buffers
    /// excepted); a tied model without `lm_head.weight` uses the embedding table.
    pub fn from_checkpoint(
        config: LlamaConfig,
        checkpoint: &Checkpoint,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        Self::from_checkpoint_stored(config, checkpoint, WeightStorage::default(), device)
    }

    /// [`LlamaModel::from_checkpoint`] with the projections and the lm_head (a tied one with
    /// the embedding table it shares) stored as `storage` says.
    pub fn from_checkpoint_stored(
        config: LlamaConfig,
        checkpoint: &Checkpoint,
        storage: WeightStorage,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        let mut loader = WeightLoader::new(checkpoint, device).with_storage(storage);
        loader
            .reader()
            .skip_where(|name| name.ends_with("rotary_emb.inv_freq"));
        let model = Self::load_weights(&mut loader, config);
        loader.finish()?;
        Ok(model.expect("every weight problem is reported by the loader"))
    }

    fn load_weights(loader: &mut WeightLoader<'_, B>, config: LlamaConfig) -> Option<Self> {
        let (vocab, hidden) = (config.vocab_size, config.hidden_size);
        let separate_head = loader.reader().contains(LM_HEAD) || !config.tie_word_embeddings;
        // The table is converted before the layers are read, so that its f32 copy is gone by
        // then; a tied table kept packed is packed as it is read, a few rows at a time. The
        // table and lm_head take the format's table format (Q8_0 beside Q4_1 layers).
        let storage = loader.storage().for_table();
        let embed = if !separate_head && storage.keeps_packed(hidden) {
            loader
                .reader()
                .f32_rows(EMBED_TOKENS, [vocab, hidden], |read| {
                    PackedWeight::pack_rows(storage.format, vocab, hidden, read)
                })
                .map(|packed| TokenTable::Packed(packed.expect("the format packs rows this wide")))
        } else {
            loader
                .reader()
                .f32(EMBED_TOKENS, &[vocab, hidden])
                .map(|table| {
                    if separate_head {
                        TokenTable::Float(loader.tensor(table, [vocab, hidden]))
                    } else {
                        TokenTable::tied(loader, table, [vocab, hidden])
                    }
                })
        };
        let spec = DecoderLayerSpec::from_config(&config);
        let layers: Vec<Option<DecoderLayer<B>>> = (0..config.num_hidden_layers)
            .map(|i| DecoderLayer::load(loader, &format!("model.layers.{i}"), &spec))
            .collect();
        let norm = load_rms_norm(loader, FINAL_NORM, hidden, config.rms_norm_eps);
        let lm_head =
            separate_head.then(|| loader.linear_stored("lm_head", hidden, vocab, false, storage));
        let table_is_lm_head = lm_head.is_none();
        let (embed_tokens, lm_head) = match (embed?, lm_head) {
            (TokenTable::Float(table), Some(head)) => (Some(table), head?),
            (TokenTable::Float(table), None) => {
                (Some(table.clone()), SplitLinear::from_weight(table))
            }
            (TokenTable::Packed(packed), _) => (None, SplitLinear::from_packed(packed)),
        };
        let embed_tokens = embed_tokens.map(|table| Embedding {
            weight: Param::from_tensor(table),
        });
        let packed_bytes =
            loader.packed_bytes() + lm_head.packed_weight().map_or(0, PackedWeight::bytes);
        Some(Self {
            packed_bytes,
            table_is_lm_head,
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
        self.norm.gamma.device()
    }

    /// Bytes of the weights as held: `f32` parameters, plus packed weights at their packed
    /// size (a tied table counted once).
    pub fn weight_bytes(&self) -> usize {
        let floats = self.num_params();
        let shared = match &self.embed_tokens {
            Some(table) if self.table_is_lm_head => table.weight.num_params(),
            _ => 0,
        };
        4 * (floats - shared) + self.packed_bytes
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
        let Some(table) = &self.embed_tokens else {
            let packed = self
                .lm_head
                .packed_weight()
                .expect("a model without a table has a packed tied lm_head");
            let hidden = self.config.hidden_size;
            let mut rows = vec![0.0f32; tokens.len() * hidden];
            for (row, &token) in rows.chunks_exact_mut(hidden).zip(tokens) {
                packed.dequantize_row(token as usize, row);
            }
            return Ok(Tensor::from_data(
                TensorData::new(rows, [tokens.len(), hidden]),
                &self.device(),
            ));
        };
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids =
            Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [tokens.len()]), &self.device());
        Ok(table.weight.val().select(0, ids))
    }

    /// The final norm (applied before the lm_head).
    pub fn final_norm(&self) -> &RmsNorm<B> {
        &self.norm
    }
}

impl<B: KernelBackend> LlamaModel<B> {
    /// [`LlamaModel::load`] with the projections and the lm_head in `format`: packed on
    /// backends whose kernels read packed weights, widened back to floats elsewhere (see
    /// [`WeightStorage::for_backend`]).
    pub fn load_in_format(
        dir: &Path,
        format: WeightFormat,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        Self::load_stored(dir, WeightStorage::for_backend::<B>(format), device)
    }

    /// A copy of the model sharing every weight but the lm_head, which it holds packed in
    /// `format`'s table format ([`WeightFormat::table_format`]: Q8_0 for Q4_1) where the
    /// backend's kernels read packed weights (elsewhere, and where the
    /// lm_head already is in `format`, the copy is the model). Meant for a drafter that runs
    /// the target's lm_head once per draft token: in Q8_0 it reads a quarter of the bytes of an
    /// `f32` lm_head. A model without a float embedding table embeds from the repacked table.
    pub fn with_lm_head_packed(&self, format: WeightFormat) -> Self {
        let mut copy = self.clone();
        if B::PACKED_WEIGHTS {
            copy.lm_head = self.lm_head.packed_as(format.table_format());
            copy.packed_bytes =
                self.packed_bytes - self.lm_head.packed_bytes() + copy.lm_head.packed_bytes();
            copy.table_is_lm_head &= copy.lm_head.packed_weight().is_none();
        }
        copy
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
        B::on_kernel_threads(|| self.forward_here(batch, cache, tap))
    }

    /// [`LlamaModel::forward`] on the calling thread.
    fn forward_here(
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

/// The token embedding table as loaded: a float tensor, or (tied to the lm_head) packed.
enum TokenTable<B: Backend> {
    Float(Tensor<B, 2>),
    Packed(PackedWeight),
}

impl<B: Backend> TokenTable<B> {
    /// The table of a tied lm_head that is not kept packed, as the loader stores linear
    /// weights: rounded to the format and widened back, so that embeddings and logits use the
    /// same values.
    fn tied(loader: &WeightLoader<'_, B>, table: Vec<f32>, shape: [usize; 2]) -> Self {
        let storage = loader.storage().for_table();
        match PackedWeight::pack(storage.format, &table, shape[0], shape[1]) {
            Some(packed) => TokenTable::Float(loader.tensor(packed.dequantize(), shape)),
            None => TokenTable::Float(loader.tensor(table, shape)),
        }
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
