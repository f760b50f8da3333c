//! Verification cost for a batch of 8 requests with k = 4 drafts over a 49 152-token vocabulary
//! (SmolLM2's), plus the single-row pipeline pieces it is made of.
//!
//! Drafts are the target's argmax tokens, so greedy requests accept everything and visit all
//! k + 1 rows (the worst case); stochastic requests accept each draft with probability p(x).
//!
//! Run: `cargo bench -p aquila-spec-decode --no-default-features --bench rejection`.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use aquila_spec_decode::rejection::{ChainRequest, DraftProbs, RejectionSampler, TargetRows};
use aquila_spec_decode::sampling::{greedy, probabilities, sample, RequestRng, SamplingConfig};

const VOCAB: usize = 49_152;
const BATCH: usize = 8;
const K: usize = 4;

/// Random logits shaped like a language model's: mostly flat noise with a few strong tokens.
fn model_like_logits(rows: usize, rng: &mut RequestRng) -> Vec<f32> {
    let mut logits: Vec<f32> = (0..rows * VOCAB)
        .map(|_| (rng.uniform() as f32) * 8.0 - 4.0)
        .collect();
    for row in 0..rows {
        for _ in 0..5 {
            let token = (rng.uniform() * VOCAB as f64) as usize;
            logits[row * VOCAB + token] = 9.0 + rng.uniform() as f32 * 4.0;
        }
    }
    logits
}

struct Batch {
    logits: Vec<Vec<f32>>,
    drafts: Vec<Vec<u32>>,
    q: Vec<Vec<f32>>,
}

fn batch() -> Batch {
    let mut rng = RequestRng::new(1);
    let logits: Vec<Vec<f32>> = (0..BATCH)
        .map(|_| model_like_logits(K + 1, &mut rng))
        .collect();
    let drafts = logits
        .iter()
        .map(|l| {
            (0..K)
                .map(|i| greedy(&l[i * VOCAB..(i + 1) * VOCAB]))
                .collect()
        })
        .collect();
    let q = logits
        .iter()
        .map(|l| {
            (0..K)
                .flat_map(|i| {
                    probabilities(&l[i * VOCAB..(i + 1) * VOCAB], &SamplingConfig::default())
                })
                .collect()
        })
        .collect();
    Batch { logits, drafts, q }
}

fn verify_batch(
    batch: &Batch,
    config: &SamplingConfig,
    with_q: bool,
    rngs: &mut [RequestRng],
) -> usize {
    let sampler = RejectionSampler::new(VOCAB).unwrap();
    let requests = rngs
        .iter_mut()
        .enumerate()
        .map(|(i, rng)| ChainRequest {
            config,
            target: TargetRows::Logits {
                logits: &batch.logits[i],
                prompt: &[1, 2, 3],
                output: &[4, 5],
            },
            draft_tokens: &batch.drafts[i],
            draft_probs: if with_q {
                DraftProbs::Rows(&batch.q[i])
            } else {
                DraftProbs::OneHot
            },
            rng,
        })
        .collect();
    let outcomes = sampler.verify_chain_batch(requests).unwrap();
    outcomes.iter().map(|o| o.tokens.len()).sum()
}

fn bench_verification(c: &mut Criterion) {
    let batch = batch();
    let mut group = c.benchmark_group("verify_batch8_k4_vocab49152");
    group.throughput(Throughput::Elements(BATCH as u64));
    let cases = [
        ("greedy", SamplingConfig::greedy(), false),
        (
            "greedy_penalties",
            SamplingConfig {
                repetition_penalty: 1.1,
                ..SamplingConfig::greedy()
            },
            false,
        ),
        ("sampled_one_hot_q", SamplingConfig::default(), false),
        ("sampled_with_q", SamplingConfig::default(), true),
        (
            "sampled_topk50_topp0.9_one_hot_q",
            SamplingConfig {
                top_k: 50,
                top_p: 0.9,
                ..SamplingConfig::default()
            },
            false,
        ),
        (
            "sampled_topp0.9_one_hot_q",
            SamplingConfig {
                top_p: 0.9,
                ..SamplingConfig::default()
            },
            false,
        ),
    ];
    for (name, config, with_q) in cases {
        let mut seed = 0;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    seed += 1;
                    (0..BATCH as u64)
                        .map(|i| RequestRng::new(seed * 100 + i))
                        .collect::<Vec<_>>()
                },
                |mut rngs| black_box(verify_batch(&batch, &config, with_q, &mut rngs)),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn bench_pipeline(c: &mut Criterion) {
    let mut rng = RequestRng::new(2);
    let logits = model_like_logits(1, &mut rng);
    let mut group = c.benchmark_group("pipeline_row_vocab49152");
    group.bench_function("greedy", |b| b.iter(|| greedy(black_box(&logits))));
    for (name, config) in [
        ("probabilities_plain", SamplingConfig::default()),
        (
            "probabilities_topk50",
            SamplingConfig {
                top_k: 50,
                ..SamplingConfig::default()
            },
        ),
        (
            "probabilities_topp0.9",
            SamplingConfig {
                top_p: 0.9,
                ..SamplingConfig::default()
            },
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| probabilities(black_box(&logits), &config))
        });
    }
    let probs = probabilities(&logits, &SamplingConfig::default());
    group.bench_function("sample", |b| b.iter(|| sample(black_box(&probs), &mut rng)));
    group.finish();
}

criterion_group!(benches, bench_verification, bench_pipeline);
criterion_main!(benches);
