//! Shared helpers of the engine's integration tests: the tiny fixture model in a temporary
//! directory, engine configurations sized for it, and prompts.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::path::Path;

use aquila_engine::{EngineConfig, KvCacheBudget, Llm, RequestOutput, SamplingParams};
use aquila_model_loader::fixtures;
use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use tempfile::TempDir;

/// Prompts of different lengths, in the tiny tokenizer's corpus language.
pub const PROMPTS: [&str; 5] = [
    "the cat sat on the mat",
    "hello",
    "a user asks the assistant a question and the assistant answers the user",
    "the river",
    "there is a tree near the river, and the water in the river is cold. the dog ate the bone",
];

/// Writes the tiny Llama model (two layers, seed 0) and its tokenizer into a fresh temporary
/// directory.
pub fn tiny_model() -> TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    fixtures::llama::write_tiny_llama(dir.path(), &TinyLlamaOptions::default())
        .expect("tiny llama");
    dir
}

/// A CPU configuration for the tiny model with room for every test's batch.
pub fn config(model: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(model);
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = 512;
    config.kv_cache_budget = KvCacheBudget::Tokens(4096);
    config
}

/// An engine on the tiny model with `config(model)` adjusted by `adjust`.
pub fn llm_with(model: &Path, adjust: impl FnOnce(&mut EngineConfig)) -> Llm {
    let mut config = config(model);
    adjust(&mut config);
    Llm::new(config).expect("engine on the tiny model")
}

/// An engine on the tiny model with the default test configuration.
pub fn llm(model: &Path) -> Llm {
    llm_with(model, |_| {})
}

/// Greedy decoding of exactly `max_tokens` tokens (EOS does not stop it).
pub fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(max_tokens)
    }
}

/// Parameters for each of `PROMPTS`: greedy and seeded sampling alternate, all generating exactly
/// `max_tokens` tokens. Sampled requests make outputs diverse (the tiny model's greedy text
/// repeats itself), so comparisons see every logit row.
pub fn mixed(max_tokens: usize) -> Vec<SamplingParams> {
    (0..PROMPTS.len() as u64)
        .map(|i| {
            if i % 2 == 0 {
                greedy(max_tokens)
            } else {
                SamplingParams {
                    temperature: 1.0,
                    seed: Some(i),
                    ..greedy(max_tokens)
                }
            }
        })
        .collect()
}

/// The generated token ids of each output.
pub fn token_ids(outputs: &[RequestOutput]) -> Vec<Vec<u32>> {
    outputs.iter().map(|o| o.token_ids.clone()).collect()
}

pub mod spec;

/// The imported SmolLM2 model, as [`aquila_testdata::real_model_dir`] finds it.
pub fn real_model_dir() -> Option<std::path::PathBuf> {
    aquila_testdata::real_model_dir()
}

pub mod http;
pub mod server;
