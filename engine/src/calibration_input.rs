//! What calibrating a drafter's confidences needs of a request's draft, taken before a step's
//! commit clears the draft: the confidences of the verified tokens (or the verified tree, whose
//! scores hold them), and the token a confidence gate dropped after them, judged against the
//! target's next token.

use aquila_spec_decode::proposer::DroppedToken;
use aquila_spec_decode::tree::DraftTree;

use crate::requests::BatchEntry;

/// What the calibration of draft confidences needs of a request's draft, taken before the
/// step's commit clears it.
pub(crate) struct CalibrationInput {
    /// The drafter's confidence in each draft token of a chain.
    pub confidences: Vec<f32>,
    /// The verified tree, for a tree draft.
    pub tree: Option<DraftTree>,
    /// A greedy request's token that a gate dropped right after the draft tokens.
    dropped: Option<DroppedToken>,
    /// Draft tokens the step verifies.
    draft_tokens: usize,
    /// The request's tokens before the step's commit.
    tokens_before: usize,
}

impl CalibrationInput {
    /// What `entry`'s draft holds before the step's commit clears it.
    pub fn before_commit(entry: &BatchEntry<'_>) -> Self {
        let request = &*entry.request;
        let draft = &request.draft;
        Self {
            confidences: draft.confidences().to_vec(),
            tree: draft.tree().cloned(),
            dropped: draft
                .dropped()
                .filter(|_| request.sampling.params.is_greedy()),
            draft_tokens: draft.num_tokens(),
            tokens_before: request.token_ids.len(),
        }
    }

    /// The dropped token and whether the target's next token matched it, where the step
    /// verified the whole draft (`fed` tokens), accepted all of it (`accepted` tokens) and
    /// emitted the token after it; `token_ids` are the request's tokens after the commit.
    pub fn dropped_outcome(
        &self,
        fed: usize,
        accepted: usize,
        token_ids: &[u32],
    ) -> Option<(DroppedToken, bool)> {
        let dropped = self.dropped?;
        let emitted = token_ids.get(self.tokens_before..)?;
        let all_accepted = fed == self.draft_tokens && accepted == fed;
        let next = emitted
            .get(fed)
            .filter(|_| all_accepted && emitted.len() == fed + 1)?;
        Some((dropped, *next == dropped.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A greedy request of 10 tokens whose draft of 2 tokens was followed by dropped token 7.
    fn input() -> CalibrationInput {
        CalibrationInput {
            confidences: vec![0.9, 0.8],
            tree: None,
            dropped: Some(DroppedToken {
                token: 7,
                confidence: 0.04,
            }),
            draft_tokens: 2,
            tokens_before: 10,
        }
    }

    #[test]
    fn a_dropped_token_is_judged_by_the_token_after_a_draft_accepted_whole() {
        let before = [1u32; 10];
        let committed = |emitted: &[u32]| [&before[..], emitted].concat();
        let judged = |fed, accepted, emitted: &[u32]| {
            input()
                .dropped_outcome(fed, accepted, &committed(emitted))
                .map(|(_, accepted)| accepted)
        };
        assert_eq!(judged(2, 2, &[4, 5, 7]), Some(true));
        assert_eq!(judged(2, 2, &[4, 5, 8]), Some(false));
        // A rejection, a draft cut before verification, or a stop before the next token say
        // nothing about it.
        assert_eq!(judged(2, 1, &[4, 9]), None);
        assert_eq!(judged(1, 1, &[4, 7]), None);
        assert_eq!(judged(2, 2, &[4, 5]), None);
    }
}
