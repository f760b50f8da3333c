//! What the engine hands a proposer after each target forward.

use std::collections::HashSet;

use super::{ChainStop, ProposeError, TargetKeyValues};

/// One request's rows committed by the last target forward, and its drafting budget.
///
/// After a target forward over positions `first_new_position..` of a request, the engine keeps
/// (commits) some leading rows: a whole prefill chunk, or the root and the accepted drafts of a
/// verification. `tokens` holds every token of the request up to and including the token that
/// follows the last committed row: the token the target just sampled (the next draft's root), or,
/// after a partial prefill chunk, the first prompt token not yet processed.
///
/// So the committed rows are `tokens[first_new_position..tokens.len() - 1]`, at positions
/// `first_new_position..tokens.len() - 1`, and [`ProposeRequest::next_token`] is the last token.
#[derive(Clone, Copy, Debug)]
pub struct ProposeRequest<'a> {
    /// The engine's id of the request; the proposer keys its per-request state by it.
    pub request_id: u64,
    /// Prompt and generated tokens through the next root (see the type's documentation).
    pub tokens: &'a [u32],
    /// Position of the first row committed by the last target forward.
    pub first_new_position: usize,
    /// For each committed row, in order, its row in the batch's feature matrix (the target
    /// features tapped at that row). Empty for proposers that draft without features.
    pub feature_rows: &'a [usize],
    /// Most draft tokens to propose for this request now (0: only take in the committed rows).
    /// The engine caps it so that the root and the drafts fit in the context window.
    pub max_draft_tokens: usize,
    /// Where a proposer that knows its confidence ends this request's chain before
    /// `max_draft_tokens` (`None`: it drafts them all). Proposers without confidences ignore
    /// it.
    pub stop: Option<ChainStop<'a>>,
    /// The temperature the request's tokens are sampled at (0: greedy). A proposer that can
    /// sample its drafts may match it (see
    /// [`DraftSampling::FollowRequests`](super::DraftSampling::FollowRequests)); the others
    /// ignore it.
    pub temperature: f32,
    /// The request's sampling seed; a proposer that samples this request's drafts at its
    /// temperature derives its stream for the request from it, so that a seeded request drafts
    /// alike whatever else runs beside it.
    pub seed: u64,
    /// Whether drafting is suspended for this request until further notice (too many
    /// requests run for drafts to pay), rather than skipped for a step or a few (a request
    /// the draft policy probes now and then). A proposer that can take committed rows in
    /// whenever it drafts again (a draft model, which needs only the tokens) leaves them for
    /// that call instead of spending on them now; a proposer that must read each row's
    /// features when they are tapped takes them in as always. Meaningful only with
    /// `max_draft_tokens` 0.
    pub drafting_suspended: bool,
}

impl<'a> ProposeRequest<'a> {
    /// The rows committed by the last target forward.
    pub fn committed_tokens(&self) -> &'a [u32] {
        let end = self.tokens.len().saturating_sub(1);
        &self.tokens[self.first_new_position.min(end)..end]
    }

    /// Number of rows committed by the last target forward.
    pub fn num_committed(&self) -> usize {
        self.committed_tokens().len()
    }

    /// The token after the last committed row: the next draft's root (not in any KV cache yet).
    ///
    /// # Panics
    /// When `tokens` is empty; [`ProposeRequest::check`] rejects that first.
    pub fn next_token(&self) -> u32 {
        self.tokens[self.tokens.len() - 1]
    }

    /// Checks that at least one row was committed and, when `with_features`, that every
    /// committed row names a feature row below `feature_rows_in_batch`.
    pub fn check(&self, with_features: Option<usize>) -> Result<(), ProposeError> {
        if self.first_new_position + 1 >= self.tokens.len() {
            return Err(ProposeError::NothingCommitted {
                request_id: self.request_id,
                first_new_position: self.first_new_position,
                num_tokens: self.tokens.len(),
            });
        }
        if let Some(rows) = with_features {
            if self.feature_rows.len() != self.num_committed() {
                return Err(ProposeError::FeatureRowCount {
                    request_id: self.request_id,
                    feature_rows: self.feature_rows.len(),
                    committed: self.num_committed(),
                });
            }
            if let Some(&row) = self.feature_rows.iter().find(|&&row| row >= rows) {
                return Err(ProposeError::FeatureRowOutOfRange {
                    request_id: self.request_id,
                    row,
                    rows,
                });
            }
        }
        Ok(())
    }
}

