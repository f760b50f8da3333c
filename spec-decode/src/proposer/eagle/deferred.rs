//! Committed rows a request has not run through the draft head yet.
//!
//! A request that drafts nothing this step (the engine's policy chose 0 tokens for it) only
//! needs its committed rows in the draft KV cache by the time it drafts again. Keeping their
//! target features until then lets a step in which no request drafts skip the head entirely,
//! and runs a request's backlog through the head as one batched forward, which costs less per
//! row than one row per step.

use std::collections::HashMap;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Most deferred rows a request keeps: past this its backlog is taken in even without a draft,
/// which bounds both the memory of the features kept and the work waiting for its next draft.
pub(super) const MAX_DEFERRED_ROWS: usize = 128;

/// The target features of every request's deferred rows, `[rows, width]` chunks in the order
/// they were committed (joined only when taken in, so deferring costs no copy per step).
#[derive(Debug)]
pub(super) struct DeferredRows<B: Backend> {
    by_request: HashMap<u64, Vec<Tensor<B, 2>>>,
}

impl<B: Backend> Default for DeferredRows<B> {
    fn default() -> Self {
        Self {
            by_request: HashMap::new(),
        }
    }
}

impl<B: Backend> DeferredRows<B> {
    /// Number of rows deferred for `request_id`.
    pub fn len(&self, request_id: u64) -> usize {
        self.by_request
            .get(&request_id)
            .map_or(0, |chunks| chunks.iter().map(|c| c.dims()[0]).sum())
    }

    /// The features deferred for `request_id`, followed by `new_rows`, as one tensor.
    pub fn joined(&self, request_id: u64, new_rows: Tensor<B, 2>) -> Tensor<B, 2> {
        match self.by_request.get(&request_id) {
            Some(chunks) => {
                let mut all = chunks.clone();
                all.push(new_rows);
                Tensor::cat(all, 0)
            }
            None => new_rows,
        }
    }

    /// Defers `new_rows` of `request_id` after its earlier deferred rows.
    pub fn push(&mut self, request_id: u64, new_rows: Tensor<B, 2>) {
        self.by_request
            .entry(request_id)
            .or_default()
            .push(new_rows);
    }

    /// Forgets the deferred rows of `request_id` (taken in, or the request released).
    pub fn clear(&mut self, request_id: u64) {
        self.by_request.remove(&request_id);
    }
}
