//! Errors of a forward pass: a batch, mask or feature tap the model cannot run.

/// A forward pass was asked something impossible; nothing was written to the KV cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The batch has no sequence.
    #[error("the batch is empty")]
    EmptyBatch,
    /// A sequence has no new token.
    #[error("sequence {sequence} has no tokens")]
    EmptySequence {
        /// Index of the sequence in the batch.
        sequence: usize,
    },
    /// A KV-cache slot does not exist.
    #[error("sequence {sequence}: slot {slot} is outside the cache's {num_slots} slots")]
    SlotOutOfRange {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// The slot asked for.
        slot: usize,
        /// Number of slots of the cache.
        num_slots: usize,
    },
    /// Two sequences of one batch use the same slot.
    #[error("slot {slot} is used by more than one sequence of the batch")]
    DuplicateSlot {
        /// The slot.
        slot: usize,
    },
    /// A token id is outside the vocabulary.
    #[error("sequence {sequence}: token {token} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// The token id.
        token: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// A token id given to an embedding lookup is outside the vocabulary.
    #[error("token {token} is outside the vocabulary of {vocab_size}")]
    UnknownToken {
        /// The token id.
        token: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// `positions` and `tokens` differ in length.
    #[error("sequence {sequence}: {positions} positions for {tokens} tokens")]
    PositionCount {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// Number of tokens.
        tokens: usize,
        /// Number of positions.
        positions: usize,
    },
    /// A position is at or past the model's context length.
    #[error("sequence {sequence}: position {position} is past the context length {max}")]
    PositionOutOfRange {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// The position.
        position: usize,
        /// `max_position_embeddings`.
        max: usize,
    },
    /// A logits row is not one of the sequence's new rows.
    #[error("sequence {sequence}: logits row {row} is outside its {rows} new rows")]
    LogitsRowOutOfRange {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// The row asked for.
        row: usize,
        /// Number of new rows.
        rows: usize,
    },
    /// An attention mask has the wrong size or lets a row see nothing of itself.
    #[error("sequence {sequence}: invalid attention mask: {message}")]
    InvalidMask {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// What is wrong.
        message: String,
    },
    /// A feature tap names layers the model does not have, or not in increasing order.
    #[error("invalid feature tap: {message}")]
    InvalidTap {
        /// What is wrong.
        message: String,
    },
}
