//! Parsing Hugging Face `config.json` files: Llama, Mistral and Qwen2 targets, RoPE settings in
//! both the legacy and the transformers 5 layout, and EAGLE-1/EAGLE-3 draft heads.

use aquila_model_loader::config::{
    ConfigError, EagleConfig, LlamaConfig, ModelType, RopeConfig, RopeScaling, DEFAULT_ROPE_THETA,
};
use serde_json::{json, Value};
use std::path::Path;

fn llama(value: Value) -> Result<LlamaConfig, ConfigError> {
    LlamaConfig::from_json_str(&value.to_string(), Path::new("config.json"))
}

fn eagle(value: Value) -> Result<EagleConfig, ConfigError> {
    EagleConfig::from_json_str(&value.to_string(), Path::new("draft/config.json"))
}

/// SmolLM2-135M-Instruct's config.
fn smollm2() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
        "intermediate_size": 1536, "max_position_embeddings": 8192, "mlp_bias": false,
        "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
        "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_scaling": null,
        "rope_theta": 100000.0, "tie_word_embeddings": true, "vocab_size": 49152
    })
}

#[test]
fn smollm2_config() {
    let c = llama(smollm2()).unwrap();
    assert_eq!(c.model_type, ModelType::Llama);
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.intermediate_size),
        (576, 30, 1536)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (9, 3, 64)
    );
    assert_eq!((c.q_width(), c.kv_width()), (576, 192));
    assert_eq!(c.rms_norm_eps, 1e-5);
    assert_eq!(
        c.rope,
        RopeConfig {
            theta: 100000.0,
            scaling: None
        }
    );
    assert!(c.tie_word_embeddings && !c.qkv_bias && !c.o_bias && !c.mlp_bias);
    assert_eq!((c.vocab_size, c.max_position_embeddings), (49152, 8192));
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    assert_eq!(c.default_eagle3_aux_layers(), vec![2, 15, 27]);
}

#[test]
fn defaults_fill_optional_fields() {
    let c = llama(json!({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 8, "intermediate_size": 512, "vocab_size": 100,
        "bos_token_id": null, "eos_token_id": [2, 7]
    }))
    .unwrap();
    assert_eq!((c.num_key_value_heads, c.head_dim), (8, 32));
    assert_eq!(
        c.rope,
        RopeConfig {
            theta: DEFAULT_ROPE_THETA,
            scaling: None
        }
    );
    assert_eq!(c.rms_norm_eps, 1e-6);
    assert_eq!(c.max_position_embeddings, 2048);
    assert!(!c.tie_word_embeddings);
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (None, vec![2, 7])
    );
    assert_eq!(c.default_eagle3_aux_layers(), vec![0, 1]);
}

#[test]
fn llama_attention_bias_covers_all_projections() {
    let mut value = smollm2();
    value["attention_bias"] = json!(true);
    value["mlp_bias"] = json!(true);
    let c = llama(value).unwrap();
    assert!(c.qkv_bias && c.o_bias && c.mlp_bias);
}

#[test]
fn qwen2_has_qkv_bias_only() {
    let c = llama(json!({
        "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
        "vocab_size": 151936, "rope_theta": 1000000.0, "sliding_window": 32768,
        "use_sliding_window": false, "tie_word_embeddings": true, "rms_norm_eps": 1e-6
    }))
    .unwrap();
    assert_eq!(c.model_type, ModelType::Qwen2);
    assert!(c.qkv_bias && !c.o_bias);
    assert_eq!(c.head_dim, 64);
    assert_eq!(c.max_position_embeddings, 32768);
}

#[test]
fn mistral_with_explicit_head_dim() {
    let c = llama(json!({
        "model_type": "mistral", "hidden_size": 5120, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 14336, "vocab_size": 131072, "sliding_window": null,
        "rope_theta": 1000000.0
    }))
    .unwrap();
    assert_eq!(c.model_type, ModelType::Mistral);
    assert_eq!((c.head_dim, c.q_width(), c.kv_width()), (128, 4096, 1024));
    assert_eq!(c.sliding_window, None);
}

#[test]
fn mistral_sliding_window_is_read_and_written_back() {
    let config = json!({
        "model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 320,
        "sliding_window": 4096
    });
    let c = llama(config.clone()).unwrap();
    assert_eq!(c.sliding_window, Some(4096));
    assert_eq!(llama(c.to_json()).unwrap(), c);
    let mut zero = config;
    zero["sliding_window"] = json!(0);
    assert!(llama(zero).is_err());
}

#[test]
fn llama3_scaling_in_both_layouts() {
    let scaling = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    };
    let mut legacy = smollm2();
    legacy["rope_theta"] = json!(500000.0);
    legacy["rope_scaling"] = json!({
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192
    });
    assert_eq!(
        llama(legacy).unwrap().rope,
        RopeConfig {
            theta: 500000.0,
            scaling: Some(scaling)
        }
    );

    let mut v5 = smollm2();
    v5.as_object_mut().unwrap().remove("rope_theta");
    v5["rope_parameters"] = json!({
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192
    });
    assert_eq!(
        llama(v5).unwrap().rope,
        RopeConfig {
            theta: 500000.0,
            scaling: Some(scaling)
        }
    );

    let mut v5_default = smollm2();
    v5_default["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1000.0});
    assert_eq!(
        llama(v5_default).unwrap().rope,
        RopeConfig {
            theta: 1000.0,
            scaling: None
        }
    );
}

