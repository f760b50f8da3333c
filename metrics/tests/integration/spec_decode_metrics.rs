//! vLLM's speculative-decoding metrics cases (`SpecDecodingStats`, `SpecDecodingLogging`,
//! `SpecDecodingProm` and `test_engine_metrics`), ported to the recorder, plus the reference's
//! worked example.

use crate::common;

use std::time::Duration;

use aquila_metrics::{
    EventSink, Family, Metric, Namespace, Recorder, RecorderConfig, SpecDecodeEvent,
    SpecDecodeSummary, StatsLogger,
};
use common::Workload;

fn recorder_with(k: usize, engines: &[&str]) -> Recorder {
    let config = RecorderConfig::builder("foo")
        .engines(engines.iter().copied())
        .num_speculative_tokens(k)
        .build()
        .unwrap();
    Recorder::new(config).unwrap()
}

fn draft(k: usize, accepted: usize) -> SpecDecodeEvent {
    SpecDecodeEvent {
        request_id: 1,
        num_draft_tokens: k,
        draft_depth: k,
        num_accepted_tokens: accepted,
    }
}

fn summary(recorder: &Recorder) -> SpecDecodeSummary {
    SpecDecodeSummary::from_snapshot(&recorder.snapshot(), recorder.namespace())
}

fn per_position_name(namespace: Namespace) -> String {
    Family::SpecDecodeNumAcceptedTokensPerPos.name(namespace)
}

#[test]
fn worked_example_from_the_reference() {
    let recorder = recorder_with(3, &["0"]);
    for accepted in [3, 1, 2, 2, 1] {
        recorder.record_spec_decode(&draft(3, accepted));
    }
    let summary = summary(&recorder);
    assert_eq!(
        (
            summary.drafts,
            summary.draft_tokens,
            summary.accepted_tokens
        ),
        (5, 15, 9)
    );
    assert!((summary.acceptance_rate() - 0.6).abs() < 1e-12);
    assert!((summary.mean_acceptance_length() - 2.8).abs() < 1e-12);
    assert_eq!(summary.accepted_per_position, vec![5, 3, 1]);
    let rates = summary.per_position_acceptance_rates();
    for (rate, expected) in rates.iter().zip([1.0, 0.6, 0.2]) {
        assert!((rate - expected).abs() < 1e-12, "{rates:?}");
    }
}

#[test]
fn all_k_positions_exist_at_zero_before_any_draft() {
    let recorder = recorder_with(4, &["0", "1"]);
    let snapshot = recorder.snapshot();
    let vectors: Vec<&Metric> = snapshot
        .series(&per_position_name(Namespace::Aquila))
        .collect();
    assert_eq!(vectors.len(), 2, "one vector per engine");
    for vector in vectors {
        let Metric::Vector(vector) = vector else {
            panic!("{vector:?}")
        };
        assert_eq!(vector.values, vec![0; 4]);
    }
    assert_eq!(summary(&recorder).drafts, 0);
    assert_eq!(summary(&recorder).mean_acceptance_length(), 1.0);
    let text = recorder.exposition_text().unwrap();
    for position in 0..4 {
        assert!(text.contains(&format!(
            "aquila_spec_decode_num_accepted_tokens_per_pos_total{{engine=\"1\",model_name=\"foo\",position=\"{position}\"}} 0"
        )));
    }
}

#[test]
fn accepted_positions_are_counted_as_a_prefix_and_accumulate() {
    let recorder = recorder_with(3, &["0"]);
    recorder.record_spec_decode(&draft(3, 2));
    assert_eq!(summary(&recorder).accepted_per_position, vec![1, 1, 0]);
    recorder.record_spec_decode(&draft(3, 3));
    recorder.record_spec_decode(&draft(3, 0));
    let summary = summary(&recorder);
    assert_eq!(summary.accepted_per_position, vec![2, 2, 1]);
    assert_eq!(
        (
            summary.drafts,
            summary.draft_tokens,
            summary.accepted_tokens
        ),
        (3, 9, 5)
    );
}

