//! The engine: request intake and the step loop (schedule → forward → verify → stop checks →
//! commit → outputs and metrics), generic over the burn backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use aquila_metrics::{
    EventSink, IterationStats, KvCacheUsage, Recorder, RecorderConfig, SchedulerStats,
    SpecDecodeEvent,
};
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_model_loader::tokenizer::Tokenizer;
use aquila_spec_decode::proposer::ProposeRequest;
use aquila_spec_decode::rejection::DraftProbs;
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::config::{EngineConfig, ResolvedLimits};
use crate::error::{EngineError, PromptError};
use crate::model_runner::ModelRunner;
use crate::output::{FinishReason, RequestDelta, RequestId, RequestOutput, StepOutput};
use crate::prompt::Prompt;
use crate::request::Request;
use crate::request_state::RequestState;
use crate::sampling_params::SamplingParams;
use crate::scheduler::{ScheduledRequest, Scheduler, SchedulerConfig, SchedulerOutput};
use crate::speculation::{Drafter, FeaturelessProposer, StoredDraft};
use crate::stop::StopConditions;
use crate::timing::{RequestTiming, TokenLatency};
use crate::verifier::{Verified, Verifier, VerifyInput};

/// A validated request, ready to be queued.
#[derive(Clone, Debug)]
pub(crate) struct PreparedRequest {
    /// The prompt text (text and chat prompts).
    pub prompt: Option<String>,
    /// The prompt's token ids.
    pub prompt_token_ids: Vec<u32>,
    /// The request's parameters.
    pub params: SamplingParams,
}

/// The engine on backend `B`.
pub(crate) struct Engine<B: Backend> {
    runner: ModelRunner<B>,
    scheduler: Scheduler,
    states: HashMap<RequestId, RequestState>,
    tokenizer: Tokenizer,
    verifier: Verifier,
    drafter: Option<Drafter<B>>,
    /// Speculate only while at most this many requests run
    /// ([`crate::SpeculativeConfig::disable_by_batch_size`]).
    speculation_max_batch: Option<usize>,
    recorder: Arc<Recorder>,
    limits: ResolvedLimits,
    vocab_size: usize,
    eos_token_ids: Vec<u32>,
    seed: u64,
    next_request_id: RequestId,
}

impl<B: KernelBackend> Engine<B> {
    /// Loads the model and tokenizer of `config.model` onto `device` and sets up scheduling,
    /// speculative decoding (`custom_proposer`, else `config.speculative`) and metrics.
    /// `config` must be validated.
    pub fn new(
        config: &EngineConfig,
        device: &B::Device,
        custom_proposer: Option<FeaturelessProposer>,
    ) -> Result<Self, EngineError> {
        // Inference: parameters without gradients, so that an autodiff backend (the generic
        // CPU path) records no graph.
        let model = LlamaModel::<B>::load(&config.model, device)
            .map_err(|error| EngineError::Load {
                dir: config.model.clone(),
                error: Box::new(error),
            })?
            .no_grad();
        let tokenizer =
            Tokenizer::from_dir(&config.model).map_err(|error| EngineError::Tokenizer {
                dir: config.model.clone(),
                error,
            })?;
        let model_config = model.config();
        let kv_bytes_per_token = 2
            * model_config.num_hidden_layers
            * model_config.kv_width()
            * config.dtype.size_bytes();
        let limits = ResolvedLimits::resolve(
            config,
            model_config.max_position_embeddings,
            kv_bytes_per_token,
        )?;
        let vocab_size = model_config.vocab_size;
        let mut eos_token_ids = model_config.eos_token_ids.clone();
        for &eos in &tokenizer.special_tokens().eos {
            if !eos_token_ids.contains(&eos) {
                eos_token_ids.push(eos);
            }
        }
        let drafter = match (custom_proposer, &config.speculative) {
            (Some(proposer), _) => Some(Drafter::featureless(proposer)),
            (None, Some(speculative)) => Some(Drafter::from_config(
                speculative,
                &model,
                device,
                config.max_num_seqs,
            )?),
            (None, None) => None,
        };
        let mut recorder_config = RecorderConfig::builder(config.model_name())
            .namespace(config.metrics.namespace)
            .engine(config.metrics.engine_label.clone())
            .max_model_len(limits.max_model_len as u64);
        if let Some(drafter) = &drafter {
            recorder_config = recorder_config.num_speculative_tokens(drafter.max_draft_depth());
        }
        let recorder = Arc::new(Recorder::new(recorder_config.build()?)?);
        let scheduler = Scheduler::new(SchedulerConfig {
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_model_len: limits.max_model_len,
            kv_capacity_tokens: limits.kv_capacity_tokens,
        });
        let verifier = Verifier::new(vocab_size)
            .map_err(|e| EngineError::Model(format!("the model's vocabulary: {e}")))?;
        tracing::info!(
            model = %config.model.display(),
            max_model_len = limits.max_model_len,
            kv_capacity_tokens = limits.kv_capacity_tokens,
            max_num_seqs = config.max_num_seqs,
            max_num_batched_tokens = config.max_num_batched_tokens,
            "engine ready"
        );
        Ok(Self {
            runner: ModelRunner::new(model, config.max_num_seqs),
            scheduler,
            states: HashMap::new(),
            tokenizer,
            verifier,
            drafter,
            speculation_max_batch: config
                .speculative
                .as_ref()
                .and_then(|speculative| speculative.disable_by_batch_size),
            recorder,
            limits,
            vocab_size,
            eos_token_ids,
            seed: config.seed,
            next_request_id: 0,
        })
    }

