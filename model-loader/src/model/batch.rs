//! The inputs and outputs of one forward pass: several sequences' new tokens (prefill chunks,
//! decode rows or draft trees), each appended to its own KV-cache slot.

use super::ModelError;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// New tokens of one sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceInput {
    /// KV-cache slot of this sequence.
    pub slot: usize,
    /// New tokens, appended to the slot's cache after its current length.
    pub tokens: Vec<u32>,
    /// RoPE position of each new token (usually `len..len + n`; tree rows may share one).
    pub positions: Vec<usize>,
    /// Which new rows need logits (e.g. only the last one for a prefill).
    pub logits_rows: Vec<usize>,
    /// Optional `[n][n]` mask among the new rows (`true` = row may attend to column); `None`
    /// is causal. Row `i` must see itself.
    pub mask: Option<Vec<Vec<bool>>>,
    /// Optional `[n][cached]` visibility of the slot's cached rows (`true` = row may attend to
    /// that cached row); `None` shows every cached row to every new row. Training-time test
    /// unrolling uses it to let a draft step see the committed prefix and its own chain only.
    pub history_mask: Option<Vec<Vec<bool>>>,
}

impl SequenceInput {
    /// Tokens at consecutive positions from `start`, causal, with logits for the last row only.
    pub fn new(slot: usize, tokens: Vec<u32>, start: usize) -> Self {
        let n = tokens.len();
        Self {
            slot,
            positions: (start..start + n).collect(),
            logits_rows: n.checked_sub(1).into_iter().collect(),
            tokens,
            mask: None,
            history_mask: None,
        }
    }

    /// Asks logits for every new row.
    pub fn with_all_logits(mut self) -> Self {
        self.logits_rows = (0..self.tokens.len()).collect();
        self
    }

    /// Asks logits for the given rows.
    pub fn with_logits_rows(mut self, rows: Vec<usize>) -> Self {
        self.logits_rows = rows;
        self
    }

    /// Replaces the causal mask among the new rows.
    pub fn with_mask(mut self, mask: Vec<Vec<bool>>) -> Self {
        self.mask = Some(mask);
        self
    }

    /// Restricts which cached rows each new row sees (`[n][cached]`, `true` = visible).
    pub fn with_history_mask(mut self, mask: Vec<Vec<bool>>) -> Self {
        self.history_mask = Some(mask);
        self
    }

    /// Whether new row `row` may attend to cached row `col`.
    pub fn may_attend_cached(&self, row: usize, col: usize) -> bool {
        self.history_mask.as_ref().is_none_or(|mask| mask[row][col])
    }

    /// Number of new rows.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the sequence has no new rows.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Whether new row `row` may attend to new row `col`.
    pub fn may_attend(&self, row: usize, col: usize) -> bool {
        match &self.mask {
            Some(mask) => mask[row][col],
            None => col <= row,
        }
    }

    /// Checks the shape of the input: tokens present, one position per token, logits rows
    /// and mask within the new rows, every row attending to itself.
    fn check_layout(&self, sequence: usize) -> Result<(), ModelError> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(ModelError::EmptySequence { sequence });
        }
        if self.positions.len() != n {
            return Err(ModelError::PositionCount {
                sequence,
                tokens: n,
                positions: self.positions.len(),
            });
        }
        if let Some(&row) = self.logits_rows.iter().find(|&&r| r >= n) {
            return Err(ModelError::LogitsRowOutOfRange {
                sequence,
                row,
                rows: n,
            });
        }
        if let Some(mask) = &self.mask {
            let invalid = |message: String| ModelError::InvalidMask { sequence, message };
            if mask.len() != n {
                return Err(invalid(format!("{} rows for {n} tokens", mask.len())));
            }
            for (i, row) in mask.iter().enumerate() {
                if row.len() != n {
                    return Err(invalid(format!(
                        "row {i} has {} columns, expected {n}",
                        row.len()
                    )));
                }
                if !row[i] {
                    return Err(invalid(format!("row {i} does not attend to itself")));
                }
            }
        }
        if let Some(mask) = &self.history_mask {
            if mask.len() != n {
                return Err(ModelError::InvalidMask {
                    sequence,
                    message: format!("history mask has {} rows for {n} tokens", mask.len()),
                });
            }
        }
        Ok(())
    }

    /// Checks the history mask against the slot's cached length.
    pub(crate) fn check_history(&self, sequence: usize, cached: usize) -> Result<(), ModelError> {
        match &self.history_mask {
            Some(mask) if mask.iter().any(|row| row.len() != cached) => {
                Err(ModelError::InvalidMask {
                    sequence,
                    message: format!("history mask rows must have {cached} columns (cached rows)"),
                })
            }
            _ => Ok(()),
        }
    }

    /// Checks tokens against the vocabulary and positions against the context length.
    fn check_ranges(
        &self,
        sequence: usize,
        vocab_size: usize,
        max_position: usize,
    ) -> Result<(), ModelError> {
        if let Some(&token) = self.tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                sequence,
                token,
                vocab_size,
            });
        }
        if let Some(&position) = self.positions.iter().find(|&&p| p >= max_position) {
            return Err(ModelError::PositionOutOfRange {
                sequence,
                position,
                max: max_position,
            });
        }
        Ok(())
    }
}

