//! Test helpers shared by the GGUF integration tests: a GGUF writer and a tiny Llama GGUF
//! model whose Hugging Face weights are known exactly.

#![allow(dead_code)]

use aquila_model_loader::fixtures::tokenizer::write_tiny_tokenizer;
use half::f16;
use std::path::Path;

/// A metadata value to write.
#[derive(Debug, Clone)]
pub enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strings(Vec<String>),
    I32s(Vec<i32>),
    /// A raw type code and payload, for corrupt files.
    Raw(u32, Vec<u8>),
}

/// A tensor to write: name, GGML dims, type code, raw bytes.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub bytes: Vec<u8>,
}

/// Builds GGUF files byte by byte.
#[derive(Debug, Clone)]
pub struct GgufBuilder {
    pub version: u32,
    pub metadata: Vec<(String, Meta)>,
    pub tensors: Vec<RawTensor>,
    pub alignment: u64,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl GgufBuilder {
    pub fn new() -> Self {
        Self {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
        }
    }

    pub fn meta(&mut self, key: &str, value: Meta) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, bytes: Vec<u8>) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self.tensors.push(RawTensor {
            name: name.into(),
            dims: dims.to_vec(),
            type_id,
            bytes,
        });
        self
    }

    /// The file's bytes; tensor data offsets are laid out in order with padding.
    pub fn build(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            match value {
                Meta::U32(v) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                Meta::F32(v) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                Meta::Bool(v) => {
                    out.extend(7u32.to_le_bytes());
                    out.push(u8::from(*v));
                }
                Meta::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    put_string(&mut out, s);
                }
                Meta::Strings(items) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    for s in items {
                        put_string(&mut out, s);
                    }
                }
                Meta::I32s(items) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(5u32.to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    for v in items {
                        out.extend(v.to_le_bytes());
                    }
                }
                Meta::Raw(type_id, payload) => {
                    out.extend(type_id.to_le_bytes());
                    out.extend(payload);
                }
            }
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.bytes.len() as u64).div_ceil(self.alignment) * self.alignment;
        }
        let data_start = (out.len() as u64).div_ceil(self.alignment) * self.alignment;
        out.resize(data_start as usize, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend(&t.bytes);
        }
        out
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.build()).unwrap();
    }
}

/// GGML type codes used by the tests.
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const Q4_0: u32 = 2;
pub const Q4_1: u32 = 3;
pub const Q8_0: u32 = 8;
pub const BF16: u32 = 30;

/// Geometry of the tiny Llama model.
pub const HIDDEN: usize = 64;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;
pub const FFN: usize = 96;
pub const LAYERS: usize = 2;

/// The deterministic value of element `i` of a tensor with seed `seed`: a multiple of 1/8 in
/// [-1, 0.875], so every format below (Q4_1's 16 levels included) represents it exactly.
pub fn value(seed: usize, i: usize) -> f32 {
    (((i * 7 + seed * 13 + i / 16) % 16) as f32 - 8.0) / 8.0
}

/// Asserts `got == want`, reporting the first differing index instead of both vectors.
pub fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: first difference at {i}: got {}, want {}",
            got[i], want[i]
        );
    }
}

/// Row-major values of a `rows x cols` tensor.
pub fn values(seed: usize, rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| value(seed, i)).collect()
}

/// Encodes values as F32 bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Encodes values as F16 bytes.
pub fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// Encodes values (multiples of 1/8 in [-1, 1]) as Q8_0 with scale 1/8: exact.
pub fn q8_0_bytes(v: &[f32]) -> Vec<u8> {
    v.chunks(32)
        .flat_map(|block| {
            let mut out = f16::from_f32(0.125).to_le_bytes().to_vec();
            out.extend(block.iter().map(|x| ((x * 8.0) as i8) as u8));
            out
        })
        .collect()
}

