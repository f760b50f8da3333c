//! Reads Prometheus text exposition back into snapshot metrics: what a scraper of `/metrics`
//! needs to get the same typed values as [`Recorder::snapshot`](crate::Recorder::snapshot).

use std::collections::{BTreeMap, HashMap};

use super::counters::{counter_value, digest_counter_family};
use super::float_serde::parse_prometheus_float;
use super::metric::{format_labels, Bucket, Gauge, Histogram, Labels, Metric};
use super::text_lines::{parse_line, Line};
use crate::error::MetricsError;

/// Sample-name suffixes that belong to a family declared without them.
const SUFFIXES: [&str; 5] = ["_total", "_created", "_bucket", "_sum", "_count"];

/// A sample with the line it came from.
struct Sample {
    line: usize,
    name: String,
    labels: Labels,
    value: f64,
}

/// The samples of one `# TYPE`-declared family.
struct Family {
    name: String,
    kind: String,
    samples: Vec<Sample>,
}

/// Parses exposition text into metrics, family by family in the order of their `# TYPE` lines.
/// Counters, gauges and histograms are read; other types and samples of undeclared families are
/// skipped (logged at debug level).
pub(crate) fn parse_exposition(text: &str) -> Result<Vec<Metric>, MetricsError> {
    let mut families: Vec<Family> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (index, raw_line) in text.lines().enumerate() {
        let line = index + 1;
        let parse_error = |reason| MetricsError::Parse { line, reason };
        match parse_line(raw_line).map_err(parse_error)? {
            Line::Ignored => {}
            Line::Type { family, kind } => {
                if by_name.contains_key(&family) {
                    return Err(parse_error(format!("second TYPE line for `{family}`")));
                }
                by_name.insert(family.clone(), families.len());
                families.push(Family {
                    name: family,
                    kind,
                    samples: Vec::new(),
                });
            }
            Line::Sample {
                name,
                labels,
                value,
            } => match family_of(&name, &by_name) {
                Some(slot) => families[slot].samples.push(Sample {
                    line,
                    name,
                    labels,
                    value,
                }),
                None => tracing::debug!(sample = name, "skipping a sample of an undeclared family"),
            },
        }
    }
    let mut metrics = Vec::new();
    for family in families {
        match family.kind.as_str() {
            "counter" => metrics.extend(counters(family)?),
            "gauge" => metrics.extend(gauges(family)?),
            "histogram" => metrics.extend(histograms(family)?),
            other => tracing::debug!(
                family = family.name,
                kind = other,
                "skipping metric family of an unsupported type"
            ),
        }
    }
    Ok(metrics)
}

/// The declared family a sample name belongs to: its own name, or its name minus a suffix.
fn family_of(sample: &str, by_name: &HashMap<String, usize>) -> Option<usize> {
    by_name.get(sample).copied().or_else(|| {
        SUFFIXES
            .iter()
            .filter_map(|suffix| sample.strip_suffix(suffix))
            .find_map(|base| by_name.get(base).copied())
    })
}

fn invalid(family: &str, labels: &Labels, reason: String) -> MetricsError {
    MetricsError::InvalidSeries {
        family: family.to_owned(),
        labels: format_labels(labels),
        reason,
    }
}

fn unexpected(family: &Family, sample: &Sample) -> MetricsError {
    MetricsError::Parse {
        line: sample.line,
        reason: format!(
            "sample `{}` does not belong to {} `{}`",
            sample.name, family.kind, family.name
        ),
    }
}

/// Rejects a label set seen twice for the same sample name.
fn check_unique(
    seen: &mut HashMap<(String, Labels), usize>,
    sample: &Sample,
) -> Result<(), MetricsError> {
    match seen.insert((sample.name.clone(), sample.labels.clone()), sample.line) {
        Some(first) => Err(MetricsError::Parse {
            line: sample.line,
            reason: format!(
                "sample `{}` {} repeats line {first}",
                sample.name,
                format_labels(&sample.labels)
            ),
        }),
        None => Ok(()),
    }
}

