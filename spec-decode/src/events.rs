//! Speculative-decoding events: what one verification of one request's draft produced.
//!
//! This module has no burn dependency: the metrics crate (`aquila-metrics`) depends on it with the
//! crate's default features off, and turns these events into Prometheus families.

use serde::{Deserialize, Serialize};

/// The outcome of verifying one request's draft in one engine step.
///
/// Counting follows the emitted tokens, not the raw verifier output: drafts that were padding or
/// that the context limit cut are not counted as draft tokens, and when EOS, a stop string or
/// `max_tokens` ends the request inside an accepted run, only the accepted tokens that were
/// actually emitted are counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDecodeEvent {
    /// The engine's id of the request this draft belonged to.
    pub request_id: u64,
    /// Valid draft tokens proposed for this verification (tree: number of tree nodes).
    pub num_draft_tokens: usize,
    /// Number of draft positions (chain: equals `num_draft_tokens`; tree: the tree's depth).
    pub draft_depth: usize,
    /// Draft tokens the target accepted, a prefix of the chain or a root-to-leaf path of the tree.
    /// Accepted position `i` (0-based) is counted for every `i < num_accepted_tokens`.
    pub num_accepted_tokens: usize,
}

impl SpecDecodeEvent {
    /// Whether draft position `position` (0-based) was accepted in this event.
    pub fn accepted_at(&self, position: usize) -> bool {
        position < self.num_accepted_tokens
    }

    /// Tokens this verification emitted: the accepted drafts plus the target's bonus or recovered
    /// token.
    pub fn emitted_tokens(&self) -> usize {
        self.num_accepted_tokens + 1
    }
}

/// A receiver of speculative-decoding events (implemented by `aquila_metrics::Recorder`).
///
/// Implementations must be cheap and thread-safe: the engine calls [`EventSink::record_spec_decode`]
/// once per request per verification step, on its hot path.
pub trait EventSink: Send + Sync {
    /// Records one verification outcome.
    fn record_spec_decode(&self, event: &SpecDecodeEvent);
}

/// An [`EventSink`] that drops every event, for callers that want no metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn record_spec_decode(&self, _event: &SpecDecodeEvent) {}
}

impl<S: EventSink + ?Sized> EventSink for std::sync::Arc<S> {
    fn record_spec_decode(&self, event: &SpecDecodeEvent) {
        (**self).record_spec_decode(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_positions_form_a_prefix() {
        let event = SpecDecodeEvent {
            request_id: 7,
            num_draft_tokens: 3,
            draft_depth: 3,
            num_accepted_tokens: 2,
        };
        let accepted: Vec<bool> = (0..3).map(|p| event.accepted_at(p)).collect();
        assert_eq!(accepted, vec![true, true, false]);
        assert_eq!(event.emitted_tokens(), 3);
    }
}
