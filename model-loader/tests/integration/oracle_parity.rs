//! Acceptance: SmolLM2-135M-Instruct in burn (f32, CPU) reproduces the Hugging Face oracle.
//!
//! Teacher-forced over prompt + oracle continuation, the model's argmax must equal the oracle's
//! greedy token at all 32 positions of all 6 prompts, and the oracle's top-5 logits must agree
//! within 1e-3. Checked twice: one batched forward of all prompts (every row's logits), and a
//! batched prefill followed by 32 single-token decode steps through the KV cache.
//!
//! Needs `models/smollm2-135m-instruct` (made by `cargo xtask import-model`); the oracle is in
//! `testdata/oracle`. Without the model the test fails, unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use aquila_testdata::{GreedyOracle, OraclePrompt};
use burn::backend::Flex;
use std::path::PathBuf;

type B = Flex;

const LOGIT_TOLERANCE: f32 = 1e-3;

/// The model directory and the oracle prompts, or `None` when the real model is skipped.
fn setup() -> Option<(PathBuf, Vec<OraclePrompt>)> {
    let model = aquila_testdata::real_model_dir()?;
    let cases = GreedyOracle::load().prompts;
    assert_eq!(cases.len(), 6, "the oracle has 6 prompts");
    Some((model, cases))
}

/// Checks one row of logits against oracle step `step` of `case`; returns the largest
/// difference among the oracle's top-5 logits.
fn check_row(label: &str, case: &OraclePrompt, step: usize, row: &[f32]) -> f32 {
    let argmax = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap();
    assert_eq!(
        argmax, case.greedy_ids[step],
        "{label} step {step}: argmax differs from the oracle"
    );
    let expected = &case.steps[step];
    let mut worst = 0.0f32;
    for (&id, &want) in expected.top5_ids.iter().zip(&expected.top5_logits) {
        let got = row[id as usize];
        assert!(
            (got - want).abs() <= LOGIT_TOLERANCE,
            "{label} step {step}: logit of token {id} is {got}, oracle {want}"
        );
        worst = worst.max((got - want).abs());
    }
    worst
}

#[test]
fn teacher_forced_logits_match_the_oracle() {
    let Some((dir, cases)) = setup() else {
        return;
    };
    let device = Default::default();
    let model = LlamaModel::<B>::load(&dir, &device).unwrap();
    let vocab = model.config().vocab_size;
    let steps = cases[0].greedy_ids.len();

    // All prompts in one forward; logits for the rows that predict the continuation.
    let mut cache = model.new_kv_cache(cases.len());
    let sequences: Vec<SequenceInput> = cases
        .iter()
        .enumerate()
        .map(|(slot, case)| {
            let mut tokens = case.prompt_ids.clone();
            tokens.extend(&case.greedy_ids[..steps - 1]);
            let first = case.prompt_ids.len() - 1;
            SequenceInput::new(slot, tokens, 0).with_logits_rows((first..first + steps).collect())
        })
        .collect();
    let out = model
        .forward(&ForwardBatch::new(sequences), &mut cache, &FeatureTap::None)
        .unwrap();
    let logits: Vec<f32> = out.logits.into_data().to_vec().unwrap();
    let mut worst = 0.0f32;
    for (index, case) in cases.iter().enumerate() {
        for step in 0..steps {
            let row = (index * steps + step) * vocab;
            let label = format!("batched prompt {index}");
            worst = worst.max(check_row(&label, case, step, &logits[row..row + vocab]));
        }
    }
    eprintln!("batched forward: largest top-5 logit difference {worst:.2e}");

    // Prefill each prompt, then decode the continuation one token per step, all prompts batched.
    let mut cache = model.new_kv_cache(cases.len());
    let prefill: Vec<SequenceInput> = cases
        .iter()
        .enumerate()
        .map(|(slot, case)| SequenceInput::new(slot, case.prompt_ids.clone(), 0))
        .collect();
    let mut logits: Vec<f32> = model
        .forward(&ForwardBatch::new(prefill), &mut cache, &FeatureTap::None)
        .unwrap()
        .logits
        .into_data()
        .to_vec()
        .unwrap();
    let mut worst = 0.0f32;
    for step in 0..steps {
        for (index, case) in cases.iter().enumerate() {
            let row = index * vocab;
            let label = format!("decoded prompt {index}");
            worst = worst.max(check_row(&label, case, step, &logits[row..row + vocab]));
        }
        if step + 1 == steps {
            eprintln!("prefill + decode: largest top-5 logit difference {worst:.2e}");
            break;
        }
        let decode: Vec<SequenceInput> = cases
            .iter()
            .enumerate()
            .map(|(slot, case)| {
                SequenceInput::new(slot, vec![case.greedy_ids[step]], cache.len(slot))
            })
            .collect();
        logits = model
            .forward(&ForwardBatch::new(decode), &mut cache, &FeatureTap::None)
            .unwrap()
            .logits
            .into_data()
            .to_vec()
            .unwrap();
    }
}