fn counters(family: Family) -> Result<Vec<Metric>, MetricsError> {
    // Declared either with the suffix (`x_total`, as the Rust client writes) or without it (`x`,
    // as the Python client writes); the snapshot name never has it.
    let base = family
        .name
        .strip_suffix("_total")
        .unwrap_or(&family.name)
        .to_owned();
    let total = format!("{base}_total");
    let mut seen = HashMap::new();
    let mut series = Vec::new();
    for sample in &family.samples {
        if sample.name == format!("{base}_created") {
            continue;
        }
        if sample.name != total && sample.name != family.name {
            return Err(unexpected(&family, sample));
        }
        check_unique(&mut seen, sample)?;
        let value = counter_value(sample.value).ok_or_else(|| {
            invalid(
                &base,
                &sample.labels,
                format!("counter value {} is negative or not a number", sample.value),
            )
        })?;
        series.push((sample.labels.clone(), value));
    }
    Ok(digest_counter_family(&base, series))
}

fn gauges(family: Family) -> Result<Vec<Metric>, MetricsError> {
    let mut seen = HashMap::new();
    let mut metrics = Vec::new();
    for sample in &family.samples {
        if sample.name != family.name {
            return Err(unexpected(&family, sample));
        }
        check_unique(&mut seen, sample)?;
        metrics.push(Metric::Gauge(Gauge {
            name: family.name.clone(),
            labels: sample.labels.clone(),
            value: sample.value,
        }));
    }
    Ok(metrics)
}

/// The `_bucket`, `_count` and `_sum` samples of one histogram label set.
#[derive(Default)]
struct HistogramParts {
    buckets: Vec<Bucket>,
    count: Option<u64>,
    sum: Option<f64>,
}

fn histograms(family: Family) -> Result<Vec<Metric>, MetricsError> {
    let name = &family.name;
    let mut seen = HashMap::new();
    let mut order: Vec<Labels> = Vec::new();
    let mut parts: BTreeMap<Labels, HistogramParts> = BTreeMap::new();
    for sample in &family.samples {
        check_unique(&mut seen, sample)?;
        let suffix = sample.name.strip_prefix(name.as_str()).unwrap_or_default();
        let mut labels = sample.labels.clone();
        let bound = if suffix == "_bucket" {
            Some(labels.remove("le"))
        } else {
            None
        };
        if !parts.contains_key(&labels) && suffix != "_created" {
            order.push(labels.clone());
        }
        let integral = |what: &str| {
            counter_value(sample.value)
                .filter(|v| *v as f64 == sample.value)
                .ok_or_else(|| {
                    invalid(
                        name,
                        &labels,
                        format!("{what} {} is not a non-negative integer", sample.value),
                    )
                })
        };
        match (suffix, bound) {
            ("_bucket", Some(Some(le))) => {
                let upper_bound = parse_prometheus_float(&le)
                    .filter(|b| !b.is_nan())
                    .ok_or_else(|| {
                        invalid(
                            name,
                            &labels,
                            format!("bucket bound `{le}` is not a number"),
                        )
                    })?;
                let cumulative_count = integral("bucket count")?;
                parts.entry(labels).or_default().buckets.push(Bucket {
                    upper_bound,
                    cumulative_count,
                });
            }
            ("_bucket", _) => {
                return Err(invalid(
                    name,
                    &labels,
                    "a bucket sample has no `le` label".into(),
                ));
            }
            ("_count", None) => parts.entry(labels).or_default().count = Some(integral("count")?),
            ("_sum", None) => parts.entry(labels).or_default().sum = Some(sample.value),
            ("_created", None) => {}
            _ => return Err(unexpected(&family, sample)),
        }
    }
    order
        .into_iter()
        .map(|labels| {
            let series = parts.remove(&labels).unwrap_or_default();
            assemble_histogram(name, labels, series)
        })
        .collect()
}

