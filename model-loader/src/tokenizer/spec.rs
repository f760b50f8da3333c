//! Descriptions of byte-level BPE tokenizers, written out as Hugging Face `tokenizer.json` and
//! `tokenizer_config.json` files. Used by the GGUF importer (which rebuilds a tokenizer from GGUF
//! metadata) and by the tiny test fixture.

use super::TokenizerError;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// How text is split into words before byte-level BPE runs on each word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// The GPT-2 byte-level split alone.
    ByteLevel,
    /// Every digit becomes its own word, then the GPT-2 byte-level split (SmolLM, StarCoder).
    IndividualDigitsThenByteLevel,
}

impl PreTokenizer {
    /// The `pre_tokenizer` object of `tokenizer.json`.
    fn to_json(self) -> Value {
        let byte_level = json!({
            "type": "ByteLevel",
            "add_prefix_space": false,
            "trim_offsets": true,
            "use_regex": true
        });
        match self {
            Self::ByteLevel => byte_level,
            Self::IndividualDigitsThenByteLevel => json!({
                "type": "Sequence",
                "pretokenizers": [
                    { "type": "Digits", "individual_digits": true },
                    byte_level
                ]
            }),
        }
    }
}

/// A token matched before BPE runs (a special token such as `<|im_start|>`, or a user-defined
/// token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedToken {
    /// The token id; the vocabulary holds `content` at this id.
    pub id: u32,
    /// The token text.
    pub content: String,
    /// Whether the token is special (skipped when decoding with `skip_special_tokens`).
    pub special: bool,
}

impl AddedToken {
    /// The token as an entry of `added_tokens` / `added_tokens_decoder`, without its id.
    fn to_json_fields(&self) -> Map<String, Value> {
        let value = json!({
            "content": self.content,
            "single_word": false,
            "lstrip": false,
            "rstrip": false,
            "normalized": !self.special,
            "special": self.special
        });
        match value {
            Value::Object(map) => map,
            _ => unreachable!("json! of an object literal is an object"),
        }
    }
}

/// A complete byte-level BPE tokenizer: vocabulary, merges, added tokens and pre-tokenizer.
#[derive(Debug, Clone)]
pub struct ByteLevelBpeSpec {
    /// Token texts in the byte-level alphabet, indexed by id (added tokens included).
    pub vocab: Vec<String>,
    /// Merge rules in priority order; each pair and its concatenation are in `vocab`.
    pub merges: Vec<(String, String)>,
    /// Tokens matched before BPE.
    pub added_tokens: Vec<AddedToken>,
    /// How text is split before BPE.
    pub pre_tokenizer: PreTokenizer,
}

impl ByteLevelBpeSpec {
    /// Checks that ids, merges and added tokens agree with the vocabulary.
    pub fn validate(&self) -> Result<(), TokenizerError> {
        let ids = self.token_ids()?;
        for (rank, (left, right)) in self.merges.iter().enumerate() {
            let merged = format!("{left}{right}");
            for part in [left, right, &merged] {
                if !ids.contains_key(part.as_str()) {
                    return Err(TokenizerError::InvalidSpec(format!(
                        "merge {rank} ({left:?} {right:?}) uses {part:?}, which is not in the vocabulary"
                    )));
                }
            }
        }
        for token in &self.added_tokens {
            match self.vocab.get(token.id as usize) {
                Some(text) if *text == token.content => {}
                Some(text) => {
                    return Err(TokenizerError::InvalidSpec(format!(
                        "added token {:?} has id {}, which the vocabulary spells {text:?}",
                        token.content, token.id
                    )))
                }
                None => {
                    return Err(TokenizerError::InvalidSpec(format!(
                        "added token {:?} has id {}, outside the vocabulary of {}",
                        token.content,
                        token.id,
                        self.vocab.len()
                    )))
                }
            }
        }
        Ok(())
    }

    /// Maps token text to id, rejecting duplicates.
    fn token_ids(&self) -> Result<HashMap<&str, u32>, TokenizerError> {
        let mut ids = HashMap::with_capacity(self.vocab.len());
        for (id, text) in self.vocab.iter().enumerate() {
            let id = u32::try_from(id).map_err(|_| {
                TokenizerError::InvalidSpec(format!("vocabulary of {} tokens", self.vocab.len()))
            })?;
            if let Some(first) = ids.insert(text.as_str(), id) {
                return Err(TokenizerError::InvalidSpec(format!(
                    "token {text:?} appears twice in the vocabulary (ids {first} and {id})"
                )));
            }
        }
        Ok(ids)
    }

