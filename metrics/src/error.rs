//! The error type of this crate.

use crate::buckets::BucketSet;

/// Everything that can go wrong in `aquila-metrics`. Each variant names the field, family, series or
/// line at fault.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A [`RecorderConfig`](crate::RecorderConfig) or logger setting is impossible.
    #[error("invalid metrics setting `{field}`: {reason}")]
    InvalidConfig {
        /// The setting at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// An engine statistic holds an impossible value (for example a KV-cache usage above 1).
    #[error("invalid engine statistic `{field}`: {reason}")]
    InvalidStatistic {
        /// The statistic at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// Custom histogram bucket bounds are unusable.
    #[error("invalid histogram buckets for `{set}`: {reason}")]
    InvalidBuckets {
        /// The bucket set the bounds were given for.
        set: BucketSet,
        /// What is wrong with them.
        reason: String,
    },

    /// The Prometheus registry refused a family.
    #[error("cannot register metric family `{family}`: {source}")]
    Registration {
        /// The family's exposition name.
        family: String,
        /// The registry's complaint.
        #[source]
        source: prometheus::Error,
    },

    /// The Prometheus text encoder failed.
    #[error("cannot encode the Prometheus exposition text: {0}")]
    Encode(#[source] prometheus::Error),

    /// A recorder was asked for an engine label it was not configured with.
    #[error("unknown engine label `{engine}`; this recorder has engines {known:?}")]
    UnknownEngine {
        /// The label that was asked for.
        engine: String,
        /// The labels the recorder knows.
        known: Vec<String>,
    },

    /// The HTTP endpoint could not listen on the requested address.
    #[error("cannot serve /metrics on `{addr}`: {reason}")]
    Bind {
        /// The address as the caller gave it.
        addr: String,
        /// Why binding failed.
        reason: String,
    },

    /// Exposition text could not be parsed.
    #[error("exposition text, line {line}: {reason}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },

    /// A series holds values that its metric type cannot hold (a fractional counter, a histogram
    /// without its `+Inf` bucket, ...).
    #[error("metric `{family}` series {labels}: {reason}")]
    InvalidSeries {
        /// The family name.
        family: String,
        /// The series' labels, written `{name="value",...}`.
        labels: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Two snapshots cannot be subtracted (a counter went backwards, bucket bounds differ, ...):
    /// they were not taken from the same recorder in order.
    #[error("cannot subtract snapshots at metric `{metric}` series {labels}: {reason}")]
    DeltaMismatch {
        /// The metric name.
        metric: String,
        /// The series' labels, written `{name="value",...}`.
        labels: String,
        /// What does not match.
        reason: String,
    },
}
