//! Typed, in-memory snapshots of metric families: the offline counterpart of a `/metrics` scrape.

mod counters;
mod delta;
pub(crate) mod float_serde;
mod metric;
mod registry_reader;
mod text_format;
mod text_lines;

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::MetricsError;
pub use metric::{format_labels, Bucket, Counter, Gauge, Histogram, Labels, Metric, Vector};

/// Every series of a set of families at one moment (or, after [`Snapshot::delta`], what changed
/// over an interval).
///
/// Every label set is kept: a family recorded for engines `"0"` to `"3"` has four entries. The
/// `*_total` lookups aggregate across label sets; [`Snapshot::select`] narrows to one engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The series, family by family.
    pub metrics: Vec<Metric>,
    /// When the snapshot was taken, on the recorder's monotonic clock (time since the recorder
    /// was created). `None` for snapshots parsed from text.
    pub captured_at: Option<Duration>,
    /// The span the counters and histograms cover: since the recorder was created for a
    /// recorder's snapshot, between the two snapshots for a delta. `None` when unknown.
    pub window: Option<Duration>,
}

impl Snapshot {
    /// A snapshot of `metrics` with no timing.
    pub fn new(metrics: Vec<Metric>) -> Self {
        Snapshot {
            metrics,
            captured_at: None,
            window: None,
        }
    }

    /// Reads every counter, gauge and histogram of `registry` (summary and untyped families are
    /// skipped). Counter families with a `position` label become [`Vector`]s.
    pub fn from_registry(registry: &prometheus::Registry) -> Self {
        Snapshot::new(registry_reader::read_registry(registry))
    }

    /// Parses Prometheus text exposition (for example a scrape of `/metrics`). Counter,
    /// gauge and histogram families are read; other types are skipped; malformed text, negative
    /// counters and incomplete histograms are errors naming the line or series.
    pub fn from_exposition_text(text: &str) -> Result<Self, MetricsError> {
        text_format::parse_exposition(text).map(Snapshot::new)
    }

