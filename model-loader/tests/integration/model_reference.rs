//! The burn model against an independent plain-Rust implementation of the Llama-family forward
//! pass (`model_support::reference`), on tiny Llama, Qwen2 and Mistral fixtures, on the CPU
//! kernels and on the generic path, in one prefill and token by token through the KV cache:
//! checks the weight layout, biases, RoPE, grouped-query and sliding-window attention, SwiGLU,
//! norms and the (tied or separate) lm_head.

use crate::model_support::reference::Reference;
use aquila_model_loader::backend::{load_generic_cpu, KernelBackend};
use aquila_model_loader::checkpoint::Checkpoint;
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyArchitecture, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::backend::Flex;
use std::path::Path;

/// Largest difference tolerated between the model's f32 logits and the f64 reference.
const TOLERANCE: f64 = 1e-3;

/// Logits of every position of `tokens`: the first `prefill` tokens in one forward pass, then
/// one token per pass through the KV cache.
fn model_logits<B: KernelBackend>(
    model: &LlamaModel<B>,
    tokens: &[u32],
    prefill: usize,
) -> Vec<Vec<f32>> {
    let mut cache = model.new_kv_cache(1);
    let vocab = model.config().vocab_size;
    let mut rows = Vec::new();
    let mut run = |start: usize, chunk: &[u32]| {
        let batch = ForwardBatch::new(vec![
            SequenceInput::new(0, chunk.to_vec(), start).with_all_logits()
        ]);
        let out = model
            .forward(&batch, &mut cache, &FeatureTap::None)
            .unwrap();
        let values: Vec<f32> = out.logits.into_data().to_vec().unwrap();
        assert_eq!(values.len(), chunk.len() * vocab);
        rows.extend(values.chunks(vocab).map(<[f32]>::to_vec));
    };
    run(0, &tokens[..prefill]);
    for (i, &token) in tokens.iter().enumerate().skip(prefill) {
        run(i, &[token]);
    }
    rows
}

/// Checks `got` against the reference rows `want`.
fn assert_matches(what: &str, got: &[Vec<f32>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (row, (got, want)) in got.iter().zip(want).enumerate() {
        for (col, (&g, &w)) in got.iter().zip(want).enumerate() {
            let g = f64::from(g);
            assert!(
                (g - w).abs() < TOLERANCE,
                "{what}: row {row} token {col}: model {g}, reference {w}"
            );
        }
    }
}

/// Compares the model in `dir` with the reference (attending over `window` positions, or
/// all): on the CPU kernels and on the generic path, in one prefill and in a prefill of half
/// the tokens followed by single-token steps. Returns the reference logits.
fn compare_windowed(dir: &Path, tokens: &[u32], window: Option<usize>) -> Vec<Vec<f64>> {
    let checkpoint = Checkpoint::open(dir).unwrap();
    let kernels = LlamaModel::<Flex>::load(dir, &Default::default()).unwrap();
    let reference = Reference {
        config: kernels.config().clone(),
        checkpoint: &checkpoint,
        window,
    };
    let expected = reference.logits(tokens);
    let spread = expected[0]
        .iter()
        .cloned()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(
        spread > 1.0,
        "fixture logits are degenerate (max |logit| {spread})"
    );
    let generic = load_generic_cpu(dir).unwrap();
    for prefill in [tokens.len(), tokens.len() / 2] {
        let what = |path: &str| format!("{path}, prefill of {prefill}");
        assert_matches(
            &what("kernels"),
            &model_logits(&kernels, tokens, prefill),
            &expected,
        );
        assert_matches(
            &what("generic"),
            &model_logits(&generic, tokens, prefill),
            &expected,
        );
    }
    expected
}

/// Compares the model in `dir` with the full-attention reference.
fn compare(dir: &Path, tokens: &[u32]) {
    compare_windowed(dir, tokens, None);
}

#[test]
fn tied_model_matches_reference() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlamaOptions::default()).unwrap();
    compare(dir.path(), &[1, 40, 7, 300, 12, 5, 99, 2]);
}

#[test]
fn untied_biased_llama3_model_matches_reference() {
    let dir = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        num_layers: 3,
        tied: false,
        attention_bias: true,
        seed: 7,
        rope_scaling: Some(serde_json::json!({
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64
        })),
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).unwrap();
    compare(dir.path(), &[3, 17, 250, 250, 4, 66, 1, 0, 319, 8, 9, 10]);
}

#[test]
fn bf16_sharded_model_matches_reference() {
    let dir = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        dtype: aquila_model_loader::fixtures::tensors::FloatType::BF16,
        shards: 3,
        seed: 11,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).unwrap();
    compare(dir.path(), &[1, 2, 3, 4, 5]);
}

#[test]
fn qwen2_model_with_qkv_biases_matches_reference() {
    let dir = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        architecture: TinyArchitecture::Qwen2,
        num_layers: 3,
        seed: 5,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let layer = "model.layers.0.self_attn";
    assert!(checkpoint.contains(&format!("{layer}.q_proj.bias")));
    assert!(!checkpoint.contains(&format!("{layer}.o_proj.bias")));
    compare(dir.path(), &[1, 40, 7, 300, 12, 5, 99, 2, 17]);
}

#[test]
fn mistral_sliding_window_matches_reference() {
    const WINDOW: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        architecture: TinyArchitecture::Mistral {
            sliding_window: WINDOW,
        },
        seed: 9,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).unwrap();
    let tokens = [1, 40, 7, 300, 12, 5, 99, 2, 17, 250];
    let windowed = compare_windowed(dir.path(), &tokens, Some(WINDOW));
    // The window changes the logits of every row past it, so the check above can fail.
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let model = LlamaModel::<Flex>::load(dir.path(), &Default::default()).unwrap();
    let full = Reference {
        config: model.config().clone(),
        checkpoint: &checkpoint,
        window: None,
    }
    .logits(&tokens);
    assert_eq!(windowed[..WINDOW], full[..WINDOW]);
    for row in WINDOW..tokens.len() {
        let largest = windowed[row]
            .iter()
            .zip(&full[row])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(largest > 1e-2, "row {row} is the same without the window");
    }
}
