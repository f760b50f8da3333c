//! Picking one token: greedy argmax and seeded categorical sampling.

use super::reduce::{chunk_sum_mapped, max_value, sum_mapped, CHUNK};
use super::RequestRng;

/// The id of the largest logit; the lowest id wins ties and NaN entries are never picked.
///
/// Returns 0 when no entry is larger than `-inf` (all `-inf` or NaN).
///
/// # Panics
/// If `logits` is empty.
pub fn greedy(logits: &[f32]) -> u32 {
    assert!(!logits.is_empty(), "greedy: empty logit vector");
    let max = max_value(logits);
    // `max` is a value of the slice unless every entry is -inf or NaN.
    logits.iter().position(|&v| v == max).unwrap_or(0) as u32
}

/// Samples a token id from the (not necessarily normalized) weights `probs` by inverse CDF with
/// one uniform draw from `rng`.
///
/// NaN and negative entries count as 0. When the total weight is 0 or infinite (a degenerate
/// distribution) the result is [`greedy`] over `probs`, so it is always an index of `probs`.
///
/// # Panics
/// If `probs` is empty.
pub fn sample(probs: &[f32], rng: &mut RequestRng) -> u32 {
    assert!(!probs.is_empty(), "sample: empty probability vector");
    let chunk_totals: Vec<f64> = probs
        .chunks(CHUNK)
        .map(|chunk| chunk_sum_mapped(chunk, weight))
        .collect();
    let total: f64 = chunk_totals.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return greedy(probs);
    }
    let target = rng.uniform() * total;
    let mut cumulative = 0.0;
    let mut crossing_chunk = None;
    let mut last_nonempty_chunk = 0;
    for (chunk_index, &chunk_total) in chunk_totals.iter().enumerate() {
        if chunk_total <= 0.0 {
            continue;
        }
        if cumulative + chunk_total > target {
            crossing_chunk = Some(chunk_index);
            break;
        }
        cumulative += chunk_total;
        last_nonempty_chunk = chunk_index;
    }
    let chosen_chunk = crossing_chunk.unwrap_or_else(|| {
        // Rounding put `target` at the very end: rescan the last chunk that has weight.
        cumulative -= chunk_totals[last_nonempty_chunk];
        last_nonempty_chunk
    });
    // Scan the chosen chunk; if rounding leaves its element-wise sum just under `target`, its
    // last positive entry is the answer.
    let start = chosen_chunk * CHUNK;
    let chunk = &probs[start..(start + CHUNK).min(probs.len())];
    let mut last_positive = 0;
    for (offset, &p) in chunk.iter().enumerate() {
        let w = weight(p);
        if w > 0.0 {
            cumulative += f64::from(w);
            last_positive = offset;
            if cumulative > target {
                break;
            }
        }
    }
    (start + last_positive) as u32
}

/// A probability entry as a sampling weight: NaN and negative values count as 0.
///
/// (`f32::max` keeps this branch-free; a finiteness test here would stop the compiler from
/// vectorizing the sums. An infinite entry makes the total infinite, which callers treat as
/// degenerate.)
#[inline]
pub(crate) fn weight(p: f32) -> f32 {
    p.max(0.0)
}

/// The sum of [`weight`]s of `values`, in f64.
pub(crate) fn total_weight(values: &[f32]) -> f64 {
    sum_mapped(values, weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_prefers_lowest_id_on_ties_and_skips_nan() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(greedy(&[f32::NAN, 0.5, f32::NAN, 0.7]), 3);
        assert_eq!(greedy(&[f32::NEG_INFINITY, f32::NAN]), 0);
        assert_eq!(greedy(&[-1.0, f32::INFINITY, f32::INFINITY]), 1);
    }

    #[test]
    fn sample_returns_only_positive_entries() {
        let mut rng = RequestRng::new(3);
        let probs = [0.0, 0.5, 0.0, f32::NAN, -1.0, 0.5, 0.0];
        for _ in 0..1000 {
            let t = sample(&probs, &mut rng);
            assert!(t == 1 || t == 5, "sampled {t}");
        }
    }

    #[test]
    fn degenerate_weights_fall_back_to_argmax() {
        let mut rng = RequestRng::new(0);
        assert_eq!(sample(&[0.0, 0.0, 0.0], &mut rng), 0);
        assert_eq!(sample(&[f32::NAN, -2.0, -1.0], &mut rng), 2);
        assert_eq!(sample(&[0.5, f32::INFINITY, 0.5], &mut rng), 1);
    }

    #[test]
    fn sample_crosses_chunk_boundaries_and_reaches_the_last_entry() {
        let mut probs = vec![0.0f32; 3 * CHUNK + 5];
        probs[CHUNK - 1] = 1.0;
        probs[3 * CHUNK + 4] = 1.0;
        let mut rng = RequestRng::new(11);
        let mut seen = [0usize; 2];
        for _ in 0..2000 {
            match sample(&probs, &mut rng) as usize {
                i if i == CHUNK - 1 => seen[0] += 1,
                i if i == 3 * CHUNK + 4 => seen[1] += 1,
                other => panic!("sampled zero-probability id {other}"),
            }
        }
        assert!(seen[0] > 850 && seen[1] > 850, "{seen:?}");
    }

    #[test]
    fn total_weight_matches_sequential_sum() {
        let values: Vec<f32> = (0..1001).map(|i| (i % 17) as f32 * 0.125 - 0.5).collect();
        let expected: f64 = values.iter().map(|&p| f64::from(weight(p))).sum();
        assert!((total_weight(&values) - expected).abs() < 1e-9);
        assert_eq!(total_weight(&[f32::NAN, -1.0, 2.0]), 2.0);
        assert_eq!(total_weight(&[f32::INFINITY, 1.0]), f64::INFINITY);
    }
}