    /// The series named `name`, one per label set.
    pub fn series(&self, name: &str) -> impl Iterator<Item = &Metric> + '_ {
        let name = name.to_owned();
        self.metrics
            .iter()
            .filter(move |metric| metric.name() == name)
    }

    /// The sum of the counter `name` over its label sets; `None` if no such counter exists.
    pub fn counter_total(&self, name: &str) -> Option<u64> {
        let values = self.series(name).filter_map(|metric| match metric {
            Metric::Counter(counter) => Some(counter.value),
            _ => None,
        });
        values.fold(None, |sum, value| Some(sum.unwrap_or(0) + value))
    }

    /// The sum of the gauge `name` over its label sets (for example running requests of all
    /// engines); `None` if no such gauge exists.
    pub fn gauge_total(&self, name: &str) -> Option<f64> {
        let values = self.gauge_values(name);
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The mean of the gauge `name` over its label sets (for example KV-cache usage of all
    /// engines); `None` if no such gauge exists.
    pub fn gauge_mean(&self, name: &str) -> Option<f64> {
        let values = self.gauge_values(name);
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }

    fn gauge_values(&self, name: &str) -> Vec<f64> {
        self.series(name)
            .filter_map(|metric| match metric {
                Metric::Gauge(gauge) => Some(gauge.value),
                _ => None,
            })
            .collect()
    }

    /// The element-wise sum of the vector `name` over its label sets; `None` if no such vector
    /// exists.
    pub fn vector_total(&self, name: &str) -> Option<Vec<u64>> {
        self.series(name)
            .filter_map(|metric| match metric {
                Metric::Vector(vector) => Some(&vector.values),
                _ => None,
            })
            .fold(None, |sum: Option<Vec<u64>>, values| {
                let mut sum = sum.unwrap_or_default();
                if sum.len() < values.len() {
                    sum.resize(values.len(), 0);
                }
                sum.iter_mut()
                    .zip(values)
                    .for_each(|(total, value)| *total += value);
                Some(sum)
            })
    }

    /// The histogram `name` merged over its label sets (counts, sums and buckets added; the labels
    /// of the result are those all sets share). `Ok(None)` if no such histogram exists; an error
    /// if the label sets have different bucket bounds.
    pub fn histogram_total(&self, name: &str) -> Result<Option<Histogram>, MetricsError> {
        let mut merged: Option<Histogram> = None;
        for metric in self.series(name) {
            let Metric::Histogram(histogram) = metric else {
                continue;
            };
            match merged.as_mut() {
                None => merged = Some(histogram.clone()),
                Some(total) => {
                    if total.upper_bounds() != histogram.upper_bounds() {
                        return Err(MetricsError::InvalidSeries {
                            family: name.to_owned(),
                            labels: format_labels(&histogram.labels),
                            reason: "bucket bounds differ from the family's other series".into(),
                        });
                    }
                    total
                        .labels
                        .retain(|key, value| histogram.labels.get(key) == Some(value));
                    total.count += histogram.count;
                    total.sum += histogram.sum;
                    for (sum, bucket) in total.buckets.iter_mut().zip(&histogram.buckets) {
                        sum.cumulative_count += bucket.cumulative_count;
                    }
                }
            }
        }
        Ok(merged)
    }

    /// The series whose label `label` equals `value` (for example `select("engine", "0")` for one
    /// engine), with the same timing.
    pub fn select(&self, label: &str, value: &str) -> Snapshot {
        Snapshot {
            metrics: self
                .metrics
                .iter()
                .filter(|metric| metric.labels().get(label).map(String::as_str) == Some(value))
                .cloned()
                .collect(),
            captured_at: self.captured_at,
            window: self.window,
        }
    }

    /// The distinct values of label `label` across all series (for example every engine).
    pub fn label_values(&self, label: &str) -> BTreeSet<String> {
        self.metrics
            .iter()
            .filter_map(|metric| metric.labels().get(label).cloned())
            .collect()
    }

    /// What changed between `earlier` and this snapshot: counters, histograms and vectors are
    /// subtracted; gauges keep this snapshot's value. The window becomes the time between the two.
    /// Both must come from the same source, `earlier` first: a series that disappeared, a counter
    /// that went backwards or changed bucket bounds is an error.
    pub fn delta(&self, earlier: &Snapshot) -> Result<Snapshot, MetricsError> {
        delta::subtract(self, earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(engine: &str) -> Labels {
        [("engine".to_owned(), engine.to_owned())].into()
    }

    fn example() -> Snapshot {
        let mut metrics = Vec::new();
        for (engine, scale) in [("0", 1), ("1", 2)] {
            metrics.push(Metric::Counter(Counter {
                name: "c".into(),
                labels: labels(engine),
                value: 5 * scale,
            }));
            metrics.push(Metric::Gauge(Gauge {
                name: "g".into(),
                labels: labels(engine),
                value: 0.25 * scale as f64,
            }));
            metrics.push(Metric::Vector(Vector {
                name: "v".into(),
                labels: labels(engine),
                values: vec![scale, scale - 1],
            }));
            metrics.push(Metric::Histogram(Histogram {
                name: "h".into(),
                labels: labels(engine),
                count: scale,
                sum: 1.5 * scale as f64,
                buckets: vec![
                    Bucket {
                        upper_bound: 1.0,
                        cumulative_count: 0,
                    },
                    Bucket {
                        upper_bound: f64::INFINITY,
                        cumulative_count: scale,
                    },
                ],
            }));
        }
        Snapshot::new(metrics)
    }

    #[test]
    fn totals_sum_over_every_label_set() {
        let snapshot = example();
        assert_eq!(snapshot.counter_total("c"), Some(15));
        assert_eq!(snapshot.counter_total("missing"), None);
        assert_eq!(
            snapshot.counter_total("g"),
            None,
            "a gauge is not a counter"
        );
        assert_eq!(snapshot.gauge_total("g"), Some(0.75));
        assert_eq!(snapshot.gauge_mean("g"), Some(0.375));
        assert_eq!(snapshot.vector_total("v"), Some(vec![3, 1]));
        let merged = snapshot.histogram_total("h").unwrap().unwrap();
        assert_eq!((merged.count, merged.sum), (3, 4.5));
        assert_eq!(merged.cumulative_count(f64::INFINITY), Some(3));
        assert!(
            merged.labels.is_empty(),
            "engines differ, so no label is shared"
        );
        assert_eq!(snapshot.histogram_total("missing").unwrap(), None);
    }

    #[test]
    fn select_keeps_one_engine() {
        let snapshot = example();
        assert_eq!(
            snapshot.label_values("engine"),
            ["0", "1"].map(String::from).into()
        );
        let engine1 = snapshot.select("engine", "1");
        assert_eq!(engine1.metrics.len(), 4);
        assert_eq!(engine1.counter_total("c"), Some(10));
        assert!(snapshot.select("engine", "7").metrics.is_empty());
    }

    #[test]
    fn histograms_with_different_bounds_do_not_merge() {
        let mut snapshot = example();
        if let Some(Metric::Histogram(h)) = snapshot.metrics.last_mut() {
            h.buckets[0].upper_bound = 2.0;
        }
        let error = snapshot.histogram_total("h").unwrap_err().to_string();
        assert!(
            error.contains("bucket bounds differ") && error.contains("engine=\"1\""),
            "{error}"
        );
    }

    #[test]
    fn json_round_trip() {
        let mut snapshot = example();
        snapshot.captured_at = Some(Duration::from_millis(1500));
        snapshot.window = Some(Duration::from_millis(1500));
        let json = serde_json::to_string(&snapshot).unwrap();
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), snapshot);
    }
}
