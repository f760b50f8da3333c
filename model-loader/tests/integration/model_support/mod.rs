//! Helpers shared by the model integration tests: tiny models in temporary directories, forward
//! passes returning plain vectors, and float comparisons.

#![allow(dead_code)]

pub mod reference;

use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use burn::backend::Flex;
use burn::tensor::Tensor;
use tempfile::TempDir;

/// The backend of the tests.
pub type B = Flex;

/// Largest difference tolerated between mathematically equal results computed in another order.
pub const FLOAT_NOISE: f32 = 1e-4;

/// A tiny model written with `options` and loaded; the directory lives as long as the guard.
pub fn tiny_model(options: &TinyLlamaOptions) -> (TempDir, LlamaModel<B>) {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), options).unwrap();
    let model = LlamaModel::load(dir.path(), &Default::default()).unwrap();
    (dir, model)
}

/// Rows of a 2-D tensor.
pub fn rows(tensor: Tensor<B, 2>) -> Vec<Vec<f32>> {
    let [_, width] = tensor.dims();
    let values: Vec<f32> = tensor.into_data().to_vec().unwrap();
    values.chunks(width.max(1)).map(<[f32]>::to_vec).collect()
}

/// Runs `sequences` and returns the logits rows and the feature rows (empty without a tap).
pub fn run(
    model: &LlamaModel<B>,
    cache: &mut KvCache<B>,
    sequences: Vec<SequenceInput>,
    tap: &FeatureTap,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let out = model
        .forward(&ForwardBatch::new(sequences), cache, tap)
        .unwrap();
    (rows(out.logits), out.features.map(rows).unwrap_or_default())
}

/// Logits of every position of `tokens` run from an empty cache in one forward pass.
pub fn full_logits(model: &LlamaModel<B>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.new_kv_cache(1);
    let sequence = SequenceInput::new(0, tokens.to_vec(), 0).with_all_logits();
    run(model, &mut cache, vec![sequence], &FeatureTap::None).0
}

/// Asserts two row sets are equal within `tolerance`.
pub fn assert_rows_close(got: &[Vec<f32>], want: &[Vec<f32>], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {r} width");
        for (c, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= tolerance,
                "{what}: row {r} col {c}: {a} vs {b}"
            );
        }
    }
}

/// Index of the largest value.
pub fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}
