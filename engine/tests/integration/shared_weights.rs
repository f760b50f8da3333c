//! Engines that share one loaded copy of the weights (`Llm::sharing_weights_with`).

use crate::common;

use aquila_engine::{EngineError, Llm, SpeculativeConfig, WeightFormat};
use aquila_metrics::{Family, Namespace};
use common::{config, greedy, llm, tiny_model, token_ids, PROMPTS};

#[test]
fn an_engine_on_shared_weights_generates_what_a_fresh_one_does() {
    let model = tiny_model();
    let mut first = llm(model.path());
    let mut speculative_config = config(model.path());
    speculative_config.speculative = Some(SpeculativeConfig::ngram(3));
    speculative_config.max_num_seqs = 2;
    let mut sharing = Llm::sharing_weights_with(&first, speculative_config.clone()).unwrap();
    let mut fresh = Llm::new(speculative_config).unwrap();

    let params = greedy(12);
    let expected = token_ids(&first.generate(PROMPTS.to_vec(), &params).unwrap());
    assert_eq!(
        token_ids(&sharing.generate(PROMPTS.to_vec(), &params).unwrap()),
        expected
    );
    assert_eq!(
        token_ids(&fresh.generate(PROMPTS.to_vec(), &params).unwrap()),
        expected
    );
    // Each engine keeps its own requests, caches and metrics.
    let drafts = |llm: &Llm| {
        let name = Family::SpecDecodeNumDrafts.name(Namespace::Aquila);
        llm.get_metrics().counter_total(&name).unwrap_or(0)
    };
    assert_eq!(drafts(&first), 0, "the plain engine never drafted");
    assert!(drafts(&sharing) > 0);
}

#[test]
fn sharing_needs_the_same_model_and_weight_format() {
    let model = tiny_model();
    let first = llm(model.path());
    let mut other_format = config(model.path());
    other_format.weights = WeightFormat::Q8_0;
    let error = Llm::sharing_weights_with(&first, other_format).unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Config {
                field: "weights",
                ..
            }
        ),
        "{error}"
    );
    let other_model = tiny_model();
    let error = Llm::sharing_weights_with(&first, config(other_model.path())).unwrap_err();
    assert!(
        matches!(error, EngineError::Config { field: "model", .. }),
        "{error}"
    );
    assert!(error.to_string().contains("shared"), "{error}");
}
