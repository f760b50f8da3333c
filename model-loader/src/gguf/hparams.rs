//! Llama-family hyperparameters read from GGUF metadata (`general.architecture` `llama` or
//! `qwen2`), and the Hugging Face `config.json` and `generation_config.json` written from them.

use super::reader::GgufHeader;
use super::value::{GgufValue, MetadataExt};
use super::GgufError;
use serde_json::{json, Value};

/// Largest accepted layer count, head count or width; guards against absurd metadata.
const MAX_DIMENSION: u64 = 1 << 20;

/// The architectures a GGUF file can be imported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufArchitecture {
    /// `llama` (also Mistral 7B and SmolLM2, which llama.cpp converts as `llama`): query and
    /// key rows are stored permuted for llama.cpp's RoPE.
    Llama,
    /// `qwen2`: q, k and v projections with biases; rows stored in Hugging Face order.
    Qwen2,
}

impl GgufArchitecture {
    /// The `general.architecture` value, also the prefix of the architecture's metadata keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        }
    }

    /// Whether llama.cpp stores the query and key rows permuted (see [`super::permute`]).
    pub fn permutes_query_key(self) -> bool {
        self == Self::Llama
    }
}

/// The hyperparameters of a Llama-family model stored in a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaHyperParams {
    /// The architecture.
    pub architecture: GgufArchitecture,
    /// Number of token ids.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads.
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Longest context the model was trained for.
    pub max_position_embeddings: usize,
    /// Epsilon of the RMS norms.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Whether the output projection reuses the token embeddings (no `output.weight`).
    pub tie_word_embeddings: bool,
    /// Whether the attention projections have biases (q, k and v; the output projection too
    /// for `llama`).
    pub attention_bias: bool,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token id.
    pub eos_token_id: Option<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
}

impl LlamaHyperParams {
    /// Reads the hyperparameters of a `general.architecture = llama` or `qwen2` file.
    pub fn from_header(header: &GgufHeader) -> Result<Self, GgufError> {
        let architecture = match header.required_str("general.architecture")? {
            "llama" => GgufArchitecture::Llama,
            "qwen2" => GgufArchitecture::Qwen2,
            arch => {
                return Err(GgufError::Unsupported(format!(
                    "architecture {arch:?} (supported: \"llama\", \"qwen2\")"
                )))
            }
        };
        let arch = architecture.as_str();
        let key = |suffix: &str| format!("{arch}.{suffix}");
        if let Some(kind) = header.optional_str(&key("rope.scaling.type"))? {
            if kind != "none" {
                return Err(GgufError::Unsupported(format!("RoPE scaling {kind:?}")));
            }
        }
        let dim = |suffix: &str| -> Result<usize, GgufError> {
            let name = key(suffix);
            positive(&name, header.required_u64(&name)?)
        };
        let hidden_size = dim("embedding_length")?;
        let num_attention_heads = dim("attention.head_count")?;
        let num_key_value_heads = match header.optional_u64(&key("attention.head_count_kv"))? {
            Some(v) => positive(&key("attention.head_count_kv"), v)?,
            None => num_attention_heads,
        };
        if !num_attention_heads.is_multiple_of(num_key_value_heads) {
            return Err(invalid(
                &key("attention.head_count_kv"),
                format!(
                    "{num_key_value_heads} does not divide the {num_attention_heads} query heads"
                ),
            ));
        }
        let head_dim = match header.optional_u64(&key("attention.key_length"))? {
            Some(v) => positive(&key("attention.key_length"), v)?,
            None if hidden_size.is_multiple_of(num_attention_heads) => {
                hidden_size / num_attention_heads
            }
            None => {
                return Err(invalid(
                    &key("attention.head_count"),
                    format!("{num_attention_heads} heads do not divide the width {hidden_size}"),
                ))
            }
        };
        for name in [key("attention.value_length"), key("rope.dimension_count")] {
            if let Some(v) = header.optional_u64(&name)? {
                if v != head_dim as u64 {
                    return Err(GgufError::Unsupported(format!(
                        "{name} = {v} differs from the head dimension {head_dim}"
                    )));
                }
            }
        }
        let vocab_size = match header.optional_u64(&key("vocab_size"))? {
            Some(v) => positive(&key("vocab_size"), v)?,
            None => positive(
                "tokenizer.ggml.tokens",
                header.required_array("tokenizer.ggml.tokens")?.len() as u64,
            )?,
        };
        let token_id = |key: &str| -> Result<Option<u32>, GgufError> {
            header
                .optional_u64(key)?
                .map(|id| {
                    u32::try_from(id)
                        .ok()
                        .filter(|&id| (id as usize) < vocab_size)
                        .ok_or_else(|| {
                            invalid(
                                key,
                                format!("token id {id} is outside the vocabulary of {vocab_size}"),
                            )
                        })
                })
                .transpose()
        };
        Ok(Self {
            architecture,
            vocab_size,
            hidden_size,
            intermediate_size: dim("feed_forward_length")?,
            num_hidden_layers: dim("block_count")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            max_position_embeddings: dim("context_length")?,
            rms_norm_eps: positive_float(header, &key("attention.layer_norm_rms_epsilon"), None)?,
            rope_theta: positive_float(header, &key("rope.freq_base"), Some(10_000.0))?,
            tie_word_embeddings: header.tensor("output.weight").is_none(),
            attention_bias: header.tensor("blk.0.attn_q.bias").is_some(),
            bos_token_id: token_id("tokenizer.ggml.bos_token_id")?,
            eos_token_id: token_id("tokenizer.ggml.eos_token_id")?,
            pad_token_id: token_id("tokenizer.ggml.padding_token_id")?,
        })
    }

