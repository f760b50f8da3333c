//! Lossless verification of drafts: greedy matching and speculative (rejection) sampling for
//! chains and trees, batched over requests.
//!
//! Each request brings its own [`SamplingConfig`](crate::sampling::SamplingConfig), target rows
//! (raw logits, processed by the same pipeline as non-speculative sampling, or ready
//! probabilities), draft tokens or a [`DraftTree`](crate::tree::DraftTree), the draft
//! distributions or [`DraftProbs::OneHot`] for deterministic drafts, and its own
//! [`RequestRng`](crate::sampling::RequestRng).
//!
//! ```
//! use aquila_spec_decode::rejection::{ChainRequest, DraftProbs, RejectionSampler, TargetRows};
//! use aquila_spec_decode::sampling::{RequestRng, SamplingConfig};
//!
//! // Vocabulary of 4; the target's argmax is 2 after the root, then 3, then 1.
//! let logits = [
//!     0.0, 0.0, 5.0, 0.0, //
//!     0.0, 0.0, 0.0, 5.0, //
//!     0.0, 5.0, 0.0, 0.0,
//! ];
//! let sampler = RejectionSampler::new(4)?;
//! let outcome = sampler.verify_chain(ChainRequest {
//!     config: &SamplingConfig::greedy(),
//!     target: TargetRows::Logits { logits: &logits, prompt: &[], output: &[0] },
//!     draft_tokens: &[2, 0],
//!     draft_probs: DraftProbs::OneHot,
//!     rng: &mut RequestRng::new(0),
//! })?;
//! assert_eq!(outcome.tokens, vec![2, 3]); // draft 2 accepted, 0 rejected, 3 recovered
//! assert_eq!(outcome.path, vec![0, 1]);
//! # Ok::<(), aquila_spec_decode::rejection::RejectionError>(())
//! ```

mod error;
mod request;
mod sampler;
mod target;
mod walk;

pub use error::RejectionError;
pub use request::{ChainRequest, DraftProbs, TargetRows, TreeRequest, VerifyOutcome};
pub use sampler::RejectionSampler;
