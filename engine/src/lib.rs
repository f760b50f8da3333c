//! # aquila-engine
//!
//! An offline LLM engine on burn: continuous batching of many requests over one Llama-family
//! model, chunked prefill, preemption under a KV cache budget, per-request seeded sampling
//! (temperature, top-k, top-p, min-p, penalties), stop strings, streaming, and metrics in
//! vLLM's vocabulary (`aquila-metrics`), on the CPU (`burn::backend::Flex`, f32) or, with the
//! `cuda` feature, on NVIDIA GPUs.
//!
//! Layout, one job per file:
//! * [`Llm`] (`llm.rs`): the API; [`EngineConfig`] (`config.rs`); [`SamplingParams`]
//!   (`sampling_params.rs`); [`Prompt`]/[`Prompts`] (`prompt.rs`); [`RequestOutput`],
//!   [`RequestDelta`], [`RequestMetrics`] (`output.rs`); [`EngineError`] (`error.rs`).
//! * `engine.rs`: the step loop; `request.rs`: the one record of a request (tokens, KV state,
//!   sampling state, pending draft, output assembly, timing) and `requests.rs` the map of them;
//!   `scheduler.rs` and `kv_budget.rs`: continuous batching over those records, chunked
//!   prefill, KV accounting and preemption; `model_runner.rs`: the model forward;
//!   `verifier.rs`: logits rows to emitted tokens (spec-decode's rejection sampler, whose
//!   outcomes give the `SpecDecodeEvent`s the engine forwards to the recorder);
//!   `request_sampling.rs`: parameters, pipeline and random stream; `output_assembly.rs`,
//!   `stop.rs`, `timing.rs`: per-request text, stop conditions and latencies; `backend.rs`:
//!   device and dtype to burn backend; `speculation.rs`: the drafter of speculative decoding
//!   (EAGLE-1/3 head, draft language model, n-gram lookup or a custom proposer, from
//!   [`SpeculativeConfig`]), called after every target forward; `pending_draft.rs`: a draft
//!   until its verification;
//!   `draft_policy.rs`: how many tokens each request drafts per step, from `step_costs.rs`
//!   (the engine's timings of its own steps) and `acceptance.rs` (each request's acceptance
//!   per draft row), checked by `goodput_guard.rs` (the tokens per second drafting steps and
//!   plain steps delivered, per batch size); it also sets where confident chains end, with a
//!   calibration of the drafter's confidences against verification outcomes.
//! * With the `server` feature: `AsyncLlm` (`async_llm/`), the engine stepping on its own
//!   thread behind channels, and `server/`, an OpenAI-compatible HTTP server over it.
//!
//! ```no_run
//! use aquila_engine::{EngineConfig, Llm, SamplingParams};
//!
//! let mut llm = Llm::new(EngineConfig::new("models/smollm2-135m-instruct"))?;
//! let params = SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(1), ..SamplingParams::greedy(32) };
//! for output in llm.generate(["Hello, my name is", "The sky is"], &params)? {
//!     println!("{:?} -> {:?} ({:?})", output.prompt, output.text, output.finish_reason);
//! }
//! let metrics = llm.get_metrics();
//! # Ok::<(), aquila_engine::EngineError>(())
//! ```
#![warn(missing_docs)]

mod acceptance;
#[cfg(feature = "server")]
mod async_llm;
mod backend;
mod calibration_input;
mod config;
mod draft_policy;
mod engine;
mod error;
mod goodput_guard;
mod kv_budget;
mod llm;
mod model_runner;
mod output;
mod output_assembly;
mod pending_draft;
mod prompt;
mod request;
mod request_sampling;
mod requests;
mod sampling_params;
mod scheduler;
#[cfg(feature = "server")]
pub mod server;
mod speculation;
mod step_costs;
mod stop;
mod timing;
mod verifier;

pub use aquila_model_loader::tokenizer::ChatMessage;
#[cfg(feature = "server")]
pub use async_llm::{
    AsyncLlm, AsyncLlmConfig, AsyncLlmError, RequestEvent, RequestStream, ShutdownMode,
};
pub use config::{
    DType, Device, DraftLength, DraftModelDrafter, DraftPick, DraftTreeConfig, EagleDrafter,
    EngineConfig, KvCacheBudget, MetricsConfig, NgramDrafter, SpeculativeConfig, SpeculativeMethod,
    WeightFormat,
};
pub use error::{EngineError, PromptError};
pub use llm::Llm;
pub use output::{
    FinishReason, PositionLogprobs, RequestDelta, RequestId, RequestMetrics, RequestOutput,
    StepOutput, StopReason, TokenLogprob,
};
pub use prompt::{Prompt, Prompts};
pub use sampling_params::{SamplingParams, SamplingParamsError, MAX_LOGPROBS};
pub use speculation::FeaturelessProposer;

/// The README's examples, compiled (and, unless marked `no_run`, run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
