//! Speculative decoding with a perfect drafter (spec-decode's `ReplayProposer` replaying the
//! target's own greedy continuation): acceptance metrics, per-request counts, and truncation
//! by max_tokens and stop tokens inside an accepted run.

use crate::common;

use aquila_engine::{DraftLength, Llm, Prompt, RequestOutput, SamplingParams};
use aquila_metrics::{Family, SpecDecodeSummary};
use common::spec::{greedy_baseline, replaying_engine, run};
use common::{config, greedy, tiny_model};

const K: usize = 3;
/// Verifications per request after the prefill.
const VERIFIES: usize = 4;
/// Tokens that fill exactly `VERIFIES` fully accepted verifications after the prefill token.
const FULL: usize = 1 + VERIFIES * (K + 1);

/// The prompts and their plain greedy continuations, exactly `FULL` tokens each.
fn scripts(model: &std::path::Path) -> (Vec<Prompt>, Vec<RequestOutput>) {
    greedy_baseline(model, FULL)
}

/// An engine whose drafter replays `outputs` with `k` tokens every step.
fn replaying(model: &std::path::Path, outputs: &[RequestOutput], k: usize) -> Llm {
    replaying_engine(model, outputs, k, DraftLength::Fixed, |replay| replay)
}

/// Checks that per-request counts sum to the snapshot's counters.
fn assert_counts_match_snapshot(llm: &Llm, outputs: &[RequestOutput]) -> SpecDecodeSummary {
    let summary = SpecDecodeSummary::from_snapshot(&llm.get_metrics(), llm.metrics_namespace());
    let sum = |f: fn(&RequestOutput) -> usize| outputs.iter().map(f).sum::<usize>() as u64;
    assert_eq!(summary.drafts, sum(|o| o.metrics.num_drafts));
    assert_eq!(summary.draft_tokens, sum(|o| o.metrics.num_draft_tokens));
    assert_eq!(
        summary.accepted_tokens,
        sum(|o| o.metrics.num_accepted_tokens)
    );
    summary
}

#[test]
fn a_perfect_drafter_reaches_acceptance_length_k_plus_one() {
    let model = tiny_model();
    let (prompts, baseline) = scripts(model.path());
    let mut llm = replaying(model.path(), &baseline, K);
    let outputs = run(&mut llm, &prompts, &vec![greedy(FULL); prompts.len()]);
    for (out, base) in outputs.iter().zip(&baseline) {
        assert_eq!(out.token_ids, base.token_ids);
        assert_eq!(out.metrics.num_drafts, VERIFIES);
        assert_eq!(out.metrics.num_draft_tokens, VERIFIES * K);
        assert_eq!(out.metrics.num_accepted_tokens, VERIFIES * K);
    }
    let summary = assert_counts_match_snapshot(&llm, &outputs);
    assert_eq!(summary.mean_acceptance_length(), (K + 1) as f64);
    assert_eq!(summary.per_position_acceptance_rates(), vec![1.0; K]);
    // Every step times its forward pass and the drafter's call after it.
    let snapshot = llm.get_metrics();
    let histogram = |family: Family| {
        snapshot
            .histogram_total(&family.name(llm.metrics_namespace()))
            .unwrap()
            .unwrap_or_else(|| panic!("{family:?} is recorded"))
    };
    let steps = histogram(Family::IterationTokens).count;
    let (forward, drafting) = (
        histogram(Family::ModelForwardTime),
        histogram(Family::SpecDecodeDraftTime),
    );
    assert!(steps as usize > VERIFIES, "a prefill and the verifications");
    assert_eq!((forward.count, drafting.count), (steps, steps));
    assert!(forward.sum > 0.0 && drafting.sum > 0.0);
}

#[test]
fn max_tokens_inside_an_accepted_run_truncates_and_counts_emitted_tokens() {
    let model = tiny_model();
    let (prompts, baseline) = scripts(model.path());
    let mut llm = replaying(model.path(), &baseline, K);
    // The last verification accepts all K drafts, but only K - 1 of them fit.
    let max_tokens = FULL - 2;
    let outputs = run(&mut llm, &prompts, &vec![greedy(max_tokens); prompts.len()]);
    for (out, base) in outputs.iter().zip(&baseline) {
        assert_eq!(out.token_ids, base.token_ids[..max_tokens]);
        assert_eq!(out.metrics.num_drafts, VERIFIES);
        assert_eq!(out.metrics.num_draft_tokens, VERIFIES * K);
        assert_eq!(out.metrics.num_accepted_tokens, VERIFIES * K - 1);
    }
    assert_counts_match_snapshot(&llm, &outputs);
}

#[test]
fn a_stop_token_inside_an_accepted_run_truncates_and_counts_emitted_tokens() {
    let model = tiny_model();
    let (prompts, baseline) = scripts(model.path());
    // Per request: the first output index p >= 2 holding a token new to the output and lying on
    // a draft position (not a bonus one) of its verification with k drafts per step. The tiny
    // model's greedy text repeats, so pick a k for which some request has one; the others run
    // to FULL.
    let candidates = |k: usize| -> Vec<Option<(usize, u32)>> {
        baseline
            .iter()
            .map(|base| {
                let ids = &base.token_ids;
                (2..ids.len())
                    .find(|&p| (p - 1) % (k + 1) != k && !ids[..p].contains(&ids[p]))
                    .map(|p| (p, ids[p]))
            })
            .collect()
    };
    let (k, stops) = (1..=5)
        .map(|k| (k, candidates(k)))
        .find(|(_, stops)| stops.iter().any(Option::is_some))
        .expect("some request's output changes token on a draft position");
    let params: Vec<SamplingParams> = stops
        .iter()
        .map(|stop| SamplingParams {
            stop_token_ids: stop.iter().map(|&(_, token)| token).collect(),
            ..greedy(FULL)
        })
        .collect();
    let mut plain = Llm::new(config(model.path())).unwrap();
    let plain_outputs = run(&mut plain, &prompts, &params);
    let mut llm = replaying(model.path(), &baseline, k);
    let outputs = run(&mut llm, &prompts, &params);
    for ((out, plain_out), stop) in outputs.iter().zip(&plain_outputs).zip(&stops) {
        assert_eq!(out.token_ids, plain_out.token_ids);
        assert_eq!(out.finish_reason, plain_out.finish_reason);
        let Some((p, _)) = *stop else {
            continue;
        };
        assert_eq!(out.token_ids.len(), p + 1);
        // Verifications cover output indices 1.., k + 1 each; the last one ends at p.
        let verifies = p.div_ceil(k + 1);
        let emitted_in_last = p - (1 + (verifies - 1) * (k + 1)) + 1;
        assert!(emitted_in_last <= k, "p lies on a draft position");
        assert_eq!(out.metrics.num_drafts, verifies);
        assert_eq!(
            out.metrics.num_accepted_tokens,
            (verifies - 1) * k + emitted_in_last
        );
    }
    assert_counts_match_snapshot(&llm, &outputs);
}
