//! The tiny tokenizer fixture through `Tokenizer`: encoding, decoding, chat templates,
//! special tokens, streaming, and errors on bad files.

use aquila_model_loader::fixtures::tokenizer::*;
use aquila_model_loader::tokenizer::{ChatMessage, StreamDecoder, Tokenizer, TokenizerError};
use std::path::Path;

fn tiny() -> (tempfile::TempDir, Tokenizer) {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_tokenizer(dir.path()).unwrap();
    let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
    (dir, tokenizer)
}

#[test]
fn fixture_has_the_documented_layout() {
    let (_dir, tok) = tiny();
    assert_eq!(tok.vocab_size(), TINY_VOCAB_SIZE);
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(TINY_UNK_ID));
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(TINY_BOS_ID));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(TINY_EOS_ID));
    assert_eq!(
        tok.token_to_id("a"),
        Some(TINY_FIRST_BYTE_ID + u32::from(b'a'))
    );
    assert_eq!(
        tok.token_to_id("Ġ"),
        Some(TINY_FIRST_BYTE_ID + u32::from(b' '))
    );
    let special = tok.special_tokens();
    assert_eq!(special.bos, Some(TINY_BOS_ID));
    assert_eq!(special.eos, vec![TINY_EOS_ID]);
    assert_eq!(special.pad, Some(TINY_PAD_ID));
    assert_eq!(special.unk, Some(TINY_UNK_ID));
}

#[test]
fn fixture_is_deterministic() {
    let (a, _) = tiny();
    let (b, _) = tiny();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        assert_eq!(
            std::fs::read(a.path().join(file)).unwrap(),
            std::fs::read(b.path().join(file)).unwrap()
        );
    }
}

#[test]
fn merges_shorten_common_words_and_round_trip() {
    let (_dir, tok) = tiny();
    let text = "the cat sat on the mat";
    let ids = tok.encode(text, false).unwrap();
    let first_merge_id = TINY_FIRST_BYTE_ID + 256;
    assert!(
        ids.len() < text.len() && ids.iter().any(|&id| id >= first_merge_id),
        "{ids:?}"
    );
    assert!(ids.iter().all(|&id| (id as usize) < TINY_VOCAB_SIZE));
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
    // Unseen bytes fall back to byte tokens and still round-trip.
    let odd = "Zürich 😀 \u{7}";
    assert_eq!(
        tok.decode(&tok.encode(odd, false).unwrap(), false).unwrap(),
        odd
    );
}

#[test]
fn digits_are_split_individually() {
    let (_dir, tok) = tiny();
    let ids = tok.encode("2024", false).unwrap();
    let digits: Vec<u32> = b"2024"
        .iter()
        .map(|&b| TINY_FIRST_BYTE_ID + u32::from(b))
        .collect();
    assert_eq!(ids, digits);
}

#[test]
fn special_tokens_are_matched_whole_and_can_be_skipped() {
    let (_dir, tok) = tiny();
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
    assert_eq!(ids[0], TINY_BOS_ID);
    assert_eq!(*ids.last().unwrap(), TINY_EOS_ID);
    assert_eq!(tok.decode(&ids, true).unwrap(), "user\nhi");
    // No post-processor adds tokens (like SmolLM2): with and without special tokens agree.
    assert_eq!(
        tok.encode("hi", true).unwrap(),
        tok.encode("hi", false).unwrap()
    );
}

#[test]
fn chat_template_renders_chatml_and_encodes_specials() {
    let (_dir, tok) = tiny();
    let messages = [ChatMessage::system("be brief"), ChatMessage::user("hello")];
    let text = tok.apply_chat_template(&messages, true).unwrap();
    assert_eq!(text, "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
    let ids = tok.encode_chat(&messages, true).unwrap();
    assert_eq!(ids, tok.encode(&text, false).unwrap());
    assert_eq!(ids.iter().filter(|&&id| id == TINY_BOS_ID).count(), 3);
    let without = tok.encode_chat(&messages, false).unwrap();
    assert!(ids.starts_with(&without) && ids.len() > without.len());
}

#[test]
fn chat_template_jinja_file_takes_precedence() {
    let (dir, _) = tiny();
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}",
    )
    .unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(
        tok.apply_chat_template(&[ChatMessage::user("x")], true)
            .unwrap(),
        "[user]x"
    );
}

#[test]
fn missing_chat_template_is_an_error() {
    let (dir, _) = tiny();
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert!(!tok.has_chat_template());
    assert!(matches!(
        tok.apply_chat_template(&[ChatMessage::user("x")], true),
        Err(TokenizerError::NoChatTemplate)
    ));
    assert_eq!(tok.special_tokens().bos, None);
}

