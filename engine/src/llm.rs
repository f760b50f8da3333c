//! [`Llm`]: the offline API (vLLM's `LLM` and `LLMEngine` in one), a non-generic façade over the
//! backend-generic engine.

use std::collections::HashMap;
use std::sync::Arc;

use aquila_metrics::{Namespace, Recorder, Snapshot};
use aquila_model_loader::tokenizer::Tokenizer;

use crate::backend;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::output::{RequestDelta, RequestId, RequestOutput, StepOutput};
use crate::prompt::{Prompt, Prompts};
use crate::request::PreparedRequest;
use crate::sampling_params::SamplingParams;
use crate::speculation::FeaturelessProposer;

/// What the façade needs from an engine, whatever its backend.
pub(crate) trait EngineCore {
    /// Tokenizes and validates a request without queueing it.
    fn prepare(
        &self,
        prompt: Prompt,
        params: SamplingParams,
    ) -> Result<PreparedRequest, EngineError>;
    /// Queues a prepared request.
    fn submit(&mut self, request: PreparedRequest) -> RequestId;
    /// Runs one step.
    fn step(&mut self) -> Result<StepOutput, EngineError>;
    /// Aborts an unfinished request.
    fn abort(&mut self, id: RequestId) -> Result<RequestOutput, EngineError>;
    /// Whether any request is unfinished.
    fn has_unfinished(&self) -> bool;
    /// The metrics recorder.
    fn recorder(&self) -> &Arc<Recorder>;
    /// The tokenizer.
    fn tokenizer(&self) -> &Tokenizer;
    /// Longest sequence of a request.
    fn max_model_len(&self) -> usize;
    /// Vocabulary size of the model.
    fn vocab_size(&self) -> usize;
    /// The loaded target model (`LlamaModel` of the engine's backend), for another engine to
    /// share.
    fn loaded_model(&self) -> &dyn std::any::Any;
}

/// An offline LLM engine: continuous batching of many requests over one model.
///
/// [`Llm::generate`] runs prompts to completion; [`Llm::add_request`], [`Llm::step`] and
/// [`Llm::abort`] drive the engine request by request.
///
/// ```no_run
/// use aquila_engine::{EngineConfig, Llm, SamplingParams};
///
/// let mut llm = Llm::new(EngineConfig::new("models/smollm2-135m-instruct"))?;
/// let outputs = llm.generate(["The capital of France is"], &SamplingParams::greedy(16))?;
/// println!("{}", outputs[0].text);
/// # Ok::<(), aquila_engine::EngineError>(())
/// ```
pub struct Llm {
    core: Box<dyn EngineCore + Send>,
    config: EngineConfig,
    /// Step results of requests added with [`Llm::add_request`] that a `generate` call
    /// stepped past; returned by the next [`Llm::step`].
    pending: StepOutput,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Llm {
    /// Validates `config`, loads the model and tokenizer on the configured device and dtype,
    /// and starts an empty engine with its own metrics recorder.
    ///
    /// With `config.speculative` set, every step drafts tokens for each running request
    /// (EAGLE-1/EAGLE-3 head or n-gram lookup) and verifies them losslessly.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        Self::build(config, None)
    }

    /// Like [`Llm::new`], drafting with `proposer` for `config.speculative`'s method
    /// [`SpeculativeMethod::Custom`](crate::SpeculativeMethod::Custom) (a hook for tests and
    /// experiments, e.g. spec-decode's `ReplayProposer` as a perfect drafter). Any other
    /// configuration is an error.
    #[doc(hidden)]
    pub fn with_proposer(
        config: EngineConfig,
        proposer: FeaturelessProposer,
    ) -> Result<Self, EngineError> {
        Self::build(config, Some(proposer))
    }

    /// Like [`Llm::new`], but on the weights `other` has loaded instead of a second copy:
    /// engines that differ in scheduling, speculative decoding or metrics then share one model
    /// in memory (and compare on exactly the same weights). `config` must name the same model
    /// directory, device, dtype and weight format as `other`'s.
    pub fn sharing_weights_with(other: &Llm, config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        let theirs = &other.config;
        let differs = if config.model != theirs.model {
            Some("model")
        } else if config.device != theirs.device {
            Some("device")
        } else if config.dtype != theirs.dtype {
            Some("dtype")
        } else if config.weights != theirs.weights {
            Some("weights")
        } else {
            None
        };
        if let Some(field) = differs {
            return Err(EngineError::Config {
                field,
                reason: "differs from the engine whose weights are shared".into(),
            });
        }
        let core = backend::build_engine(&config, None, Some(other.core.loaded_model()))?;
        Ok(Self {
            core,
            config,
            pending: StepOutput::default(),
        })
    }

    /// Validates `config` and builds the engine with an optional custom proposer.
    fn build(
        config: EngineConfig,
        proposer: Option<FeaturelessProposer>,
    ) -> Result<Self, EngineError> {
        config.validate()?;
        let core = backend::build_engine(&config, proposer, None)?;
        Ok(Self {
            core,
            config,
            pending: StepOutput::default(),
        })
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        self.core.tokenizer()
    }

    /// Longest sequence (prompt plus output) a request may reach.
    pub fn max_model_len(&self) -> usize {
        self.core.max_model_len()
    }

