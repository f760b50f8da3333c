//! Engines run step by step in turn give each engine the outputs it gives on its own, in prompt
//! order, and time only its own steps.

use aquila_engine::{EngineConfig, Llm, SpeculativeConfig};
use aquila_examples::interleaved::run_interleaved;
use std::time::{Duration, Instant};

use crate::tiny::{fixed_ngram, greedy_to_the_limit, prompts, tiny_model};

#[test]
fn interleaved_engines_give_their_own_outputs_in_prompt_order() {
    let model = tiny_model();
    let engine = |speculative: Option<SpeculativeConfig>, max_num_seqs: usize| {
        let mut config = EngineConfig::new(model.path());
        config.speculative = speculative;
        config.max_num_seqs = max_num_seqs;
        Llm::new(config).expect("engine")
    };
    // Plain and speculative engines, and prompts of different lengths, so that the engines
    // finish after different numbers of steps.
    let mut plain = engine(None, 2);
    let mut speculative = engine(Some(fixed_ngram(3)), 3);
    let prompts = prompts(&["abab abab abab abab", "hello", "1212121212", "x y z"]);
    let params = greedy_to_the_limit(24);
    let alone = plain.generate(prompts.clone(), &params).expect("plain run");

    let start = Instant::now();
    let runs = run_interleaved(&mut [&mut speculative, &mut plain], &prompts, &params)
        .expect("interleaved run");
    let wall = start.elapsed();

    assert_eq!(runs.len(), 2);
    for run in &runs {
        let tokens: Vec<&Vec<u32>> = run.outputs.iter().map(|o| &o.token_ids).collect();
        let expected: Vec<&Vec<u32>> = alone.iter().map(|o| &o.token_ids).collect();
        assert_eq!(tokens, expected, "greedy outputs in prompt order");
        assert!(run.outputs.iter().all(|o| o.token_ids.len() == 24));
    }
    let prompt_lengths: Vec<usize> = runs[1]
        .outputs
        .iter()
        .map(|o| o.prompt_token_ids.len())
        .collect();
    let alone_lengths: Vec<usize> = alone.iter().map(|o| o.prompt_token_ids.len()).collect();
    assert_eq!(prompt_lengths, alone_lengths);
    let busy = runs[0].busy + runs[1].busy;
    assert!(
        runs.iter().all(|run| run.busy > Duration::ZERO) && busy <= wall,
        "each engine is timed over its own steps only: {:?} + {:?} within {wall:?}",
        runs[0].busy,
        runs[1].busy
    );
}
