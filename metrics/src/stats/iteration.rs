//! Statistics of one engine step.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What one engine step processed, reported once per step.
///
/// Timings follow vLLM's definitions: a request's time to first token runs from its arrival to the
/// step that emitted its first token; an inter-token latency runs from a request's previous output
/// step to this one (one value per request per step, however many tokens speculative decoding
/// emitted in it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationStats {
    /// Prompt tokens computed in this step (prefill chunks; prefix-cache hits excluded).
    pub num_prompt_tokens: u64,
    /// Tokens generated in this step, over all requests (with speculative decoding: the accepted
    /// draft tokens plus one bonus or recovered token per verified request, as emitted).
    pub num_generation_tokens: u64,
    /// Time to first token of each request that emitted its first token in this step.
    pub time_to_first_tokens: Vec<Duration>,
    /// Inter-token latency of each request that emitted a later token in this step.
    pub inter_token_latencies: Vec<Duration>,
    /// Time of the step's forward pass through the target model (`None`: not measured).
    pub forward_time: Option<Duration>,
    /// Time of the drafter's call after the forward pass, which takes in the step's rows and
    /// drafts the next tokens (`None`: the engine has no drafter).
    pub draft_time: Option<Duration>,
}

impl IterationStats {
    /// Tokens this step processed: prompt plus generation (the value the iteration-tokens
    /// histogram observes).
    pub fn num_tokens(&self) -> u64 {
        self.num_prompt_tokens
            .saturating_add(self.num_generation_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_tokens_add_prompt_and_generation() {
        let stats = IterationStats {
            num_prompt_tokens: 120,
            num_generation_tokens: 7,
            ..IterationStats::default()
        };
        assert_eq!(stats.num_tokens(), 127);
    }
}
