//! The EAGLE chain proposer: the token/feature shift, the draft KV cache, EAGLE-3 recycling and
//! vocabulary mapping, determinism, batching, context limits and input errors.
#![cfg(feature = "burn")]

use crate::eagle_fixtures;

use aquila_model_loader::fixtures::eagle::TinyEagle1Options;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, SequenceInput};
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::proposer::{
    ChainDraft, ChainStop, ConfidenceCalibration, Draft, DraftSampling, EagleProposer,
    EagleProposerConfig, ProposeBatch, ProposeError, ProposeRequest, Proposer, ReplayProposer,
};
use aquila_spec_decode::rejection::{
    ChainRequest, DraftProbs, RejectionSampler, TargetRows, TreeRequest,
};
use aquila_spec_decode::sampling::{probabilities, RequestRng, SamplingConfig};
use burn::tensor::Tensor;
use eagle_fixtures::{eagle3_options, max_abs_diff, values, Fixture, B};

const SAMPLED: DraftSampling = DraftSampling::Sampled {
    temperature: 1.0,
    seed: 11,
};

fn sampled(k: usize) -> EagleProposerConfig {
    EagleProposerConfig {
        num_speculative_tokens: k,
        sampling: SAMPLED,
        tree: None,
    }
}

pub(crate) fn eagle1(fixture: &Fixture) -> EagleHead<B> {
    fixture
        .load(&fixture.eagle1("eagle1", &TinyEagle1Options::default()))
        .unwrap()
}

pub(crate) fn eagle3(fixture: &Fixture, draft_vocab: usize) -> EagleHead<B> {
    let layers = fixture.target.config().num_hidden_layers;
    let dir = fixture.eagle3(
        &format!("eagle3-{draft_vocab}"),
        &eagle3_options(layers, draft_vocab),
    );
    fixture.load(&dir).unwrap()
}

pub(crate) fn proposer(
    fixture: &Fixture,
    head: EagleHead<B>,
    config: EagleProposerConfig,
) -> EagleProposer<B> {
    EagleProposer::new(head, &fixture.target, config, 4).unwrap()
}

/// A request committing `tokens[first..len - 1]` whose features are rows `rows`.
pub(crate) fn request<'a>(
    id: u64,
    tokens: &'a [u32],
    first: usize,
    rows: &'a [usize],
    max: usize,
) -> ProposeRequest<'a> {
    ProposeRequest {
        request_id: id,
        tokens,
        first_new_position: first,
        feature_rows: rows,
        max_draft_tokens: max,
        stop: None,
        temperature: 0.0,
        seed: 0,
        drafting_suspended: false,
    }
}

/// The draft of one request whose committed rows are all rows of `features`.
pub(crate) fn draft_single(
    proposer: &mut EagleProposer<B>,
    features: &Tensor<B, 2>,
    id: u64,
    tokens: &[u32],
    first: usize,
    max: usize,
) -> Result<Draft, ProposeError> {
    let rows: Vec<usize> = (0..tokens.len() - 1 - first).collect();
    let requests = [request(id, tokens, first, &rows, max)];
    let batch = ProposeBatch {
        features: Some(features),
        requests: &requests,
        target_kv: None,
    };
    Ok(proposer.draft(&batch)?.remove(0))
}

/// The chain drafted for one request whose committed rows are all rows of `features`.
fn draft_one(
    proposer: &mut EagleProposer<B>,
    features: &Tensor<B, 2>,
    id: u64,
    tokens: &[u32],
    first: usize,
    max: usize,
) -> Result<ChainDraft, ProposeError> {
    let draft = draft_single(proposer, features, id, tokens, first, max)?;
    Ok(draft.as_chain().expect("chain proposer").clone())
}

/// Target features of rows `start..` of the sequence `tokens` (computed over the whole
/// sequence from position 0, as the target's cache would hold it).
pub(crate) fn rows_from(
    fixture: &Fixture,
    tokens: &[u32],
    start: usize,
    tap: &FeatureTap,
) -> Tensor<B, 2> {
    let all = fixture.features(tokens, tap);
    let n = all.dims()[0];
    all.narrow(0, start, n - start)
}

/// The head outputs of `tokens` at `positions` with hidden inputs `hidden`, on a fresh cache
/// holding `prefix` first (another sequence's committed rows).
fn head_forward(
    fixture: &Fixture,
    head: &EagleHead<B>,
    tokens: Vec<u32>,
    positions: Vec<usize>,
    hidden: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let mut cache = head.new_kv_cache(1);
    let batch = ForwardBatch::new(vec![SequenceInput {
        slot: 0,
        positions,
        logits_rows: Vec::new(),
        tokens,
        mask: None,
        history_mask: None,
    }]);
    head.forward(&fixture.target, &batch, hidden, &mut cache)
        .unwrap()
}

