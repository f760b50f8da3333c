//! A proposer that replays known continuations: a "perfect drafter" for engine tests.

use super::{ChainDraft, Draft, ProposeBatch, ProposeError, Proposer};
use crate::tree::DraftTree;

/// Drafts by replaying scripts: full token sequences (prompt then expected output) known in
/// advance, e.g. from a non-speculative greedy run of the target.
///
/// A request whose tokens are a prefix of a script gets the script's next tokens (up to `k` and
/// its `max_draft_tokens`); a request that matches no script gets an empty draft. With scripts
/// taken from the target's own greedy output, every draft is accepted, so a greedy speculative
/// run must reach a mean acceptance length of exactly `k + 1` (except where a script ends).
/// Optionally every draft token at one chain position is replaced by a wrong token, to exercise
/// rejection at a chosen depth. With decoys, drafts are trees instead: at every depth the
/// script's token comes after wrong siblings, so verification must find it among them and the
/// accepted path is not a prefix of the node order. With confidences, chain tokens carry one
/// confidence for the script's tokens and another for the wrong one, and each request's
/// [`super::ChainStop`] cuts its chain.
#[derive(Clone, Debug)]
pub struct ReplayProposer {
    k: usize,
    scripts: Vec<Vec<u32>>,
    corrupt: Option<Corruption>,
    decoys: Option<Decoys>,
    confidences: Option<Confidences>,
    released: Vec<u64>,
}

/// The confidences [`ReplayProposer`] reports for the script's tokens and for the wrong one.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Confidences {
    right: f32,
    wrong: f32,
}

/// The wrong siblings [`ReplayProposer`] puts before every script token of a tree draft.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decoys {
    per_depth: usize,
    vocab_size: u32,
}

/// Which chain position [`ReplayProposer`] falsifies, and with what token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Corruption {
    position: usize,
    token: u32,
}

impl ReplayProposer {
    /// A replayer proposing up to `k` tokens per step from `scripts` (tried in order; the
    /// first script that extends a request's tokens is used).
    pub fn new(k: usize, scripts: Vec<Vec<u32>>) -> Self {
        Self {
            k,
            scripts,
            corrupt: None,
            decoys: None,
            confidences: None,
            released: Vec::new(),
        }
    }

    /// Drafts trees: at every depth, `per_depth` wrong tokens (`token + 1`, `token + 2`, ...
    /// modulo `vocab_size`) come first as leaves, then the script's token, under which the
    /// next depth hangs. A tree of depth `d` holds `d × (per_depth + 1)` draft tokens, so
    /// [`Proposer::num_speculative_tokens`] becomes `k × (per_depth + 1)`.
    ///
    /// # Panics
    /// If `per_depth >= vocab_size` (a decoy would repeat the script's token).
    pub fn with_tree_decoys(mut self, per_depth: usize, vocab_size: u32) -> Self {
        assert!(
            (per_depth as u64) < u64::from(vocab_size),
            "{per_depth} decoys need a vocabulary of more than {per_depth} tokens"
        );
        self.decoys = Some(Decoys {
            per_depth,
            vocab_size,
        });
        self
    }

    /// Replaces the draft token at chain position `position` (0-based) by `token` (choose a token
    /// the script does not hold there), so drafts are rejected from that depth on.
    pub fn with_wrong_token_at(mut self, position: usize, token: u32) -> Self {
        self.corrupt = Some(Corruption { position, token });
        self
    }

    /// Reports confidence `right` for every replayed script token of a chain and `wrong` for the
    /// token of [`ReplayProposer::with_wrong_token_at`], and cuts each chain by its request's
    /// stop.
    pub fn with_confidences(mut self, right: f32, wrong: f32) -> Self {
        self.confidences = Some(Confidences { right, wrong });
        self
    }

    /// The chain of `tokens` with its confidences, cut by `stop`.
    fn chain(&self, tokens: Vec<u32>, stop: Option<super::ChainStop<'_>>) -> ChainDraft {
        let Some(Confidences { right, wrong }) = self.confidences else {
            return ChainDraft::deterministic(tokens);
        };
        let wrong_at = self.corrupt.map(|c| c.position);
        let confidences: Vec<f32> = (0..tokens.len())
            .map(|i| if Some(i) == wrong_at { wrong } else { right })
            .collect();
        ChainDraft::cut(tokens, confidences, stop)
    }

    /// The requests released so far, in order (to check that an engine frees draft state).
    pub fn released(&self) -> &[u64] {
        &self.released
    }

    /// The draft for a request whose tokens so far are `tokens`, capped at `max_tokens`.
    fn replay(&self, tokens: &[u32], max_tokens: usize) -> Vec<u32> {
        let budget = max_tokens.min(self.k);
        let Some(script) = self
            .scripts
            .iter()
            .find(|script| script.len() > tokens.len() && script.starts_with(tokens))
        else {
            return Vec::new();
        };
        let mut draft: Vec<u32> = script[tokens.len()..]
            .iter()
            .take(budget)
            .copied()
            .collect();
        if let Some(Corruption { position, token }) = self.corrupt {
            if let Some(slot) = draft.get_mut(position) {
                *slot = token;
            }
        }
        draft
    }
}

