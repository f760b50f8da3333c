//! Presence, frequency and repetition penalties (vLLM semantics).
//!
//! * repetition penalty `r`: for every token that occurs in the prompt **or** the output, a
//!   positive logit is divided by `r`, a non-positive one multiplied by `r` (applied once per
//!   token, however often it occurs);
//! * frequency penalty `f`: `f × count` is subtracted, where `count` is the token's number of
//!   occurrences in the output;
//! * presence penalty `p`: `p` is subtracted once for every token that occurs in the output.
//!
//! The repetition penalty is applied first, to the raw logits. Token ids outside the logit
//! vector are ignored.

use super::SamplingConfig;

/// The token history that penalties depend on, prepared once per request and step.
///
/// During verification, row `i` of a draft must see the committed output followed by the draft
/// tokens before it; [`PenaltyHistory::apply`] takes those in-flight tokens as `extra_output`
/// so the (possibly long) committed history is indexed only once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PenaltyHistory {
    /// Distinct prompt tokens, sorted.
    prompt_tokens: Vec<u32>,
    /// `(token, occurrences)` of the committed output, sorted by token.
    output_counts: Vec<(u32, u32)>,
}

impl PenaltyHistory {
    /// Indexes the prompt and the committed output of one request.
    pub fn new(prompt: &[u32], output: &[u32]) -> Self {
        let mut prompt_tokens = prompt.to_vec();
        prompt_tokens.sort_unstable();
        prompt_tokens.dedup();
        let mut output_counts = Vec::new();
        add_occurrences(&mut output_counts, output);
        Self {
            prompt_tokens,
            output_counts,
        }
    }

    /// Applies `cfg`'s penalties to `logits` for this history followed by `extra_output` (the
    /// in-flight draft tokens that precede the row).
    pub fn apply(&self, logits: &mut [f32], cfg: &SamplingConfig, extra_output: &[u32]) {
        if !cfg.has_penalties() {
            return;
        }
        let mut counts = self.output_counts.clone();
        add_occurrences(&mut counts, extra_output);
        if cfg.repetition_penalty != 1.0 {
            let output_tokens = counts.iter().map(|&(token, _)| token);
            for token in sorted_union(self.prompt_tokens.iter().copied(), output_tokens) {
                if let Some(logit) = logits.get_mut(token as usize) {
                    *logit = if *logit > 0.0 {
                        *logit / cfg.repetition_penalty
                    } else {
                        *logit * cfg.repetition_penalty
                    };
                }
            }
        }
        for &(token, count) in &counts {
            if let Some(logit) = logits.get_mut(token as usize) {
                *logit -= cfg.frequency_penalty * count as f32 + cfg.presence_penalty;
            }
        }
    }
}

/// Applies `cfg`'s penalties to `logits` given the request's prompt and output tokens.
///
/// A no-op when `cfg` has no penalty. For repeated calls over the same history (verification
/// rows), build a [`PenaltyHistory`] once instead.
pub fn apply_penalties(logits: &mut [f32], cfg: &SamplingConfig, prompt: &[u32], output: &[u32]) {
    if cfg.has_penalties() {
        PenaltyHistory::new(prompt, output).apply(logits, cfg, &[]);
    }
}

/// Adds the occurrences of `tokens` to the sorted `(token, count)` list `counts`.
fn add_occurrences(counts: &mut Vec<(u32, u32)>, tokens: &[u32]) {
    if tokens.len() > 16 {
        // Long histories: sort once and merge runs, O(n log n).
        let mut sorted = tokens.to_vec();
        sorted.sort_unstable();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for token in sorted {
            match runs.last_mut() {
                Some((last, count)) if *last == token => *count += 1,
                _ => runs.push((token, 1)),
            }
        }
        if counts.is_empty() {
            *counts = runs;
        } else {
            for (token, count) in runs {
                bump(counts, token, count);
            }
        }
    } else {
        for &token in tokens {
            bump(counts, token, 1);
        }
    }
}

/// Adds `count` occurrences of `token` to the sorted list `counts`.
fn bump(counts: &mut Vec<(u32, u32)>, token: u32, count: u32) {
    match counts.binary_search_by_key(&token, |&(t, _)| t) {
        Ok(i) => counts[i].1 += count,
        Err(i) => counts.insert(i, (token, count)),
    }
}

/// The distinct elements of two sorted, duplicate-free sequences, in order.
fn sorted_union(
    a: impl Iterator<Item = u32>,
    b: impl Iterator<Item = u32>,
) -> impl Iterator<Item = u32> {
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || match (a.peek().copied(), b.peek().copied()) {
        (Some(x), Some(y)) if x == y => {
            a.next();
            b.next()
        }
        (Some(x), Some(y)) if x < y => a.next(),
        (Some(_), Some(_)) | (None, Some(_)) => b.next(),
        (Some(_), None) => a.next(),
        (None, None) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(presence: f32, frequency: f32, repetition: f32) -> SamplingConfig {
        SamplingConfig {
            presence_penalty: presence,
            frequency_penalty: frequency,
            repetition_penalty: repetition,
            ..SamplingConfig::default()
        }
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_once() {
        let mut logits = vec![2.0, -2.0, 3.0, 1.0];
        // Token 0 twice in the prompt and once in the output: penalized once.
        apply_penalties(&mut logits, &cfg(0.0, 0.0, 2.0), &[0, 0, 1], &[0]);
        assert_eq!(logits, vec![1.0, -4.0, 3.0, 1.0]);
    }

    #[test]
    fn frequency_and_presence_use_output_counts_only() {
        let mut logits = vec![1.0; 4];
        apply_penalties(&mut logits, &cfg(0.5, 0.25, 1.0), &[3, 3], &[1, 2, 2, 2]);
        assert_eq!(logits, vec![1.0, 1.0 - 0.25 - 0.5, 1.0 - 0.75 - 0.5, 1.0]);
    }

    #[test]
    fn extra_output_counts_like_committed_output() {
        let history = PenaltyHistory::new(&[5], &[1, 2]);
        let penalties = cfg(0.5, 1.0, 1.5);
        let mut with_extra = vec![0.75; 8];
        history.apply(&mut with_extra, &penalties, &[2, 6]);
        let mut direct = vec![0.75; 8];
        apply_penalties(&mut direct, &penalties, &[5], &[1, 2, 2, 6]);
        assert_eq!(with_extra, direct);
    }

    #[test]
    fn long_histories_match_short_path_and_out_of_vocab_ids_are_ignored() {
        let output: Vec<u32> = (0..100).map(|i| (i * 7 % 13) as u32).collect();
        let mut counts_long = Vec::new();
        add_occurrences(&mut counts_long, &output);
        let mut counts_short = Vec::new();
        for chunk in output.chunks(10) {
            add_occurrences(&mut counts_short, chunk);
        }
        assert_eq!(counts_long, counts_short);
        assert_eq!(counts_long.iter().map(|c| c.1).sum::<u32>(), 100);

        let mut logits = vec![1.0; 4];
        apply_penalties(&mut logits, &cfg(1.0, 0.0, 1.0), &[], &[99, u32::MAX]);
        assert_eq!(logits, vec![1.0; 4]);
    }

    #[test]
    fn union_merges_sorted_sets() {
        let u: Vec<u32> = sorted_union([1, 3, 5].into_iter(), [2, 3, 6].into_iter()).collect();
        assert_eq!(u, vec![1, 2, 3, 5, 6]);
    }
}
