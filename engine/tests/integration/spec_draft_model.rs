//! Speculative decoding with a draft language model on the tiny model: the target drafting for
//! itself is accepted on every draft, whether it copies the target's keys and values or runs
//! every row itself, requests that sample keep the greedy ones exact beside them, and a draft
//! model that cannot serve the target is an error naming its directory.

use std::path::Path;

use crate::common;

use aquila_engine::{
    DraftLength, DraftModelDrafter, EngineError, Llm, SpeculativeConfig, SpeculativeMethod,
    WeightFormat,
};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use common::spec::{assert_greedy_exact_beside_sampled, draft_model};
use common::{config, greedy, tiny_model, PROMPTS};

const MAX_TOKENS: usize = 24;

/// An engine for `model` drafting chains of `k` with itself in `f32`, copying the target's
/// keys and values as `copies_target_cache` says.
fn drafting_for_itself(model: &Path, k: usize, copies_target_cache: Option<bool>) -> Llm {
    let drafter = DraftModelDrafter {
        weights: Some(WeightFormat::F32),
        copies_target_cache,
        ..DraftModelDrafter::new(model)
    };
    let mut engine_config = config(model);
    engine_config.speculative = Some(SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::new(SpeculativeMethod::DraftModel(drafter), k)
    });
    Llm::new(engine_config).unwrap()
}

#[test]
fn the_target_drafting_for_itself_is_accepted_on_every_draft() {
    let model = tiny_model();
    let mut llm = drafting_for_itself(model.path(), 4, None);
    // The prefill's token, then four rounds of 4 accepted drafts and the target's own token:
    // no round drafts past the end.
    let outputs = llm.generate(PROMPTS, &greedy(21)).unwrap();
    for output in &outputs {
        let metrics = &output.metrics;
        assert_eq!(output.token_ids.len(), 21);
        assert_eq!(
            (metrics.num_draft_tokens, metrics.num_accepted_tokens),
            (16, 16),
            "request {}: drafts and accepted drafts",
            output.request_id
        );
    }
}

#[test]
fn copying_the_targets_keys_and_values_drafts_what_running_the_rows_drafts() {
    let model = tiny_model();
    let run = |copies_target_cache: Option<bool>| {
        drafting_for_itself(model.path(), 3, copies_target_cache)
            .generate(PROMPTS, &greedy(MAX_TOKENS))
            .unwrap()
    };
    let mut plain = Llm::new(config(model.path())).unwrap();
    let expected = plain.generate(PROMPTS, &greedy(MAX_TOKENS)).unwrap();
    // The target's own directory: copying by default.
    for outputs in [run(None), run(Some(false))] {
        for (output, expected) in outputs.iter().zip(&expected) {
            assert_eq!(output.token_ids, expected.token_ids);
            let metrics = &output.metrics;
            assert!(metrics.num_draft_tokens > 0);
            assert_eq!(
                metrics.num_accepted_tokens, metrics.num_draft_tokens,
                "request {}: the target's own drafts are all accepted",
                output.request_id
            );
        }
    }
}

#[test]
fn sampled_requests_beside_greedy_ones_keep_the_greedy_ones_exact() {
    let model = tiny_model();
    let draft = draft_model();
    let speculative = SpeculativeConfig::draft_model(draft.path(), 3);
    assert_greedy_exact_beside_sampled(model.path(), speculative, MAX_TOKENS);
}

#[test]
fn a_draft_model_that_cannot_serve_the_target_is_an_error_naming_it() {
    let model = tiny_model();
    let missing = model.path().join("no-such-model");
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::draft_model(&missing, 3));
    let err = Llm::new(engine_config).unwrap_err();
    assert!(matches!(err, EngineError::DraftModel { .. }), "{err}");
    assert!(err.to_string().contains("no-such-model"), "{err}");

    // A draft model whose context is shorter than the target's.
    let short = draft_model();
    let config_path = short.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    json["max_position_embeddings"] = 64.into();
    std::fs::write(&config_path, json.to_string()).unwrap();
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::draft_model(short.path(), 3));
    let err = Llm::new(engine_config).unwrap_err().to_string();
    assert!(err.contains("context") && err.contains("64"), "{err}");

    // Another model asked to copy the target's keys and values, with layers of another shape.
    let deeper = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        num_layers: 3,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(deeper.path(), &options).unwrap();
    let drafter = DraftModelDrafter {
        copies_target_cache: Some(true),
        ..DraftModelDrafter::new(deeper.path())
    };
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::new(
        SpeculativeMethod::DraftModel(drafter),
        3,
    ));
    let err = Llm::new(engine_config).unwrap_err().to_string();
    assert!(
        err.contains("keys and values") && err.contains("3 layers"),
        "{err}"
    );
}
