//! The engine: request intake and the step loop (schedule → forward → verify → stop checks →
//! commit → drafting → outputs and metrics), generic over the burn backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aquila_metrics::{
    EventSink, IterationStats, KvCacheUsage, Recorder, RecorderConfig, SchedulerStats,
};
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_model_loader::tokenizer::Tokenizer;
use aquila_model_loader::LoadError;
use aquila_spec_decode::proposer::{Draft, ProposeRequest, TargetKeyValues, TargetKvCache};
use burn::module::Module;
use burn::tensor::Tensor;

use crate::calibration_input::CalibrationInput;
use crate::config::{EngineConfig, ResolvedLimits};
use crate::draft_policy::{DraftCandidate, DraftPolicy};
use crate::error::{EngineError, PromptError};
use crate::goodput_guard::DecodeStep;
use crate::model_runner::{ModelRunner, StepForward};
use crate::output::{RequestDelta, RequestId, RequestOutput, StepOutput};
use crate::pending_draft::PendingDraft;
use crate::prompt::Prompt;
use crate::request::{PreparedRequest, Request};
use crate::requests::{BatchEntry, Requests};
use crate::sampling_params::SamplingParams;
use crate::scheduler::{Scheduler, SchedulerConfig, SchedulerOutput};
use crate::speculation::{DraftPlacement, Drafter, FeaturelessProposer};
use crate::step_costs::StepTiming;
use crate::stop::{Finish, StopConditions};
use crate::timing::TokenLatency;
use crate::verifier::{Verified, Verifier, VerifyInput};

/// The number the next engine of this process gets.
static NEXT_ENGINE_NUMBER: AtomicU64 = AtomicU64::new(0);

/// The engine on backend `B`.
pub(crate) struct Engine<B: KernelBackend> {
    /// This engine's number in its process: the `engine` span of its steps carries it, so that
    /// the events of engines stepped in turn (benchmarks) can be told apart.
    number: u64,
    runner: ModelRunner<B>,
    scheduler: Scheduler,
    requests: Requests,
    tokenizer: Tokenizer,
    verifier: Verifier,
    speculation: Option<Speculation<B>>,
    recorder: Arc<Recorder>,
    limits: ResolvedLimits,
    vocab_size: usize,
    eos_token_ids: Vec<u32>,
    seed: u64,
    next_request_id: RequestId,
}

/// Speculative decoding: the drafter, and the policy deciding how much it drafts.
struct Speculation<B: KernelBackend> {
    drafter: Drafter<B>,
    policy: DraftPolicy,
}

/// What a step did for one request of its batch.
#[derive(Debug, Default)]
struct EntryResult {
    /// Draft indices (tree nodes) of the accepted drafts, in order.
    accepted_nodes: Vec<usize>,
    /// How the request ended in this step, if it did.
    finish: Option<Finish>,
}

/// The engine's parts one step's processing of sampled tokens uses.
struct StepContext<'a> {
    tokenizer: &'a Tokenizer,
    recorder: &'a Recorder,
    scheduler: &'a mut Scheduler,
    now: Instant,
    iteration: IterationStats,
    output: StepOutput,
}

