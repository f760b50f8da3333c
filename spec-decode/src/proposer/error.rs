//! Errors a proposer returns for inconsistent inputs from the engine.

/// A drafting step that cannot run; the message names the request and the offending value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// The request committed no row: its tokens do not extend past `first_new_position`.
    #[error(
        "request {request_id}: no committed row (first_new_position {first_new_position}, {num_tokens} tokens; \
         the last token is the next root and at least one row before it must be new)"
    )]
    NothingCommitted {
        /// The request.
        request_id: u64,
        /// The position it claimed its new rows start at.
        first_new_position: usize,
        /// Tokens it passed (committed tokens plus the next root).
        num_tokens: usize,
    },
    /// A request appears twice in one batch.
    #[error("request {request_id} appears more than once in the drafting batch")]
    DuplicateRequest {
        /// The repeated request.
        request_id: u64,
    },
    /// The proposer drafts from target features but the batch carries none.
    #[error("this proposer needs target features, but the drafting batch has none (tap them in the target forward)")]
    MissingFeatures,
    /// The number of feature rows does not match the number of committed rows.
    #[error("request {request_id}: {feature_rows} feature rows for {committed} committed rows")]
    FeatureRowCount {
        /// The request.
        request_id: u64,
        /// Feature rows it named.
        feature_rows: usize,
        /// Rows it committed.
        committed: usize,
    },
    /// A feature row index is outside the batch feature matrix.
    #[error("request {request_id}: feature row {row} is out of range (the feature matrix has {rows} rows)")]
    FeatureRowOutOfRange {
        /// The request.
        request_id: u64,
        /// The row index it named.
        row: usize,
        /// Rows in the feature matrix.
        rows: usize,
    },
    /// The feature matrix has the wrong width for the draft head.
    #[error("target features are {got} wide, but the draft head expects {expected} (wrong feature tap?)")]
    FeatureWidth {
        /// The width the head consumes (EAGLE-1: hidden size; EAGLE-3: 3 × target hidden size).
        expected: usize,
        /// The width of the matrix passed in.
        got: usize,
    },
    /// The new rows do not continue the rows the proposer already holds for the request.
    #[error(
        "request {request_id}: new rows start at position {first_new_position}, but the draft cache holds \
         {cached} rows (rows must be handed over in order; release the request to start over)"
    )]
    PositionGap {
        /// The request.
        request_id: u64,
        /// Rows of the request in the draft cache.
        cached: usize,
        /// Position of the first new row.
        first_new_position: usize,
    },
    /// A token id is outside the target vocabulary.
    #[error("request {request_id}: token {token} is outside the vocabulary of {vocab_size}")]
    TokenOutOfVocab {
        /// The request.
        request_id: u64,
        /// The offending token id.
        token: u32,
        /// The target vocabulary size.
        vocab_size: usize,
    },
    /// Every draft-cache slot is taken by another request.
    #[error(
        "request {request_id}: all {capacity} draft-cache slots are in use (release finished or preempted \
         requests, or build the proposer with more slots)"
    )]
    NoFreeSlot {
        /// The request that found no slot.
        request_id: u64,
        /// Number of slots of the proposer.
        capacity: usize,
    },
    /// The target's KV cache could not give the rows a proposer copies from it.
    #[error("request {request_id}: the target's KV cache: {reason}")]
    TargetCache {
        /// The request whose rows were asked for.
        request_id: u64,
        /// What went wrong.
        reason: String,
    },
    /// The draft head's forward pass rejected its input (for example a position past the
    /// target's context length).
    #[cfg(feature = "burn")]
    #[error("draft forward: {0}")]
    Forward(#[from] aquila_model_loader::model::ModelError),
}
