//! SentencePiece BPE (Llama 2, Mistral, Phi-3): spaces become `▁`, a `▁` is put before the text,
//! pieces merge in the order of the merged piece's score, and characters outside the vocabulary
//! become their UTF-8 bytes as `<0xHH>` tokens.
//!
//! SentencePiece stores no merge rules, only a score per piece; merging the adjacent pair whose
//! concatenation scores highest (leftmost on ties) is the same as BPE over every split of every
//! piece into two pieces, ranked by the whole piece's score. The `tokenizers` crate's BPE model
//! runs those merges.

use super::vocab_check::{check_special_tokens, token_ids};
use super::{AddedToken, Affixes};
use crate::tokenizer::TokenizerError;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// The word-boundary marker SentencePiece spells spaces with.
const SPACE_MARKER: &str = "\u{2581}";

/// A complete SentencePiece BPE tokenizer with byte fallback.
#[derive(Debug, Clone)]
pub struct SentencePieceBpeSpec {
    /// Piece texts (spaces spelled `▁`), indexed by id; added tokens and the 256 byte tokens
    /// `<0x00>`..`<0xFF>` included.
    pub vocab: Vec<String>,
    /// One score per piece: higher-scoring pieces are merged first.
    pub scores: Vec<f32>,
    /// Tokens matched before the model runs.
    pub added_tokens: Vec<AddedToken>,
    /// The unknown token, used for characters that no byte token can spell.
    pub unk_token: Option<String>,
    /// Whether a `▁` is put before the text (SentencePiece's `add_dummy_prefix`).
    pub add_space_prefix: bool,
    /// Special tokens put around texts encoded with special tokens.
    pub affixes: Affixes,
}

/// Whether `text` is a byte-fallback token, `<0xHH>`.
fn is_byte_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 6
        && text.starts_with("<0x")
        && text.ends_with('>')
        && bytes[3..5].iter().all(u8::is_ascii_hexdigit)
}

impl SentencePieceBpeSpec {
    /// Checks that scores, added tokens, the unknown token and affixes agree with the vocabulary.
    pub fn validate(&self) -> Result<(), TokenizerError> {
        let ids = token_ids(&self.vocab)?;
        if self.scores.len() != self.vocab.len() {
            return Err(TokenizerError::InvalidSpec(format!(
                "{} scores for {} pieces",
                self.scores.len(),
                self.vocab.len()
            )));
        }
        if let Some(unk) = &self.unk_token {
            if !ids.contains_key(unk.as_str()) {
                return Err(TokenizerError::InvalidSpec(format!(
                    "unknown token {unk:?} is not in the vocabulary"
                )));
            }
        }
        check_special_tokens(&self.vocab, &self.added_tokens, &self.affixes)
    }

