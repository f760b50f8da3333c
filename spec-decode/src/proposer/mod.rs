//! Proposers: what drafts the tokens that the target verifies in the next step.
//!
//! Every drafter implements [`Proposer`]. After each target forward the engine calls
//! [`Proposer::draft`] once with a [`ProposeBatch`]: for every request that the forward
//! advanced, the rows it committed (a prefill chunk, or the root and the accepted drafts), the
//! token after them (the new root), where the target features of those rows sit in the batch's
//! feature matrix, and how many draft tokens the request may get. The proposer answers one
//! [`Draft`] per request, in order. When a request finishes or is preempted the engine calls
//! [`Proposer::release`] so the proposer frees what it keeps for it (EAGLE: the draft KV cache);
//! a preempted request starts over from position 0 when it is scheduled again.
//!
//! Implementations: [`EagleProposer`] (burn feature; EAGLE-1/EAGLE-3 chains or EAGLE-2 trees),
//! [`crate::ngram::NgramProposer`] (prompt lookup), [`LookupAssisted`] (a proposer whose chains
//! give way to a lookup's where that is expected to be accepted further) and [`ReplayProposer`]
//! (replays known continuations, for tests). The trait is generic over the feature type `F` so that it builds
//! without burn; with burn the engine uses `F = Tensor<B, 2>` (`[rows, width]`).
//!
//! ```
//! use aquila_spec_decode::ngram::{NgramConfig, NgramProposer};
//! use aquila_spec_decode::proposer::{ProposeBatch, ProposeRequest, Proposer};
//!
//! let mut proposer = NgramProposer::new(NgramConfig { min_n: 1, max_n: 3, k: 2 })?;
//! // Prompt [5, 6, 7, 5]; the prefill committed its 4 rows and the target sampled 6.
//! let tokens = [5, 6, 7, 5, 6];
//! let requests = [ProposeRequest {
//!     request_id: 0,
//!     tokens: &tokens,
//!     first_new_position: 0,
//!     feature_rows: &[],
//!     max_draft_tokens: 2,
//!     stop: None,
//!     temperature: 0.0,
//!     seed: 0,
//!     drafting_suspended: false,
//! }];
//! let drafts = Proposer::<()>::draft(&mut proposer, &ProposeBatch::without_features(&requests))?;
//! assert_eq!(drafts[0].as_chain().unwrap().tokens, vec![7, 5]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
#[cfg(feature = "burn")]
mod chain_growth;
mod chain_stop;
mod draft;
#[cfg(feature = "burn")]
mod draft_model;
#[cfg(feature = "burn")]
mod draft_sampling;
#[cfg(feature = "burn")]
mod eagle;
mod error;
mod lookup_assist;
mod ngram;
#[cfg(feature = "burn")]
mod pick;
mod replay;
#[cfg(feature = "burn")]
mod slots;
mod target_cache;

pub use batch::{ProposeBatch, ProposeRequest};
pub use chain_stop::{ChainStep, ChainStop, ConfidenceCalibration};
pub use draft::{ChainDraft, Draft, DroppedToken};
#[cfg(feature = "burn")]
pub use draft_model::{
    DraftModelError, DraftModelProposer, DraftModelProposerConfig, DEFAULT_MAX_CATCH_UP_ROWS,
};
#[cfg(feature = "burn")]
pub use draft_sampling::DraftSampling;
#[cfg(feature = "burn")]
pub use eagle::{EagleProposer, EagleProposerConfig, EagleTreeConfig};
pub use error::ProposeError;
pub use lookup_assist::LookupAssisted;
pub use replay::ReplayProposer;
pub use target_cache::TargetKeyValues;
#[cfg(feature = "burn")]
pub use target_cache::TargetKvCache;

/// A drafter of speculative tokens, called by the engine once per step for the whole batch.
///
/// `F` is the type of the target feature matrix the engine passes in
/// [`ProposeBatch::features`]; proposers that read no feature work with any `F`.
pub trait Proposer<F> {
    /// The most draft tokens this proposer proposes per request and step (`k`); a request's
    /// `max_draft_tokens` can only lower it.
    fn num_speculative_tokens(&self) -> usize;

    /// The deepest draft token this proposer proposes (its acceptance positions): `k` for
    /// chains, which is the default; a tree proposer's depth.
    fn max_draft_depth(&self) -> usize {
        self.num_speculative_tokens()
    }

    /// Whether [`Proposer::draft`] needs target features (the engine then taps them in every
    /// target forward and passes their rows for every committed row).
    fn needs_target_features(&self) -> bool;

    /// Whether [`Proposer::draft`] reads the target's KV cache, [`ProposeBatch::target_kv`]
    /// (the engine then offers it with every call); `false` by default.
    fn reads_target_kv(&self) -> bool {
        false
    }

    /// Takes in the rows each request committed in the last target forward and drafts the
    /// tokens that follow its next root; one [`Draft`] per request, in order. A request with
    /// `max_draft_tokens == 0` gets an empty draft (its rows are still taken in, though a
    /// proposer may put off the work on them until the request drafts again).
    ///
    /// On error no request's state has changed.
    fn draft(&mut self, batch: &ProposeBatch<'_, F>) -> Result<Vec<Draft>, ProposeError>;

    /// Frees what the proposer keeps for `request_id` (finished or preempted); unknown ids are
    /// ignored.
    fn release(&mut self, request_id: u64);
}
