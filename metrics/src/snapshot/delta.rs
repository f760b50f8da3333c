//! Subtraction of two snapshots of the same source.

use std::collections::HashMap;

use super::metric::{format_labels, Counter, Histogram, Labels, Metric, Vector};
use super::Snapshot;
use crate::error::MetricsError;

/// Identity of a series: kind, name and labels.
type SeriesKey<'a> = (&'static str, &'a str, &'a Labels);

fn key(metric: &Metric) -> SeriesKey<'_> {
    (metric.kind(), metric.name(), metric.labels())
}

fn mismatch(metric: &Metric, reason: String) -> MetricsError {
    MetricsError::DeltaMismatch {
        metric: metric.name().to_owned(),
        labels: format_labels(metric.labels()),
        reason,
    }
}

/// `later - earlier`, series by series (see [`Snapshot::delta`]).
pub(super) fn subtract(later: &Snapshot, earlier: &Snapshot) -> Result<Snapshot, MetricsError> {
    let mut unmatched: HashMap<SeriesKey<'_>, &Metric> = earlier
        .metrics
        .iter()
        .map(|metric| (key(metric), metric))
        .collect();
    let mut metrics = Vec::with_capacity(later.metrics.len());
    for metric in &later.metrics {
        metrics.push(match unmatched.remove(&key(metric)) {
            Some(before) => subtract_series(metric, before)?,
            None => metric.clone(),
        });
    }
    if let Some(missing) = unmatched.values().next() {
        return Err(mismatch(
            missing,
            "the series is missing from the later snapshot".into(),
        ));
    }
    let window = match (later.captured_at, earlier.captured_at) {
        (Some(end), Some(start)) => {
            Some(
                end.checked_sub(start)
                    .ok_or_else(|| MetricsError::DeltaMismatch {
                        metric: "(snapshot)".into(),
                        labels: "{}".into(),
                        reason: format!(
                    "the earlier snapshot was captured after the later one ({start:?} > {end:?})"
                ),
                    })?,
            )
        }
        _ => None,
    };
    Ok(Snapshot {
        metrics,
        captured_at: later.captured_at,
        window,
    })
}

