//! Descriptions of tokenizers, written out as Hugging Face `tokenizer.json` and
//! `tokenizer_config.json` files. Used by the GGUF importer (which rebuilds a tokenizer from GGUF
//! metadata) and by the tiny test fixture.
//!
//! Two kinds of model are described: byte-level BPE ([`ByteLevelBpeSpec`], GPT-2 style, with
//! the regex pre-tokenizers of Llama 3, Qwen2 and others) and SentencePiece BPE
//! ([`SentencePieceBpeSpec`], Llama 2 / Mistral / Phi-3 style, with byte fallback).

mod added;
mod byte_level_bpe;
mod config;
mod sentencepiece_bpe;
mod vocab_check;

pub use added::{AddedToken, Affixes};
pub use byte_level_bpe::{ByteLevelBpeSpec, PreTokenizer};
pub use config::TokenizerConfigSpec;
pub use sentencepiece_bpe::SentencePieceBpeSpec;

use super::TokenizerError;
use serde_json::Value;
use std::path::Path;

/// A complete tokenizer of either kind.
#[derive(Debug, Clone)]
pub enum TokenizerSpec {
    /// GPT-2 style byte-level BPE.
    ByteLevelBpe(ByteLevelBpeSpec),
    /// SentencePiece BPE with byte fallback.
    SentencePieceBpe(SentencePieceBpeSpec),
}

impl TokenizerSpec {
    /// The `tokenizer.json` document.
    pub fn to_json(&self) -> Result<Value, TokenizerError> {
        match self {
            Self::ByteLevelBpe(spec) => spec.to_json(),
            Self::SentencePieceBpe(spec) => spec.to_json(),
        }
    }

    /// Writes `tokenizer.json` to `path`.
    pub fn write(&self, path: &Path) -> Result<(), TokenizerError> {
        write_json(path, &self.to_json()?)
    }
}

/// Writes `value` as pretty JSON to `path`.
pub(crate) fn write_json(path: &Path, value: &Value) -> Result<(), TokenizerError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| TokenizerError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    std::fs::write(path, text).map_err(|e| TokenizerError::io(path, e))
}
