//! Stochastic chain verification: the emitted tokens follow the target distribution (for
//! sampled drafts with q and deterministic drafts with one-hot q), seeded determinism,
//! filter support, and degenerate inputs.

use crate::sampling_support;

use aquila_spec_decode::rejection::{
    ChainRequest, DraftProbs, RejectionSampler, TargetRows, VerifyOutcome,
};
use aquila_spec_decode::sampling::{probabilities, sample, RequestRng, SamplingConfig};
use sampling_support::{histogram, random_distribution, random_logits, total_variation, tv_bound};

/// Verifies one chain against probability rows.
fn verify_probs(
    p: &[f32],
    drafts: &[u32],
    q: DraftProbs,
    vocab: usize,
    rng: &mut RequestRng,
) -> VerifyOutcome {
    RejectionSampler::new(vocab)
        .unwrap()
        .verify_chain(ChainRequest {
            config: &SamplingConfig::default(),
            target: TargetRows::Probs(p),
            draft_tokens: drafts,
            draft_probs: q,
            rng,
        })
        .unwrap()
}

/// Per-position histograms of emitted tokens over many verifications, plus the number of
/// verifications that accepted the first draft.
struct Emitted {
    by_position: Vec<Vec<u32>>,
    first_accepted: usize,
}

fn run_trials(
    trials: usize,
    k: usize,
    mut verify: impl FnMut(&mut RequestRng) -> VerifyOutcome,
) -> Emitted {
    let mut rng = RequestRng::new(2024);
    let mut by_position = vec![Vec::new(); k + 1];
    let mut first_accepted = 0;
    for _ in 0..trials {
        let outcome = verify(&mut rng);
        first_accepted += usize::from(outcome.num_accepted() > 0);
        for (position, &token) in outcome.tokens.iter().enumerate() {
            by_position[position].push(token);
        }
    }
    Emitted {
        by_position,
        first_accepted,
    }
}

/// Checks every position's emitted-token law against its target row (`p` rows do not depend
/// on the accepted prefix here, so token `i`, when emitted, is distributed as row `i`).
fn assert_matches_target(emitted: &Emitted, p: &[f32], vocab: usize) {
    for (position, samples) in emitted.by_position.iter().enumerate() {
        if samples.len() < 5_000 {
            continue;
        }
        let row = &p[position * vocab..(position + 1) * vocab];
        let tv = total_variation(&histogram(samples, vocab), row);
        let bound = tv_bound(vocab, samples.len());
        assert!(
            tv < bound,
            "position {position}: TV {tv:.4} >= bound {bound:.4} over {} samples",
            samples.len()
        );
    }
}

const VOCAB: usize = 10;
const K: usize = 2;
const TRIALS: usize = 100_000;

#[test]
fn sampled_drafts_with_q_give_the_target_distribution() {
    let mut setup = RequestRng::new(7);
    let p: Vec<f32> = (0..=K)
        .flat_map(|_| random_distribution(VOCAB, &mut setup))
        .collect();
    let q: Vec<f32> = (0..K)
        .flat_map(|_| random_distribution(VOCAB, &mut setup))
        .collect();
    // The test can fail: emitting the drafts (law q) would be far outside the bound.
    let q0: Vec<f64> = q[..VOCAB].iter().map(|&x| f64::from(x)).collect();
    assert!(total_variation(&q0, &p[..VOCAB]) > 4.0 * tv_bound(VOCAB, TRIALS));

    let emitted = run_trials(TRIALS, K, |rng| {
        let drafts: Vec<u32> = (0..K)
            .map(|i| sample(&q[i * VOCAB..(i + 1) * VOCAB], rng))
            .collect();
        verify_probs(&p, &drafts, DraftProbs::Rows(&q), VOCAB, rng)
    });
    assert_matches_target(&emitted, &p, VOCAB);

    // Acceptance rate of the first draft is Σ min(p, q) (Leviathan et al.).
    let alpha: f64 = p[..VOCAB]
        .iter()
        .zip(&q[..VOCAB])
        .map(|(&a, &b)| f64::from(a.min(b)))
        .sum();
    let rate = emitted.first_accepted as f64 / TRIALS as f64;
    let hoeffding = ((2.0 / 1e-6f64).ln() / (2.0 * TRIALS as f64)).sqrt();
    assert!(
        (rate - alpha).abs() < hoeffding,
        "acceptance {rate:.4} vs expected {alpha:.4}"
    );
}

