//! What a proposer hands back for one request.

use super::ChainStop;
use crate::rejection::DraftProbs;
use crate::tree::DraftTree;

/// The draft token a confidence gate kept out of a chain, right after the chain's tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DroppedToken {
    /// The token.
    pub token: u32,
    /// The drafter's probability of the token.
    pub confidence: f32,
}

/// A chain of draft tokens that continues a request's root token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChainDraft {
    /// The draft tokens, in order; may be empty (the step then only samples the bonus token).
    pub tokens: Vec<u32>,
    /// The distributions the tokens were sampled from, `tokens.len() × vocab_size` values over
    /// the target vocabulary, or `None` when the tokens were chosen deterministically (argmax,
    /// lookup, replay) and must be verified with a one-hot `q`.
    pub probs: Option<Vec<f32>>,
    /// The drafter's probability of each token when it proposed it, in order, or empty when
    /// the drafter has no such estimate (lookups, replays); the engine calibrates them against
    /// verification outcomes ([`super::ConfidenceCalibration`]).
    pub confidences: Vec<f32>,
    /// The token that a confidence gate kept out right after `tokens`, when the drafter made
    /// it. It is never verified; but where the verification accepts every token before it,
    /// the target's next token shows whether it would have been accepted, so that the
    /// calibration keeps learning at the confidences its gate no longer lets through.
    pub dropped: Option<DroppedToken>,
}

impl ChainDraft {
    /// A deterministic chain (verified with a one-hot `q`).
    pub fn deterministic(tokens: Vec<u32>) -> Self {
        Self {
            tokens,
            ..Self::default()
        }
    }

    /// A deterministic chain drafted whole with the drafter's `confidences` (one per token),
    /// cut where `stop` ends it (not at all without one); the first token cut off is kept as
    /// the [`ChainDraft::dropped`] one.
    pub fn cut(
        mut tokens: Vec<u32>,
        mut confidences: Vec<f32>,
        stop: Option<ChainStop<'_>>,
    ) -> Self {
        let kept = stop.map_or(tokens.len(), |stop| stop.cut(&confidences));
        let dropped = (kept < tokens.len()).then(|| DroppedToken {
            token: tokens[kept],
            confidence: confidences[kept],
        });
        tokens.truncate(kept);
        confidences.truncate(kept);
        Self {
            tokens,
            probs: None,
            confidences,
            dropped,
        }
    }

    /// Number of draft tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the chain holds no draft token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The `q` argument the rejection sampler expects for this chain.
    pub fn draft_probs(&self) -> DraftProbs<'_> {
        match &self.probs {
            Some(rows) => DraftProbs::Rows(rows),
            None => DraftProbs::OneHot,
        }
    }
}

/// One request's draft for the next verification step.
#[derive(Clone, Debug, PartialEq)]
pub enum Draft {
    /// A chain of tokens after the root (EAGLE chain, n-gram, replay).
    Chain(ChainDraft),
    /// A tree of tokens rooted at the root token (EAGLE-2 dynamic trees), with its draft
    /// distributions (one row per node) or `None` for deterministic top-k children.
    Tree {
        /// The draft tree; node 0 is the root token.
        tree: DraftTree,
        /// One `vocab_size` row per node, or `None` for a one-hot `q`.
        probs: Option<Vec<f32>>,
    },
}

impl Draft {
    /// An empty chain: no draft token, the step only samples the bonus token.
    pub fn empty() -> Self {
        Draft::Chain(ChainDraft::default())
    }

    /// Number of draft tokens (tree: nodes other than the root).
    pub fn num_draft_tokens(&self) -> usize {
        match self {
            Draft::Chain(chain) => chain.len(),
            Draft::Tree { tree, .. } => tree.num_drafts(),
        }
    }

    /// The chain, if this draft is one.
    pub fn as_chain(&self) -> Option<&ChainDraft> {
        match self {
            Draft::Chain(chain) => Some(chain),
            Draft::Tree { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_chains_verify_with_one_hot_q() {
        let chain = ChainDraft::deterministic(vec![4, 2]);
        assert!(matches!(chain.draft_probs(), DraftProbs::OneHot));
        let sampled = ChainDraft {
            tokens: vec![1],
            probs: Some(vec![0.25, 0.75]),
            confidences: vec![0.75],
            dropped: None,
        };
        assert!(matches!(sampled.draft_probs(), DraftProbs::Rows(rows) if rows == [0.25, 0.75]));
    }

    #[test]
    fn a_cut_chain_keeps_the_first_token_it_cut_off() {
        let mut calibration = super::super::ConfidenceCalibration::new();
        for _ in 0..40 {
            calibration.observe_token(0.95, 0, true);
        }
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.5],
            extend_above: &[],
        };
        let chain = ChainDraft::cut(vec![4, 5, 6], vec![0.95, 0.2, 0.9], Some(stop));
        assert_eq!(chain.tokens, [4]);
        assert_eq!(chain.confidences, [0.95]);
        assert_eq!(
            chain.dropped,
            Some(DroppedToken {
                token: 5,
                confidence: 0.2
            })
        );
        let whole = ChainDraft::cut(vec![4, 5], vec![0.95, 0.95], Some(stop));
        assert_eq!((whole.tokens.len(), whole.dropped), (2, None));
        let ungated = ChainDraft::cut(vec![4, 5], vec![0.1, 0.1], None);
        assert_eq!((ungated.tokens.len(), ungated.dropped), (2, None));
    }

    #[test]
    fn draft_sizes_count_tokens_after_the_root() {
        assert_eq!(Draft::empty().num_draft_tokens(), 0);
        assert_eq!(
            Draft::Chain(ChainDraft::deterministic(vec![1, 2, 3])).num_draft_tokens(),
            3
        );
        let mut tree = DraftTree::new(9);
        tree.push(0, 1, -0.1).unwrap();
        tree.push(0, 2, -0.2).unwrap();
        let draft = Draft::Tree { tree, probs: None };
        assert_eq!(draft.num_draft_tokens(), 2);
        assert!(draft.as_chain().is_none());
    }
}
