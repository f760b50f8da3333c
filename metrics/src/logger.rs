//! Periodic `tracing` log lines computed from snapshot deltas.

use std::time::Duration;

use crate::error::MetricsError;
use crate::namespace::Namespace;
use crate::recorder::Recorder;
use crate::snapshot::Snapshot;
use crate::summary::{EngineSummary, SpecDecodeSummary};

/// The default time between two log reports (as vLLM's `VLLM_LOG_STATS_INTERVAL`).
pub const DEFAULT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What one log report covers: the engine line and, when drafts were verified in the interval,
/// the speculative-decoding line.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsReport {
    /// Throughput and load over the interval.
    pub engine: EngineSummary,
    /// Acceptance over the interval; `None` when no draft was verified.
    pub spec_decode: Option<SpecDecodeSummary>,
}

impl StatsReport {
    /// The report's lines, engine line first.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.engine.log_line()];
        lines.extend(self.spec_decode.as_ref().map(SpecDecodeSummary::log_line));
        lines
    }
}

/// Logs engine throughput and speculative-decoding acceptance at most once per interval, from
/// the difference between the recorder's current snapshot and the one of the previous report (so
/// the recorder itself is never reset).
///
/// Lines go to `tracing` at INFO level, or DEBUG when the engine was idle over the interval (as
/// vLLM does). Call [`StatsLogger::log_if_due`] as often as convenient (for example once per
/// engine step): it only takes a snapshot when the interval has passed.
#[derive(Debug)]
pub struct StatsLogger {
    namespace: Namespace,
    interval: Duration,
    previous: Option<Snapshot>,
}

impl StatsLogger {
    /// A logger for families of `namespace` that reports at most once per `interval`
    /// (non-zero).
    pub fn new(namespace: Namespace, interval: Duration) -> Result<Self, MetricsError> {
        if interval.is_zero() {
            return Err(MetricsError::InvalidConfig {
                field: "log_interval",
                reason: "must be longer than zero".into(),
            });
        }
        Ok(StatsLogger {
            namespace,
            interval,
            previous: None,
        })
    }

    /// A logger for `recorder`'s namespace, reporting at most once per `interval`.
    pub fn for_recorder(recorder: &Recorder, interval: Duration) -> Result<Self, MetricsError> {
        StatsLogger::new(recorder.namespace(), interval)
    }

    /// Logs and returns a report if `interval` has passed since the previous one (or since the
    /// recorder started); otherwise returns `None` without taking a snapshot.
    pub fn log_if_due(&mut self, recorder: &Recorder) -> Result<Option<StatsReport>, MetricsError> {
        if !self.is_due(recorder.uptime()) {
            return Ok(None);
        }
        self.observe(recorder.snapshot())
    }

    /// Logs and returns a report of `snapshot` (a recorder snapshot, cumulative) if the interval
    /// has passed since the previous reported one, on the snapshots' own clock. Snapshots without
    /// `captured_at` are always due.
    pub fn observe(&mut self, snapshot: Snapshot) -> Result<Option<StatsReport>, MetricsError> {
        if let Some(captured_at) = snapshot.captured_at {
            if !self.is_due(captured_at) {
                return Ok(None);
            }
        }
        let interval = match &self.previous {
            Some(previous) => snapshot.delta(previous)?,
            None => snapshot.clone(),
        };
        self.previous = Some(snapshot);
        let report = self.report(&interval);
        emit(&report);
        Ok(Some(report))
    }

    fn is_due(&self, now: Duration) -> bool {
        let last = self
            .previous
            .as_ref()
            .and_then(|s| s.captured_at)
            .unwrap_or(Duration::ZERO);
        now.saturating_sub(last) >= self.interval
    }

    fn report(&self, interval: &Snapshot) -> StatsReport {
        let spec_decode = SpecDecodeSummary::from_snapshot(interval, self.namespace);
        StatsReport {
            engine: EngineSummary::from_snapshot(interval, self.namespace),
            spec_decode: (spec_decode.drafts > 0).then_some(spec_decode),
        }
    }
}

fn emit(report: &StatsReport) {
    let idle = report.engine.is_idle() && report.spec_decode.is_none();
    for line in report.lines() {
        if idle {
            tracing::debug!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_interval_is_rejected() {
        let error = StatsLogger::new(Namespace::Aquila, Duration::ZERO).unwrap_err();
        assert!(error.to_string().contains("log_interval"), "{error}");
    }

    #[test]
    fn reports_at_most_once_per_interval() {
        let mut logger = StatsLogger::new(Namespace::Aquila, Duration::from_secs(10)).unwrap();
        let at = |seconds| Snapshot {
            captured_at: Some(Duration::from_secs(seconds)),
            window: Some(Duration::from_secs(seconds)),
            ..Snapshot::default()
        };
        assert!(logger.observe(at(5)).unwrap().is_none());
        let first = logger.observe(at(10)).unwrap().unwrap();
        assert_eq!(first.engine.window, Some(Duration::from_secs(10)));
        assert!(logger.observe(at(19)).unwrap().is_none());
        let second = logger.observe(at(22)).unwrap().unwrap();
        assert_eq!(second.engine.window, Some(Duration::from_secs(12)));
        assert!(
            second.spec_decode.is_none(),
            "no drafts, no spec-decode line"
        );
        assert_eq!(second.lines().len(), 1);
    }
}
