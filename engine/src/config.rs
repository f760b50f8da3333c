//! Engine configuration: model directory, device and dtype, batching limits, KV cache budget,
//! speculative decoding and metrics labels.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::EngineError;
pub use aquila_model_loader::quant::WeightFormat;

/// The device the engine runs the model on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Device {
    /// The CPU, through burn's `Flex` backend with Aquila's CPU kernels (f32 only).
    #[default]
    Cpu,
    /// The CPU through burn's generic operations only, without Aquila's kernels
    /// (`aquila_model_loader::backend::GenericCpu`, f32 only): the code path CUDA runs,
    /// for checking it on a machine without a GPU. Slower than [`Device::Cpu`].
    CpuGeneric,
    /// An NVIDIA GPU by index, through burn's CUDA backend (needs the crate's `cuda` feature).
    Cuda(usize),
}

impl Device {
    /// Whether the device is the CPU (with or without Aquila's kernels).
    pub fn is_cpu(self) -> bool {
        matches!(self, Device::Cpu | Device::CpuGeneric)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::CpuGeneric => write!(f, "cpu-generic"),
            Device::Cuda(index) => write!(f, "cuda:{index}"),
        }
    }
}

/// The floating-point type of the model's weights, activations and KV cache.
///
/// Sampling always runs in f32 whatever the model dtype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DType {
    /// 32-bit float: the only dtype on the CPU, bit-for-bit reproducible.
    #[default]
    F32,
    /// bfloat16 (CUDA only).
    BF16,
    /// IEEE half precision (CUDA only).
    F16,
}

impl DType {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
        };
        f.write_str(name)
    }
}

/// How much KV cache the engine may hold across all running requests.
///
/// When running requests need more, the scheduler preempts the newest one (its KV is freed and
/// recomputed when it is scheduled again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvCacheBudget {
    /// A number of token positions (summed over all requests).
    Tokens(usize),
    /// A number of bytes; converted to tokens with the model's per-token KV size and the dtype.
    Bytes(u64),
}

impl Default for KvCacheBudget {
    /// One GiB: 23,000 positions of SmolLM2-135M in f32.
    fn default() -> Self {
        KvCacheBudget::Bytes(1 << 30)
    }
}

/// An EAGLE draft head and the shape of its drafts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EagleDrafter {
    /// Directory of the head's checkpoint (`config.json` and safetensors).
    pub draft_model: PathBuf,
    /// EAGLE-2 dynamic draft trees instead of chains.
    #[serde(default)]
    pub tree: Option<DraftTreeConfig>,
    /// The format of the head's projections and lm_head; `None`: Q8_0 on the CPU kernels
    /// (which read packed weights), else the target's ([`EngineConfig::weights`]). A draft
    /// step reads the head's weights once per draft token, so 8-bit head weights make drafting
    /// several times cheaper; drafts are verified by the target either way, so outputs do not
    /// depend on it.
    #[serde(default)]
    pub weights: Option<WeightFormat>,
    /// A prompt lookup whose chain replaces the head's for a request wherever it is expected
    /// to be accepted further (text repeating earlier text), or is grafted into an EAGLE-2
    /// tree as a branch that displaces the head's least likely nodes; `None`: the head's
    /// drafts only.
    #[serde(default)]
    pub lookup: Option<NgramDrafter>,
    /// How chain drafts are picked for requests that sample (EAGLE-2 trees always take the
    /// head's likeliest children, and greedy requests its argmax).
    #[serde(default)]
    pub draft_pick: DraftPick,
}

/// How an EAGLE head picks each chain draft token of a request that samples (temperature above
/// 0). Either way the target verifies the drafts losslessly: the outputs follow the request's
/// sampling distribution exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraftPick {
    /// Sampled from the head's softmax at the request's temperature and accepted with
    /// probability `min(1, p/q)`: where the target spreads its probability over several
    /// tokens, this is accepted more often than the head's argmax, which is accepted with the
    /// target's probability of that one token.
    #[default]
    Sample,
    /// The head's most likely token, verified as a one-hot draft (as vLLM's EAGLE chains).
    Argmax,
}

impl EagleDrafter {
    /// Chains from the head in `draft_model`, in the default format, assisted by
    /// [`NgramDrafter::assisting`].
    pub fn new(draft_model: impl Into<PathBuf>) -> Self {
        Self {
            draft_model: draft_model.into(),
            tree: None,
            weights: None,
            lookup: Some(NgramDrafter::assisting()),
            draft_pick: DraftPick::default(),
        }
    }
}

