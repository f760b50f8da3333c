//! The typed values of a snapshot: counters, gauges, histograms and per-position vectors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The labels of one series, sorted by name.
pub type Labels = BTreeMap<String, String>;

/// Writes labels the way the exposition format does: `{engine="0",model_name="m"}`.
pub fn format_labels(labels: &Labels) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}={value:?}"))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// One series of a snapshot. A family has one `Metric` per label set (for example one per
/// engine), all with the same name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Metric {
    /// A monotonically increasing count.
    Counter(Counter),
    /// A value that goes up and down.
    Gauge(Gauge),
    /// A distribution of observations.
    Histogram(Histogram),
    /// Ordered counters, one per draft position.
    Vector(Vector),
}

impl Metric {
    /// The family name (counters and vectors without their `_total` suffix).
    pub fn name(&self) -> &str {
        match self {
            Metric::Counter(m) => &m.name,
            Metric::Gauge(m) => &m.name,
            Metric::Histogram(m) => &m.name,
            Metric::Vector(m) => &m.name,
        }
    }

    /// The labels of this series.
    pub fn labels(&self) -> &Labels {
        match self {
            Metric::Counter(m) => &m.labels,
            Metric::Gauge(m) => &m.labels,
            Metric::Histogram(m) => &m.labels,
            Metric::Vector(m) => &m.labels,
        }
    }

    /// The kind of this series, as a lowercase word (`counter`, `gauge`, `histogram`, `vector`).
    pub fn kind(&self) -> &'static str {
        match self {
            Metric::Counter(_) => "counter",
            Metric::Gauge(_) => "gauge",
            Metric::Histogram(_) => "histogram",
            Metric::Vector(_) => "vector",
        }
    }
}

/// A counter series: a non-negative integer that only grows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Family name without the exposition's `_total` suffix.
    pub name: String,
    /// The series' labels.
    pub labels: Labels,
    /// The count.
    pub value: u64,
}

/// A gauge series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gauge {
    /// Family name.
    pub name: String,
    /// The series' labels.
    pub labels: Labels,
    /// The current value.
    #[serde(with = "super::float_serde")]
    pub value: f64,
}

/// One cumulative histogram bucket: observations less than or equal to `upper_bound`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// The bucket's upper bound (`le`); the last bucket's is `+Inf`.
    #[serde(with = "super::float_serde")]
    pub upper_bound: f64,
    /// Observations at or below the bound (cumulative, as in Prometheus).
    pub cumulative_count: u64,
}

/// A histogram series. `buckets` are cumulative, sorted by bound, and end with the `+Inf` bucket,
/// whose count equals `count`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Family name.
    pub name: String,
    /// The series' labels (without `le`).
    pub labels: Labels,
    /// Number of observations.
    pub count: u64,
    /// Sum of the observations.
    #[serde(with = "super::float_serde")]
    pub sum: f64,
    /// Cumulative buckets keyed by upper bound, `+Inf` last.
    pub buckets: Vec<Bucket>,
}

impl Histogram {
    /// The cumulative count of the bucket whose upper bound is `upper_bound` (use
    /// `f64::INFINITY` for `+Inf`).
    pub fn cumulative_count(&self, upper_bound: f64) -> Option<u64> {
        self.buckets
            .iter()
            .find(|bucket| bucket.upper_bound == upper_bound)
            .map(|bucket| bucket.cumulative_count)
    }

    /// The upper bounds, `+Inf` included.
    pub fn upper_bounds(&self) -> Vec<f64> {
        self.buckets
            .iter()
            .map(|bucket| bucket.upper_bound)
            .collect()
    }

    /// Observations that fell in each bucket alone (between the previous bound and this one).
    pub fn bucket_counts(&self) -> Vec<u64> {
        let mut previous = 0;
        self.buckets
            .iter()
            .map(|bucket| {
                let own = bucket.cumulative_count.saturating_sub(previous);
                previous = bucket.cumulative_count;
                own
            })
            .collect()
    }

    /// The mean observation, `None` when there is none.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// Ordered integer counters: entry `i` belongs to draft position `i`. Made from a counter family
/// with a `position` label (the label is removed); every vector of a family has the same length,
/// missing positions read 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vector {
    /// Family name without the exposition's `_total` suffix.
    pub name: String,
    /// The series' labels (without `position`).
    pub labels: Labels,
    /// One count per position.
    pub values: Vec<u64>,
}

/// A label set from `(name, value)` pairs (for tests).
#[cfg(test)]
pub(crate) fn labels_from_pairs(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram() -> Histogram {
        Histogram {
            name: "h".into(),
            labels: Labels::new(),
            count: 3,
            sum: 70.0,
            buckets: [(10.0, 1), (20.0, 1), (30.0, 2), (f64::INFINITY, 3)]
                .into_iter()
                .map(|(upper_bound, cumulative_count)| Bucket {
                    upper_bound,
                    cumulative_count,
                })
                .collect(),
        }
    }

    #[test]
    fn histogram_accessors() {
        let h = histogram();
        assert_eq!(h.cumulative_count(30.0), Some(2));
        assert_eq!(h.cumulative_count(f64::INFINITY), Some(3));
        assert_eq!(h.cumulative_count(25.0), None);
        assert_eq!(h.bucket_counts(), vec![1, 0, 1, 1]);
        assert_eq!(h.mean(), Some(70.0 / 3.0));
        assert_eq!(h.upper_bounds().last(), Some(&f64::INFINITY));
    }

    #[test]
    fn metrics_serialize_with_a_type_tag() {
        let metric = Metric::Histogram(histogram());
        let json = serde_json::to_string(&metric).unwrap();
        assert!(
            json.starts_with(r#"{"type":"histogram","name":"h""#),
            "{json}"
        );
        assert!(
            json.contains(r#"{"upper_bound":"+Inf","cumulative_count":3}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Metric>(&json).unwrap(), metric);
    }

    #[test]
    fn labels_format_like_the_exposition() {
        let labels: Labels = [("model_name", "m\"x"), ("engine", "0")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        assert_eq!(format_labels(&labels), r#"{engine="0",model_name="m\"x"}"#);
    }
}
