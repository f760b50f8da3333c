//! Histogram bucket boundaries: vLLM's defaults and validation of custom ones.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::MetricsError;

/// Upper bounds (seconds) for whole-request latencies: e2e, queue, prefill, decode and inference.
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Upper bounds (seconds) for time to first token.
pub const TIME_TO_FIRST_TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Upper bounds (seconds) for inter-token latency and per-request time per output token.
pub const INTER_TOKEN_LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// Upper bounds (seconds) for the phases of one engine step: the target's forward pass and the
/// drafter's call after it.
pub const STEP_TIME_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

/// Upper bounds (tokens) for the number of tokens one engine step processes.
pub const ITERATION_TOKENS_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// Upper bounds (draft positions) for the draft length of each verified draft: every length up
/// to 32, so that per-position rates are exact up to there.
pub const DRAFT_LENGTH_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0,
    18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0,
];

/// A group of histogram families that share one list of bucket boundaries.
///
/// The names match the keys of vLLM's `--custom-histogram-buckets` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BucketSet {
    /// E2E latency, queue, prefill, decode and inference time per request (seconds).
    RequestLatency,
    /// Time to first token (seconds).
    TimeToFirstToken,
    /// Inter-token latency and per-request time per output token (seconds).
    InterTokenLatency,
    /// Tokens processed per engine step.
    IterationTokens,
    /// Prompt and generation tokens per request.
    RequestTokens,
    /// Draft positions per verified draft.
    DraftLength,
    /// The target's forward pass and the drafter's call of one engine step (seconds; Aquila's
    /// own set, which vLLM does not have).
    StepTime,
}

impl BucketSet {
    /// Every bucket set, in declaration order.
    pub const ALL: [BucketSet; 7] = [
        BucketSet::RequestLatency,
        BucketSet::TimeToFirstToken,
        BucketSet::InterTokenLatency,
        BucketSet::IterationTokens,
        BucketSet::RequestTokens,
        BucketSet::DraftLength,
        BucketSet::StepTime,
    ];

    /// The vLLM name of this set, as used by its `--custom-histogram-buckets` option (for
    /// [`BucketSet::StepTime`], Aquila's own name in that style).
    pub fn key(self) -> &'static str {
        match self {
            BucketSet::RequestLatency => "request_latency",
            BucketSet::TimeToFirstToken => "time_to_first_token",
            BucketSet::InterTokenLatency => "inter_token_latency",
            BucketSet::IterationTokens => "iteration_tokens",
            BucketSet::RequestTokens => "request_tokens",
            BucketSet::DraftLength => "draft_length",
            BucketSet::StepTime => "step_time",
        }
    }

    /// The default upper bounds of this set. Token counts per request use 1, 2, 5, 10, 20, 50, ...
    /// up to `max_model_len`.
    pub fn default_bounds(self, max_model_len: u64) -> Vec<f64> {
        match self {
            BucketSet::RequestLatency => REQUEST_LATENCY_BUCKETS.to_vec(),
            BucketSet::TimeToFirstToken => TIME_TO_FIRST_TOKEN_BUCKETS.to_vec(),
            BucketSet::InterTokenLatency => INTER_TOKEN_LATENCY_BUCKETS.to_vec(),
            BucketSet::IterationTokens => ITERATION_TOKENS_BUCKETS.to_vec(),
            BucketSet::RequestTokens => one_two_five_buckets(max_model_len),
            BucketSet::DraftLength => DRAFT_LENGTH_BUCKETS.to_vec(),
            BucketSet::StepTime => STEP_TIME_BUCKETS.to_vec(),
        }
    }

    /// Checks custom upper bounds for this set: at least one, every bound finite and positive,
    /// strictly increasing. (The `+Inf` bucket is implicit and must not be listed.)
    pub fn validate(self, bounds: &[f64]) -> Result<(), MetricsError> {
        let invalid = |reason: String| MetricsError::InvalidBuckets { set: self, reason };
        if bounds.is_empty() {
            return Err(invalid("no bucket bounds given".into()));
        }
        if let Some(bad) = bounds.iter().find(|b| !b.is_finite() || **b <= 0.0) {
            return Err(invalid(format!("bound {bad} is not finite and positive")));
        }
        if let Some(pair) = bounds.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(invalid(format!(
                "bounds must strictly increase, but {} is followed by {}",
                pair[0], pair[1]
            )));
        }
        Ok(())
    }
}

impl fmt::Display for BucketSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The bounds 1, 2, 5, 10, 20, 50, 100, ... that do not exceed `max_value` (at least `[1]`).
pub fn one_two_five_buckets(max_value: u64) -> Vec<f64> {
    let mut bounds = Vec::new();
    let mut decade: u64 = 1;
    'outer: loop {
        for mantissa in [1u64, 2, 5] {
            match mantissa.checked_mul(decade) {
                Some(bound) if bound <= max_value => bounds.push(bound as f64),
                _ => break 'outer,
            }
        }
        match decade.checked_mul(10) {
            Some(next) => decade = next,
            None => break,
        }
    }
    if bounds.is_empty() {
        bounds.push(1.0);
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_the_maximum() {
        assert_eq!(
            one_two_five_buckets(100),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(
            one_two_five_buckets(2048),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(one_two_five_buckets(1), vec![1.0]);
        assert_eq!(one_two_five_buckets(0), vec![1.0]);
        assert_eq!(one_two_five_buckets(u64::MAX).len(), 3 * 19 + 1);
    }

    #[test]
    fn defaults_are_valid_and_match_the_reference_lengths() {
        for set in BucketSet::ALL {
            set.validate(&set.default_bounds(8192)).unwrap();
        }
        assert_eq!(REQUEST_LATENCY_BUCKETS.len(), 21);
        assert_eq!(TIME_TO_FIRST_TOKEN_BUCKETS.len(), 22);
        assert_eq!(INTER_TOKEN_LATENCY_BUCKETS.len(), 19);
        assert_eq!(ITERATION_TOKENS_BUCKETS.len(), 13);
    }

    #[test]
    fn validation_names_the_set_and_the_problem() {
        let set = BucketSet::TimeToFirstToken;
        let message = |bounds: &[f64]| set.validate(bounds).unwrap_err().to_string();
        assert!(message(&[]).contains("time_to_first_token"));
        assert!(message(&[0.0, 1.0]).contains("bound 0 is not finite and positive"));
        assert!(message(&[1.0, f64::INFINITY]).contains("not finite"));
        assert!(message(&[1.0, f64::NAN]).contains("not finite"));
        assert!(message(&[1.0, 3.0, 2.0]).contains("3 is followed by 2"));
        assert!(message(&[1.0, 1.0]).contains("strictly increase"));
    }
}