/// Encodes values (multiples of 1/8 in [-1, 1]) as Q4_1 with scale 1/8 and minimum -1: exact.
pub fn q4_1_bytes(v: &[f32]) -> Vec<u8> {
    v.chunks(32)
        .flat_map(|block| {
            let mut out = f16::from_f32(0.125).to_le_bytes().to_vec();
            out.extend(f16::from_f32(-1.0).to_le_bytes());
            let q = |x: f32| ((x + 1.0) * 8.0) as u8;
            out.extend((0..16).map(|j| q(block[j]) | (q(block[j + 16]) << 4)));
            out
        })
        .collect()
}

/// llama.cpp's row permutation of a query/key projection (rows = heads x head_dim).
pub fn permute_rows(hf: &[f32], cols: usize, heads: usize) -> Vec<f32> {
    let rows = hf.len() / cols;
    let hd = rows / heads;
    let mut out = vec![0.0; hf.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let from = h * hd + j * hd / 2 + i;
                let to = h * hd + 2 * i + j;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&hf[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

/// One tensor of the tiny model: GGUF name, HF name, HF shape (rows, cols), seed, and the
/// query/key head count when rows are permuted in GGUF.
pub struct TinyTensor {
    pub gguf: String,
    pub hf: String,
    pub rows: usize,
    pub cols: usize,
    pub seed: usize,
    pub permute_heads: Option<usize>,
}

/// The tensors of the tiny Llama model with vocabulary `vocab`.
pub fn tiny_tensors(vocab: usize, tied: bool) -> Vec<TinyTensor> {
    let mut out = Vec::new();
    let mut push = |gguf: String, hf: String, rows: usize, cols: usize, heads: Option<usize>| {
        let seed = out.len();
        out.push(TinyTensor {
            gguf,
            hf,
            rows,
            cols,
            seed,
            permute_heads: heads,
        });
    };
    push(
        "token_embd.weight".into(),
        "model.embed_tokens.weight".into(),
        vocab,
        HIDDEN,
        None,
    );
    push(
        "output_norm.weight".into(),
        "model.norm.weight".into(),
        1,
        HIDDEN,
        None,
    );
    if !tied {
        push(
            "output.weight".into(),
            "lm_head.weight".into(),
            vocab,
            HIDDEN,
            None,
        );
    }
    for l in 0..LAYERS {
        let parts: [(&str, &str, usize, usize, Option<usize>); 9] = [
            ("attn_norm", "input_layernorm", 1, HIDDEN, None),
            (
                "attn_q",
                "self_attn.q_proj",
                HEADS * HEAD_DIM,
                HIDDEN,
                Some(HEADS),
            ),
            (
                "attn_k",
                "self_attn.k_proj",
                KV_HEADS * HEAD_DIM,
                HIDDEN,
                Some(KV_HEADS),
            ),
            (
                "attn_v",
                "self_attn.v_proj",
                KV_HEADS * HEAD_DIM,
                HIDDEN,
                None,
            ),
            (
                "attn_output",
                "self_attn.o_proj",
                HIDDEN,
                HEADS * HEAD_DIM,
                None,
            ),
            ("ffn_norm", "post_attention_layernorm", 1, HIDDEN, None),
            ("ffn_gate", "mlp.gate_proj", FFN, HIDDEN, None),
            ("ffn_up", "mlp.up_proj", FFN, HIDDEN, None),
            ("ffn_down", "mlp.down_proj", HIDDEN, FFN, None),
        ];
        for (gguf, hf, rows, cols, heads) in parts {
            push(
                format!("blk.{l}.{gguf}.weight"),
                format!("model.layers.{l}.{hf}.weight"),
                rows,
                cols,
                heads,
            );
        }
    }
    out
}

/// Reads the tiny tokenizer fixture's vocabulary, token types and merges.
pub fn tiny_vocab(dir: &Path) -> (Vec<String>, Vec<i32>, Vec<String>) {
    write_tiny_tokenizer(dir).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    let vocab_map = json["model"]["vocab"].as_object().unwrap();
    let mut vocab = vec![String::new(); vocab_map.len()];
    for (token, id) in vocab_map {
        vocab[id.as_u64().unwrap() as usize] = token.clone();
    }
    let specials: Vec<u64> = json["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    let types = (0..vocab.len() as u64)
        .map(|id| if specials.contains(&id) { 3 } else { 1 })
        .collect();
    let merges = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            )
        })
        .collect();
    (vocab, types, merges)
}

/// A GGUF builder holding the tiny Llama model: the tokenizer of the tiny fixture (written
/// into `scratch`), norms in F32, embeddings in Q8_0, the first layer's projections in Q4_1,
/// the second's in F16 (q, k) / BF16 (v, o) / F32 (MLP). Query/key rows are permuted.
pub fn tiny_llama_gguf(scratch: &Path, tied: bool) -> GgufBuilder {
    let (vocab, types, merges) = tiny_vocab(scratch);
    let mut b = GgufBuilder::new();
    b.meta("general.architecture", Meta::Str("llama".into()))
        .meta("general.alignment", Meta::U32(32))
        .meta("llama.block_count", Meta::U32(LAYERS as u32))
        .meta("llama.context_length", Meta::U32(256))
        .meta("llama.embedding_length", Meta::U32(HIDDEN as u32))
        .meta("llama.feed_forward_length", Meta::U32(FFN as u32))
        .meta("llama.attention.head_count", Meta::U32(HEADS as u32))
        .meta("llama.attention.head_count_kv", Meta::U32(KV_HEADS as u32))
        .meta("llama.rope.freq_base", Meta::F32(100000.0))
        .meta("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5))
        .meta("llama.vocab_size", Meta::U32(vocab.len() as u32))
        .meta("llama.rope.dimension_count", Meta::U32(HEAD_DIM as u32))
        .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
        .meta("tokenizer.ggml.pre", Meta::Str("smollm".into()))
        .meta("tokenizer.ggml.add_bos_token", Meta::Bool(false))
        .meta("tokenizer.ggml.tokens", Meta::Strings(vocab.clone()))
        .meta("tokenizer.ggml.token_type", Meta::I32s(types))
        .meta("tokenizer.ggml.merges", Meta::Strings(merges))
        .meta("tokenizer.ggml.bos_token_id", Meta::U32(1))
        .meta("tokenizer.ggml.eos_token_id", Meta::U32(2))
        .meta("tokenizer.ggml.unknown_token_id", Meta::U32(0))
        .meta("tokenizer.ggml.padding_token_id", Meta::U32(2))
        .meta(
            "tokenizer.chat_template",
            Meta::Str(aquila_model_loader::fixtures::tokenizer::TINY_CHAT_TEMPLATE.into()),
        );
    for t in tiny_tensors(vocab.len(), tied) {
        let hf = values(t.seed, t.rows, t.cols);
        let stored = match t.permute_heads {
            Some(heads) => permute_rows(&hf, t.cols, heads),
            None => hf,
        };
        let (type_id, bytes) = if t.rows == 1 {
            (F32, f32_bytes(&stored))
        } else if t.gguf.starts_with("token_embd") || t.gguf.starts_with("output.") {
            (Q8_0, q8_0_bytes(&stored))
        } else if t.gguf.starts_with("blk.0.") {
            (Q4_1, q4_1_bytes(&stored))
        } else if t.gguf.contains("attn_q") || t.gguf.contains("attn_k") {
            (F16, f16_bytes(&stored))
        } else if t.gguf.contains("attn_") {
            (
                BF16,
                stored
                    .iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect(),
            )
        } else {
            (F32, f32_bytes(&stored))
        };
        let dims: Vec<u64> = if t.rows == 1 {
            vec![t.cols as u64]
        } else {
            vec![t.cols as u64, t.rows as u64]
        };
        b.tensor(&t.gguf, &dims, type_id, bytes);
    }
    b
}