/// A draft language model: a smaller model of the target's family, or the target itself with
/// narrower weights (on the CPU kernels a Q8_0 copy of an `f32` target reads a quarter of its
/// bytes per token and agrees with it on nearly every greedy token). It must share the target's
/// tokenizer; the engine checks the vocabulary size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftModelDrafter {
    /// Directory of the draft model (Hugging Face layout, as the target's).
    pub model: PathBuf,
    /// The format of its projections and lm_head; `None`: Q4_1 layers beside a Q8_0 lm_head
    /// on the CPU kernels (which read packed weights), else the target's
    /// ([`EngineConfig::weights`]). Drafts are verified by the target either way, so outputs
    /// do not depend on it.
    #[serde(default)]
    pub weights: Option<WeightFormat>,
    /// How chain drafts are picked for requests that sample (greedy requests take the draft
    /// model's argmax).
    #[serde(default)]
    pub draft_pick: DraftPick,
    /// Whether the draft model copies the target's keys and values of the rows the target
    /// committed instead of running them itself, so that it runs only the drafts' rows and
    /// never prefills a prompt
    /// ([`DraftModelProposerConfig::copies_target_cache`](aquila_spec_decode::proposer::DraftModelProposerConfig::copies_target_cache)).
    /// `None` (the default): when the draft model's directory is the target's, i.e. it is the
    /// target itself in other weights. `Some(true)` for another model is an error unless its
    /// layers have the target's shape (and then its drafts are only as good as the target's
    /// keys and values are to it).
    #[serde(default)]
    pub copies_target_cache: Option<bool>,
}

impl DraftModelDrafter {
    /// Drafts from the model in `model`, in the default format.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            weights: None,
            draft_pick: DraftPick::default(),
            copies_target_cache: None,
        }
    }
}

/// Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the
/// sequence's last n-gram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NgramDrafter {
    /// Shortest n-gram matched.
    pub min_n: usize,
    /// Longest n-gram matched (tried first).
    pub max_n: usize,
}

impl Default for NgramDrafter {
    /// n-grams of 1 to 4 tokens.
    fn default() -> Self {
        Self { min_n: 1, max_n: 4 }
    }
}

impl NgramDrafter {
    /// The lookup assisting a draft head ([`EagleDrafter::lookup`]): n-grams of 2 to 8
    /// tokens. A single matching token is too weak a sign to outbid a head (its drafts are
    /// accepted far less often than the `1/2` confidence it carries), and long matches, which
    /// mostly continue, are told apart from short ones.
    pub fn assisting() -> Self {
        Self { min_n: 2, max_n: 8 }
    }
}

/// Which drafter speculative decoding uses, with the settings of that drafter only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpeculativeMethod {
    /// EAGLE-1 draft head on the target's last normed hidden state.
    Eagle(EagleDrafter),
    /// EAGLE-3 draft head on auxiliary hidden states of several target layers.
    Eagle3(EagleDrafter),
    /// Prompt-lookup n-gram drafting (no draft model).
    Ngram(NgramDrafter),
    /// A separate draft language model sharing the target's tokenizer.
    DraftModel(DraftModelDrafter),
    /// The proposer handed to [`crate::Llm::with_proposer`] (tests and experiments).
    Custom,
}

impl SpeculativeMethod {
    /// The method's name: `eagle`, `eagle3`, `ngram`, `draft_model` or `custom`.
    pub fn name(&self) -> &'static str {
        match self {
            SpeculativeMethod::Eagle(_) => "eagle",
            SpeculativeMethod::Eagle3(_) => "eagle3",
            SpeculativeMethod::Ngram(_) => "ngram",
            SpeculativeMethod::DraftModel(_) => "draft_model",
            SpeculativeMethod::Custom => "custom",
        }
    }
}

impl fmt::Display for SpeculativeMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The shape of EAGLE-2 dynamic draft trees; their depth is
/// [`SpeculativeConfig::num_speculative_tokens`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftTreeConfig {
    /// Children drafted per expanded node, and nodes expanded per depth (EAGLE-2's `top_k`).
    pub top_k: usize,
    /// Draft tokens kept after reranking by cumulative draft probability (EAGLE-2's
    /// `total_tokens`); every one is a row of the verification forward.
    pub num_nodes: usize,
}

