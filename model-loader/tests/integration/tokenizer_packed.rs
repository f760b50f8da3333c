//! The tokenizer runs SmolLM2's byte-level BPE vocabulary packed, and encodes and decodes every
//! text exactly as the `tokenizers` crate's own pipeline for the same `tokenizer.json` does.
//!
//! Needs `models/smollm2-135m-instruct` (made by `cargo xtask import-model`); skipped with
//! `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::tokenizer::{TokenModel, Tokenizer};
use proptest::prelude::*;
use std::sync::OnceLock;

/// The project's tokenizer and the `tokenizers` crate's, both read from the real model's
/// directory; `None` when the real model is skipped.
fn both() -> Option<&'static (Tokenizer, tokenizers::Tokenizer)> {
    static BOTH: OnceLock<Option<(Tokenizer, tokenizers::Tokenizer)>> = OnceLock::new();
    BOTH.get_or_init(|| {
        let dir = aquila_testdata::real_model_dir()?;
        let ours = Tokenizer::from_dir(&dir).unwrap();
        let reference = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        Some((ours, reference))
    })
    .as_ref()
}

/// Checks that both tokenizers give the same ids for `text` (with and without special tokens)
/// and the same text back for those ids.
fn check(text: &str) {
    let Some((ours, reference)) = both() else {
        return;
    };
    for add_special_tokens in [false, true] {
        let got = ours.encode(text, add_special_tokens).unwrap();
        let want = reference.encode(text, add_special_tokens).unwrap();
        assert_eq!(got, want.get_ids(), "{text:?}");
        for skip in [false, true] {
            let decoded = reference.decode(&got, skip).unwrap();
            assert_eq!(ours.decode(&got, skip).unwrap(), decoded, "{text:?}");
        }
    }
}

#[test]
fn smollm2_vocabulary_runs_packed() {
    let Some((ours, reference)) = both() else {
        return;
    };
    let TokenModel::Packed(packed) = ours.inner().get_model() else {
        panic!("SmolLM2's byte-level BPE should run packed");
    };
    assert_eq!(packed.len(), 49152);
    assert_eq!(ours.vocab_size(), reference.get_vocab_size(true));
    for id in [0, 1, 2, 17, 100, 49151] {
        assert_eq!(ours.id_to_token(id), reference.id_to_token(id), "id {id}");
    }
    assert_eq!(ours.token_to_id("Ġthe"), reference.token_to_id("Ġthe"));
    assert_eq!(ours.id_to_token(49152), None);
}

#[test]
fn chat_code_numbers_and_specials_encode_as_the_tokenizers_crate_does() {
    for text in [
        "Hello, world! How are you doing today?",
        "<|im_start|>user\nWrite a haiku about rust.<|im_end|>\n<|im_start|>assistant\n",
        "fn main() {\n    println!(\"{}\", 12345 + 678);\n}\n",
        "   leading spaces, trailing tabs\t\t\n\n\n",
        "naïve café — 東京 🚀 ünïcödé ",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "The year 2024 had 366 days; π ≈ 3.14159.",
        "",
    ] {
        check(text);
    }
}

/// Text made of the pieces chat, code and prose are made of.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z]{1,12}",
        "[0-9]{1,6}",
        "[ \t\n]{1,4}",
        "[.,;:!?'\"()\\[\\]{}<>/\\\\@#$%^&*_=+-]{1,3}",
        "\\PC{1,4}",
        Just("<|im_start|>".to_string()),
        Just("<|im_end|>".to_string()),
        Just("'s".to_string()),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_text_encodes_and_decodes_as_the_tokenizers_crate_does(text in text()) {
        check(&text);
    }
}