    /// The `tokenizer.json` document.
    pub fn to_json(&self) -> Result<Value, TokenizerError> {
        self.validate()?;
        let vocab: Map<String, Value> = self
            .vocab
            .iter()
            .enumerate()
            .map(|(id, text)| (text.clone(), json!(id)))
            .collect();
        let added_tokens: Vec<Value> = self
            .added_tokens
            .iter()
            .map(|token| {
                let mut fields = Map::new();
                fields.insert("id".into(), json!(token.id));
                fields.extend(token.to_json_fields());
                Value::Object(fields)
            })
            .collect();
        let byte_level = json!({
            "type": "ByteLevel",
            "add_prefix_space": true,
            "trim_offsets": false,
            "use_regex": true
        });
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added_tokens,
            "normalizer": null,
            "pre_tokenizer": self.pre_tokenizer.to_json(),
            "post_processor": byte_level,
            "decoder": byte_level,
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": self.merges
            }
        }))
    }

    /// Writes `tokenizer.json` to `path`.
    pub fn write(&self, path: &Path) -> Result<(), TokenizerError> {
        write_json(path, &self.to_json()?)
    }
}

/// The contents of a `tokenizer_config.json`: special tokens and the chat template.
#[derive(Debug, Clone, Default)]
pub struct TokenizerConfigSpec {
    /// Tokens matched before BPE, listed in `added_tokens_decoder`.
    pub added_tokens: Vec<AddedToken>,
    /// Text of the beginning-of-sequence token.
    pub bos_token: Option<String>,
    /// Text of the end-of-sequence token.
    pub eos_token: Option<String>,
    /// Text of the padding token.
    pub pad_token: Option<String>,
    /// Text of the unknown token.
    pub unk_token: Option<String>,
    /// The Jinja chat template.
    pub chat_template: Option<String>,
    /// The longest input the model accepts, in tokens.
    pub model_max_length: Option<u64>,
}

impl TokenizerConfigSpec {
    /// The `tokenizer_config.json` document.
    pub fn to_json(&self) -> Value {
        let decoder: Map<String, Value> = self
            .added_tokens
            .iter()
            .map(|token| (token.id.to_string(), Value::Object(token.to_json_fields())))
            .collect();
        let named = [
            &self.bos_token,
            &self.eos_token,
            &self.pad_token,
            &self.unk_token,
        ];
        let additional: Vec<&str> = self
            .added_tokens
            .iter()
            .filter(|t| t.special && !named.iter().any(|n| n.as_deref() == Some(&t.content)))
            .map(|t| t.content.as_str())
            .collect();
        let mut config = json!({
            "add_prefix_space": false,
            "added_tokens_decoder": decoder,
            "additional_special_tokens": additional,
            "bos_token": self.bos_token,
            "clean_up_tokenization_spaces": false,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "tokenizer_class": "GPT2Tokenizer",
            "unk_token": self.unk_token
        });
        if let Some(template) = &self.chat_template {
            config["chat_template"] = json!(template);
        }
        if let Some(max) = self.model_max_length {
            config["model_max_length"] = json!(max);
        }
        config
    }

    /// Writes `tokenizer_config.json` to `path`.
    pub fn write(&self, path: &Path) -> Result<(), TokenizerError> {
        write_json(path, &self.to_json())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ByteLevelBpeSpec {
        ByteLevelBpeSpec {
            vocab: ["<s>", "a", "b", "ab"].map(String::from).to_vec(),
            merges: vec![("a".into(), "b".into())],
            added_tokens: vec![AddedToken {
                id: 0,
                content: "<s>".into(),
                special: true,
            }],
            pre_tokenizer: PreTokenizer::ByteLevel,
        }
    }

    #[test]
    fn valid_spec_serializes_vocab_and_merges() {
        let json = spec().to_json().unwrap();
        assert_eq!(json["model"]["vocab"]["ab"], 3);
        assert_eq!(json["model"]["merges"][0], json!(["a", "b"]));
        assert_eq!(json["added_tokens"][0]["special"], true);
    }

    #[test]
    fn merge_outside_vocab_is_rejected() {
        let mut bad = spec();
        bad.merges.push(("b".into(), "a".into()));
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("\"ba\""), "{err}");
    }

    #[test]
    fn duplicate_token_is_rejected() {
        let mut bad = spec();
        bad.vocab.push("a".into());
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("appears twice"), "{err}");
    }

    #[test]
    fn added_token_must_match_vocab() {
        let mut bad = spec();
        bad.added_tokens[0].id = 1;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn config_lists_unnamed_specials_as_additional() {
        let config = TokenizerConfigSpec {
            added_tokens: vec![
                AddedToken {
                    id: 0,
                    content: "<s>".into(),
                    special: true,
                },
                AddedToken {
                    id: 5,
                    content: "<x>".into(),
                    special: true,
                },
            ],
            bos_token: Some("<s>".into()),
            chat_template: Some("{{ x }}".into()),
            ..Default::default()
        }
        .to_json();
        assert_eq!(config["additional_special_tokens"], json!(["<x>"]));
        assert_eq!(config["added_tokens_decoder"]["5"]["content"], "<x>");
        assert_eq!(config["chat_template"], "{{ x }}");
    }
}