    /// The model's vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.core.vocab_size()
    }

    /// Generates completions of `prompts`, all with `params`, in continuous batches; outputs are
    /// in prompt order. If any request is invalid, none is run and the error names it.
    pub fn generate(
        &mut self,
        prompts: impl Into<Prompts>,
        params: &SamplingParams,
    ) -> Result<Vec<RequestOutput>, EngineError> {
        let prompts = prompts.into();
        let params = vec![params.clone(); prompts.len()];
        self.run_batch(prompts, params, &mut |_| {})
    }

    /// Like [`Llm::generate`] with one parameter set per prompt.
    pub fn generate_with_params(
        &mut self,
        prompts: impl Into<Prompts>,
        params: &[SamplingParams],
    ) -> Result<Vec<RequestOutput>, EngineError> {
        let prompts = prompts.into();
        if prompts.len() != params.len() {
            return Err(EngineError::ParamsCountMismatch {
                prompts: prompts.len(),
                params: params.len(),
            });
        }
        self.run_batch(prompts, params.to_vec(), &mut |_| {})
    }

    /// Like [`Llm::generate`], calling `on_delta` with every request's new text and tokens after
    /// each engine step. A request's deltas concatenate to its final text and token ids.
    pub fn generate_stream(
        &mut self,
        prompts: impl Into<Prompts>,
        params: &SamplingParams,
        mut on_delta: impl FnMut(&RequestDelta),
    ) -> Result<Vec<RequestOutput>, EngineError> {
        let prompts = prompts.into();
        let params = vec![params.clone(); prompts.len()];
        self.run_batch(prompts, params, &mut on_delta)
    }

    /// Validates and queues one request; returns its id. An invalid request is rejected with an
    /// error and leaves the other requests undisturbed.
    pub fn add_request(
        &mut self,
        prompt: impl Into<Prompt>,
        params: SamplingParams,
    ) -> Result<RequestId, EngineError> {
        let prepared = self.core.prepare(prompt.into(), params)?;
        Ok(self.core.submit(prepared))
    }

    /// Runs one engine step over the unfinished requests and returns their deltas and the
    /// outputs of the requests that finished.
    pub fn step(&mut self) -> Result<StepOutput, EngineError> {
        let step = if self.core.has_unfinished() {
            self.core.step()?
        } else {
            StepOutput::default()
        };
        let mut output = std::mem::take(&mut self.pending);
        output.extend(step);
        Ok(output)
    }

    /// Aborts an unfinished request; returns its output so far (finish reason `Abort`).
    pub fn abort(&mut self, request_id: RequestId) -> Result<RequestOutput, EngineError> {
        self.core.abort(request_id)
    }

    /// Whether any request is unfinished (or finished results wait for [`Llm::step`]).
    pub fn has_unfinished_requests(&self) -> bool {
        self.core.has_unfinished() || !self.pending.is_empty()
    }

    /// A snapshot of this engine's metrics (cumulative since [`Llm::new`]; use
    /// [`Snapshot::delta`] for an interval).
    pub fn get_metrics(&self) -> Snapshot {
        self.core.recorder().snapshot()
    }

    /// The engine's metrics recorder (for a Prometheus `/metrics` server).
    pub fn recorder(&self) -> Arc<Recorder> {
        Arc::clone(self.core.recorder())
    }

    /// The name prefix of the engine's metric families.
    pub fn metrics_namespace(&self) -> Namespace {
        self.config.metrics.namespace
    }

    /// Validates every request, queues them, and steps until all finished.
    fn run_batch(
        &mut self,
        prompts: Prompts,
        params: Vec<SamplingParams>,
        on_delta: &mut dyn FnMut(&RequestDelta),
    ) -> Result<Vec<RequestOutput>, EngineError> {
        let prepared = prompts
            .0
            .into_iter()
            .zip(params)
            .enumerate()
            .map(|(index, (prompt, params))| {
                self.core
                    .prepare(prompt, params)
                    .map_err(|e| e.at_batch_index(index))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let index: HashMap<RequestId, usize> = prepared
            .into_iter()
            .enumerate()
            .map(|(position, request)| (self.core.submit(request), position))
            .collect();
        let mut results: Vec<Option<RequestOutput>> = vec![None; index.len()];
        let mut remaining = index.len();
        while remaining > 0 {
            let step = match self.core.step() {
                Ok(step) => step,
                Err(error) => {
                    self.abort_unfinished(&index, &results);
                    return Err(error);
                }
            };
            for delta in step.deltas {
                if index.contains_key(&delta.request_id) {
                    on_delta(&delta);
                } else {
                    self.pending.deltas.push(delta);
                }
            }
            for output in step.finished {
                match index.get(&output.request_id) {
                    Some(&position) => {
                        results[position] = Some(output);
                        remaining -= 1;
                    }
                    None => self.pending.finished.push(output),
                }
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// Aborts the batch's requests that have no output yet (after a failed step).
    fn abort_unfinished(
        &mut self,
        index: &HashMap<RequestId, usize>,
        results: &[Option<RequestOutput>],
    ) {
        for (&id, &position) in index {
            if results[position].is_none() {
                // The failed step may already have aborted it.
                let _ = self.core.abort(id);
            }
        }
    }
}