impl Decoys {
    /// The tree of `chain` after `root`, with the decoys before every chain token.
    fn tree(&self, root: u32, chain: &[u32]) -> DraftTree {
        let mut tree = DraftTree::new(root);
        let mut parent = 0;
        for (depth, &token) in chain.iter().enumerate() {
            let score = -(depth as f32 + 1.0);
            for offset in 1..=self.per_depth as u64 {
                let decoy = (u64::from(token) + offset) % u64::from(self.vocab_size);
                tree.push(parent, decoy as u32, score)
                    .expect("the parent is an earlier node");
            }
            parent = tree
                .push(parent, token, score)
                .expect("the parent is an earlier node");
        }
        tree
    }
}

impl<F> Proposer<F> for ReplayProposer {
    fn num_speculative_tokens(&self) -> usize {
        self.k * self.decoys.map_or(1, |d| d.per_depth + 1)
    }

    fn max_draft_depth(&self) -> usize {
        self.k
    }

    fn needs_target_features(&self) -> bool {
        false
    }

    fn draft(&mut self, batch: &ProposeBatch<'_, F>) -> Result<Vec<Draft>, ProposeError> {
        batch.check(None)?;
        Ok(batch
            .requests
            .iter()
            .map(|request| {
                let tokens = self.replay(request.tokens, request.max_draft_tokens);
                match (self.decoys, request.tokens.last()) {
                    (Some(decoys), Some(&root)) if !tokens.is_empty() => Draft::Tree {
                        tree: decoys.tree(root, &tokens),
                        probs: None,
                    },
                    _ => Draft::Chain(self.chain(tokens, request.stop)),
                }
            })
            .collect())
    }

    fn release(&mut self, request_id: u64) {
        self.released.push(request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proposer::ProposeRequest;

    fn draft_for(
        proposer: &mut ReplayProposer,
        tokens: &[u32],
        max_draft_tokens: usize,
    ) -> Vec<u32> {
        let requests = [ProposeRequest {
            request_id: 1,
            tokens,
            first_new_position: tokens.len().saturating_sub(2),
            feature_rows: &[],
            max_draft_tokens,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }];
        let drafts =
            Proposer::<()>::draft(proposer, &ProposeBatch::without_features(&requests)).unwrap();
        drafts[0].as_chain().unwrap().tokens.clone()
    }

    #[test]
    fn replays_the_matching_script_within_the_budget() {
        let mut replay = ReplayProposer::new(3, vec![vec![9, 9, 9], vec![1, 2, 3, 4, 5, 6, 7]]);
        assert_eq!(draft_for(&mut replay, &[1, 2, 3], 8), vec![4, 5, 6]);
        assert_eq!(draft_for(&mut replay, &[1, 2, 3], 2), vec![4, 5]);
        assert_eq!(
            draft_for(&mut replay, &[1, 2, 3, 4, 5, 6], 8),
            vec![7],
            "the script ends"
        );
        assert_eq!(
            draft_for(&mut replay, &[1, 2, 8], 8),
            Vec::<u32>::new(),
            "diverged"
        );
    }

    #[test]
    fn decoys_turn_drafts_into_trees_with_the_script_token_last_at_each_depth() {
        let mut replay = ReplayProposer::new(2, vec![vec![1, 2, 3, 4, 5]]).with_tree_decoys(2, 5);
        assert_eq!(Proposer::<()>::num_speculative_tokens(&replay), 6);
        assert_eq!(Proposer::<()>::max_draft_depth(&replay), 2);
        let requests = [ProposeRequest {
            request_id: 1,
            tokens: &[1, 2],
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 8,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }];
        let drafts =
            Proposer::<()>::draft(&mut replay, &ProposeBatch::without_features(&requests)).unwrap();
        let Draft::Tree { tree, probs: None } = &drafts[0] else {
            panic!("a tree draft, got {:?}", drafts[0]);
        };
        // Root 2; depth 1: decoys 4, 0 (3 + 1, 3 + 2 mod 5) then 3; depth 2 under 3: 0, 1, 4.
        assert_eq!(tree.tokens(), &[2, 4, 0, 3, 0, 1, 4]);
        assert_eq!(tree.path_to(6), vec![0, 3, 6]);
        assert_eq!(tree.max_depth(), 2);
    }

    #[test]
    fn a_wrong_token_can_be_planted_at_a_chain_position() {
        let mut replay =
            ReplayProposer::new(3, vec![vec![1, 2, 3, 4, 5, 6]]).with_wrong_token_at(1, 0);
        assert_eq!(draft_for(&mut replay, &[1, 2], 8), vec![3, 0, 5]);
        Proposer::<()>::release(&mut replay, 4);
        assert_eq!(replay.released(), &[4]);
    }
}
