//! Loading EAGLE-1 and EAGLE-3 heads from checkpoints in the reference key layouts, and the
//! errors for heads that are malformed or do not fit their target.
#![cfg(feature = "burn")]

use crate::eagle_fixtures;

use aquila_model_loader::checkpoint::{Checkpoint, CheckpointError};
use aquila_model_loader::fixtures::eagle::TinyEagle1Options;
use aquila_model_loader::fixtures::tensors::NamedTensor;
use aquila_model_loader::model::FeatureTap;
use aquila_spec_decode::eagle::{EagleError, EagleHead};
use aquila_spec_decode::proposer::{EagleProposer, EagleProposerConfig};
use eagle_fixtures::{eagle3_options, edit_checkpoint, edit_config, remove, Fixture, B};

fn eagle1_options(fc_bias: bool, bias_key: Option<bool>) -> TinyEagle1Options {
    TinyEagle1Options {
        fc_bias,
        bias_key,
        ..TinyEagle1Options::default()
    }
}

fn expect_eagle1(head: EagleHead<B>) -> aquila_spec_decode::eagle::Eagle1Head<B> {
    match head {
        EagleHead::Eagle1(head) => *head,
        EagleHead::Eagle3(_) => panic!("expected an EAGLE-1 head"),
    }
}

fn expect_eagle3(head: EagleHead<B>) -> aquila_spec_decode::eagle::Eagle3Head<B> {
    match head {
        EagleHead::Eagle3(head) => *head,
        EagleHead::Eagle1(_) => panic!("expected an EAGLE-3 head"),
    }
}

/// The mismatch report of a checkpoint error.
fn mismatch(err: EagleError) -> aquila_model_loader::checkpoint::MismatchReport {
    match err {
        EagleError::Checkpoint(CheckpointError::Mismatch { report, .. }) => report,
        other => panic!("expected a checkpoint mismatch, got {other}"),
    }
}

#[test]
fn eagle1_fc_bias_follows_the_checkpoint_when_the_config_is_silent() {
    let fixture = Fixture::new(2);
    let with_bias = fixture
        .load(&fixture.eagle1("bias", &eagle1_options(true, None)))
        .unwrap();
    assert_eq!(with_bias.feature_tap(), FeatureTap::LastHidden);
    assert_eq!(with_bias.feature_width(), 64);
    assert!(with_bias.vocab_map().is_identity());
    assert!(expect_eagle1(with_bias).has_fc_bias());
    let without = fixture
        .load(&fixture.eagle1("no-bias", &eagle1_options(false, None)))
        .unwrap();
    assert!(!expect_eagle1(without).has_fc_bias());
}

#[test]
fn eagle1_explicit_bias_must_agree_with_the_checkpoint() {
    let fixture = Fixture::new(2);
    assert!(expect_eagle1(
        fixture
            .load(&fixture.eagle1("t", &eagle1_options(true, Some(true))))
            .unwrap()
    )
    .has_fc_bias());
    assert!(!expect_eagle1(
        fixture
            .load(&fixture.eagle1("f", &eagle1_options(false, Some(false))))
            .unwrap()
    )
    .has_fc_bias());

    let err = fixture
        .load(&fixture.eagle1("t-missing", &eagle1_options(false, Some(true))))
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, EagleError::Config(_)), "{text}");
    assert!(
        text.contains("bias") && text.contains("is true but the checkpoint has no fc.bias"),
        "{text}"
    );
    assert!(
        text.contains("config.json"),
        "the error names the file: {text}"
    );

    let err = fixture
        .load(&fixture.eagle1("f-present", &eagle1_options(true, Some(false))))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is false but the checkpoint has fc.bias"),
        "{err}"
    );
}

#[test]
fn eagle1_accepts_an_embedding_copy_of_the_right_shape_only() {
    let fixture = Fixture::new(2);
    let options = TinyEagle1Options {
        embed_tokens: true,
        ..TinyEagle1Options::default()
    };
    let dir = fixture.eagle1("embed", &options);
    fixture.load(&dir).unwrap();
    edit_checkpoint(&dir, |tensors| {
        remove(tensors, "embed_tokens.weight");
        tensors.push(NamedTensor::f32(
            "embed_tokens.weight",
            &[320, 32],
            &vec![0.0; 320 * 32],
        ));
    });
    let report = mismatch(fixture.load(&dir).unwrap_err());
    assert_eq!(report.wrong_shapes.len(), 1);
    assert_eq!(report.wrong_shapes[0].name, "embed_tokens.weight");
    assert_eq!(report.wrong_shapes[0].expected, vec![320, 64]);
}