impl Default for DraftTreeConfig {
    /// Three children per node, six draft tokens: a tree whose seven verification rows cost
    /// about as much as a chain's four on a CPU with AVX-512, whose float kernel multiplies up
    /// to eight input rows per pass over the weights (sixteen nodes of four children accept
    /// more per step, but their verification rows and wider draft steps cost more than they
    /// gain there). The AVX2 kernel takes four rows per pass, so on such a CPU a tree of
    /// three draft tokens is the one that verifies at a chain's cost.
    fn default() -> Self {
        Self {
            top_k: 3,
            num_nodes: 6,
        }
    }
}

/// How many tokens each request drafts per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DraftLength {
    /// Every request drafts [`SpeculativeConfig::num_speculative_tokens`] tokens every step
    /// (trees: every node).
    Fixed,
    /// Every step, each request drafts the number of tokens (0 up to the maximum) that
    /// maximizes the engine's expected output tokens per second, from the engine's own step
    /// timings and each request's acceptance so far: large batches draft less or not at all,
    /// a request whose drafts keep failing stops drafting (and is probed now and then). Where
    /// the drafter reports its confidence in each token (EAGLE chains, n-gram lookups), a
    /// chain ends at the first token whose calibrated chance of being reached and accepted no
    /// longer pays for its verification row and drafting step (not with a minimum: chains are
    /// never cut below `min_draft_tokens`); EAGLE-2 trees keep and expand only the nodes whose
    /// calibrated chance pays in the same way.
    Adaptive {
        /// Fewest draft tokens per request and step (0 lets a request decode plainly).
        min_draft_tokens: usize,
    },
}

impl Default for DraftLength {
    /// Adaptive, down to no drafts.
    fn default() -> Self {
        DraftLength::Adaptive {
            min_draft_tokens: 0,
        }
    }
}

/// Speculative decoding settings: the drafter, and how much it drafts.
///
/// Every field applies to every method; what only one drafter needs lives in its
/// [`SpeculativeMethod`] variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpeculativeConfig {
    /// The drafter.
    pub method: SpeculativeMethod,
    /// Most draft tokens per request per step (chains), or the depth of draft trees.
    pub num_speculative_tokens: usize,
    /// How many tokens each request drafts per step (adaptive by default).
    #[serde(default)]
    pub draft_length: DraftLength,
    /// Speculate only while at most this many requests are running (vLLM's
    /// `disable_by_batch_size`); steps with more decode one token per request. Verifying
    /// `k + 1` rows per request pays when decoding is memory-bound, but a large batch already
    /// makes the projections compute-bound, where the extra rows cost nearly their full price.
    /// `None` always speculates.
    #[serde(default)]
    pub disable_by_batch_size: Option<usize>,
}

impl SpeculativeConfig {
    /// A configuration drafting with `method`, at most `num_speculative_tokens` per step.
    pub fn new(method: SpeculativeMethod, num_speculative_tokens: usize) -> Self {
        Self {
            method,
            num_speculative_tokens,
            draft_length: DraftLength::default(),
            disable_by_batch_size: None,
        }
    }

    /// EAGLE-1 chains of `num_speculative_tokens` from the head in `draft_model`.
    pub fn eagle(draft_model: impl Into<PathBuf>, num_speculative_tokens: usize) -> Self {
        let drafter = EagleDrafter::new(draft_model);
        Self::new(SpeculativeMethod::Eagle(drafter), num_speculative_tokens)
    }

    /// EAGLE-3 chains of `num_speculative_tokens` from the head in `draft_model`.
    pub fn eagle3(draft_model: impl Into<PathBuf>, num_speculative_tokens: usize) -> Self {
        let drafter = EagleDrafter::new(draft_model);
        Self::new(SpeculativeMethod::Eagle3(drafter), num_speculative_tokens)
    }

    /// Chains of `num_speculative_tokens` from the draft language model in `model`.
    pub fn draft_model(model: impl Into<PathBuf>, num_speculative_tokens: usize) -> Self {
        let drafter = DraftModelDrafter::new(model);
        Self::new(
            SpeculativeMethod::DraftModel(drafter),
            num_speculative_tokens,
        )
    }

