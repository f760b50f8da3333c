//! The engine's record of one request, the only owner of everything about it: its tokens and
//! KV state (which the scheduler decides over), its sampling state, its pending draft, its
//! output assembly and its timing.

use std::time::Instant;

use aquila_metrics::FinishedRequestStats;
use aquila_spec_decode::SpecDecodeEvent;

use crate::acceptance::AcceptanceEstimate;
use crate::output::{RequestId, RequestOutput};
use crate::output_assembly::{OutputAssembler, SequenceLen};
use crate::pending_draft::PendingDraft;
use crate::request_sampling::RequestSampling;
use crate::sampling_params::SamplingParams;
use crate::stop::{Finish, StopConditions};
use crate::timing::RequestTiming;

/// A validated request, ready to be queued.
#[derive(Clone, Debug)]
pub(crate) struct PreparedRequest {
    /// The prompt text (text and chat prompts).
    pub prompt: Option<String>,
    /// The prompt's token ids.
    pub prompt_token_ids: Vec<u32>,
    /// The request's parameters.
    pub params: SamplingParams,
}

/// Where a request is in its lifecycle (finished requests leave the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestStatus {
    /// Queued: never scheduled, or preempted and waiting to be recomputed.
    Waiting,
    /// Holds KV cache slot `slot` and gets model work every step the token budget allows.
    Running {
        /// The KV cache slot.
        slot: usize,
    },
}

/// Speculative-decoding counts of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpecCounts {
    /// Verifications with at least one draft token.
    pub drafts: usize,
    /// Draft tokens proposed.
    pub draft_tokens: usize,
    /// Draft tokens accepted and emitted.
    pub accepted_tokens: usize,
}

impl SpecCounts {
    /// Counts one verification of a draft.
    pub fn count(&mut self, event: &SpecDecodeEvent) {
        self.drafts += 1;
        self.draft_tokens += event.num_draft_tokens;
        self.accepted_tokens += event.num_accepted_tokens;
    }
}

/// One unfinished request.
#[derive(Debug)]
pub(crate) struct Request {
    /// The engine's id.
    pub id: RequestId,
    /// Prompt tokens followed by generated tokens.
    pub token_ids: Vec<u32>,
    /// Number of prompt tokens at the start of `token_ids`.
    pub num_prompt_tokens: usize,
    /// Leading tokens of `token_ids` whose keys and values are in the KV cache.
    pub num_computed_tokens: usize,
    /// Lifecycle state (with the KV slot while running).
    pub status: RequestStatus,
    /// Place in the waiting queue (smallest first) while waiting.
    pub queue_position: i64,
    /// Order of the last admission (oldest first) while running.
    pub admission: u64,
    /// Times the request was preempted.
    pub num_preemptions: usize,
    /// The draft to verify in the next decode step.
    pub draft: PendingDraft,
    /// Sampling parameters, pipeline and random stream.
    pub sampling: RequestSampling,
    /// Text, stop conditions and log-probabilities.
    pub output: OutputAssembler,
    /// Lifecycle timestamps.
    pub timing: RequestTiming,
    /// Speculative-decoding counts.
    pub spec: SpecCounts,
    /// Estimated acceptance of each draft row, for the draft-length policy.
    pub acceptance: AcceptanceEstimate,
}

impl Request {
    /// A waiting request (the scheduler gives it its place in the queue) that arrived at `now`,
    /// sampling from `seed`'s stream.
    pub fn new(
        id: RequestId,
        prepared: PreparedRequest,
        seed: u64,
        stop: StopConditions,
        now: Instant,
    ) -> Self {
        let PreparedRequest {
            prompt,
            prompt_token_ids,
            params,
        } = prepared;
        let output = OutputAssembler::new(
            prompt,
            &prompt_token_ids,
            params.skip_special_tokens,
            params.logprobs,
            stop,
        );
        Self {
            id,
            num_prompt_tokens: prompt_token_ids.len(),
            token_ids: prompt_token_ids,
            num_computed_tokens: 0,
            status: RequestStatus::Waiting,
            queue_position: 0,
            admission: 0,
            num_preemptions: 0,
            draft: PendingDraft::default(),
            sampling: RequestSampling::new(params, seed),
            output,
            timing: RequestTiming::new(now),
            spec: SpecCounts::default(),
            acceptance: AcceptanceEstimate::new(Vec::new()),
        }
    }

