//! A proposer that replays known continuations: a "perfect drafter" for engine tests.

use super::{ChainDraft, Draft, ProposeBatch, ProposeError, Proposer};

/// Drafts by replaying scripts: full token sequences (prompt then expected output) known in
/// advance, e.g. from a non-speculative greedy run of the target.
///
/// A request whose tokens are a prefix of a script gets the script's next tokens (up to `k` and
/// its `max_draft_tokens`); a request that matches no script gets an empty draft. With scripts
/// taken from the target's own greedy output, every draft is accepted, so a greedy speculative
/// run must reach a mean acceptance length of exactly `k + 1` (except where a script ends).
/// Optionally every draft token at one chain position is replaced by a wrong token, to exercise
/// rejection at a chosen depth.
#[derive(Clone, Debug)]
pub struct ReplayProposer {
    k: usize,
    scripts: Vec<Vec<u32>>,
    corrupt: Option<Corruption>,
    released: Vec<u64>,
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
            released: Vec::new(),
        }
    }

    /// Replaces the draft token at chain position `position` (0-based) by `token` (choose a token
    /// the script does not hold there), so drafts are rejected from that depth on.
    pub fn with_wrong_token_at(mut self, position: usize, token: u32) -> Self {
        self.corrupt = Some(Corruption { position, token });
        self
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

impl<F> Proposer<F> for ReplayProposer {
    fn num_speculative_tokens(&self) -> usize {
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
                Draft::Chain(ChainDraft::deterministic(tokens))
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
    fn a_wrong_token_can_be_planted_at_a_chain_position() {
        let mut replay =
            ReplayProposer::new(3, vec![vec![1, 2, 3, 4, 5, 6]]).with_wrong_token_at(1, 0);
        assert_eq!(draft_for(&mut replay, &[1, 2], 8), vec![3, 0, 5]);
        Proposer::<()>::release(&mut replay, 4);
        assert_eq!(replay.released(), &[4]);
    }
}
