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
//! * `engine.rs`: the step loop; `scheduler.rs` and `kv_budget.rs`: continuous batching,
//!   chunked prefill, KV accounting and preemption; `request.rs`: a request's tokens and KV
//!   state; `model_runner.rs`: the model forward; `verifier.rs`: logits rows to emitted tokens
//!   (spec-decode's rejection sampler); `request_state.rs`, `detokenizer.rs`, `stop.rs`,
//!   `timing.rs`: per-request text, stop conditions and latencies; `backend.rs`: device and
//!   dtype to burn backend; `speculation.rs`: the drafter of speculative decoding (EAGLE-1/3
//!   head or n-gram lookup from [`SpeculativeConfig`]), called after every target forward, its
//!   drafts verified in the next step and counted in `SpecDecodeEvent`s.
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

#[cfg(feature = "server")]
mod async_llm;
mod backend;
mod config;
mod engine;
mod error;
mod kv_budget;
mod llm;
mod model_runner;
mod output;
mod prompt;
mod request;
mod request_state;
mod sampling_params;
mod scheduler;
#[cfg(feature = "server")]
pub mod server;
mod speculation;
mod stop;
mod timing;
mod verifier;

pub use aquila_model_loader::tokenizer::ChatMessage;
#[cfg(feature = "server")]
pub use async_llm::{
    AsyncLlm, AsyncLlmConfig, AsyncLlmError, RequestEvent, RequestStream, ShutdownMode,
};
pub use config::{
    DType, Device, DraftTreeConfig, EngineConfig, KvCacheBudget, MetricsConfig, SpeculativeConfig,
    SpeculativeMethod,
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
