//! Errors of the config module.

use std::path::{Path, PathBuf};

/// A `config.json` could not be read, or one of its fields is missing or unusable.
///
/// Every variant names the file; field errors also name the field (dotted for nested objects,
/// e.g. `rope_scaling.factor`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid JSON, or its top level is not an object.
    #[error("{path}: invalid JSON: {message}")]
    Json {
        /// The file involved.
        path: PathBuf,
        /// What the parser reported.
        message: String,
    },
    /// A required field is absent (or `null`).
    #[error("{path}: missing field `{field}`")]
    MissingField {
        /// The file involved.
        path: PathBuf,
        /// The missing field.
        field: String,
    },
    /// A field has the wrong JSON type, a nonsensical value, or a value this crate does not
    /// support.
    #[error("{path}: field `{field}`: {message}")]
    InvalidField {
        /// The file involved.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    /// An [`ConfigError::InvalidField`] error.
    pub(crate) fn invalid(path: &Path, field: &str, message: impl Into<String>) -> Self {
        Self::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// A [`ConfigError::MissingField`] error.
    pub(crate) fn missing(path: &Path, field: &str) -> Self {
        Self::MissingField {
            path: path.to_path_buf(),
            field: field.to_string(),
        }
    }
}