/// Checks one label set's parts (vLLM's reader asserts the same: buckets, count and sum for every
/// label set) and builds its histogram.
fn assemble_histogram(
    name: &str,
    labels: Labels,
    parts: HistogramParts,
) -> Result<Metric, MetricsError> {
    let HistogramParts {
        mut buckets,
        count,
        sum,
    } = parts;
    let (Some(count), Some(sum)) = (count, sum) else {
        return Err(invalid(
            name,
            &labels,
            "needs `_bucket`, `_count` and `_sum` samples".into(),
        ));
    };
    buckets.sort_by(|a, b| a.upper_bound.total_cmp(&b.upper_bound));
    if buckets
        .last()
        .is_none_or(|last| last.upper_bound != f64::INFINITY)
    {
        return Err(invalid(name, &labels, "has no `+Inf` bucket".into()));
    }
    if buckets
        .windows(2)
        .any(|pair| pair[0].cumulative_count > pair[1].cumulative_count)
    {
        return Err(invalid(
            name,
            &labels,
            "bucket counts are not cumulative".into(),
        ));
    }
    if buckets.last().map(|b| b.cumulative_count) != Some(count) {
        return Err(invalid(
            name,
            &labels,
            format!("`+Inf` bucket differs from the count {count}"),
        ));
    }
    Ok(Metric::Histogram(Histogram {
        name: name.to_owned(),
        labels,
        count,
        sum,
        buckets,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::metric::labels_from_pairs as labels;
    use crate::snapshot::metric::{Counter, Vector};

    #[test]
    fn python_and_rust_counter_spellings() {
        let text = "# TYPE a counter\na_total{engine=\"0\"} 3\na_created{engine=\"0\"} 1.7e9\n\
                    # TYPE b_total counter\nb_total 4\n";
        let metrics = parse_exposition(text).unwrap();
        assert_eq!(
            metrics,
            vec![
                Metric::Counter(Counter {
                    name: "a".into(),
                    labels: labels(&[("engine", "0")]),
                    value: 3
                }),
                Metric::Counter(Counter {
                    name: "b".into(),
                    labels: Labels::new(),
                    value: 4
                }),
            ]
        );
    }

    #[test]
    fn histograms_group_by_label_set() {
        let mut text = String::from("# HELP h help\n# TYPE h histogram\n");
        for engine in ["0", "1"] {
            for (le, count) in [("10", 1), ("20", 1), ("+Inf", 3)] {
                text += &format!("h_bucket{{engine=\"{engine}\",le=\"{le}\"}} {count}\n");
            }
            text += &format!("h_sum{{engine=\"{engine}\"}} 70\nh_count{{engine=\"{engine}\"}} 3\n");
        }
        let metrics = parse_exposition(&text).unwrap();
        assert_eq!(metrics.len(), 2);
        for (metric, engine) in metrics.iter().zip(["0", "1"]) {
            let Metric::Histogram(h) = metric else {
                panic!("{metric:?}")
            };
            assert_eq!(h.labels, labels(&[("engine", engine)]));
            assert_eq!((h.count, h.sum), (3, 70.0));
            assert_eq!(h.upper_bounds(), vec![10.0, 20.0, f64::INFINITY]);
        }
    }

    #[test]
    fn per_position_counters_become_vectors_and_other_types_are_skipped() {
        let text = "# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 1\ns_count 1\n\
                    # TYPE p_total counter\np_total{position=\"0\"} 5\np_total{position=\"1\"} 2\n\
                    undeclared 7\n";
        let metrics = parse_exposition(text).unwrap();
        assert_eq!(
            metrics,
            vec![Metric::Vector(Vector {
                name: "p".into(),
                labels: Labels::new(),
                values: vec![5, 2]
            })]
        );
    }

    #[test]
    fn inconsistent_input_is_reported_with_its_location() {
        let error = |text: &str| parse_exposition(text).unwrap_err().to_string();
        assert!(error("# TYPE a counter\n# TYPE a counter\n").contains("line 2: second TYPE"));
        assert!(error("# TYPE a counter\na_total 1\na_total 2\n").contains("line 3"));
        assert!(error("# TYPE a counter\na_total -1\n").contains("negative"));
        assert!(error("# TYPE g gauge\ng_sum 1\n").contains("does not belong to gauge `g`"));
        assert!(
            error("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n").contains("`_sum`")
        );
        assert!(
            error("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n")
                .contains("+Inf")
        );
        assert!(error("# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n").contains("`le`"));
        assert!(error("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n")
            .contains("not cumulative"));
        assert!(
            error("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n")
                .contains("differs")
        );
        assert!(
            error("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1.5\nh_sum 1\nh_count 1\n")
                .contains("not a non-negative integer")
        );
        assert!(error("x{").contains("line 1"));
    }
}
