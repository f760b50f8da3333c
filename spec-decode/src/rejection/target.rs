//! Lazily computed target distributions of the rows a verification visits.

use super::TargetRows;
use crate::sampling::{greedy, probabilities_into, PenaltyHistory, SamplingConfig};

/// One request's target rows with its sampling pipeline; rows are processed only when the walk
/// reaches them, with the accepted tokens so far as in-flight output history.
pub(crate) struct TargetDistributions<'a> {
    config: &'a SamplingConfig,
    rows: TargetRows<'a>,
    vocab_size: usize,
    /// The prompt/output index, built only when the request has penalties and raw logits.
    history: Option<PenaltyHistory>,
    penalized: Vec<f32>,
}

impl<'a> TargetDistributions<'a> {
    /// Wraps validated rows (`rows.len() == num_rows × vocab_size`).
    pub(crate) fn new(config: &'a SamplingConfig, rows: TargetRows<'a>, vocab_size: usize) -> Self {
        let history = match rows {
            TargetRows::Logits { prompt, output, .. } if config.has_penalties() => {
                Some(PenaltyHistory::new(prompt, output))
            }
            _ => None,
        };
        Self {
            config,
            rows,
            vocab_size,
            history,
            penalized: Vec::new(),
        }
    }

    /// The target token of `row` for a greedy request.
    pub(crate) fn argmax(&mut self, row: usize, in_flight: &[u32]) -> u32 {
        greedy(self.logits(row, in_flight))
    }

    /// The request's distribution at `row`, written into `probs`.
    pub(crate) fn probs_into(&mut self, row: usize, in_flight: &[u32], probs: &mut Vec<f32>) {
        match self.rows {
            TargetRows::Probs(all) => {
                probs.clear();
                probs.extend_from_slice(&all[row * self.vocab_size..(row + 1) * self.vocab_size]);
            }
            TargetRows::Logits { .. } => {
                let config = self.config;
                probabilities_into(self.logits(row, in_flight), config, probs);
            }
        }
    }

    /// The row's values after penalties (probabilities for [`TargetRows::Probs`]).
    fn logits(&mut self, row: usize, in_flight: &[u32]) -> &[f32] {
        let range = row * self.vocab_size..(row + 1) * self.vocab_size;
        match (self.rows, &self.history) {
            (TargetRows::Probs(all), _) => &all[range],
            (TargetRows::Logits { logits, .. }, None) => &logits[range],
            (TargetRows::Logits { logits, .. }, Some(history)) => {
                self.penalized.clear();
                self.penalized.extend_from_slice(&logits[range]);
                history.apply(&mut self.penalized, self.config, in_flight);
                &self.penalized
            }
        }
    }
}
