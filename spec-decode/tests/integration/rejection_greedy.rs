//! Greedy chain verification: vLLM's rejection-sampler greedy cases, in-flight penalties,
//! placeholders and input validation.

use aquila_spec_decode::rejection::{
    ChainRequest, DraftProbs, RejectionError, RejectionSampler, TargetRows, VerifyOutcome,
};
use aquila_spec_decode::sampling::{RequestRng, SamplingConfig};

const VOCAB: usize = 100;

/// vLLM's fixture: one row per target token, +100 at the token and -100 elsewhere.
fn one_hot_logits(target_tokens: &[u32]) -> Vec<f32> {
    let mut logits = vec![-100.0; target_tokens.len() * VOCAB];
    for (row, &t) in target_tokens.iter().enumerate() {
        logits[row * VOCAB + t as usize] = 100.0;
    }
    logits
}

/// Verifies a greedy batch: `drafts[i]` against target argmax rows `targets[i]` (k + 1 rows).
fn verify_batch(drafts: &[&[u32]], targets: &[&[u32]]) -> Vec<Vec<u32>> {
    let config = SamplingConfig::greedy();
    let logits: Vec<Vec<f32>> = targets.iter().map(|t| one_hot_logits(t)).collect();
    let mut rngs: Vec<RequestRng> = (0..drafts.len() as u64).map(RequestRng::new).collect();
    let requests = drafts
        .iter()
        .zip(&logits)
        .zip(rngs.iter_mut())
        .map(|((draft, logits), rng)| ChainRequest {
            config: &config,
            target: TargetRows::Logits {
                logits,
                prompt: &[],
                output: &[],
            },
            draft_tokens: draft,
            draft_probs: DraftProbs::OneHot,
            rng,
        })
        .collect();
    let sampler = RejectionSampler::new(VOCAB).unwrap();
    let outcomes = sampler.verify_chain_batch(requests).unwrap();
    outcomes.into_iter().map(|o| o.tokens).collect()
}

#[test]
fn perfect_match_appends_the_bonus_token() {
    assert_eq!(
        verify_batch(&[&[1, 2, 3]], &[&[1, 2, 3, 4]]),
        vec![vec![1, 2, 3, 4]]
    );
}

#[test]
fn early_mismatch_stops_at_the_target_token() {
    assert_eq!(
        verify_batch(&[&[1, 2, 3]], &[&[1, 5, 3, 4]]),
        vec![vec![1, 5]]
    );
}

#[test]
fn multiple_sequences_are_independent() {
    assert_eq!(
        verify_batch(&[&[1, 2], &[3]], &[&[1, 2, 5], &[3, 4]]),
        vec![vec![1, 2, 5], vec![3, 4]]
    );
}

#[test]
fn single_token_sequence() {
    assert_eq!(verify_batch(&[&[1]], &[&[1, 2]]), vec![vec![1, 2]]);
}

#[test]
fn empty_sequence_emits_only_the_bonus_token() {
    assert_eq!(verify_batch(&[&[]], &[&[5]]), vec![vec![5]]);
}

#[test]
fn multiple_mismatches() {
    assert_eq!(
        verify_batch(&[&[1, 2, 3], &[4, 5, 6]], &[&[1, 2, 7, 6], &[4, 8, 6, 9]]),
        vec![vec![1, 2, 7], vec![4, 8]]
    );
}

/// One batch: drafts per request, target argmax rows per request, expected emitted tokens.
type BatchCase = (
    &'static [&'static [u32]],
    &'static [&'static [u32]],
    &'static [&'static [u32]],
);

#[test]
fn parametrized_cases() {
    let cases: [BatchCase; 3] = [
        (&[&[1, 2]], &[&[1, 2, 3]], &[&[1, 2, 3]]),
        (&[&[1]], &[&[2, 3]], &[&[2]]),
        (
            &[&[1, 2], &[3, 4]],
            &[&[1, 5, 6], &[3, 4, 7]],
            &[&[1, 5], &[3, 4, 7]],
        ),
    ];
    for (drafts, targets, expected) in cases {
        assert_eq!(verify_batch(drafts, targets), expected, "drafts {drafts:?}");
    }
}

fn greedy_chain(
    config: &SamplingConfig,
    logits: &[f32],
    prompt: &[u32],
    output: &[u32],
    drafts: &[u32],
    vocab: usize,
) -> VerifyOutcome {
    RejectionSampler::new(vocab)
        .unwrap()
        .verify_chain(ChainRequest {
            config,
            target: TargetRows::Logits {
                logits,
                prompt,
                output,
            },
            draft_tokens: drafts,
            draft_probs: DraftProbs::OneHot,
            rng: &mut RequestRng::new(0),
        })
        .unwrap()
}