    /// Tokenizes and validates a request without queueing it.
    pub fn prepare(
        &self,
        prompt: Prompt,
        params: SamplingParams,
    ) -> Result<PreparedRequest, EngineError> {
        params.validate(self.vocab_size)?;
        let (prompt, prompt_token_ids) = match prompt {
            Prompt::Text(text) => {
                let ids = self
                    .tokenizer
                    .encode(&text, true)
                    .map_err(PromptError::from)?;
                (Some(text), ids)
            }
            Prompt::TokenIds(ids) => (None, ids),
            Prompt::Chat(messages) => {
                let text = self
                    .tokenizer
                    .apply_chat_template(&messages, true)
                    .map_err(PromptError::from)?;
                let ids = self
                    .tokenizer
                    .encode(&text, false)
                    .map_err(PromptError::from)?;
                (Some(text), ids)
            }
        };
        self.check_prompt(&prompt_token_ids)?;
        Ok(PreparedRequest {
            prompt,
            prompt_token_ids,
            params,
        })
    }

    /// Queues a prepared request; returns its id.
    pub fn submit(&mut self, request: PreparedRequest) -> RequestId {
        let id = self.next_request_id;
        self.next_request_id += 1;
        let PreparedRequest {
            prompt,
            prompt_token_ids,
            params,
        } = request;
        let seed = params.seed.unwrap_or_else(|| derive_seed(self.seed, id));
        let stop = StopConditions::new(&params, &self.eos_token_ids, self.limits.max_model_len);
        let timing = RequestTiming::new(Instant::now());
        let state = RequestState::new(prompt, &prompt_token_ids, params, seed, stop, timing);
        self.states.insert(id, state);
        self.scheduler.add(Request::new(id, prompt_token_ids));
        self.record_scheduler_stats(0);
        id
    }

