//! Lossless speculative decoding on the real model: SmolLM2-135M-Instruct with an EAGLE-1 head
//! of random weights, greedy speculative output equal to greedy plain output for k in {1, 3, 5},
//! batched and one request at a time.
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use crate::common;

use aquila_engine::{EngineConfig, Llm, SpeculativeConfig};
use common::real_model_dir;
use common::spec::{eagle1_head, prompt_ids, run, run_single};

const MAX_TOKENS: usize = 16;
const PROMPTS: [&str; 2] = [
    "The capital of France is",
    "Write a short poem about the sea:",
];

fn engine_config(model: &std::path::Path) -> EngineConfig {
    let mut config = EngineConfig::new(model);
    config.max_num_seqs = 2;
    config.max_num_batched_tokens = 256;
    config.max_model_len = Some(256);
    config
}

#[test]
fn smollm2_greedy_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    let head = eagle1_head(&model);
    let greedy = common::greedy(MAX_TOKENS);
    let mut plain = Llm::new(engine_config(&model)).expect("SmolLM2 engine");
    let prompts = prompt_ids(&plain, &PROMPTS);
    let params = vec![greedy.clone(); prompts.len()];
    let baseline: Vec<Vec<u32>> = run(&mut plain, &prompts, &params)
        .into_iter()
        .map(|o| o.token_ids)
        .collect();
    drop(plain);
    for k in [1, 3, 5] {
        let mut config = engine_config(&model);
        config.speculative = Some(SpeculativeConfig::eagle(head.path(), k));
        let mut llm = Llm::new(config).expect("speculative SmolLM2 engine");
        let outputs = run(&mut llm, &prompts, &params);
        let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
        assert!(drafted > 0, "k = {k}: no draft token was verified");
        let batched: Vec<Vec<u32>> = outputs.into_iter().map(|o| o.token_ids).collect();
        assert_eq!(batched, baseline, "batched, k = {k}");
        assert_eq!(
            run_single(&mut llm, &prompts, &greedy),
            baseline,
            "one at a time, k = {k}"
        );
    }
}
