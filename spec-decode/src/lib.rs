//! # aquila-spec-decode
//!
//! Speculative decoding for Aquila: EAGLE drafting (EAGLE-1 and EAGLE-3 chains, EAGLE-2 dynamic
//! draft trees), n-gram drafting, lossless rejection sampling and the events that verification
//! emits ([`VerifyOutcome::event`]).
//!
//! - [`events`]: [`SpecDecodeEvent`] and the [`EventSink`] trait (the metrics crate's input).
//! - [`sampling`]: the request sampling pipeline on f32 logits (penalties, temperature, min-p,
//!   top-k, top-p, softmax), seeded per-request RNG streams, logprobs.
//! - [`rejection`]: [`RejectionSampler`], greedy and stochastic verification of chains and
//!   trees (q given or one-hot), batched over requests.
//! - [`tree`]: [`DraftTree`] with attention masks, positions and EAGLE-2 pruning.
//! - [`ngram`]: prompt-lookup drafting.
//! - [`proposer`]: the [`proposer::Proposer`] trait, and with the `burn` feature the EAGLE
//!   proposer (chains, or EAGLE-2 trees expanded per depth and reranked globally) and the
//!   draft-model proposer (chains from a separate language model of the target's vocabulary);
//!   `eagle`: EAGLE-1 and EAGLE-3 heads loaded from real checkpoint layouts, built randomly and
//!   exported back.
//! - `train` (feature `train`): self-distillation data shards and the training loop of EAGLE-1
//!   and EAGLE-3 heads (training-time test, AdamW, validation, checkpoints).
//!
//! Everything but `eagle` and the EAGLE and draft-model proposers compiles without burn: build
//! with `default-features = false` to get only the burn-free parts.
#![warn(missing_docs)]

pub mod events;

pub use events::{EventSink, NullSink, SpecDecodeEvent};

pub mod ngram;
pub mod rejection;
pub mod sampling;
pub mod tree;

pub use ngram::{NgramConfig, NgramConfigError, NgramProposer};
pub use rejection::{
    ChainRequest, DraftProbs, RejectionError, RejectionSampler, TargetRows, TreeRequest,
    VerifyOutcome,
};
pub use sampling::{RequestRng, SamplingConfig, SamplingError};
pub use tree::{DraftTree, TreeError};

#[cfg(feature = "burn")]
pub mod eagle;
pub mod proposer;
#[cfg(feature = "train")]
pub mod train;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
