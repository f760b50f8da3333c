//! What a proposer hands back for one request.

use crate::rejection::DraftProbs;
use crate::tree::DraftTree;

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
}

impl ChainDraft {
    /// A deterministic chain (verified with a one-hot `q`).
    pub fn deterministic(tokens: Vec<u32>) -> Self {
        Self {
            tokens,
            probs: None,
            confidences: Vec::new(),
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
        };
        assert!(matches!(sampled.draft_probs(), DraftProbs::Rows(rows) if rows == [0.25, 0.75]));
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
