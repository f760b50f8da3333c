//! What the tests on the tiny fixture model share: the model, n-gram drafting at a fixed
//! length, and greedy sampling that runs to the length limit.

use aquila_engine::{DraftLength, Prompt, SamplingParams, SpeculativeConfig};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};

/// A tiny Llama model in a temporary directory.
pub fn tiny_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    write_tiny_llama(dir.path(), &TinyLlamaOptions::default()).expect("tiny model");
    dir
}

/// n-gram drafting of `k` tokens at a fixed length, so every step drafts (n-gram drafts still
/// vary in length).
pub fn fixed_ngram(k: usize) -> SpeculativeConfig {
    SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::ngram(k)
    }
}

/// Text prompts.
pub fn prompts(texts: &[&str]) -> Vec<Prompt> {
    texts.iter().copied().map(Prompt::from).collect()
}

/// Greedy sampling of exactly `max_tokens` tokens (EOS ignored).
pub fn greedy_to_the_limit(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(max_tokens)
    }
}
