//! # aquila-metrics
//!
//! Prometheus metrics for the Aquila speculative-decoding engine, with an in-memory snapshot
//! reader and derived speculative-decoding figures. Builds without burn.
//!
//! * A [`Recorder`] owns its own `prometheus::Registry` (never the process-global one), takes
//!   engine statistics ([`IterationStats`], [`SchedulerStats`], [`FinishedRequestStats`]) and
//!   speculative-decoding events (it implements [`EventSink`]), and keeps the families listed in
//!   [`Family`], labelled `model_name` and `engine`.
//! * [`Recorder::snapshot`] returns a typed [`Snapshot`] ([`Counter`], [`Gauge`], [`Histogram`],
//!   [`Vector`]); [`Snapshot::delta`] measures an interval without resetting anything.
//! * [`SpecDecodeSummary`] and [`EngineSummary`] derive acceptance length, acceptance rates and
//!   throughputs, [`StepTimeSummary`] the mean time of a step's forward pass and drafting call;
//!   [`StatsLogger`] logs the first two periodically through `tracing`.
//! * [`Recorder::exposition_text`] and [`MetricsServer`] (`GET /metrics`) export the families to
//!   Prometheus; [`Namespace::Vllm`] gives names identical to vLLM's.
//!
//! ```
//! use aquila_metrics::{
//!     EventSink, Namespace, Recorder, RecorderConfig, SpecDecodeEvent, SpecDecodeSummary,
//! };
//!
//! let config = RecorderConfig::builder("SmolLM2-135M-Instruct")
//!     .num_speculative_tokens(3)
//!     .build()?;
//! let recorder = Recorder::new(config)?;
//! let before = recorder.snapshot();
//! // Five drafts of k = 3 tokens accepting 3, 1, 2, 2 and 1 of them.
//! for accepted in [3, 1, 2, 2, 1] {
//!     recorder.record_spec_decode(&SpecDecodeEvent {
//!         request_id: 1,
//!         num_draft_tokens: 3,
//!         draft_depth: 3,
//!         num_accepted_tokens: accepted,
//!     });
//! }
//! let interval = recorder.snapshot().delta(&before)?;
//! let summary = SpecDecodeSummary::from_snapshot(&interval, Namespace::Aquila);
//! assert_eq!(summary.acceptance_rate(), 0.6);
//! assert!((summary.mean_acceptance_length() - 2.8).abs() < 1e-12);
//! assert_eq!(summary.per_position_acceptance_rates(), vec![1.0, 0.6, 0.2]);
//! assert!(recorder.exposition_text()?.contains("aquila_spec_decode_num_drafts_total"));
//! # Ok::<(), aquila_metrics::MetricsError>(())
//! ```
#![warn(missing_docs)]

mod buckets;
mod config;
mod error;
mod family;
mod http;
mod logger;
mod namespace;
mod recorder;
mod snapshot;
mod stats;
mod summary;

pub use aquila_spec_decode::{EventSink, SpecDecodeEvent};
pub use buckets::{
    one_two_five_buckets, BucketSet, INTER_TOKEN_LATENCY_BUCKETS, ITERATION_TOKENS_BUCKETS,
    REQUEST_LATENCY_BUCKETS, TIME_TO_FIRST_TOKEN_BUCKETS,
};
pub use config::{
    RecorderConfig, RecorderConfigBuilder, DEFAULT_MAX_MODEL_LEN, MAX_DRAFT_POSITIONS,
};
pub use error::MetricsError;
pub use family::{
    Family, FamilyKind, ENGINE_LABEL, FINISHED_REASON_LABEL, MODEL_NAME_LABEL, POSITION_LABEL,
};
pub use http::{MetricsServer, METRICS_PATH};
pub use logger::{StatsLogger, StatsReport, DEFAULT_LOG_INTERVAL};
pub use namespace::Namespace;
pub use recorder::{EngineRecorder, Recorder};
pub use snapshot::{
    format_labels, Bucket, Counter, Gauge, Histogram, Labels, Metric, Snapshot, Vector,
};
pub use stats::{FinishReason, FinishedRequestStats, IterationStats, KvCacheUsage, SchedulerStats};
pub use summary::{EngineSummary, SpecDecodeSummary, StepTimeSummary};

/// The README's examples, compiled (and, unless marked `no_run`, run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