/// The draft distribution (temperature 1, over target ids) of the last row of `outputs`.
fn last_row_probs(fixture: &Fixture, head: &EagleHead<B>, outputs: Tensor<B, 2>) -> Vec<f32> {
    let n = outputs.dims()[0];
    let logits = values(head.logits(&fixture.target, outputs.narrow(0, n - 1, 1)));
    let probs = probabilities(&logits, &SamplingConfig::default());
    head.vocab_map().scatter_row(&probs, 0.0)
}

pub(crate) const PROMPT: [u32; 7] = [1, 40, 41, 97, 12, 200, 33];
pub(crate) const ROOT: u32 = 250;

pub(crate) fn with_root(prompt: &[u32], root: u32) -> Vec<u32> {
    prompt.iter().copied().chain([root]).collect()
}

#[test]
fn draft_row_t_consumes_feature_t_and_token_t_plus_1_at_position_t() {
    let fixture = Fixture::new(2);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let tokens = with_root(&PROMPT, ROOT);
    let mut drafter = proposer(&fixture, eagle1(&fixture), sampled(1));
    let q = draft_one(&mut drafter, &features, 1, &tokens, 0, 1)
        .unwrap()
        .probs
        .unwrap();

    let head = eagle1(&fixture);
    let n = PROMPT.len();
    let reference = |tokens: Vec<u32>, positions: Vec<usize>| {
        let outputs = head_forward(&fixture, &head, tokens, positions, features.clone());
        last_row_probs(&fixture, &head, outputs)
    };
    // Row t = (h_t, x_{t+1}) at position t: the tokens shifted left by one, the root last.
    let shifted = reference(tokens[1..].to_vec(), (0..n).collect());
    assert!(max_abs_diff(&q, &shifted) < 1e-6);
    // Pairing h_t with x_t instead drafts something else.
    let unshifted = reference(PROMPT.to_vec(), (0..n).collect());
    assert!(max_abs_diff(&q, &unshifted) > 1e-4);

    // So the first committed token is never an input, and the root always is.
    let mut other_first = tokens.clone();
    other_first[0] = 77;
    let mut other_root = tokens.clone();
    other_root[n] = 251;
    let mut drafter = proposer(&fixture, eagle1(&fixture), sampled(1));
    let same = draft_one(&mut drafter, &features, 2, &other_first, 0, 1)
        .unwrap()
        .probs
        .unwrap();
    let changed = draft_one(&mut drafter, &features, 3, &other_root, 0, 1)
        .unwrap()
        .probs
        .unwrap();
    assert_eq!(same, q);
    assert!(max_abs_diff(&changed, &q) > 1e-4);
}

/// Two rounds of one request: the prompt, then the root and two accepted drafts. Returns the
/// second round's chain, the whole sequence (ending with the next root) and the proposer.
fn two_rounds(
    fixture: &Fixture,
    config: EagleProposerConfig,
) -> (ChainDraft, Vec<u32>, EagleProposer<B>) {
    let tap = FeatureTap::LastHidden;
    let mut drafter = proposer(fixture, eagle1(fixture), config);
    let prefill = with_root(&PROMPT, ROOT);
    let first = draft_one(
        &mut drafter,
        &fixture.features(&PROMPT, &tap),
        1,
        &prefill,
        0,
        3,
    )
    .unwrap();
    assert_eq!(first.tokens.len(), 3);
    assert_eq!(
        drafter.cached_rows(1),
        Some(PROMPT.len()),
        "the drafted rows were rolled back"
    );
    // The target accepted two drafts and sampled 9: rows root, d1, d2 are committed.
    let mut sequence = prefill;
    sequence.extend(&first.tokens[..2]);
    sequence.push(9);
    let committed_end = sequence.len() - 1;
    let features = rows_from(fixture, &sequence[..committed_end], PROMPT.len(), &tap);
    let second = draft_one(&mut drafter, &features, 1, &sequence, PROMPT.len(), 3).unwrap();
    assert_eq!(drafter.cached_rows(1), Some(committed_end));
    (second, sequence, drafter)
}

