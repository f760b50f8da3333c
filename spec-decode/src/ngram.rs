//! N-gram (prompt lookup) drafting: propose the tokens that followed the latest earlier
//! occurrence of the history's longest matching suffix.
//!
//! For a history `h` of length `T`, the proposer looks for the longest suffix `h[T-n..T]` with
//! `min_n <= n <= max_n` that also ends at an earlier position `e < T-1`, preferring the latest
//! such `e` among equally long matches, and proposes up to `k` tokens `h[e+1..]` (fewer when the
//! history ends first). vLLM's `NgramProposer` makes the same longest-match choice but takes the
//! earliest occurrence on ties; the latest one is usually the most relevant context.
//!
//! The search runs the Z-algorithm over the reversed history: `Z[i]` is the length of the common
//! suffix of `h` and `h[..T-i]`, so one linear pass finds every earlier match length.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// An impossible n-gram configuration; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NgramConfigError {
    /// `min_n` is 0.
    #[error("ngram min_n must be at least 1, got 0")]
    MinN,
    /// `max_n` is below `min_n`.
    #[error("ngram max_n ({max_n}) must be >= min_n ({min_n})")]
    MaxN {
        /// The configured minimum.
        min_n: usize,
        /// The configured maximum.
        max_n: usize,
    },
    /// `k` is 0.
    #[error("ngram k (tokens to propose) must be at least 1, got 0")]
    K,
}

/// Settings of the n-gram proposer (vLLM: `prompt_lookup_min`, `prompt_lookup_max`,
/// `num_speculative_tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NgramConfig {
    /// Shortest suffix that may be matched, at least 1.
    pub min_n: usize,
    /// Longest suffix that is matched, at least `min_n`.
    pub max_n: usize,
    /// Most tokens proposed per step, at least 1.
    pub k: usize,
}

impl NgramConfig {
    /// Checks `1 <= min_n <= max_n` and `k >= 1`.
    pub fn validate(&self) -> Result<(), NgramConfigError> {
        if self.min_n == 0 {
            return Err(NgramConfigError::MinN);
        }
        if self.max_n < self.min_n {
            return Err(NgramConfigError::MaxN {
                min_n: self.min_n,
                max_n: self.max_n,
            });
        }
        if self.k == 0 {
            return Err(NgramConfigError::K);
        }
        Ok(())
    }
}

/// Proposes draft tokens by prompt lookup; stateless and cheap to share between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramProposer {
    config: NgramConfig,
}

impl NgramProposer {
    /// A proposer for a validated `config`.
    pub fn new(config: NgramConfig) -> Result<Self, NgramConfigError> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The configuration this proposer runs with.
    pub fn config(&self) -> &NgramConfig {
        &self.config
    }

    /// Up to `k` draft tokens for a request whose tokens so far (prompt then output) are
    /// `history`; empty when no suffix of at least `min_n` tokens occurs earlier.
    pub fn propose(&self, history: &[u32]) -> Vec<u32> {
        self.propose_matched(history).0
    }

    /// [`NgramProposer::propose`], with the length of the suffix that matched (0: none).
    pub fn propose_matched(&self, history: &[u32]) -> (Vec<u32>, usize) {
        match self.longest_latest_match(history) {
            Some((next, matched)) => (
                history[next..history.len().min(next + self.config.k)].to_vec(),
                matched,
            ),
            None => (Vec::new(), 0),
        }
    }

    /// [`NgramProposer::propose`] for many requests, in parallel.
    pub fn propose_batch(&self, histories: &[&[u32]]) -> Vec<Vec<u32>> {
        histories
            .par_iter()
            .map(|history| self.propose(history))
            .collect()
    }

    /// The index right after the chosen earlier occurrence and the length of the suffix it
    /// matched, if any.
    fn longest_latest_match(&self, history: &[u32]) -> Option<(usize, usize)> {
        let len = history.len();
        if len < self.config.min_n + 1 {
            return None;
        }
        let reversed: Vec<u32> = history.iter().rev().copied().collect();
        let mut best: Option<(usize, usize)> = None; // (match length, shift i)
        for (shift, common) in ZFunction::new(&reversed) {
            let matched = common.min(self.config.max_n);
            if matched >= self.config.min_n && best.is_none_or(|(b, _)| matched > b) {
                // Smaller shifts come first, so a tie keeps the latest occurrence.
                best = Some((matched, shift));
                if matched == self.config.max_n {
                    break;
                }
            }
        }
        // The occurrence ends at index len-1-shift; the proposal starts right after it.
        best.map(|(matched, shift)| (len - shift, matched))
    }
}

/// The Z-function of a sequence, yielded lazily as `(i, Z[i])` for `i = 1..len`, where `Z[i]`
/// is the length of the longest common prefix of the sequence and its suffix starting at `i`.
struct ZFunction<'a> {
    s: &'a [u32],
    z: Vec<usize>,
    next: usize,
    /// The rightmost match window `[left, right)` found so far.
    left: usize,
    right: usize,
}

impl<'a> ZFunction<'a> {
    fn new(s: &'a [u32]) -> Self {
        Self {
            s,
            z: vec![0; s.len()],
            next: 1,
            left: 0,
            right: 0,
        }
    }
}

impl Iterator for ZFunction<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let i = self.next;
        let n = self.s.len();
        if i >= n {
            return None;
        }
        let mut k = if i < self.right {
            (self.right - i).min(self.z[i - self.left])
        } else {
            0
        };
        while i + k < n && self.s[k] == self.s[i + k] {
            k += 1;
        }
        self.z[i] = k;
        if i + k > self.right {
            self.left = i;
            self.right = i + k;
        }
        self.next += 1;
        Some((i, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_function_matches_naive_definition() {
        let s = [1u32, 1, 2, 1, 1, 2, 1, 1, 1, 2, 1];
        for (i, z) in ZFunction::new(&s) {
            let naive = s.iter().zip(&s[i..]).take_while(|(a, b)| a == b).count();
            assert_eq!(z, naive, "Z[{i}]");
        }
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let err =
            |min_n, max_n, k| NgramProposer::new(NgramConfig { min_n, max_n, k }).unwrap_err();
        assert_eq!(err(0, 3, 2), NgramConfigError::MinN);
        assert_eq!(err(3, 2, 2), NgramConfigError::MaxN { min_n: 3, max_n: 2 });
        assert_eq!(err(1, 2, 0), NgramConfigError::K);
        assert!(err(3, 2, 2)
            .to_string()
            .contains("max_n (2) must be >= min_n (3)"));
    }
}
