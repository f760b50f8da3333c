//! Tokens matched before the model runs, and the special tokens put around every encoded text.

use serde_json::{json, Map, Value};

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
    pub(crate) fn to_json_fields(&self) -> Map<String, Value> {
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

    /// The `added_tokens` array of `tokenizer.json`.
    pub(crate) fn list_json(tokens: &[AddedToken]) -> Vec<Value> {
        tokens
            .iter()
            .map(|token| {
                let mut fields = Map::new();
                fields.insert("id".into(), json!(token.id));
                fields.extend(token.to_json_fields());
                Value::Object(fields)
            })
            .collect()
    }
}

/// The special tokens the post-processor adds around every text encoded with
/// `add_special_tokens` (each as its id and text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Affixes {
    /// Beginning-of-sequence token put first.
    pub bos: Option<(u32, String)>,
    /// End-of-sequence token put last.
    pub eos: Option<(u32, String)>,
}

impl Affixes {
    /// The `TemplateProcessing` post-processor adding the tokens, or `None` when there are none.
    pub(crate) fn template_json(&self) -> Option<Value> {
        if self.bos.is_none() && self.eos.is_none() {
            return None;
        }
        let special = |(_, text): &(u32, String), type_id: u32| json!({ "SpecialToken": { "id": text, "type_id": type_id } });
        let sequence =
            |name: &str, type_id: u32| json!({ "Sequence": { "id": name, "type_id": type_id } });
        let around = |name: &str, type_id: u32| -> Vec<Value> {
            let mut items: Vec<Value> = self.bos.iter().map(|t| special(t, type_id)).collect();
            items.push(sequence(name, type_id));
            items.extend(self.eos.iter().map(|t| special(t, type_id)));
            items
        };
        let mut pair = around("A", 0);
        pair.extend(around("B", 1));
        let special_tokens: Map<String, Value> = self
            .bos
            .iter()
            .chain(&self.eos)
            .map(|(id, text)| {
                (
                    text.clone(),
                    json!({ "id": text, "ids": [id], "tokens": [text] }),
                )
            })
            .collect();
        Some(json!({
            "type": "TemplateProcessing",
            "single": around("A", 0),
            "pair": pair,
            "special_tokens": special_tokens
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_affixes_means_no_template() {
        assert_eq!(Affixes::default().template_json(), None);
    }

    #[test]
    fn template_puts_bos_first_and_eos_last() {
        let affixes = Affixes {
            bos: Some((1, "<s>".into())),
            eos: Some((2, "</s>".into())),
        };
        let json = affixes.template_json().unwrap();
        let single = json["single"].as_array().unwrap();
        assert_eq!(single.len(), 3);
        assert_eq!(single[0]["SpecialToken"]["id"], "<s>");
        assert_eq!(single[2]["SpecialToken"]["id"], "</s>");
        assert_eq!(json["special_tokens"]["</s>"]["ids"], json!([2]));
        assert_eq!(json["pair"].as_array().unwrap().len(), 6);
    }
}