/// Rows of one request committed in three calls, of which only the last drafts: the first two
/// are deferred, and the third takes all of them in.
#[test]
fn rows_of_a_request_that_does_not_draft_are_deferred_until_it_drafts() {
    let fixture = Fixture::new(2);
    let tap = FeatureTap::LastHidden;
    let sequence: Vec<u32> = (0..20).map(|i| 3 + (i * 7 % 300) as u32).collect();
    let committed_end = sequence.len() - 1;
    let all = fixture.features(&sequence[..committed_end], &tap);
    let mut eager = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(3));
    let expected = draft_one(&mut eager, &all, 1, &sequence, 0, 3).unwrap();

    let mut drafter = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(3));
    let ends = [8, 14, committed_end];
    let mut first = 0;
    for (call, &end) in ends.iter().enumerate() {
        let max = if call + 1 == ends.len() { 3 } else { 0 };
        let rows = all.clone().narrow(0, first, end - first);
        let draft = draft_one(&mut drafter, &rows, 1, &sequence[..=end], first, max).unwrap();
        assert_eq!(draft.tokens.len(), max);
        assert_eq!(drafter.cached_rows(1), Some(end), "call {call}");
        let deferred = if max == 0 { end } else { 0 };
        assert_eq!(drafter.deferred_rows(1), deferred, "call {call}");
        if max > 0 {
            assert_eq!(draft.tokens, expected.tokens);
        }
        first = end;
    }
}

/// A request that never drafts takes its rows in once its backlog grows long, so the work and
/// the features waiting for its next draft stay bounded.
#[test]
fn a_long_backlog_is_taken_in_without_a_draft() {
    let fixture = Fixture::new(2);
    let tap = FeatureTap::LastHidden;
    let sequence: Vec<u32> = (0..301).map(|i| 3 + (i * 11 % 300) as u32).collect();
    let all = fixture.features(&sequence[..300], &tap);
    let mut drafter = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(3));
    let mut most_deferred = 0;
    for first in (0..300).step_by(20) {
        let rows = all.clone().narrow(0, first, 20);
        draft_one(&mut drafter, &rows, 1, &sequence[..=first + 20], first, 0).unwrap();
        assert_eq!(drafter.cached_rows(1), Some(first + 20));
        most_deferred = most_deferred.max(drafter.deferred_rows(1));
    }
    assert!(most_deferred > 20, "rows were deferred: {most_deferred}");
    assert!(
        most_deferred <= 140,
        "the backlog stays bounded: {most_deferred}"
    );
    assert!(drafter.deferred_rows(1) < 300);
}

#[test]
fn the_draft_cache_keeps_only_committed_rows_computed_from_target_features() {
    let fixture = Fixture::new(2);
    let tap = FeatureTap::LastHidden;
    // A fresh request given every committed row at once drafts the same chain: no row of the
    // first round's drafting survived, and the accepted rows use target features.
    let (second, sequence, _) = two_rounds(&fixture, EagleProposerConfig::greedy(3));
    let committed_end = sequence.len() - 1;
    let all = fixture.features(&sequence[..committed_end], &tap);
    let mut fresh = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(3));
    let again = draft_one(&mut fresh, &all, 1, &sequence, 0, 3).unwrap();
    assert_eq!(again.tokens, second.tokens);

    // The same holds for the draft distribution, which also pins the positions: the new rows
    // continue at the cache's length, and one position further on drafts something else.
    let (second, sequence, _) = two_rounds(&fixture, sampled(3));
    let all = fixture.features(&sequence[..committed_end], &tap);
    let vocab = 320;
    let q = &second.probs.as_ref().unwrap()[..vocab];
    let head = eagle1(&fixture);
    let reference = |offset: usize| {
        let mut cache = head.new_kv_cache(1);
        let n = PROMPT.len();
        let prefill = ForwardBatch::new(vec![SequenceInput::new(0, sequence[1..=n].to_vec(), 0)]);
        head.forward(
            &fixture.target,
            &prefill,
            all.clone().narrow(0, 0, n),
            &mut cache,
        )
        .unwrap();
        let rows = committed_end - n;
        let new_rows = ForwardBatch::new(vec![SequenceInput::new(
            0,
            sequence[n + 1..].to_vec(),
            n + offset,
        )]);
        let outputs = head
            .forward(
                &fixture.target,
                &new_rows,
                all.clone().narrow(0, n, rows),
                &mut cache,
            )
            .unwrap();
        last_row_probs(&fixture, &head, outputs)
    };
    assert!(max_abs_diff(q, &reference(0)) < 1e-5);
    assert!(max_abs_diff(q, &reference(1)) > 1e-4);
}

