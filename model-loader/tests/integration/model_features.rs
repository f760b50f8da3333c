//! Feature taps: the post-norm last hidden state (EAGLE-1) and the residual stream entering
//! chosen layers (EAGLE-3), for every new row, in batch order.

use crate::model_support;

use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use aquila_model_loader::model::{FeatureTap, ModelError, SequenceInput};
use burn::tensor::{Tensor, TensorData};
use model_support::{assert_rows_close, rows, run, tiny_model, B, FLOAT_NOISE};

#[test]
fn last_hidden_feeds_the_lm_head() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        tied: false,
        ..Default::default()
    });
    let hidden = model.config().hidden_size;
    let mut cache = model.new_kv_cache(2);
    let sequences = vec![
        SequenceInput::new(0, vec![5, 6, 7], 0),
        SequenceInput::new(1, vec![8, 9], 0).with_all_logits(),
    ];
    let (logits, features) = run(&model, &mut cache, sequences, &FeatureTap::LastHidden);
    assert_eq!(features.len(), 5);
    assert!(features.iter().all(|row| row.len() == hidden));
    // Logits rows are: sequence 0 row 2, sequence 1 rows 0 and 1 = feature rows 2, 3, 4.
    let picked: Vec<f32> = features[2..].concat();
    let recomputed = rows(model.lm_head(Tensor::<B, 2>::from_data(
        TensorData::new(picked, [3, hidden]),
        &model.device(),
    )));
    assert_rows_close(&logits, &recomputed, FLOAT_NOISE, "lm_head(features)");
    // Features are post-norm: RMS close to the norm weights' RMS, not the raw residual's.
    let norm_weight: Vec<f32> = model.final_norm().gamma.val().into_data().to_vec().unwrap();
    let weight_rms = (norm_weight.iter().map(|w| w * w).sum::<f32>() / hidden as f32).sqrt();
    for row in &features {
        let rms = (row.iter().map(|v| v * v).sum::<f32>() / hidden as f32).sqrt();
        assert!(
            (rms - weight_rms).abs() < 0.2 * weight_rms,
            "row rms {rms} vs weight rms {weight_rms}"
        );
    }
}

#[test]
fn aux_layers_capture_the_residual_stream_entering_each_layer() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        num_layers: 4,
        ..Default::default()
    });
    let hidden = model.config().hidden_size;
    let tokens = vec![11, 12, 13, 14];
    let mut cache = model.new_kv_cache(1);
    let tap = FeatureTap::AuxLayers(vec![0, 2, 3]);
    let (logits, features) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, tokens.clone(), 0)],
        &tap,
    );
    assert_eq!(logits.len(), 1);
    assert_eq!(features.len(), 4);
    assert!(features.iter().all(|row| row.len() == 3 * hidden));
    // Layer 0's input is the token embedding.
    let embedded = rows(model.embed(&tokens));
    let first: Vec<Vec<f32>> = features.iter().map(|row| row[..hidden].to_vec()).collect();
    assert_rows_close(&first, &embedded, 0.0, "aux layer 0 = embeddings");
    // Deeper captures differ from the embeddings and from each other.
    for row in &features {
        assert!(row[hidden..2 * hidden] != row[..hidden]);
        assert!(row[2 * hidden..] != row[hidden..2 * hidden]);
    }
    // Capturing a subset gives the same columns.
    let mut cache = model.new_kv_cache(1);
    let (_, only_two) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, tokens, 0)],
        &FeatureTap::AuxLayers(vec![2]),
    );
    let middle: Vec<Vec<f32>> = features
        .iter()
        .map(|row| row[hidden..2 * hidden].to_vec())
        .collect();
    assert_rows_close(&only_two, &middle, FLOAT_NOISE, "aux layer 2 alone");
}

#[test]
fn invalid_taps_are_rejected_before_touching_the_cache() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let mut cache = model.new_kv_cache(1);
    for tap in [
        FeatureTap::AuxLayers(vec![2]),
        FeatureTap::AuxLayers(vec![1, 0]),
        FeatureTap::AuxLayers(vec![]),
    ] {
        let batch =
            aquila_model_loader::model::ForwardBatch::new(vec![SequenceInput::new(0, vec![1], 0)]);
        let err = model.forward(&batch, &mut cache, &tap).unwrap_err();
        assert!(matches!(err, ModelError::InvalidTap { .. }), "{err:?}");
        assert_eq!(cache.len(0), 0);
    }
    assert_eq!(FeatureTap::AuxLayers(vec![0, 1]).feature_dim(64), 128);
}
