//! The sampling pipeline: exact filter semantics, sampled distributions under temperature,
//! top-k, top-p and min-p, penalties, log-probabilities and seeded reproducibility.

use crate::sampling_support;

use aquila_spec_decode::sampling::{
    apply_penalties, greedy, logprob, probabilities, sample, top_logprobs, RequestRng,
    SamplingConfig,
};
use sampling_support::{histogram, random_logits, reference_softmax, total_variation, tv_bound};

const SAMPLES: usize = 50_000;

/// Samples `SAMPLES` tokens from `probabilities(logits, cfg)` and checks the histogram against
/// `expected` within the statistical bound.
fn assert_samples_follow(logits: &[f32], cfg: &SamplingConfig, expected: &[f32]) {
    let probs = probabilities(logits, cfg);
    let mut rng = RequestRng::new(17);
    let samples: Vec<u32> = (0..SAMPLES).map(|_| sample(&probs, &mut rng)).collect();
    let tv = total_variation(&histogram(&samples, logits.len()), expected);
    let bound = tv_bound(logits.len(), SAMPLES);
    assert!(tv < bound, "{cfg:?}: TV {tv:.4} >= {bound:.4}");
}

fn assert_close(actual: &[f32], expected: &[f32], tolerance: f32) {
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= tolerance, "entry {i}: {a} vs {e}");
    }
}

const LOGITS: [f32; 8] = [1.2, -0.3, 2.5, 0.0, 2.4, -1.7, 0.9, 1.9];

#[test]
fn temperature_scales_the_softmax() {
    for temperature in [0.3, 1.0, 2.5] {
        let cfg = SamplingConfig {
            temperature,
            ..SamplingConfig::default()
        };
        let expected = reference_softmax(&LOGITS, temperature);
        assert_close(&probabilities(&LOGITS, &cfg), &expected, 1e-6);
        assert_samples_follow(&LOGITS, &cfg, &expected);
    }
}

#[test]
fn top_k_renormalizes_over_the_k_best() {
    let cfg = SamplingConfig {
        top_k: 3,
        temperature: 0.8,
        ..SamplingConfig::default()
    };
    // The 3 best are tokens 2 (2.5), 4 (2.4), 7 (1.9).
    let kept = reference_softmax(&[2.5, 2.4, 1.9], 0.8);
    let expected = [0.0, 0.0, kept[0], 0.0, kept[1], 0.0, 0.0, kept[2]];
    assert_close(&probabilities(&LOGITS, &cfg), &expected, 1e-6);
    assert_samples_follow(&LOGITS, &cfg, &expected);
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    let full = reference_softmax(&LOGITS, 1.0);
    let mut order: Vec<usize> = (0..8).collect();
    order.sort_by(|&a, &b| full[b].total_cmp(&full[a]));
    for top_p in [0.3, 0.6, 0.9] {
        let mut cumulative = 0.0;
        let mut expected = vec![0.0f32; 8];
        for &i in &order {
            expected[i] = full[i];
            cumulative += full[i];
            if cumulative >= top_p {
                break;
            }
        }
        let total: f32 = expected.iter().sum();
        expected.iter_mut().for_each(|p| *p /= total);
        let cfg = SamplingConfig {
            top_p,
            ..SamplingConfig::default()
        };
        assert_close(&probabilities(&LOGITS, &cfg), &expected, 1e-6);
        assert_samples_follow(&LOGITS, &cfg, &expected);
    }
}

#[test]
fn min_p_drops_tokens_below_a_fraction_of_the_best() {
    let full = reference_softmax(&LOGITS, 1.0);
    let best = full.iter().copied().fold(0.0, f32::max);
    let cfg = SamplingConfig {
        min_p: 0.3,
        ..SamplingConfig::default()
    };
    let mut expected: Vec<f32> = full
        .iter()
        .map(|&p| if p >= 0.3 * best { p } else { 0.0 })
        .collect();
    let total: f32 = expected.iter().sum();
    expected.iter_mut().for_each(|p| *p /= total);
    assert_eq!(expected.iter().filter(|&&p| p > 0.0).count(), 3); // 2.5, 2.4 and 1.9
    assert_close(&probabilities(&LOGITS, &cfg), &expected, 1e-6);
    assert_samples_follow(&LOGITS, &cfg, &expected);
}

