//! Acceptance: SmolLM2-135M-Instruct in burn (f32, CPU) reproduces the Hugging Face oracle.
//!
//! Teacher-forced over prompt + oracle continuation, the model's argmax must equal the oracle's
//! greedy token at all 32 positions of all 6 prompts, and the oracle's top-5 logits must agree
//! within 1e-3. Checked twice: one batched forward of all prompts (every row's logits), and a
//! batched prefill followed by 32 single-token decode steps through the KV cache.
//!
//! Needs `models/smollm2-135m-instruct` (made by
//! `cargo run -p aquila-examples --bin import-model`) and the oracle in
//! `<workspace>/../shared/oracle` (or `AQUILA_ORACLE_DIR`). Without the model the test fails,
//! unless `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_model_loader::gguf::smollm2;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::backend::Flex;
use serde_json::Value;
use std::path::{Path, PathBuf};

type B = Flex;

const IMPORT_HINT: &str = "import it with `cargo run -p aquila-examples --bin import-model` \
     (or set AQUILA_SKIP_REAL_MODEL=1 to skip tests on the real model)";
const LOGIT_TOLERANCE: f32 = 1e-3;

/// One oracle prompt: its ids, the greedy continuation and the top-5 ids/logits per step.
struct OracleCase {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    top5: Vec<(Vec<u32>, Vec<f32>)>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The model directory and the oracle cases, or `None` when the real model is skipped.
fn setup() -> Option<(PathBuf, Vec<OracleCase>)> {
    if std::env::var("AQUILA_SKIP_REAL_MODEL").as_deref() == Ok("1") {
        eprintln!("AQUILA_SKIP_REAL_MODEL=1: skipping the SmolLM2 parity test");
        return None;
    }
    let model = workspace_root().join(smollm2::MODEL_DIR);
    assert!(
        model.join("config.json").is_file() && model.join("model.safetensors").is_file(),
        "{} is missing or incomplete; {IMPORT_HINT}",
        model.display()
    );
    let oracle = std::env::var_os("AQUILA_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared/oracle"));
    let path = oracle.join("smollm2-135m-instruct-greedy.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} (set AQUILA_ORACLE_DIR): {e}", path.display()));
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let cases = json["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| OracleCase {
            prompt: ids(&p["prompt_ids"]),
            greedy: ids(&p["greedy_ids"]),
            top5: p["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let logits = s["top5_logits"].as_array().unwrap();
                    (
                        ids(&s["top5_ids"]),
                        logits.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
                    )
                })
                .collect(),
        })
        .collect::<Vec<_>>();
    assert_eq!(cases.len(), 6, "the oracle has 6 prompts");
    Some((model, cases))
}

/// Checks one row of logits against oracle step `step` of `case`; returns the largest
/// difference among the oracle's top-5 logits.
fn check_row(label: &str, case: &OracleCase, step: usize, row: &[f32]) -> f32 {
    let argmax = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap();
    assert_eq!(
        argmax, case.greedy[step],
        "{label} step {step}: argmax differs from the oracle"
    );
    let (ids, logits) = &case.top5[step];
    let mut worst = 0.0f32;
    for (&id, &want) in ids.iter().zip(logits) {
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
    let steps = cases[0].greedy.len();

    // All prompts in one forward; logits for the rows that predict the continuation.
    let mut cache = model.new_kv_cache(cases.len());
    let sequences: Vec<SequenceInput> = cases
        .iter()
        .enumerate()
        .map(|(slot, case)| {
            let mut tokens = case.prompt.clone();
            tokens.extend(&case.greedy[..steps - 1]);
            let first = case.prompt.len() - 1;
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
        .map(|(slot, case)| SequenceInput::new(slot, case.prompt.clone(), 0))
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
            .map(|(slot, case)| SequenceInput::new(slot, vec![case.greedy[step]], cache.len(slot)))
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