    /// Whether the request holds a KV slot.
    pub fn is_running(&self) -> bool {
        matches!(self.status, RequestStatus::Running { .. })
    }

    /// Prompt plus generated tokens.
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// The generated tokens.
    pub fn output_token_ids(&self) -> &[u32] {
        &self.token_ids[self.num_prompt_tokens..]
    }

    /// The current lengths, which new tokens are appended after.
    pub fn lengths(&self) -> SequenceLen {
        SequenceLen {
            num_output_tokens: self.output_token_ids().len(),
            num_tokens: self.num_tokens(),
        }
    }

    /// Known tokens not yet in the KV cache (the whole sequence after a preemption, the last
    /// generated token while decoding).
    pub fn num_uncomputed_tokens(&self) -> usize {
        self.num_tokens() - self.num_computed_tokens
    }

    /// The recorder's statistics of the request, which finished at `now` as `finish` says.
    pub fn finished_stats(&mut self, finish: &Finish, now: Instant) -> FinishedRequestStats {
        self.timing.finished(now);
        self.timing.finished_stats(
            finish.reason,
            self.num_prompt_tokens,
            self.output_token_ids().len(),
        )
    }

    /// The final output of the request, which finished as `finish` says.
    pub fn into_output(self, finish: Finish) -> RequestOutput {
        let num_generated = self.output_token_ids().len();
        let mut metrics = self
            .timing
            .request_metrics(self.num_prompt_tokens, num_generated);
        metrics.num_preemptions = self.num_preemptions;
        metrics.num_drafts = self.spec.drafts;
        metrics.num_draft_tokens = self.spec.draft_tokens;
        metrics.num_accepted_tokens = self.spec.accepted_tokens;
        let assembled = self.output.finish();
        let mut token_ids = self.token_ids;
        let output_token_ids = token_ids.split_off(self.num_prompt_tokens);
        RequestOutput {
            request_id: self.id,
            prompt: assembled.prompt,
            prompt_token_ids: token_ids,
            text: assembled.text,
            token_ids: output_token_ids,
            finish_reason: finish.reason,
            stop_reason: finish.stop_reason,
            logprobs: assembled.logprobs,
            metrics,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A greedy waiting request for `prompt_token_ids` (no EOS, context 1000).
    pub(crate) fn request(id: RequestId, prompt_token_ids: Vec<u32>) -> Request {
        let params = SamplingParams::default();
        let stop = StopConditions::new(&params, &[], 1000);
        let prepared = PreparedRequest {
            prompt: None,
            prompt_token_ids,
            params,
        };
        Request::new(id, prepared, 0, stop, Instant::now())
    }

    #[test]
    fn token_bookkeeping() {
        let mut request = request(3, vec![10, 11, 12]);
        assert_eq!(request.num_tokens(), 3);
        assert_eq!(request.num_uncomputed_tokens(), 3);
        assert!(request.output_token_ids().is_empty());
        request.num_computed_tokens = 3;
        request.token_ids.push(42);
        assert_eq!(request.output_token_ids(), &[42]);
        assert_eq!(request.num_uncomputed_tokens(), 1);
        assert_eq!(request.status, RequestStatus::Waiting);
        let output = request.into_output(Finish::LENGTH);
        assert_eq!(output.token_ids, vec![42]);
        assert_eq!(output.prompt_token_ids, vec![10, 11, 12]);
        assert_eq!(output.finish_reason, crate::output::FinishReason::Length);
        assert_eq!(output.stop_reason, None);
    }
}