fn subtract_series(later: &Metric, earlier: &Metric) -> Result<Metric, MetricsError> {
    let backwards = |what: &str, before: u64, after: u64| {
        mismatch(
            later,
            format!("{what} went backwards from {before} to {after}"),
        )
    };
    let minus = |what: &str, after: u64, before: u64| {
        after
            .checked_sub(before)
            .ok_or_else(|| backwards(what, before, after))
    };
    Ok(match (later, earlier) {
        (Metric::Counter(after), Metric::Counter(before)) => Metric::Counter(Counter {
            value: minus("the counter", after.value, before.value)?,
            ..after.clone()
        }),
        (Metric::Gauge(after), Metric::Gauge(_)) => Metric::Gauge(after.clone()),
        (Metric::Histogram(after), Metric::Histogram(before)) => {
            if after.upper_bounds() != before.upper_bounds() {
                return Err(mismatch(later, "bucket bounds differ".into()));
            }
            let buckets = after
                .buckets
                .iter()
                .zip(&before.buckets)
                .map(|(a, b)| {
                    Ok(super::Bucket {
                        upper_bound: a.upper_bound,
                        cumulative_count: minus(
                            "a bucket count",
                            a.cumulative_count,
                            b.cumulative_count,
                        )?,
                    })
                })
                .collect::<Result<_, MetricsError>>()?;
            Metric::Histogram(Histogram {
                count: minus("the count", after.count, before.count)?,
                sum: after.sum - before.sum,
                buckets,
                ..after.clone()
            })
        }
        (Metric::Vector(after), Metric::Vector(before)) => {
            let length = after.values.len().max(before.values.len());
            let at = |values: &[u64], i: usize| values.get(i).copied().unwrap_or(0);
            let values = (0..length)
                .map(|i| {
                    minus(
                        "a position count",
                        at(&after.values, i),
                        at(&before.values, i),
                    )
                })
                .collect::<Result<_, MetricsError>>()?;
            Metric::Vector(Vector {
                values,
                ..after.clone()
            })
        }
        // Series are matched by kind, so this arm only guards the invariant.
        (after, before) => {
            return Err(mismatch(
                after,
                format!("a {} cannot follow a {}", after.kind(), before.kind()),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Bucket, Gauge};
    use super::*;

    fn snapshot(
        counter: u64,
        gauge: f64,
        hist: (u64, f64, u64),
        vector: Vec<u64>,
        at: u64,
    ) -> Snapshot {
        let labels = Labels::from([("engine".to_owned(), "0".to_owned())]);
        Snapshot {
            metrics: vec![
                Metric::Counter(Counter {
                    name: "c".into(),
                    labels: labels.clone(),
                    value: counter,
                }),
                Metric::Gauge(Gauge {
                    name: "g".into(),
                    labels: labels.clone(),
                    value: gauge,
                }),
                Metric::Histogram(Histogram {
                    name: "h".into(),
                    labels: labels.clone(),
                    count: hist.0,
                    sum: hist.1,
                    buckets: vec![
                        Bucket {
                            upper_bound: 1.0,
                            cumulative_count: hist.2,
                        },
                        Bucket {
                            upper_bound: f64::INFINITY,
                            cumulative_count: hist.0,
                        },
                    ],
                }),
                Metric::Vector(Vector {
                    name: "v".into(),
                    labels,
                    values: vector,
                }),
            ],
            captured_at: Some(Duration::from_secs(at)),
            window: Some(Duration::from_secs(at)),
        }
    }

    #[test]
    fn delta_subtracts_cumulative_series_and_keeps_gauges() {
        let earlier = snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 10);
        let later = snapshot(25, 0.25, (10, 5.5, 3), vec![7, 4, 1], 15);
        let delta = later.delta(&earlier).unwrap();
        assert_eq!(delta.counter_total("c"), Some(15));
        assert_eq!(delta.gauge_total("g"), Some(0.25));
        let h = delta.histogram_total("h").unwrap().unwrap();
        assert_eq!((h.count, h.sum, h.cumulative_count(1.0)), (6, 3.5, Some(2)));
        assert_eq!(delta.vector_total("v"), Some(vec![4, 3, 1]));
        assert_eq!(delta.window, Some(Duration::from_secs(5)));
        assert_eq!(delta.captured_at, Some(Duration::from_secs(15)));
    }

    #[test]
    fn delta_of_a_snapshot_with_itself_is_zero() {
        let s = snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 10);
        let delta = s.delta(&s).unwrap();
        assert_eq!(delta.counter_total("c"), Some(0));
        assert_eq!(delta.vector_total("v"), Some(vec![0, 0]));
        assert_eq!(delta.window, Some(Duration::ZERO));
    }

    #[test]
    fn mismatched_snapshots_are_errors() {
        let earlier = snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 10);
        let error = |later: Snapshot| later.delta(&earlier).unwrap_err().to_string();
        assert!(error(snapshot(9, 0.5, (4, 2.0, 1), vec![3, 1], 11))
            .contains("counter went backwards from 10 to 9"));
        assert!(
            error(snapshot(10, 0.5, (3, 2.0, 1), vec![3, 1], 11)).contains("count went backwards")
        );
        assert!(error(snapshot(10, 0.5, (4, 2.0, 1), vec![2, 1], 11)).contains("position count"));
        assert!(error(snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 9)).contains("captured after"));
        let mut missing = snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 11);
        missing.metrics.remove(0);
        assert!(error(missing).contains("missing from the later snapshot"));
        let mut rebucketed = snapshot(10, 0.5, (4, 2.0, 1), vec![3, 1], 11);
        if let Metric::Histogram(h) = &mut rebucketed.metrics[2] {
            h.buckets[0].upper_bound = 2.0;
        }
        assert!(error(rebucketed).contains("bucket bounds differ"));
    }
}
