//! Helpers shared by the sampling, rejection and tree integration tests: random
//! distributions, histograms and the total-variation bound used by the statistical tests.
//!
//! # The statistical bound
//! For `n` independent samples from a distribution `p` over `v` outcomes, the empirical
//! histogram `p̂` satisfies `E[TV(p̂, p)] <= ½ Σ_i sqrt(p_i (1 - p_i) / n) <= ½ sqrt((v - 1) / n)`
//! (Cauchy-Schwarz), and TV is a function of the samples with bounded differences `1 / n`,
//! so McDiarmid's inequality gives `P(TV >= E[TV] + t) <= exp(-2 n t²)`. [`tv_bound`] returns
//! `½ sqrt((v - 1) / n) + sqrt(ln(1 / δ) / (2 n))` with `δ = 1e-6`: a correct sampler fails a
//! test at a fixed seed with probability below one in a million, while a sampler off by more
//! than the bound fails it.

#![allow(dead_code)]

use aquila_spec_decode::sampling::RequestRng;

/// A random distribution over `vocab` tokens with every entry positive.
pub fn random_distribution(vocab: usize, rng: &mut RequestRng) -> Vec<f32> {
    let weights: Vec<f64> = (0..vocab).map(|_| 0.05 + rng.uniform()).collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| (w / total) as f32).collect()
}

/// Random logits in `[-scale, scale)`.
pub fn random_logits(vocab: usize, scale: f32, rng: &mut RequestRng) -> Vec<f32> {
    (0..vocab)
        .map(|_| (rng.uniform() as f32 * 2.0 - 1.0) * scale)
        .collect()
}

/// Normalized histogram of `samples` over `vocab` outcomes.
pub fn histogram(samples: &[u32], vocab: usize) -> Vec<f64> {
    let mut counts = vec![0.0; vocab];
    for &s in samples {
        counts[s as usize] += 1.0;
    }
    counts.iter().map(|c| c / samples.len() as f64).collect()
}

/// Total variation distance between two distributions given as `f64` and `f32` vectors.
pub fn total_variation(empirical: &[f64], expected: &[f32]) -> f64 {
    assert_eq!(empirical.len(), expected.len());
    0.5 * empirical
        .iter()
        .zip(expected)
        .map(|(a, &b)| (a - f64::from(b)).abs())
        .sum::<f64>()
}

/// The TV distance a correct sampler stays under with probability `1 - 1e-6` (module docs).
pub fn tv_bound(vocab: usize, samples: usize) -> f64 {
    let n = samples as f64;
    0.5 * ((vocab as f64 - 1.0) / n).sqrt() + ((1e6f64).ln() / (2.0 * n)).sqrt()
}

/// `softmax(logits / temperature)` in f64, as the reference for pipeline tests.
pub fn reference_softmax(logits: &[f32], temperature: f32) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = logits
        .iter()
        .map(|&x| (f64::from(x - max) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|x| (x / total) as f32).collect()
}
