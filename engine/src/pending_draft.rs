//! A request's draft between the step that drafted it and the step that verifies it: its
//! tokens, the tree they form (EAGLE-2), the distributions they were sampled from and the
//! drafter's confidences, kept together so that cutting the draft cuts them all.

use aquila_spec_decode::proposer::{Draft, DroppedToken};
use aquila_spec_decode::rejection::DraftProbs;
use aquila_spec_decode::tree::DraftTree;

/// The draft a request verifies in its next decode step (empty: none).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PendingDraft {
    /// The draft tokens after the root (tree: its nodes after the root, in node order).
    tokens: Vec<u32>,
    /// The tree of the root and `tokens`; `None` for a chain.
    tree: Option<DraftTree>,
    /// The `q` rows the tokens were sampled from (chain: one per token; tree: one per node,
    /// the root's first), or `None` for one-hot (deterministic drafts).
    probs: Option<Vec<f32>>,
    /// The drafter's probability of each chain token (empty: unknown, or a tree).
    confidences: Vec<f32>,
    /// The token a confidence gate kept out right after a chain's tokens.
    dropped: Option<DroppedToken>,
}

impl PendingDraft {
    /// Checks a proposer's draft for a request whose last token (the root) is `root`: `q`
    /// rows must cover every token, and a tree must grow from `root`.
    pub fn new(draft: Draft, root: u32, vocab_size: usize) -> Result<Self, &'static str> {
        let (tokens, tree, probs, rows, confidences, dropped) = match draft {
            Draft::Chain(chain) => {
                let rows = chain.tokens.len();
                if !chain.confidences.is_empty() && chain.confidences.len() != rows {
                    return Err("the draft's confidences do not match its tokens");
                }
                let (tokens, probs, confidences) = (chain.tokens, chain.probs, chain.confidences);
                (tokens, None, probs, rows, confidences, chain.dropped)
            }
            Draft::Tree { tree, probs } => {
                if tree.tokens()[0] != root {
                    return Err("the tree's root is not the request's last token");
                }
                let rows = tree.num_nodes();
                (
                    tree.tokens()[1..].to_vec(),
                    Some(tree),
                    probs,
                    rows,
                    Vec::new(),
                    None,
                )
            }
        };
        if probs.as_ref().is_some_and(|q| q.len() != rows * vocab_size) {
            return Err("the draft's q rows do not match its tokens");
        }
        if tokens.is_empty() {
            return Ok(Self {
                dropped,
                ..Self::default()
            });
        }
        Ok(Self {
            tokens,
            tree,
            probs,
            confidences,
            dropped,
        })
    }

    /// The draft tokens after the root, in node order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of draft tokens.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The tree the tokens form, `None` for a chain.
    pub fn tree(&self) -> Option<&DraftTree> {
        self.tree.as_ref()
    }

    /// The drafter's probability of each chain token, in order; empty when the drafter gave
    /// none or the draft is a tree.
    pub fn confidences(&self) -> &[f32] {
        &self.confidences
    }

    /// The token a confidence gate kept out right after the chain's tokens, if any.
    pub fn dropped(&self) -> Option<DroppedToken> {
        self.dropped
    }

    /// The distributions to verify the tokens against.
    pub fn probs(&self) -> DraftProbs<'_> {
        match &self.probs {
            Some(rows) => DraftProbs::Rows(rows),
            None => DraftProbs::OneHot,
        }
    }

    /// Keeps the first `num_tokens` draft tokens (a tree: the first nodes in node order, whose
    /// parents come before them) with their tree and `q` rows.
    pub fn truncate(&mut self, num_tokens: usize) {
        if num_tokens >= self.tokens.len() {
            return;
        }
        // The dropped token followed the last token, which is cut.
        self.dropped = None;
        if num_tokens == 0 {
            *self = Self::default();
            return;
        }
        let root_rows = usize::from(self.tree.is_some());
        let old_rows = self.tokens.len() + root_rows;
        if let Some(probs) = &mut self.probs {
            let vocab_size = probs.len() / old_rows;
            probs.truncate((num_tokens + root_rows) * vocab_size);
        }
        if let Some(tree) = &mut self.tree {
            *tree = tree.prefix(num_tokens + 1);
        }
        self.tokens.truncate(num_tokens);
        self.confidences.truncate(num_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_spec_decode::proposer::ChainDraft;

    fn tree() -> DraftTree {
        DraftTree::from_parts(
            vec![5, 1, 2, 3],
            vec![None, Some(0), Some(1), Some(0)],
            vec![0.0; 4],
        )
        .unwrap()
    }

    #[test]
    fn drafts_are_checked_against_the_root_and_their_q_rows() {
        let as_tree = |probs| Draft::Tree {
            tree: tree(),
            probs,
        };
        let pending = PendingDraft::new(as_tree(None), 5, 4).unwrap();
        assert_eq!(pending.tokens(), &[1, 2, 3]);
        assert_eq!(pending.tree(), Some(&tree()));
        assert!(
            PendingDraft::new(as_tree(None), 6, 4).is_err(),
            "wrong root"
        );
        assert!(PendingDraft::new(as_tree(Some(vec![0.25; 16])), 5, 4).is_ok());
        assert!(
            PendingDraft::new(as_tree(Some(vec![0.25; 12])), 5, 4).is_err(),
            "a tree needs a q row per node"
        );
        let sampled = Draft::Chain(ChainDraft {
            tokens: vec![1],
            probs: Some(vec![0.5; 3]),
            confidences: vec![0.5],
            dropped: None,
        });
        assert!(PendingDraft::new(sampled, 5, 4).is_err());
        let unsure = Draft::Chain(ChainDraft {
            tokens: vec![1, 2],
            probs: None,
            confidences: vec![0.5],
            dropped: None,
        });
        assert!(
            PendingDraft::new(unsure, 5, 4).is_err(),
            "one confidence per token"
        );
        let empty = Draft::Chain(ChainDraft::deterministic(vec![]));
        assert_eq!(
            PendingDraft::new(empty, 5, 4).unwrap(),
            PendingDraft::default()
        );
    }

    #[test]
    fn truncation_cuts_tokens_tree_and_q_rows_together() {
        let probs: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let draft = Draft::Tree {
            tree: tree(),
            probs: Some(probs.clone()),
        };
        let mut pending = PendingDraft::new(draft, 5, 4).unwrap();
        pending.truncate(2);
        assert_eq!(pending.tokens(), &[1, 2]);
        assert_eq!(pending.tree(), Some(&tree().prefix(3)));
        assert!(matches!(pending.probs(), DraftProbs::Rows(q) if q == &probs[..12]));

        let chain = Draft::Chain(ChainDraft {
            tokens: vec![7, 8, 9],
            probs: Some(probs[..12].to_vec()),
            confidences: vec![0.9, 0.6, 0.3],
            dropped: None,
        });
        let mut pending = PendingDraft::new(chain, 5, 4).unwrap();
        pending.truncate(1);
        assert_eq!(pending.tokens(), &[7]);
        assert_eq!(pending.confidences(), &[0.9]);
        assert!(matches!(pending.probs(), DraftProbs::Rows(q) if q == &probs[..4]));
        pending.truncate(0);
        assert_eq!(pending, PendingDraft::default());
    }

    #[test]
    fn a_dropped_token_is_kept_until_the_chain_before_it_is_cut() {
        let dropped = DroppedToken {
            token: 9,
            confidence: 0.04,
        };
        let chain = |tokens: Vec<u32>| {
            Draft::Chain(ChainDraft {
                confidences: vec![0.8; tokens.len()],
                tokens,
                probs: None,
                dropped: Some(dropped),
            })
        };
        // A chain the gate ended before its first token verifies nothing but keeps it.
        let pending = PendingDraft::new(chain(Vec::new()), 5, 4).unwrap();
        assert_eq!(pending.num_tokens(), 0);
        assert_eq!(pending.dropped(), Some(dropped));
        let mut pending = PendingDraft::new(chain(vec![7, 8]), 5, 4).unwrap();
        pending.truncate(2);
        assert_eq!(pending.dropped(), Some(dropped));
        pending.truncate(1);
        assert_eq!(pending.dropped(), None);
    }
}