#[test]
fn eagle1_reports_missing_misshapen_and_unexpected_tensors_together() {
    let fixture = Fixture::new(2);
    let dir = fixture.eagle1("broken", &TinyEagle1Options::default());
    edit_checkpoint(&dir, |tensors| {
        remove(tensors, "layers.0.post_attention_layernorm.weight");
        let fc = remove(tensors, "fc.weight");
        tensors.push(NamedTensor::raw(
            "fc.weight",
            fc.dtype,
            &[128, 64],
            fc.bytes,
        ));
        // The reference's layer 0 has no input norm: a checkpoint with one is not an EAGLE-1 head.
        tensors.push(NamedTensor::f32(
            "layers.0.input_layernorm.weight",
            &[64],
            &[1.0; 64],
        ));
    });
    let report = mismatch(fixture.load(&dir).unwrap_err());
    assert_eq!(
        report.missing,
        vec!["layers.0.post_attention_layernorm.weight".to_string()]
    );
    assert_eq!(report.wrong_shapes.len(), 1);
    assert_eq!(report.wrong_shapes[0].name, "fc.weight");
    assert_eq!(report.wrong_shapes[0].expected, vec![64, 128]);
    assert_eq!(
        report.unexpected,
        vec!["layers.0.input_layernorm.weight".to_string()]
    );
}

#[test]
fn eagle1_must_match_the_target_width_and_vocabulary() {
    let fixture = Fixture::new(2);
    let dir = fixture.eagle1("narrow", &TinyEagle1Options::default());
    edit_config(&dir, |config| config["hidden_size"] = 32.into());
    let err = fixture.load(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            EagleError::Incompatible {
                field: "hidden_size",
                head: 32,
                target: 64
            }
        ),
        "{err}"
    );
    edit_config(&dir, |config| {
        config["hidden_size"] = 64.into();
        config["vocab_size"] = 400.into();
    });
    let err = fixture.load(&dir).unwrap_err();
    assert_eq!(
        err.to_string(),
        "EAGLE head does not fit the target: vocab_size is 400 in the head but 320 in the target"
    );
}

#[test]
fn eagle3_loads_with_its_draft_vocabulary_mapping() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("eagle3", &eagle3_options(4, 100));
    let head = fixture.load(&dir).unwrap();
    assert_eq!(head.feature_tap(), FeatureTap::AuxLayers(vec![0, 1, 3]));
    assert_eq!(head.feature_width(), 3 * 64);
    let map = head.vocab_map();
    assert!(!map.is_identity());
    assert_eq!(map.draft_vocab_size(), 100);
    // Draft id i is target id i + d2t[i], and exactly the t2d tokens are reachable.
    let checkpoint = Checkpoint::open(&dir).unwrap();
    let d2t = checkpoint.read_i64("d2t").unwrap();
    let t2d = checkpoint.read_bool("t2d").unwrap();
    for (draft, offset) in d2t.iter().enumerate() {
        let target = map.to_target(draft as u32);
        assert_eq!(i64::from(target), draft as i64 + offset);
        assert!(t2d[target as usize]);
    }
    assert_eq!(t2d.iter().filter(|&&b| b).count(), 100);
    let head = expect_eagle3(head);
    assert!(head.has_own_lm_head());
    assert!(!head.has_own_embedding());
}

#[test]
fn eagle3_without_d2t_is_rejected_unless_its_vocabulary_is_full() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("no-map", &eagle3_options(4, 100));
    edit_checkpoint(&dir, |tensors| {
        remove(tensors, "d2t");
        remove(tensors, "t2d");
    });
    assert_eq!(
        mismatch(fixture.load(&dir).unwrap_err()).missing,
        vec!["d2t".to_string()]
    );

    // A full-vocabulary head maps nothing, with or without (identity) buffers.
    let full = fixture.eagle3("full", &eagle3_options(4, 320));
    assert!(fixture.load(&full).unwrap().vocab_map().is_identity());
    edit_checkpoint(&full, |tensors| {
        remove(tensors, "d2t");
        remove(tensors, "t2d");
    });
    assert!(fixture.load(&full).unwrap().vocab_map().is_identity());
}

