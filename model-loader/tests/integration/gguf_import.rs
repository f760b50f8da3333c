//! Importing a tiny Llama GGUF file (built in the test) reproduces the Hugging Face weights,
//! config and tokenizer exactly.

use crate::common;

use aquila_model_loader::fixtures::tokenizer::TINY_VOCAB_SIZE;
use aquila_model_loader::gguf::{self, ImportProgress};
use aquila_model_loader::tokenizer::{ChatMessage, Tokenizer};
use common::*;
use safetensors::SafeTensors;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts progress callbacks.
#[derive(Default)]
struct Counter {
    started: AtomicUsize,
    done: AtomicUsize,
}

impl ImportProgress for Counter {
    fn start(&self, tensors: usize) {
        self.started.store(tensors, Ordering::SeqCst);
    }
    fn tensor_done(&self, _: &str) {
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

fn read_f32(st: &SafeTensors<'_>, name: &str) -> (Vec<usize>, Vec<f32>) {
    let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
    let values = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (view.shape().to_vec(), values)
}

fn import_tiny(tied: bool) -> (tempfile::TempDir, gguf::ImportReport) {
    let dir = tempfile::tempdir().unwrap();
    let gguf_path = dir.path().join("tiny.gguf");
    tiny_llama_gguf(&dir.path().join("fixture"), tied).write(&gguf_path);
    let counter = Counter::default();
    let report = gguf::import(&gguf_path, &dir.path().join("hf"), &counter).unwrap();
    assert_eq!(counter.started.load(Ordering::SeqCst), report.tensors);
    assert_eq!(counter.done.load(Ordering::SeqCst), report.tensors);
    (dir, report)
}

#[test]
fn weights_are_dequantized_unpermuted_and_named_like_hugging_face() {
    let (dir, report) = import_tiny(true);
    let expected = tiny_tensors(TINY_VOCAB_SIZE, true);
    assert_eq!(report.tensors, expected.len());
    let bytes = std::fs::read(dir.path().join("hf/model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.len(), expected.len());
    assert!(
        st.tensor("lm_head.weight").is_err(),
        "tied embeddings have no lm_head"
    );
    let mut parameters = 0;
    for t in &expected {
        let (shape, got) = read_f32(&st, &t.hf);
        let want_shape = if t.rows == 1 {
            vec![t.cols]
        } else {
            vec![t.rows, t.cols]
        };
        assert_eq!(shape, want_shape, "{}", t.hf);
        assert_same(&t.hf, &got, &values(t.seed, t.rows, t.cols));
        parameters += got.len() as u64;
    }
    assert_eq!(report.parameters, parameters);
}

#[test]
fn untied_model_keeps_lm_head() {
    let (dir, _) = import_tiny(false);
    let bytes = std::fs::read(dir.path().join("hf/model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let head = tiny_tensors(TINY_VOCAB_SIZE, false)
        .into_iter()
        .find(|t| t.hf == "lm_head.weight")
        .unwrap();
    assert_same(
        "lm_head",
        &read_f32(&st, "lm_head.weight").1,
        &values(head.seed, head.rows, head.cols),
    );
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("hf/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["tie_word_embeddings"], false);
}

#[test]
fn config_and_generation_config_carry_every_field() {
    let (dir, report) = import_tiny(true);
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("hf").join(name)).unwrap())
            .unwrap()
    };
    let config = read("config.json");
    assert_eq!(
        config["architectures"],
        serde_json::json!(["LlamaForCausalLM"])
    );
    assert_eq!(config["model_type"], "llama");
    assert_eq!(config["hidden_size"], HIDDEN);
    assert_eq!(config["intermediate_size"], FFN);
    assert_eq!(config["num_hidden_layers"], LAYERS);
    assert_eq!(config["num_attention_heads"], HEADS);
    assert_eq!(config["num_key_value_heads"], KV_HEADS);
    assert_eq!(config["head_dim"], HEAD_DIM);
    assert_eq!(config["vocab_size"], TINY_VOCAB_SIZE);
    assert_eq!(config["max_position_embeddings"], 256);
    assert_eq!(config["rope_theta"], 100000.0);
    assert_eq!(config["rms_norm_eps"], 1e-5);
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["bos_token_id"], 1);
    assert_eq!(config["eos_token_id"], 2);
    assert_eq!(config["hidden_act"], "silu");
    assert_eq!(report.hparams.vocab_size, TINY_VOCAB_SIZE);
    let generation = read("generation_config.json");
    assert_eq!(generation["bos_token_id"], 1);
    assert_eq!(generation["eos_token_id"], 2);
    assert_eq!(generation["pad_token_id"], 2);
}

#[test]
fn rebuilt_tokenizer_matches_the_original() {
    let (dir, _) = import_tiny(true);
    let original = Tokenizer::from_dir(&dir.path().join("fixture")).unwrap();
    let rebuilt = Tokenizer::from_dir(&dir.path().join("hf")).unwrap();
    assert_eq!(rebuilt.vocab_size(), TINY_VOCAB_SIZE);
    for text in [
        "the cat sat on the mat",
        "user 12345 assistant",
        "héllo wörld ✓\n\tend",
        "<|im_start|>x<|im_end|>",
    ] {
        assert_eq!(
            rebuilt.encode(text, false).unwrap(),
            original.encode(text, false).unwrap(),
            "{text:?}"
        );
    }
    let chat = [ChatMessage::user("what is the river?")];
    assert_eq!(
        rebuilt.encode_chat(&chat, true).unwrap(),
        original.encode_chat(&chat, true).unwrap()
    );
    assert_eq!(rebuilt.special_tokens(), original.special_tokens());
}
