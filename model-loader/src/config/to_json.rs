//! Config JSON out of parsed configs: [`LlamaConfig::to_json`] and the `config.json` of EAGLE
//! heads ([`eagle1_config_json`], [`eagle3_config_json`]), written so that parsing them gives
//! the same values back.

use super::rope::{RopeConfig, RopeScaling};
use super::{LlamaConfig, ModelType};
use serde_json::{json, Value};

impl LlamaConfig {
    /// The Hugging Face `config.json` of this architecture. Parsing it gives `self` back,
    /// except for bias combinations no config key expresses: an `o_proj` bias without q/k/v
    /// biases, and q/k/v biases without an `o_proj` bias outside `qwen2` (written as the
    /// `qkv_bias` key, which only EAGLE-1 configs read).
    pub fn to_json(&self) -> Value {
        let mut config = json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": self.model_type.as_str(),
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope.theta,
            "rope_scaling": rope_scaling_json(&self.rope),
            "attention_bias": self.o_bias,
            "mlp_bias": self.mlp_bias,
            "tie_word_embeddings": self.tie_word_embeddings,
            "vocab_size": self.vocab_size,
            "torch_dtype": "float32",
        });
        if self.model_type != ModelType::Qwen2 && self.qkv_bias != self.o_bias {
            config["qkv_bias"] = self.qkv_bias.into();
        }
        if let Some(window) = self.sliding_window {
            config["sliding_window"] = window.into();
        }
        if let Some(bos) = self.bos_token_id {
            config["bos_token_id"] = bos.into();
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [eos] => config["eos_token_id"] = (*eos).into(),
            many => config["eos_token_id"] = many.into(),
        }
        config
    }
}

/// The `rope_scaling` object of `rope` (`null` without scaling).
fn rope_scaling_json(rope: &RopeConfig) -> Value {
    match rope.scaling {
        None => Value::Null,
        Some(RopeScaling::Linear { factor }) => json!({"rope_type": "linear", "factor": factor}),
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        }) => json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position_embeddings,
        }),
    }
}

/// The `config.json` of an EAGLE-1 head: the decoder `layer` (its `num_hidden_layers` is the
/// head's layer count) with the `bias` key saying whether `fc` has a bias.
pub fn eagle1_config_json(layer: &LlamaConfig, fc_bias: bool) -> Value {
    let mut config = layer.to_json();
    config["bias"] = fc_bias.into();
    config
}

/// The `config.json` of an EAGLE-3 head: the one-layer decoder `layer`, `draft_vocab_size`,
/// `target_hidden_size`, `norm_before_residual` and `eagle_config`. With `aux_layer_ids` the
/// head projects those target layers through `fc` (`eagle_aux_hidden_state_layer_ids`);
/// `None` writes `use_aux_hidden_state: false`, a head consuming the target's last hidden
/// state without `fc`.
pub fn eagle3_config_json(
    layer: &LlamaConfig,
    draft_vocab_size: usize,
    target_hidden_size: usize,
    aux_layer_ids: Option<&[usize]>,
    norm_before_residual: bool,
) -> Value {
    let mut config = layer.to_json();
    config["architectures"] = json!(["LlamaForCausalLMEagle3"]);
    config["draft_vocab_size"] = draft_vocab_size.into();
    config["target_hidden_size"] = target_hidden_size.into();
    config["norm_before_residual"] = norm_before_residual.into();
    config["eagle_config"] = match aux_layer_ids {
        Some(ids) => json!({
            "use_aux_hidden_state": true,
            "eagle_aux_hidden_state_layer_ids": ids,
        }),
        None => json!({"use_aux_hidden_state": false}),
    };
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EagleConfig;
    use std::path::Path;

    fn llama(extra: Value) -> LlamaConfig {
        let mut json = json!({
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
            "bos_token_id": 1, "eos_token_id": [2, 3],
        });
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        LlamaConfig::from_json_str(&json.to_string(), Path::new("config.json")).unwrap()
    }

    fn reparse(value: &Value) -> LlamaConfig {
        LlamaConfig::from_json_str(&value.to_string(), Path::new("out.json")).unwrap()
    }

    #[test]
    fn llama_configs_round_trip() {
        for extra in [
            json!({}),
            json!({"attention_bias": true, "mlp_bias": true, "tie_word_embeddings": true}),
            json!({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
            json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 256}}),
            json!({"model_type": "qwen2", "head_dim": 32, "eos_token_id": 2}),
        ] {
            let config = llama(extra);
            assert_eq!(reparse(&config.to_json()), config);
        }
    }

    #[test]
    fn eagle_configs_round_trip() {
        let layer = llama(json!({}));
        for fc_bias in [false, true] {
            let EagleConfig::Eagle1(parsed) = EagleConfig::from_json_str(
                &eagle1_config_json(&layer, fc_bias).to_string(),
                Path::new("head/config.json"),
            )
            .unwrap() else {
                panic!("expected an EAGLE-1 config");
            };
            assert_eq!(
                (parsed.layer.clone(), parsed.fc_bias),
                (layer.clone(), Some(fc_bias))
            );
        }
        // EAGLE-1 keeps q/k/v biases without an o_proj bias through its `qkv_bias` key.
        let mut qkv_only = layer.clone();
        qkv_only.qkv_bias = true;
        let parsed = EagleConfig::from_json_str(
            &eagle1_config_json(&qkv_only, true).to_string(),
            Path::new("head/config.json"),
        )
        .unwrap();
        assert_eq!(parsed.layer(), &qkv_only);

        for (ids, norm_before_residual) in [(Some(&[0usize, 2, 5][..]), true), (None, false)] {
            let json = eagle3_config_json(&layer, 120, 96, ids, norm_before_residual);
            let EagleConfig::Eagle3(parsed) =
                EagleConfig::from_json_str(&json.to_string(), Path::new("head/config.json"))
                    .unwrap()
            else {
                panic!("expected an EAGLE-3 config");
            };
            assert_eq!(parsed.layer, layer);
            assert_eq!(parsed.draft_vocab_size, 120);
            assert_eq!(parsed.target_hidden_size, Some(96));
            assert_eq!(parsed.aux_layer_ids.as_deref(), ids);
            assert_eq!(parsed.use_aux_hidden_state, ids.is_some());
            assert_eq!(parsed.norm_before_residual, norm_before_residual);
        }
    }
}