/// The requests of one drafting step, with the target features tapped in the forward that
/// committed their rows.
#[derive(Clone, Copy, Debug)]
pub struct ProposeBatch<'a, F> {
    /// The tapped target features (burn: a `[rows, width]` tensor), or `None` when the target
    /// forward tapped none.
    pub features: Option<&'a F>,
    /// The requests to draft for, each at most once.
    pub requests: &'a [ProposeRequest<'a>],
    /// The target's KV cache for these requests, where the engine offers it to a proposer
    /// that copies the target's keys and values; `None` otherwise.
    pub target_kv: Option<&'a dyn TargetKeyValues<F>>,
}

impl<'a, F> ProposeBatch<'a, F> {
    /// A batch without target features (for proposers such as n-gram lookup).
    pub fn without_features(requests: &'a [ProposeRequest<'a>]) -> Self {
        Self {
            features: None,
            requests,
            target_kv: None,
        }
    }

    /// The same batch offering the target's KV cache.
    pub fn with_target_kv(self, target_kv: &'a dyn TargetKeyValues<F>) -> Self {
        Self {
            target_kv: Some(target_kv),
            ..self
        }
    }

    /// Checks every request (see [`ProposeRequest::check`]) and that no request repeats.
    /// `feature_rows_in_batch` is the feature matrix's row count for proposers that read it.
    pub fn check(&self, feature_rows_in_batch: Option<usize>) -> Result<(), ProposeError> {
        let mut seen = HashSet::with_capacity(self.requests.len());
        for request in self.requests {
            request.check(feature_rows_in_batch)?;
            if !seen.insert(request.request_id) {
                return Err(ProposeError::DuplicateRequest {
                    request_id: request.request_id,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(
        tokens: &'a [u32],
        first_new_position: usize,
        feature_rows: &'a [usize],
    ) -> ProposeRequest<'a> {
        ProposeRequest {
            request_id: 3,
            tokens,
            first_new_position,
            feature_rows,
            max_draft_tokens: 2,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }
    }

    #[test]
    fn committed_rows_end_before_the_next_root() {
        let r = request(&[10, 11, 12, 13, 14], 2, &[0, 1]);
        assert_eq!(r.committed_tokens(), &[12, 13]);
        assert_eq!(r.num_committed(), 2);
        assert_eq!(r.next_token(), 14);
        assert_eq!(r.check(Some(2)), Ok(()));
    }

    #[test]
    fn a_request_without_new_rows_is_rejected() {
        let err = request(&[10, 11], 1, &[]).check(None).unwrap_err();
        assert!(matches!(
            err,
            ProposeError::NothingCommitted { request_id: 3, .. }
        ));
        let err = request(&[], 0, &[]).check(None).unwrap_err();
        assert!(err.to_string().contains("no committed row"), "{err}");
    }

    #[test]
    fn feature_rows_must_match_the_committed_rows() {
        let r = request(&[10, 11, 12], 0, &[0]);
        assert_eq!(
            r.check(Some(4)),
            Err(ProposeError::FeatureRowCount {
                request_id: 3,
                feature_rows: 1,
                committed: 2
            })
        );
        assert_eq!(
            r.check(None),
            Ok(()),
            "proposers without features ignore the rows"
        );
        let r = request(&[10, 11, 12], 0, &[0, 4]);
        assert_eq!(
            r.check(Some(4)),
            Err(ProposeError::FeatureRowOutOfRange {
                request_id: 3,
                row: 4,
                rows: 4
            })
        );
    }

    #[test]
    fn a_request_may_appear_only_once_per_batch() {
        let requests = [request(&[1, 2], 0, &[]), request(&[5, 6], 0, &[])];
        let batch = ProposeBatch::<()>::without_features(&requests);
        assert_eq!(
            batch.check(None),
            Err(ProposeError::DuplicateRequest { request_id: 3 })
        );
    }
}
