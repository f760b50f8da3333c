//! `LlamaConfig`: the architecture of a Llama-family decoder (Llama, Mistral, Qwen2) read from a
//! Hugging Face `config.json`.

use super::fields::{parse_json_object, read_json_object, Fields};
use super::rope::RopeConfig;
use super::ConfigError;
use std::path::Path;

/// The `model_type` values this crate can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelType {
    /// `llama` (also SmolLM2 and EAGLE draft configs).
    Llama,
    /// `mistral` (Llama layout; a numeric `sliding_window` limits attention).
    Mistral,
    /// `qwen2` (Llama layout with q/k/v biases).
    Qwen2,
}

impl ModelType {
    /// Parses a `model_type` value.
    fn parse(value: &str) -> Option<Self> {
        match value {
            "llama" => Some(Self::Llama),
            "mistral" => Some(Self::Mistral),
            "qwen2" => Some(Self::Qwen2),
            _ => None,
        }
    }

    /// The `model_type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
        }
    }

    /// transformers' default `max_position_embeddings` for this model type.
    fn default_max_position_embeddings(self) -> usize {
        match self {
            Self::Llama => 2048,
            Self::Mistral => 4096 * 32,
            Self::Qwen2 => 32768,
        }
    }
}

/// The architecture of a Llama-family decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// The model family.
    pub model_type: ModelType,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention); divides `num_attention_heads`.
    pub num_key_value_heads: usize,
    /// Width of one attention head (explicit, or `hidden_size / num_attention_heads`); even.
    pub head_dim: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f64,
    /// Number of tokens of the embedding table and the lm_head.
    pub vocab_size: usize,
    /// Whether the lm_head shares the embedding table.
    pub tie_word_embeddings: bool,
    /// Whether the q, k and v projections have biases (Qwen2 always; Llama with `attention_bias`).
    pub qkv_bias: bool,
    /// Whether the output projection has a bias (Llama with `attention_bias`).
    pub o_bias: bool,
    /// Whether the MLP projections have biases (`mlp_bias`).
    pub mlp_bias: bool,
    /// The longest context the model supports.
    pub max_position_embeddings: usize,
    /// RoPE settings.
    pub rope: RopeConfig,
    /// The beginning-of-sequence token, if any.
    pub bos_token_id: Option<u32>,
    /// The end-of-sequence tokens (`eos_token_id` may be one id or a list).
    pub eos_token_ids: Vec<u32>,
    /// Sliding-window attention (Mistral): each token attends to the keys of the last
    /// `sliding_window` positions, its own included. `None` attends to the whole context.
    pub sliding_window: Option<usize>,
}

