//! The batched rejection sampler: validation, then per-request verification in parallel.

use rayon::prelude::*;

use super::target::TargetDistributions;
use super::walk::{greedy_walk, stochastic_walk, ChainShape, DraftShape};
use super::{ChainRequest, DraftProbs, RejectionError, TargetRows, TreeRequest, VerifyOutcome};
use crate::sampling::{RequestRng, SamplingConfig};

/// Verifies drafts against the target model's rows for a fixed vocabulary size.
///
/// Greedy requests keep the longest draft prefix that equals the target's argmax and emit the
/// argmax at the first mismatch (or after the last draft: the bonus token). Other requests use
/// lossless speculative sampling (Leviathan et al. 2211.17192; SpecInfer 2305.09781 for trees),
/// so every emitted token is distributed exactly as the request's own sampling pipeline says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejectionSampler {
    vocab_size: usize,
}

impl RejectionSampler {
    /// A sampler for rows of `vocab_size` values.
    pub fn new(vocab_size: usize) -> Result<Self, RejectionError> {
        if vocab_size == 0 {
            return Err(RejectionError::EmptyVocabulary);
        }
        Ok(Self { vocab_size })
    }

    /// The number of values per row this sampler expects.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Verifies one chain draft.
    pub fn verify_chain(&self, request: ChainRequest<'_>) -> Result<VerifyOutcome, RejectionError> {
        self.check_chain(&request)?;
        Ok(self.run_chain(request))
    }

    /// Verifies one tree draft.
    pub fn verify_tree(&self, request: TreeRequest<'_>) -> Result<VerifyOutcome, RejectionError> {
        self.check_tree(&request)?;
        Ok(self.run_tree(request))
    }

    /// Verifies a batch of chain drafts in parallel, one outcome per request in order. Every
    /// request is validated first: on error no request is verified (no stream advances).
    pub fn verify_chain_batch(
        &self,
        requests: Vec<ChainRequest<'_>>,
    ) -> Result<Vec<VerifyOutcome>, RejectionError> {
        validate_all(&requests, |r| self.check_chain(r))?;
        Ok(requests
            .into_par_iter()
            .map(|r| self.run_chain(r))
            .collect())
    }

    /// Verifies a batch of tree drafts in parallel, one outcome per request in order. Every
    /// request is validated first: on error no request is verified (no stream advances).
    pub fn verify_tree_batch(
        &self,
        requests: Vec<TreeRequest<'_>>,
    ) -> Result<Vec<VerifyOutcome>, RejectionError> {
        validate_all(&requests, |r| self.check_tree(r))?;
        Ok(requests.into_par_iter().map(|r| self.run_tree(r)).collect())
    }

    fn check_chain(&self, request: &ChainRequest<'_>) -> Result<(), RejectionError> {
        let k = request.draft_tokens.len();
        self.check(
            request.config,
            request.target,
            k + 1,
            request.draft_probs,
            k,
        )
    }

    fn check_tree(&self, request: &TreeRequest<'_>) -> Result<(), RejectionError> {
        let nodes = request.tree.num_nodes();
        self.check(
            request.config,
            request.target,
            nodes,
            request.draft_probs,
            nodes,
        )
    }

    fn check(
        &self,
        config: &SamplingConfig,
        target: TargetRows<'_>,
        target_rows: usize,
        draft_probs: DraftProbs<'_>,
        draft_rows: usize,
    ) -> Result<(), RejectionError> {
        config.validate()?;
        let (what, values) = match target {
            TargetRows::Logits { logits, .. } => ("target logits", logits),
            TargetRows::Probs(probs) => ("target probabilities", probs),
        };
        self.check_rows(what, values, target_rows)?;
        if let (DraftProbs::Rows(q), false) = (draft_probs, config.is_greedy()) {
            self.check_rows("draft probabilities", q, draft_rows)?;
        }
        Ok(())
    }

    fn check_rows(
        &self,
        what: &'static str,
        values: &[f32],
        rows: usize,
    ) -> Result<(), RejectionError> {
        if values.len() == rows * self.vocab_size {
            Ok(())
        } else {
            Err(RejectionError::RowShape {
                what,
                rows,
                vocab_size: self.vocab_size,
                actual: values.len(),
            })
        }
    }

    fn run_chain(&self, request: ChainRequest<'_>) -> VerifyOutcome {
        let shape = ChainShape {
            drafts: request.draft_tokens,
        };
        self.walk(
            &shape,
            request.config,
            request.target,
            request.draft_probs,
            request.rng,
        )
    }

    fn run_tree(&self, request: TreeRequest<'_>) -> VerifyOutcome {
        self.walk(
            request.tree,
            request.config,
            request.target,
            request.draft_probs,
            request.rng,
        )
    }

    fn walk(
        &self,
        shape: &impl DraftShape,
        config: &SamplingConfig,
        target: TargetRows<'_>,
        draft_probs: DraftProbs<'_>,
        rng: &mut RequestRng,
    ) -> VerifyOutcome {
        let mut target = TargetDistributions::new(config, target, self.vocab_size);
        if config.is_greedy() {
            greedy_walk(shape, &mut target)
        } else {
            stochastic_walk(shape, &mut target, draft_probs, self.vocab_size, rng)
        }
    }
}

/// Runs `check` on every request, tagging the first failure with its index.
fn validate_all<R>(
    requests: &[R],
    check: impl Fn(&R) -> Result<(), RejectionError>,
) -> Result<(), RejectionError> {
    requests
        .iter()
        .enumerate()
        .try_for_each(|(index, request)| {
            check(request).map_err(|error| RejectionError::InBatch {
                index,
                error: Box::new(error),
            })
        })
}
