//! aquila-engine's integration tests, one binary: the offline API on the tiny fixture, the oracle parity on SmolLM2, speculative decoding through the engine, and the OpenAI-compatible server (feature `server`, which the crate's dev-dependency on itself turns on).
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

mod common;

mod batching;
mod metrics;
mod oracle;
mod requests;
mod sampling;
mod server_api;
mod server_async_llm;
mod server_dashboard;
mod server_errors;
mod server_load;
mod server_openai;
mod server_prometheus;
mod shared_weights;
mod spec_batch_limit;
mod spec_config;
mod spec_draft_model;
mod spec_generic_path;
mod spec_lossless;
mod spec_quantized;
mod spec_replay;
mod spec_smollm2;
mod spec_stochastic;
mod spec_tree;
