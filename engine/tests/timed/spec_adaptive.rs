//! The adaptive draft length in the engine: a drafter whose drafts are never accepted stops
//! drafting after a few steps and is only probed now and then; a perfect drafter drafts the
//! maximum; a drafter that knows when it is wrong has its chains cut there; chains and trees
//! stay lossless whatever the policy chooses. The policy's choices depend on the step costs it
//! measures, so each property of them must hold in one of three runs (lossless outputs in
//! every run).

use crate::common;
use crate::{ensure, holds_in_one_of_three_runs, one_at_a_time};

use aquila_engine::{
    DraftLength, DraftTreeConfig, EagleDrafter, Llm, Prompt, RequestOutput, SpeculativeConfig,
    SpeculativeMethod,
};
use aquila_spec_decode::proposer::ReplayProposer;
use common::spec::{eagle1_head, greedy_baseline, replaying_engine, run};
use common::{config, greedy, tiny_model, token_ids};

const K: usize = 3;
/// Output tokens per request: long enough for the policy to settle.
const MAX_TOKENS: usize = 96;

/// The prompts and their plain greedy continuations.
fn baseline(model: &std::path::Path) -> (Vec<Prompt>, Vec<RequestOutput>) {
    greedy_baseline(model, MAX_TOKENS)
}

/// An engine with `draft_length` whose drafter replays `outputs`'s sequences, adjusted by
/// `adjust`.
fn replaying(
    model: &std::path::Path,
    outputs: &[RequestOutput],
    draft_length: DraftLength,
    adjust: impl FnOnce(ReplayProposer) -> ReplayProposer,
) -> Llm {
    replaying_engine(model, outputs, K, draft_length, adjust)
}

/// A token no baseline output contains.
fn unused_token(outputs: &[RequestOutput], vocab_size: usize) -> u32 {
    (0..vocab_size as u32)
        .rev()
        .find(|t| outputs.iter().all(|o| !o.token_ids.contains(t)))
        .expect("the outputs use less than the whole vocabulary")
}

/// Fixed-k and adaptive runs whose replayed drafts hold a wrong token at chain position
/// `wrong_position` (further adjusted by `adjust`); both must equal the plain outputs.
fn fixed_and_adaptive(
    wrong_position: usize,
    adjust: impl Fn(ReplayProposer) -> ReplayProposer + Copy,
) -> (Vec<RequestOutput>, Vec<RequestOutput>) {
    let model = tiny_model();
    let (prompts, plain) = baseline(model.path());
    let vocab_size = Llm::new(config(model.path())).unwrap().vocab_size();
    let wrong = unused_token(&plain, vocab_size);
    let params = vec![greedy(MAX_TOKENS); prompts.len()];
    let drafter =
        |replay: ReplayProposer| adjust(replay.with_wrong_token_at(wrong_position, wrong));
    let [fixed, adaptive] = [DraftLength::Fixed, DraftLength::default()].map(|draft_length| {
        let mut llm = replaying(model.path(), &plain, draft_length, drafter);
        let outputs = run(&mut llm, &prompts, &params);
        assert_eq!(token_ids(&outputs), token_ids(&plain), "{draft_length:?}");
        outputs
    });
    (fixed, adaptive)
}

#[test]
fn drafts_that_are_never_accepted_stop_and_are_only_probed_rarely() {
    holds_in_one_of_three_runs(|| {
        let (fixed, adaptive) = fixed_and_adaptive(0, |replay| replay);
        for (adaptive, fixed) in adaptive.iter().zip(&fixed) {
            assert_eq!(adaptive.metrics.num_accepted_tokens, 0);
            assert_eq!(
                fixed.metrics.num_drafts,
                MAX_TOKENS - 1,
                "fixed drafts every step"
            );
            // The estimate of an optimistic start falls below any row's cost within about 15
            // failed verifications; after that only probes (every 64 steps at most) remain.
            let (drafts, tokens) = (
                adaptive.metrics.num_drafts,
                adaptive.metrics.num_draft_tokens,
            );
            ensure(drafts <= 20, || {
                format!("{drafts} drafts in {MAX_TOKENS} steps")
            })?;
            let fixed_tokens = fixed.metrics.num_draft_tokens;
            ensure(tokens * 3 <= fixed_tokens, || {
                format!("{tokens} draft tokens against {fixed_tokens} with a fixed length")
            })?;
        }
        Ok(())
    });
}

