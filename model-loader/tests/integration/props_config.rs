//! No `config.json` breaks the config parsers: arbitrary text and structural edits of valid
//! Llama and EAGLE configs (hostile numbers, wrong types, removed keys) give a config or an
//! error, never a panic, and a config that parses has consistent derived sizes.

use crate::prop_support::{assert_bounded_allocation, json_edit, mutation};

use aquila_model_loader::config::{EagleConfig, LlamaConfig};
use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

/// The config of the tiny Llama fixture, with RoPE scaling so those fields get edited too.
fn llama_config() -> Value {
    TinyLlamaOptions {
        rope_scaling: Some(json!({"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64})),
        ..TinyLlamaOptions::default()
    }
    .config_json()
}

/// An EAGLE-3 draft-head config.
fn eagle3_config() -> Value {
    json!({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 320,
        "draft_vocab_size": 32, "target_hidden_size": 64, "rms_norm_eps": 1e-5,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": true}
    })
}

/// Parses `text` as a Llama config and an EAGLE config and uses what parses.
fn parse_both(text: &str) {
    let origin = Path::new("config.json");
    if let Ok(config) = LlamaConfig::from_json_str(text, origin) {
        let _ = (config.q_width(), config.kv_width());
        let _ = config.default_eagle3_aux_layers();
    }
    match EagleConfig::from_json_str(text, origin) {
        Ok(EagleConfig::Eagle1(eagle)) => {
            let _ = eagle.resolve_fc_bias(true);
        }
        Ok(EagleConfig::Eagle3(eagle)) => {
            let _ = (eagle.target_hidden_size(), eagle.fc_input_size());
            if let Ok(target) = LlamaConfig::from_json_str(&llama_config().to_string(), origin) {
                let _ = eagle.aux_layers_for(&target);
            }
        }
        Err(_) => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn edited_configs_parse_or_fail(edits in json_edit::json_edits(), eagle in any::<bool>()) {
        let base = if eagle { eagle3_config() } else { llama_config() };
        let text = json_edit::apply_json(&base, &edits).to_string();
        assert_bounded_allocation("config", text.len(), 64, || parse_both(&text));
    }

    #[test]
    fn mutated_config_text_parses_or_fails(edits in mutation::mutations()) {
        let bytes = mutation::apply(llama_config().to_string().as_bytes(), &edits);
        let text = String::from_utf8_lossy(&bytes);
        assert_bounded_allocation("config", text.len(), 64, || parse_both(&text));
    }

    #[test]
    fn arbitrary_text_parses_or_fails(text in "\\PC{0,200}") {
        parse_both(&text);
    }
}

#[test]
fn the_unedited_configs_parse() {
    let origin = Path::new("config.json");
    LlamaConfig::from_json_str(&llama_config().to_string(), origin).unwrap();
    let eagle = EagleConfig::from_json_str(&eagle3_config().to_string(), origin).unwrap();
    assert!(matches!(eagle, EagleConfig::Eagle3(_)));
}