    /// Runs one engine step.
    pub fn step(&mut self) -> Result<StepOutput, EngineError> {
        let plan = self.scheduler.schedule();
        tracing::trace!(
            requests = plan.scheduled.len(),
            tokens = plan.num_batched_tokens(),
            preempted = plan.preempted.len(),
            "step scheduled"
        );
        let now = Instant::now();
        for id in &plan.preempted {
            self.state_mut(*id).timing.preempted(now);
            if let Some(drafter) = self.drafter.as_mut() {
                drafter.release(*id);
            }
        }
        for id in &plan.admitted {
            self.state_mut(*id).timing.scheduled(now);
        }
        if plan.scheduled.is_empty() {
            self.record_scheduler_stats(plan.preempted.len());
            if self.scheduler.has_unfinished() {
                return Err(EngineError::Stalled {
                    unfinished: self.states.len(),
                });
            }
            return Ok(StepOutput::default());
        }
        let tap = self
            .drafter
            .as_ref()
            .map_or(FeatureTap::None, |d| d.feature_tap().clone());
        let forward_start = Instant::now();
        let forward = match self.runner.execute(&plan, &tap) {
            Ok(forward) => forward,
            Err(error) => {
                self.abort_scheduled(&plan);
                return Err(error);
            }
        };
        let forward_done = Instant::now();
        let (mut logits, features) = (forward.logits, forward.features);
        let verified = match self.verify(&plan, logits.per_request()) {
            Ok(verified) => verified,
            Err(error) => {
                self.abort_scheduled(&plan);
                return Err(error);
            }
        };
        let finished_at = Instant::now();
        let mut iteration = IterationStats::default();
        let mut output = StepOutput::default();
        let mut verified = verified.into_iter();
        let mut accepted_nodes = HashMap::new();
        for work in &plan.scheduled {
            if !work.samples {
                self.scheduler.commit(work, &[], &[]);
                continue;
            }
            let verified = verified
                .next()
                .expect("one verification per sampling request");
            let processed =
                self.process_sampled(work, verified, finished_at, &mut iteration, &mut output);
            match processed {
                Ok(nodes) => {
                    accepted_nodes.insert(work.request_id, nodes);
                }
                // Only this request's output is unusable: end it, keep the others going.
                Err(error) => {
                    self.abort_unusable(work.request_id, &error, finished_at, &mut output)
                }
            }
        }
        let draft_start = Instant::now();
        self.draft_next(&plan, features.as_ref(), &accepted_nodes);
        tracing::debug!(
            rows = plan.num_batched_tokens(),
            forward_ms = ms(forward_done - forward_start),
            verify_commit_ms = ms(draft_start - forward_done),
            draft_ms = ms(draft_start.elapsed()),
            "step timing"
        );
        self.recorder.record_iteration(&iteration);
        self.record_scheduler_stats(plan.preempted.len());
        Ok(output)
    }

    /// Ends request `id`, whose step output could not be used, with an abort.
    fn abort_unusable(
        &mut self,
        id: RequestId,
        error: &EngineError,
        now: Instant,
        output: &mut StepOutput,
    ) {
        tracing::error!(request_id = id, %error, "request aborted");
        if let Some(request) = self.scheduler.remove(id) {
            output.deltas.push(RequestDelta {
                request_id: request.id,
                new_text: String::new(),
                new_token_ids: Vec::new(),
                finished: true,
            });
            let aborted = self.finish(request, FinishReason::Abort, now);
            output.finished.push(aborted);
        }
    }

    /// Aborts an unfinished request and returns its output.
    pub fn abort(&mut self, id: RequestId) -> Result<RequestOutput, EngineError> {
        let state = self
            .states
            .get_mut(&id)
            .ok_or(EngineError::UnknownRequest(id))?;
        state
            .flush_text(&self.tokenizer)
            .map_err(|error| EngineError::Detokenize {
                request_id: id,
                error,
            })?;
        let request = self
            .scheduler
            .remove(id)
            .expect("every request with a state is unfinished");
        let output = self.finish(request, FinishReason::Abort, Instant::now());
        self.record_scheduler_stats(0);
        Ok(output)
    }

    /// Whether any request is unfinished.
    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// The metrics recorder (snapshots, Prometheus registry and exposition).
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Longest sequence a request may reach.
    pub fn max_model_len(&self) -> usize {
        self.limits.max_model_len
    }

