//! The tensors of a Llama-family GGUF file: their Hugging Face names, expected shapes, and which
//! ones need the query/key row un-permutation.

use super::hparams::{GgufArchitecture, LlamaHyperParams};
use super::reader::{GgufHeader, TensorInfo};
use super::GgufError;
use std::collections::HashSet;

/// How to turn one GGUF tensor into one Hugging Face tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlan {
    /// The tensor's GGUF name, e.g. `blk.0.attn_q.weight`.
    pub gguf_name: String,
    /// The Hugging Face name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub hf_name: String,
    /// Dimensions in GGML order (contiguous dimension first).
    pub dims: Vec<u64>,
    /// `Some(heads)` for query/key projections whose rows are un-permuted over `heads` heads.
    pub unpermute_heads: Option<usize>,
}

/// Lists the tensors a Llama model with `hp` consists of, checks the file holds exactly those
/// with the right shapes, and returns them in file order.
pub fn plan_tensors(
    header: &GgufHeader,
    hp: &LlamaHyperParams,
) -> Result<Vec<TensorPlan>, GgufError> {
    // Each layer has nine tensors: a layer count the file cannot hold is an error before the
    // plan of every layer is built.
    let stored = header.tensors().len();
    if hp.num_hidden_layers > stored / 9 {
        return Err(GgufError::InvalidMetadata {
            key: format!("{}.block_count", hp.architecture.as_str()),
            message: format!(
                "{} layers need at least {} tensors, the file has {stored}",
                hp.num_hidden_layers,
                hp.num_hidden_layers.saturating_mul(9)
            ),
        });
    }
    let expected = expected_tensors(hp);
    let mut plans = Vec::with_capacity(expected.len());
    for plan in expected {
        let info = header
            .tensor(&plan.gguf_name)
            .ok_or_else(|| GgufError::MissingTensor(plan.gguf_name.clone()))?;
        check_shape(info, &plan.dims)?;
        plans.push(plan);
    }
    let known: HashSet<&str> = plans.iter().map(|p| p.gguf_name.as_str()).collect();
    if let Some(extra) = header
        .tensors()
        .iter()
        .find(|t| !known.contains(t.name.as_str()))
    {
        return Err(GgufError::UnexpectedTensor(extra.name.clone()));
    }
    let position = |name: &str| header.tensors().iter().position(|t| t.name == name);
    plans.sort_by_key(|p| position(&p.gguf_name));
    Ok(plans)
}

/// Fails with [`GgufError::ShapeMismatch`] unless `info` has dimensions `dims`.
fn check_shape(info: &TensorInfo, dims: &[u64]) -> Result<(), GgufError> {
    if info.dims != dims {
        return Err(GgufError::ShapeMismatch {
            tensor: info.name.clone(),
            expected: dims.to_vec(),
            found: info.dims.clone(),
        });
    }
    Ok(())
}