#[test]
fn eagle3_projects_only_target_features_and_recycles_pre_norm_outputs() {
    let fixture = Fixture::new(4);
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let features = fixture.features(&PROMPT, &tap);
    let tokens = with_root(&PROMPT, ROOT);
    let mut drafter = proposer(&fixture, eagle3(&fixture, 100), sampled(2));
    assert_eq!(drafter.feature_tap(), tap);
    let chain = draft_one(&mut drafter, &features, 1, &tokens, 0, 2).unwrap();
    let q = chain.probs.unwrap();
    let vocab = 320;
    assert_eq!(q.len(), 2 * vocab);

    let head = eagle3(&fixture, 100);
    let EagleHead::Eagle3(eagle3_head) = &head else {
        unreachable!()
    };
    let n = PROMPT.len();
    let mut cache = head.new_kv_cache(1);
    let committed = ForwardBatch::new(vec![SequenceInput::new(0, tokens[1..].to_vec(), 0)]);
    let outputs = head
        .forward(
            &fixture.target,
            &committed,
            head.project(features.clone()),
            &mut cache,
        )
        .unwrap();
    assert_eq!(
        outputs.dims(),
        [n, 64],
        "fc maps 3 x 64 features to the hidden width"
    );
    let last = outputs.narrow(0, n - 1, 1);
    assert!(max_abs_diff(&q[..vocab], &last_row_probs(&fixture, &head, last.clone())) < 1e-6);

    // Step 2 feeds draft 1 with the pre-norm output of step 1 (no fc, no norm) at position n.
    let step = |hidden: Tensor<B, 2>| {
        let mut cache = cache.clone();
        let batch = ForwardBatch::new(vec![SequenceInput::new(0, vec![chain.tokens[0]], n)]);
        let outputs = head
            .forward(&fixture.target, &batch, hidden, &mut cache)
            .unwrap();
        last_row_probs(&fixture, &head, outputs)
    };
    assert!(max_abs_diff(&q[vocab..], &step(last.clone())) < 1e-6);
    let normed = eagle3_head.final_norm().forward(last);
    assert!(max_abs_diff(&q[vocab..], &step(normed)) > 1e-4);
}

#[test]
fn eagle3_drafts_are_mapped_from_the_draft_vocabulary() {
    let fixture = Fixture::new(4);
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let features = fixture.features(&PROMPT, &tap);
    let tokens = with_root(&PROMPT, ROOT);
    for draft_vocab in [100, 320] {
        let head = eagle3(&fixture, draft_vocab);
        let outputs = head_forward(
            &fixture,
            &head,
            tokens[1..].to_vec(),
            (0..PROMPT.len()).collect(),
            head.project(features.clone()),
        );
        let logits = values(head.logits(&fixture.target, outputs.narrow(0, PROMPT.len() - 1, 1)));
        assert_eq!(
            logits.len(),
            draft_vocab,
            "logits cover the draft vocabulary"
        );
        let best = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0 as u32;
        let expected = head.vocab_map().to_target(best);
        if draft_vocab == 320 {
            assert_eq!(expected, best, "no mapping for a full vocabulary");
        }
        let mut drafter = proposer(&fixture, head, EagleProposerConfig::greedy(4));
        let chain = draft_one(&mut drafter, &features, 1, &tokens, 0, 4).unwrap();
        assert_eq!(chain.tokens[0], expected);
        assert!(
            chain.probs.is_none(),
            "greedy drafts are verified with a one-hot q"
        );
        let map = drafter.head().vocab_map();
        let reachable: Vec<u32> = (0..map.draft_vocab_size() as u32)
            .map(|id| map.to_target(id))
            .collect();
        assert!(
            chain.tokens.iter().all(|t| reachable.contains(t)),
            "{:?}",
            chain.tokens
        );
    }
    // Sampled drafts put no probability outside the draft vocabulary.
    let mut drafter = proposer(&fixture, eagle3(&fixture, 100), sampled(1));
    let q = draft_one(&mut drafter, &features, 1, &tokens, 0, 1)
        .unwrap()
        .probs
        .unwrap();
    let map = drafter.head().vocab_map();
    let mapped: Vec<usize> = (0..100).map(|id| map.to_target(id) as usize).collect();
    assert!(q
        .iter()
        .enumerate()
        .all(|(t, &p)| p == 0.0 || mapped.contains(&t)));
    assert!((q.iter().sum::<f32>() - 1.0).abs() < 1e-4);
}

#[test]
fn drafting_is_deterministic() {
    let fixture = Fixture::new(2);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let tokens = with_root(&PROMPT, ROOT);
    for config in [EagleProposerConfig::greedy(4), sampled(4)] {
        let mut drafter = proposer(&fixture, eagle1(&fixture), config);
        let first = draft_one(&mut drafter, &features, 5, &tokens, 0, 4).unwrap();
        drafter.release(5);
        assert_eq!(drafter.cached_rows(5), None);
        let again = draft_one(&mut drafter, &features, 5, &tokens, 0, 4).unwrap();
        let mut other = proposer(&fixture, eagle1(&fixture), config);
        let elsewhere = draft_one(&mut other, &features, 5, &tokens, 0, 4).unwrap();
        assert_eq!(first.tokens.len(), 4);
        assert_eq!(first, again);
        assert_eq!(first, elsewhere);
    }
}

