//! `train-eagle --self-instruct`: requests drawn from the target after its chat template's user
//! header; a model that writes none gives a clear error after a bounded number of draws, with
//! its draws kept for a resumed run, and a damaged set is an error naming its file.

use aquila_engine::WeightFormat;
use aquila_examples::self_instruct::{
    query_prefix, self_instructed_prompts, DrawSettings, SelfInstructSettings,
};
use aquila_model_loader::tokenizer::{ChatMessage, Tokenizer};

use crate::tiny::tiny_model;

#[test]
fn the_query_prefix_is_the_template_up_to_a_user_message() {
    let model = tiny_model();
    let tokenizer = Tokenizer::from_dir(model.path()).unwrap();
    let prefix = query_prefix(&tokenizer).unwrap();
    assert!(prefix.ends_with("<|im_start|>user\n"), "{prefix:?}");
    let message = ChatMessage::new("user", "How do I tie a bowline knot?");
    let rendered = tokenizer.apply_chat_template(&[message], false).unwrap();
    assert_eq!(
        rendered.strip_prefix(prefix.as_str()),
        Some("How do I tie a bowline knot?<|im_end|>\n"),
        "{rendered:?}"
    );
}

#[test]
fn a_model_that_writes_no_requests_is_refused_after_bounded_draws() {
    let model = tiny_model();
    let work = tempfile::tempdir().unwrap();
    let settings = SelfInstructSettings {
        count: 2,
        first: 0,
        draw: DrawSettings {
            seed: 0,
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 4,
            weights: WeightFormat::F32,
        },
    };
    // The tiny model's random weights write no finished plain-text request.
    let err = self_instructed_prompts(model.path(), work.path(), &settings, 4).unwrap_err();
    assert!(
        err.to_string().contains("does not write chat requests"),
        "{err}"
    );
    let stored = std::fs::read_to_string(work.path().join("prompts.json")).unwrap();
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["rounds"], 8, "{stored}");
    // A damaged set (not even text) is an error naming its file, not a silent restart.
    std::fs::write(work.path().join("prompts.json"), [0xff, 0xfe, 0x00]).unwrap();
    let err = self_instructed_prompts(model.path(), work.path(), &settings, 4).unwrap_err();
    assert!(format!("{err:#}").contains("prompts.json"), "{err:#}");
    // Other draw settings in the same directory are refused.
    let other = SelfInstructSettings {
        draw: DrawSettings {
            seed: 1,
            ..settings.draw.clone()
        },
        ..settings.clone()
    };
    let err = self_instructed_prompts(model.path(), work.path(), &other, 4).unwrap_err();
    assert!(err.to_string().contains("other settings"), "{err}");
    // A range that holds no request is refused before anything is drawn.
    let empty = SelfInstructSettings {
        first: 2,
        ..settings
    };
    let err = self_instructed_prompts(model.path(), work.path(), &empty, 4).unwrap_err();
    assert!(err.to_string().contains("above the first"), "{err}");
}
