//! Rebuilding a Hugging Face tokenizer (`tokenizer.json`, `tokenizer_config.json`) from the
//! `tokenizer.*` metadata of a GGUF file.

use super::reader::GgufHeader;
use super::value::MetadataExt;
use super::GgufError;
use crate::tokenizer::spec::{AddedToken, ByteLevelBpeSpec, PreTokenizer, TokenizerConfigSpec};

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// The tokenizer files rebuilt from GGUF metadata.
#[derive(Debug, Clone)]
pub struct RebuiltTokenizer {
    /// Contents of `tokenizer.json`.
    pub tokenizer: ByteLevelBpeSpec,
    /// Contents of `tokenizer_config.json`.
    pub config: TokenizerConfigSpec,
}

/// Rebuilds the tokenizer of a byte-level BPE (`tokenizer.ggml.model = gpt2`) GGUF file.
pub fn rebuild_tokenizer(
    header: &GgufHeader,
    model_max_length: u64,
) -> Result<RebuiltTokenizer, GgufError> {
    let model = header.required_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(GgufError::Unsupported(format!(
            "tokenizer model {model:?} (only byte-level BPE, \"gpt2\", is supported)"
        )));
    }
    let pre_tokenizer = pre_tokenizer(
        header
            .optional_str("tokenizer.ggml.pre")?
            .unwrap_or("default"),
    )?;
    for key in [
        "tokenizer.ggml.add_bos_token",
        "tokenizer.ggml.add_space_prefix",
    ] {
        if header.optional_bool(key)? == Some(true) {
            return Err(GgufError::Unsupported(format!(
                "{key} = true with a byte-level BPE tokenizer"
            )));
        }
    }
    let vocab = string_array(header, "tokenizer.ggml.tokens")?;
    let token_types = token_types(header, vocab.len())?;
    let merges = string_array(header, "tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, merge)| match merge.split_once(' ') {
            Some((left, right)) => Ok((left.to_string(), right.to_string())),
            None => Err(GgufError::InvalidMetadata {
                key: format!("tokenizer.ggml.merges[{i}]"),
                message: format!("{merge:?} is not two tokens separated by a space"),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let added_tokens: Vec<AddedToken> = token_types
        .iter()
        .enumerate()
        .filter(|(_, &t)| matches!(t, TYPE_UNKNOWN | TYPE_CONTROL | TYPE_USER_DEFINED))
        .map(|(id, &t)| AddedToken {
            id: id as u32,
            content: vocab[id].clone(),
            special: t != TYPE_USER_DEFINED,
        })
        .collect();
    let named = |key: &str| -> Result<Option<String>, GgufError> {
        header
            .optional_u64(key)?
            .map(|id| {
                vocab
                    .get(id as usize)
                    .cloned()
                    .ok_or_else(|| GgufError::InvalidMetadata {
                        key: key.into(),
                        message: format!(
                            "token id {id} is outside the vocabulary of {}",
                            vocab.len()
                        ),
                    })
            })
            .transpose()
    };
    let config = TokenizerConfigSpec {
        added_tokens: added_tokens.clone(),
        bos_token: named("tokenizer.ggml.bos_token_id")?,
        eos_token: named("tokenizer.ggml.eos_token_id")?,
        pad_token: named("tokenizer.ggml.padding_token_id")?,
        unk_token: named("tokenizer.ggml.unknown_token_id")?,
        chat_template: header
            .optional_str("tokenizer.chat_template")?
            .map(str::to_string),
        model_max_length: Some(model_max_length),
    };
    let tokenizer = ByteLevelBpeSpec {
        vocab,
        merges,
        added_tokens,
        pre_tokenizer,
    };
    tokenizer.validate()?;
    Ok(RebuiltTokenizer { tokenizer, config })
}

/// The pre-tokenizer llama.cpp names `pre`.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizer, GgufError> {
    match pre {
        "smollm" => Ok(PreTokenizer::IndividualDigitsThenByteLevel),
        "gpt2" | "gpt-2" | "default" => Ok(PreTokenizer::ByteLevel),
        other => Err(GgufError::Unsupported(format!(
            "tokenizer.ggml.pre = {other:?} (supported: smollm, gpt2, default)"
        ))),
    }
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
        return Ok(vec![1; vocab_len]);
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
