//! Tree verification in the engine: drafts shaped as trees (spec-decode's `ReplayProposer` with
//! decoy siblings before every script token) are fed with their tree mask and positions,
//! verified node by node, and only the accepted root-to-node path stays in the KV cache.

use crate::common;

use aquila_engine::{DraftLength, Llm, RequestOutput, SamplingParams};
use aquila_metrics::SpecDecodeSummary;
use common::spec::{greedy_baseline, replaying_engine, run};
use common::{config, greedy, tiny_model};

const K: usize = 3;
/// Wrong siblings before the script's token at every depth.
const DECOYS: usize = 2;
/// Verifications per request after the prefill.
const VERIFIES: usize = 4;
/// Tokens that fill exactly `VERIFIES` fully accepted verifications after the prefill token.
const FULL: usize = 1 + VERIFIES * (K + 1);

/// An engine whose drafter replays `outputs` as trees of depth `K` with decoys, every step.
fn tree_replaying(
    model: &std::path::Path,
    outputs: &[RequestOutput],
    wrong_token_at: Option<(usize, u32)>,
) -> Llm {
    let vocab_size = Llm::new(config(model)).unwrap().vocab_size() as u32;
    replaying_engine(model, outputs, K, DraftLength::Fixed, |replay| {
        let replay = replay.with_tree_decoys(DECOYS, vocab_size);
        match wrong_token_at {
            Some((position, token)) => replay.with_wrong_token_at(position, token),
            None => replay,
        }
    })
}

fn summary(llm: &Llm) -> SpecDecodeSummary {
    SpecDecodeSummary::from_snapshot(&llm.get_metrics(), llm.metrics_namespace())
}

#[test]
fn script_tokens_found_behind_decoys_are_all_accepted_and_the_output_is_greedy() {
    let model = tiny_model();
    let (prompts, plain) = greedy_baseline(model.path(), FULL);
    let mut llm = tree_replaying(model.path(), &plain, None);
    let outputs = run(&mut llm, &prompts, &vec![greedy(FULL); prompts.len()]);
    for (out, base) in outputs.iter().zip(&plain) {
        assert_eq!(out.token_ids, base.token_ids, "lossless");
        assert_eq!(out.metrics.num_drafts, VERIFIES);
        assert_eq!(
            out.metrics.num_draft_tokens,
            VERIFIES * K * (DECOYS + 1),
            "every tree node is a draft token"
        );
        assert_eq!(out.metrics.num_accepted_tokens, VERIFIES * K);
    }
    let summary = summary(&llm);
    assert_eq!(summary.mean_acceptance_length(), (K + 1) as f64);
    assert_eq!(
        summary.per_position_acceptance_rates(),
        vec![1.0; K],
        "positions are tree depths"
    );
}

#[test]
fn a_wrong_depth_stops_acceptance_there_without_changing_the_output() {
    let model = tiny_model();
    let max_tokens = 24;
    let (prompts, plain) = greedy_baseline(model.path(), max_tokens);
    // At depth 2 the script token is replaced; its decoys are then wrong.token + 1, + 2, which
    // may hit the script's token by chance, so acceptance is at least 1 and below K.
    let mut llm = tree_replaying(model.path(), &plain, Some((1, 0)));
    let outputs = run(&mut llm, &prompts, &vec![greedy(max_tokens); prompts.len()]);
    for (out, base) in outputs.iter().zip(&plain) {
        assert_eq!(out.token_ids, base.token_ids, "lossless");
        assert!(out.metrics.num_accepted_tokens >= out.metrics.num_drafts);
        assert!(out.metrics.num_accepted_tokens < out.metrics.num_drafts * K);
    }
    let summary = summary(&llm);
    assert_eq!(summary.per_position_acceptance_rates()[0], 1.0);
    assert!(summary.per_position_acceptance_rates()[2] < 1.0);
}

#[test]
fn sampled_requests_verify_trees_and_stay_reproducible_per_seed() {
    let model = tiny_model();
    let (prompts, plain) = greedy_baseline(model.path(), FULL);
    let params: Vec<SamplingParams> = (0..prompts.len() as u64)
        .map(|seed| SamplingParams {
            temperature: 0.3,
            seed: Some(seed),
            ..greedy(FULL)
        })
        .collect();
    let sample = || {
        let mut llm = tree_replaying(model.path(), &plain, None);
        run(&mut llm, &prompts, &params)
            .into_iter()
            .map(|o| (o.token_ids, o.metrics.num_drafts))
            .collect::<Vec<_>>()
    };
    let first = sample();
    assert_eq!(first, sample(), "same seeds, same tokens");
    for (tokens, _) in &first {
        assert_eq!(tokens.len(), FULL);
    }
    assert!(
        first.iter().any(|(_, drafts)| *drafts > 0),
        "sampled requests verify tree drafts too"
    );
}
