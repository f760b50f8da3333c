//! The engine options of the programs that serve a model (`serve`, and the Dynamo worker in
//! `examples/dynamo-worker`), and the one function that turns them into the engine's
//! configuration.

use std::path::PathBuf;

use anyhow::{bail, Result};
use aquila_engine::{AsyncLlmConfig, EngineConfig};
use clap::Args;

use crate::paths::default_model_dir;
use crate::speculative_options::SpeculativeOptions;

/// The served model, its engine and its request queue.
#[derive(Args, Clone, Debug)]
pub struct ServingOptions {
    /// Target model directory (Hugging Face layout).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The model name clients pass in `model`; default: the model directory's name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Requests decoded together.
    #[arg(long)]
    pub max_num_seqs: Option<usize>,
    /// Requests admitted at once (running and waiting); more are refused (the HTTP server
    /// answers 503).
    #[arg(long, default_value_t = AsyncLlmConfig::default().max_pending_requests)]
    pub max_pending_requests: usize,
    /// Longest sequence (prompt plus output) of a request; default: the model's.
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Engine seed (requests without a seed derive theirs from it).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Speculative decoding.
    #[command(flatten)]
    pub speculative: SpeculativeOptions,
}

impl ServingOptions {
    /// The model directory: `--model`, else the workspace's SmolLM2 import.
    pub fn model_dir(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(default_model_dir)
    }

    /// The name clients pass in `model`: `--served-model-name`, else the model directory's
    /// name.
    pub fn served_model_name(&self) -> String {
        self.served_model_name.clone().unwrap_or_else(|| {
            let dir = self.model_dir();
            dir.file_name().map_or_else(
                || dir.display().to_string(),
                |name| name.to_string_lossy().into(),
            )
        })
    }

    /// The engine's configuration; an error names a missing model directory.
    pub fn engine_config(&self) -> Result<EngineConfig> {
        let model = self.model_dir();
        if !model.join("config.json").exists() {
            bail!(
                "no model at {}: run `cargo xtask import-model` first",
                model.display()
            );
        }
        let mut config = EngineConfig::new(&model);
        config.speculative = self.speculative.speculative_config(&model)?;
        config.seed = self.seed;
        config.max_model_len = self.max_model_len;
        if let Some(max_num_seqs) = self.max_num_seqs {
            config.max_num_seqs = max_num_seqs;
        }
        Ok(config)
    }

    /// The request queue's configuration.
    pub fn async_config(&self) -> AsyncLlmConfig {
        AsyncLlmConfig {
            max_pending_requests: self.max_pending_requests,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        serving: ServingOptions,
    }

    #[test]
    fn a_missing_model_directory_is_named() {
        let command = Command::parse_from(["serve", "--model", "/nonexistent/model"]);
        let error = command.serving.engine_config().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/model"), "{error}");
    }

    #[test]
    fn the_served_name_defaults_to_the_directory_name() {
        let command = Command::parse_from(["serve", "--model", "/models/my-model"]);
        assert_eq!(command.serving.served_model_name(), "my-model");
        let command = Command::parse_from(["serve", "--served-model-name", "m"]);
        assert_eq!(command.serving.served_model_name(), "m");
    }
}