#[test]
fn llama3_frequencies_match_hand_computation() {
    // head_dim 8 -> base frequencies theta^(-i/4), i = 0..4, with theta = 10000:
    // 1, 0.1, 0.01, 0.001; wavelengths 2*pi/f = 6.283, 62.83, 628.3, 6283.2.
    // Original context 1024, low factor 1, high factor 4: wavelengths below 1024/4 = 256 are
    // kept, above 1024/1 = 1024 are divided by 8, and in between blend with
    // smooth = (1024 / wavelength - 1) / (4 - 1).
    let rope = RopeConfig {
        theta: 10000.0,
        scaling: Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 1024,
        }),
    };
    let freqs = rope.inverse_frequencies(8);
    let smooth = (1024.0 / (2.0 * std::f64::consts::PI / 0.01) - 1.0) / 3.0; // 0.209916
    let expected = [
        1.0,
        0.1,
        (1.0 - smooth) * 0.01 / 8.0 + smooth * 0.01,
        0.001 / 8.0,
    ];
    assert!((smooth - 0.209_916).abs() < 1e-6);
    for (got, want) in freqs.iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
}

#[test]
fn eagle1_config_and_fc_bias_rule() {
    let base = json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5, "vocab_size": 128256, "rope_theta": 500000.0,
        "max_position_embeddings": 2048
    });
    let EagleConfig::Eagle1(absent) = eagle(base.clone()).unwrap() else {
        panic!("expected EAGLE-1");
    };
    assert_eq!(absent.fc_bias, None);
    assert_eq!(absent.layer.model_type, ModelType::Llama);
    assert_eq!(absent.layer.rope.theta, 500000.0);
    assert!(absent.resolve_fc_bias(true).unwrap());
    assert!(!absent.resolve_fc_bias(false).unwrap());

    let mut explicit = base.clone();
    explicit["bias"] = json!(false);
    explicit["qkv_bias"] = json!(true);
    let EagleConfig::Eagle1(no_bias) = eagle(explicit).unwrap() else {
        panic!("expected EAGLE-1");
    };
    assert_eq!(no_bias.fc_bias, Some(false));
    assert!(no_bias.layer.qkv_bias);
    assert!(!no_bias.resolve_fc_bias(false).unwrap());
    let err = no_bias.resolve_fc_bias(true).unwrap_err();
    assert!(
        err.to_string().contains("draft/config.json") && err.to_string().contains("`bias`"),
        "{err}"
    );

    let mut with_bias = base;
    with_bias["bias"] = json!(true);
    let EagleConfig::Eagle1(with_bias) = eagle(with_bias).unwrap() else {
        panic!("expected EAGLE-1");
    };
    assert!(with_bias.resolve_fc_bias(false).is_err());
}

fn eagle3_base() -> Value {
    json!({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
        "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048
    })
}

#[test]
fn eagle3_config_defaults() {
    let EagleConfig::Eagle3(c) = eagle(eagle3_base()).unwrap() else {
        panic!("expected EAGLE-3");
    };
    assert_eq!(c.draft_vocab_size, 32000);
    assert!(c.has_vocab_mapping());
    assert_eq!(c.target_hidden_size(), 4096);
    assert_eq!(c.fc_input_size(), 3 * 4096);
    assert!(c.use_aux_hidden_state && !c.norm_before_residual);
    assert_eq!(c.layer.rope.theta, DEFAULT_ROPE_THETA);
    let target = llama(json!({
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256
    }))
    .unwrap();
    assert_eq!(c.aux_layers_for(&target), vec![2, 16, 29]);
}

#[test]
fn eagle3_aux_layers_top_level_or_nested() {
    let mut top = eagle3_base();
    top["eagle_aux_hidden_state_layer_ids"] = json!([1, 5, 9, 12]);
    top["target_hidden_size"] = json!(2048);
    top["norm_before_residual"] = json!(true);
    let EagleConfig::Eagle3(c) = eagle(top).unwrap() else {
        panic!("expected EAGLE-3");
    };
    assert_eq!(c.aux_layer_ids, Some(vec![1, 5, 9, 12]));
    assert_eq!(c.fc_input_size(), 4 * 2048);
    assert!(c.norm_before_residual);

    let mut nested = eagle3_base();
    nested["eagle_config"] =
        json!({"eagle_aux_hidden_state_layer_ids": [2, 3, 4], "use_aux_hidden_state": false});
    nested.as_object_mut().unwrap().remove("draft_vocab_size");
    let EagleConfig::Eagle3(c) = eagle(nested).unwrap() else {
        panic!("expected EAGLE-3");
    };
    assert_eq!(c.aux_layer_ids, Some(vec![2, 3, 4]));
    assert!(!c.use_aux_hidden_state);
    assert_eq!(c.draft_vocab_size, 128256);
    assert!(!c.has_vocab_mapping());
}

#[test]
fn eagle3_is_detected_by_keys_without_architecture() {
    let mut value = eagle3_base();
    value.as_object_mut().unwrap().remove("architectures");
    assert!(matches!(eagle(value).unwrap(), EagleConfig::Eagle3(_)));
}

#[test]
fn configs_read_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, smollm2().to_string()).unwrap();
    assert_eq!(LlamaConfig::from_file(&path).unwrap().hidden_size, 576);
    std::fs::write(&path, eagle3_base().to_string()).unwrap();
    assert_eq!(
        EagleConfig::from_file(&path).unwrap().layer().hidden_size,
        4096
    );
}
