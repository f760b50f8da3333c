//! Checks that an EAGLE head fits its target model, before any weight is read.

use aquila_model_loader::checkpoint::{Checkpoint, CheckpointError, MismatchReport, ShapeMismatch};
use aquila_model_loader::config::{Eagle1Config, Eagle3Config, LlamaConfig};
use aquila_model_loader::model::FeatureTap;

use super::EagleError;

/// Fails with [`EagleError::Incompatible`] unless `head == target`.
pub(crate) fn require_equal(
    field: &'static str,
    head: usize,
    target: usize,
) -> Result<(), EagleError> {
    if head == target {
        Ok(())
    } else {
        Err(EagleError::Incompatible {
            field,
            head,
            target,
        })
    }
}

/// Fails with a checkpoint mismatch if `name` is present with another shape than `expected`
/// (for tensors the head accepts but does not read, such as an embedding copy).
pub(crate) fn check_unused_shape(
    checkpoint: &Checkpoint,
    name: &str,
    expected: &[usize],
) -> Result<(), EagleError> {
    match checkpoint.info(name) {
        Some(info) if info.shape != expected => Err(CheckpointError::Mismatch {
            path: checkpoint.origin().to_path_buf(),
            report: MismatchReport {
                wrong_shapes: vec![ShapeMismatch {
                    name: name.to_string(),
                    expected: expected.to_vec(),
                    found: info.shape,
                }],
                ..MismatchReport::default()
            },
        }
        .into()),
        _ => Ok(()),
    }
}

/// An EAGLE-1 head shares the target's embeddings, features and lm_head: same hidden size and
/// vocabulary.
pub(crate) fn check_eagle1(config: &Eagle1Config, target: &LlamaConfig) -> Result<(), EagleError> {
    require_equal("hidden_size", config.layer.hidden_size, target.hidden_size)?;
    require_equal("vocab_size", config.layer.vocab_size, target.vocab_size)
}

/// Checks an EAGLE-3 head against its target and returns the features it consumes: the
/// residual stream entering its auxiliary layers, or the last normed hidden state when the
/// head was trained without auxiliary features (`use_aux_hidden_state: false`).
pub(crate) fn check_eagle3(
    config: &Eagle3Config,
    target: &LlamaConfig,
) -> Result<FeatureTap, EagleError> {
    require_equal("vocab_size", config.layer.vocab_size, target.vocab_size)?;
    require_equal(
        "target_hidden_size",
        config.target_hidden_size(),
        target.hidden_size,
    )?;
    if !config.use_aux_hidden_state {
        require_equal("hidden_size", config.layer.hidden_size, target.hidden_size)?;
        return Ok(FeatureTap::LastHidden);
    }
    let ids = config.aux_layers_for(target);
    if ids.is_empty() {
        return Err(EagleError::Unsupported(format!(
            "the target has {} layers, too few for default EAGLE-3 auxiliary layers; name them in \
             eagle_aux_hidden_state_layer_ids",
            target.num_hidden_layers
        )));
    }
    if let Some(&layer) = ids.iter().find(|&&id| id >= target.num_hidden_layers) {
        return Err(EagleError::AuxLayerOutOfRange {
            layer,
            num_layers: target.num_hidden_layers,
        });
    }
    if ids.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(EagleError::Unsupported(format!(
            "auxiliary layer ids {ids:?} must be strictly increasing (features are concatenated from \
             the lowest layer up)"
        )));
    }
    Ok(FeatureTap::AuxLayers(ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_model_loader::config::EagleConfig;
    use std::path::Path;

    fn target(layers: usize) -> LlamaConfig {
        let json = serde_json::json!({
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 300, "max_position_embeddings": 512,
        });
        LlamaConfig::from_json_str(&json.to_string(), Path::new("target/config.json")).unwrap()
    }

    fn eagle3(extra: serde_json::Value) -> Eagle3Config {
        let mut json = serde_json::json!({
            "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 300, "draft_vocab_size": 100, "max_position_embeddings": 512,
        });
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        match EagleConfig::from_json_str(&json.to_string(), Path::new("head/config.json")).unwrap()
        {
            EagleConfig::Eagle3(config) => config,
            EagleConfig::Eagle1(_) => panic!("expected an EAGLE-3 config"),
        }
    }

    #[test]
    fn eagle3_taps_the_configured_or_default_aux_layers() {
        let ids = serde_json::json!({"eagle_aux_hidden_state_layer_ids": [0, 2, 3]});
        assert_eq!(
            check_eagle3(&eagle3(ids), &target(4)).unwrap(),
            FeatureTap::AuxLayers(vec![0, 2, 3])
        );
        // Default (2, L/2, L-3) for 8 layers.
        let tap = check_eagle3(&eagle3(serde_json::json!({})), &target(8)).unwrap();
        assert_eq!(tap, FeatureTap::AuxLayers(vec![2, 4, 5]));
        let last = serde_json::json!({"eagle_config": {"use_aux_hidden_state": false}});
        assert_eq!(
            check_eagle3(&eagle3(last), &target(4)).unwrap(),
            FeatureTap::LastHidden
        );
    }

    #[test]
    fn eagle3_rejects_aux_layers_the_target_lacks() {
        let ids = serde_json::json!({"eagle_aux_hidden_state_layer_ids": [0, 1, 4]});
        let err = check_eagle3(&eagle3(ids), &target(4)).unwrap_err();
        assert!(
            matches!(
                err,
                EagleError::AuxLayerOutOfRange {
                    layer: 4,
                    num_layers: 4
                }
            ),
            "{err}"
        );
        let unordered = serde_json::json!({"eagle_aux_hidden_state_layer_ids": [2, 1, 3]});
        let err = check_eagle3(&eagle3(unordered), &target(4)).unwrap_err();
        assert!(err.to_string().contains("strictly increasing"), "{err}");
    }

    #[test]
    fn eagle3_rejects_other_widths_and_vocabularies() {
        let wide = serde_json::json!({"target_hidden_size": 128});
        let err = check_eagle3(&eagle3(wide), &target(4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "EAGLE head does not fit the target: target_hidden_size is 128 in the head but 64 in the target"
        );
        let vocab = serde_json::json!({"vocab_size": 301});
        let err = check_eagle3(&eagle3(vocab), &target(4)).unwrap_err();
        assert!(matches!(
            err,
            EagleError::Incompatible {
                field: "vocab_size",
                head: 301,
                target: 300
            }
        ));
    }
}
