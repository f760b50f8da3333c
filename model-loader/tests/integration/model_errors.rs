//! Bad inputs to the model: impossible batches are rejected before the cache changes, and
//! checkpoints that do not match the config fail to load with every difference listed.

use crate::model_support;

use aquila_model_loader::checkpoint::CheckpointError;
use aquila_model_loader::config::ConfigError;
use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use aquila_model_loader::fixtures::tensors::{write_json, write_safetensors, NamedTensor};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, ModelError, SequenceInput};
use aquila_model_loader::LoadError;
use model_support::{tiny_model, B};
use std::path::Path;

#[test]
fn impossible_batches_leave_the_cache_untouched() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let mut cache = model.new_kv_cache(2);
    model
        .forward(
            &ForwardBatch::new(vec![SequenceInput::new(0, vec![1, 2], 0)]),
            &mut cache,
            &FeatureTap::None,
        )
        .unwrap();
    let bytes = cache.memory_bytes();
    let ok = SequenceInput::new(1, vec![3, 4], 0);
    type Expected = fn(&ModelError) -> bool;
    let cases: Vec<(Vec<SequenceInput>, Expected)> = vec![
        (vec![], |e| matches!(e, ModelError::EmptyBatch)),
        (vec![SequenceInput::new(1, vec![], 0)], |e| {
            matches!(e, ModelError::EmptySequence { .. })
        }),
        (vec![SequenceInput::new(2, vec![1], 0)], |e| {
            matches!(e, ModelError::SlotOutOfRange { slot: 2, .. })
        }),
        (vec![ok.clone(), SequenceInput::new(1, vec![5], 2)], |e| {
            matches!(e, ModelError::DuplicateSlot { slot: 1 })
        }),
        (vec![SequenceInput::new(1, vec![320], 0)], |e| {
            matches!(e, ModelError::TokenOutOfRange { token: 320, .. })
        }),
        (
            vec![SequenceInput {
                positions: vec![0],
                ..ok.clone()
            }],
            |e| matches!(e, ModelError::PositionCount { .. }),
        ),
        (vec![SequenceInput::new(1, vec![1], 512)], |e| {
            matches!(e, ModelError::PositionOutOfRange { position: 512, .. })
        }),
        (vec![ok.clone().with_logits_rows(vec![2])], |e| {
            matches!(e, ModelError::LogitsRowOutOfRange { row: 2, .. })
        }),
        (vec![ok.clone().with_mask(vec![vec![true, false]])], |e| {
            matches!(e, ModelError::InvalidMask { .. })
        }),
        (
            vec![ok
                .clone()
                .with_mask(vec![vec![true, true], vec![true, false]])],
            |e| matches!(e, ModelError::InvalidMask { .. }),
        ),
    ];
    for (sequences, expected) in cases {
        let err = model
            .forward(
                &ForwardBatch::new(sequences.clone()),
                &mut cache,
                &FeatureTap::None,
            )
            .expect_err(&format!("{sequences:?}"));
        assert!(expected(&err), "{sequences:?}: {err:?}");
        assert!(!err.to_string().is_empty());
        assert_eq!(
            (cache.len(0), cache.len(1), cache.memory_bytes()),
            (2, 0, bytes)
        );
    }
    let err = model.try_embed(&[1, 400]).unwrap_err();
    assert_eq!(
        err,
        ModelError::UnknownToken {
            token: 400,
            vocab_size: 320
        }
    );
}

/// Writes `options`' config (optionally edited) and the given tensors into `dir`.
fn write_model(dir: &Path, config: serde_json::Value, tensors: &[NamedTensor]) {
    write_json(&dir.join("config.json"), &config).unwrap();
    write_safetensors(&dir.join("model.safetensors"), tensors).unwrap();
}

fn load_report(dir: &Path) -> aquila_model_loader::checkpoint::MismatchReport {
    match LlamaModel::<B>::load(dir, &Default::default()) {
        Err(LoadError::Checkpoint(CheckpointError::Mismatch { report, .. })) => report,
        Err(other) => panic!("expected a checkpoint mismatch, got {other}"),
        Ok(_) => panic!("expected a checkpoint mismatch, the model loaded"),
    }
}

