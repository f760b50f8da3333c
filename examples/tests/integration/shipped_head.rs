//! The shipped EAGLE-3 and EAGLE-1 heads: each loads against the real SmolLM2 target, drafts
//! tokens the target accepts on prompts it was not trained on, and leaves greedy output exactly
//! as without it.
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`, which CI runs first).

use aquila_engine::{EngineConfig, Llm, SamplingParams, SpeculativeConfig};
use aquila_examples::heads::{shipped_eagle3_head_dir, shipped_head_dir};
use aquila_examples::prompts::builtin_chat_prompts;
use std::path::PathBuf;

#[test]
fn shipped_eagle3_head_is_accepted_and_lossless() {
    check_shipped_head(
        |dir| SpeculativeConfig::eagle3(dir, 3),
        shipped_eagle3_head_dir(),
    );
}

#[test]
fn shipped_eagle1_head_is_accepted_and_lossless() {
    check_shipped_head(|dir| SpeculativeConfig::eagle(dir, 3), shipped_head_dir());
}

/// Runs the head in `dir`, configured by `speculative`, on three unseen prompts against the
/// plain engine.
fn check_shipped_head(speculative: fn(PathBuf) -> SpeculativeConfig, dir: PathBuf) {
    let Some(model) = aquila_testdata::real_model_dir() else {
        return;
    };
    let prompts = builtin_chat_prompts(3);
    let params = SamplingParams::greedy(24);

    let mut config = EngineConfig::new(&model);
    let speculative = speculative(dir);
    let method = speculative.method.name();
    config.speculative = Some(speculative);
    let mut llm = Llm::new(config).expect("the shipped head loads against SmolLM2");
    let outputs = llm.generate(prompts.clone(), &params).expect("generation");

    let mut baseline = Llm::new(EngineConfig::new(&model)).expect("engine");
    let expected = baseline.generate(prompts, &params).expect("generation");
    for (spec, base) in outputs.iter().zip(&expected) {
        assert_eq!(
            spec.token_ids, base.token_ids,
            "{method}: speculation changed the output"
        );
    }
    let drafts: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
    let accepted: usize = outputs.iter().map(|o| o.metrics.num_accepted_tokens).sum();
    assert!(drafts > 0);
    // An untrained head accepts almost nothing; the trained one accepts a real share.
    assert!(
        accepted * 20 > drafts,
        "{method}: {accepted} of {drafts} draft tokens accepted"
    );
}
