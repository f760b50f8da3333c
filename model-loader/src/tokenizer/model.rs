//! The vocabulary model a [`super::Tokenizer`] runs: its BPE vocabulary packed
//! ([`PackedBpe`]) where the merges need nothing beyond the vocabulary and the ranks, else the
//! model the `tokenizers` crate read from `tokenizer.json`.

use super::packed_bpe::PackedBpe;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::{Model, Token};

/// A tokenizer's vocabulary model.
#[derive(Debug, Clone)]
pub enum TokenModel {
    /// A BPE vocabulary without dropout, unknown token, byte fallback or affixes, packed.
    Packed(PackedBpe),
    /// Any other model, as the `tokenizers` crate read it.
    Read(Box<ModelWrapper>),
}

impl TokenModel {
    /// The model for `read`, the model of the `tokenizer.json` document `text`.
    pub fn for_document(text: &str, read: &ModelWrapper) -> Self {
        let packed = match read {
            ModelWrapper::BPE(bpe) if merges_only(bpe) => {
                PackedBpe::from_tokenizer_json(text, bpe.ignore_merges)
                    .filter(|packed| packed.len() == bpe.get_vocab_size())
            }
            _ => None,
        };
        packed.map_or_else(|| Self::Read(Box::new(read.clone())), Self::Packed)
    }
}

/// Whether `bpe` tokenizes a word by its merges alone: no dropout, unknown token, byte fallback,
/// subword prefix or word suffix.
fn merges_only(bpe: &BPE) -> bool {
    bpe.dropout.is_none_or(|p| p == 0.0)
        && bpe.unk_token.is_none()
        && !bpe.byte_fallback
        && bpe.continuing_subword_prefix.is_none()
        && bpe.end_of_word_suffix.is_none()
}

impl Model for TokenModel {
    type Trainer = TrainerWrapper;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        match self {
            Self::Packed(model) => model.tokenize(sequence),
            Self::Read(model) => model.tokenize(sequence),
        }
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            Self::Packed(model) => model.token_to_id(token),
            Self::Read(model) => model.token_to_id(token),
        }
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        match self {
            Self::Packed(model) => model.id_to_token(id),
            Self::Read(model) => model.id_to_token(id),
        }
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        match self {
            Self::Packed(model) => model.get_vocab(),
            Self::Read(model) => model.get_vocab(),
        }
    }

    fn get_vocab_size(&self) -> usize {
        match self {
            Self::Packed(model) => model.get_vocab_size(),
            Self::Read(model) => model.get_vocab_size(),
        }
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        match self {
            Self::Packed(model) => model.save(folder, prefix),
            Self::Read(model) => model.save(folder, prefix),
        }
    }

    fn get_trainer(&self) -> TrainerWrapper {
        match self {
            Self::Packed(_) => TrainerWrapper::BpeTrainer(BpeTrainer::default()),
            Self::Read(model) => model.get_trainer(),
        }
    }
}