    /// n-gram drafting (n of 1 to 4) of `num_speculative_tokens` per step.
    pub fn ngram(num_speculative_tokens: usize) -> Self {
        let drafter = NgramDrafter::default();
        Self::new(SpeculativeMethod::Ngram(drafter), num_speculative_tokens)
    }

    /// These settings with `lookup` assisting an EAGLE head's chains or trees
    /// ([`EagleDrafter::lookup`]; `None` drafts with the head only); other methods are
    /// returned unchanged.
    pub fn with_lookup_assist(mut self, lookup: Option<NgramDrafter>) -> Self {
        if let SpeculativeMethod::Eagle(drafter) | SpeculativeMethod::Eagle3(drafter) =
            &mut self.method
        {
            drafter.lookup = lookup;
        }
        self
    }

    /// Drafting with the proposer given to [`crate::Llm::with_proposer`], at most
    /// `num_speculative_tokens` per step.
    pub fn custom(num_speculative_tokens: usize) -> Self {
        Self::new(SpeculativeMethod::Custom, num_speculative_tokens)
    }

    /// Checks that the settings are consistent.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.num_speculative_tokens == 0 {
            return Err(config_error(
                "speculative.num_speculative_tokens",
                "must be at least 1",
            ));
        }
        if let DraftLength::Adaptive { min_draft_tokens } = self.draft_length {
            if min_draft_tokens > self.num_speculative_tokens {
                return Err(config_error(
                    "speculative.draft_length",
                    format!(
                        "min_draft_tokens {min_draft_tokens} exceeds num_speculative_tokens {}",
                        self.num_speculative_tokens
                    ),
                ));
            }
        }
        if self.disable_by_batch_size == Some(0) {
            return Err(config_error(
                "speculative.disable_by_batch_size",
                "must be at least 1 (0 would never speculate; leave it unset to always speculate)",
            ));
        }
        match &self.method {
            SpeculativeMethod::Eagle(eagle) | SpeculativeMethod::Eagle3(eagle) => {
                match eagle.tree {
                    Some(tree) if tree.top_k == 0 => {
                        Err(config_error("speculative.tree.top_k", "must be at least 1"))
                    }
                    Some(tree) if tree.num_nodes == 0 => Err(config_error(
                        "speculative.tree.num_nodes",
                        "must be at least 1",
                    )),
                    _ => Ok(()),
                }
            }
            SpeculativeMethod::Ngram(ngram) if ngram.min_n == 0 || ngram.min_n > ngram.max_n => {
                Err(config_error(
                    "speculative.ngram",
                    format!(
                        "needs 1 <= min_n <= max_n, got {}..={}",
                        ngram.min_n, ngram.max_n
                    ),
                ))
            }
            SpeculativeMethod::Ngram(_)
            | SpeculativeMethod::DraftModel(_)
            | SpeculativeMethod::Custom => Ok(()),
        }
    }
}

/// Labels and naming of the engine's metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Prefix of every metric name (`aquila_` by default; `vllm:` for vLLM-compatible names).
    pub namespace: aquila_metrics::Namespace,
    /// Value of the `model_name` label; defaults to the model directory's name.
    pub model_name: Option<String>,
    /// Value of the `engine` label.
    pub engine_label: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            namespace: aquila_metrics::Namespace::default(),
            model_name: None,
            engine_label: "0".to_string(),
        }
    }
}

/// Everything [`crate::Llm::new`] needs to build an engine.
///
/// Build it with [`EngineConfig::new`] and adjust the public fields.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Directory with `config.json`, the safetensors checkpoint and `tokenizer.json`.
    pub model: PathBuf,
    /// Where the model runs.
    pub device: Device,
    /// Model dtype (f32 on the CPU; bf16, f16 or f32 on CUDA).
    pub dtype: DType,
    /// Format of the projection and lm_head weights: f32, or Q8_0 / bf16, which the CPU
    /// kernels read packed (other backends get the rounded values widened to `dtype` at load).
    pub weights: WeightFormat,
    /// Most requests running at once (also the number of KV cache slots).
    pub max_num_seqs: usize,
    /// Most tokens one engine step feeds to the model (prefill chunks plus decode tokens).
    pub max_num_batched_tokens: usize,
    /// Longest sequence (prompt plus output) a request may reach; `None` takes the model's
    /// `max_position_embeddings`, capped by the KV cache budget.
    pub max_model_len: Option<usize>,
    /// KV cache budget shared by all running requests.
    pub kv_cache_budget: KvCacheBudget,
    /// Speculative decoding; `None` decodes one token per step.
    pub speculative: Option<SpeculativeConfig>,
    /// Seed of requests that set no seed of their own: request `id` samples from a stream
    /// derived from `(seed, id)`.
    pub seed: u64,
    /// Metric names and labels.
    pub metrics: MetricsConfig,
}