#[test]
fn mean_acceptance_length_includes_the_bonus_token() {
    let recorder = recorder_with(2, &["0"]);
    recorder.record_spec_decode(&draft(2, 2));
    recorder.record_spec_decode(&draft(2, 1));
    assert_eq!(summary(&recorder).mean_acceptance_length(), 1.0 + 3.0 / 2.0);
}

#[test]
fn events_without_draft_tokens_are_not_drafts() {
    let recorder = recorder_with(3, &["0"]);
    recorder.record_spec_decode(&draft(0, 0));
    assert_eq!(summary(&recorder).drafts, 0);
}

#[test]
fn deeper_drafts_add_positions_instead_of_failing() {
    // vLLM asserts accepted <= k; a tree or adaptive drafter can go deeper, so the recorder grows.
    let recorder = recorder_with(0, &["0", "1"]);
    assert!(recorder
        .snapshot()
        .series(&per_position_name(Namespace::Aquila))
        .next()
        .is_none());
    recorder.record_spec_decode(&draft(2, 1));
    recorder
        .engine("1")
        .unwrap()
        .record_spec_decode(&SpecDecodeEvent {
            request_id: 2,
            num_draft_tokens: 9,
            draft_depth: 5,
            num_accepted_tokens: 4,
        });
    let snapshot = recorder.snapshot();
    let per_engine: Vec<Vec<u64>> = snapshot
        .series(&per_position_name(Namespace::Aquila))
        .map(|metric| match metric {
            Metric::Vector(vector) => vector.values.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        per_engine,
        vec![vec![1, 0, 0, 0, 0], vec![1, 1, 1, 1, 0]],
        "equal lengths, zero-padded"
    );
}

#[test]
fn engines_keep_independent_series() {
    let recorder = recorder_with(3, &["0", "1"]);
    recorder.record_spec_decode(&draft(3, 3));
    recorder
        .engine("1")
        .unwrap()
        .record_spec_decode(&draft(3, 1));
    let per_engine = SpecDecodeSummary::per_engine(&recorder.snapshot(), Namespace::Aquila);
    assert_eq!(per_engine["0"].accepted_per_position, vec![1, 1, 1]);
    assert_eq!(per_engine["1"].accepted_per_position, vec![1, 0, 0]);
    assert_eq!(
        summary(&recorder).accepted_per_position,
        vec![2, 1, 1],
        "totals sum engines"
    );
    assert!(recorder
        .engine("2")
        .unwrap_err()
        .to_string()
        .contains("unknown engine label `2`"));
}

#[test]
fn vllm_namespace_exposes_vllm_counter_names() {
    let config = RecorderConfig::builder("foo")
        .namespace(Namespace::Vllm)
        .num_speculative_tokens(2)
        .build()
        .unwrap();
    let recorder = Recorder::new(config).unwrap();
    recorder.record_spec_decode(&draft(2, 1));
    let text = recorder.exposition_text().unwrap();
    for line in [
        "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"foo\"} 1",
        "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"foo\"} 2",
        "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"foo\"} 1",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"foo\",position=\"0\"} 1",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"foo\",position=\"1\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
    }
    let snapshot = recorder.snapshot();
    assert_eq!(
        snapshot.counter_total("vllm:spec_decode_num_drafts"),
        Some(1)
    );
    assert_eq!(
        snapshot.vector_total("vllm:spec_decode_num_accepted_tokens_per_pos"),
        Some(vec![1, 0])
    );
}

#[test]
fn logger_reports_only_the_interval_and_skips_the_line_without_drafts() {
    let recorder = recorder_with(3, &["0"]);
    let mut logger = StatsLogger::for_recorder(&recorder, Duration::from_secs(1)).unwrap();
    let at = |seconds: u64| {
        let mut snapshot = recorder.snapshot();
        snapshot.captured_at = Some(Duration::from_secs(seconds));
        snapshot.window = snapshot.captured_at;
        snapshot
    };
    let idle = logger.observe(at(1)).unwrap().unwrap();
    assert!(
        idle.spec_decode.is_none(),
        "no observations, no spec-decode line"
    );
    for accepted in [3, 1, 2, 2, 1] {
        recorder.record_spec_decode(&draft(3, accepted));
    }
    let first = logger.observe(at(3)).unwrap().unwrap().spec_decode.unwrap();
    assert_eq!((first.drafts, first.accepted_tokens), (5, 9));
    assert_eq!(first.accepted_throughput(), Some(4.5), "9 tokens over 2 s");
    recorder.record_spec_decode(&draft(3, 0));
    let second = logger.observe(at(4)).unwrap().unwrap().spec_decode.unwrap();
    assert_eq!(
        (second.drafts, second.accepted_tokens),
        (1, 0),
        "earlier drafts are not counted again"
    );
    assert_eq!(second.mean_acceptance_length(), 1.0);
}

#[test]
fn engine_metrics_after_a_workload() {
    let workload = Workload {
        requests_per_engine: 10,
        k: 5,
        ..Workload::default()
    };
    let recorder = recorder_with(workload.k, &["0"]);
    let totals = workload.run(&recorder);
    let snapshot = recorder.snapshot();
    let ns = recorder.namespace();

    let running: Vec<&Metric> = snapshot
        .series(&Family::NumRequestsRunning.name(ns))
        .collect();
    assert!(
        matches!(running[..], [Metric::Gauge(ref g)] if g.value == 0.0),
        "{running:?}"
    );
    assert_eq!(
        snapshot.counter_total(&Family::GenerationTokens.name(ns)),
        Some(totals.generated)
    );
    assert_eq!(
        snapshot.counter_total(&Family::PromptTokens.name(ns)),
        Some(totals.prompt)
    );

    let generation = snapshot
        .histogram_total(&Family::RequestGenerationTokens.name(ns))
        .unwrap()
        .unwrap();
    assert_eq!(generation.cumulative_count(f64::INFINITY), Some(10));
    assert_eq!(generation.count, 10);
    assert_eq!(generation.sum, totals.generated as f64);

    assert_eq!(
        snapshot.vector_total(&per_position_name(ns)).unwrap().len(),
        5
    );
    assert_eq!(summary(&recorder).drafts, totals.events);
    assert_eq!(
        snapshot.counter_total(&Family::RequestSuccess.name(ns)),
        Some(10)
    );
}

#[test]
fn variable_draft_lengths_are_counted_exactly() {
    let recorder = recorder_with(3, &["0"]);
    // (length, accepted): lengths chosen per request and step, 0 drafts not being drafts.
    let drafts = [(3, 3), (1, 1), (2, 0), (3, 1), (1, 0), (2, 2)];
    for (length, accepted) in drafts {
        recorder.record_spec_decode(&draft(length, accepted));
    }
    recorder.record_spec_decode(&draft(0, 0));
    let summary = summary(&recorder);
    assert_eq!(summary.drafts, 6);
    assert_eq!(summary.draft_tokens, 12);
    assert_eq!(summary.accepted_tokens, 7);
    assert!((summary.mean_acceptance_length() - (1.0 + 7.0 / 6.0)).abs() < 1e-12);
    assert_eq!(summary.accepted_per_position, vec![4, 2, 1]);
    assert_eq!(summary.drafts_per_position, vec![6, 4, 2]);
    let rates = summary.per_position_acceptance_rates();
    for (rate, expected) in rates.iter().zip([4.0 / 6.0, 2.0 / 4.0, 1.0 / 2.0]) {
        assert!((rate - expected).abs() < 1e-12, "{rates:?}");
    }
    let lengths = recorder
        .snapshot()
        .histogram_total(&Family::SpecDecodeDraftLength.name(recorder.namespace()))
        .unwrap()
        .unwrap();
    assert_eq!(lengths.count, 6);
    assert_eq!(lengths.sum, 12.0);
    assert_eq!(&lengths.bucket_counts()[..4], &[2, 2, 2, 0]);
    let earlier = recorder.snapshot();
    let delta = recorder.snapshot().delta(&earlier).unwrap();
    assert_eq!(
        SpecDecodeSummary::from_snapshot(&delta, recorder.namespace()).drafts_per_position,
        vec![0, 0, 0]
    );
}