    /// The merge rules: every split of a mergeable piece into two mergeable pieces, ordered by
    /// the piece's score (highest first), then by piece id, then by the left part's length.
    /// Added tokens and byte tokens are not mergeable: they never come out of a merge.
    pub fn merges(&self) -> Result<Vec<(String, String)>, TokenizerError> {
        let ids = token_ids(&self.vocab)?;
        let added: HashSet<u32> = self.added_tokens.iter().map(|t| t.id).collect();
        let mergeable = |id: u32| !added.contains(&id) && !is_byte_token(&self.vocab[id as usize]);
        let mut ranked: Vec<(f32, u32, usize)> = Vec::new();
        for (id, text) in self.vocab.iter().enumerate() {
            let id = id as u32;
            if !mergeable(id) {
                continue;
            }
            for (split, _) in text.char_indices().skip(1) {
                let parts = [&text[..split], &text[split..]];
                if parts
                    .iter()
                    .all(|part| ids.get(part).is_some_and(|&part_id| mergeable(part_id)))
                {
                    ranked.push((self.scores[id as usize], id, split));
                }
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        Ok(ranked
            .into_iter()
            .map(|(_, id, split)| {
                let text = &self.vocab[id as usize];
                (text[..split].to_string(), text[split..].to_string())
            })
            .collect())
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
        let replace_spaces =
            json!({ "type": "Replace", "pattern": { "String": " " }, "content": SPACE_MARKER });
        let mut normalizers = Vec::new();
        let mut decoders = vec![
            json!({ "type": "Replace", "pattern": { "String": SPACE_MARKER }, "content": " " }),
            json!({ "type": "ByteFallback" }),
            json!({ "type": "Fuse" }),
        ];
        if self.add_space_prefix {
            normalizers.push(json!({ "type": "Prepend", "prepend": SPACE_MARKER }));
            decoders.push(json!({ "type": "Strip", "content": " ", "start": 1, "stop": 0 }));
        }
        normalizers.push(replace_spaces);
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": AddedToken::list_json(&self.added_tokens),
            "normalizer": { "type": "Sequence", "normalizers": normalizers },
            "pre_tokenizer": null,
            "post_processor": self.affixes.template_json(),
            "decoder": { "type": "Sequence", "decoders": decoders },
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": self.unk_token,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": true,
                "byte_fallback": true,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": self.merges()?
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SentencePieceBpeSpec {
        let vocab = ["<unk>", "<s>", "<0x41>", "▁", "a", "b", "ab", "▁ab", "▁a"];
        SentencePieceBpeSpec {
            vocab: vocab.map(String::from).to_vec(),
            scores: vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -0.1, -4.0],
            added_tokens: vec![AddedToken {
                id: 1,
                content: "<s>".into(),
                special: true,
            }],
            unk_token: Some("<unk>".into()),
            add_space_prefix: true,
            affixes: Affixes {
                bos: Some((1, "<s>".into())),
                eos: None,
            },
        }
    }

    #[test]
    fn merges_follow_the_merged_piece_score() {
        let merges = spec().merges().unwrap();
        let pair = |l: &str, r: &str| (l.to_string(), r.to_string());
        // "▁ab" (-0.1) splits two ways, "ab" (-0.5), then "▁a" (-4.0).
        assert_eq!(
            merges,
            vec![
                pair("▁", "ab"),
                pair("▁a", "b"),
                pair("a", "b"),
                pair("▁", "a")
            ]
        );
    }

    #[test]
    fn byte_and_added_tokens_are_never_merged() {
        let mut spec = spec();
        spec.vocab
            .extend(["<".into(), "0x41>".into(), "<s".into(), ">".into()]);
        spec.scores.extend([-5.0; 4]);
        let merges = spec.merges().unwrap();
        assert!(
            merges.iter().all(|(l, _)| l != "<" && l != "<s"),
            "{merges:?}"
        );
    }

    #[test]
    fn score_count_must_match_the_vocabulary() {
        let mut bad = spec();
        bad.scores.pop();
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("8 scores for 9 pieces"), "{err}");
    }

    #[test]
    fn json_has_prefix_byte_fallback_and_bos_template() {
        let json = spec().to_json().unwrap();
        assert_eq!(json["normalizer"]["normalizers"][0]["type"], "Prepend");
        assert_eq!(json["model"]["byte_fallback"], true);
        assert_eq!(
            json["post_processor"]["single"][0]["SpecialToken"]["id"],
            "<s>"
        );
        let mut no_prefix = spec();
        no_prefix.add_space_prefix = false;
        let json = no_prefix.to_json().unwrap();
        assert_eq!(
            json["normalizer"]["normalizers"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn tokenizers_crate_encodes_with_merges_and_byte_fallback() {
        let json = spec().to_json().unwrap().to_string();
        let tokenizer: tokenizers::Tokenizer = json.parse().unwrap();
        let ids = tokenizer
            .encode_fast("ab A", true)
            .unwrap()
            .get_ids()
            .to_vec();
        // <s>, "▁ab", "▁", then "A" through its byte token.
        assert_eq!(ids, vec![1, 7, 3, 2]);
    }
}