#[test]
fn confidence_stops_end_chains_where_the_path_stops_paying() {
    let fixture = Fixture::new(2);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let tokens = with_root(&PROMPT, ROOT);
    let rows: Vec<usize> = (0..PROMPT.len()).collect();
    let mut drafter = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(4));
    let full = draft_one(&mut drafter, &features, 1, &tokens, 0, 4).unwrap();
    assert_eq!(full.confidences.len(), 4, "{:?}", full.confidences);
    assert!(full.confidences.iter().all(|&c| c > 0.0 && c <= 1.0));
    // Uncalibrated, acceptance is confidence: the path after token j is their product.
    let calibration = ConfidenceCalibration::new();
    let paths: Vec<f64> = full
        .confidences
        .iter()
        .scan(1.0, |path, &c| {
            *path *= calibration.acceptance(c);
            Some(*path)
        })
        .collect();
    let mean = calibration.mean_acceptance();
    let stopped = |keep_above: f64, extend_above: f64| {
        let mut drafter = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(4));
        let mut request = request(1, &tokens, 0, &rows, 4);
        let (keep_above, extend_above) = ([keep_above], [extend_above]);
        request.stop = Some(ChainStop {
            calibration: &calibration,
            keep_above: &keep_above,
            extend_above: &extend_above,
        });
        let batch = ProposeBatch {
            features: Some(&features),
            requests: &[request],
            target_kv: None,
        };
        let draft = drafter.draft(&batch).unwrap().remove(0);
        assert_eq!(drafter.cached_rows(1), Some(PROMPT.len()));
        draft.as_chain().unwrap().clone()
    };
    // A third token's expected path no longer pays for its step: the chain ends at two.
    let two = stopped(0.0, mean * (paths[0] + paths[1]) / 2.0);
    assert_eq!(two.tokens, full.tokens[..2]);
    assert_eq!(two.confidences, full.confidences[..2]);
    // Token 3 pays for its drafting step but not for its row: dropped.
    let dropped = stopped((paths[1] + paths[2]) / 2.0, 0.0);
    assert_eq!(dropped.tokens, full.tokens[..2]);
    // Not even the first token pays for its row.
    assert!(stopped(paths[0] * 1.01, 0.0).is_empty());
    assert_eq!(stopped(0.0, 0.0), full);
}

#[test]
fn batched_drafting_equals_drafting_each_request_alone() {
    let fixture = Fixture::new(4);
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let prompts: [&[u32]; 3] = [
        &PROMPT,
        &[5, 6, 7],
        &[300, 2, 44, 45, 46, 47, 48, 49, 50, 11],
    ];
    let roots = [ROOT, 17, 18];
    let budgets = [3, 1, 0];
    let sequences: Vec<Vec<u32>> = prompts
        .iter()
        .zip(roots)
        .map(|(p, r)| with_root(p, r))
        .collect();
    let per_request: Vec<Tensor<B, 2>> =
        prompts.iter().map(|p| fixture.features(p, &tap)).collect();

    // Alone: one proposer per request.
    let alone: Vec<ChainDraft> = (0..3)
        .map(|i| {
            let mut drafter = proposer(&fixture, eagle3(&fixture, 100), sampled(3));
            draft_one(
                &mut drafter,
                &per_request[i],
                i as u64,
                &sequences[i],
                0,
                budgets[i],
            )
            .unwrap()
        })
        .collect();

    let lengths: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    let (features, rows) = reversed_batch(&per_request, &lengths);
    let requests: Vec<ProposeRequest<'_>> = (0..3)
        .map(|i| request(i as u64, &sequences[i], 0, &rows[i], budgets[i]))
        .collect();
    let mut drafter = proposer(&fixture, eagle3(&fixture, 100), sampled(3));
    let batch = ProposeBatch {
        features: Some(&features),
        requests: &requests,
        target_kv: None,
    };
    let batched = drafter.draft(&batch).unwrap();
    for (i, (together, single)) in batched.iter().zip(&alone).enumerate() {
        let together = together.as_chain().unwrap();
        assert_eq!(together.tokens, single.tokens, "request {i}");
        assert_eq!(together.tokens.len(), budgets[i]);
        match (&together.probs, &single.probs) {
            (Some(a), Some(b)) => assert!(max_abs_diff(a, b) < 1e-5, "request {i}"),
            (None, None) => assert_eq!(budgets[i], 0),
            _ => panic!("request {i}: q rows differ in presence"),
        }
        assert_eq!(drafter.cached_rows(i as u64), Some(lengths[i]));
    }
}

