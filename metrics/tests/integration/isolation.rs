//! Recorders own their registries: two in one process never clobber each other, and the
//! process-global registry stays untouched.

use aquila_metrics::{
    BucketSet, EventSink, Family, Metric, Namespace, Recorder, RecorderConfig, SpecDecodeEvent,
};

fn recorder(namespace: Namespace) -> Recorder {
    let config = RecorderConfig::builder("m")
        .namespace(namespace)
        .num_speculative_tokens(2)
        .build()
        .unwrap();
    Recorder::new(config).unwrap()
}

fn drafts(recorder: &Recorder) -> Option<u64> {
    recorder
        .snapshot()
        .counter_total(&Family::SpecDecodeNumDrafts.name(recorder.namespace()))
}

#[test]
fn two_recorders_with_identical_names_coexist() {
    let first = recorder(Namespace::Vllm);
    let second = recorder(Namespace::Vllm);
    let event = SpecDecodeEvent {
        request_id: 1,
        num_draft_tokens: 2,
        draft_depth: 2,
        num_accepted_tokens: 1,
    };
    first.record_spec_decode(&event);
    first.record_spec_decode(&event);
    second.record_spec_decode(&event);
    assert_eq!(drafts(&first), Some(2));
    assert_eq!(drafts(&second), Some(1));
    assert!(
        prometheus::gather()
            .iter()
            .all(|family| !family.name().starts_with("vllm:")),
        "the process-global registry must not hold recorder families"
    );
}

#[test]
fn every_family_is_registered_with_its_buckets() {
    let config = RecorderConfig::builder("m")
        .num_speculative_tokens(1)
        .buckets(BucketSet::IterationTokens, vec![4.0, 64.0])
        .max_model_len(100)
        .build()
        .unwrap();
    let recorder = Recorder::new(config).unwrap();
    let text = recorder.exposition_text().unwrap();
    for family in Family::ALL {
        let name = family.exposition_name(Namespace::Aquila);
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} is not exposed"
        );
    }
    let snapshot = recorder.snapshot();
    let bounds = |family: Family| match snapshot.series(&family.name(Namespace::Aquila)).next() {
        Some(Metric::Histogram(histogram)) => histogram.upper_bounds(),
        other => panic!("{family:?}: {other:?}"),
    };
    assert_eq!(
        bounds(Family::IterationTokens),
        vec![4.0, 64.0, f64::INFINITY]
    );
    assert_eq!(
        bounds(Family::RequestPromptTokens),
        vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, f64::INFINITY]
    );
    assert_eq!(bounds(Family::E2eRequestLatency).len(), 22);
    // Every finish reason exists at zero.
    let reasons: Vec<String> = snapshot
        .series(&Family::RequestSuccess.name(Namespace::Aquila))
        .map(|metric| metric.labels()["finished_reason"].clone())
        .collect();
    assert_eq!(reasons, ["abort", "length", "stop"]);
}
