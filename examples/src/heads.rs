//! Draft heads the examples use when no trained head is given.

use anyhow::{Context, Result};
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::fixtures::eagle::{
    write_tiny_eagle1, write_tiny_eagle3, TinyEagle1Options, TinyEagle3Options,
};
use std::path::{Path, PathBuf};

use crate::paths::workspace_root;

/// The EAGLE-1 head trained in-tree for SmolLM2 (`cargo xtask train-eagle`), when shipped.
pub fn shipped_head_dir() -> PathBuf {
    heads_dir().join("smollm2-135m-eagle1")
}

/// The EAGLE-3 head trained in-tree for SmolLM2 (`cargo xtask train-eagle -- --method
/// eagle3`), when shipped.
pub fn shipped_eagle3_head_dir() -> PathBuf {
    heads_dir().join("smollm2-135m-eagle3")
}

/// Where trained heads are shipped in the repository.
fn heads_dir() -> PathBuf {
    workspace_root().join("examples").join("heads")
}

/// Writes an EAGLE-1 head of random weights (no fc bias) shaped for the target in `model_dir`
/// into `out`. Verification stays lossless with it; acceptance is near zero.
pub fn write_untrained_eagle1(model_dir: &Path, out: &Path) -> Result<()> {
    let target = LlamaConfig::from_file(&model_dir.join("config.json"))?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let options = TinyEagle1Options {
        fc_bias: false,
        bias_key: Some(false),
        embed_tokens: false,
        seed: 0,
    };
    write_tiny_eagle1(out, &target, &options)
        .with_context(|| format!("writing an untrained EAGLE-1 head to {}", out.display()))
}

/// Draft vocabulary of [`write_untrained_eagle3`]'s heads (the shipped EAGLE-3 head's).
const UNTRAINED_EAGLE3_DRAFT_VOCAB: usize = 8192;

/// Writes an EAGLE-3 head of random weights shaped for the target in `model_dir` into `out`:
/// a draft vocabulary of up to 8192 tokens, `fc` over the layers EAGLE-3 taps (2, the middle
/// one and the fourth from last, as far as the target has them). Verification stays lossless
/// with it; acceptance is near zero.
pub fn write_untrained_eagle3(model_dir: &Path, out: &Path) -> Result<()> {
    let target = LlamaConfig::from_file(&model_dir.join("config.json"))?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let layers = target.num_hidden_layers;
    let mut aux_layer_ids = vec![
        2.min(layers.saturating_sub(1)),
        layers / 2,
        layers.saturating_sub(4),
    ];
    aux_layer_ids.sort_unstable();
    aux_layer_ids.dedup();
    let options = TinyEagle3Options {
        draft_vocab_size: UNTRAINED_EAGLE3_DRAFT_VOCAB.min(target.vocab_size),
        aux_layer_ids,
        seed: 3,
        ..TinyEagle3Options::default()
    };
    write_tiny_eagle3(out, &target, &options)
        .with_context(|| format!("writing an untrained EAGLE-3 head to {}", out.display()))
}

/// Where the examples write the untrained head for the default target.
pub fn untrained_head_dir() -> PathBuf {
    workspace_root()
        .join("models")
        .join("untrained-eagle1-head")
}