#[test]
fn deterministic_drafts_with_one_hot_q_give_the_target_distribution() {
    let mut setup = RequestRng::new(8);
    let p: Vec<f32> = (0..=K)
        .flat_map(|_| random_distribution(VOCAB, &mut setup))
        .collect();
    let drafts = [3u32, 6];
    let emitted = run_trials(TRIALS, K, |rng| {
        verify_probs(&p, &drafts, DraftProbs::OneHot, VOCAB, rng)
    });
    assert_matches_target(&emitted, &p, VOCAB);
    let rate = emitted.first_accepted as f64 / TRIALS as f64;
    assert!(
        (rate - f64::from(p[3])).abs() < 0.01,
        "acceptance {rate} vs p(x) {}",
        p[3]
    );
}

#[test]
fn identical_draft_and_target_always_accept() {
    let mut setup = RequestRng::new(9);
    let p: Vec<f32> = (0..=K)
        .flat_map(|_| random_distribution(VOCAB, &mut setup))
        .collect();
    let q = p[..K * VOCAB].to_vec();
    let mut rng = RequestRng::new(1);
    for _ in 0..2_000 {
        let drafts: Vec<u32> = (0..K)
            .map(|i| sample(&q[i * VOCAB..(i + 1) * VOCAB], &mut rng))
            .collect();
        let outcome = verify_probs(&p, &drafts, DraftProbs::Rows(&q), VOCAB, &mut rng);
        assert_eq!(outcome.num_accepted(), K);
        assert_eq!(outcome.path, vec![0, 1, 2]);
    }
}

/// A batch of `batch` requests over random logits; request 0 always uses `seed`, the others
/// use seeds derived from `others`.
fn seeded_batch(k: usize, batch: usize, seed: u64, others: u64) -> Vec<VerifyOutcome> {
    const V: usize = 1000;
    let config = SamplingConfig::default();
    let mut setup = RequestRng::new(5);
    let (logits, drafts): (Vec<Vec<f32>>, Vec<Vec<u32>>) = (0..batch)
        .map(|_| {
            let logits = random_logits((k + 1) * V, 3.0, &mut setup);
            let drafts = (0..k)
                .map(|_| (setup.uniform() * V as f64) as u32)
                .collect();
            (logits, drafts)
        })
        .unzip();
    let mut rngs: Vec<RequestRng> = (0..batch as u64)
        .map(|i| RequestRng::new(if i == 0 { seed } else { others + i }))
        .collect();
    let requests = rngs
        .iter_mut()
        .enumerate()
        .map(|(i, rng)| ChainRequest {
            config: &config,
            target: TargetRows::Logits {
                logits: &logits[i],
                prompt: &[],
                output: &[],
            },
            draft_tokens: &drafts[i],
            draft_probs: DraftProbs::OneHot,
            rng,
        })
        .collect();
    RejectionSampler::new(V)
        .unwrap()
        .verify_chain_batch(requests)
        .unwrap()
}

#[test]
fn seeded_requests_are_deterministic_whatever_the_batch() {
    for k in [1, 3, 5] {
        let alone = seeded_batch(k, 1, 42, 0)[0].clone();
        for batch in [1, 4, 8] {
            for repeat in 0..5 {
                let outcome = &seeded_batch(k, batch, 42, 1000 * repeat)[0];
                assert_eq!(outcome, &alone, "k {k} batch {batch} repeat {repeat}");
            }
        }
    }
    let outcomes: Vec<Vec<u32>> = (0..20)
        .map(|seed| seeded_batch(3, 1, seed, 0)[0].tokens.clone())
        .collect();
    assert!(
        outcomes.iter().any(|o| o != &outcomes[0]),
        "different seeds must give different outputs"
    );
}

/// Runs random-logit chains under `config` and checks every emitted token lies in the support
/// of its row's processed distribution.
fn assert_emitted_within_support(config: SamplingConfig) {
    const V: usize = 100;
    const DRAFTS: usize = 3;
    let mut rng = RequestRng::new(77);
    let sampler = RejectionSampler::new(V).unwrap();
    for _ in 0..300 {
        let logits = random_logits((DRAFTS + 1) * V, 4.0, &mut rng);
        // Drafts from the unfiltered softmax: they are often outside the allowed set.
        let drafts: Vec<u32> = (0..DRAFTS)
            .map(|i| {
                sample(
                    &probabilities(&logits[i * V..(i + 1) * V], &SamplingConfig::default()),
                    &mut rng,
                )
            })
            .collect();
        let outcome = sampler
            .verify_chain(ChainRequest {
                config: &config,
                target: TargetRows::Logits {
                    logits: &logits,
                    prompt: &[],
                    output: &[],
                },
                draft_tokens: &drafts,
                draft_probs: DraftProbs::OneHot,
                rng: &mut rng,
            })
            .unwrap();
        for (row, &token) in outcome.tokens.iter().enumerate() {
            let allowed = probabilities(&logits[row * V..(row + 1) * V], &config);
            assert!(
                allowed[token as usize] > 0.0,
                "{config:?}: token {token} at row {row} is filtered out"
            );
        }
    }
}

