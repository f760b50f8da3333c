//! Growing the chains of one drafting call a token per step, where each request's
//! [`super::ChainStop`] and budget say whether its chain goes on.

use super::pick::Pick;
use super::{ChainDraft, ChainStep, DroppedToken, ProposeRequest};

/// The chains of one drafting call, one per request, and each chain's path probability (the
/// product of its calibrated token confidences so far, which its stop rule weighs).
pub(super) struct ChainGrowth {
    chains: Vec<ChainDraft>,
    paths: Vec<f64>,
}

impl ChainGrowth {
    /// Empty chains for `num_requests` requests.
    pub fn new(num_requests: usize) -> Self {
        Self {
            chains: vec![ChainDraft::default(); num_requests],
            paths: vec![1.0; num_requests],
        }
    }

    /// Appends draft step `step`'s picks (1 for the first token) to the chains of the active
    /// requests (`active[a]` indexes `requests` and owns `picks[a]`), unless a request's stop
    /// rule drops its pick (kept as the chain's dropped token). Returns the positions in
    /// `active` of the requests whose chains go on: extended by their stop rule and still
    /// below their budget (`budgets[i]` tokens for request `i`).
    pub fn push(
        &mut self,
        step: usize,
        active: &[usize],
        picks: Vec<Pick>,
        requests: &[ProposeRequest<'_>],
        budgets: &[usize],
    ) -> Vec<usize> {
        let mut keep = Vec::with_capacity(active.len());
        for (a, (&i, pick)) in active.iter().zip(picks).enumerate() {
            let decision = match requests[i].stop {
                Some(stop) => {
                    let (decision, path) = stop.step(step - 1, self.paths[i], pick.confidence);
                    self.paths[i] = path;
                    decision
                }
                None => ChainStep::Extend,
            };
            let chain = &mut self.chains[i];
            if decision == ChainStep::Drop {
                chain.dropped = Some(DroppedToken {
                    token: pick.token,
                    confidence: pick.confidence,
                });
                continue;
            }
            chain.tokens.push(pick.token);
            chain.confidences.push(pick.confidence);
            if let Some(row) = pick.probs {
                chain.probs.get_or_insert_with(Vec::new).extend(row);
            }
            if decision == ChainStep::Extend && budgets[i] > step {
                keep.push(a);
            }
        }
        keep
    }

    /// The newest token of request `i`'s chain.
    ///
    /// # Panics
    /// When the chain is empty (a request is only kept after a token was pushed).
    pub fn last_token(&self, i: usize) -> u32 {
        *self.chains[i]
            .tokens
            .last()
            .expect("a kept chain has a token")
    }

    /// The chains, one per request, in order.
    pub fn into_chains(self) -> Vec<ChainDraft> {
        self.chains
    }
}
