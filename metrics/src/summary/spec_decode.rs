//! Speculative-decoding acceptance figures.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::per_second;
use crate::family::{Family, ENGINE_LABEL};
use crate::namespace::Namespace;
use crate::snapshot::{Histogram, Snapshot};

/// Acceptance figures over the span a snapshot covers (since the recorder started, or a delta's
/// interval), summed over every engine unless the snapshot was narrowed with
/// [`Snapshot::select`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecDecodeSummary {
    /// Verified drafts.
    pub drafts: u64,
    /// Draft tokens proposed.
    pub draft_tokens: u64,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
    /// `accepted_per_position[i]`: drafts whose token at position `i` was accepted.
    pub accepted_per_position: Vec<u64>,
    /// `drafts_per_position[i]`: drafts long enough to have a token at position `i` (draft
    /// lengths vary per request and step). Empty when the snapshot has no draft-length
    /// histogram: every draft then counts for every position.
    #[serde(default)]
    pub drafts_per_position: Vec<u64>,
    /// The span the counts cover, when known.
    pub window: Option<Duration>,
}

impl SpecDecodeSummary {
    /// Reads the speculative-decoding families of `namespace` from `snapshot`, summing every
    /// label set. Missing families count as zero.
    pub fn from_snapshot(snapshot: &Snapshot, namespace: Namespace) -> Self {
        let counter = |family: Family| snapshot.counter_total(&family.name(namespace)).unwrap_or(0);
        let accepted_per_position = snapshot
            .vector_total(&Family::SpecDecodeNumAcceptedTokensPerPos.name(namespace))
            .unwrap_or_default();
        let lengths = snapshot
            .histogram_total(&Family::SpecDecodeDraftLength.name(namespace))
            .ok()
            .flatten();
        let drafts_per_position = lengths
            .map(|lengths| drafts_reaching(&lengths, accepted_per_position.len()))
            .unwrap_or_default();
        SpecDecodeSummary {
            drafts: counter(Family::SpecDecodeNumDrafts),
            draft_tokens: counter(Family::SpecDecodeNumDraftTokens),
            accepted_tokens: counter(Family::SpecDecodeNumAcceptedTokens),
            accepted_per_position,
            drafts_per_position,
            window: snapshot.window,
        }
    }

    /// One summary per `engine` label value.
    pub fn per_engine(snapshot: &Snapshot, namespace: Namespace) -> BTreeMap<String, Self> {
        snapshot
            .label_values(ENGINE_LABEL)
            .into_iter()
            .map(|engine| {
                let summary =
                    Self::from_snapshot(&snapshot.select(ENGINE_LABEL, &engine), namespace);
                (engine, summary)
            })
            .collect()
    }

    /// Accepted draft tokens over proposed draft tokens (0 when nothing was proposed).
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.accepted_tokens, self.draft_tokens)
    }

    /// Tokens emitted per verification: `1 + accepted / drafts`. The 1 is the bonus (or
    /// recovered) token the target model adds to every verification, following vLLM and the
    /// speculative-decoding literature. 1.0 when there were no drafts, never NaN.
    pub fn mean_acceptance_length(&self) -> f64 {
        1.0 + ratio(self.accepted_tokens, self.drafts)
    }

    /// For each draft position, the fraction of the drafts that reached it whose token there
    /// was accepted (zeros where no draft reached).
    pub fn per_position_acceptance_rates(&self) -> Vec<f64> {
        self.accepted_per_position
            .iter()
            .enumerate()
            .map(|(position, &accepted)| {
                let reached = self
                    .drafts_per_position
                    .get(position)
                    .copied()
                    .unwrap_or(self.drafts);
                ratio(accepted, reached)
            })
            .collect()
    }

    /// Accepted draft tokens per second over the window (`None` without a window).
    pub fn accepted_throughput(&self) -> Option<f64> {
        per_second(self.accepted_tokens, self.window)
    }

    /// Proposed draft tokens per second over the window (`None` without a window).
    pub fn drafted_throughput(&self) -> Option<f64> {
        per_second(self.draft_tokens, self.window)
    }

    /// The periodic log line, in the style of vLLM's:
    /// `SpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: ... tokens/s, ...`.
    pub fn log_line(&self) -> String {
        let rates: Vec<String> = self
            .per_position_acceptance_rates()
            .iter()
            .map(|rate| format!("{rate:.3}"))
            .collect();
        format!(
            "SpecDecoding metrics: Mean acceptance length: {:.2}, Accepted throughput: {:.2} tokens/s, \
             Drafted throughput: {:.2} tokens/s, Accepted: {} tokens, Drafted: {} tokens, \
             Per-position acceptance rate: {}, Avg Draft acceptance rate: {:.1}%",
            self.mean_acceptance_length(),
            self.accepted_throughput().unwrap_or(0.0),
            self.drafted_throughput().unwrap_or(0.0),
            self.accepted_tokens,
            self.draft_tokens,
            rates.join(", "),
            100.0 * self.acceptance_rate(),
        )
    }
}

/// For positions `0..positions`, the observations of the draft-length histogram `lengths`
/// above the position (drafts with a token there): exact where the histogram has a bucket
/// bound at the position.
fn drafts_reaching(lengths: &Histogram, positions: usize) -> Vec<u64> {
    (0..positions)
        .map(|position| {
            let at_or_below = lengths
                .buckets
                .iter()
                .take_while(|bucket| bucket.upper_bound <= position as f64)
                .last()
                .map_or(0, |bucket| bucket.cumulative_count);
            lengths.count.saturating_sub(at_or_below)
        })
        .collect()
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_drafts_gives_length_one_and_no_nan() {
        let summary = SpecDecodeSummary::from_snapshot(&Snapshot::default(), Namespace::Aquila);
        assert_eq!(summary.mean_acceptance_length(), 1.0);
        assert_eq!(summary.acceptance_rate(), 0.0);
        assert!(summary.per_position_acceptance_rates().is_empty());
        assert_eq!(summary.accepted_throughput(), None);
        let with_positions = SpecDecodeSummary {
            accepted_per_position: vec![0, 0],
            ..summary
        };
        assert_eq!(
            with_positions.per_position_acceptance_rates(),
            vec![0.0, 0.0]
        );
    }

    #[test]
    fn log_line_format() {
        let summary = SpecDecodeSummary {
            drafts: 5,
            draft_tokens: 15,
            accepted_tokens: 9,
            accepted_per_position: vec![5, 3, 1],
            drafts_per_position: Vec::new(),
            window: Some(Duration::from_secs(2)),
        };
        assert_eq!(
            summary.log_line(),
            "SpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: 4.50 tokens/s, \
             Drafted throughput: 7.50 tokens/s, Accepted: 9 tokens, Drafted: 15 tokens, \
             Per-position acceptance rate: 1.000, 0.600, 0.200, Avg Draft acceptance rate: 60.0%"
        );
    }
}