#[test]
fn config_files_override_special_ids() {
    let (dir, _) = tiny();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"bos_token_id": 1, "eos_token_id": [0, 2]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("generation_config.json"),
        r#"{"eos_token_id": 2}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.special_tokens().eos, vec![2, 0]);
    assert!(tok.special_tokens().is_eos(0));
}

#[test]
fn stream_decoder_never_splits_characters() {
    let (_dir, tok) = tiny();
    let text = "the café: 日本語 😀 done";
    let ids = tok.encode(text, false).unwrap();
    let mut stream = tok.stream_decoder(false);
    let mut pieces = Vec::new();
    for &id in &ids {
        if let Some(piece) = stream.push(&tok, id).unwrap() {
            assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
            pieces.push(piece);
        }
    }
    assert_eq!(stream.flush(&tok).unwrap(), None);
    assert_eq!(pieces.concat(), text);
    // Multi-byte characters are split over byte tokens, so some pushes emit nothing.
    assert!(pieces.len() < ids.len());
}

#[test]
fn stream_decoder_with_context_emits_only_new_text() {
    let (_dir, tok) = tiny();
    let prompt = tok.encode("the cat", false).unwrap();
    let mut stream = StreamDecoder::with_context(&prompt, false);
    let mut out = String::new();
    for id in tok.encode(" sat on the mat", false).unwrap() {
        out.extend(stream.push(&tok, id).unwrap());
    }
    assert_eq!(out, " sat on the mat");
}

#[test]
fn stream_decoder_skips_special_tokens_when_asked() {
    let (_dir, tok) = tiny();
    let ids = tok.encode("hi<|im_end|>", false).unwrap();
    let mut skipping = tok.stream_decoder(true);
    let mut keeping = tok.stream_decoder(false);
    let (mut skipped, mut kept) = (String::new(), String::new());
    for &id in &ids {
        skipped.extend(skipping.push(&tok, id).unwrap());
        kept.extend(keeping.push(&tok, id).unwrap());
    }
    assert_eq!((skipped.as_str(), kept.as_str()), ("hi", "hi<|im_end|>"));
}

#[test]
fn stream_decoder_flushes_an_incomplete_character() {
    let (_dir, tok) = tiny();
    let euro = "€".as_bytes(); // three bytes
    let byte = |b: u8| TINY_FIRST_BYTE_ID + u32::from(b);
    let mut stream = tok.stream_decoder(false);
    assert_eq!(stream.push(&tok, byte(b'a')).unwrap().as_deref(), Some("a"));
    assert_eq!(stream.push(&tok, byte(euro[0])).unwrap(), None);
    assert_eq!(stream.push(&tok, byte(euro[1])).unwrap(), None);
    assert_eq!(stream.flush(&tok).unwrap().as_deref(), Some("\u{FFFD}"));
    assert_eq!(stream.flush(&tok).unwrap(), None);
}

#[test]
fn decode_rejects_ids_outside_the_vocabulary() {
    let (_dir, tok) = tiny();
    let err = tok.decode(&[5, TINY_VOCAB_SIZE as u32], false).unwrap_err();
    assert!(
        matches!(err, TokenizerError::TokenOutOfRange { id, .. } if id == TINY_VOCAB_SIZE as u32)
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn bad_files_name_the_problem() {
    let empty = tempfile::tempdir().unwrap();
    let err = Tokenizer::from_dir(empty.path()).unwrap_err();
    assert!(
        matches!(err, TokenizerError::Io { .. }) && err.to_string().contains("tokenizer.json"),
        "{err}"
    );

    let (dir, _) = tiny();
    write(dir.path(), "tokenizer.json", "{\"model\": 3}");
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(err, TokenizerError::InvalidTokenizer { .. }),
        "{err}"
    );

    let (dir, _) = tiny();
    write(dir.path(), "tokenizer_config.json", "{not json");
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(err, TokenizerError::Json { .. })
            && err.to_string().contains("tokenizer_config.json"),
        "{err}"
    );

    let (dir, _) = tiny();
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"eos_token": "<|nope|>"}"#,
    );
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(err, TokenizerError::UnknownSpecialToken { .. }),
        "{err}"
    );

    let (dir, _) = tiny();
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": "{% for %}"}"#,
    );
    assert!(matches!(
        Tokenizer::from_dir(dir.path()),
        Err(TokenizerError::Template(_))
    ));

    let (dir, _) = tiny();
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": 5}"#,
    );
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::InvalidField { field, .. } if field == "chat_template"),
        "{err}"
    );

    let (dir, _) = tiny();
    write(dir.path(), "config.json", r#"{"eos_token_id": -1}"#);
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::InvalidField { field, .. } if field == "eos_token_id"),
        "{err}"
    );
}
