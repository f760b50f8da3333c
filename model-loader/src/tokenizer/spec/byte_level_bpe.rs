//! GPT-2 style byte-level BPE: text is split into words by regular expressions, each word is
//! spelled in the byte-level alphabet and merged by ranked merge rules.

use super::vocab_check::{check_special_tokens, token_ids};
use super::{AddedToken, Affixes};
use crate::tokenizer::TokenizerError;
use serde_json::{json, Map, Value};

/// How text is split into words before byte-level BPE runs on each word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreTokenizer {
    /// The GPT-2 byte-level split alone.
    ByteLevel,
    /// Every digit becomes its own word, then the GPT-2 byte-level split (SmolLM, StarCoder).
    IndividualDigitsThenByteLevel,
    /// Each regular expression (Oniguruma syntax) in turn splits every word so far into its
    /// matches and the text between them; no further split is made by the byte-level step.
    Regexes(Vec<String>),
}

impl PreTokenizer {
    /// The `pre_tokenizer` object of `tokenizer.json`.
    fn to_json(&self) -> Value {
        let byte_level = |use_regex: bool| {
            json!({
                "type": "ByteLevel",
                "add_prefix_space": false,
                "trim_offsets": true,
                "use_regex": use_regex
            })
        };
        match self {
            Self::ByteLevel => byte_level(true),
            Self::IndividualDigitsThenByteLevel => json!({
                "type": "Sequence",
                "pretokenizers": [
                    { "type": "Digits", "individual_digits": true },
                    byte_level(true)
                ]
            }),
            Self::Regexes(patterns) => {
                let mut steps: Vec<Value> = patterns
                    .iter()
                    .map(|pattern| {
                        json!({
                            "type": "Split",
                            "pattern": { "Regex": pattern },
                            "behavior": "Isolated",
                            "invert": false
                        })
                    })
                    .collect();
                steps.push(byte_level(false));
                json!({ "type": "Sequence", "pretokenizers": steps })
            }
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
    /// Whether a word that is a token by itself becomes that token without merging (Llama 3).
    pub ignore_merges: bool,
    /// Special tokens put around texts encoded with special tokens.
    pub affixes: Affixes,
}

impl ByteLevelBpeSpec {
    /// Checks that ids, merges, added tokens and affixes agree with the vocabulary.
    pub fn validate(&self) -> Result<(), TokenizerError> {
        let ids = token_ids(&self.vocab)?;
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
        check_special_tokens(&self.vocab, &self.added_tokens, &self.affixes)
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
        let byte_level = json!({
            "type": "ByteLevel",
            "add_prefix_space": true,
            "trim_offsets": false,
            "use_regex": true
        });
        let post_processor = match self.affixes.template_json() {
            Some(template) => json!({ "type": "Sequence", "processors": [byte_level, template] }),
            None => byte_level.clone(),
        };
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": AddedToken::list_json(&self.added_tokens),
            "normalizer": null,
            "pre_tokenizer": self.pre_tokenizer.to_json(),
            "post_processor": post_processor,
            "decoder": byte_level,
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": self.ignore_merges,
                "vocab": vocab,
                "merges": self.merges
            }
        }))
    }
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
            ignore_merges: false,
            affixes: Affixes::default(),
        }
    }

    #[test]
    fn valid_spec_serializes_vocab_and_merges() {
        let json = spec().to_json().unwrap();
        assert_eq!(json["model"]["vocab"]["ab"], 3);
        assert_eq!(json["model"]["merges"][0], json!(["a", "b"]));
        assert_eq!(json["added_tokens"][0]["special"], true);
        assert_eq!(json["post_processor"]["type"], "ByteLevel");
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
    fn bos_must_match_vocab() {
        let mut bad = spec();
        bad.affixes.bos = Some((1, "<s>".into()));
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("<s>"), "{err}");
    }

    #[test]
    fn regex_pre_tokenizer_splits_in_order_then_maps_bytes() {
        let json = PreTokenizer::Regexes(vec!["\\p{N}".into(), " ?\\p{L}+".into()]).to_json();
        let steps = json["pretokenizers"].as_array().unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0]["pattern"]["Regex"], "\\p{N}");
        assert_eq!(steps[1]["behavior"], "Isolated");
        assert_eq!(steps[2]["use_regex"], false);
    }

    #[test]
    fn affixes_add_a_template_after_byte_level() {
        let mut with_bos = spec();
        with_bos.affixes.bos = Some((0, "<s>".into()));
        let json = with_bos.to_json().unwrap();
        assert_eq!(
            json["post_processor"]["processors"][1]["type"],
            "TemplateProcessing"
        );
    }
}
