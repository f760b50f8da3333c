//! Log-probabilities of tokens under a logit vector.
//!
//! These functions compute the log-softmax of whatever logits they are given. vLLM returns the
//! raw model's log-probabilities by default, so the engine passes the raw logits (before
//! penalties, temperature and filters) to match it; passing processed logits gives the
//! log-probabilities of the distribution actually sampled from.

use super::exp::exp;
use super::filters::top_n_indices;
use super::reduce::{max_value, sum_mapped};

/// `ln Σ exp(logits)`, with max-subtraction and an f64 sum; NaN entries are skipped.
///
/// `-inf` when no entry is above `-inf`, `+inf` when one is `+inf`.
pub fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = max_value(logits);
    if !max.is_finite() {
        return max;
    }
    // The vectorized exp maps NaN to 0, which skips it.
    max + sum_mapped(logits, |x| exp(x - max)).ln() as f32
}

/// The log-probability of `token` under `softmax(logits)`; `-inf` for a NaN logit or an id
/// outside `logits`.
pub fn logprob(logits: &[f32], token: u32) -> f32 {
    match logits.get(token as usize) {
        Some(&x) if !x.is_nan() => x - log_sum_exp(logits),
        _ => f32::NEG_INFINITY,
    }
}

/// The `n` most likely tokens under `softmax(logits)` with their log-probabilities, most likely
/// first; equal logits are listed lowest id first and NaN logits are never listed.
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let normalizer = log_sum_exp(logits);
    top_n_indices(logits, n)
        .into_iter()
        .map(|i| (i, logits[i as usize] - normalizer))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sum_exp_matches_direct_formula_and_survives_large_logits() {
        let logits = [1.0f32, 2.0, 3.0];
        let direct = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln() as f32;
        assert!((log_sum_exp(&logits) - direct).abs() < 1e-6);
        let large = [1000.0f32, 1000.0];
        assert!((log_sum_exp(&large) - (1000.0 + 2f32.ln())).abs() < 1e-3);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }

    #[test]
    fn top_logprobs_are_sorted_normalized_and_tie_broken_by_id() {
        let logits = [0.0f32, 2.0, 1.0, 2.0, f32::NAN];
        let top = top_logprobs(&logits, 3);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        let total: f32 = [0.0f32, 2.0, 1.0, 2.0]
            .iter()
            .map(|&x| (x - log_sum_exp(&logits)).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((top[0].1 - logprob(&logits, 1)).abs() < 1e-7);
        assert_eq!(top_logprobs(&logits, 0), vec![]);
        assert_eq!(top_logprobs(&logits, 10).len(), 4);
    }

    #[test]
    fn logprob_of_unknown_token_is_negative_infinity() {
        assert_eq!(logprob(&[0.0, 1.0], 7), f32::NEG_INFINITY);
        assert_eq!(logprob(&[f32::NAN, 1.0], 0), f32::NEG_INFINITY);
        assert!((logprob(&[0.0, 0.0], 1) - 0.5f32.ln()).abs() < 1e-7);
    }
}
