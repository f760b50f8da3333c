//! The scheduler's view of a request: its tokens, how many of them are in the KV cache, its slot
//! and its place in the waiting/running lifecycle.

use aquila_spec_decode::tree::DraftTree;

use crate::output::RequestId;

/// Where a request is in its lifecycle (finished requests leave the scheduler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestStatus {
    /// Queued: never scheduled, or preempted and waiting to be recomputed.
    Waiting,
    /// Holds a KV slot and gets model work every step the token budget allows.
    Running,
}

/// A request's token sequence and KV state.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    /// The engine's id.
    pub id: RequestId,
    /// Prompt tokens followed by generated tokens.
    pub token_ids: Vec<u32>,
    /// Number of prompt tokens at the start of `token_ids`.
    pub num_prompt_tokens: usize,
    /// Draft tokens to verify in the next decode step (empty without speculative decoding),
    /// in tree node order when `draft_tree` is set.
    pub draft_token_ids: Vec<u32>,
    /// The tree the draft tokens form (its nodes after the root are `draft_token_ids`), or
    /// `None` for a chain.
    pub draft_tree: Option<DraftTree>,
    /// Leading tokens of `token_ids` whose keys and values are in the KV cache.
    pub num_computed_tokens: usize,
    /// The KV cache slot while running.
    pub slot: Option<usize>,
    /// Lifecycle state.
    pub status: RequestStatus,
    /// Times the request was preempted.
    pub num_preemptions: usize,
}

impl Request {
    /// A waiting request for `prompt_token_ids`.
    pub fn new(id: RequestId, prompt_token_ids: Vec<u32>) -> Self {
        Self {
            id,
            num_prompt_tokens: prompt_token_ids.len(),
            token_ids: prompt_token_ids,
            draft_token_ids: Vec::new(),
            draft_tree: None,
            num_computed_tokens: 0,
            slot: None,
            status: RequestStatus::Waiting,
            num_preemptions: 0,
        }
    }

    /// Prompt plus generated tokens.
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// The generated tokens.
    pub fn output_token_ids(&self) -> &[u32] {
        &self.token_ids[self.num_prompt_tokens..]
    }

    /// Known tokens not yet in the KV cache (the whole sequence after a preemption, the last
    /// generated token while decoding).
    pub fn num_uncomputed_tokens(&self) -> usize {
        self.num_tokens() - self.num_computed_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bookkeeping() {
        let mut request = Request::new(3, vec![10, 11, 12]);
        assert_eq!(request.num_tokens(), 3);
        assert_eq!(request.num_uncomputed_tokens(), 3);
        assert!(request.output_token_ids().is_empty());
        request.num_computed_tokens = 3;
        request.token_ids.push(42);
        assert_eq!(request.output_token_ids(), &[42]);
        assert_eq!(request.num_uncomputed_tokens(), 1);
        assert_eq!(request.status, RequestStatus::Waiting);
    }
}
