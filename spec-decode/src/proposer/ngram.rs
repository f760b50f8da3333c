//! [`Proposer`] for the n-gram (prompt lookup) drafter of [`crate::ngram`].

use rayon::prelude::*;

use super::{ChainDraft, Draft, ProposeBatch, ProposeError, Proposer};
use crate::ngram::NgramProposer;

/// Prompt lookup keeps no per-request state and reads no target feature, so it works with any
/// feature type `F`: each request's draft is the lookup over its tokens (which end with the
/// root), cut to the request's `max_draft_tokens`, verified with a one-hot `q`.
impl<F> Proposer<F> for NgramProposer {
    fn num_speculative_tokens(&self) -> usize {
        self.config().k
    }

    fn needs_target_features(&self) -> bool {
        false
    }

    fn draft(&mut self, batch: &ProposeBatch<'_, F>) -> Result<Vec<Draft>, ProposeError> {
        batch.check(None)?;
        let lookup = &*self;
        Ok(batch
            .requests
            .par_iter()
            .map(|request| {
                if request.max_draft_tokens == 0 {
                    return Draft::empty();
                }
                let mut tokens = lookup.propose(request.tokens);
                tokens.truncate(request.max_draft_tokens);
                Draft::Chain(ChainDraft::deterministic(tokens))
            })
            .collect())
    }

    fn release(&mut self, _request_id: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ngram::NgramConfig;
    use crate::proposer::ProposeRequest;

    fn chain_tokens(drafts: &[Draft]) -> Vec<Vec<u32>> {
        drafts
            .iter()
            .map(|d| d.as_chain().unwrap().tokens.clone())
            .collect()
    }

    #[test]
    fn drafts_continue_the_latest_match_and_respect_the_budget() {
        let mut ngram = NgramProposer::new(NgramConfig {
            min_n: 1,
            max_n: 2,
            k: 3,
        })
        .unwrap();
        // "1 2" occurred before and was followed by 3 4 5; the history ends with the root 2.
        let history = [1, 2, 3, 4, 5, 1, 2];
        let requests = [
            ProposeRequest {
                request_id: 1,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 3,
            },
            ProposeRequest {
                request_id: 2,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 1,
            },
            ProposeRequest {
                request_id: 3,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 0,
            },
        ];
        let drafts =
            Proposer::<()>::draft(&mut ngram, &ProposeBatch::without_features(&requests)).unwrap();
        assert_eq!(chain_tokens(&drafts), vec![vec![3, 4, 5], vec![3], vec![]]);
        assert!(drafts.iter().all(|d| d.as_chain().unwrap().probs.is_none()));
        assert_eq!(Proposer::<()>::num_speculative_tokens(&ngram), 3);
        assert!(!Proposer::<()>::needs_target_features(&ngram));
    }

    #[test]
    fn inconsistent_requests_are_rejected() {
        let mut ngram = NgramProposer::new(NgramConfig {
            min_n: 1,
            max_n: 2,
            k: 3,
        })
        .unwrap();
        let requests = [ProposeRequest {
            request_id: 9,
            tokens: &[4],
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 3,
        }];
        let err = Proposer::<()>::draft(&mut ngram, &ProposeBatch::without_features(&requests))
            .unwrap_err();
        assert!(matches!(
            err,
            ProposeError::NothingCommitted { request_id: 9, .. }
        ));
    }
}
