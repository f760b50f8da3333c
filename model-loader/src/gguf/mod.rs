//! GGUF import: a memory-mapped GGUF v2/v3 reader, exact dequantization (every type gguf-py
//! dequantizes: floats, Q4_0 to Q8_0, the K-quants, the IQ and TQ types, MXFP4 and NVFP4),
//! llama.cpp's query/key row un-permutation, and a writer of float32 Hugging Face
//! model directories (config, safetensors, rebuilt tokenizer).
//!
//! [`import`] turns a Llama or Qwen2 GGUF file into a directory that
//! [`crate::tokenizer::Tokenizer`] and the safetensors checkpoint loader read like any Hugging
//! Face download. Malformed files
//! fail with a [`GgufError`] that names the problem; counts and string lengths are capped
//! before anything is allocated.

mod cursor;
pub mod dequant;
mod error;
mod ggml_type;
pub mod hparams;
mod import;
pub mod layout;
pub mod marker;
pub mod permute;
mod progress;
pub mod reader;
mod safetensors_out;
pub mod smollm2;
pub mod value;
pub mod vocab;
pub mod wheel;

pub use cursor::MAX_STRING_BYTES;
pub use error::GgufError;
pub use ggml_type::GgmlType;
pub use hparams::{GgufArchitecture, LlamaHyperParams};
pub use import::{import, ImportReport, MODEL_SAFETENSORS};
pub use marker::{sha256_file, ImportMarker, IMPORTER_VERSION};
pub use progress::ImportProgress;
pub use reader::{GgufFile, GgufHeader, TensorInfo};
pub use value::{GgufValue, MetadataExt};
pub use vocab::tokenizer_from_gguf;