#[test]
fn a_perfect_drafter_drafts_the_maximum() {
    let model = tiny_model();
    let (prompts, plain) = baseline(model.path());
    holds_in_one_of_three_runs(|| {
        let mut llm = replaying(model.path(), &plain, DraftLength::default(), |r| r);
        let outputs = run(&mut llm, &prompts, &vec![greedy(MAX_TOKENS); prompts.len()]);
        assert_eq!(token_ids(&outputs), token_ids(&plain));
        for out in &outputs {
            let metrics = &out.metrics;
            assert_eq!(metrics.num_accepted_tokens, metrics.num_draft_tokens);
            ensure(
                metrics.num_draft_tokens * 10 >= metrics.num_drafts * K * 9,
                || {
                    format!(
                        "mean draft length {} of {K}",
                        metrics.num_draft_tokens as f64 / metrics.num_drafts as f64
                    )
                },
            )?;
        }
        Ok(())
    });
}

#[test]
fn confident_chains_end_before_the_tokens_that_do_not_pay() {
    let total = |outputs: &[RequestOutput], count: fn(&RequestOutput) -> usize| -> usize {
        outputs.iter().map(count).sum()
    };
    let drafted = |o: &RequestOutput| o.metrics.num_draft_tokens;
    let accepted = |o: &RequestOutput| o.metrics.num_accepted_tokens;
    let drafts = |o: &RequestOutput| o.metrics.num_drafts;
    holds_in_one_of_three_runs(|| {
        // The second draft token is always wrong, and the drafter says so.
        let (fixed, adaptive) = fixed_and_adaptive(1, |replay: ReplayProposer| {
            replay.with_confidences(0.95, 0.0)
        });
        // Fixed k verifies the wrong token every step; gated chains stop before it once the
        // engine has calibrated the confidences (32 outcomes), so hardly any verified draft
        // token is rejected, while most accepted ones stay (the goodput guard's explorations
        // of plain steps, timed, take some).
        let (fixed_drafted, fixed_accepted) = (total(&fixed, drafted), total(&fixed, accepted));
        assert!(
            fixed_drafted >= 2 * fixed_accepted && fixed_accepted >= total(&fixed, drafts) * 9 / 10,
            "{fixed_drafted} draft tokens verified, {fixed_accepted} accepted"
        );
        let (adaptive_drafted, adaptive_accepted) =
            (total(&adaptive, drafted), total(&adaptive, accepted));
        ensure(
            (adaptive_drafted - adaptive_accepted) * 5 <= fixed_drafted - fixed_accepted,
            || format!("{adaptive_drafted} draft tokens verified, {adaptive_accepted} accepted"),
        )?;
        ensure(adaptive_accepted * 2 >= fixed_accepted, || {
            format!("the accepted tokens stay: {adaptive_accepted} of {fixed_accepted}")
        })
    });
}

#[test]
fn chains_and_trees_stay_lossless_with_the_policy_on() {
    let _alone = one_at_a_time();
    let model = tiny_model();
    let (prompts, plain) = baseline(model.path());
    let params = vec![greedy(MAX_TOKENS); prompts.len()];
    let vocab_size = Llm::new(config(model.path())).unwrap().vocab_size() as u32;
    let wrong = unused_token(&plain, vocab_size as usize);
    // Trees whose script token hides behind decoys and is wrong at depth 2.
    let mut trees = replaying(model.path(), &plain, DraftLength::default(), |replay| {
        replay
            .with_tree_decoys(2, vocab_size)
            .with_wrong_token_at(1, wrong)
    });
    assert_eq!(
        token_ids(&run(&mut trees, &prompts, &params)),
        token_ids(&plain)
    );
    // EAGLE-2 trees and chains of a random head.
    let head = eagle1_head(model.path());
    for tree in [None, Some(DraftTreeConfig::default())] {
        let mut engine_config = config(model.path());
        let drafter = EagleDrafter {
            tree,
            ..EagleDrafter::new(head.path())
        };
        engine_config.speculative =
            Some(SpeculativeConfig::new(SpeculativeMethod::Eagle(drafter), K));
        let mut llm = Llm::new(engine_config).unwrap();
        let outputs = run(&mut llm, &prompts, &params);
        assert_eq!(token_ids(&outputs), token_ids(&plain), "tree {tree:?}");
    }
}
