//! Reads a `prometheus::Registry` into snapshot metrics (the port of vLLM's
//! `get_metrics_snapshot`, on a registry the caller owns rather than a process-global one).

use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::Registry;

use super::counters::{counter_value, digest_counter_family};
use super::metric::{format_labels, Bucket, Gauge, Histogram, Labels, Metric};

/// Every counter, gauge and histogram series of `registry`, family by family (sorted by family
/// name, then by label values). Counter families with a `position` label become vectors. Summary
/// and untyped families are skipped (logged at debug level), as are counter series holding a
/// value no counter can hold (negative or not a number; logged as a warning).
pub(crate) fn read_registry(registry: &Registry) -> Vec<Metric> {
    let mut metrics = Vec::new();
    for family in registry.gather() {
        match family.get_field_type() {
            MetricType::COUNTER => metrics.extend(read_counters(&family)),
            MetricType::GAUGE => metrics.extend(read_gauges(&family)),
            MetricType::HISTOGRAM => metrics.extend(read_histograms(&family)),
            unsupported => tracing::debug!(
                family = family.name(),
                kind = ?unsupported,
                "skipping metric family of an unsupported type"
            ),
        }
    }
    metrics
}

fn labels_of(metric: &proto::Metric) -> Labels {
    metric
        .get_label()
        .iter()
        .map(|pair| (pair.name().to_owned(), pair.value().to_owned()))
        .collect()
}

fn read_counters(family: &MetricFamily) -> Vec<Metric> {
    let name = family
        .name()
        .strip_suffix("_total")
        .unwrap_or(family.name());
    let mut series = Vec::with_capacity(family.get_metric().len());
    for metric in family.get_metric() {
        let labels = labels_of(metric);
        let raw = metric.get_counter().value();
        match counter_value(raw) {
            Some(value) => series.push((labels, value)),
            None => tracing::warn!(
                family = family.name(),
                labels = %format_labels(&labels),
                value = raw,
                "skipping a counter series with a value no counter can hold"
            ),
        }
    }
    digest_counter_family(name, series)
}

fn read_gauges(family: &MetricFamily) -> impl Iterator<Item = Metric> + '_ {
    family.get_metric().iter().map(|metric| {
        Metric::Gauge(Gauge {
            name: family.name().to_owned(),
            labels: labels_of(metric),
            value: metric.get_gauge().value(),
        })
    })
}

fn read_histograms(family: &MetricFamily) -> impl Iterator<Item = Metric> + '_ {
    family.get_metric().iter().map(|metric| {
        let histogram = metric.get_histogram();
        let count = histogram.get_sample_count();
        let mut buckets: Vec<Bucket> = histogram
            .get_bucket()
            .iter()
            .map(|bucket| Bucket {
                upper_bound: bucket.upper_bound(),
                cumulative_count: bucket.cumulative_count(),
            })
            .collect();
        if buckets
            .last()
            .is_none_or(|last| last.upper_bound != f64::INFINITY)
        {
            buckets.push(Bucket {
                upper_bound: f64::INFINITY,
                cumulative_count: count,
            });
        }
        Metric::Histogram(Histogram {
            name: family.name().to_owned(),
            labels: labels_of(metric),
            count,
            sum: histogram.get_sample_sum(),
            buckets,
        })
    })
}