impl EngineConfig {
    /// A CPU, f32 configuration for the model in `model` with defaults sized for a CPU: 16
    /// sequences, 2048 batched tokens, a 1 GiB KV cache and seed 0.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            device: Device::Cpu,
            dtype: DType::F32,
            weights: WeightFormat::F32,
            max_num_seqs: 16,
            max_num_batched_tokens: 2048,
            max_model_len: None,
            kv_cache_budget: KvCacheBudget::default(),
            speculative: None,
            seed: 0,
            metrics: MetricsConfig::default(),
        }
    }

    /// Checks the settings that do not depend on the model.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.max_num_seqs == 0 {
            return Err(config_error("max_num_seqs", "must be at least 1"));
        }
        if self.max_num_batched_tokens == 0 {
            return Err(config_error("max_num_batched_tokens", "must be at least 1"));
        }
        if self.max_model_len == Some(0) {
            return Err(config_error("max_model_len", "must be at least 1"));
        }
        match self.kv_cache_budget {
            KvCacheBudget::Tokens(0) | KvCacheBudget::Bytes(0) => {
                return Err(config_error("kv_cache_budget", "must be positive"));
            }
            _ => {}
        }
        if self.device.is_cpu() && self.dtype != DType::F32 {
            return Err(config_error(
                "dtype",
                format!("the CPU backend runs in f32 only, got {}", self.dtype),
            ));
        }
        if self.metrics.engine_label.is_empty() {
            return Err(config_error("metrics.engine_label", "must not be empty"));
        }
        if let Some(speculative) = &self.speculative {
            speculative.validate()?;
        }
        Ok(())
    }

    /// The `model_name` metric label: the configured one, or the model directory's name.
    pub fn model_name(&self) -> String {
        self.metrics.model_name.clone().unwrap_or_else(|| {
            self.model
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.model.display().to_string())
        })
    }
}

/// Model-dependent limits the engine derives from an [`EngineConfig`] and the model's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedLimits {
    /// Longest sequence (prompt plus output) of one request.
    pub max_model_len: usize,
    /// KV cache capacity in token positions, over all requests.
    pub kv_capacity_tokens: usize,
}

impl ResolvedLimits {
    /// Resolves `max_model_len` and the KV capacity.
    ///
    /// `kv_bytes_per_token` is the KV size of one position over all layers in the model dtype;
    /// `max_position_embeddings` the model's context length. An explicit `max_model_len` above
    /// the model's context, or a budget that cannot hold one `max_model_len` sequence, is an
    /// error; an unset `max_model_len` is capped by the budget.
    pub fn resolve(
        config: &EngineConfig,
        max_position_embeddings: usize,
        kv_bytes_per_token: usize,
    ) -> Result<Self, EngineError> {
        let kv_capacity_tokens = match config.kv_cache_budget {
            KvCacheBudget::Tokens(tokens) => tokens,
            KvCacheBudget::Bytes(bytes) => {
                let tokens = bytes / kv_bytes_per_token.max(1) as u64;
                usize::try_from(tokens).unwrap_or(usize::MAX)
            }
        };
        if kv_capacity_tokens < 2 {
            return Err(config_error(
                "kv_cache_budget",
                format!(
                    "{:?} holds {kv_capacity_tokens} token positions at {kv_bytes_per_token} \
                     bytes per token; at least 2 are needed",
                    config.kv_cache_budget
                ),
            ));
        }
        let max_model_len = match config.max_model_len {
            Some(len) if len > max_position_embeddings => {
                return Err(config_error(
                    "max_model_len",
                    format!(
                        "{len} exceeds the model's max_position_embeddings \
                         ({max_position_embeddings})"
                    ),
                ));
            }
            Some(len) if len > kv_capacity_tokens => {
                return Err(config_error(
                    "max_model_len",
                    format!(
                        "{len} tokens do not fit in the KV cache budget of \
                         {kv_capacity_tokens} tokens"
                    ),
                ));
            }
            Some(len) => len,
            None => max_position_embeddings.min(kv_capacity_tokens),
        };
        if max_model_len < 2 {
            return Err(config_error(
                "max_model_len",
                format!("{max_model_len} leaves no room for a prompt and a generated token"),
            ));
        }
        Ok(Self {
            max_model_len,
            kv_capacity_tokens,
        })
    }
}

