//! The crate's top-level error: each module has its own error enum, and [`LoadError`] wraps them
//! for callers that load a whole model directory.

/// Any error from loading a model directory, a checkpoint, a tokenizer or a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// An I/O error on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Loading or using a tokenizer failed.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// Reading or importing a GGUF file failed.
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
    /// A `config.json` is missing, unreadable or describes an unsupported model.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A safetensors checkpoint is unreadable or does not match the model.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
}
