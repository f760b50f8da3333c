//! What the engine returns: final [`RequestOutput`]s, streaming [`RequestDelta`]s and
//! per-request [`RequestMetrics`].

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

pub use aquila_metrics::FinishReason;

/// The engine's id of a request, assigned by [`crate::Llm::add_request`] in arrival order.
pub type RequestId = u64;

/// Which stop condition ended a request whose [`FinishReason`] is `Stop` (vLLM's
/// `stop_reason`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The model's end-of-sequence token (kept in the token ids).
    Eos(u32),
    /// One of the request's `stop_token_ids` (kept in the token ids).
    TokenId(u32),
    /// One of the request's stop strings (left out of the text).
    String(String),
}

/// A token and its log-probability.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token id.
    pub token_id: u32,
    /// Its log-probability under the model's raw (unprocessed) distribution.
    pub logprob: f32,
}

/// Log-probabilities at one generated position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionLogprobs {
    /// The generated token.
    pub sampled: TokenLogprob,
    /// The most likely tokens at this position, most likely first.
    pub top: Vec<TokenLogprob>,
}

/// Timing and counts of one request.
///
/// Times are wall-clock; the durations derived from them are measured on a monotonic clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestMetrics {
    /// When the request was added.
    pub arrival_time: SystemTime,
    /// When the scheduler first gave it model work.
    pub first_scheduled_time: Option<SystemTime>,
    /// When its first token was generated.
    pub first_token_time: Option<SystemTime>,
    /// When it finished.
    pub finished_time: Option<SystemTime>,
    /// Time from arrival to first scheduling.
    pub queue_time: Option<Duration>,
    /// Time from arrival to the first token.
    pub time_to_first_token: Option<Duration>,
    /// Time from arrival to finishing.
    pub e2e_latency: Option<Duration>,
    /// Prompt tokens.
    pub num_prompt_tokens: usize,
    /// Generated tokens.
    pub num_generation_tokens: usize,
    /// Times the request was preempted (its KV freed and recomputed).
    pub num_preemptions: usize,
    /// Speculative verifications of this request (0 without speculative decoding).
    pub num_drafts: usize,
    /// Draft tokens proposed for this request.
    pub num_draft_tokens: usize,
    /// Draft tokens the target accepted.
    pub num_accepted_tokens: usize,
}

/// The result of one finished request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestOutput {
    /// The request's id.
    pub request_id: RequestId,
    /// The prompt text (the rendered chat template for chat prompts); `None` for token-id
    /// prompts.
    pub prompt: Option<String>,
    /// The prompt's token ids.
    pub prompt_token_ids: Vec<u32>,
    /// The generated text, without a matched stop string.
    pub text: String,
    /// The generated token ids (a stop string's tokens, EOS and stop token ids included).
    pub token_ids: Vec<u32>,
    /// Why the request finished (`stop`, `length` or `abort`, the metrics label).
    pub finish_reason: FinishReason,
    /// The stop condition that matched, when `finish_reason` is `Stop`.
    pub stop_reason: Option<StopReason>,
    /// Per generated token, when the request asked for log-probabilities.
    pub logprobs: Option<Vec<PositionLogprobs>>,
    /// Timing and counts.
    pub metrics: RequestMetrics,
}

/// What one engine step added to one request (streaming).
///
/// Concatenating a request's `new_text` over all its deltas gives the final
/// [`RequestOutput::text`]; concatenating `new_token_ids` gives its `token_ids`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestDelta {
    /// The request's id.
    pub request_id: RequestId,
    /// Text that became final in this step.
    pub new_text: String,
    /// Tokens generated in this step.
    pub new_token_ids: Vec<u32>,
    /// Whether the request finished in this step (its delta is the last one).
    pub finished: bool,
}

/// What [`crate::Llm::step`] produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepOutput {
    /// One delta per request that generated tokens or finished in the step.
    pub deltas: Vec<RequestDelta>,
    /// The final outputs of the requests that finished in the step.
    pub finished: Vec<RequestOutput>,
}

impl StepOutput {
    /// Appends `other`'s deltas and finished outputs.
    pub fn extend(&mut self, other: StepOutput) {
        self.deltas.extend(other.deltas);
        self.finished.extend(other.finished);
    }

    /// Whether the step produced nothing.
    pub fn is_empty(&self) -> bool {
        self.deltas.is_empty() && self.finished.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_output_extends() {
        let delta = RequestDelta {
            request_id: 1,
            new_text: "a".into(),
            new_token_ids: vec![5],
            finished: false,
        };
        let mut out = StepOutput::default();
        assert!(out.is_empty());
        out.extend(StepOutput {
            deltas: vec![delta.clone()],
            finished: vec![],
        });
        assert_eq!(out.deltas, vec![delta]);
        assert!(!out.is_empty());
    }
}
