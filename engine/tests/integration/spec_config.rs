//! Speculative configurations that cannot work are errors naming the problem.

use crate::common;

use aquila_engine::{EngineError, Llm, SpeculativeMethod};
use common::spec::{eagle1_head, eagle3_head, speculative};
use common::{config, tiny_model};

#[test]
fn a_missing_draft_model_is_an_error_naming_its_directory() {
    let model = tiny_model();
    let missing = model.path().join("no-such-head");
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(speculative(SpeculativeMethod::Eagle, Some(&missing), 3));
    let err = Llm::new(engine_config).unwrap_err();
    assert!(matches!(err, EngineError::DraftModel { .. }), "{err}");
    assert!(err.to_string().contains("no-such-head"), "{err}");
}

#[test]
fn the_method_must_match_the_head() {
    let model = tiny_model();
    let eagle1 = eagle1_head(model.path());
    let eagle3 = eagle3_head(model.path());
    for (method, head) in [
        (SpeculativeMethod::Eagle3, eagle1.path()),
        (SpeculativeMethod::Eagle, eagle3.path()),
    ] {
        let mut engine_config = config(model.path());
        engine_config.speculative = Some(speculative(method, Some(head), 2));
        let err = Llm::new(engine_config).unwrap_err();
        assert!(
            err.to_string().contains("speculative.method"),
            "{method}: {err}"
        );
    }
}

#[test]
fn an_eagle_method_without_a_draft_model_is_a_config_error() {
    let model = tiny_model();
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(speculative(SpeculativeMethod::Eagle, None, 2));
    assert!(matches!(
        Llm::new(engine_config).unwrap_err(),
        EngineError::Config {
            field: "speculative.draft_model",
            ..
        }
    ));
}

#[test]
fn a_batch_size_limit_of_zero_is_a_config_error() {
    let model = tiny_model();
    let eagle1 = eagle1_head(model.path());
    let mut engine_config = config(model.path());
    let mut settings = speculative(SpeculativeMethod::Eagle, Some(eagle1.path()), 2);
    settings.disable_by_batch_size = Some(0);
    engine_config.speculative = Some(settings);
    assert!(matches!(
        Llm::new(engine_config).unwrap_err(),
        EngineError::Config {
            field: "speculative.disable_by_batch_size",
            ..
        }
    ));
}