#[test]
fn drafts_stop_at_the_context_limit() {
    let fixture = Fixture::new(2);
    let context = fixture.target.config().max_position_embeddings;
    let prompt: Vec<u32> = (0..context - 3).map(|i| 3 + (i % 300) as u32).collect();
    let tokens = with_root(&prompt, 4);
    let features = fixture.features(&prompt, &FeatureTap::LastHidden);
    let mut drafter = proposer(&fixture, eagle1(&fixture), EagleProposerConfig::greedy(5));
    // The root sits at position context - 3: only drafts at context - 2 and context - 1 fit.
    let chain = draft_one(&mut drafter, &features, 1, &tokens, 0, 5).unwrap();
    assert_eq!(chain.tokens.len(), 2);
}

#[test]
fn inconsistent_inputs_are_rejected_without_changing_state() {
    let fixture = Fixture::new(2);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let tokens = with_root(&PROMPT, ROOT);
    let mut drafter = EagleProposer::new(
        eagle1(&fixture),
        &fixture.target,
        EagleProposerConfig::greedy(2),
        1,
    )
    .unwrap();
    draft_one(&mut drafter, &features, 1, &tokens, 0, 2).unwrap();
    let cached = drafter.cached_rows(1);

    let rows: Vec<usize> = (0..PROMPT.len()).collect();
    let requests = [request(1, &tokens, 0, &rows, 2)];
    let err = drafter
        .draft(&ProposeBatch::without_features(&requests))
        .unwrap_err();
    assert_eq!(err, ProposeError::MissingFeatures);

    let wide = Tensor::cat(vec![features.clone(), features.clone()], 1);
    let err = draft_one(&mut drafter, &wide, 1, &tokens, 0, 2).unwrap_err();
    assert_eq!(
        err,
        ProposeError::FeatureWidth {
            expected: 64,
            got: 128
        }
    );

    // Rows must continue the draft cache: the request already holds the prompt's rows.
    let err = draft_one(&mut drafter, &features, 1, &tokens, 0, 2).unwrap_err();
    assert_eq!(
        err,
        ProposeError::PositionGap {
            request_id: 1,
            cached: PROMPT.len(),
            first_new_position: 0
        }
    );
    let err = draft_one(&mut drafter, &features, 2, &tokens, 0, 2).unwrap_err();
    assert_eq!(
        err,
        ProposeError::NoFreeSlot {
            request_id: 2,
            capacity: 1
        }
    );
    assert_eq!(
        drafter.cached_rows(1),
        cached,
        "failed calls change nothing"
    );
    assert_eq!(drafter.num_requests(), 1);

    let bad: Vec<u32> = tokens
        .iter()
        .map(|&t| if t == ROOT { 320 } else { t })
        .collect();
    drafter.release(1);
    let err = draft_one(&mut drafter, &features, 1, &bad, 0, 2).unwrap_err();
    assert_eq!(
        err,
        ProposeError::TokenOutOfVocab {
            request_id: 1,
            token: 320,
            vocab_size: 320
        }
    );
    assert_eq!(
        drafter.cached_rows(1),
        None,
        "a failed first call leaves no state"
    );
    assert_eq!(drafter.num_requests(), 0);

    // A released slot serves the next request.
    draft_one(&mut drafter, &features, 2, &tokens, 0, 2).unwrap();
    assert_eq!(drafter.cached_rows(2), Some(PROMPT.len()));
}

/// What a speculative decoding run produced.
pub(crate) struct Decoded {
    /// Prompt and generated tokens.
    pub tokens: Vec<u32>,
    /// Draft tokens proposed and accepted over the run.
    pub drafted: usize,
    pub accepted: usize,
}