impl<B: KernelBackend> Engine<B> {
    /// Loads the model of `config.model` onto `device` (or takes `loaded`, the same model
    /// another engine loaded, sharing its weights), loads the tokenizer and sets up scheduling,
    /// speculative decoding (`config.speculative`, with `custom_proposer` for its custom
    /// method) and metrics. `config` must be validated.
    pub fn new(
        config: &EngineConfig,
        device: &B::Device,
        custom_proposer: Option<FeaturelessProposer>,
        loaded: Option<LlamaModel<B>>,
    ) -> Result<Self, EngineError> {
        let load_error = |error| EngineError::Load {
            dir: config.model.clone(),
            error: Box::new(error),
        };
        if loaded.is_none() {
            if let Err(source) = std::fs::metadata(&config.model) {
                let path = config.model.clone();
                return Err(load_error(LoadError::Io { path, source }));
            }
        }
        let load_allocation = aquila_model_loader::memory::LoadAllocation::begin();
        // The tokenizer before the weights: parsing it takes several times its final size for
        // a moment, which then is not stacked on top of the weights' memory (and a broken
        // tokenizer fails before the long weight load).
        let tokenizer =
            Tokenizer::from_dir(&config.model).map_err(|error| EngineError::Tokenizer {
                dir: config.model.clone(),
                error,
            })?;
        // What parsing the tokenizer dropped goes back to the OS before the weights arrive.
        aquila_model_loader::memory::release_free_memory();
        let model = match loaded {
            Some(model) => model,
            None => {
                // Inference: parameters without gradients, so that an autodiff backend (the
                // generic CPU path) records no graph.
                let model = LlamaModel::<B>::load_in_format(&config.model, config.weights, device)
                    .map_err(load_error)?
                    .no_grad();
                B::back_with_huge_pages(&model);
                aquila_model_loader::memory::release_free_memory();
                model
            }
        };
        drop(load_allocation);
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
        let speculation = match &config.speculative {
            Some(speculative) => {
                let drafter = Drafter::from_config(
                    speculative,
                    custom_proposer,
                    &model,
                    DraftPlacement {
                        device,
                        target_weights: config.weights,
                        target_dir: &config.model,
                    },
                    config.max_num_seqs,
                )?;
                let policy = DraftPolicy::new(
                    speculative.draft_length,
                    speculative.disable_by_batch_size,
                    drafter.num_speculative_tokens(),
                    drafter.max_draft_depth(),
                );
                Some(Speculation { drafter, policy })
            }
            None if custom_proposer.is_some() => {
                return Err(EngineError::Config {
                    field: "speculative",
                    reason: "a proposer was given, but speculative decoding is off".into(),
                })
            }
            None => None,
        };
        let mut recorder_config = RecorderConfig::builder(config.model_name())
            .namespace(config.metrics.namespace)
            .engine(config.metrics.engine_label.clone())
            .max_model_len(limits.max_model_len as u64);
        if let Some(speculation) = &speculation {
            let depth = speculation.drafter.max_draft_depth();
            recorder_config = recorder_config.num_speculative_tokens(depth);
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
        let number = NEXT_ENGINE_NUMBER.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            number,
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
            requests: Requests::default(),
            tokenizer,
            verifier,
            speculation,
            recorder,
            limits,
            vocab_size,
            eos_token_ids,
            seed: config.seed,
            next_request_id: 0,
            number,
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
    pub fn submit(&mut self, prepared: PreparedRequest) -> RequestId {
        let id = self.next_request_id;
        self.next_request_id += 1;
        let params = &prepared.params;
        let seed = params.seed.unwrap_or_else(|| derive_seed(self.seed, id));
        let stop = StopConditions::new(params, &self.eos_token_ids, self.limits.max_model_len);
        let mut request = Request::new(id, prepared, seed, stop, Instant::now());
        if let Some(speculation) = &self.speculation {
            request.acceptance = speculation.policy.new_estimate();
        }
        self.scheduler.enqueue(&mut request);
        self.requests.insert(request);
        self.record_scheduler_stats(0);
        id
    }

    /// Runs one engine step.
    pub fn step(&mut self) -> Result<StepOutput, EngineError> {
        let _span = tracing::debug_span!("engine", number = self.number).entered();
        let plan = self.scheduler.schedule(&mut self.requests, Instant::now());
        tracing::trace!(
            requests = plan.scheduled.len(),
            tokens = plan.num_batched_tokens(),
            preempted = plan.preempted.len(),
            "step scheduled"
        );
        if let Some(speculation) = self.speculation.as_mut() {
            for &id in &plan.preempted {
                speculation.drafter.release(id);
            }
        }
        if plan.scheduled.is_empty() {
            self.record_scheduler_stats(plan.preempted.len());
            if !self.requests.is_empty() {
                return Err(EngineError::Stalled {
                    unfinished: self.requests.len(),
                });
            }
            return Ok(StepOutput::default());
        }
        match self.run_batch(&plan) {
            Ok(output) => {
                self.record_scheduler_stats(plan.preempted.len());
                Ok(output)
            }
            Err(error) => {
                self.abort_scheduled(&plan);
                Err(error)
            }
        }
    }

    /// Runs the forward, verification, commit and drafting of `plan`'s batch; returns the
    /// step's deltas and finished outputs. On error, the batch's requests must be aborted.
    fn run_batch(&mut self, plan: &SchedulerOutput) -> Result<StepOutput, EngineError> {
        let tap = self
            .speculation
            .as_ref()
            .map_or(FeatureTap::None, |s| s.drafter.feature_tap().clone());
        let num_running = self.requests.num_running();
        let forward_start = Instant::now();
        let mut batch = self.requests.batch(&plan.scheduled);
        let StepForward {
            mut logits,
            features,
        } = self.runner.execute(&plan.kv_commands, &batch, &tap)?;
        let forward_done = Instant::now();
        let verified = verify(&self.verifier, &mut batch, logits.per_request())?;
        let mut context = StepContext {
            tokenizer: &self.tokenizer,
            recorder: &self.recorder,
            scheduler: &mut self.scheduler,
            now: Instant::now(),
            iteration: IterationStats::default(),
            output: StepOutput::default(),
        };
        // Committing a verification clears the draft; the policy calibrates its confidences.
        let calibration_inputs: Vec<CalibrationInput> = match self.speculation {
            Some(_) => batch.iter().map(CalibrationInput::before_commit).collect(),
            None => Vec::new(),
        };
        let results: Vec<EntryResult> = batch
            .iter_mut()
            .zip(verified)
            .map(|(entry, verified)| context.process(entry, verified))
            .collect();
        let StepContext {
            now,
            mut iteration,
            mut output,
            ..
        } = context;
        iteration.forward_time = Some(forward_done - forward_start);
        let draft_start = Instant::now();
        let (mut draft_depth, mut draft_tokens) = (0, 0);
        let decode = decode_step(
            &batch,
            num_running,
            iteration.num_generation_tokens,
            draft_start - forward_start,
        );
        if let Some(speculation) = self.speculation.as_mut() {
            speculation.policy.observe_decode(decode.as_ref());
            let inputs = batch.iter_mut().zip(&results).zip(&calibration_inputs);
            for ((entry, result), input) in inputs {
                let fed = entry.work.num_draft_tokens;
                if result.finish == Some(Finish::ABORT) {
                    continue;
                }
                if fed > 0 {
                    speculation.policy.observe_verification(
                        &mut entry.request.acceptance,
                        fed,
                        &result.accepted_nodes,
                        &input.confidences,
                    );
                    if let Some(tree) = &input.tree {
                        speculation
                            .policy
                            .observe_tree(tree, &result.accepted_nodes);
                    }
                }
                let num_accepted = result.accepted_nodes.len();
                let token_ids = &entry.request.token_ids;
                if let Some((dropped, matched)) =
                    input.dropped_outcome(fed, num_accepted, token_ids)
                {
                    speculation.policy.observe_dropped(dropped, fed, matched);
                }
            }
            let num_finished = results.iter().filter(|r| r.finish.is_some()).count();
            (draft_depth, draft_tokens) = speculation.draft_next(
                features.as_ref(),
                &self.runner,
                &mut batch,
                &results,
                num_running - num_finished,
                self.limits.max_model_len,
            );
        }
        let draft_done = Instant::now();
        if self.speculation.is_some() {
            iteration.draft_time = Some(draft_done - draft_start);
        }
        tracing::debug!(
            rows = plan.num_batched_tokens(),
            forward_ms = ms(forward_done - forward_start),
            verify_commit_ms = ms(draft_start - forward_done),
            draft_tokens,
            draft_depth,
            draft_ms = ms(draft_done - draft_start),
            "step timing"
        );
        if let Some(speculation) = self.speculation.as_mut() {
            speculation.policy.observe_step(&StepTiming {
                rows: plan.num_batched_tokens(),
                forward: forward_done - forward_start,
                draft_depth,
                draft_tokens,
                draft: draft_done - draft_start,
                other: draft_start - forward_done,
                decode_rows_only: decode.is_some(),
            });
        }
        drop(batch);
        for (work, result) in plan.scheduled.iter().zip(results) {
            if let Some(finish) = result.finish {
                output
                    .finished
                    .extend(self.finish(work.request_id, finish, now));
            }
        }
        self.recorder.record_iteration(&iteration);
        Ok(output)
    }

    /// Aborts an unfinished request and returns its output.
    pub fn abort(&mut self, id: RequestId) -> Result<RequestOutput, EngineError> {
        let request = self
            .requests
            .get_mut(id)
            .ok_or(EngineError::UnknownRequest(id))?;
        request
            .output
            .flush_text(&self.tokenizer)
            .map_err(|error| EngineError::Detokenize {
                request_id: id,
                error,
            })?;
        let output = self
            .finish(id, Finish::ABORT, Instant::now())
            .ok_or(EngineError::UnknownRequest(id))?;
        self.record_scheduler_stats(0);
        Ok(output)
    }

    /// The target model (a clone shares its weights).
    pub fn model(&self) -> &LlamaModel<B> {
        self.runner.model()
    }

    /// Whether any request is unfinished.
    pub fn has_unfinished(&self) -> bool {
        !self.requests.is_empty()
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

    /// Ends request `id` as `finish` says (it leaves the engine): frees its slot and draft
    /// state, records it and returns its output; `None` if it is not unfinished.
    fn finish(&mut self, id: RequestId, finish: Finish, now: Instant) -> Option<RequestOutput> {
        let mut request = self.requests.remove(id)?;
        self.scheduler.release(&mut request);
        if let Some(speculation) = self.speculation.as_mut() {
            speculation.drafter.release(id);
        }
        let stats = request.finished_stats(&finish, now);
        self.recorder.record_finished(&stats);
        Some(request.into_output(finish))
    }

    /// Aborts every request of a step whose forward or verification failed, so the engine
    /// stays consistent for the others.
    fn abort_scheduled(&mut self, plan: &SchedulerOutput) {
        for work in &plan.scheduled {
            if self
                .finish(work.request_id, Finish::ABORT, Instant::now())
                .is_some()
            {
                tracing::warn!(request_id = work.request_id, "aborted after a failed step");
            }
        }
        self.record_scheduler_stats(0);
    }

    /// Sets the running/waiting/KV gauges and adds `num_preemptions`.
    fn record_scheduler_stats(&self, num_preemptions: usize) {
        let usage = self.scheduler.kv_usage().clamp(0.0, 1.0);
        self.recorder.record_scheduler(&SchedulerStats {
            num_running_reqs: self.requests.num_running() as u64,
            num_waiting_reqs: self.requests.num_waiting() as u64,
            kv_cache_usage: KvCacheUsage::new(usage).unwrap_or_default(),
            num_preemptions: num_preemptions as u64,
        });
    }
}

impl StepContext<'_> {
    /// Commits one batch entry's step: a prefill chunk's computed tokens, or a sampling
    /// request's verified tokens (appended with stop checks, counted, streamed). A request
    /// whose output cannot be used is ended with an abort; the others keep going.
    fn process(&mut self, entry: &mut BatchEntry<'_>, verified: Option<Verified>) -> EntryResult {
        let Some(verified) = verified else {
            self.scheduler.commit(entry.work, entry.request, &[], &[]);
            return EntryResult::default();
        };
        match self.process_sampled(entry, verified) {
            Ok(result) => result,
            Err(error) => {
                let id = entry.request.id;
                tracing::error!(request_id = id, %error, "request aborted");
                self.output.deltas.push(RequestDelta {
                    request_id: id,
                    new_text: String::new(),
                    new_token_ids: Vec::new(),
                    finished: true,
                });
                EntryResult {
                    accepted_nodes: Vec::new(),
                    finish: Some(Finish::ABORT),
                }
            }
        }
    }

    /// Appends one sampling request's emitted tokens, records its spec-decode event, delta
    /// and latencies, and commits the tokens.
    fn process_sampled(
        &mut self,
        entry: &mut BatchEntry<'_>,
        verified: Verified,
    ) -> Result<EntryResult, EngineError> {
        let request = &mut *entry.request;
        let id = request.id;
        let before = request.lengths();
        let outcome = &verified.outcome;
        let appended = request
            .output
            .append(self.tokenizer, before, &outcome.tokens, verified.logprobs)
            .map_err(|error| EngineError::Detokenize {
                request_id: id,
                error,
            })?;
        let kept = &outcome.tokens[..appended.num_kept];
        let event = outcome.event(id, appended.num_kept);
        let num_accepted = event.as_ref().map_or(0, |e| e.num_accepted_tokens);
        if let Some(event) = &event {
            request.spec.count(event);
            self.recorder.record_spec_decode(event);
        }
        // Draft indices (tree nodes) of the accepted tokens, in order.
        let accepted_nodes = outcome.path[1..=num_accepted].to_vec();
        match request.timing.tokens_generated(self.now) {
            TokenLatency::FirstToken(ttft) => self.iteration.time_to_first_tokens.push(ttft),
            TokenLatency::InterToken(itl) => self.iteration.inter_token_latencies.push(itl),
        }
        if before.num_output_tokens == 0 {
            self.iteration.num_prompt_tokens += request.num_prompt_tokens as u64;
        }
        self.iteration.num_generation_tokens += kept.len() as u64;
        let finished = appended.finish.is_some();
        self.output.deltas.push(RequestDelta {
            request_id: id,
            new_text: request.output.take_new_text(finished),
            new_token_ids: kept.to_vec(),
            finished,
        });
        self.scheduler
            .commit(entry.work, request, &accepted_nodes, kept);
        Ok(EntryResult {
            accepted_nodes,
            finish: appended.finish,
        })
    }
}

/// Verifies the rows of every sampling request of `batch` (`rows` in batch order); one
/// result per entry, `None` for prefill chunks that do not sample.
fn verify(
    verifier: &Verifier,
    batch: &mut [BatchEntry<'_>],
    rows: Vec<&mut [f32]>,
) -> Result<Vec<Option<Verified>>, EngineError> {
    let suppressed: Vec<Vec<u32>> = batch
        .iter()
        .map(|entry| {
            let request = &*entry.request;
            let num_output = request.output_token_ids().len();
            request.output.suppressed_tokens(num_output)
        })
        .collect();
    let samples: Vec<bool> = batch.iter().map(|entry| entry.work.samples).collect();
    let mut inputs: Vec<VerifyInput<'_>> = batch
        .iter_mut()
        .zip(rows)
        .zip(&suppressed)
        .filter(|((entry, _), _)| entry.work.samples)
        .map(|((entry, rows), suppressed)| {
            let request = &mut *entry.request;
            let (prompt, output) = request.token_ids.split_at(request.num_prompt_tokens);
            let params = &request.sampling.params;
            VerifyInput {
                rows,
                prompt,
                output,
                drafts: request.draft.tokens(),
                tree: request.draft.tree(),
                draft_probs: request.draft.probs(),
                config: &request.sampling.config,
                rng: &mut request.sampling.rng,
                suppressed_tokens: suppressed,
                suppressed_rows: params.min_tokens.saturating_sub(output.len()),
                num_logprobs: params.logprobs,
            }
        })
        .collect();
    let mut verified = verifier
        .verify(&mut inputs)
        .map_err(|e| EngineError::Model(format!("verifying the step's logits: {e}")))?
        .into_iter();
    Ok(samples
        .into_iter()
        .map(|samples| if samples { verified.next() } else { None })
        .collect())
}

impl<B: KernelBackend> Speculation<B> {
    /// After a forward of `target`: hands the drafter the rows every request of `batch` that
    /// is still unfinished committed (features at its fed known rows and accepted draft rows,
    /// and the target's KV cache where the drafter copies from it) and stores the draft each
    /// gets for its next step, as long as the policy chooses while `num_running` requests run,
    /// capped so the root and drafts stay inside `max_model_len`. Returns the depth and the
    /// number of draft tokens drafted.
    fn draft_next(
        &mut self,
        features: Option<&Tensor<B, 2>>,
        target: &ModelRunner<B>,
        batch: &mut [BatchEntry<'_>],
        results: &[EntryResult],
        num_running: usize,
        max_model_len: usize,
    ) -> (usize, usize) {
        let vocab_size = target.model().config().vocab_size;
        let k = self.drafter.num_speculative_tokens();
        let mut spans = Vec::with_capacity(batch.len());
        let mut first_row = 0;
        let mut other_rows = 0;
        for (index, (entry, result)) in batch.iter().zip(results).enumerate() {
            let row = first_row;
            first_row += entry.work.num_tokens();
            if result.finish.is_some() {
                continue;
            }
            // The known rows, then the accepted drafts' rows (draft `n` sits `n` rows after
            // the root, the last known row).
            let known = entry.work.num_known_tokens;
            let rows: Vec<usize> = (row..row + known)
                .chain(
                    result
                        .accepted_nodes
                        .iter()
                        .map(|&node| row + known - 1 + node),
                )
                .collect();
            let request = &*entry.request;
            debug_assert_eq!(
                rows.len(),
                request.num_computed_tokens - entry.work.start_position
            );
            // Tokens through the next root: the sampled token, or the next prompt token.
            let end = request.num_computed_tokens + 1;
            let cap = if entry.work.samples {
                k.min(max_model_len.saturating_sub(end))
            } else {
                // A prefill chunk: its next chunk is a row count the policy cannot change.
                other_rows += entry.work.num_tokens().saturating_sub(1);
                0
            };
            spans.push((index, end, rows, cap));
        }
        let plan = {
            let mut caps = vec![None; batch.len()];
            for &(index, _, _, cap) in &spans {
                caps[index] = Some(cap);
            }
            let mut candidates: Vec<DraftCandidate<'_>> = batch
                .iter_mut()
                .zip(caps)
                .filter_map(|(entry, cap)| {
                    cap.map(|cap| DraftCandidate {
                        request_id: entry.request.id,
                        cap,
                        acceptance: &mut entry.request.acceptance,
                    })
                })
                .collect();
            self.policy.choose(num_running, other_rows, &mut candidates)
        };
        let stop = plan.thresholds.as_ref().map(|t| self.policy.chain_stop(t));
        let requests: Vec<ProposeRequest<'_>> = spans
            .iter()
            .zip(plan.lengths.iter().zip(&plan.gated))
            .map(|((index, end, rows, _), (&max_draft_tokens, &gated))| {
                let entry = &batch[*index];
                ProposeRequest {
                    request_id: entry.request.id,
                    tokens: &entry.request.token_ids[..*end],
                    first_new_position: entry.work.start_position,
                    feature_rows: rows,
                    max_draft_tokens,
                    stop: stop.filter(|_| gated),
                    temperature: entry.request.sampling.params.temperature,
                    seed: entry.request.sampling.seed,
                    drafting_suspended: plan.suspended,
                }
            })
            .collect();
        let view = self.drafter.reads_target_kv().then(|| {
            let slots = spans
                .iter()
                .map(|&(index, ..)| (batch[index].request.id, batch[index].work.slot))
                .collect();
            TargetKvCache::new(target.kv_cache(), target.model().config(), slots)
        });
        let target_kv = view
            .as_ref()
            .map(|view| view as &dyn TargetKeyValues<Tensor<B, 2>>);
        let drafts = self.drafter.draft(features, target_kv, &requests);
        drop(requests);
        let lengths: Vec<usize> = drafts.iter().map(Draft::num_draft_tokens).collect();
        if let Some(thresholds) = plan.thresholds.as_ref().filter(|_| !lengths.is_empty()) {
            tracing::debug!(
                keep_above = ?thresholds.keep_above,
                extend_above = ?thresholds.extend_above,
                allowed = ?plan.lengths,
                drafted = ?lengths,
                "gated drafts"
            );
        }
        let depth = self.policy.draft_depth(&lengths);
        let tokens = lengths.iter().sum();
        let allowed = plan.lengths.iter().zip(&plan.gated);
        for (((index, end, ..), draft), (&allowed, &gated)) in spans.iter().zip(drafts).zip(allowed)
        {
            let request = &mut *batch[*index].request;
            if gated {
                let drafted = draft.num_draft_tokens();
                self.policy
                    .observe_gated_end(&mut request.acceptance, drafted, allowed);
            }
            let (id, root) = (request.id, request.token_ids[end - 1]);
            request.draft = PendingDraft::new(draft, root, vocab_size).unwrap_or_else(|reason| {
                tracing::warn!(request_id = id, reason, "unusable draft dropped");
                PendingDraft::default()
            });
        }
        (depth, tokens)
    }
}

/// The guard's view of a step in which every request of `batch` decoded (one known token, and
/// its drafts); `None` for a step with prefill work.
fn decode_step(
    batch: &[BatchEntry<'_>],
    num_running: usize,
    tokens: u64,
    elapsed: std::time::Duration,
) -> Option<DecodeStep> {
    let decodes = |entry: &BatchEntry<'_>| entry.work.samples && entry.work.num_known_tokens == 1;
    batch.iter().all(decodes).then_some(DecodeStep {
        num_running,
        tokens: tokens as usize,
        seconds: elapsed.as_secs_f64(),
    })
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
