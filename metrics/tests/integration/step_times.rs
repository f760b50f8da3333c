//! The step-time histograms: each step's forward pass, and the drafter's call where there is one.

use std::time::Duration;

use aquila_metrics::{Family, IterationStats, Namespace, Recorder, RecorderConfig};

#[test]
fn forward_and_drafting_times_are_observed_where_a_step_has_them() {
    let recorder = Recorder::new(RecorderConfig::builder("m").build().unwrap()).unwrap();
    let step = |forward_ms: u64, draft_ms: Option<u64>| IterationStats {
        num_generation_tokens: 1,
        forward_time: Some(Duration::from_millis(forward_ms)),
        draft_time: draft_ms.map(Duration::from_millis),
        ..Default::default()
    };
    recorder.record_iteration(&step(20, Some(3)));
    recorder.record_iteration(&step(30, Some(2)));
    recorder.record_iteration(&step(40, None));
    recorder.record_iteration(&IterationStats::default());

    let snapshot = recorder.snapshot();
    let histogram = |family: Family| {
        snapshot
            .histogram_total(&family.name(Namespace::Aquila))
            .unwrap()
            .unwrap()
    };
    let forward = histogram(Family::ModelForwardTime);
    assert_eq!(
        forward.count, 3,
        "the step without a measured forward is not observed"
    );
    assert!((forward.sum - 0.090).abs() < 1e-9);
    let drafting = histogram(Family::SpecDecodeDraftTime);
    assert_eq!(
        drafting.count, 2,
        "steps without a drafter call are not observed"
    );
    assert!((drafting.sum - 0.005).abs() < 1e-9);
    let below = |histogram: &aquila_metrics::Histogram, bound: f64| {
        histogram
            .buckets
            .iter()
            .find(|bucket| bucket.upper_bound == bound)
            .map(|bucket| bucket.cumulative_count)
    };
    assert_eq!(below(&drafting, 0.0025), Some(1), "2 ms falls below 2.5 ms");
    assert_eq!(
        below(&forward, 0.03),
        Some(2),
        "20 and 30 ms fall below 30 ms"
    );
    assert_eq!(histogram(Family::IterationTokens).count, 4);
}
