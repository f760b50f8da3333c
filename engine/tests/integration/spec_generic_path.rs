//! The generic burn path (what CUDA runs; `Device::CpuGeneric` on the CPU) is lossless too:
//! SmolLM2-135M-Instruct with an EAGLE-1 head of random weights, greedy speculative output
//! equal to greedy plain output, both through burn's generic operations, batched and one
//! request at a time.
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use crate::common;

use aquila_engine::{Device, EngineConfig, Llm, SpeculativeConfig};
use common::real_model_dir;
use common::spec::{eagle1_head, prompt_ids, run, run_single};

const MAX_TOKENS: usize = 12;
const PROMPTS: [&str; 2] = [
    "The capital of France is",
    "Write a short poem about the sea:",
];

fn generic_config(model: &std::path::Path) -> EngineConfig {
    let mut config = EngineConfig::new(model);
    config.device = Device::CpuGeneric;
    config.max_num_seqs = 2;
    config.max_num_batched_tokens = 256;
    config.max_model_len = Some(256);
    config
}

#[test]
fn generic_path_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    let head = eagle1_head(&model);
    let greedy = common::greedy(MAX_TOKENS);
    let mut plain = Llm::new(generic_config(&model)).expect("SmolLM2 engine, generic path");
    let prompts = prompt_ids(&plain, &PROMPTS);
    let params = vec![greedy.clone(); prompts.len()];
    let baseline: Vec<Vec<u32>> = run(&mut plain, &prompts, &params)
        .into_iter()
        .map(|o| o.token_ids)
        .collect();
    drop(plain);

    let mut config = generic_config(&model);
    config.speculative = Some(SpeculativeConfig::eagle(head.path(), 3));
    let mut llm = Llm::new(config).expect("speculative SmolLM2 engine, generic path");
    let outputs = run(&mut llm, &prompts, &params);
    let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
    assert!(drafted > 0, "no draft token was verified");
    let batched: Vec<Vec<u32>> = outputs.into_iter().map(|o| o.token_ids).collect();
    assert_eq!(batched, baseline, "batched");
    assert_eq!(
        run_single(&mut llm, &prompts, &greedy),
        baseline,
        "one at a time"
    );
}
