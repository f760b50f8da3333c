//! [`EagleHead`]: an EAGLE-1 or EAGLE-3 head behind one interface, loaded from a Hugging Face
//! head directory, with the batched draft forward the proposers run.

use std::path::Path;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::checkpoint::{Checkpoint, ExportedTensor, FloatType, WriteError};
use aquila_model_loader::config::{EagleConfig, LlamaConfig};
use aquila_model_loader::model::{
    AttentionContext, FeatureTap, ForwardBatch, KvCache, LlamaModel, ModelError, Rope,
    WeightStorage,
};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::compat::require_equal;
use super::{write_head_dir, DraftVocabMap, Eagle1Head, Eagle3Head, EagleError, CONFIG_FILE_NAME};

/// An EAGLE draft head of either generation.
#[derive(Debug)]
pub enum EagleHead<B: Backend> {
    /// EAGLE-1: features are the target's last normed hidden state; logits come from the
    /// target's lm_head over the full vocabulary.
    Eagle1(Box<Eagle1Head<B>>),
    /// EAGLE-3: features are auxiliary target layers (projected by `fc`); logits come from the
    /// head's own lm_head over its draft vocabulary.
    Eagle3(Box<Eagle3Head<B>>),
}

impl<B: KernelBackend> EagleHead<B> {
    /// Asks the system to back the head's weights with huge pages (see
    /// [`KernelBackend::back_with_huge_pages`]).
    pub fn back_with_huge_pages(&self) {
        match self {
            EagleHead::Eagle1(head) => B::back_with_huge_pages(head.as_ref()),
            EagleHead::Eagle3(head) => B::back_with_huge_pages(head.as_ref()),
        }
    }

    /// Loads the head in `dir` (`config.json` and `model.safetensors` or a sharded index) for a
    /// target described by `target`, with `f32` weights. The config decides EAGLE-1 or
    /// EAGLE-3.
    pub fn load(dir: &Path, target: &LlamaConfig, device: &B::Device) -> Result<Self, EagleError> {
        Self::load_stored(dir, target, device, WeightStorage::default())
    }

    /// [`EagleHead::load`] with the head's projections and lm_head stored as `storage` says
    /// (packed Q8_0 or bfloat16 where the backend's kernels read them), as the engine stores
    /// its target's.
    pub fn load_stored(
        dir: &Path,
        target: &LlamaConfig,
        device: &B::Device,
        storage: WeightStorage,
    ) -> Result<Self, EagleError> {
        let config = EagleConfig::from_file(&dir.join(CONFIG_FILE_NAME))?;
        let checkpoint = Checkpoint::open(dir)?;
        Self::from_checkpoint(&config, &checkpoint, target, device, storage)
    }

    /// Builds the head from an opened checkpoint, its linear weights stored as `storage` says
    /// (see [`Eagle1Head::load`] and [`Eagle3Head::load`] for the checks).
    pub fn from_checkpoint(
        config: &EagleConfig,
        checkpoint: &Checkpoint,
        target: &LlamaConfig,
        device: &B::Device,
        storage: WeightStorage,
    ) -> Result<Self, EagleError> {
        Ok(match config {
            EagleConfig::Eagle1(config) => EagleHead::Eagle1(Box::new(Eagle1Head::load(
                config, checkpoint, target, device, storage,
            )?)),
            EagleConfig::Eagle3(config) => EagleHead::Eagle3(Box::new(Eagle3Head::load(
                config, checkpoint, target, device, storage,
            )?)),
        })
    }

    /// The head with parameters that require no gradients, for inference: an autodiff
    /// backend then records no graph.
    pub fn no_grad(self) -> Self {
        match self {
            EagleHead::Eagle1(head) => EagleHead::Eagle1(Box::new(head.no_grad())),
            EagleHead::Eagle3(head) => EagleHead::Eagle3(Box::new(head.no_grad())),
        }
    }

    /// The head's weights in its checkpoint layout (see [`Eagle1Head::export`] and
    /// [`Eagle3Head::export`]).
    pub fn export(&self) -> Vec<ExportedTensor> {
        match self {
            EagleHead::Eagle1(head) => head.export(),
            EagleHead::Eagle3(head) => head.export(),
        }
    }

    /// The head's `config.json` (see [`Eagle1Head::config_json`] and
    /// [`Eagle3Head::config_json`]).
    pub fn config_json(&self) -> serde_json::Value {
        match self {
            EagleHead::Eagle1(head) => head.config_json(),
            EagleHead::Eagle3(head) => head.config_json(),
        }
    }

    /// Writes the head as a head directory (see [`write_head_dir`]) with its weights stored as
    /// `dtype`; [`EagleHead::load`] of `dir` gives the same head (up to `dtype` rounding).
    pub fn save(&self, dir: &Path, dtype: FloatType) -> Result<(), WriteError> {
        write_head_dir(dir, &self.config_json(), &self.export(), dtype)
    }

    /// The target features the head consumes; the engine taps them in every target forward.
    pub fn feature_tap(&self) -> FeatureTap {
        match self {
            EagleHead::Eagle1(_) => FeatureTap::LastHidden,
            EagleHead::Eagle3(head) => head.feature_tap().clone(),
        }
    }

    /// The head's decoder architecture.
    pub fn config(&self) -> &LlamaConfig {
        match self {
            EagleHead::Eagle1(head) => head.config(),
            EagleHead::Eagle3(head) => head.config(),
        }
    }

    /// How draft logits columns map to target token ids.
    pub fn vocab_map(&self) -> &DraftVocabMap {
        match self {
            EagleHead::Eagle1(head) => head.vocab_map(),
            EagleHead::Eagle3(head) => head.vocab_map(),
        }
    }

