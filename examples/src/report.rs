//! The vLLM-style speculative-decoding report of the eagle example, computed from a metrics
//! snapshot only: this is the reference use of the snapshot API.

use aquila_metrics::{Family, Namespace, Snapshot, SpecDecodeSummary, StepTimeSummary};
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// What one run of the eagle example measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpecDecodeReport {
    /// Acceptance counts and derived figures from the snapshot.
    pub summary: SpecDecodeSummary,
    /// Output tokens of the run (the generation-tokens counter).
    pub generation_tokens: u64,
    /// Prompt tokens of the run (the prompt-tokens counter).
    pub prompt_tokens: u64,
    /// Wall time of the `generate` call.
    pub wall_time: Duration,
    /// What the run's engine steps spent on the target's forward pass and on drafting.
    pub step_times: StepTimeSummary,
}

impl SpecDecodeReport {
    /// Builds the report from the snapshot delta of one `generate` call and its wall time.
    pub fn from_snapshot(delta: &Snapshot, namespace: Namespace, wall_time: Duration) -> Self {
        let counter = |family: Family| delta.counter_total(&family.name(namespace)).unwrap_or(0);
        SpecDecodeReport {
            summary: SpecDecodeSummary::from_snapshot(delta, namespace),
            generation_tokens: counter(Family::GenerationTokens),
            prompt_tokens: counter(Family::PromptTokens),
            wall_time,
            step_times: StepTimeSummary::from_snapshot(delta, namespace),
        }
    }

    /// Output tokens per second of wall time (0 for an empty run).
    pub fn output_tokens_per_second(&self) -> f64 {
        let seconds = self.wall_time.as_secs_f64();
        if seconds > 0.0 {
            self.generation_tokens as f64 / seconds
        } else {
            0.0
        }
    }
}

impl fmt::Display for SpecDecodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.summary;
        writeln!(f, "{}", "-".repeat(50))?;
        writeln!(f, "total_num_output_tokens: {}", self.generation_tokens)?;
        writeln!(f, "num_drafts: {}", s.drafts)?;
        writeln!(f, "num_draft_tokens: {}", s.draft_tokens)?;
        writeln!(f, "num_accepted_tokens: {}", s.accepted_tokens)?;
        writeln!(f, "acceptance rate: {:.3}", s.acceptance_rate())?;
        writeln!(
            f,
            "mean acceptance length: {:.2}",
            s.mean_acceptance_length()
        )?;
        for (position, rate) in s.per_position_acceptance_rates().iter().enumerate() {
            writeln!(f, "acceptance at token {position}: {rate:.2}")?;
        }
        writeln!(f, "wall time: {:.2} s", self.wall_time.as_secs_f64())?;
        writeln!(f, "output tokens/s: {:.1}", self.output_tokens_per_second())?;
        let times = &self.step_times;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "mean step: forward {:.2} ms, drafting {:.2} ms ({} steps)",
            ms(times.forward),
            ms(times.drafting),
            times.steps
        )?;
        write!(f, "{}", "-".repeat(50))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_metrics::{EventSink, IterationStats, Recorder, RecorderConfig, SpecDecodeEvent};

    #[test]
    fn report_reads_the_worked_example_from_a_snapshot() {
        let recorder = Recorder::new(
            RecorderConfig::builder("m")
                .num_speculative_tokens(3)
                .build()
                .unwrap(),
        )
        .unwrap();
        let before = recorder.snapshot();
        for accepted in [3, 1, 2, 2, 1] {
            recorder.record_spec_decode(&SpecDecodeEvent {
                request_id: 0,
                num_draft_tokens: 3,
                draft_depth: 3,
                num_accepted_tokens: accepted,
            });
        }
        for (forward_ms, draft_ms) in [(20, 3), (30, 2)] {
            recorder.record_iteration(&IterationStats {
                forward_time: Some(Duration::from_millis(forward_ms)),
                draft_time: Some(Duration::from_millis(draft_ms)),
                ..IterationStats::default()
            });
        }
        let delta = recorder.snapshot().delta(&before).unwrap();
        let report =
            SpecDecodeReport::from_snapshot(&delta, Namespace::Aquila, Duration::from_secs(2));
        assert_eq!(report.summary.drafts, 5);
        assert!((report.summary.mean_acceptance_length() - 2.8).abs() < 1e-12);
        let text = report.to_string();
        assert!(text.contains("mean acceptance length: 2.80"), "{text}");
        assert!(text.contains("acceptance at token 2: 0.20"), "{text}");
        assert!(
            text.contains("mean step: forward 25.00 ms, drafting 2.50 ms (2 steps)"),
            "{text}"
        );
    }
}
