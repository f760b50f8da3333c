//! Rebuilding a Hugging Face tokenizer (`tokenizer.json`, `tokenizer_config.json`) from the
//! `tokenizer.*` metadata of a GGUF file, so that it encodes text as llama.cpp does:
//! byte-level BPE (`tokenizer.ggml.model = gpt2`) with the pre-tokenizer named by
//! `tokenizer.ggml.pre`, and SentencePiece BPE (`llama`) with byte fallback.

mod byte_level;
pub mod pre_tokenizers;
mod sentencepiece;
mod tokenizer;

pub use tokenizer::tokenizer_from_gguf;

use super::reader::GgufHeader;
use super::value::MetadataExt;
use super::GgufError;
use crate::tokenizer::spec::{AddedToken, Affixes, TokenizerConfigSpec, TokenizerSpec};

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TYPE_NORMAL: i64 = 1;
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// The tokenizer files rebuilt from GGUF metadata.
#[derive(Debug, Clone)]
pub struct RebuiltTokenizer {
    /// Contents of `tokenizer.json`.
    pub tokenizer: TokenizerSpec,
    /// Contents of `tokenizer_config.json`.
    pub config: TokenizerConfigSpec,
}

/// The token list shared by every tokenizer model.
struct GgufVocab {
    /// Token texts, indexed by id.
    tokens: Vec<String>,
    /// Tokens matched before the model runs: unknown, control and user-defined tokens.
    added_tokens: Vec<AddedToken>,
}

impl GgufVocab {
    /// Reads `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type`.
    fn read(header: &GgufHeader) -> Result<Self, GgufError> {
        let tokens = string_array(header, "tokenizer.ggml.tokens")?;
        let added_tokens = token_types(header, tokens.len())?
            .iter()
            .enumerate()
            .filter(|(_, &t)| matches!(t, TYPE_UNKNOWN | TYPE_CONTROL | TYPE_USER_DEFINED))
            .map(|(id, &t)| AddedToken {
                id: id as u32,
                content: tokens[id].clone(),
                special: t != TYPE_USER_DEFINED,
            })
            .collect();
        Ok(Self {
            tokens,
            added_tokens,
        })
    }

    /// The id and text of the token whose id metadata `key` holds, if present.
    fn named(&self, header: &GgufHeader, key: &str) -> Result<Option<(u32, String)>, GgufError> {
        header
            .optional_u64(key)?
            .map(|id| match self.tokens.get(id as usize) {
                Some(text) => Ok((id as u32, text.clone())),
                None => Err(GgufError::InvalidMetadata {
                    key: key.into(),
                    message: format!(
                        "token id {id} is outside the vocabulary of {}",
                        self.tokens.len()
                    ),
                }),
            })
            .transpose()
    }

    /// The BOS and EOS tokens added when encoding with special tokens: per
    /// `tokenizer.ggml.add_bos_token` (default `add_bos_default`) and `add_eos_token`
    /// (default false).
    fn affixes(&self, header: &GgufHeader, add_bos_default: bool) -> Result<Affixes, GgufError> {
        let added = |flag: &str, default: bool, id_key: &str| {
            if !header.optional_bool(flag)?.unwrap_or(default) {
                return Ok(None);
            }
            match self.named(header, id_key)? {
                Some(token) => Ok(Some(token)),
                None if header.optional_bool(flag)?.is_none() => Ok(None),
                None => Err(GgufError::InvalidMetadata {
                    key: flag.into(),
                    message: format!("true, but there is no {id_key}"),
                }),
            }
        };
        Ok(Affixes {
            bos: added(
                "tokenizer.ggml.add_bos_token",
                add_bos_default,
                "tokenizer.ggml.bos_token_id",
            )?,
            eos: added(
                "tokenizer.ggml.add_eos_token",
                false,
                "tokenizer.ggml.eos_token_id",
            )?,
        })
    }
}

/// Rebuilds the tokenizer of a GGUF file whose `tokenizer.ggml.model` is `gpt2` (byte-level
/// BPE) or `llama` (SentencePiece BPE). `model_max_length` goes to `tokenizer_config.json`.
pub fn rebuild_tokenizer(
    header: &GgufHeader,
    model_max_length: Option<u64>,
) -> Result<RebuiltTokenizer, GgufError> {
    let model = header.required_str("tokenizer.ggml.model")?;
    let vocab = GgufVocab::read(header)?;
    let tokenizer = match model {
        "gpt2" => byte_level::rebuild(header, &vocab)?,
        "llama" => sentencepiece::rebuild(header, &vocab)?,
        other => {
            return Err(GgufError::Unsupported(format!(
                "tokenizer model {other:?} (supported: \"gpt2\" byte-level BPE, \"llama\" \
                 SentencePiece BPE)"
            )))
        }
    };
    let affixes = match &tokenizer {
        TokenizerSpec::ByteLevelBpe(spec) => &spec.affixes,
        TokenizerSpec::SentencePieceBpe(spec) => &spec.affixes,
    };
    let text = |key: &str| -> Result<Option<String>, GgufError> {
        Ok(vocab.named(header, key)?.map(|(_, text)| text))
    };
    let config = TokenizerConfigSpec {
        added_tokens: vocab.added_tokens.clone(),
        bos_token: text("tokenizer.ggml.bos_token_id")?,
        eos_token: text("tokenizer.ggml.eos_token_id")?,
        pad_token: text("tokenizer.ggml.padding_token_id")?,
        unk_token: text("tokenizer.ggml.unknown_token_id")?,
        chat_template: header
            .optional_str("tokenizer.chat_template")?
            .map(str::to_string),
        model_max_length,
        add_bos_token: affixes.bos.is_some(),
        add_eos_token: affixes.eos.is_some(),
    };
    Ok(RebuiltTokenizer { tokenizer, config })
}

/// A required array of strings.
fn string_array(header: &GgufHeader, key: &str) -> Result<Vec<String>, GgufError> {
    header
        .required_array(key)?
        .iter()
        .enumerate()
        .map(|(i, value)| {
            value
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| super::value::mismatch(&format!("{key}[{i}]"), "a string", value))
        })
        .collect()
}

/// `tokenizer.ggml.token_type`, one integer per token (all normal when absent).
fn token_types(header: &GgufHeader, vocab_len: usize) -> Result<Vec<i64>, GgufError> {
    const KEY: &str = "tokenizer.ggml.token_type";
    let Some(value) = header.value(KEY) else {
        return Ok(vec![TYPE_NORMAL; vocab_len]);
    };
    let items = value
        .as_array()
        .ok_or_else(|| super::value::mismatch(KEY, "an array", value))?;
    if items.len() != vocab_len {
        return Err(GgufError::InvalidMetadata {
            key: KEY.into(),
            message: format!("{} entries for {vocab_len} tokens", items.len()),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64()
                .ok_or_else(|| super::value::mismatch(&format!("{KEY}[{i}]"), "an integer", v))
        })
        .collect()
}