    /// Number of KV-cache layers the head writes.
    pub fn num_layers(&self) -> usize {
        match self {
            EagleHead::Eagle1(head) => head.num_layers(),
            EagleHead::Eagle3(head) => head.num_layers(),
        }
    }

    /// An empty draft KV cache with `num_slots` sequence slots.
    pub fn new_kv_cache(&self, num_slots: usize) -> KvCache<B> {
        KvCache::new(self.num_layers(), num_slots)
    }

    fn rope(&self) -> &Rope {
        match self {
            EagleHead::Eagle1(head) => head.rope(),
            EagleHead::Eagle3(head) => head.rope(),
        }
    }

    /// Hidden inputs `[rows, H]` from target feature rows: EAGLE-3's `fc` (first forward of a
    /// round only); EAGLE-1 consumes features as they are.
    pub fn project(&self, features: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            EagleHead::Eagle1(_) => features,
            EagleHead::Eagle3(head) => head.project(features),
        }
    }

    /// One draft forward: for every sequence of `batch` (input tokens, their positions, the
    /// head's cache slot), the rows `hidden` (`[batch rows, H]`, projected target features or
    /// recycled outputs) are run through the head, their keys and values appended to `cache`.
    /// Returns the head outputs `[batch rows, H]`, which feed both [`EagleHead::logits`] and
    /// the next draft step. The batch is checked first (tokens in the target vocabulary,
    /// positions below the target's context length); on error nothing changes.
    ///
    /// # Panics
    /// If `hidden` does not have one row per batch row.
    pub fn forward(
        &self,
        target: &LlamaModel<B>,
        batch: &ForwardBatch,
        hidden: Tensor<B, 2>,
        cache: &mut KvCache<B>,
    ) -> Result<Tensor<B, 2>, ModelError> {
        B::on_kernel_threads(|| self.forward_here(target, batch, hidden, cache))
    }

    /// [`EagleHead::forward`] on the calling thread.
    fn forward_here(
        &self,
        target: &LlamaModel<B>,
        batch: &ForwardBatch,
        hidden: Tensor<B, 2>,
        cache: &mut KvCache<B>,
    ) -> Result<Tensor<B, 2>, ModelError> {
        let target_config = target.config();
        batch.validate(
            target_config.vocab_size,
            target_config.max_position_embeddings,
            cache.num_slots(),
        )?;
        assert_eq!(
            hidden.dims()[0],
            batch.num_rows(),
            "one hidden row per batch row"
        );
        let config = self.config();
        let (heads, kv_heads) = (config.num_attention_heads, config.num_key_value_heads);
        let device = hidden.device();
        let context = AttentionContext::new(batch, cache, self.rope(), heads, kv_heads, &device);
        let tokens: Vec<u32> = batch
            .sequences
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        let outputs = match self {
            EagleHead::Eagle1(head) => head.forward(target.embed(&tokens), hidden, &context, cache),
            EagleHead::Eagle3(head) => {
                head.forward(head.embed(target, &tokens), hidden, &context, cache)
            }
        };
        for sequence in &batch.sequences {
            cache.advance(sequence.slot, sequence.len());
        }
        Ok(outputs)
    }

    /// Draft-vocabulary logits `[rows, draft vocab]` of head outputs (EAGLE-1: the target's
    /// lm_head; EAGLE-3: its own norm and lm_head). Map columns with [`EagleHead::vocab_map`].
    pub fn logits(&self, target: &LlamaModel<B>, outputs: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            EagleHead::Eagle1(head) => head.logits(target, outputs),
            EagleHead::Eagle3(head) => head.logits(target, outputs),
        }
    }

    /// Fails unless `target` fits the head: same vocabulary, auxiliary layers present, target
    /// features as wide as the head consumes, and the target's hidden size where the head
    /// borrows the target's embeddings or lm_head.
    pub fn check_target(&self, target: &LlamaConfig) -> Result<(), EagleError> {
        let tap = self.feature_tap();
        require_equal(
            "vocab_size",
            self.vocab_map().target_vocab_size(),
            target.vocab_size,
        )?;
        if let FeatureTap::AuxLayers(ids) = &tap {
            if let Some(&layer) = ids.iter().find(|&&id| id >= target.num_hidden_layers) {
                return Err(EagleError::AuxLayerOutOfRange {
                    layer,
                    num_layers: target.num_hidden_layers,
                });
            }
        }
        require_equal(
            "feature width",
            self.feature_width(),
            tap.feature_dim(target.hidden_size),
        )?;
        if self.borrows_target_weights() {
            require_equal("hidden_size", self.config().hidden_size, target.hidden_size)?;
        }
        Ok(())
    }

    /// Width of the target feature rows the head consumes.
    pub fn feature_width(&self) -> usize {
        match self {
            EagleHead::Eagle1(head) => head.config().hidden_size,
            EagleHead::Eagle3(head) => head.feature_width(),
        }
    }

    /// Whether the head's logits come from the target's lm_head (EAGLE-1 always; EAGLE-3
    /// without an lm_head of its own).
    pub fn uses_target_lm_head(&self) -> bool {
        match self {
            EagleHead::Eagle1(_) => true,
            EagleHead::Eagle3(head) => !head.has_own_lm_head(),
        }
    }

    /// Whether the head uses the target's embedding table or lm_head.
    fn borrows_target_weights(&self) -> bool {
        match self {
            EagleHead::Eagle1(_) => true,
            EagleHead::Eagle3(head) => !head.has_own_embedding() || !head.has_own_lm_head(),
        }
    }
}
