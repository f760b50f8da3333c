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
}
