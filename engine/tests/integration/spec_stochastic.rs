//! Seeded stochastic speculative decoding keeps the target distribution: over many seeds, the
//! first emitted token and the token emitted by verifying a draft after it follow the tiny
//! model's softmax (Pearson chi-square against probabilities computed from its logits).

use crate::common;

use aquila_engine::{DraftLength, Llm, Prompt, SamplingParams, SpeculativeConfig};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use aquila_spec_decode::proposer::ReplayProposer;
use burn::backend::flex::FlexDevice;
use burn::backend::Flex;
use common::spec::prompt_ids;
use common::{config, tiny_model, PROMPTS};

const SAMPLES: u64 = 3000;

/// Softmax of each `vocab`-wide row of `logits`, in f64.
fn softmax_rows(logits: &[f32], vocab: usize) -> Vec<Vec<f64>> {
    logits
        .chunks(vocab)
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let exp: Vec<f64> = row.iter().map(|&x| (x as f64 - max).exp()).collect();
            let sum: f64 = exp.iter().sum();
            exp.into_iter().map(|e| e / sum).collect()
        })
        .collect()
}

/// The last row's logits of each sequence, each run from an empty cache.
fn last_logits(model: &LlamaModel<Flex>, sequences: &[Vec<u32>]) -> Vec<f32> {
    let mut cache = model.new_kv_cache(sequences.len());
    let batch = ForwardBatch::new(
        sequences
            .iter()
            .enumerate()
            .map(|(slot, tokens)| SequenceInput::new(slot, tokens.clone(), 0))
            .collect(),
    );
    let out = model
        .forward(&batch, &mut cache, &FeatureTap::None)
        .expect("forward");
    out.logits
        .into_data()
        .into_vec::<f32>()
        .expect("f32 logits")
}

/// Upper `1e-4` quantile of the chi-square distribution with `df` degrees of freedom
/// (Wilson–Hilferty approximation).
fn chi_square_critical(df: usize) -> f64 {
    let df = df as f64;
    let z = 3.719;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

#[test]
fn stochastic_speculative_output_has_the_target_distribution() {
    let model_dir = tiny_model();
    let model = LlamaModel::<Flex>::load(model_dir.path(), &FlexDevice).expect("tiny model");
    let vocab = model.config().vocab_size;

    let mut engine_config = config(model_dir.path());
    engine_config.max_num_seqs = 64;
    let probe = Llm::new(engine_config.clone()).unwrap();
    let prompt = match prompt_ids(&probe, &PROMPTS[..1]).remove(0) {
        Prompt::TokenIds(ids) => ids,
        _ => unreachable!("token id prompt"),
    };
    drop(probe);

    // p(first), and for every first token v: p(second | v) and the draft replayed after v
    // (its most likely token, so drafts are accepted sometimes and rejected sometimes).
    let first = softmax_rows(&last_logits(&model, std::slice::from_ref(&prompt)), vocab).remove(0);
    let continued: Vec<Vec<u32>> = (0..vocab as u32)
        .map(|v| [prompt.clone(), vec![v]].concat())
        .collect();
    let second = softmax_rows(&last_logits(&model, &continued), vocab);
    let scripts: Vec<Vec<u32>> = continued
        .iter()
        .zip(&second)
        .map(|(tokens, p)| {
            let draft = (0..vocab).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap() as u32;
            [tokens.clone(), vec![draft]].concat()
        })
        .collect();

    engine_config.speculative = Some(SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::custom(1)
    });
    let mut llm =
        Llm::with_proposer(engine_config, Box::new(ReplayProposer::new(1, scripts))).unwrap();
    let params: Vec<SamplingParams> = (0..SAMPLES)
        .map(|seed| SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ignore_eos: true,
            ..SamplingParams::greedy(2)
        })
        .collect();
    let prompts = vec![Prompt::TokenIds(prompt.clone()); SAMPLES as usize];
    let outputs = llm.generate_with_params(prompts, &params).unwrap();

    let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
    let accepted: usize = outputs.iter().map(|o| o.metrics.num_accepted_tokens).sum();
    assert_eq!(
        drafted, SAMPLES as usize,
        "every second token verifies one draft"
    );
    assert!(
        accepted > 0 && accepted < drafted,
        "accepted {accepted} of {drafted}"
    );

    // Pearson chi-square over the (first, second) pairs; bins expecting fewer than 5 samples
    // are pooled into one.
    let mut counts = std::collections::HashMap::<(u32, u32), u64>::new();
    for out in &outputs {
        assert_eq!(out.token_ids.len(), 2);
        *counts
            .entry((out.token_ids[0], out.token_ids[1]))
            .or_default() += 1;
    }
    let n = SAMPLES as f64;
    let (mut statistic, mut bins) = (0.0, 0usize);
    let (mut pooled_expected, mut pooled_observed) = (0.0, 0u64);
    for (v, (p_first, p_second)) in first.iter().zip(&second).enumerate() {
        for (t, p) in p_second.iter().enumerate() {
            let expected = n * p_first * p;
            let observed = counts.get(&(v as u32, t as u32)).copied().unwrap_or(0);
            if expected >= 5.0 {
                statistic += (observed as f64 - expected).powi(2) / expected;
                bins += 1;
            } else {
                pooled_expected += expected;
                pooled_observed += observed;
            }
        }
    }
    if pooled_expected > 0.0 {
        statistic += (pooled_observed as f64 - pooled_expected).powi(2) / pooled_expected;
        bins += 1;
    }
    assert!(bins >= 10, "too few bins ({bins}) for a meaningful test");
    let critical = chi_square_critical(bins - 1);
    assert!(
        statistic < critical,
        "chi-square {statistic:.1} over {bins} bins exceeds {critical:.1}"
    );
}
