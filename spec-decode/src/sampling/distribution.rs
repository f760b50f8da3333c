//! Logits → the probability vector a request samples from.

use super::categorical::{greedy, total_weight};
use super::exp::exp;
use super::filters::{keep_top_p, kth_largest};
use super::reduce::max_value;
use super::SamplingConfig;

/// The distribution `cfg` samples from, given (already penalized) `logits`: temperature →
/// min-p → top-k → top-p → softmax, in f32 with max-subtraction.
///
/// The result has one entry per logit, sums to 1 (up to rounding) and is exactly 0 outside the
/// kept set. Greedy configurations give the one-hot vector of [`greedy`]. NaN logits get
/// probability 0; if some logits are `+inf`, the mass is spread evenly over them; if none is
/// above `-inf`, the result is one-hot on token 0. `cfg` is assumed valid
/// ([`SamplingConfig::validate`]).
///
/// # Panics
/// If `logits` is empty.
pub fn probabilities(logits: &[f32], cfg: &SamplingConfig) -> Vec<f32> {
    let mut probs = Vec::new();
    probabilities_into(logits, cfg, &mut probs);
    probs
}

/// [`probabilities`] written into `probs` (resized to `logits.len()`), reusing its allocation.
///
/// # Panics
/// If `logits` is empty.
pub fn probabilities_into(logits: &[f32], cfg: &SamplingConfig, probs: &mut Vec<f32>) {
    probs.clear();
    probs.resize(logits.len(), 0.0);
    let max = max_value(logits);
    if cfg.is_greedy() || max == f32::NEG_INFINITY {
        probs[greedy(logits) as usize] = 1.0;
        return;
    }
    if max == f32::INFINITY {
        let count = logits.iter().filter(|&&x| x == f32::INFINITY).count();
        for (p, &x) in probs.iter_mut().zip(logits) {
            *p = if x == f32::INFINITY {
                1.0 / count as f32
            } else {
                0.0
            };
        }
        return;
    }
    // Scaled logits, <= 0 with the maximum at 0; NaN becomes -inf.
    let temperature = cfg.temperature;
    for (s, &x) in probs.iter_mut().zip(logits) {
        let scaled = (x - max) / temperature;
        *s = if scaled.is_nan() {
            f32::NEG_INFINITY
        } else {
            scaled
        };
    }
    let top_k_cut = if cfg.top_k > 0 && cfg.top_k < probs.len() {
        kth_largest(probs, cfg.top_k)
    } else {
        f32::NEG_INFINITY
    };
    // exp(s) = p / p_max, so min-p keeps exp(s) >= min_p.
    let min_p = cfg.min_p;
    for s in probs.iter_mut() {
        let e = exp(*s);
        *s = if (*s >= top_k_cut) & (e >= min_p) {
            e
        } else {
            0.0
        };
    }
    let mut total = total_weight(probs);
    if cfg.top_p < 1.0 {
        total = keep_top_p(probs, total, cfg.top_p);
    }
    let scale = (1.0 / total) as f32;
    for p in probs.iter_mut() {
        *p *= scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn softmax(logits: &[f32]) -> Vec<f32> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = logits.iter().map(|&x| f64::from(x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|&x| (x / sum) as f32).collect()
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() < 1e-6,
                "entry {i}: {x} vs {y} ({a:?} vs {b:?})"
            );
        }
    }

    #[test]
    fn plain_softmax_with_temperature() {
        let logits = [1.0, 2.0, 0.5, -1.0];
        let cfg = SamplingConfig {
            temperature: 0.5,
            ..SamplingConfig::default()
        };
        let scaled: Vec<f32> = logits.iter().map(|x| x / 0.5).collect();
        assert_close(&probabilities(&logits, &cfg), &softmax(&scaled));
    }

    #[test]
    fn greedy_is_one_hot_on_argmax() {
        assert_eq!(
            probabilities(&[0.0, 3.0, 3.0], &SamplingConfig::greedy()),
            vec![0.0, 1.0, 0.0]
        );
    }

    #[test]
    fn top_k_keeps_ties_and_renormalizes() {
        let cfg = SamplingConfig {
            top_k: 2,
            ..SamplingConfig::default()
        };
        let p = probabilities(&[1.0, 3.0, 2.0, 2.0, 0.0], &cfg);
        let kept = softmax(&[3.0, 2.0, 2.0]);
        assert_close(&p, &[0.0, kept[0], kept[1], kept[2], 0.0]);
    }

    #[test]
    fn min_p_is_relative_to_the_top_token() {
        // Probabilities proportional to 8, 4, 2, 1.
        let logits: Vec<f32> = [8.0f32, 4.0, 2.0, 1.0].iter().map(|x| x.ln()).collect();
        let cfg = SamplingConfig {
            min_p: 0.25,
            ..SamplingConfig::default()
        };
        assert_close(
            &probabilities(&logits, &cfg),
            &[8.0 / 14.0, 4.0 / 14.0, 2.0 / 14.0, 0.0],
        );
    }

    #[test]
    fn top_p_applies_after_top_k_renormalization() {
        // Probabilities proportional to 5, 3, 1, 1. Applied to the full distribution, top_p = 0.6
        // would keep two tokens (0.5 < 0.6).
        let logits: Vec<f32> = [5.0f32, 3.0, 1.0, 1.0].iter().map(|x| x.ln()).collect();
        let cfg = SamplingConfig {
            top_k: 2,
            top_p: 0.6,
            ..SamplingConfig::default()
        };
        // top_k = 2 keeps 5/8, 3/8; top_p = 0.6 needs only the first (0.625 >= 0.6).
        assert_close(&probabilities(&logits, &cfg), &[1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn nan_and_infinite_logits_stay_safe() {
        let cfg = SamplingConfig::default();
        let p = probabilities(&[f32::NAN, 0.0, 0.0], &cfg);
        assert_close(&p, &[0.0, 0.5, 0.5]);
        let p = probabilities(&[f32::INFINITY, 0.0, f32::INFINITY], &cfg);
        assert_close(&p, &[0.5, 0.0, 0.5]);
        let p = probabilities(&[f32::NEG_INFINITY, f32::NAN], &cfg);
        assert_eq!(p, vec![1.0, 0.0]);
    }

    #[test]
    fn into_reuses_and_resizes_the_buffer() {
        let mut buf = vec![9.0; 10];
        probabilities_into(&[0.0, 0.0], &SamplingConfig::default(), &mut buf);
        assert_eq!(buf, vec![0.5, 0.5]);
    }
}
