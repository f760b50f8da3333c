//! Errors of GGUF reading and import.

use crate::tokenizer::TokenizerError;
use std::path::PathBuf;

/// Any error from reading a GGUF file or importing it into a Hugging Face directory.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// An I/O error on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An error while parsing a named GGUF file.
    #[error("{path}: {error}")]
    File {
        /// The GGUF file.
        path: PathBuf,
        /// What went wrong (part of the message, not also a `source()`, so error chains print
        /// it once).
        error: Box<GgufError>,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first four bytes of the file.
        found: [u8; 4],
    },
    /// The GGUF version is not 2 or 3.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a structure it declares.
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes, only {available} left")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts.
        offset: u64,
        /// How many bytes it needs.
        needed: u64,
        /// How many bytes remain in the file.
        available: u64,
    },
    /// A count or length exceeds what a sane file holds.
    #[error("{what} is {value}, above the limit of {limit}")]
    LimitExceeded {
        /// What was counted.
        what: String,
        /// The declared value.
        value: u64,
        /// The largest accepted value.
        limit: u64,
    },
    /// A string is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Where it starts.
        offset: u64,
    },
    /// A metadata value has an unknown type code.
    #[error("metadata key {key:?}: unknown value type {type_id}")]
    UnknownValueType {
        /// The metadata key.
        key: String,
        /// The type code.
        type_id: u32,
    },
    /// A boolean metadata value is neither 0 nor 1.
    #[error("metadata key {key:?}: boolean byte is {byte}, expected 0 or 1")]
    InvalidBool {
        /// The metadata key.
        key: String,
        /// The stored byte.
        byte: u8,
    },
    /// A metadata key appears twice.
    #[error("metadata key {0:?} appears twice")]
    DuplicateKey(String),
    /// A tensor has an unknown GGML type code.
    #[error("tensor {tensor:?}: unknown GGML type {type_id}")]
    UnknownTensorType {
        /// The tensor name.
        tensor: String,
        /// The type code.
        type_id: u32,
    },
    /// A tensor has a GGML type this importer cannot dequantize.
    #[error(
        "tensor {tensor:?}: GGML type {type_name} cannot be dequantized (supported: {})",
        super::dequant::supported_names()
    )]
    UnsupportedTensorType {
        /// The tensor name.
        tensor: String,
        /// The type's name.
        type_name: &'static str,
    },
    /// A tensor's declaration is inconsistent (dimensions, block alignment, offset alignment).
    #[error("tensor {tensor:?}: {message}")]
    InvalidTensor {
        /// The tensor name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A tensor name appears twice.
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    /// A tensor's data lies outside the file.
    #[error("tensor {tensor:?}: data at offset {offset} with {size} bytes ends past the end of the data section ({available} bytes)")]
    TensorOutOfBounds {
        /// The tensor name.
        tensor: String,
        /// Offset of the data inside the data section.
        offset: u64,
        /// Size of the data in bytes.
        size: u64,
        /// Size of the data section.
        available: u64,
    },
    /// A required metadata key is absent.
    #[error("metadata key {0:?} is missing")]
    MissingMetadata(String),
    /// A metadata value has the wrong type.
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    MetadataType {
        /// The metadata key.
        key: String,
        /// The expected type.
        expected: &'static str,
        /// The stored type.
        found: &'static str,
    },
    /// A metadata value is out of range or inconsistent.
    #[error("metadata key {key:?}: {message}")]
    InvalidMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The model is of a kind the importer does not handle.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A tensor the model needs is absent.
    #[error("tensor {0:?} is missing")]
    MissingTensor(String),
    /// A tensor name does not belong to a Llama model.
    #[error("tensor {0:?} is not part of a Llama model")]
    UnexpectedTensor(String),
    /// A tensor's shape disagrees with the hyperparameters.
    #[error("tensor {tensor:?}: shape {found:?} (GGML order), expected {expected:?}")]
    ShapeMismatch {
        /// The tensor name.
        tensor: String,
        /// The shape the hyperparameters imply.
        expected: Vec<u64>,
        /// The stored shape.
        found: Vec<u64>,
    },
    /// Rebuilding or writing the tokenizer failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Writing `model.safetensors` failed.
    #[error("{path}: writing safetensors: {message}")]
    Safetensors {
        /// The output file.
        path: PathBuf,
        /// What the safetensors crate reported.
        message: String,
    },
    /// An import marker file is malformed.
    #[error("{path}: invalid import marker: {message}")]
    InvalidMarker {
        /// The marker file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A downloaded file does not have the expected SHA-256.
    #[error("{path}: sha256 is {found}, expected {expected}")]
    ChecksumMismatch {
        /// The file checked.
        path: PathBuf,
        /// The expected digest (hex).
        expected: String,
        /// The actual digest (hex).
        found: String,
    },
    /// A Python wheel (zip) could not be read.
    #[error("{path}: {message}")]
    Wheel {
        /// The wheel file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl GgufError {
    /// Builds a [`GgufError::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds a [`GgufError::InvalidTensor`].
    pub(crate) fn tensor(tensor: &str, message: impl Into<String>) -> Self {
        Self::InvalidTensor {
            tensor: tensor.to_string(),
            message: message.into(),
        }
    }
}