/// Decodes at least `new_tokens` tokens after `prompt` with the target, drafting with
/// `drafter` and verifying with the rejection sampler, the way the engine drives a proposer:
/// after every target forward, the committed rows (the prompt, then root and accepted drafts)
/// and the next root go to the proposer. Chains are verified as one causal run after the root;
/// trees as their rows under the tree attention mask at `root + depth`, after which the target
/// cache keeps the accepted path's rows (`KvCache::gather`).
pub(crate) fn speculative_decode(
    fixture: &Fixture,
    drafter: &mut dyn Proposer<Tensor<B, 2>>,
    tap: &FeatureTap,
    prompt: &[u32],
    new_tokens: usize,
    sampling: &SamplingConfig,
) -> Decoded {
    let target = &fixture.target;
    let sampler = RejectionSampler::new(target.config().vocab_size).unwrap();
    let mut rng = RequestRng::new(3);
    let mut cache = target.new_kv_cache(1);
    let prefill = ForwardBatch::new(vec![SequenceInput::new(0, prompt.to_vec(), 0)]);
    let out = target.forward(&prefill, &mut cache, tap).unwrap();
    let root = sampler
        .verify_chain(ChainRequest {
            config: sampling,
            target: TargetRows::Logits {
                logits: &values(out.logits),
                prompt,
                output: &[],
            },
            draft_tokens: &[],
            draft_probs: DraftProbs::OneHot,
            rng: &mut rng,
        })
        .unwrap()
        .next_token();
    let mut tokens = with_root(prompt, root);
    let (mut first_new, mut rows, mut features) =
        (0, (0..prompt.len()).collect::<Vec<_>>(), out.features);
    let (mut drafted, mut accepted) = (0, 0);
    loop {
        let k = drafter.num_speculative_tokens();
        let requests = [request(0, &tokens, first_new, &rows, k)];
        let batch = ProposeBatch {
            features: features.as_ref(),
            requests: &requests,
            target_kv: None,
        };
        let draft = drafter.draft(&batch).unwrap().remove(0);
        if tokens.len() >= prompt.len() + new_tokens {
            break;
        }
        let root_position = tokens.len() - 1;
        let verify = match &draft {
            Draft::Chain(chain) => {
                let mut verify_tokens = vec![tokens[root_position]];
                verify_tokens.extend(&chain.tokens);
                SequenceInput::new(0, verify_tokens, root_position)
            }
            Draft::Tree { tree, .. } => {
                let n = tree.num_nodes();
                let mask = tree.attention_mask();
                SequenceInput {
                    positions: tree.positions(root_position),
                    ..SequenceInput::new(0, tree.tokens().to_vec(), root_position)
                }
                .with_mask(mask.chunks(n).map(<[bool]>::to_vec).collect())
            }
        };
        let out = target
            .forward(
                &ForwardBatch::new(vec![verify.with_all_logits()]),
                &mut cache,
                tap,
            )
            .unwrap();
        let logits = values(out.logits);
        let target_rows = TargetRows::Logits {
            logits: &logits,
            prompt,
            output: &tokens[prompt.len()..],
        };
        let outcome = match &draft {
            Draft::Chain(chain) => sampler.verify_chain(ChainRequest {
                config: sampling,
                target: target_rows,
                draft_tokens: &chain.tokens,
                draft_probs: chain.draft_probs(),
                rng: &mut rng,
            }),
            Draft::Tree { tree, probs } => sampler.verify_tree(TreeRequest {
                config: sampling,
                target: target_rows,
                tree,
                draft_probs: probs
                    .as_deref()
                    .map_or(DraftProbs::OneHot, DraftProbs::Rows),
                rng: &mut rng,
            }),
        }
        .unwrap();
        drafted += draft.num_draft_tokens();
        accepted += outcome.num_accepted();
        // Keep the root and the accepted drafts in the target cache (a chain's path is
        // 0..=accepted, which gather keeps by truncating); the last token is the next root.
        cache.gather(0, root_position, &outcome.path);
        first_new = root_position;
        rows = outcome.path.clone();
        features = out.features;
        tokens.extend(&outcome.tokens);
    }
    Decoded {
        tokens,
        drafted,
        accepted,
    }
}

#[test]
fn greedy_speculative_decoding_with_eagle_drafts_reproduces_greedy_decoding() {
    let fixture = Fixture::new(4);
    let greedy = SamplingConfig::greedy();
    let prompt = [1, 40, 41, 97, 12, 200, 33, 40, 41];
    let mut plain_drafter = ReplayProposer::new(3, Vec::new());
    let plain = speculative_decode(
        &fixture,
        &mut plain_drafter,
        &FeatureTap::None,
        &prompt,
        24,
        &greedy,
    );
    assert_eq!(plain.drafted, 0);

    // A drafter replaying the greedy output is always right: every verification accepts k.
    let mut perfect = ReplayProposer::new(3, vec![plain.tokens.clone()]);
    let replayed = speculative_decode(
        &fixture,
        &mut perfect,
        &FeatureTap::None,
        &prompt,
        24,
        &greedy,
    );
    assert_eq!(
        replayed.tokens[..prompt.len() + 24],
        plain.tokens[..prompt.len() + 24]
    );
    assert!(replayed.drafted > 0);
    assert_eq!(replayed.accepted, replayed.drafted);

    for head in [eagle1(&fixture), eagle3(&fixture, 100)] {
        let tap = head.feature_tap();
        let mut drafter = proposer(&fixture, head, EagleProposerConfig::greedy(3));
        let decoded = speculative_decode(&fixture, &mut drafter, &tap, &prompt, 24, &greedy);
        let n = prompt.len() + 24;
        assert_eq!(decoded.tokens[..n], plain.tokens[..n], "{tap:?}");
        assert!(
            decoded.drafted >= 3 * 24 / 4,
            "every step drafts k = 3 tokens"
        );
        assert_eq!(drafter.cached_rows(0), Some(decoded.tokens.len() - 1));
    }
}

