//! Bad `config.json` files: every error names the file and the offending field.

use aquila_model_loader::config::{ConfigError, EagleConfig, LlamaConfig};
use serde_json::{json, Value};
use std::path::Path;

fn valid() -> Value {
    json!({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 320, "rms_norm_eps": 1e-5, "eos_token_id": 2
    })
}

fn with(field: &str, value: Value) -> Value {
    let mut config = valid();
    config[field] = value;
    config
}

fn without(field: &str) -> Value {
    let mut config = valid();
    config.as_object_mut().unwrap().remove(field);
    config
}

/// Parses `value` and checks the error names `field` and the file.
fn expect_field_error(value: Value, field: &str) -> ConfigError {
    let err = LlamaConfig::from_json_str(&value.to_string(), Path::new("models/x/config.json"))
        .expect_err(&format!("{value} should be rejected"));
    let text = err.to_string();
    assert!(text.contains("models/x/config.json"), "{text}");
    assert!(
        text.contains(&format!("`{field}`")),
        "expected field {field}: {text}"
    );
    err
}

#[test]
fn missing_required_fields() {
    for field in [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "model_type",
    ] {
        let err = expect_field_error(without(field), field);
        assert!(matches!(err, ConfigError::MissingField { .. }), "{err:?}");
    }
    // `null` counts as missing.
    expect_field_error(with("hidden_size", Value::Null), "hidden_size");
}

#[test]
fn nonsensical_values() {
    let cases = [
        ("hidden_size", json!(0)),
        ("hidden_size", json!(-64)),
        ("hidden_size", json!("64")),
        ("num_attention_heads", json!(0)),
        ("num_key_value_heads", json!(3)),
        ("head_dim", json!(15)),
        ("rms_norm_eps", json!(0.0)),
        ("rms_norm_eps", json!(-1e-5)),
        ("rope_theta", json!(0)),
        ("max_position_embeddings", json!(0)),
        ("tie_word_embeddings", json!("yes")),
        ("eos_token_id", json!(320)),
        ("bos_token_id", json!(-1)),
        ("model_type", json!("gpt2")),
        ("hidden_act", json!("gelu")),
        ("sliding_window", json!(4096)),
        ("rope_scaling", json!("linear")),
    ];
    for (field, value) in cases {
        let err = expect_field_error(with(field, value), field);
        assert!(matches!(err, ConfigError::InvalidField { .. }), "{err:?}");
    }
    // Heads that do not divide the hidden size without an explicit head width.
    expect_field_error(with("num_attention_heads", json!(6)), "num_attention_heads");
}

#[test]
fn bad_rope_scaling() {
    let cases = [
        (
            json!({"rope_type": "dynamic", "factor": 2.0}),
            "rope_scaling.rope_type",
        ),
        (json!({"type": "yarn", "factor": 2.0}), "rope_scaling.type"),
        (json!({"factor": 2.0}), "rope_scaling.rope_type"),
        (json!({"rope_type": "linear"}), "rope_scaling.factor"),
        (
            json!({"rope_type": "linear", "factor": -2.0}),
            "rope_scaling.factor",
        ),
        (
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
            "rope_scaling.original_max_position_embeddings",
        ),
        (
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}),
            "rope_scaling.high_freq_factor",
        ),
    ];
    for (scaling, field) in cases {
        expect_field_error(with("rope_scaling", scaling), field);
    }
    expect_field_error(
        with(
            "rope_parameters",
            json!({"rope_type": "llama3", "rope_theta": -1.0}),
        ),
        "rope_parameters.rope_theta",
    );
}

#[test]
fn unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("config.json");
    let err = LlamaConfig::from_file(&missing).unwrap_err();
    assert!(
        matches!(err, ConfigError::Io { .. }) && err.to_string().contains("config.json"),
        "{err}"
    );

    for text in ["{\"hidden_size\": ", "[1, 2, 3]", ""] {
        std::fs::write(&missing, text).unwrap();
        let err = LlamaConfig::from_file(&missing).unwrap_err();
        assert!(matches!(err, ConfigError::Json { .. }), "{err:?}");
        assert!(err.to_string().contains("config.json"), "{err}");
        let err = EagleConfig::from_file(&missing).unwrap_err();
        assert!(matches!(err, ConfigError::Json { .. }), "{err:?}");
    }
}

#[test]
fn bad_eagle_configs() {
    let eagle3 = |extra: Value| -> ConfigError {
        let mut value = valid();
        value["num_hidden_layers"] = json!(1);
        value["architectures"] = json!(["LlamaForCausalLMEagle3"]);
        for (k, v) in extra.as_object().unwrap() {
            value[k] = v.clone();
        }
        EagleConfig::from_json_str(&value.to_string(), Path::new("head/config.json")).unwrap_err()
    };
    let cases = [
        (json!({"num_hidden_layers": 0}), "num_hidden_layers"),
        (json!({"draft_vocab_size": 321}), "draft_vocab_size"),
        (json!({"draft_vocab_size": 0}), "draft_vocab_size"),
        (
            json!({"eagle_aux_hidden_state_layer_ids": []}),
            "eagle_aux_hidden_state_layer_ids",
        ),
        (
            json!({"eagle_aux_hidden_state_layer_ids": [1, -2]}),
            "eagle_aux_hidden_state_layer_ids",
        ),
        (
            json!({"eagle_config": {"use_aux_hidden_state": "no"}}),
            "eagle_config.use_aux_hidden_state",
        ),
        (json!({"eagle_config": 3}), "eagle_config"),
        (json!({"norm_before_residual": 1}), "norm_before_residual"),
    ];
    for (extra, field) in cases {
        let text = eagle3(extra.clone()).to_string();
        assert!(
            text.contains("head/config.json") && text.contains(&format!("`{field}`")),
            "{extra}: {text}"
        );
    }
    let mut eagle1 = valid();
    eagle1["bias"] = json!("true");
    let err =
        EagleConfig::from_json_str(&eagle1.to_string(), Path::new("head/config.json")).unwrap_err();
    assert!(err.to_string().contains("`bias`"), "{err}");
}