    /// The Hugging Face `config.json` of a float32 `LlamaForCausalLM` or `Qwen2ForCausalLM`.
    pub fn to_config_json(&self) -> Value {
        let class = match self.architecture {
            GgufArchitecture::Llama => "LlamaForCausalLM",
            GgufArchitecture::Qwen2 => "Qwen2ForCausalLM",
        };
        json!({
            "architectures": [class],
            "model_type": self.architecture.as_str(),
            "attention_bias": self.attention_bias,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "mlp_bias": false,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": self.num_key_value_heads,
            "pretraining_tp": 1,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_scaling": null,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": "float32",
            "use_cache": true,
            "vocab_size": self.vocab_size
        })
    }

    /// The Hugging Face `generation_config.json`.
    pub fn to_generation_config_json(&self) -> Value {
        let mut config = json!({
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
        });
        if let Some(pad) = self.pad_token_id {
            config["pad_token_id"] = json!(pad);
        }
        config
    }
}

/// A [`GgufError::InvalidMetadata`].
fn invalid(key: &str, message: String) -> GgufError {
    GgufError::InvalidMetadata {
        key: key.into(),
        message,
    }
}

/// Checks `1 <= value <= MAX_DIMENSION`.
fn positive(key: &str, value: u64) -> Result<usize, GgufError> {
    if value == 0 || value > MAX_DIMENSION {
        return Err(invalid(
            key,
            format!("{value} is outside 1..={MAX_DIMENSION}"),
        ));
    }
    Ok(value as usize)
}

/// Reads a positive finite float. An f32 is converted through its shortest decimal form, so
/// `1e-5f32` becomes `1e-5` rather than `9.999999747378752e-6`.
fn positive_float(header: &GgufHeader, key: &str, default: Option<f64>) -> Result<f64, GgufError> {
    let value = match (header.value(key), default) {
        (None, Some(default)) => default,
        (None, None) => return Err(GgufError::MissingMetadata(key.into())),
        (Some(GgufValue::F32(v)), _) => v.to_string().parse::<f64>().unwrap_or(f64::from(*v)),
        (Some(other), _) => other
            .as_f64()
            .ok_or_else(|| super::value::mismatch(key, "a float", other))?,
    };
    if !(value.is_finite() && value > 0.0) {
        return Err(invalid(key, format!("{value} is not a positive number")));
    }
    Ok(value)
}
