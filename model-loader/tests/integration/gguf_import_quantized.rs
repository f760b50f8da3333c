//! Llama GGUF files quantized with the K-quants, Q5 and IQ/TQ types import: every tensor
//! comes out as its dequantized values (checked against gguf-py by `gguf_dequant_reference`),
//! with query/key rows un-permuted and Hugging Face names.

use crate::common::{tiny_llama_gguf, Meta, F32};

use aquila_model_loader::gguf::{self, dequant::dequantize, permute::unpermute_qk_rows, GgmlType};
use rand::{Rng, SeedableRng};
use safetensors::SafeTensors;

/// Model width: K-quant rows are multiples of 256 values.
const WIDTH: usize = 256;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = WIDTH / HEADS;

/// One tensor of the model: GGUF name, Hugging Face name, GGML dims, type, un-permute heads.
struct Quantized {
    gguf: &'static str,
    hf: &'static str,
    dims: [usize; 2],
    ggml_type: GgmlType,
    heads: Option<usize>,
}

/// The tensors of a one-layer model with every weight in a different quantized type.
fn tensors(vocab: usize) -> Vec<Quantized> {
    let t = |gguf, hf, dims, ggml_type, heads| Quantized {
        gguf,
        hf,
        dims,
        ggml_type,
        heads,
    };
    let kv = KV_HEADS * HEAD_DIM;
    vec![
        t(
            "token_embd.weight",
            "model.embed_tokens.weight",
            [WIDTH, vocab],
            GgmlType::Q4K,
            None,
        ),
        t(
            "output.weight",
            "lm_head.weight",
            [WIDTH, vocab],
            GgmlType::Q6K,
            None,
        ),
        t(
            "output_norm.weight",
            "model.norm.weight",
            [WIDTH, 1],
            GgmlType::F32,
            None,
        ),
        t(
            "blk.0.attn_norm.weight",
            "model.layers.0.input_layernorm.weight",
            [WIDTH, 1],
            GgmlType::F32,
            None,
        ),
        t(
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
            [WIDTH, WIDTH],
            GgmlType::Q2K,
            Some(HEADS),
        ),
        t(
            "blk.0.attn_k.weight",
            "model.layers.0.self_attn.k_proj.weight",
            [WIDTH, kv],
            GgmlType::Q3K,
            Some(KV_HEADS),
        ),
        t(
            "blk.0.attn_v.weight",
            "model.layers.0.self_attn.v_proj.weight",
            [WIDTH, kv],
            GgmlType::Q5K,
            None,
        ),
        t(
            "blk.0.attn_output.weight",
            "model.layers.0.self_attn.o_proj.weight",
            [WIDTH, WIDTH],
            GgmlType::Iq4Xs,
            None,
        ),
        t(
            "blk.0.ffn_norm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            [WIDTH, 1],
            GgmlType::F32,
            None,
        ),
        t(
            "blk.0.ffn_gate.weight",
            "model.layers.0.mlp.gate_proj.weight",
            [WIDTH, WIDTH],
            GgmlType::Q5_0,
            None,
        ),
        t(
            "blk.0.ffn_up.weight",
            "model.layers.0.mlp.up_proj.weight",
            [WIDTH, WIDTH],
            GgmlType::Iq2Xs,
            None,
        ),
        t(
            "blk.0.ffn_down.weight",
            "model.layers.0.mlp.down_proj.weight",
            [WIDTH, WIDTH],
            GgmlType::Iq1M,
            None,
        ),
    ]
}

/// Random blocks of `ggml_type` for `values` values. Random bytes are valid blocks; norms
/// (F32) get ones instead, as a random f32 is often NaN.
fn random_bytes(ggml_type: GgmlType, values: usize, rng: &mut impl Rng) -> Vec<u8> {
    if ggml_type == GgmlType::F32 {
        return 1f32.to_le_bytes().repeat(values);
    }
    let len = values / ggml_type.block_len() as usize * ggml_type.block_bytes() as usize;
    (0..len).map(|_| rng.random()).collect()
}

/// The values an import must produce from `bytes`: dequantized, then un-permuted.
fn expected_values(t: &Quantized, bytes: &[u8]) -> Vec<f32> {
    let mut values = vec![0.0; t.dims[0] * t.dims[1]];
    dequantize(t.gguf, t.ggml_type, bytes, &mut values).unwrap();
    match t.heads {
        Some(heads) => unpermute_qk_rows(t.gguf, &values, t.dims[0], heads).unwrap(),
        None => values,
    }
}

#[test]
fn k_quant_q5_and_iq_tensors_import_as_their_dequantized_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = tiny_llama_gguf(&dir.path().join("fixture"), false);
    builder
        .meta("llama.block_count", Meta::U32(1))
        .meta("llama.embedding_length", Meta::U32(WIDTH as u32))
        .meta("llama.feed_forward_length", Meta::U32(WIDTH as u32))
        .meta("llama.attention.head_count", Meta::U32(HEADS as u32))
        .meta("llama.attention.head_count_kv", Meta::U32(KV_HEADS as u32))
        .meta("llama.rope.dimension_count", Meta::U32(HEAD_DIM as u32));
    let vocab = match &builder
        .metadata
        .iter()
        .find(|(k, _)| k == "llama.vocab_size")
        .unwrap()
        .1
    {
        Meta::U32(v) => *v as usize,
        other => panic!("vocab size {other:?}"),
    };
    builder.tensors.clear();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
    let tensors = tensors(vocab);
    let mut stored = Vec::new();
    for t in &tensors {
        let bytes = random_bytes(t.ggml_type, t.dims[0] * t.dims[1], &mut rng);
        let dims: Vec<u64> = t
            .dims
            .iter()
            .filter(|&&d| d > 1)
            .map(|&d| d as u64)
            .collect();
        let type_id = if t.ggml_type == GgmlType::F32 {
            F32
        } else {
            t.ggml_type.id()
        };
        builder.tensor(t.gguf, &dims, type_id, bytes.clone());
        stored.push(bytes);
    }
    let gguf_path = dir.path().join("quantized.gguf");
    builder.write(&gguf_path);

    let report = gguf::import(&gguf_path, &dir.path().join("hf"), &()).unwrap();
    assert_eq!(report.tensors, tensors.len());
    let file = std::fs::read(dir.path().join("hf/model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&file).unwrap();
    for (t, bytes) in tensors.iter().zip(&stored) {
        let view = st.tensor(t.hf).unwrap_or_else(|e| panic!("{}: {e}", t.hf));
        let got: Vec<u32> = view
            .data()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let want: Vec<u32> = expected_values(t, bytes)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert!(got == want, "{} ({}) differs", t.hf, t.ggml_type.name());
    }
}

#[test]
fn types_without_a_dequantizer_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = tiny_llama_gguf(&dir.path().join("fixture"), true);
    let embd = builder
        .tensors
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .unwrap()
        .clone();
    // Q8_1 is a valid type (36-byte blocks of 32) that nothing dequantizes.
    let blocks = embd.dims.iter().product::<u64>() as usize / 32;
    builder.tensor(
        &embd.name,
        &embd.dims,
        GgmlType::Q8_1.id(),
        vec![0; blocks * 36],
    );
    let gguf_path = dir.path().join("q8_1.gguf");
    builder.write(&gguf_path);
    let err = gguf::import(&gguf_path, &dir.path().join("hf"), &()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("token_embd.weight") && text.contains("Q8_1"),
        "{text}"
    );
    assert!(!dir.path().join("hf/model.safetensors").exists());
}
