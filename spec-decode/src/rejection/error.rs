//! Errors of the rejection sampler.

use crate::sampling::SamplingError;

/// A verification request that cannot be processed; the message names the problem.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RejectionError {
    /// The sampler was built for an empty vocabulary.
    #[error("the rejection sampler needs a vocabulary of at least 1 token, got 0")]
    EmptyVocabulary,
    /// The request's sampling configuration is out of range.
    #[error("invalid sampling config: {0}")]
    Config(#[from] SamplingError),
    /// A row-major input does not have `rows × vocab_size` values.
    #[error("{what} has {actual} values, expected {rows} rows x {vocab_size} = {}", rows * vocab_size)]
    RowShape {
        /// Which input (e.g. `"target logits"`, `"draft probabilities"`).
        what: &'static str,
        /// Rows the draft requires.
        rows: usize,
        /// The sampler's vocabulary size.
        vocab_size: usize,
        /// Values given.
        actual: usize,
    },
    /// One request of a batch failed; no request of the batch was verified.
    #[error("request {index} of the batch: {error}")]
    InBatch {
        /// Index of the request in the batch.
        index: usize,
        /// What is wrong with it.
        error: Box<RejectionError>,
    },
}
