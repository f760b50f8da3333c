//! The cases of vLLM's `tests/v1/metrics/test_metrics_reader.py`, ported: a private registry
//! holds families for 1 and 4 engines; the snapshot must keep every label set. Each case runs
//! through both readers: the registry reader and the text-exposition parser.

use std::collections::HashMap;

use aquila_metrics::{Bucket, Metric, Snapshot};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

const ENGINE_COUNTS: [usize; 2] = [1, 4];

/// The snapshot of `registry` read directly and read back from its exposition text.
fn read_both_ways(registry: &Registry) -> [Snapshot; 2] {
    let text = TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    [
        Snapshot::from_registry(registry),
        Snapshot::from_exposition_text(&text).unwrap(),
    ]
}

fn engines(count: usize) -> Vec<String> {
    (0..count).map(|engine| engine.to_string()).collect()
}

/// Asserts that `metrics` has one entry per engine, each labelled model "foo" and engine i.
fn assert_one_per_engine(metrics: &[Metric], count: usize) {
    assert_eq!(metrics.len(), count);
    let mut seen: Vec<&str> = metrics
        .iter()
        .map(|metric| {
            assert_eq!(metric.labels()["model"], "foo");
            metric.labels()["engine_index"].as_str()
        })
        .collect();
    seen.sort();
    let expected = engines(count);
    assert_eq!(
        seen,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[test]
fn gauge_metric() {
    for count in ENGINE_COUNTS {
        let registry = Registry::new();
        let gauge = GaugeVec::new(
            Opts::new("vllm:test_gauge", "Test gauge"),
            &["model", "engine_index"],
        )
        .unwrap();
        registry.register(Box::new(gauge.clone())).unwrap();
        for engine in engines(count) {
            gauge.with_label_values(&["foo", engine.as_str()]).set(98.5);
        }
        for snapshot in read_both_ways(&registry) {
            assert_one_per_engine(&snapshot.metrics, count);
            for metric in &snapshot.metrics {
                let Metric::Gauge(gauge) = metric else {
                    panic!("not a gauge: {metric:?}")
                };
                assert_eq!(gauge.name, "vllm:test_gauge");
                assert_eq!(gauge.value, 98.5);
            }
        }
    }
}

#[test]
fn counter_metric() {
    for count in ENGINE_COUNTS {
        let registry = Registry::new();
        let counter = IntCounterVec::new(
            Opts::new("vllm:test_counter_total", "Test counter"),
            &["model", "engine_index"],
        )
        .unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        for engine in engines(count) {
            counter
                .with_label_values(&["foo", engine.as_str()])
                .inc_by(19);
        }
        for snapshot in read_both_ways(&registry) {
            assert_one_per_engine(&snapshot.metrics, count);
            for metric in &snapshot.metrics {
                let Metric::Counter(counter) = metric else {
                    panic!("not a counter: {metric:?}")
                };
                assert_eq!(counter.name, "vllm:test_counter");
                assert_eq!(counter.value, 19);
            }
            assert_eq!(
                snapshot.counter_total("vllm:test_counter"),
                Some(19 * count as u64)
            );
        }
    }
}

#[test]
fn histogram_metric() {
    for count in ENGINE_COUNTS {
        let registry = Registry::new();
        let opts = HistogramOpts::new("vllm:test_histogram", "Test histogram")
            .buckets(vec![10.0, 20.0, 30.0, 40.0, 50.0]);
        let histogram = HistogramVec::new(opts, &["model", "engine_index"]).unwrap();
        registry.register(Box::new(histogram.clone())).unwrap();
        for engine in engines(count) {
            let child = histogram.with_label_values(&["foo", engine.as_str()]);
            for value in [42.0, 21.0, 7.0] {
                child.observe(value);
            }
        }
        for snapshot in read_both_ways(&registry) {
            assert_one_per_engine(&snapshot.metrics, count);
            for metric in &snapshot.metrics {
                let Metric::Histogram(histogram) = metric else {
                    panic!("not a histogram: {metric:?}")
                };
                assert_eq!(histogram.name, "vllm:test_histogram");
                assert_eq!((histogram.count, histogram.sum), (3, 70.0));
                assert!(!histogram.labels.contains_key("le"));
                let expected: Vec<Bucket> = [
                    (10.0, 1),
                    (20.0, 1),
                    (30.0, 2),
                    (40.0, 2),
                    (50.0, 3),
                    (f64::INFINITY, 3),
                ]
                .into_iter()
                .map(|(upper_bound, cumulative_count)| Bucket {
                    upper_bound,
                    cumulative_count,
                })
                .collect();
                assert_eq!(histogram.buckets, expected);
            }
        }
    }
}

#[test]
fn vector_metric() {
    for count in ENGINE_COUNTS {
        let registry = Registry::new();
        let counter = IntCounterVec::new(
            Opts::new(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "Test vector",
            ),
            &["position", "model", "engine_index"],
        )
        .unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        for engine in engines(count) {
            for (position, amount) in [("0", 10), ("1", 5), ("2", 1)] {
                counter
                    .with_label_values(&[position, "foo", engine.as_str()])
                    .inc_by(amount);
            }
        }
        for snapshot in read_both_ways(&registry) {
            assert_one_per_engine(&snapshot.metrics, count);
            for metric in &snapshot.metrics {
                let Metric::Vector(vector) = metric else {
                    panic!("not a vector: {metric:?}")
                };
                assert_eq!(vector.name, "vllm:spec_decode_num_accepted_tokens_per_pos");
                assert_eq!(vector.values, vec![10, 5, 1]);
                assert!(!vector.labels.contains_key("position"));
            }
        }
    }
}

/// A collector that exposes one family of a type the reader does not support.
struct ForeignCollector {
    desc: Desc,
    kind: MetricType,
}

impl ForeignCollector {
    fn new(name: &str, kind: MetricType) -> Self {
        let desc = Desc::new(
            name.into(),
            "A foreign family".into(),
            vec![],
            HashMap::new(),
        )
        .unwrap();
        ForeignCollector { desc, kind }
    }
}

impl Collector for ForeignCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut metric = proto::Metric::default();
        match self.kind {
            MetricType::SUMMARY => {
                let mut summary = proto::Summary::default();
                summary.set_sample_count(2);
                summary.set_sample_sum(3.0);
                metric.set_summary(summary);
            }
            // prometheus-rs marks untyped values as deprecated, yet still encodes them.
            #[allow(deprecated)]
            _ => {
                let mut untyped = proto::Untyped::default();
                untyped.set_value(1.0);
                metric.untyped = Some(untyped).into();
            }
        }
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(self.kind);
        family.set_metric(vec![metric]);
        vec![family]
    }
}