#[test]
fn eagle3_rejects_an_inconsistent_t2d() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("bad-t2d", &eagle3_options(4, 100));
    edit_checkpoint(&dir, |tensors| {
        let t2d = remove(tensors, "t2d");
        let mut flags: Vec<bool> = t2d.bytes.iter().map(|&b| b == 1).collect();
        let unmapped = flags.iter().position(|&b| !b).unwrap();
        flags[unmapped] = true;
        tensors.push(NamedTensor::bool("t2d", &[320], &flags));
    });
    let err = fixture.load(&dir).unwrap_err();
    assert!(matches!(err, EagleError::VocabMap(_)), "{err}");
    assert!(err.to_string().contains("maps no draft token to"), "{err}");
}

#[test]
fn eagle3_uses_its_own_embedding_and_may_share_the_target_lm_head() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("own-embed", &eagle3_options(4, 320));
    edit_checkpoint(&dir, |tensors| {
        tensors.push(NamedTensor::f32(
            "embed_tokens.weight",
            &[320, 64],
            &vec![0.01; 320 * 64],
        ));
        remove(tensors, "lm_head.weight");
    });
    let head = expect_eagle3(fixture.load(&dir).unwrap());
    assert!(head.has_own_embedding());
    assert!(!head.has_own_lm_head());

    // With a reduced vocabulary the target's lm_head does not fit: lm_head.weight is required.
    let reduced = fixture.eagle3("reduced", &eagle3_options(4, 100));
    edit_checkpoint(&reduced, |tensors| {
        remove(tensors, "lm_head.weight");
    });
    assert_eq!(
        mismatch(fixture.load(&reduced).unwrap_err()).missing,
        vec!["lm_head.weight".to_string()]
    );
}

#[test]
fn eagle3_rejects_aux_layers_and_widths_the_target_lacks() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("aux", &eagle3_options(4, 100));
    edit_config(&dir, |config| {
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = serde_json::json!([0, 2, 4]);
    });
    let err = fixture.load(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            EagleError::AuxLayerOutOfRange {
                layer: 4,
                num_layers: 4
            }
        ),
        "{err}"
    );

    let dir = fixture.eagle3("wide", &eagle3_options(4, 100));
    edit_config(&dir, |config| config["target_hidden_size"] = 96.into());
    let err = fixture.load(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            EagleError::Incompatible {
                field: "target_hidden_size",
                head: 96,
                target: 64
            }
        ),
        "{err}"
    );
}

#[test]
fn eagle3_fc_width_must_match_the_number_of_aux_layers() {
    let fixture = Fixture::new(4);
    let dir = fixture.eagle3("two-aux", &eagle3_options(4, 100));
    edit_config(&dir, |config| {
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = serde_json::json!([1, 3]);
    });
    let report = mismatch(fixture.load(&dir).unwrap_err());
    assert_eq!(report.wrong_shapes.len(), 1);
    assert_eq!(report.wrong_shapes[0].name, "fc.weight");
    assert_eq!(report.wrong_shapes[0].expected, vec![64, 128]);
}

#[test]
fn a_proposer_rejects_a_target_the_head_was_not_built_for() {
    let deep = Fixture::new(4);
    let head = deep
        .load(&deep.eagle3("eagle3", &eagle3_options(4, 100)))
        .unwrap();
    let shallow = Fixture::new(2);
    let err =
        EagleProposer::new(head, &shallow.target, EagleProposerConfig::greedy(2), 2).unwrap_err();
    assert!(
        matches!(
            err,
            EagleError::AuxLayerOutOfRange {
                layer: 3,
                num_layers: 2
            }
        ),
        "{err}"
    );

    let head = deep
        .load(&deep.eagle1("eagle1", &TinyEagle1Options::default()))
        .unwrap();
    let err =
        EagleProposer::new(head, &deep.target, EagleProposerConfig::greedy(0), 2).unwrap_err();
    assert!(err.to_string().contains("num_speculative_tokens"), "{err}");
}
