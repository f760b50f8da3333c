//! The draft-model proposer: its chains are the draft model's own greedy continuation round
//! after round (the draft cache keeps the accepted drafts and cuts the rejected ones), requests
//! that skip drafting catch up, suspended ones leave their backlog until they draft again,
//! batching changes nothing, sampled drafts carry their distribution, the target drafting for
//! itself from the target's own keys and values runs only the roots and the drafts, and bad
//! inputs are named without changing the cache.
#![cfg(feature = "burn")]

use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use aquila_spec_decode::proposer::{
    Draft, DraftModelError, DraftModelProposer, DraftModelProposerConfig, DraftSampling,
    ProposeBatch, ProposeError, ProposeRequest, Proposer, TargetKvCache,
};
use burn::tensor::Tensor;

use crate::eagle_fixtures::{device, Fixture, B};

/// A tiny model of the fixture's shape with other weights (seed 1): a draft model that does
/// not simply copy the target.
fn other_model(fixture: &Fixture) -> LlamaModel<B> {
    let dir = fixture.root.path().join("draft");
    let options = TinyLlamaOptions {
        seed: 1,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(&dir, &options).expect("tiny draft model");
    LlamaModel::load(&dir, &device()).expect("tiny draft model loads")
}

fn proposer(fixture: &Fixture, model: LlamaModel<B>, k: usize) -> DraftModelProposer<B> {
    let config = DraftModelProposerConfig::greedy(k);
    DraftModelProposer::new(model, fixture.target.config(), config, 2).unwrap()
}

fn request(id: u64, tokens: &[u32], first: usize, max: usize) -> ProposeRequest<'_> {
    ProposeRequest {
        request_id: id,
        tokens,
        first_new_position: first,
        feature_rows: &[],
        max_draft_tokens: max,
        stop: None,
        temperature: 0.0,
        seed: 0,
        drafting_suspended: false,
    }
}

