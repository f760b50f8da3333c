//! No tokenizer directory or chat template breaks the tokenizer: edited `tokenizer.json` and
//! `tokenizer_config.json` files and arbitrary templates load with an error or work, and a
//! loaded tokenizer encodes, decodes and renders without panicking.

use crate::prop_support::{json_edit, mutation};

use aquila_model_loader::fixtures::tokenizer::write_tiny_tokenizer;
use aquila_model_loader::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use proptest::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

/// The tiny tokenizer's `tokenizer.json` and `tokenizer_config.json`.
fn tiny_files() -> &'static (Value, Value) {
    static FILES: OnceLock<(Value, Value)> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_tokenizer(dir.path()).unwrap();
        let read = |name: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
        };
        (read("tokenizer.json"), read("tokenizer_config.json"))
    })
}

/// Loads the directory and, if that works, uses the tokenizer every way the engine does.
fn load_and_use(dir: &Path) {
    let Ok(tokenizer) = Tokenizer::from_dir(dir) else {
        return;
    };
    for text in ["the cat sat", "héllo ✓ <|im_start|>", ""] {
        if let Ok(ids) = tokenizer.encode(text, true) {
            let _ = tokenizer.decode(&ids, false);
        }
    }
    let _ = tokenizer.decode(&[0, 1, 2, u32::MAX], true);
    let _ = tokenizer.encode_chat(&[ChatMessage::user("hi")], true);
}

/// Writes the two files into a fresh directory and loads it.
fn check_files(tokenizer_json: &str, tokenizer_config: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer_json).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), tokenizer_config).unwrap();
    load_and_use(dir.path());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn edited_tokenizer_json_loads_or_fails(edits in json_edit::json_edits()) {
        let (tokenizer, config) = tiny_files();
        check_files(&json_edit::apply_json(tokenizer, &edits).to_string(), &config.to_string());
    }

    #[test]
    fn edited_tokenizer_config_loads_or_fails(edits in json_edit::json_edits()) {
        let (tokenizer, config) = tiny_files();
        check_files(&tokenizer.to_string(), &json_edit::apply_json(config, &edits).to_string());
    }

    #[test]
    fn mutated_tokenizer_json_text_loads_or_fails(edits in mutation::mutations()) {
        let (tokenizer, config) = tiny_files();
        let bytes = mutation::apply(tokenizer.to_string().as_bytes(), &edits);
        check_files(&String::from_utf8_lossy(&bytes), &config.to_string());
    }
}

/// Pieces of Jinja that templates are made of, for building plausible broken templates.
fn template_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{% for message in messages %}".to_string()),
        Just("{% endfor %}".to_string()),
        Just("{% if add_generation_prompt %}".to_string()),
        Just("{% endif %}".to_string()),
        Just("{{ message['content'] }}".to_string()),
        Just("{{ message.role | upper }}".to_string()),
        Just("{{ messages[0]['content'].strip() }}".to_string()),
        Just("{{ raise_exception('no') }}".to_string()),
        Just("{{ bos_token + eos_token }}".to_string()),
        Just("{% set x = messages | length %}{{ x * 2 }}".to_string()),
        Just("{{ 1 / 0 }}".to_string()),
        Just("{{".to_string()),
        Just("%}".to_string()),
        "\\PC{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn chat_templates_render_or_fail(pieces in proptest::collection::vec(template_piece(), 0..8)) {
        let source = pieces.concat();
        if let Ok(template) = ChatTemplate::new(source, "<s>", "</s>") {
            let messages = [ChatMessage::system("be brief"), ChatMessage::user("hi")];
            let _ = template.render(&messages, true);
            let _ = template.render(&[], false);
        }
    }
}
