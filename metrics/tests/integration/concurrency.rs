//! Eight threads recording at once lose nothing: every count adds up exactly.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use aquila_metrics::{
    EventSink, Family, FinishReason, FinishedRequestStats, IterationStats, Recorder,
    RecorderConfig, SpecDecodeEvent, SpecDecodeSummary,
};

const THREADS: u64 = 8;
const EVENTS_PER_THREAD: u64 = 5_000;

#[test]
fn concurrent_recording_loses_nothing() {
    let config = RecorderConfig::builder("m")
        .engines(["0", "1"])
        .num_speculative_tokens(3)
        .build()
        .unwrap();
    let recorder = Arc::new(Recorder::new(config).unwrap());
    let workers: Vec<_> = (0..THREADS)
        .map(|thread_index| {
            let recorder = Arc::clone(&recorder);
            thread::spawn(move || {
                // Half the threads write engine "1"; some events go deeper than k to race the growth
                // of per-position series.
                let engine = recorder
                    .engine(if thread_index % 2 == 0 { "0" } else { "1" })
                    .unwrap();
                for i in 0..EVENTS_PER_THREAD {
                    let deep = i % 1000 == 999;
                    engine.record_spec_decode(&SpecDecodeEvent {
                        request_id: i,
                        num_draft_tokens: if deep { 6 } else { 3 },
                        draft_depth: if deep { 6 } else { 3 },
                        num_accepted_tokens: if deep { 6 } else { (i % 4) as usize },
                    });
                    engine.record_iteration(&IterationStats {
                        num_prompt_tokens: 2,
                        num_generation_tokens: 1,
                        time_to_first_tokens: Vec::new(),
                        inter_token_latencies: vec![Duration::from_millis(20)],
                        forward_time: Some(Duration::from_millis(20)),
                        draft_time: None,
                    });
                    if i % 10 == 0 {
                        engine.record_finished(&FinishedRequestStats {
                            finish_reason: FinishReason::Stop,
                            e2e_latency: Duration::from_secs(1),
                            queue_time: Duration::ZERO,
                            prefill_time: Duration::from_millis(100),
                            decode_time: Duration::from_millis(900),
                            inference_time: Duration::from_secs(1),
                            num_prompt_tokens: 4,
                            num_generation_tokens: 10,
                        });
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }

    let snapshot = recorder.snapshot();
    let ns = recorder.namespace();
    let events = THREADS * EVENTS_PER_THREAD;
    let deep = THREADS * (EVENTS_PER_THREAD / 1000);
    let shallow = events - deep;
    let summary = SpecDecodeSummary::from_snapshot(&snapshot, ns);
    assert_eq!(summary.drafts, events);
    assert_eq!(summary.draft_tokens, shallow * 3 + deep * 6);
    // Events accept 0, 1, 2, 3 in turn, except the deep ones (all at i % 4 == 3): 6 instead of 3.
    assert_eq!(
        summary.accepted_tokens,
        events / 4 * (1 + 2 + 3) - deep * 3 + deep * 6
    );
    let quarter = events / 4;
    assert_eq!(
        summary.accepted_per_position,
        vec![3 * quarter, 2 * quarter, quarter, deep, deep, deep],
        "positions 0..3 from the cycle, 3..6 from the deep events"
    );
    assert_eq!(
        snapshot.counter_total(&Family::PromptTokens.name(ns)),
        Some(2 * events)
    );
    assert_eq!(
        snapshot.counter_total(&Family::GenerationTokens.name(ns)),
        Some(events)
    );
    let itl = snapshot
        .histogram_total(&Family::InterTokenLatency.name(ns))
        .unwrap()
        .unwrap();
    assert_eq!(itl.count, events);
    let iteration = snapshot
        .histogram_total(&Family::IterationTokens.name(ns))
        .unwrap()
        .unwrap();
    assert_eq!(
        (iteration.count, iteration.sum),
        (events, 3.0 * events as f64)
    );
    assert_eq!(
        snapshot.counter_total(&Family::RequestSuccess.name(ns)),
        Some(events / 10)
    );
}