fn draft(
    proposer: &mut DraftModelProposer<B>,
    requests: &[ProposeRequest<'_>],
) -> Result<Vec<Vec<u32>>, ProposeError> {
    let drafts =
        Proposer::<Tensor<B, 2>>::draft(proposer, &ProposeBatch::without_features(requests))?;
    Ok(drafts
        .iter()
        .map(|draft| draft.as_chain().expect("chains").tokens.clone())
        .collect())
}

/// [`draft`] offering the target's KV cache `cache`, the requests in the slots `slots` names.
fn draft_from_target(
    proposer: &mut DraftModelProposer<B>,
    requests: &[ProposeRequest<'_>],
    (cache, slots): (&KvCache<B>, Vec<(u64, usize)>),
) -> Result<Vec<Vec<u32>>, ProposeError> {
    let target = TargetKvCache::new(cache, proposer.model().config(), slots);
    let batch = ProposeBatch::without_features(requests).with_target_kv(&target);
    let drafts = Proposer::<Tensor<B, 2>>::draft(proposer, &batch)?;
    Ok(drafts
        .iter()
        .map(|draft| draft.as_chain().expect("chains").tokens.clone())
        .collect())
}

/// A proposer of chains of `k` copying the target's keys and values, drafting with `model`.
fn copying_proposer(fixture: &Fixture, model: LlamaModel<B>, k: usize) -> DraftModelProposer<B> {
    let config = DraftModelProposerConfig {
        copies_target_cache: true,
        ..DraftModelProposerConfig::greedy(k)
    };
    DraftModelProposer::new(model, fixture.target.config(), config, 2).unwrap()
}

/// The target's forward over `tokens` after what `slot` of `cache` holds (a prefill or a
/// verification).
fn target_forward(model: &LlamaModel<B>, cache: &mut KvCache<B>, slot: usize, tokens: &[u32]) {
    let input = SequenceInput::new(slot, tokens.to_vec(), cache.len(slot));
    model
        .forward(&ForwardBatch::new(vec![input]), cache, &FeatureTap::None)
        .unwrap();
}

fn argmax(logits: Tensor<B, 2>) -> u32 {
    logits.argmax(1).into_data().iter::<i64>().next().unwrap() as u32
}

/// The `n` tokens `model` decodes greedily after `tokens`, from a fresh cache.
fn greedy(model: &LlamaModel<B>, tokens: &[u32], n: usize) -> Vec<u32> {
    let mut cache = model.new_kv_cache(1);
    let mut input = SequenceInput::new(0, tokens.to_vec(), 0);
    let mut out = Vec::new();
    while out.len() < n {
        let batch = ForwardBatch::new(vec![input]);
        let logits = model
            .forward(&batch, &mut cache, &FeatureTap::None)
            .unwrap();
        let next = argmax(logits.logits);
        out.push(next);
        input = SequenceInput::new(0, vec![next], cache.len(0));
    }
    out
}

#[test]
fn chains_follow_the_draft_model_round_after_round() {
    let fixture = Fixture::new(2);
    let model = other_model(&fixture);
    let mut proposer = proposer(&fixture, model.clone(), 3);
    // Prefill of 6 prompt tokens, the target sampled 40.
    let mut tokens = vec![3, 17, 250, 8, 99, 5, 40];
    let mut first = 0;
    for (round, accepted) in [1, 0, 3, 2].into_iter().enumerate() {
        let chain = draft(&mut proposer, &[request(7, &tokens, first, 3)]).unwrap();
        assert_eq!(chain[0], greedy(&model, &tokens, 3), "round {round}");
        // The committed tokens, the root and the two drafts fed after it.
        assert_eq!(proposer.cached_rows(7), Some(tokens.len() + 2));
        // The target accepts `accepted` drafts and samples a token of its own after them.
        first = tokens.len() - 1;
        tokens.extend_from_slice(&chain[0][..accepted]);
        tokens.push(11 + round as u32);
    }
    Proposer::<Tensor<B, 2>>::release(&mut proposer, 7);
    assert_eq!(proposer.cached_rows(7), None);
    assert_eq!(proposer.num_requests(), 0);
}

#[test]
fn the_target_as_its_own_draft_model_drafts_its_greedy_continuation() {
    let fixture = Fixture::new(2);
    let mut proposer = proposer(&fixture, fixture.target.clone(), 4);
    let tokens = [9, 8, 7, 6, 5];
    let chain = draft(&mut proposer, &[request(1, &tokens, 0, 4)]).unwrap();
    assert_eq!(chain[0], greedy(&fixture.target, &tokens, 4));
}

#[test]
fn the_target_copying_its_own_keys_and_values_runs_only_roots_and_drafts() {
    let fixture = Fixture::new(2);
    let target = &fixture.target;
    let prompt: Vec<u32> = (0..40).map(|i| (i * 31 + 7) % 320).collect();
    let greedy_tokens = greedy(target, &prompt, 8);
    // The target's cache, the request in its slot 2: the prefill commits the prompt, whose
    // last row gives the root.
    let mut cache = target.new_kv_cache(3);
    target_forward(target, &mut cache, 2, &prompt);
    let mut proposer = copying_proposer(&fixture, target.clone(), 3);
    let tokens = [&prompt[..], &greedy_tokens[..1]].concat();
    let chain = draft_from_target(
        &mut proposer,
        &[request(5, &tokens, 0, 3)],
        (&cache, vec![(5, 2)]),
    )
    .unwrap();
    assert_eq!(chain[0], greedy_tokens[1..4]);
    assert_eq!(
        proposer.forwarded_rows(),
        3,
        "the root and two drafts, not the prompt"
    );
    // The target verifies the root and the three drafts and accepts them all.
    target_forward(target, &mut cache, 2, &greedy_tokens[..4]);
    let tokens = [&prompt[..], &greedy_tokens[..5]].concat();
    let chain = draft_from_target(
        &mut proposer,
        &[request(5, &tokens, prompt.len(), 3)],
        (&cache, vec![(5, 2)]),
    )
    .unwrap();
    assert_eq!(chain[0], greedy_tokens[5..8]);
    assert_eq!(proposer.forwarded_rows(), 6);
    assert_eq!(proposer.cached_rows(5), Some(tokens.len() + 2));

    // Offered no target cache, the same proposer runs the prompt itself.
    let mut runs = copying_proposer(&fixture, target.clone(), 3);
    let tokens = [&prompt[..], &greedy_tokens[..1]].concat();
    let chain = draft(&mut runs, &[request(5, &tokens, 0, 3)]).unwrap();
    assert_eq!(chain[0], greedy_tokens[1..4]);
    assert_eq!(runs.forwarded_rows(), prompt.len() as u64 + 3);

    // Rows the target's cache does not hold are an error that changes nothing.
    let mut short = target.new_kv_cache(3);
    target_forward(target, &mut short, 2, &prompt[..10]);
    let mut fresh = copying_proposer(&fixture, target.clone(), 3);
    let err = draft_from_target(
        &mut fresh,
        &[request(5, &tokens, 0, 3)],
        (&short, vec![(5, 2)]),
    )
    .unwrap_err();
    assert!(
        matches!(err, ProposeError::TargetCache { request_id: 5, .. }),
        "{err}"
    );
    assert_eq!((fresh.num_requests(), fresh.forwarded_rows()), (0, 0));
}

#[test]
fn requests_that_skip_drafting_catch_up_and_batching_changes_nothing() {
    let fixture = Fixture::new(2);
    let model = other_model(&fixture);
    let long: Vec<u32> = (0..30).map(|i| (i * 37 + 5) % 320).collect();
    let short = [4, 44, 144];
    let alone = |tokens: &[u32]| {
        let mut proposer = proposer(&fixture, model.clone(), 3);
        draft(&mut proposer, &[request(1, tokens, 0, 3)]).unwrap()[0].clone()
    };
    let mut proposer = proposer(&fixture, model.clone(), 3);
    // The long request's first chunk commits 12 rows without drafting: nothing runs yet.
    let chunk = draft(&mut proposer, &[request(1, &long[..13], 0, 0)]).unwrap();
    assert!(chunk[0].is_empty());
    assert_eq!(proposer.cached_rows(1), Some(0));
    let both = draft(
        &mut proposer,
        &[request(1, &long, 12, 3), request(2, &short, 0, 2)],
    )
    .unwrap();
    assert_eq!(both[0], alone(&long));
    assert_eq!(both[1], alone(&short)[..2]);
    assert_eq!(proposer.cached_rows(1), Some(long.len() + 2));
    assert_eq!(proposer.cached_rows(2), Some(short.len() + 1));
}

#[test]
fn a_long_backlog_runs_through_the_draft_model_without_drafting() {
    let fixture = Fixture::new(2);
    let mut proposer = proposer(&fixture, other_model(&fixture), 2);
    let prompt: Vec<u32> = (0..200).map(|i| (i * 13 + 1) % 320).collect();
    let chain = draft(&mut proposer, &[request(5, &prompt, 0, 0)]).unwrap();
    assert!(chain[0].is_empty());
    assert_eq!(proposer.cached_rows(5), Some(prompt.len() - 1));
}

#[test]
fn a_suspended_request_leaves_its_backlog_until_it_drafts_again() {
    let fixture = Fixture::new(2);
    let model = other_model(&fixture);
    let tokens: Vec<u32> = (0..200).map(|i| (i * 29 + 3) % 320).collect();
    let config = DraftModelProposerConfig {
        max_catch_up_rows: 64,
        ..DraftModelProposerConfig::greedy(3)
    };
    let mut proposer =
        DraftModelProposer::new(model.clone(), fixture.target.config(), config, 1).unwrap();
    // Its prompt, then 150 steps while drafting is suspended: nothing runs.
    let suspended = |end: usize| ProposeRequest {
        drafting_suspended: true,
        ..request(7, &tokens[..end], end - 2, 0)
    };
    draft(&mut proposer, &[request(7, &tokens[..20], 0, 0)]).unwrap();
    assert_eq!(proposer.cached_rows(7), Some(19));
    for end in 21..=170 {
        assert!(draft(&mut proposer, &[suspended(end)]).unwrap()[0].is_empty());
    }
    assert_eq!(proposer.cached_rows(7), Some(19), "the pause's rows wait");
    // Asked to draft again behind 150 rows: 64 rows a call, no drafts until the last.
    let mut calls = Vec::new();
    for end in 171..=200 {
        let chain = draft(&mut proposer, &[request(7, &tokens[..end], end - 2, 3)]).unwrap();
        calls.push((proposer.cached_rows(7).unwrap(), chain[0].len()));
        if !chain[0].is_empty() {
            let fresh = greedy(&model, &tokens[..end], 3);
            assert_eq!(
                chain[0], fresh,
                "caught up, it drafts from its whole context"
            );
            break;
        }
    }
    assert_eq!(calls, [(83, 0), (147, 0), (173 + 2, 3)]);
}

#[test]
fn sampled_drafts_carry_the_distribution_they_were_drawn_from() {
    let fixture = Fixture::new(2);
    let config = DraftModelProposerConfig {
        sampling: DraftSampling::FollowRequests,
        ..DraftModelProposerConfig::greedy(3)
    };
    let vocab = fixture.target.config().vocab_size;
    let mut proposer =
        DraftModelProposer::new(other_model(&fixture), fixture.target.config(), config, 1).unwrap();
    let tokens = [1, 2, 3, 4];
    let sampled = ProposeRequest {
        temperature: 1.0,
        seed: 3,
        drafting_suspended: false,
        ..request(1, &tokens, 0, 3)
    };
    let drafts =
        Proposer::<Tensor<B, 2>>::draft(&mut proposer, &ProposeBatch::without_features(&[sampled]))
            .unwrap();
    let Draft::Chain(chain) = &drafts[0] else {
        panic!("a chain")
    };
    let probs = chain.probs.as_ref().expect("sampled drafts carry q");
    assert_eq!((chain.len(), probs.len()), (3, 3 * vocab));
    for (row, (&token, &confidence)) in probs
        .chunks(vocab)
        .zip(chain.tokens.iter().zip(&chain.confidences))
    {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert_eq!(row[token as usize], confidence);
    }
}

#[test]
fn drafts_stop_at_the_targets_context() {
    let fixture = Fixture::new(2);
    let max = fixture.target.config().max_position_embeddings;
    let mut proposer = proposer(&fixture, other_model(&fixture), 4);
    let tokens: Vec<u32> = (0..max - 2).map(|i| (i % 300) as u32).collect();
    let chain = draft(&mut proposer, &[request(1, &tokens, 0, 4)]).unwrap();
    assert_eq!(
        chain[0].len(),
        2,
        "drafts 1 and 2 are verified at the last two positions"
    );
}

#[test]
fn bad_inputs_are_named_and_change_nothing() {
    let fixture = Fixture::new(2);
    let mut proposer = proposer(&fixture, other_model(&fixture), 2);
    let tokens = [1, 2, 3, 4, 5];
    draft(&mut proposer, &[request(1, &tokens, 0, 2)]).unwrap();
    let outside = [1, 2, 3, 4, 5, 9999];
    let err = draft(&mut proposer, &[request(1, &outside, 4, 2)]).unwrap_err();
    assert!(
        matches!(err, ProposeError::TokenOutOfVocab { token: 9999, .. }),
        "{err}"
    );
    let err = draft(
        &mut proposer,
        &[request(2, &tokens, 0, 2), request(3, &tokens, 0, 2)],
    )
    .unwrap_err();
    assert!(matches!(err, ProposeError::NoFreeSlot { .. }), "{err}");
    assert_eq!(proposer.cached_rows(1), Some(6));
    assert_eq!(
        (proposer.num_requests(), proposer.cached_rows(2)),
        (1, None)
    );

    let mut wider = fixture.target.config().clone();
    wider.vocab_size += 1;
    let config = DraftModelProposerConfig::greedy(2);
    let err = DraftModelProposer::new(other_model(&fixture), &wider, config, 1).unwrap_err();
    assert_eq!(
        err,
        DraftModelError::VocabMismatch {
            draft: wider.vocab_size - 1,
            target: wider.vocab_size
        }
    );
    let mut longer_context = fixture.target.config().clone();
    longer_context.max_position_embeddings += 1;
    let err =
        DraftModelProposer::new(other_model(&fixture), &longer_context, config, 1).unwrap_err();
    assert!(matches!(err, DraftModelError::ShortContext { .. }), "{err}");
    let target = fixture.target.config();
    let err = DraftModelProposer::new(other_model(&fixture), target, config, 0).unwrap_err();
    assert_eq!(err, DraftModelError::NoSlots);
    let mut deeper = fixture.target.config().clone();
    deeper.num_hidden_layers += 1;
    let copying = DraftModelProposerConfig {
        copies_target_cache: true,
        ..config
    };
    let err = DraftModelProposer::new(other_model(&fixture), &deeper, copying, 1).unwrap_err();
    assert!(
        matches!(err, DraftModelError::CacheMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("3 layers"), "{err}");
}
