//! The contents of a `tokenizer_config.json`.

use super::{write_json, AddedToken};
use crate::tokenizer::TokenizerError;
use serde_json::{json, Map, Value};
use std::path::Path;

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
    /// Whether encoding with special tokens puts the BOS token first.
    pub add_bos_token: bool,
    /// Whether encoding with special tokens puts the EOS token last.
    pub add_eos_token: bool,
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
            "add_bos_token": self.add_bos_token,
            "add_eos_token": self.add_eos_token,
            "added_tokens_decoder": decoder,
            "additional_special_tokens": additional,
            "bos_token": self.bos_token,
            "clean_up_tokenization_spaces": false,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "tokenizer_class": "PreTrainedTokenizerFast",
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

#[cfg(test)]
mod tests {
    use super::*;

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