#[test]
fn drafts_follow_each_requests_own_sampling_in_one_batch() {
    let fixture = Fixture::new(4);
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let prompts: [&[u32]; 2] = [&PROMPT, &[300, 2, 44, 45, 46, 47, 48, 49, 50, 11]];
    let sequences: Vec<Vec<u32>> = prompts.iter().map(|p| with_root(p, ROOT)).collect();
    let per_request: Vec<Tensor<B, 2>> =
        prompts.iter().map(|p| fixture.features(p, &tap)).collect();
    // Request 0 samples at 1.0 with seed 11, request 1 is greedy: alone, each drafts as a
    // proposer that drafts every request that way (request 0's stream, from seed 11 alone, is
    // the one a proposer sampling with seed 11 draws for request id 0).
    let alone = [sampled(3), EagleProposerConfig::greedy(3)]
        .into_iter()
        .enumerate()
        .map(|(i, config)| {
            let mut drafter = proposer(&fixture, eagle3(&fixture, 100), config);
            draft_one(&mut drafter, &per_request[i], i as u64, &sequences[i], 0, 3).unwrap()
        })
        .collect::<Vec<_>>();
    let lengths: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    let (features, rows) = reversed_batch(&per_request, &lengths);
    let requests: Vec<ProposeRequest<'_>> = (0..2)
        .map(|i| ProposeRequest {
            temperature: if i == 0 { 1.0 } else { 0.0 },
            seed: 11,
            drafting_suspended: false,
            ..request(i as u64, &sequences[i], 0, &rows[i], 3)
        })
        .collect();
    let following = EagleProposerConfig {
        sampling: DraftSampling::FollowRequests,
        ..EagleProposerConfig::greedy(3)
    };
    let mut drafter = proposer(&fixture, eagle3(&fixture, 100), following);
    let batch = ProposeBatch {
        features: Some(&features),
        requests: &requests,
        target_kv: None,
    };
    let drafts = drafter.draft(&batch).unwrap();
    let greedy = drafts[1].as_chain().unwrap();
    assert_eq!(greedy.tokens, alone[1].tokens);
    assert!(
        greedy.probs.is_none(),
        "a greedy request's drafts are one-hot"
    );
    let sampling = drafts[0].as_chain().unwrap();
    assert_eq!(sampling.tokens, alone[0].tokens);
    let (Some(q), Some(alone_q)) = (&sampling.probs, &alone[0].probs) else {
        panic!("a sampling request's drafts carry their q rows");
    };
    assert!(max_abs_diff(q, alone_q) < 1e-5);
}

#[test]
fn sampled_drafts_verify_with_their_q_rows() {
    let fixture = Fixture::new(4);
    let sampling = SamplingConfig {
        temperature: 0.8,
        ..SamplingConfig::default()
    };
    let head = eagle3(&fixture, 100);
    let tap = head.feature_tap();
    let mut drafter = proposer(&fixture, head, sampled(3));
    let decoded = speculative_decode(&fixture, &mut drafter, &tap, &PROMPT, 20, &sampling);
    assert!(decoded.tokens.len() >= PROMPT.len() + 20);
    assert!(decoded.accepted <= decoded.drafted);
    assert!(decoded.tokens.iter().all(|&t| t < 320));
}

/// Batched features for requests whose own feature matrices are `per_request` (`lengths[i]`
/// rows each), stacked in reverse request order, and each request's rows in the stack:
/// request `i` comes after every later request.
pub(crate) fn reversed_batch(
    per_request: &[Tensor<B, 2>],
    lengths: &[usize],
) -> (Tensor<B, 2>, Vec<Vec<usize>>) {
    let features = Tensor::cat(per_request.iter().rev().cloned().collect(), 0);
    let rows = (0..lengths.len())
        .map(|i| {
            let first: usize = lengths[i + 1..].iter().sum();
            (first..first + lengths[i]).collect()
        })
        .collect();
    (features, rows)
}
