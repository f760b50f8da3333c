//! `disable_by_batch_size`: requests decode without drafts while more requests than the limit
//! run, speculate once the batch has shrunk to the limit, and stay lossless throughout, with a
//! fixed or an adaptive draft length; a draft model takes in the rows of the pause when its
//! request drafts again.

use crate::common;

use aquila_engine::{
    DraftLength, DraftModelDrafter, Llm, SpeculativeConfig, SpeculativeMethod, WeightFormat,
};
use common::spec::{eagle1_head, prompt_ids, run, with_speculative};
use common::{config, greedy, tiny_model, token_ids, PROMPTS};

const K: usize = 3;
/// Output tokens of the requests that finish early.
const SHORT: usize = 3;
/// Output tokens of the one request that outlives them.
const LONG: usize = 24;

#[test]
fn speculation_waits_until_the_batch_shrinks_to_the_limit() {
    let model = tiny_model();
    let head = eagle1_head(model.path());
    let mut plain = Llm::new(config(model.path())).unwrap();
    let prompts = prompt_ids(&plain, &PROMPTS[..3]);
    let params = [greedy(SHORT), greedy(SHORT), greedy(LONG)];
    let baseline = token_ids(&run(&mut plain, &prompts, &params));

    let drafts_with = |draft_length: DraftLength, limit: Option<usize>| {
        let mut settings = SpeculativeConfig::eagle(head.path(), K);
        settings.draft_length = draft_length;
        settings.disable_by_batch_size = limit;
        let mut llm = Llm::new(with_speculative(config(model.path()), settings)).unwrap();
        let outputs = run(&mut llm, &prompts, &params);
        assert_eq!(token_ids(&outputs), baseline, "limit {limit:?}");
        outputs
            .iter()
            .map(|o| o.metrics.num_drafts)
            .collect::<Vec<_>>()
    };

    let drafts_with_limit = |limit| drafts_with(DraftLength::Fixed, limit);
    let unlimited = drafts_with_limit(None);
    assert!(unlimited.iter().all(|&drafts| drafts > 0), "{unlimited:?}");
    // Three requests run: a limit of three changes nothing.
    assert_eq!(drafts_with_limit(Some(3)), unlimited);
    // A limit of one: the short requests never speculate; the long one starts once they end.
    let limited = drafts_with_limit(Some(1));
    assert_eq!(limited[..2], [0, 0], "{limited:?}");
    assert!(
        limited[2] > 0 && limited[2] < unlimited[2],
        "{limited:?} vs {unlimited:?}"
    );
    let adaptive = drafts_with(DraftLength::default(), Some(1));
    assert_eq!(
        adaptive[..2],
        [0, 0],
        "the limit bounds the adaptive policy too"
    );
}

#[test]
fn a_draft_model_takes_in_the_pause_when_its_request_drafts_again() {
    let model = tiny_model();
    let mut plain = Llm::new(config(model.path())).unwrap();
    let prompts = prompt_ids(&plain, &PROMPTS[..3]);
    let params = [greedy(SHORT), greedy(SHORT), greedy(LONG)];
    let baseline = token_ids(&run(&mut plain, &prompts, &params));
    // The target drafting for itself: every draft is accepted only if the draft model's cache
    // holds the request's whole context, the rows decoded during the pause included, whether
    // it copies them from the target's cache (the default for the target's own directory) or
    // runs them itself.
    for copies_target_cache in [None, Some(false)] {
        let drafter = DraftModelDrafter {
            weights: Some(WeightFormat::F32),
            copies_target_cache,
            ..DraftModelDrafter::new(model.path())
        };
        let mut settings = SpeculativeConfig::new(SpeculativeMethod::DraftModel(drafter), K);
        settings.draft_length = DraftLength::Fixed;
        settings.disable_by_batch_size = Some(1);
        let mut llm = Llm::new(with_speculative(config(model.path()), settings)).unwrap();
        let outputs = run(&mut llm, &prompts, &params);
        assert_eq!(token_ids(&outputs), baseline);
        let metrics = &outputs[2].metrics;
        assert_eq!(
            (outputs[0].metrics.num_drafts, outputs[1].metrics.num_drafts),
            (0, 0)
        );
        // Only the last round may draft past the request's end.
        assert!(metrics.num_draft_tokens > 2 * K, "{metrics:?}");
        assert!(
            metrics.num_draft_tokens - metrics.num_accepted_tokens < K,
            "{copies_target_cache:?}: {metrics:?}"
        );
    }
}
