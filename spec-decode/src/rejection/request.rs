//! What one request hands to the verifier, and what it gets back.

use crate::events::SpecDecodeEvent;
use crate::sampling::{RequestRng, SamplingConfig};
use crate::tree::DraftTree;

/// Where a request's target distributions come from: one row per draft node (chain: the root
/// and the `k` drafts, `k + 1` rows; tree: one row per tree node), row-major with
/// `vocab_size` values per row. Row `i` is the target's prediction for the token after node `i`.
#[derive(Clone, Copy, Debug)]
pub enum TargetRows<'a> {
    /// Raw target logits. The sampler runs the request's pipeline on each row it visits, and the
    /// penalties of row `i` see `prompt`, then `output` followed by the accepted draft tokens
    /// before row `i` (vLLM's in-flight speculative tokens).
    Logits {
        /// `rows × vocab_size` logits.
        logits: &'a [f32],
        /// The request's prompt tokens.
        prompt: &'a [u32],
        /// The request's committed output tokens (ending with the root token).
        output: &'a [u32],
    },
    /// Rows already processed by the request's pipeline into probabilities (not necessarily
    /// normalized); for greedy requests their argmax is the target token.
    Probs(&'a [f32]),
}

/// The draft distribution `q` that the draft tokens were sampled from.
#[derive(Clone, Copy, Debug)]
pub enum DraftProbs<'a> {
    /// Deterministic drafts (argmax chains, top-k trees, n-gram): `q` is one-hot on the drafted
    /// token, so a draft is accepted with probability `p(x)` and the recovered token is sampled
    /// from `p` with the rejected tokens removed.
    OneHot,
    /// Sampled drafts: `rows × vocab_size` probabilities, row `i` being the distribution that
    /// node `i`'s children were drawn from (chain: row `i` for draft `i`, `k` rows; tree: one
    /// row per node, independent draws per child). Accept with `min(1, p(x) / q(x))`, recover
    /// from `norm(max(0, p - q))`.
    Rows(&'a [f32]),
}

/// One request's chain draft to verify.
#[derive(Debug)]
pub struct ChainRequest<'a> {
    /// The request's sampling configuration (greedy requests verify by argmax).
    pub config: &'a SamplingConfig,
    /// `k + 1` target rows: the root's and each draft's.
    pub target: TargetRows<'a>,
    /// The `k` draft tokens (may be empty: the result is then the bonus token alone). An id
    /// outside the vocabulary (a placeholder) is always rejected.
    pub draft_tokens: &'a [u32],
    /// The draft distributions (`k` rows) or [`DraftProbs::OneHot`]; ignored by greedy requests.
    pub draft_probs: DraftProbs<'a>,
    /// The request's own random stream; greedy requests never draw from it.
    pub rng: &'a mut RequestRng,
}

/// One request's draft tree to verify.
#[derive(Debug)]
pub struct TreeRequest<'a> {
    /// The request's sampling configuration (greedy requests verify by argmax).
    pub config: &'a SamplingConfig,
    /// One target row per tree node, in node order.
    pub target: TargetRows<'a>,
    /// The draft tree; its root is the request's last committed token.
    pub tree: &'a DraftTree,
    /// One draft row per tree node, or [`DraftProbs::OneHot`]; ignored by greedy requests.
    pub draft_probs: DraftProbs<'a>,
    /// The request's own random stream; greedy requests never draw from it.
    pub rng: &'a mut RequestRng,
}

/// The result of verifying one request's draft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyOutcome {
    /// Node (row) indices of the root and of each accepted draft, in order: the target rows
    /// whose KV entries to keep (chain: `0..=accepted`).
    pub path: Vec<usize>,
    /// The emitted tokens: the accepted draft tokens, then the recovered token (first
    /// rejection) or the bonus token (everything accepted). Never empty.
    pub tokens: Vec<u32>,
    /// Draft tokens that were verified (chain: its length; tree: its nodes after the root).
    pub num_draft_tokens: usize,
    /// Draft positions that were verified (chain: its length; tree: its depth).
    pub draft_depth: usize,
}

impl VerifyOutcome {
    /// The event of this verification for request `request_id`, of which only the first
    /// `num_emitted` tokens were emitted (a stop condition may end the request inside an
    /// accepted run); `None` when nothing was drafted.
    pub fn event(&self, request_id: u64, num_emitted: usize) -> Option<SpecDecodeEvent> {
        (self.num_draft_tokens > 0).then(|| SpecDecodeEvent {
            request_id,
            num_draft_tokens: self.num_draft_tokens,
            draft_depth: self.draft_depth,
            num_accepted_tokens: self.num_accepted().min(num_emitted),
        })
    }

    /// Number of accepted draft tokens.
    pub fn num_accepted(&self) -> usize {
        self.tokens.len() - 1
    }

    /// The accepted draft tokens.
    pub fn accepted_tokens(&self) -> &[u32] {
        &self.tokens[..self.num_accepted()]
    }

    /// The recovered or bonus token: not yet in the KV cache, it is the next draft's root.
    pub fn next_token(&self) -> u32 {
        self.tokens[self.tokens.len() - 1]
    }
}
