//! Errors of the tokenizer module.

use std::path::PathBuf;

/// Any error from loading, writing or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed or has the wrong shape.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// `tokenizer.json` was rejected by the `tokenizers` crate.
    #[error("{path}: invalid tokenizer: {message}")]
    InvalidTokenizer {
        /// The file involved.
        path: PathBuf,
        /// What the `tokenizers` crate reported.
        message: String,
    },
    /// A field of a tokenizer file has a value this crate cannot use.
    #[error("{path}: field `{field}`: {message}")]
    InvalidField {
        /// The file involved.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A special token named in a config file is not in the vocabulary.
    #[error("{path}: field `{field}` names token {token:?}, which is not in the vocabulary")]
    UnknownSpecialToken {
        /// The file involved.
        path: PathBuf,
        /// The field naming the token.
        field: String,
        /// The token text.
        token: String,
    },
    /// Encoding text failed.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// Decoding token ids failed.
    #[error("decoding failed: {0}")]
    Decode(String),
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The tokenizer has no chat template (neither `chat_template` in `tokenizer_config.json`
    /// nor a `chat_template.jinja` file).
    #[error("the tokenizer has no chat template")]
    NoChatTemplate,
    /// The chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A tokenizer description to be written is inconsistent.
    #[error("invalid tokenizer description: {0}")]
    InvalidSpec(String),
}

impl TokenizerError {
    /// Builds an [`TokenizerError::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