/// Every tensor of a Llama model with `hp`.
fn expected_tensors(hp: &LlamaHyperParams) -> Vec<TensorPlan> {
    let hidden = hp.hidden_size as u64;
    let q_width = (hp.num_attention_heads * hp.head_dim) as u64;
    let kv_width = (hp.num_key_value_heads * hp.head_dim) as u64;
    let inter = hp.intermediate_size as u64;
    let vocab = hp.vocab_size as u64;
    let plan = |gguf: String, hf: String, dims: Vec<u64>, heads: Option<usize>| TensorPlan {
        gguf_name: gguf,
        hf_name: hf,
        dims,
        unpermute_heads: heads,
    };
    let mut plans = vec![
        plan(
            "token_embd.weight".into(),
            "model.embed_tokens.weight".into(),
            vec![hidden, vocab],
            None,
        ),
        plan(
            "output_norm.weight".into(),
            "model.norm.weight".into(),
            vec![hidden],
            None,
        ),
    ];
    if !hp.tie_word_embeddings {
        plans.push(plan(
            "output.weight".into(),
            "lm_head.weight".into(),
            vec![hidden, vocab],
            None,
        ));
    }
    for layer in 0..hp.num_hidden_layers {
        let (q_heads, kv_heads) = if hp.architecture.permutes_query_key() {
            (Some(hp.num_attention_heads), Some(hp.num_key_value_heads))
        } else {
            (None, None)
        };
        // Qwen2's output projection has no bias; Llama's `attention_bias` covers all four.
        let biased = |gguf: &str| {
            hp.attention_bias
                && matches!(gguf, "attn_q" | "attn_k" | "attn_v" | "attn_output")
                && (gguf != "attn_output" || hp.architecture == GgufArchitecture::Llama)
        };
        // (GGUF part, HF module, GGML dims of the weight, un-permute heads)
        let parts = [
            ("attn_norm", "input_layernorm", vec![hidden], None),
            ("attn_q", "self_attn.q_proj", vec![hidden, q_width], q_heads),
            (
                "attn_k",
                "self_attn.k_proj",
                vec![hidden, kv_width],
                kv_heads,
            ),
            ("attn_v", "self_attn.v_proj", vec![hidden, kv_width], None),
            (
                "attn_output",
                "self_attn.o_proj",
                vec![q_width, hidden],
                None,
            ),
            ("ffn_norm", "post_attention_layernorm", vec![hidden], None),
            ("ffn_gate", "mlp.gate_proj", vec![hidden, inter], None),
            ("ffn_up", "mlp.up_proj", vec![hidden, inter], None),
            ("ffn_down", "mlp.down_proj", vec![inter, hidden], None),
        ];
        for (gguf, hf, dims, heads) in parts {
            let bias_dims = vec![dims[dims.len() - 1]];
            let has_bias = biased(gguf);
            plans.push(plan(
                format!("blk.{layer}.{gguf}.weight"),
                format!("model.layers.{layer}.{hf}.weight"),
                dims,
                heads,
            ));
            if has_bias {
                plans.push(plan(
                    format!("blk.{layer}.{gguf}.bias"),
                    format!("model.layers.{layer}.{hf}.bias"),
                    bias_dims,
                    heads,
                ));
            }
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(tie: bool, bias: bool) -> LlamaHyperParams {
        LlamaHyperParams {
            architecture: GgufArchitecture::Llama,
            vocab_size: 10,
            hidden_size: 8,
            intermediate_size: 12,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 2,
            max_position_embeddings: 16,
            rms_norm_eps: 1e-5,
            rope_theta: 1e4,
            tie_word_embeddings: tie,
            attention_bias: bias,
            bos_token_id: None,
            eos_token_id: None,
            pad_token_id: None,
        }
    }

    #[test]
    fn llama_layout_names_and_shapes() {
        let plans = expected_tensors(&hp(true, false));
        assert_eq!(plans.len(), 2 + 2 * 9);
        let k = plans
            .iter()
            .find(|p| p.gguf_name == "blk.1.attn_k.weight")
            .unwrap();
        assert_eq!(k.hf_name, "model.layers.1.self_attn.k_proj.weight");
        assert_eq!(k.dims, [8, 4]);
        assert_eq!(k.unpermute_heads, Some(2));
        let down = plans
            .iter()
            .find(|p| p.gguf_name == "blk.0.ffn_down.weight")
            .unwrap();
        assert_eq!(
            (down.hf_name.as_str(), down.dims.as_slice()),
            ("model.layers.0.mlp.down_proj.weight", &[12u64, 8][..])
        );
        assert!(plans.iter().all(|p| p.hf_name != "lm_head.weight"));
    }

    #[test]
    fn untied_model_has_lm_head_and_biases_follow_attention() {
        let plans = expected_tensors(&hp(false, true));
        assert!(plans.iter().any(|p| p.hf_name == "lm_head.weight"));
        let q_bias = plans
            .iter()
            .find(|p| p.gguf_name == "blk.0.attn_q.bias")
            .unwrap();
        assert_eq!(
            (q_bias.dims.as_slice(), q_bias.unpermute_heads),
            (&[8u64][..], Some(4))
        );
        assert!(plans
            .iter()
            .any(|p| p.gguf_name == "blk.0.attn_output.bias"));
        assert!(!plans.iter().any(|p| p.gguf_name == "blk.0.ffn_up.bias"));
    }

    #[test]
    fn qwen2_has_no_output_bias_and_no_permutation() {
        let qwen2 = LlamaHyperParams {
            architecture: GgufArchitecture::Qwen2,
            ..hp(true, true)
        };
        let plans = expected_tensors(&qwen2);
        assert!(plans.iter().any(|p| p.gguf_name == "blk.1.attn_v.bias"));
        assert!(!plans
            .iter()
            .any(|p| p.gguf_name.contains("attn_output.bias")));
        assert!(plans.iter().all(|p| p.unpermute_heads.is_none()));
    }
}