/// An [`EngineError::Config`] for `field`.
pub(crate) fn config_error(field: &'static str, reason: impl Into<String>) -> EngineError {
    EngineError::Config {
        field,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        EngineConfig::new("/models/m").validate().unwrap();
    }

    #[test]
    fn cpu_rejects_half_precision() {
        let mut config = EngineConfig::new("/m");
        config.dtype = DType::BF16;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("dtype") && err.contains("bf16"), "{err}");
    }

    #[test]
    fn zero_limits_name_the_field() {
        let mut config = EngineConfig::new("/m");
        config.max_num_seqs = 0;
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("max_num_seqs"));
        let mut config = EngineConfig::new("/m");
        config.kv_cache_budget = KvCacheBudget::Tokens(0);
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("kv_cache_budget"));
    }

    #[test]
    fn speculative_config_is_checked() {
        let field = |config: &SpeculativeConfig| match config.validate() {
            Err(EngineError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        let mut ngram = SpeculativeConfig::ngram(3);
        ngram.validate().unwrap();
        ngram.method = SpeculativeMethod::Ngram(NgramDrafter { min_n: 5, max_n: 4 });
        assert_eq!(field(&ngram), "speculative.ngram");
        let mut eagle = SpeculativeConfig::eagle3("/head", 3);
        eagle.validate().unwrap();
        let with_tree = |tree| {
            SpeculativeMethod::Eagle3(EagleDrafter {
                tree: Some(tree),
                ..EagleDrafter::new("/head")
            })
        };
        eagle.method = with_tree(DraftTreeConfig {
            top_k: 0,
            num_nodes: 8,
        });
        assert_eq!(field(&eagle), "speculative.tree.top_k");
        eagle.method = with_tree(DraftTreeConfig {
            top_k: 2,
            num_nodes: 0,
        });
        assert_eq!(field(&eagle), "speculative.tree.num_nodes");
        eagle.method = with_tree(DraftTreeConfig::default());
        eagle.validate().unwrap();
        eagle.num_speculative_tokens = 0;
        assert_eq!(field(&eagle), "speculative.num_speculative_tokens");
        let mut custom = SpeculativeConfig::custom(2);
        custom.disable_by_batch_size = Some(0);
        assert_eq!(field(&custom), "speculative.disable_by_batch_size");
        let mut bounded = SpeculativeConfig::ngram(2);
        bounded.draft_length = DraftLength::Adaptive {
            min_draft_tokens: 3,
        };
        assert_eq!(field(&bounded), "speculative.draft_length");
    }

    #[test]
    fn max_model_len_defaults_to_context_capped_by_budget() {
        let mut config = EngineConfig::new("/m");
        config.kv_cache_budget = KvCacheBudget::Bytes(1000 * 100);
        let limits = ResolvedLimits::resolve(&config, 8192, 100).unwrap();
        assert_eq!(limits.kv_capacity_tokens, 1000);
        assert_eq!(limits.max_model_len, 1000);
        config.kv_cache_budget = KvCacheBudget::Tokens(100_000);
        let limits = ResolvedLimits::resolve(&config, 8192, 100).unwrap();
        assert_eq!(limits.max_model_len, 8192);
    }

    #[test]
    fn explicit_max_model_len_must_fit() {
        let mut config = EngineConfig::new("/m");
        config.kv_cache_budget = KvCacheBudget::Tokens(64);
        config.max_model_len = Some(128);
        let err = ResolvedLimits::resolve(&config, 8192, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_model_len") && err.contains("64"), "{err}");
        config.max_model_len = Some(9000);
        config.kv_cache_budget = KvCacheBudget::Tokens(1 << 20);
        let err = ResolvedLimits::resolve(&config, 8192, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_position_embeddings"), "{err}");
    }

    #[test]
    fn model_name_defaults_to_directory_name() {
        let config = EngineConfig::new("/models/smollm2");
        assert_eq!(config.model_name(), "smollm2");
    }
}