#[test]
fn top_k_emits_only_allowed_tokens() {
    for top_k in [1, 5, 99] {
        assert_emitted_within_support(SamplingConfig {
            top_k,
            ..SamplingConfig::default()
        });
    }
}

#[test]
fn top_p_emits_only_allowed_tokens() {
    for top_p in [0.5, 0.9, 0.99] {
        assert_emitted_within_support(SamplingConfig {
            top_p,
            ..SamplingConfig::default()
        });
    }
}

#[test]
fn placeholder_draft_ids_are_rejected_without_indexing() {
    let p = vec![0.25f32; 2 * 4];
    let q = vec![0.25f32; 4];
    let mut rng = RequestRng::new(3);
    for draft_probs in [DraftProbs::OneHot, DraftProbs::Rows(&q)] {
        for _ in 0..100 {
            let outcome = verify_probs(&p, &[u32::MAX], draft_probs, 4, &mut rng);
            assert_eq!(outcome.num_accepted(), 0);
            assert!(outcome.tokens[0] < 4);
        }
    }
}

#[test]
fn zero_draft_probability_rejects_and_recovers_from_p() {
    // p == q with q(x) = 0: the draft x is always rejected, the residual max(0, p - q) is 0
    // everywhere, and the recovered token falls back to p.
    let p = [0.5f32, 0.0, 0.3, 0.2, 0.5, 0.0, 0.3, 0.2];
    let q = &p[..4];
    let mut rng = RequestRng::new(4);
    let mut recovered = Vec::new();
    for _ in 0..20_000 {
        let outcome = verify_probs(&p, &[1], DraftProbs::Rows(q), 4, &mut rng);
        assert_eq!(outcome.num_accepted(), 0);
        recovered.push(outcome.tokens[0]);
    }
    let tv = total_variation(&histogram(&recovered, 4), &p[..4]);
    assert!(tv < tv_bound(4, recovered.len()), "TV {tv}");
}

#[test]
fn recovered_tokens_respect_the_vocabulary_boundary() {
    for vocab in [100usize, 8193, 10_000] {
        let mut p = vec![0.0f32; 2 * vocab];
        p[vocab - 1] = 1.0;
        p[2 * vocab - 1] = 1.0;
        let uniform = vec![1.0 / vocab as f32; vocab];
        let mut rng = RequestRng::new(vocab as u64);
        for draft_probs in [DraftProbs::OneHot, DraftProbs::Rows(&uniform)] {
            let outcome = verify_probs(&p, &[0], draft_probs, vocab, &mut rng);
            assert_eq!(outcome.tokens, vec![vocab as u32 - 1], "vocab {vocab}");
        }
    }
}

#[test]
fn broken_target_rows_never_yield_nan_or_out_of_vocabulary_ids() {
    let p = [f32::NAN, -1.0, f32::INFINITY, 0.0, 0.0, 0.0, 0.0, 0.0];
    let q = [f32::NAN, 0.0, 0.0, 0.0];
    let mut rng = RequestRng::new(5);
    for draft_probs in [DraftProbs::OneHot, DraftProbs::Rows(&q)] {
        let outcome = verify_probs(&p, &[1], draft_probs, 4, &mut rng);
        assert_eq!(outcome.num_accepted(), 0);
        assert!(outcome.tokens.iter().all(|&t| t < 4), "{outcome:?}");
    }
}

#[test]
fn near_zero_temperature_matches_greedy() {
    const V: usize = 50;
    let mut rng = RequestRng::new(6);
    let sampler = RejectionSampler::new(V).unwrap();
    let cold = SamplingConfig {
        temperature: 1e-5,
        ..SamplingConfig::default()
    };
    for _ in 0..50 {
        let logits = random_logits(4 * V, 5.0, &mut rng);
        let drafts: Vec<u32> = (0..3)
            .map(|i| aquila_spec_decode::sampling::greedy(&logits[i * V..(i + 1) * V]))
            .collect();
        let verify = |config: &SamplingConfig, rng: &mut RequestRng| {
            sampler
                .verify_chain(ChainRequest {
                    config,
                    target: TargetRows::Logits {
                        logits: &logits,
                        prompt: &[],
                        output: &[],
                    },
                    draft_tokens: &drafts,
                    draft_probs: DraftProbs::OneHot,
                    rng,
                })
                .unwrap()
        };
        let greedy = verify(&SamplingConfig::greedy(), &mut rng);
        assert_eq!(greedy.num_accepted(), 3);
        assert_eq!(verify(&cold, &mut rng), greedy);
    }
}