    /// The model's vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Checks a prompt's length and token ids.
    fn check_prompt(&self, token_ids: &[u32]) -> Result<(), PromptError> {
        if token_ids.is_empty() {
            return Err(PromptError::Empty);
        }
        let max_model_len = self.limits.max_model_len;
        if token_ids.len() >= max_model_len {
            return Err(PromptError::TooLong {
                len: token_ids.len(),
                max_model_len,
            });
        }
        let vocab_size = self.vocab_size;
        match token_ids.iter().position(|&t| t as usize >= vocab_size) {
            Some(position) => Err(PromptError::TokenOutOfVocab {
                position,
                token: token_ids[position],
                vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Verifies the rows of every sampling request of `plan` (`rows` in scheduled order).
    fn verify(
        &mut self,
        plan: &SchedulerOutput,
        rows: Vec<&mut [f32]>,
    ) -> Result<Vec<Verified>, EngineError> {
        let sampling: Vec<(&ScheduledRequest, &mut [f32])> = plan
            .scheduled
            .iter()
            .zip(rows)
            .filter(|(work, _)| work.samples)
            .collect();
        let order: HashMap<RequestId, usize> = sampling
            .iter()
            .enumerate()
            .map(|(index, (work, _))| (work.request_id, index))
            .collect();
        let mut states: Vec<Option<&mut RequestState>> = std::iter::repeat_with(|| None)
            .take(sampling.len())
            .collect();
        for (id, state) in self.states.iter_mut() {
            if let Some(&index) = order.get(id) {
                states[index] = Some(state);
            }
        }
        let vocab_size = self.vocab_size;
        let mut suppressed = Vec::with_capacity(sampling.len());
        let mut inputs = Vec::with_capacity(sampling.len());
        for ((work, rows), state) in sampling.into_iter().zip(states) {
            let state = state.expect("every scheduled request has a state");
            let request = self
                .scheduler
                .get(work.request_id)
                .expect("scheduled request is unfinished");
            let num_output = request.output_token_ids().len();
            suppressed.push(state.stop.suppressed_tokens(num_output));
            inputs.push((work, rows, state, request, num_output));
        }
        let mut inputs: Vec<VerifyInput<'_>> = inputs
            .into_iter()
            .zip(&suppressed)
            .map(
                |((work, rows, state, request, num_output), suppressed)| VerifyInput {
                    rows,
                    prompt: &request.token_ids[..request.num_prompt_tokens],
                    output: request.output_token_ids(),
                    drafts: &work.token_ids[work.num_known_tokens()..],
                    tree: work.draft_tree.as_ref(),
                    draft_probs: match &state.draft_probs {
                        // Drafts were stored with one row each (trees: one per node, root
                        // first); the scheduler may feed fewer.
                        Some(probs) => {
                            let rows =
                                work.num_draft_tokens + usize::from(work.draft_tree.is_some());
                            DraftProbs::Rows(&probs[..rows * vocab_size])
                        }
                        None => DraftProbs::OneHot,
                    },
                    config: &state.sampling,
                    rng: &mut state.rng,
                    suppressed_tokens: suppressed,
                    suppressed_rows: state.params.min_tokens.saturating_sub(num_output),
                    num_logprobs: state.params.logprobs,
                },
            )
            .collect();
        self.verifier
            .verify(&mut inputs)
            .map_err(|e| EngineError::Model(format!("verifying the step's logits: {e}")))
    }

    /// Appends one sampling request's emitted tokens, commits them to the scheduler, and
    /// records its delta, latencies and (if it finished) its output. Returns the draft indices
    /// (tree nodes) of the accepted drafts.
    fn process_sampled(
        &mut self,
        work: &ScheduledRequest,
        verified: Verified,
        now: Instant,
        iteration: &mut IterationStats,
        output: &mut StepOutput,
    ) -> Result<Vec<usize>, EngineError> {
        let id = work.request_id;
        let request = self
            .scheduler
            .get(id)
            .expect("scheduled request is unfinished");
        let first_tokens = request.output_token_ids().is_empty();
        let state = self.states.get_mut(&id).expect("every request has a state");
        let tokens = &verified.outcome.tokens;
        let appended = state
            .append(&self.tokenizer, request, tokens, verified.logprobs)
            .map_err(|error| EngineError::Detokenize {
                request_id: id,
                error,
            })?;
        let kept = &tokens[..appended.num_kept];
        let accepted = verified.outcome.num_accepted().min(appended.num_kept);
        // Draft indices (tree nodes) of the accepted tokens, in order.
        let accepted_nodes = verified.outcome.path[1..=accepted].to_vec();
        if work.num_draft_tokens > 0 {
            state.spec.drafts += 1;
            state.spec.draft_tokens += work.num_draft_tokens;
            state.spec.accepted_tokens += accepted;
            self.recorder.record_spec_decode(&SpecDecodeEvent {
                request_id: id,
                num_draft_tokens: work.num_draft_tokens,
                draft_depth: work.draft_depths().into_iter().max().unwrap_or(0),
                num_accepted_tokens: accepted,
            });
        }
        match state.timing.tokens_generated(now) {
            TokenLatency::FirstToken(ttft) => iteration.time_to_first_tokens.push(ttft),
            TokenLatency::InterToken(itl) => iteration.inter_token_latencies.push(itl),
        }
        if first_tokens {
            iteration.num_prompt_tokens += request.num_prompt_tokens as u64;
        }
        iteration.num_generation_tokens += kept.len() as u64;
        let finished = appended.finish_reason.is_some();
        output.deltas.push(RequestDelta {
            request_id: id,
            new_text: state.take_new_text(finished),
            new_token_ids: kept.to_vec(),
            finished,
        });
        self.scheduler.commit(work, &accepted_nodes, kept);
        if let Some(reason) = appended.finish_reason {
            let request = self.scheduler.remove(id).expect("committed request exists");
            output.finished.push(self.finish(request, reason, now));
        }
        Ok(accepted_nodes)
    }

    /// After a forward: hands the drafter the rows every scheduled, still unfinished request
    /// committed (features at its fed known rows and accepted draft rows, `accepted_nodes`)
    /// and stores the drafts each gets for its next step, capped so the root and drafts stay
    /// inside the context window.
    fn draft_next(
        &mut self,
        plan: &SchedulerOutput,
        features: Option<&Tensor<B, 2>>,
        accepted_nodes: &HashMap<RequestId, Vec<usize>>,
    ) {
        let Some(drafter) = self.drafter.as_mut() else {
            return;
        };
        // Over the batch-size limit the drafter still takes in the committed rows (its cache
        // must follow every sequence), but proposes nothing.
        let speculating = self
            .speculation_max_batch
            .is_none_or(|limit| self.scheduler.num_running() <= limit);
        let k = if speculating {
            drafter.num_speculative_tokens()
        } else {
            0
        };
        let max_model_len = self.limits.max_model_len;
        let mut spans = Vec::with_capacity(plan.scheduled.len());
        let mut first_row = 0;
        for work in &plan.scheduled {
            let row = first_row;
            first_row += work.token_ids.len();
            let Some(request) = self.scheduler.get(work.request_id) else {
                continue; // Finished or aborted in this step.
            };
            // The known rows, then the accepted drafts' rows (draft `n` sits `n` rows after
            // the root, the last known row).
            let known = work.num_known_tokens();
            let accepted = accepted_nodes
                .get(&work.request_id)
                .map_or(&[][..], Vec::as_slice);
            let rows: Vec<usize> = (row..row + known)
                .chain(accepted.iter().map(|&node| row + known - 1 + node))
                .collect();
            debug_assert_eq!(
                rows.len(),
                request.num_computed_tokens - work.start_position
            );
            // Tokens through the next root: the sampled token, or the next prompt token.
            let end = request.num_computed_tokens + 1;
            let max_draft_tokens = if work.samples {
                k.min(max_model_len.saturating_sub(end))
            } else {
                0
            };
            spans.push((work, end, rows, max_draft_tokens));
        }
        let requests: Vec<ProposeRequest<'_>> = spans
            .iter()
            .map(|(work, end, rows, max_draft_tokens)| ProposeRequest {
                request_id: work.request_id,
                tokens: &self
                    .scheduler
                    .get(work.request_id)
                    .expect("checked above")
                    .token_ids[..*end],
                first_new_position: work.start_position,
                feature_rows: rows,
                max_draft_tokens: *max_draft_tokens,
            })
            .collect();
        let roots: Vec<u32> = requests
            .iter()
            .map(|r| *r.tokens.last().expect("a request has tokens"))
            .collect();
        let drafts = drafter.draft(features, &requests);
        drop(requests);
        for (((work, ..), draft), root) in spans.iter().zip(drafts).zip(roots) {
            let id = work.request_id;
            let state = self.states.get_mut(&id).expect("every request has a state");
            let draft = StoredDraft::new(draft, root, self.vocab_size).unwrap_or_else(|reason| {
                tracing::warn!(request_id = id, reason, "unusable draft dropped");
                StoredDraft::default()
            });
            state.draft_probs = draft.probs;
            self.scheduler.set_drafts(id, draft.tokens, draft.tree);
        }
    }

    /// Ends `request` (already removed from the scheduler): builds its output and records it.
    fn finish(&mut self, request: Request, reason: FinishReason, now: Instant) -> RequestOutput {
        if let Some(drafter) = self.drafter.as_mut() {
            drafter.release(request.id);
        }
        let mut state = self
            .states
            .remove(&request.id)
            .expect("every request has a state");
        state.timing.finished(now);
        let stats = state.timing.finished_stats(
            &reason,
            request.num_prompt_tokens,
            request.output_token_ids().len(),
        );
        self.recorder.record_finished(&stats);
        state.into_output(&request, reason)
    }

    /// Aborts every request of a step whose forward or verification failed, so the engine
    /// stays consistent for the others.
    fn abort_scheduled(&mut self, plan: &SchedulerOutput) {
        for work in &plan.scheduled {
            if let Some(request) = self.scheduler.remove(work.request_id) {
                tracing::warn!(request_id = work.request_id, "aborted after a failed step");
                self.finish(request, FinishReason::Abort, Instant::now());
            }
        }
        self.record_scheduler_stats(0);
    }

    /// Sets the running/waiting/KV gauges and adds `num_preemptions`.
    fn record_scheduler_stats(&self, num_preemptions: usize) {
        let usage = self.scheduler.kv_usage().clamp(0.0, 1.0);
        self.recorder.record_scheduler(&SchedulerStats {
            num_running_reqs: self.scheduler.num_running() as u64,
            num_waiting_reqs: self.scheduler.num_waiting() as u64,
            kv_cache_usage: KvCacheUsage::new(usage).unwrap_or_default(),
            num_preemptions: num_preemptions as u64,
        });
    }

    /// The state of request `id`, which must be unfinished.
    fn state_mut(&mut self, id: RequestId) -> &mut RequestState {
        self.states.get_mut(&id).expect("every request has a state")
    }
}

/// The seed of request `id` that set none: a SplitMix64 mix of the engine seed and the id, so
/// every request gets its own well-separated stream.
fn derive_seed(engine_seed: u64, id: RequestId) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    mix(engine_seed.wrapping_add(mix(id.wrapping_add(0x9E37_79B9_7F4A_7C15))))
}

/// A duration in milliseconds, for logs.
fn ms(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_seeds_differ_per_request_and_engine_seed() {
        let seeds: std::collections::HashSet<u64> =
            (0..1000).map(|id| derive_seed(7, id)).collect();
        assert_eq!(seeds.len(), 1000);
        assert_ne!(derive_seed(7, 3), derive_seed(8, 3));
        assert_eq!(derive_seed(7, 3), derive_seed(7, 3));
    }
}