/// The sequences of one forward pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// The sequences, in output order.
    pub sequences: Vec<SequenceInput>,
}

impl ForwardBatch {
    /// A batch of the given sequences.
    pub fn new(sequences: Vec<SequenceInput>) -> Self {
        Self { sequences }
    }

    /// Total number of new rows.
    pub fn num_rows(&self) -> usize {
        self.sequences.iter().map(SequenceInput::len).sum()
    }

    /// Total number of logits rows.
    pub fn num_logits_rows(&self) -> usize {
        self.sequences.iter().map(|s| s.logits_rows.len()).sum()
    }

    /// Checks every sequence: [`ForwardBatch::validate_layout`], tokens in the vocabulary and
    /// positions below `max_position`.
    pub fn validate(
        &self,
        vocab_size: usize,
        max_position: usize,
        num_slots: usize,
    ) -> Result<(), ModelError> {
        self.validate_layout(num_slots)?;
        self.sequences
            .iter()
            .enumerate()
            .try_for_each(|(i, s)| s.check_ranges(i, vocab_size, max_position))
    }

    /// Checks the batch's shape: at least one sequence, distinct slots below `num_slots`, and
    /// per sequence tokens present, one position per token, logits rows and mask in range.
    pub fn validate_layout(&self, num_slots: usize) -> Result<(), ModelError> {
        if self.sequences.is_empty() {
            return Err(ModelError::EmptyBatch);
        }
        let mut seen = vec![false; num_slots];
        for (sequence, input) in self.sequences.iter().enumerate() {
            if input.slot >= num_slots {
                return Err(ModelError::SlotOutOfRange {
                    sequence,
                    slot: input.slot,
                    num_slots,
                });
            }
            if std::mem::replace(&mut seen[input.slot], true) {
                return Err(ModelError::DuplicateSlot { slot: input.slot });
            }
            input.check_layout(sequence)?;
        }
        Ok(())
    }
}

/// The result of one forward pass.
#[derive(Debug, Clone)]
pub struct ForwardOutput<B: Backend> {
    /// `[sum of logits_rows over sequences, vocab]`, in batch order.
    pub logits: Tensor<B, 2>,
    /// `[sum of tokens, feature_dim]` when a tap was requested, in batch order.
    pub features: Option<Tensor<B, 2>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(sequences: Vec<SequenceInput>) -> ForwardBatch {
        ForwardBatch::new(sequences)
    }

    #[test]
    fn new_sequence_is_causal_with_last_logits() {
        let s = SequenceInput::new(3, vec![5, 6, 7], 10);
        assert_eq!(s.positions, vec![10, 11, 12]);
        assert_eq!(s.logits_rows, vec![2]);
        assert!(s.may_attend(2, 1) && !s.may_attend(1, 2));
        assert_eq!(s.clone().with_all_logits().logits_rows, vec![0, 1, 2]);
    }

    #[test]
    fn rejects_bad_batches() {
        let ok = SequenceInput::new(0, vec![1, 2], 0);
        assert!(batch(vec![ok.clone()]).validate(10, 100, 2).is_ok());
        assert_eq!(
            batch(vec![]).validate(10, 100, 2),
            Err(ModelError::EmptyBatch)
        );
        let cases = [
            SequenceInput::new(0, vec![], 0),
            SequenceInput::new(5, vec![1], 0),
            SequenceInput::new(0, vec![10], 0),
            SequenceInput::new(0, vec![1], 100),
            ok.clone().with_logits_rows(vec![2]),
            SequenceInput {
                positions: vec![0],
                ..ok.clone()
            },
            ok.clone().with_mask(vec![vec![true, false]]),
            ok.clone().with_mask(vec![vec![true], vec![true, true]]),
            ok.clone()
                .with_mask(vec![vec![true, false], vec![true, false]]),
        ];
        for case in cases {
            assert!(
                batch(vec![case.clone()]).validate(10, 100, 2).is_err(),
                "{case:?}"
            );
        }
        assert_eq!(
            batch(vec![ok.clone(), ok]).validate(10, 100, 2),
            Err(ModelError::DuplicateSlot { slot: 0 })
        );
    }
}
