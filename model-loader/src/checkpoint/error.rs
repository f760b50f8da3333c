//! Errors of the checkpoint module.

use std::fmt;
use std::path::{Path, PathBuf};

/// A checkpoint could not be opened, or its tensors do not match what the model expects.
///
/// Every variant names the file (or checkpoint) and, where one is involved, the tensor.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A directory holds neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{dir}: no model.safetensors or model.safetensors.index.json")]
    NotFound {
        /// The directory searched.
        dir: PathBuf,
    },
    /// A safetensors file is corrupt or truncated (bad header, offsets or length).
    #[error("{path}: invalid safetensors file: {message}")]
    InvalidFile {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A sharded checkpoint's index file is invalid or disagrees with its shards.
    #[error("{path}: invalid checkpoint index: {message}")]
    InvalidIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Two shards hold a tensor of the same name.
    #[error("tensor `{name}` is in both {first} and {second}")]
    DuplicateTensor {
        /// The tensor name.
        name: String,
        /// The first shard holding it.
        first: PathBuf,
        /// The second shard holding it.
        second: PathBuf,
    },
    /// A tensor name is not in the checkpoint.
    #[error("{path}: no tensor `{name}`")]
    TensorNotFound {
        /// The checkpoint (file or index).
        path: PathBuf,
        /// The tensor name.
        name: String,
    },
    /// A tensor's data type cannot be converted to what is asked.
    #[error("{path}: tensor `{name}` has dtype {dtype}, expected {expected}")]
    UnsupportedDtype {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// The tensor's dtype.
        dtype: String,
        /// What the caller accepts.
        expected: &'static str,
    },
    /// A tensor's contents are unusable (for example a boolean byte other than 0 or 1).
    #[error("{path}: tensor `{name}`: {message}")]
    InvalidTensor {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The checkpoint's tensors differ from what the model expects: every missing tensor,
    /// every shape mismatch, every unusable tensor and every unexpected leftover is listed.
    #[error("{path}: checkpoint does not match the model:{report}")]
    Mismatch {
        /// The checkpoint (file or index).
        path: PathBuf,
        /// The differences.
        report: MismatchReport,
    },
}

/// A checkpoint or JSON file could not be written. Every variant names the file (or, for a
/// shard count, the directory).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file or directory could not be created or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A tensor does not fit its dtype and shape, or serializing the file failed.
    #[error("{path}: cannot write safetensors: {message}")]
    Safetensors {
        /// The file being written.
        path: PathBuf,
        /// What is wrong (naming the tensor where one is at fault).
        message: String,
    },
    /// Two tensors of one checkpoint share a name.
    #[error("{path}: two tensors are named `{name}`")]
    DuplicateName {
        /// The file (or index) being written.
        path: PathBuf,
        /// The repeated name.
        name: String,
    },
    /// A sharded checkpoint was asked for a number of shards that the tensors cannot fill.
    #[error("{dir}: cannot deal {tensors} tensors into {shards} shards")]
    Shards {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The shard count asked for.
        shards: usize,
        /// The number of tensors.
        tensors: usize,
    },
    /// A JSON value could not be serialized.
    #[error("{path}: cannot write JSON: {message}")]
    Json {
        /// The file being written.
        path: PathBuf,
        /// What the serializer reported.
        message: String,
    },
}

impl WriteError {
    /// A [`WriteError::Io`] error.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A tensor whose shape differs from the expected one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeMismatch {
    /// The tensor name.
    pub name: String,
    /// The shape the model expects.
    pub expected: Vec<usize>,
    /// The shape in the checkpoint.
    pub found: Vec<usize>,
}

/// Everything that differs between a checkpoint and the tensors a model takes from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MismatchReport {
    /// Expected tensors the checkpoint lacks.
    pub missing: Vec<String>,
    /// Tensors with the wrong shape.
    pub wrong_shapes: Vec<ShapeMismatch>,
    /// Tensors that could not be read (wrong dtype, bad contents), as messages.
    pub unreadable: Vec<String>,
    /// Tensors in the checkpoint the model did not take.
    pub unexpected: Vec<String>,
}

impl MismatchReport {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.wrong_shapes.is_empty()
            && self.unreadable.is_empty()
            && self.unexpected.is_empty()
    }
}

impl fmt::Display for MismatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.missing.is_empty() {
            write!(f, " missing tensors: {};", self.missing.join(", "))?;
        }
        if !self.wrong_shapes.is_empty() {
            let shapes: Vec<String> = self
                .wrong_shapes
                .iter()
                .map(|m| {
                    format!(
                        "{} (expected {:?}, found {:?})",
                        m.name, m.expected, m.found
                    )
                })
                .collect();
            write!(f, " wrong shapes: {};", shapes.join(", "))?;
        }
        if !self.unreadable.is_empty() {
            write!(f, " unreadable tensors: {};", self.unreadable.join("; "))?;
        }
        if !self.unexpected.is_empty() {
            write!(f, " unexpected tensors: {};", self.unexpected.join(", "))?;
        }
        Ok(())
    }
}
