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

/// Tensors named per kind of difference; the rest are counted (a model of 272 tensors
/// loaded against the wrong config would otherwise print every one of them).
const NAMED_PER_KIND: usize = 3;

/// Writes ` N <label>: a, b, c and M more;` for `count > 0` differences, naming the first few
/// from `named`.
fn write_kind(
    f: &mut fmt::Formatter<'_>,
    (singular, plural): (&str, &str),
    count: usize,
    named: impl Iterator<Item = String>,
) -> fmt::Result {
    if count == 0 {
        return Ok(());
    }
    let label = if count == 1 { singular } else { plural };
    let named: Vec<String> = named.take(NAMED_PER_KIND).collect();
    write!(f, " {count} {label}: {}", named.join(", "))?;
    if count > named.len() {
        write!(f, " and {} more", count - named.len())?;
    }
    write!(f, ";")
}

impl fmt::Display for MismatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_kind(
            f,
            ("missing tensor", "missing tensors"),
            self.missing.len(),
            self.missing.iter().cloned(),
        )?;
        write_kind(
            f,
            (
                "tensor with the wrong shape",
                "tensors with the wrong shape",
            ),
            self.wrong_shapes.len(),
            self.wrong_shapes.iter().map(|m| {
                format!(
                    "{} (expected {:?}, found {:?})",
                    m.name, m.expected, m.found
                )
            }),
        )?;
        write_kind(
            f,
            ("unreadable tensor", "unreadable tensors"),
            self.unreadable.len(),
            self.unreadable.iter().cloned(),
        )?;
        write_kind(
            f,
            ("unexpected tensor", "unexpected tensors"),
            self.unexpected.len(),
            self.unexpected.iter().cloned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_a_few_tensors_per_kind_and_counts_the_rest() {
        let names = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("{prefix}.{i}.weight")).collect()
        };
        let report = MismatchReport {
            missing: names("gone", 1),
            wrong_shapes: names("model.layers", 272)
                .into_iter()
                .map(|name| ShapeMismatch {
                    name,
                    expected: vec![576, 576],
                    found: vec![960, 960],
                })
                .collect(),
            unreadable: Vec::new(),
            unexpected: names("extra", 4),
        };
        let text = report.to_string();
        assert!(text.len() < 400, "{} bytes: {text}", text.len());
        assert!(text.contains(" 1 missing tensor: gone.0.weight;"), "{text}");
        assert!(
            text.contains(
                " 272 tensors with the wrong shape: model.layers.0.weight (expected [576, 576], \
                 found [960, 960]),"
            ),
            "{text}"
        );
        assert!(text.contains("model.layers.2.weight") && !text.contains("model.layers.3."));
        assert!(text.contains(" and 269 more;"), "{text}");
        assert!(text.contains(" 4 unexpected tensors: ") && text.ends_with(" and 1 more;"));
        assert!(!text.contains("unreadable"));
    }
}
