//! Greedy outputs of the real SmolLM2-135M-Instruct equal Hugging Face transformers' (the
//! oracle in `testdata/oracle`), one prompt at a time and all prompts in one batch.
//!
//! The model is imported by `cargo xtask import-model` into `models/smollm2-135m-instruct`.
//! Without it the test fails, unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_engine::{
    ChatMessage, EngineConfig, FinishReason, Llm, Prompt, RequestOutput, SamplingParams, StopReason,
};
use aquila_testdata::{GreedyOracle, OraclePrompt, OraclePromptKind};

use crate::common::real_model_dir as model_dir;

/// Tokens generated per oracle prompt.
const ORACLE_TOKENS: usize = 32;
/// Positions from the first oracle margin below this are not compared (near-ties may flip).
const MIN_MARGIN: f64 = 0.01;

/// The prompt as the engine takes it: raw text, or the chat messages behind the rendered ChatML
/// text.
fn engine_prompt(oracle: &OraclePrompt) -> Prompt {
    match oracle.kind {
        OraclePromptKind::Raw => Prompt::Text(oracle.prompt_text.clone()),
        OraclePromptKind::Chat => Prompt::Chat(parse_chatml(&oracle.prompt_text)),
    }
}

/// The messages of a ChatML rendering that ends with the assistant generation prompt.
fn parse_chatml(text: &str) -> Vec<ChatMessage> {
    let body = text
        .strip_suffix("<|im_start|>assistant\n")
        .expect("chat prompts end with the generation prompt");
    body.split("<|im_end|>\n")
        .filter(|turn| !turn.is_empty())
        .map(|turn| {
            let turn = turn
                .strip_prefix("<|im_start|>")
                .expect("turns start with <|im_start|>");
            let (role, content) = turn.split_once('\n').expect("a role line");
            ChatMessage::new(role, content)
        })
        .collect()
}

fn assert_matches_oracle(output: &RequestOutput, expected: &OraclePrompt, how: &str) {
    assert_eq!(
        output.prompt_token_ids, expected.prompt_ids,
        "{how}: prompt of {:?}",
        expected.prompt_text
    );
    let n = expected.comparable_positions(MIN_MARGIN);
    assert_eq!(
        output.token_ids[..n],
        expected.greedy_ids[..n],
        "{how}: greedy continuation of {:?} (compared up to position {n})",
        expected.prompt_text
    );
}

#[test]
fn greedy_outputs_equal_the_transformers_oracle() {
    let Some(model) = model_dir() else { return };
    let oracle = GreedyOracle::load();
    let mut llm = Llm::new(EngineConfig::new(&model)).expect("engine on the real model");
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(ORACLE_TOKENS)
    };

    for expected in &oracle.prompts {
        let output = llm
            .generate(engine_prompt(expected), &params)
            .unwrap()
            .remove(0);
        assert_matches_oracle(&output, expected, "alone");
    }

    let prompts: Vec<Prompt> = oracle.prompts.iter().map(engine_prompt).collect();
    let outputs = llm.generate(prompts, &params).unwrap();
    for (output, expected) in outputs.iter().zip(&oracle.prompts) {
        assert_matches_oracle(output, expected, "batched");
        assert_eq!(output.token_ids.len(), ORACLE_TOKENS);
    }

    // Without ignore_eos, the first prompt stops at the EOS the oracle generates.
    let first = &oracle.prompts[0];
    let eos = first
        .greedy_ids
        .iter()
        .position(|&t| t == 2)
        .expect("the oracle emits EOS");
    assert!(eos < first.comparable_positions(MIN_MARGIN));
    let output = llm
        .generate(engine_prompt(first), &SamplingParams::greedy(ORACLE_TOKENS))
        .unwrap()
        .remove(0);
    assert_eq!(output.finish_reason, FinishReason::Stop);
    assert_eq!(output.stop_reason, Some(StopReason::Eos(2)));
    assert_eq!(output.token_ids, first.greedy_ids[..=eos]);
    assert!(
        !output.text.contains("<|im_end|>"),
        "special tokens are skipped in the text"
    );
}
