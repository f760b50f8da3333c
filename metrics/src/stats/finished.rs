//! Statistics of one finished request.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a request finished (the `finished_reason` label of the request-success counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string ended the request.
    Stop,
    /// The request reached `max_tokens` or the model's context length.
    Length,
    /// The request was cancelled or failed.
    Abort,
}

impl FinishReason {
    /// Every finish reason; a series exists (at 0) for each from the start.
    pub const ALL: [FinishReason; 3] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
    ];

    /// The label value: `stop`, `length` or `abort`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }

    /// The position of this reason in [`FinishReason::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one request did, reported once when it finishes.
///
/// Intervals follow vLLM's definitions, all measured with one monotonic clock:
/// queue = arrival (or requeue after preemption) to the last scheduling; prefill = last scheduling
/// to the first token; decode = first token to last token; inference = last scheduling to last
/// token; e2e = arrival to finish.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinishedRequestStats {
    /// Why the request finished.
    pub finish_reason: FinishReason,
    /// Arrival to finish.
    pub e2e_latency: Duration,
    /// Time spent waiting before the last scheduling.
    pub queue_time: Duration,
    /// Last scheduling to the first token.
    pub prefill_time: Duration,
    /// First token to last token.
    pub decode_time: Duration,
    /// Last scheduling to last token.
    pub inference_time: Duration,
    /// Prompt tokens of the request.
    pub num_prompt_tokens: u64,
    /// Tokens the request generated.
    pub num_generation_tokens: u64,
}

impl FinishedRequestStats {
    /// Mean time per output token after the first: decode time divided by
    /// `num_generation_tokens - 1`. `None` for requests with fewer than two tokens, which have no
    /// such interval (they are not observed by the time-per-output-token histogram).
    pub fn time_per_output_token(&self) -> Option<Duration> {
        let intervals = self
            .num_generation_tokens
            .checked_sub(1)
            .filter(|n| *n > 0)?;
        Some(self.decode_time.div_f64(intervals as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(tokens: u64) -> FinishedRequestStats {
        FinishedRequestStats {
            finish_reason: FinishReason::Length,
            e2e_latency: Duration::from_secs(3),
            queue_time: Duration::from_millis(200),
            prefill_time: Duration::from_millis(300),
            decode_time: Duration::from_secs(2),
            inference_time: Duration::from_millis(2300),
            num_prompt_tokens: 10,
            num_generation_tokens: tokens,
        }
    }

    #[test]
    fn time_per_output_token_excludes_the_first_token() {
        assert_eq!(
            finished(5).time_per_output_token(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(finished(1).time_per_output_token(), None);
        assert_eq!(finished(0).time_per_output_token(), None);
    }

    #[test]
    fn reasons_have_stable_label_values() {
        let labels: Vec<&str> = FinishReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, ["stop", "length", "abort"]);
        for (index, reason) in FinishReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), index);
        }
        assert_eq!(
            serde_json::to_string(&FinishReason::Abort).unwrap(),
            "\"abort\""
        );
    }
}
