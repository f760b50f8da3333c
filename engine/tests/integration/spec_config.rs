//! Speculative configurations that cannot work are errors naming the problem.

use crate::common;

use aquila_engine::{EngineError, Llm, SpeculativeConfig};
use aquila_spec_decode::proposer::ReplayProposer;
use common::spec::{eagle1_head, eagle3_head};
use common::{config, tiny_model};

/// The field an engine built with `speculative` (and `proposer`, if any) names in its error.
fn config_error_field(
    speculative: Option<SpeculativeConfig>,
    proposer: Option<ReplayProposer>,
) -> &'static str {
    let model = tiny_model();
    let mut engine_config = config(model.path());
    engine_config.speculative = speculative;
    let built = match proposer {
        Some(proposer) => Llm::with_proposer(engine_config, Box::new(proposer)),
        None => Llm::new(engine_config),
    };
    match built {
        Err(EngineError::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn a_missing_draft_model_is_an_error_naming_its_directory() {
    let model = tiny_model();
    let missing = model.path().join("no-such-head");
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::eagle(&missing, 3));
    let err = Llm::new(engine_config).unwrap_err();
    assert!(matches!(err, EngineError::DraftModel { .. }), "{err}");
    assert!(err.to_string().contains("no-such-head"), "{err}");
}

#[test]
fn the_method_must_match_the_head() {
    let model = tiny_model();
    let eagle1 = eagle1_head(model.path());
    let eagle3 = eagle3_head(model.path());
    for speculative in [
        SpeculativeConfig::eagle3(eagle1.path(), 2),
        SpeculativeConfig::eagle(eagle3.path(), 2),
    ] {
        let mut engine_config = config(model.path());
        let method = speculative.method.name();
        engine_config.speculative = Some(speculative);
        let err = Llm::new(engine_config).unwrap_err();
        assert!(
            err.to_string().contains("speculative.method"),
            "{method}: {err}"
        );
    }
}

#[test]
fn a_custom_method_needs_a_proposer_of_its_depth_and_a_proposer_needs_the_custom_method() {
    let replay = |k| ReplayProposer::new(k, vec![vec![1, 2, 3]]);
    assert_eq!(
        config_error_field(Some(SpeculativeConfig::custom(2)), None),
        "speculative.method"
    );
    assert_eq!(
        config_error_field(Some(SpeculativeConfig::ngram(2)), Some(replay(2))),
        "speculative.method"
    );
    assert_eq!(
        config_error_field(Some(SpeculativeConfig::custom(3)), Some(replay(2))),
        "speculative.num_speculative_tokens"
    );
    assert_eq!(config_error_field(None, Some(replay(2))), "speculative");
}

#[test]
fn a_batch_size_limit_of_zero_is_a_config_error() {
    let mut speculative = SpeculativeConfig::ngram(2);
    speculative.disable_by_batch_size = Some(0);
    assert_eq!(
        config_error_field(Some(speculative), None),
        "speculative.disable_by_batch_size"
    );
}
