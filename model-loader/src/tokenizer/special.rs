//! Special token ids (BOS, EOS, padding, unknown) gathered from a model directory's
//! `generation_config.json`, `config.json` and `tokenizer_config.json`.

use super::TokenizerError;
use serde_json::Value;
use std::path::Path;

/// Special token ids of a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning-of-sequence token.
    pub bos: Option<u32>,
    /// End-of-sequence tokens; generation stops at any of them. The first is the primary one.
    pub eos: Vec<u32>,
    /// Padding token.
    pub pad: Option<u32>,
    /// Unknown token.
    pub unk: Option<u32>,
}

impl SpecialTokens {
    /// The primary end-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos.first().copied()
    }

    /// Whether `id` ends a sequence.
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos.contains(&id)
    }
}

/// A parsed JSON config file and its path (for error messages).
pub(crate) struct JsonFile {
    pub(crate) path: std::path::PathBuf,
    pub(crate) value: Value,
}

impl JsonFile {
    /// Reads `path` if it exists.
    pub(crate) fn read_optional(path: &Path) -> Result<Option<Self>, TokenizerError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(TokenizerError::io(path, e)),
        };
        let value = serde_json::from_str(&text).map_err(|source| TokenizerError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Some(Self {
            path: path.to_path_buf(),
            value,
        }))
    }

    /// A field error on this file.
    fn invalid(&self, field: &str, message: impl Into<String>) -> TokenizerError {
        TokenizerError::InvalidField {
            path: self.path.clone(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// Reads `field` as a list of token ids (a single id, a list, or null/absent).
    pub(crate) fn ids(&self, field: &str) -> Result<Vec<u32>, TokenizerError> {
        let as_id = |v: &Value| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| self.invalid(field, format!("expected a token id, found {v}")))
        };
        match self.value.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(as_id).collect(),
            Some(v) => Ok(vec![as_id(v)?]),
        }
    }

    /// Reads `field` as token text: a string, or an object with a `content` string.
    pub(crate) fn token_text(&self, field: &str) -> Result<Option<String>, TokenizerError> {
        match self.value.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(Value::Object(map)) => match map.get("content") {
                Some(Value::String(text)) => Ok(Some(text.clone())),
                _ => Err(self.invalid(field, "object without a `content` string")),
            },
            Some(v) => Err(self.invalid(field, format!("expected token text, found {v}"))),
        }
    }
}

/// The files special tokens are read from, each optional.
pub(crate) struct SpecialTokenSources<'a> {
    /// `tokenizer_config.json` (token texts).
    pub(crate) tokenizer_config: Option<&'a JsonFile>,
    /// `config.json` (ids).
    pub(crate) model_config: Option<&'a JsonFile>,
    /// `generation_config.json` (ids).
    pub(crate) generation_config: Option<&'a JsonFile>,
}

impl SpecialTokenSources<'_> {
    /// Resolves the special tokens. Ids come first from `generation_config.json`, then
    /// `config.json`, then the texts of `tokenizer_config.json` looked up with `token_to_id`.
    /// End-of-sequence ids of all three files are merged, in that order.
    pub(crate) fn resolve(
        &self,
        token_to_id: impl Fn(&str) -> Option<u32>,
    ) -> Result<SpecialTokens, TokenizerError> {
        let text_id = |field: &str| -> Result<Vec<u32>, TokenizerError> {
            let Some(file) = self.tokenizer_config else {
                return Ok(Vec::new());
            };
            match file.token_text(field)? {
                None => Ok(Vec::new()),
                Some(text) => match token_to_id(&text) {
                    Some(id) => Ok(vec![id]),
                    None => Err(TokenizerError::UnknownSpecialToken {
                        path: file.path.clone(),
                        field: field.to_string(),
                        token: text,
                    }),
                },
            }
        };
        let ids = |field: &str, text_field: &str| -> Result<Vec<u32>, TokenizerError> {
            let mut all = Vec::new();
            for file in [self.generation_config, self.model_config]
                .into_iter()
                .flatten()
            {
                all.extend(file.ids(field)?);
            }
            all.extend(text_id(text_field)?);
            let mut unique = Vec::with_capacity(all.len());
            for id in all {
                if !unique.contains(&id) {
                    unique.push(id);
                }
            }
            Ok(unique)
        };
        Ok(SpecialTokens {
            bos: ids("bos_token_id", "bos_token")?.first().copied(),
            eos: ids("eos_token_id", "eos_token")?,
            pad: ids("pad_token_id", "pad_token")?.first().copied(),
            unk: text_id("unk_token")?.first().copied(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(value: Value) -> JsonFile {
        JsonFile {
            path: "x.json".into(),
            value,
        }
    }

    fn lookup(text: &str) -> Option<u32> {
        ["<unk>", "<s>", "</s>", "<eot>"]
            .iter()
            .position(|t| *t == text)
            .map(|i| i as u32)
    }

    #[test]
    fn generation_config_wins_and_eos_ids_merge() {
        let tok = file(
            json!({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "unk_token": "<unk>"}),
        );
        let model = file(json!({"bos_token_id": 1, "eos_token_id": 2}));
        let generation =
            file(json!({"bos_token_id": 1, "eos_token_id": [3, 2], "pad_token_id": 0}));
        let special = SpecialTokenSources {
            tokenizer_config: Some(&tok),
            model_config: Some(&model),
            generation_config: Some(&generation),
        }
        .resolve(lookup)
        .unwrap();
        assert_eq!(
            special,
            SpecialTokens {
                bos: Some(1),
                eos: vec![3, 2],
                pad: Some(0),
                unk: Some(0)
            }
        );
        assert_eq!(special.eos_id(), Some(3));
        assert!(special.is_eos(2) && !special.is_eos(1));
    }

    #[test]
    fn unknown_token_text_is_an_error() {
        let tok = file(json!({"eos_token": "<nope>"}));
        let err = SpecialTokenSources {
            tokenizer_config: Some(&tok),
            model_config: None,
            generation_config: None,
        }
        .resolve(lookup)
        .unwrap_err();
        assert!(err.to_string().contains("<nope>"), "{err}");
    }

    #[test]
    fn malformed_id_names_the_field() {
        let model = file(json!({"eos_token_id": "two"}));
        let err = SpecialTokenSources {
            tokenizer_config: None,
            model_config: Some(&model),
            generation_config: None,
        }
        .resolve(lookup)
        .unwrap_err();
        assert!(err.to_string().contains("eos_token_id"), "{err}");
    }
}
