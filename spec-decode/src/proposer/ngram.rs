//! [`Proposer`] for the n-gram (prompt lookup) drafter of [`crate::ngram`].

use rayon::prelude::*;

use super::{ChainDraft, ChainStop, Draft, ProposeBatch, ProposeError, Proposer};
use crate::ngram::NgramProposer;

/// Prompt lookup keeps no per-request state and reads no target feature, so it works with any
/// feature type `F`: each request's draft is the lookup over its tokens (which end with the
/// root), cut to the request's `max_draft_tokens` and by its [`super::ChainStop`], verified
/// with a one-hot `q`. Every token of a match of `n` tokens carries the confidence
/// `n / (n + 1)`: longer matches are likelier to continue, and the engine's calibration learns
/// how likely.
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
                Draft::Chain(lookup.chain(request.tokens, request.max_draft_tokens, request.stop))
            })
            .collect())
    }

    fn release(&mut self, _request_id: u64) {}
}

impl NgramProposer {
    /// The lookup's chain for a request whose tokens so far (ending with its root) are
    /// `tokens`: at most `max_draft_tokens`, each with the confidence `n / (n + 1)` of a match
    /// of `n` tokens, cut where `stop` ends it.
    pub(crate) fn chain(
        &self,
        tokens: &[u32],
        max_draft_tokens: usize,
        stop: Option<ChainStop<'_>>,
    ) -> ChainDraft {
        if max_draft_tokens == 0 {
            return ChainDraft::default();
        }
        let (mut drafted, matched) = self.propose_matched(tokens);
        drafted.truncate(max_draft_tokens);
        let confidence = matched as f32 / (matched + 1) as f32;
        let confidences = vec![confidence; drafted.len()];
        ChainDraft::cut(drafted, confidences, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ngram::NgramConfig;
    use crate::proposer::{ConfidenceCalibration, ProposeRequest};

    /// Lookups of 1 or 2 tokens, drafting up to 3.
    fn lookup() -> NgramProposer {
        NgramProposer::new(NgramConfig {
            min_n: 1,
            max_n: 2,
            k: 3,
        })
        .unwrap()
    }

    fn chain_tokens(drafts: &[Draft]) -> Vec<Vec<u32>> {
        drafts
            .iter()
            .map(|d| d.as_chain().unwrap().tokens.clone())
            .collect()
    }

    #[test]
    fn drafts_continue_the_latest_match_and_respect_the_budget() {
        let mut ngram = lookup();
        // "1 2" occurred before and was followed by 3 4 5; the history ends with the root 2.
        let history = [1, 2, 3, 4, 5, 1, 2];
        let requests = [
            ProposeRequest {
                request_id: 1,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 3,
                stop: None,
                temperature: 0.0,
                seed: 0,
                drafting_suspended: false,
            },
            ProposeRequest {
                request_id: 2,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 1,
                stop: None,
                temperature: 0.0,
                seed: 0,
                drafting_suspended: false,
            },
            ProposeRequest {
                request_id: 3,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 0,
                stop: None,
                temperature: 0.0,
                seed: 0,
                drafting_suspended: false,
            },
        ];
        let drafts =
            Proposer::<()>::draft(&mut ngram, &ProposeBatch::without_features(&requests)).unwrap();
        assert_eq!(chain_tokens(&drafts), vec![vec![3, 4, 5], vec![3], vec![]]);
        assert!(drafts.iter().all(|d| d.as_chain().unwrap().probs.is_none()));
        // A match of two tokens: each draft token's confidence is 2/3.
        let confidences = &drafts[0].as_chain().unwrap().confidences;
        assert_eq!(confidences, &vec![2.0 / 3.0; 3]);
        assert_eq!(Proposer::<()>::num_speculative_tokens(&ngram), 3);
        assert!(!Proposer::<()>::needs_target_features(&ngram));
    }

    #[test]
    fn a_chain_stop_cuts_the_lookup() {
        let mut ngram = lookup();
        let history = [1, 2, 3, 4, 5, 1, 2];
        let calibration = ConfidenceCalibration::new();
        let mut draft = |keep_above: f64, extend_above: f64| {
            let requests = [ProposeRequest {
                request_id: 1,
                tokens: &history,
                first_new_position: 5,
                feature_rows: &[],
                max_draft_tokens: 3,
                stop: Some(ChainStop {
                    calibration: &calibration,
                    keep_above: &[keep_above],
                    extend_above: &[extend_above],
                }),
                temperature: 0.0,
                seed: 0,
                drafting_suspended: false,
            }];
            let drafts =
                Proposer::<()>::draft(&mut ngram, &ProposeBatch::without_features(&requests));
            chain_tokens(&drafts.unwrap()).remove(0)
        };
        // Paths 2/3, 4/9, 8/27; uncalibrated, the next token is expected at half the path.
        assert_eq!(draft(0.0, 0.25), vec![3, 4]);
        assert_eq!(draft(0.5, 0.0), vec![3]);
        assert_eq!(draft(0.7, 0.0), Vec::<u32>::new());
        assert_eq!(draft(0.0, 0.0), vec![3, 4, 5]);
    }

    #[test]
    fn inconsistent_requests_are_rejected() {
        let mut ngram = lookup();
        let requests = [ProposeRequest {
            request_id: 9,
            tokens: &[4],
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 3,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }];
        let err = Proposer::<()>::draft(&mut ngram, &ProposeBatch::without_features(&requests))
            .unwrap_err();
        assert!(matches!(
            err,
            ProposeError::NothingCommitted { request_id: 9, .. }
        ));
    }
}