#[test]
fn penalties_see_the_drafts_before_each_row() {
    // Row 0 prefers token 3; row 1 prefers 3 (2.0) over 5 (1.5) unless 3 is penalized as output.
    let mut logits = vec![0.0f32; 3 * 8];
    logits[3] = 2.0;
    logits[8 + 3] = 2.0;
    logits[8 + 5] = 1.5;
    logits[16 + 1] = 1.0;
    let plain = SamplingConfig::greedy();
    assert_eq!(
        greedy_chain(&plain, &logits, &[], &[], &[3, 5], 8).tokens,
        vec![3, 3]
    );

    let frequency = SamplingConfig {
        frequency_penalty: 1.0,
        ..SamplingConfig::greedy()
    };
    // Draft 3 is not yet output at row 0 (accepted), and is at row 1 (2.0 - 1.0 < 1.5).
    let outcome = greedy_chain(&frequency, &logits, &[], &[], &[3, 5], 8);
    assert_eq!(outcome.tokens, vec![3, 5, 1]);
    assert_eq!(outcome.path, vec![0, 1, 2]);

    // Committed output counts too: token 3 already generated once rejects draft 3 at row 0.
    let outcome = greedy_chain(&frequency, &logits, &[], &[3, 3, 3], &[3, 5], 8);
    assert_eq!(outcome.tokens, vec![0]);
}

#[test]
fn repetition_penalty_sees_the_prompt() {
    let mut logits = vec![0.0f32; 2 * 4];
    logits[1] = 3.0;
    logits[2] = 2.0;
    let config = SamplingConfig {
        repetition_penalty: 2.0,
        ..SamplingConfig::greedy()
    };
    // Token 1 in the prompt: 3.0 / 2 < 2.0, so the target picks 2 and rejects draft 1.
    assert_eq!(
        greedy_chain(&config, &logits, &[1], &[], &[1], 4).tokens,
        vec![2]
    );
    assert_eq!(
        greedy_chain(&config, &logits, &[0], &[], &[1], 4).tokens,
        vec![1, 0]
    );
}

#[test]
fn probability_rows_verify_like_logit_rows() {
    let logits = one_hot_logits(&[4, 9, 2]);
    let probs: Vec<f32> = logits
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { 0.0 })
        .collect();
    let outcome = RejectionSampler::new(VOCAB)
        .unwrap()
        .verify_chain(ChainRequest {
            config: &SamplingConfig::greedy(),
            target: TargetRows::Probs(&probs),
            draft_tokens: &[4, 9],
            draft_probs: DraftProbs::OneHot,
            rng: &mut RequestRng::new(0),
        })
        .unwrap();
    assert_eq!(outcome.tokens, vec![4, 9, 2]);
    assert_eq!(outcome.accepted_tokens(), &[4, 9]);
    assert_eq!(outcome.next_token(), 2);
    assert_eq!(outcome.num_accepted(), 2);
}

#[test]
fn placeholder_draft_ids_are_rejected() {
    let logits = one_hot_logits(&[7, 8]);
    let outcome = greedy_chain(
        &SamplingConfig::greedy(),
        &logits,
        &[],
        &[],
        &[u32::MAX],
        VOCAB,
    );
    assert_eq!(outcome.tokens, vec![7]);
}

#[test]
fn malformed_requests_are_errors_that_name_the_problem() {
    let sampler = RejectionSampler::new(4).unwrap();
    let config = SamplingConfig::default();
    let logits = vec![0.0; 8];
    let err = sampler
        .verify_chain(ChainRequest {
            config: &config,
            target: TargetRows::Probs(&logits),
            draft_tokens: &[1, 2],
            draft_probs: DraftProbs::OneHot,
            rng: &mut RequestRng::new(0),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "target probabilities has 8 values, expected 3 rows x 4 = 12"
    );

    let err = sampler
        .verify_chain(ChainRequest {
            config: &config,
            target: TargetRows::Probs(&logits),
            draft_tokens: &[1],
            draft_probs: DraftProbs::Rows(&[0.25; 3]),
            rng: &mut RequestRng::new(0),
        })
        .unwrap_err();
    assert!(matches!(
        err,
        RejectionError::RowShape {
            what: "draft probabilities",
            rows: 1,
            ..
        }
    ));

    let bad = SamplingConfig {
        top_p: 1.5,
        ..SamplingConfig::default()
    };
    let err = sampler
        .verify_chain(ChainRequest {
            config: &bad,
            target: TargetRows::Probs(&logits),
            draft_tokens: &[1],
            draft_probs: DraftProbs::OneHot,
            rng: &mut RequestRng::new(0),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid sampling config: top_p must be in (0, 1], got 1.5"
    );

    assert_eq!(
        RejectionSampler::new(0).unwrap_err(),
        RejectionError::EmptyVocabulary
    );
}

#[test]
fn a_bad_request_fails_the_batch_before_any_stream_advances() {
    let sampler = RejectionSampler::new(2).unwrap();
    let config = SamplingConfig::default();
    let good = vec![0.5f32; 4];
    let short = vec![0.5f32; 3];
    let mut rng_a = RequestRng::new(1);
    let mut rng_b = RequestRng::new(2);
    let err = sampler
        .verify_chain_batch(vec![
            ChainRequest {
                config: &config,
                target: TargetRows::Probs(&good),
                draft_tokens: &[0],
                draft_probs: DraftProbs::OneHot,
                rng: &mut rng_a,
            },
            ChainRequest {
                config: &config,
                target: TargetRows::Probs(&short),
                draft_tokens: &[0],
                draft_probs: DraftProbs::OneHot,
                rng: &mut rng_b,
            },
        ])
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("request 1 of the batch: target probabilities"));
    assert_eq!(rng_a.next_u64(), RequestRng::new(1).next_u64());
}