impl LlamaConfig {
    /// Reads and validates a `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let value = read_json_object(path)?;
        Self::from_fields(&Fields::new(&value, path)?, None)
    }

    /// Parses and validates config JSON text; `origin` names it in errors.
    pub fn from_json_str(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let value = parse_json_object(text, origin)?;
        Self::from_fields(&Fields::new(&value, origin)?, None)
    }

    /// Parses the Llama fields of a config object. `default_model_type` is used when
    /// `model_type` is absent (draft-head configs often omit it); without it the field is
    /// required.
    pub(crate) fn from_fields(
        fields: &Fields<'_>,
        default_model_type: Option<ModelType>,
    ) -> Result<Self, ConfigError> {
        let model_type = match (fields.string("model_type")?, default_model_type) {
            (Some(name), _) => ModelType::parse(name).ok_or_else(|| {
                fields.invalid(
                    "model_type",
                    format!("unsupported model type {name:?} (supported: llama, mistral, qwen2)"),
                )
            })?,
            (None, Some(default)) => default,
            (None, None) => return Err(ConfigError::missing(fields.origin(), "model_type")),
        };
        check_activation(fields)?;
        let sliding_window = sliding_window(fields, model_type)?;

        let hidden_size = fields.required_positive("hidden_size")?;
        let num_attention_heads = fields.required_positive("num_attention_heads")?;
        let num_key_value_heads = fields
            .positive("num_key_value_heads")?
            .unwrap_or(num_attention_heads);
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(fields.invalid(
                "num_key_value_heads",
                format!("{num_key_value_heads} does not divide num_attention_heads ({num_attention_heads})"),
            ));
        }
        let head_dim = match fields.positive("head_dim")? {
            Some(head_dim) => head_dim,
            None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
            None => {
                return Err(fields.invalid(
                    "num_attention_heads",
                    format!("{num_attention_heads} does not divide hidden_size ({hidden_size}) and no head_dim is given"),
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(fields.invalid(
                "head_dim",
                format!("RoPE needs an even head width, found {head_dim}"),
            ));
        }
        let attention_bias = fields.bool("attention_bias")?.unwrap_or(false);
        let vocab_size = fields.required_positive("vocab_size")?;
        let config = Self {
            model_type,
            hidden_size,
            num_hidden_layers: fields.required_positive("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            intermediate_size: fields.required_positive("intermediate_size")?,
            rms_norm_eps: fields.positive_f64("rms_norm_eps")?.unwrap_or(1e-6),
            vocab_size,
            tie_word_embeddings: fields.bool("tie_word_embeddings")?.unwrap_or(false),
            qkv_bias: model_type == ModelType::Qwen2 || attention_bias,
            o_bias: model_type != ModelType::Qwen2 && attention_bias,
            mlp_bias: fields.bool("mlp_bias")?.unwrap_or(false),
            max_position_embeddings: fields
                .positive("max_position_embeddings")?
                .unwrap_or_else(|| model_type.default_max_position_embeddings()),
            rope: RopeConfig::from_fields(fields)?,
            bos_token_id: token_in_vocab(fields, "bos_token_id", vocab_size)?
                .into_iter()
                .next(),
            eos_token_ids: token_in_vocab(fields, "eos_token_id", vocab_size)?,
            sliding_window,
        };
        Ok(config)
    }

    /// Width of the concatenated query heads (`num_attention_heads * head_dim`).
    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the concatenated key (or value) heads (`num_key_value_heads * head_dim`).
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The EAGLE-3 auxiliary layers by default: `(2, L / 2, L - 3)` for `L` layers, in
    /// increasing order, without duplicates and without ids past the last layer (shallow models
    /// capture fewer layers, as the reference decoder loop does).
    pub fn default_eagle3_aux_layers(&self) -> Vec<usize> {
        let layers = self.num_hidden_layers;
        let mut ids: Vec<usize> = [2, layers / 2, layers.saturating_sub(3)]
            .into_iter()
            .filter(|&id| id < layers)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Rejects activations other than SiLU (the MLP is SwiGLU).
fn check_activation(fields: &Fields<'_>) -> Result<(), ConfigError> {
    for name in ["hidden_act", "hidden_activation"] {
        if let Some(act) = fields.string(name)? {
            if act != "silu" && act != "swish" {
                return Err(fields.invalid(
                    name,
                    format!("unsupported activation {act:?} (the MLP is SwiGLU: silu)"),
                ));
            }
        }
    }
    Ok(())
}

/// The sliding window of a Mistral config (`sliding_window`, a positive number or null).
/// Other model types run full attention, so an enabled window there is an error: Qwen2's
/// (`use_sliding_window`) applies to some layers only, and Llama has none.
fn sliding_window(
    fields: &Fields<'_>,
    model_type: ModelType,
) -> Result<Option<usize>, ConfigError> {
    match model_type {
        ModelType::Mistral => fields.positive("sliding_window"),
        ModelType::Qwen2 | ModelType::Llama => {
            let enabled = model_type == ModelType::Llama
                || fields.bool("use_sliding_window")?.unwrap_or(false);
            match fields.usize("sliding_window")? {
                Some(window) if enabled => Err(fields.invalid(
                    "sliding_window",
                    format!(
                        "sliding-window attention ({window}) is supported for mistral only, \
                         not {}",
                        model_type.as_str()
                    ),
                )),
                _ => Ok(None),
            }
        }
    }
}

/// Reads token ids and checks each is inside the vocabulary.
fn token_in_vocab(
    fields: &Fields<'_>,
    name: &str,
    vocab_size: usize,
) -> Result<Vec<u32>, ConfigError> {
    let ids = fields.token_ids(name)?;
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab_size) {
        return Err(fields.invalid(
            name,
            format!("token {bad} is outside the vocabulary of {vocab_size}"),
        ));
    }
    Ok(ids)
}
