//! Cost of recording one verification event and of taking a full snapshot.
//!
//! `cargo bench -p aquila-metrics -- --warm-up-time 1 --measurement-time 3`

#[path = "../examples/common/mod.rs"]
mod common;

use std::hint::black_box;

use aquila_metrics::{EventSink, IterationStats, Recorder, RecorderConfig, SpecDecodeEvent};
use common::Workload;
use criterion::{criterion_group, criterion_main, Criterion};

fn recorder(engines: &[&str]) -> Recorder {
    let config = RecorderConfig::builder("bench-model")
        .engines(engines.iter().copied())
        .num_speculative_tokens(3)
        .build()
        .expect("valid benchmark configuration");
    Recorder::new(config).expect("recorder")
}

fn record(c: &mut Criterion) {
    let recorder = recorder(&["0"]);
    let event = SpecDecodeEvent {
        request_id: 7,
        num_draft_tokens: 3,
        draft_depth: 3,
        num_accepted_tokens: 2,
    };
    c.bench_function("record_spec_decode (k=3, 2 accepted)", |b| {
        b.iter(|| recorder.record_spec_decode(black_box(&event)))
    });
    let step = IterationStats {
        num_prompt_tokens: 0,
        num_generation_tokens: 12,
        time_to_first_tokens: Vec::new(),
        inter_token_latencies: vec![std::time::Duration::from_millis(21); 4],
        forward_time: Some(std::time::Duration::from_millis(20)),
        draft_time: Some(std::time::Duration::from_millis(3)),
    };
    c.bench_function(
        "record_iteration (4 inter-token latencies, step times)",
        |b| b.iter(|| recorder.record_iteration(black_box(&step))),
    );
}

fn snapshot(c: &mut Criterion) {
    for engines in [&["0"][..], &["0", "1", "2", "3"][..]] {
        let recorder = recorder(engines);
        Workload::default().run(&recorder);
        c.bench_function(
            &format!("snapshot (all families, {} engines)", engines.len()),
            |b| b.iter(|| black_box(recorder.snapshot())),
        );
        c.bench_function(
            &format!("exposition_text ({} engines)", engines.len()),
            |b| b.iter(|| black_box(recorder.exposition_text().expect("encodes"))),
        );
    }
}

criterion_group!(benches, record, snapshot);
criterion_main!(benches);