#[test]
fn unsupported_metric_type_is_skipped() {
    let registry = Registry::new();
    registry
        .register(Box::new(ForeignCollector::new(
            "vllm:test_summary",
            MetricType::SUMMARY,
        )))
        .unwrap();
    let gauge = GaugeVec::new(Opts::new("vllm:test_gauge", "Test gauge"), &["model"]).unwrap();
    registry.register(Box::new(gauge.clone())).unwrap();
    gauge.with_label_values(&["foo"]).set(1.0);
    for snapshot in read_both_ways(&registry) {
        assert_eq!(snapshot.metrics.len(), 1);
        assert_eq!(snapshot.metrics[0].name(), "vllm:test_gauge");
    }
}

#[test]
fn unsupported_metric_type_alone_yields_empty_snapshot() {
    let registry = Registry::new();
    registry
        .register(Box::new(ForeignCollector::new(
            "vllm:test_summary",
            MetricType::SUMMARY,
        )))
        .unwrap();
    for snapshot in read_both_ways(&registry) {
        assert!(snapshot.metrics.is_empty(), "{:?}", snapshot.metrics);
    }
    // prometheus-rs cannot encode untyped families (its text encoder panics on them), so the text
    // reader gets hand-written exposition.
    let registry = Registry::new();
    registry
        .register(Box::new(ForeignCollector::new(
            "vllm:test_untyped",
            MetricType::UNTYPED,
        )))
        .unwrap();
    assert!(Snapshot::from_registry(&registry).metrics.is_empty());
    let text = "# HELP vllm:test_untyped A foreign family\n# TYPE vllm:test_untyped untyped\nvllm:test_untyped 1\n";
    assert!(Snapshot::from_exposition_text(text)
        .unwrap()
        .metrics
        .is_empty());
}