#[test]
fn full_vocabulary_probabilities_are_normalized_and_match_the_reference() {
    let mut rng = RequestRng::new(1);
    let logits = random_logits(49_152, 12.0, &mut rng);
    for cfg in [
        SamplingConfig::default(),
        SamplingConfig {
            temperature: 0.7,
            top_k: 50,
            top_p: 0.9,
            min_p: 0.01,
            ..SamplingConfig::default()
        },
    ] {
        let probs = probabilities(&logits, &cfg);
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        assert!((total - 1.0).abs() < 1e-5, "{cfg:?}: sum {total}");
        if cfg.top_k == 0 {
            assert_close(&probs, &reference_softmax(&logits, 1.0), 1e-7);
        } else {
            let kept = probs.iter().filter(|&&p| p > 0.0).count();
            assert!((1..=50).contains(&kept), "kept {kept}");
            assert_eq!(greedy(&probs), greedy(&logits));
        }
    }
}

#[test]
fn penalties_follow_vllm_semantics() {
    let cfg = SamplingConfig {
        repetition_penalty: 1.25,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..SamplingConfig::default()
    };
    let mut logits = vec![2.0, -2.0, 1.0, 4.0, -1.0];
    // Prompt: 0 and 1. Output: 2 twice, 4 once.
    apply_penalties(&mut logits, &cfg, &[0, 1, 0], &[2, 4, 2]);
    let expected = [
        2.0 / 1.25,                    // prompt, positive: divided
        -2.0 * 1.25,                   // prompt, negative: multiplied
        1.0 / 1.25 - 2.0 * 0.5 - 0.25, // output twice: repetition, frequency x2, presence
        4.0,                           // never seen
        -1.25 - 0.5 - 0.25,            // output once: -1 x 1.25, frequency, presence
    ];
    assert_close(&logits, &expected, 1e-6);

    let mut untouched = vec![1.0, 2.0];
    apply_penalties(&mut untouched, &SamplingConfig::default(), &[0, 1], &[0, 1]);
    assert_eq!(untouched, vec![1.0, 2.0]);
}

#[test]
fn seeded_sampling_is_reproducible_and_independent_of_other_streams() {
    let probs = probabilities(&LOGITS, &SamplingConfig::default());
    let run = |seed, interleave: bool| {
        let mut mine = RequestRng::new(seed);
        let mut other = RequestRng::new(seed + 1);
        (0..100)
            .map(|_| {
                if interleave {
                    sample(&probs, &mut other);
                }
                sample(&probs, &mut mine)
            })
            .collect::<Vec<u32>>()
    };
    assert_eq!(run(5, false), run(5, true));
    assert_ne!(run(5, false), run(6, false));
}

#[test]
fn greedy_is_deterministic_and_prefers_the_lowest_id() {
    assert_eq!(greedy(&LOGITS), 2);
    assert_eq!(greedy(&[0.5, 0.9, 0.9]), 1);
    assert_eq!(probabilities(&LOGITS, &SamplingConfig::greedy())[2], 1.0);
}

#[test]
fn logprobs_are_the_log_softmax_of_the_given_logits() {
    let reference = reference_softmax(&LOGITS, 1.0);
    let top = top_logprobs(&LOGITS, 3);
    assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 4, 7]);
    for (token, lp) in top {
        assert!((lp - reference[token as usize].ln()).abs() < 1e-5);
        assert_eq!(lp, logprob(&LOGITS, token));
    }
}
