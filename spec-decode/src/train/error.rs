//! [`TrainError`]: everything that can stop recording or training.

use std::path::PathBuf;

use aquila_model_loader::model::ModelError;

use crate::eagle::EagleError;

/// An error of the training pipeline, naming the file or setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A shard file is malformed.
    #[error("shard {path}: {message}")]
    Shard {
        /// The shard.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Recorded data is inconsistent or missing.
    #[error("training data: {0}")]
    Data(String),
    /// A training setting is impossible.
    #[error("training config: {0}")]
    Config(String),
    /// A checkpoint could not be saved or restored.
    #[error("training checkpoint: {0}")]
    Checkpoint(String),
    /// The loss became NaN or infinite.
    #[error("training diverged at step {step} (loss is not finite); lower the learning rate")]
    Diverged {
        /// The optimizer step.
        step: usize,
    },
    /// A forward pass rejected its input.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A head does not fit its target.
    #[error(transparent)]
    Eagle(#[from] EagleError),
}