#[test]
fn missing_wrong_shaped_and_leftover_tensors_are_all_listed() {
    let options = TinyLlamaOptions::default();
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = options.tensors();
    tensors
        .retain(|t| t.name != "model.layers.1.mlp.up_proj.weight" && t.name != "model.norm.weight");
    tensors.push(NamedTensor::f32("model.layers.7.extra", &[1], &[0.0]));
    let q = tensors
        .iter_mut()
        .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight")
        .unwrap();
    *q = NamedTensor::f32(&q.name.clone(), &[32, 64], &[0.5; 32 * 64]);
    write_model(dir.path(), options.config_json(), &tensors);
    let report = load_report(dir.path());
    assert_eq!(
        report.missing,
        vec!["model.layers.1.mlp.up_proj.weight", "model.norm.weight"]
    );
    assert_eq!(report.wrong_shapes.len(), 1);
    assert_eq!(
        report.wrong_shapes[0].name,
        "model.layers.0.self_attn.q_proj.weight"
    );
    assert_eq!(
        (
            report.wrong_shapes[0].expected.clone(),
            report.wrong_shapes[0].found.clone()
        ),
        (vec![64, 64], vec![32, 64])
    );
    assert_eq!(report.unexpected, vec!["model.layers.7.extra"]);
}

#[test]
fn config_and_checkpoint_disagree() {
    let options = TinyLlamaOptions::default();
    let dir = tempfile::tempdir().unwrap();
    // A config with a narrower MLP: every gate/up/down weight has the wrong shape.
    let mut config = options.config_json();
    config["intermediate_size"] = 96.into();
    write_model(dir.path(), config, &options.tensors());
    let report = load_report(dir.path());
    assert_eq!(report.wrong_shapes.len(), 3 * options.num_layers);
    assert!(report.missing.is_empty() && report.unexpected.is_empty());

    // An untied config over a tied checkpoint lacks the lm_head.
    let mut untied = options.config_json();
    untied["tie_word_embeddings"] = false.into();
    write_model(dir.path(), untied, &options.tensors());
    assert_eq!(load_report(dir.path()).missing, vec!["lm_head.weight"]);

    // A tied config over an untied checkpoint uses the stored lm_head.
    let untied_options = TinyLlamaOptions {
        tied: false,
        ..TinyLlamaOptions::default()
    };
    write_model(dir.path(), options.config_json(), &untied_options.tensors());
    LlamaModel::<B>::load(dir.path(), &Default::default()).unwrap();

    // An embedding stored as integers is unreadable.
    let mut tensors = options.tensors();
    let embed = tensors
        .iter_mut()
        .find(|t| t.name == "model.embed_tokens.weight")
        .unwrap();
    embed.dtype = aquila_model_loader::checkpoint::Dtype::I32;
    write_model(dir.path(), options.config_json(), &tensors);
    let report = load_report(dir.path());
    assert_eq!(report.unreadable.len(), 1);
    assert!(report.unreadable[0].contains("model.embed_tokens.weight"));
}

#[test]
fn rotary_buffers_are_ignored() {
    let options = TinyLlamaOptions::default();
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = options.tensors();
    tensors.push(NamedTensor::f32(
        "model.layers.0.self_attn.rotary_emb.inv_freq",
        &[8],
        &[1.0; 8],
    ));
    write_model(dir.path(), options.config_json(), &tensors);
    LlamaModel::<B>::load(dir.path(), &Default::default()).unwrap();
}

#[test]
fn missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let err = LlamaModel::<B>::load(dir.path(), &Default::default()).unwrap_err();
    assert!(
        matches!(err, LoadError::Config(ConfigError::Io { .. })),
        "{err:?}"
    );
    write_json(
        &dir.path().join("config.json"),
        &TinyLlamaOptions::default().config_json(),
    )
    .unwrap();
    let err = LlamaModel::<B>::load(dir.path(), &Default::default()).unwrap_err();
    assert!(
        matches!(err, LoadError::Checkpoint(CheckpointError::NotFound { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}
