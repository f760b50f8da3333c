//! Draft heads the examples use when no trained head is given.

use anyhow::{Context, Result};
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::fixtures::eagle::{write_tiny_eagle1, TinyEagle1Options};
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

/// Where the examples write the untrained head for the default target.
pub fn untrained_head_dir() -> PathBuf {
    workspace_root()
        .join("models")
        .join("untrained-eagle1-head")
}
