//! Digests the series of a counter family into [`Counter`]s, or into [`Vector`]s when the family
//! is a per-position counter.

use std::collections::BTreeMap;

use super::metric::{Counter, Labels, Metric, Vector};
use crate::config::MAX_DRAFT_POSITIONS;
use crate::family::POSITION_LABEL;

/// The integer value of a counter sample: the integer part of a finite, non-negative value
/// (fractional counters of other exporters are truncated, as vLLM's reader does). `None` for
/// values a counter cannot hold (negative, NaN, infinite).
pub(crate) fn counter_value(value: f64) -> Option<u64> {
    (value.is_finite() && value >= 0.0).then_some(value as u64)
}

/// Turns one counter family's series into metrics.
///
/// When every series carries a `position` label holding a draft index (at most
/// [`MAX_DRAFT_POSITIONS`]), the family becomes one [`Vector`] per remaining label set, all as
/// long as the deepest position of any set (missing positions read 0). Otherwise each series
/// becomes a [`Counter`], labels untouched.
pub(crate) fn digest_counter_family(name: &str, series: Vec<(Labels, u64)>) -> Vec<Metric> {
    match positions_of(&series) {
        Some(positions) => digest_vectors(name, series, &positions),
        None => series
            .into_iter()
            .map(|(labels, value)| {
                Metric::Counter(Counter {
                    name: name.to_owned(),
                    labels,
                    value,
                })
            })
            .collect(),
    }
}

/// The draft position of every series, or `None` if any series lacks a valid one.
fn positions_of(series: &[(Labels, u64)]) -> Option<Vec<usize>> {
    if series.is_empty() {
        return None;
    }
    series
        .iter()
        .map(|(labels, _)| {
            let position = labels.get(POSITION_LABEL)?.parse::<usize>().ok()?;
            (position < MAX_DRAFT_POSITIONS).then_some(position)
        })
        .collect()
}

fn digest_vectors(name: &str, series: Vec<(Labels, u64)>, positions: &[usize]) -> Vec<Metric> {
    let length = positions.iter().max().map_or(0, |deepest| deepest + 1);
    let mut vectors: BTreeMap<Labels, Vec<u64>> = BTreeMap::new();
    for ((mut labels, value), position) in series.into_iter().zip(positions) {
        labels.remove(POSITION_LABEL);
        let values = vectors.entry(labels).or_insert_with(|| vec![0; length]);
        values[*position] += value;
    }
    vectors
        .into_iter()
        .map(|(labels, values)| {
            Metric::Vector(Vector {
                name: name.to_owned(),
                labels,
                values,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::metric::labels_from_pairs as labels;

    #[test]
    fn per_position_series_become_equal_length_vectors() {
        let series = vec![
            (labels(&[("engine", "0"), ("position", "0")]), 4),
            (labels(&[("engine", "0"), ("position", "1")]), 2),
            (labels(&[("engine", "1"), ("position", "2")]), 1),
        ];
        let metrics = digest_counter_family("per_pos", series);
        assert_eq!(
            metrics,
            vec![
                Metric::Vector(Vector {
                    name: "per_pos".into(),
                    labels: labels(&[("engine", "0")]),
                    values: vec![4, 2, 0],
                }),
                Metric::Vector(Vector {
                    name: "per_pos".into(),
                    labels: labels(&[("engine", "1")]),
                    values: vec![0, 0, 1],
                }),
            ]
        );
    }

    #[test]
    fn non_index_positions_keep_plain_counters() {
        let series = vec![
            (labels(&[("position", "0")]), 4),
            (labels(&[("position", "first")]), 2),
        ];
        let metrics = digest_counter_family("c", series);
        assert!(metrics.iter().all(|m| matches!(m, Metric::Counter(_))));
        assert_eq!(metrics.len(), 2);
        let too_deep = vec![(labels(&[("position", &MAX_DRAFT_POSITIONS.to_string())]), 1)];
        assert!(matches!(
            digest_counter_family("c", too_deep)[0],
            Metric::Counter(_)
        ));
    }

    #[test]
    fn counter_values_must_be_non_negative_numbers() {
        assert_eq!(counter_value(19.0), Some(19));
        assert_eq!(counter_value(2.9), Some(2));
        assert_eq!(counter_value(-1.0), None);
        assert_eq!(counter_value(f64::NAN), None);
        assert_eq!(counter_value(f64::INFINITY), None);
    }
}
