//! The [`Recorder`]: engine statistics and speculative-decoding events in, Prometheus families out.

mod engine;
mod families;
mod spec_decode;

use std::fmt;
use std::time::{Duration, Instant};

use aquila_spec_decode::{EventSink, SpecDecodeEvent};
use prometheus::proto::MetricType;
use prometheus::{Registry, TextEncoder};

pub use engine::EngineRecorder;
use families::Families;

use crate::config::RecorderConfig;
use crate::error::MetricsError;
use crate::namespace::Namespace;
use crate::snapshot::Snapshot;
use crate::stats::{FinishedRequestStats, IterationStats, SchedulerStats};

/// The metrics of one engine instance (or one group of data-parallel engines), in a Prometheus
/// registry that belongs to this recorder alone: two recorders in one process never see or
/// clobber each other's series.
///
/// Every family carries the labels `model_name` and `engine`; every series of every configured
/// engine exists from the start (at 0). The recorder's own `record_*` methods and its
/// [`EventSink`] implementation write the default (first) engine's series; use
/// [`Recorder::engine`] for the others.
pub struct Recorder {
    config: RecorderConfig,
    registry: Registry,
    engines: Vec<EngineRecorder>,
    started: Instant,
}

impl Recorder {
    /// Creates the registry and every series of `config`.
    pub fn new(config: RecorderConfig) -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let families = Families::register(&config, &registry)?;
        let engines = config
            .engines()
            .iter()
            .map(|engine| {
                EngineRecorder::bind(
                    &families,
                    config.model_name(),
                    engine,
                    config.num_speculative_tokens(),
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Recorder {
            config,
            registry,
            engines,
            started: Instant::now(),
        })
    }

    /// The configuration this recorder was built with.
    pub fn config(&self) -> &RecorderConfig {
        &self.config
    }

    /// The name prefix of this recorder's families.
    pub fn namespace(&self) -> Namespace {
        self.config.namespace()
    }

    /// The recorder's own registry (for example to add it to a larger exporter).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The handle of the engine labelled `engine`.
    pub fn engine(&self, engine: &str) -> Result<EngineRecorder, MetricsError> {
        self.engines
            .iter()
            .find(|handle| handle.engine() == engine)
            .cloned()
            .ok_or_else(|| MetricsError::UnknownEngine {
                engine: engine.to_owned(),
                known: self.config.engines().to_vec(),
            })
    }

    /// The handles of every engine, in configuration order.
    pub fn engines(&self) -> &[EngineRecorder] {
        &self.engines
    }

    /// The handle of the default (first configured) engine.
    pub fn default_engine(&self) -> &EngineRecorder {
        // `RecorderConfig::build` guarantees at least one engine.
        &self.engines[0]
    }

    /// Records one step of the default engine (see [`EngineRecorder::record_iteration`]).
    pub fn record_iteration(&self, stats: &IterationStats) {
        self.default_engine().record_iteration(stats);
    }

    /// Records the default engine's scheduler state (see [`EngineRecorder::record_scheduler`]).
    pub fn record_scheduler(&self, stats: &SchedulerStats) {
        self.default_engine().record_scheduler(stats);
    }

    /// Records a request the default engine finished (see [`EngineRecorder::record_finished`]).
    pub fn record_finished(&self, stats: &FinishedRequestStats) {
        self.default_engine().record_finished(stats);
    }

    /// Time since this recorder was created: the clock of [`Snapshot::captured_at`].
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Every series, typed, with `captured_at` and `window` set to the recorder's uptime (counters
    /// are cumulative since creation). Subtract an earlier snapshot with [`Snapshot::delta`] to
    /// measure an interval.
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::from_registry(&self.registry);
        let now = self.uptime();
        snapshot.captured_at = Some(now);
        snapshot.window = Some(now);
        snapshot
    }

    /// The Prometheus text exposition (format 0.0.4) of every family, as `/metrics` serves it.
    /// Untyped families that a caller added to [`Recorder::registry`] are left out: the encoder
    /// cannot write them.
    pub fn exposition_text(&self) -> Result<String, MetricsError> {
        let families: Vec<_> = self
            .registry
            .gather()
            .into_iter()
            .filter(|family| family.get_field_type() != MetricType::UNTYPED)
            .collect();
        TextEncoder::new()
            .encode_to_string(&families)
            .map_err(MetricsError::Encode)
    }
}

impl EventSink for Recorder {
    /// Records a verification of the default engine (see [`EngineRecorder`]'s implementation).
    fn record_spec_decode(&self, event: &SpecDecodeEvent) {
        self.default_engine().record_spec_decode(event);
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("namespace", &self.config.namespace())
            .field("model_name", &self.config.model_name())
            .field("engines", &self.config.engines())
            .finish_non_exhaustive()
    }
}
