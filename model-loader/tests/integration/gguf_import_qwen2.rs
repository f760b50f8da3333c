//! Importing a tiny `qwen2` GGUF file: metadata under `qwen2.*`, query/key rows stored in
//! Hugging Face order (llama.cpp does not permute them for Qwen2), q/k/v biases and no output
//! bias. The imported directory has the Hugging Face weights and a Qwen2 config, and runs.

use crate::common;

use aquila_model_loader::checkpoint::Checkpoint;
use aquila_model_loader::config::{LlamaConfig, ModelType};
use aquila_model_loader::fixtures::tokenizer::TINY_VOCAB_SIZE;
use aquila_model_loader::gguf;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::backend::Flex;
use common::*;

/// Seed of the first bias; the weights use seeds from 0 up.
const BIAS_SEED: usize = 1000;

/// The tiny Llama GGUF turned into a Qwen2 one; returns it with the expected biases.
fn tiny_qwen2_gguf(scratch: &std::path::Path) -> (GgufBuilder, Vec<(String, Vec<f32>)>) {
    let mut b = tiny_llama_gguf(scratch, true);
    for (key, _) in &mut b.metadata {
        if let Some(rest) = key.strip_prefix("llama.") {
            *key = format!("qwen2.{rest}");
        }
    }
    b.meta("general.architecture", Meta::Str("qwen2".into()));
    let mut biases = Vec::new();
    for t in tiny_tensors(TINY_VOCAB_SIZE, true) {
        if t.permute_heads.is_some() {
            // Qwen2 stores query and key rows as Hugging Face does.
            let dims = [t.cols as u64, t.rows as u64];
            b.tensor(
                &t.gguf,
                &dims,
                F32,
                f32_bytes(&values(t.seed, t.rows, t.cols)),
            );
        }
        let projection = ["attn_q", "attn_k", "attn_v"]
            .iter()
            .any(|p| t.gguf.ends_with(&format!("{p}.weight")));
        if projection {
            let bias = values(BIAS_SEED + t.seed, 1, t.rows);
            b.tensor(
                &t.gguf.replace(".weight", ".bias"),
                &[t.rows as u64],
                F32,
                f32_bytes(&bias),
            );
            biases.push((t.hf.replace(".weight", ".bias"), bias));
        }
    }
    (b, biases)
}

#[test]
fn qwen2_gguf_imports_with_biases_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (builder, biases) = tiny_qwen2_gguf(&dir.path().join("fixture"));
    let gguf_path = dir.path().join("tiny-qwen2.gguf");
    builder.write(&gguf_path);
    let hf = dir.path().join("hf");
    let report = gguf::import(&gguf_path, &hf, &()).unwrap();
    assert_eq!(
        report.tensors,
        tiny_tensors(TINY_VOCAB_SIZE, true).len() + biases.len()
    );

    let config = LlamaConfig::from_file(&hf.join("config.json")).unwrap();
    assert_eq!(config.model_type, ModelType::Qwen2);
    assert!(config.qkv_bias && !config.o_bias);

    let checkpoint = Checkpoint::open(&hf).unwrap();
    for t in tiny_tensors(TINY_VOCAB_SIZE, true) {
        let got = checkpoint.read_f32(&t.hf).unwrap();
        assert_same(&t.hf, &got, &values(t.seed, t.rows, t.cols));
    }
    for (name, want) in &biases {
        assert_eq!(&checkpoint.read_f32(name).unwrap(), want, "{name}");
    }
    assert!(!checkpoint.contains("model.layers.0.self_attn.o_proj.bias"));

    let model = LlamaModel::<Flex>::load(&hf, &Default::default()).unwrap();
    let mut cache = model.new_kv_cache(1);
    let batch = ForwardBatch::new(vec![SequenceInput::new(0, vec![1, 40, 7], 0)]);
    let logits: Vec<f32> = model
        .forward(&batch, &mut cache, &FeatureTap::None)
        .unwrap()
        .logits
        .into_data()
        .to_vec()
        .unwrap();
    assert_eq!(logits.len(), TINY_VOCAB_SIZE);
    assert!(logits.iter().all(|v| v.is_finite()));
}
