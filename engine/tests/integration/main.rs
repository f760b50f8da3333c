//! aquila-engine's integration tests, one binary: the offline API on the tiny fixture, the oracle parity on SmolLM2, and speculative decoding through the engine.
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

mod common;

mod batching;
mod metrics;
mod oracle;
mod requests;
mod sampling;
mod spec_adaptive;
mod spec_batch_limit;
mod spec_config;
mod spec_lossless;
mod spec_replay;
mod spec_smollm2;
mod spec_stochastic;
mod spec_tree;
