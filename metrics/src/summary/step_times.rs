//! What an engine step spends on the target's forward pass and on drafting.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::family::Family;
use crate::namespace::Namespace;
use crate::snapshot::Snapshot;

/// The mean time of an engine step's phases over the span a snapshot covers, from the
/// [`Family::ModelForwardTime`] and [`Family::SpecDecodeDraftTime`] histograms (summed over
/// every engine unless the snapshot was narrowed with [`Snapshot::select`]).
///
/// A round of speculation costs one forward pass with the draft rows plus one drafting call:
/// set against a plain decode step, the two tell whether verification or drafting limits the
/// speedup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimeSummary {
    /// Engine steps whose forward pass was timed.
    pub steps: u64,
    /// Mean time of a step's forward pass through the target (zero without steps).
    pub forward: Duration,
    /// Drafting calls timed (one per step of an engine with a drafter).
    pub drafting_calls: u64,
    /// Mean time of the drafter's call after a step's forward pass (zero without a drafter).
    pub drafting: Duration,
}

impl StepTimeSummary {
    /// Reads the step-time families of `namespace` from `snapshot`; missing families count as
    /// no observation.
    pub fn from_snapshot(snapshot: &Snapshot, namespace: Namespace) -> Self {
        let histogram = |family: Family| {
            snapshot
                .histogram_total(&family.name(namespace))
                .ok()
                .flatten()
                .map_or((0, 0.0), |h| (h.count, h.sum))
        };
        let mean = |(count, sum): (u64, f64)| match count {
            0 => Duration::ZERO,
            _ => Duration::from_secs_f64((sum / count as f64).max(0.0)),
        };
        let forward = histogram(Family::ModelForwardTime);
        let drafting = histogram(Family::SpecDecodeDraftTime);
        StepTimeSummary {
            steps: forward.0,
            forward: mean(forward),
            drafting_calls: drafting.0,
            drafting: mean(drafting),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::IterationStats;
    use crate::{Recorder, RecorderConfig};

    #[test]
    fn means_come_from_the_step_time_histograms() {
        let recorder = Recorder::new(RecorderConfig::builder("m").build().unwrap()).unwrap();
        let empty = StepTimeSummary::from_snapshot(&recorder.snapshot(), Namespace::Aquila);
        assert_eq!(empty, StepTimeSummary::default());
        for (forward_ms, draft_ms) in [(20, Some(3)), (30, Some(2)), (40, None)] {
            recorder.record_iteration(&IterationStats {
                forward_time: Some(Duration::from_millis(forward_ms)),
                draft_time: draft_ms.map(Duration::from_millis),
                ..IterationStats::default()
            });
        }
        let summary = StepTimeSummary::from_snapshot(&recorder.snapshot(), Namespace::Aquila);
        assert_eq!((summary.steps, summary.drafting_calls), (3, 2));
        assert!((summary.forward.as_secs_f64() - 0.030).abs() < 1e-9);
        assert!((summary.drafting.as_secs_f64() - 0.0025).abs() < 1e-9);
    }
}
