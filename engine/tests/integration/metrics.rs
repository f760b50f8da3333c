//! The engine feeds every engine family of aquila-metrics from what it actually did.

use crate::common;

use aquila_engine::{FinishReason, Llm, MetricsConfig, SamplingParams};
use aquila_metrics::{Family, Metric, Namespace, Snapshot};
use common::{greedy, llm, llm_with, tiny_model, PROMPTS};

fn counter(snapshot: &Snapshot, family: Family) -> u64 {
    snapshot
        .counter_total(&family.name(Namespace::Aquila))
        .unwrap()
}

fn histogram(snapshot: &Snapshot, family: Family) -> aquila_metrics::Histogram {
    snapshot
        .histogram_total(&family.name(Namespace::Aquila))
        .unwrap()
        .unwrap_or_else(|| panic!("{family:?} is recorded"))
}

fn gauge(snapshot: &Snapshot, family: Family) -> f64 {
    snapshot
        .gauge_total(&family.name(Namespace::Aquila))
        .unwrap()
}

/// The success counter of one finish reason.
fn successes(snapshot: &Snapshot, reason: &str) -> u64 {
    snapshot
        .series(&Family::RequestSuccess.name(Namespace::Aquila))
        .filter_map(|metric| match metric {
            Metric::Counter(c)
                if c.labels.get("finished_reason").map(String::as_str) == Some(reason) =>
            {
                Some(c.value)
            }
            _ => None,
        })
        .sum()
}

#[test]
fn a_batch_run_is_counted_exactly() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let before = llm.get_metrics();
    let outputs = llm.generate(PROMPTS, &greedy(9)).unwrap();
    // One more request that finishes by abort.
    let aborted = llm.add_request(PROMPTS[0], greedy(9)).unwrap();
    llm.step().unwrap();
    llm.abort(aborted).unwrap();

    let delta = llm.get_metrics().delta(&before).unwrap();
    let prompt_tokens: usize = outputs.iter().map(|o| o.prompt_token_ids.len()).sum();
    let generated: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    let aborted_prompt = llm.tokenizer().encode(PROMPTS[0], true).unwrap().len();
    assert_eq!(
        counter(&delta, Family::PromptTokens) as usize,
        prompt_tokens + aborted_prompt
    );
    assert_eq!(
        counter(&delta, Family::GenerationTokens) as usize,
        generated + 1
    );

    let n = outputs.len() as u64;
    assert_eq!(histogram(&delta, Family::TimeToFirstToken).count, n + 1);
    assert_eq!(
        histogram(&delta, Family::InterTokenLatency).count as usize,
        generated - outputs.len(),
        "one inter-token latency per later token (one token per step)"
    );
    assert_eq!(histogram(&delta, Family::E2eRequestLatency).count, n + 1);
    assert_eq!(histogram(&delta, Family::RequestQueueTime).count, n + 1);
    assert_eq!(histogram(&delta, Family::RequestPrefillTime).count, n + 1);
    assert_eq!(histogram(&delta, Family::RequestDecodeTime).count, n + 1);
    assert_eq!(histogram(&delta, Family::RequestInferenceTime).count, n + 1);
    assert_eq!(
        histogram(&delta, Family::RequestTimePerOutputToken).count,
        n,
        "the aborted request had a single token"
    );
    let request_prompt = histogram(&delta, Family::RequestPromptTokens);
    assert_eq!(request_prompt.sum as usize, prompt_tokens + aborted_prompt);
    let request_generation = histogram(&delta, Family::RequestGenerationTokens);
    assert_eq!(request_generation.sum as usize, generated + 1);
    let iteration = histogram(&delta, Family::IterationTokens);
    assert_eq!(
        iteration.sum as usize,
        prompt_tokens + aborted_prompt + generated + 1
    );
    let forward = histogram(&delta, Family::ModelForwardTime);
    assert_eq!(forward.count, iteration.count, "one forward pass per step");
    assert!(forward.sum > 0.0, "forward passes take time");
    assert_eq!(
        histogram(&delta, Family::SpecDecodeDraftTime).count,
        0,
        "an engine without a drafter never drafts"
    );

    assert_eq!(successes(&delta, "length"), n);
    assert_eq!(successes(&delta, "stop"), 0);
    assert_eq!(successes(&delta, "abort"), 1);

    let now = llm.get_metrics();
    assert_eq!(gauge(&now, Family::NumRequestsRunning), 0.0);
    assert_eq!(gauge(&now, Family::NumRequestsWaiting), 0.0);
    assert_eq!(gauge(&now, Family::KvCacheUsage), 0.0);
    assert_eq!(counter(&now, Family::NumPreemptions), 0);
}

#[test]
fn stops_are_counted_under_their_reason() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let first = llm
        .generate(PROMPTS[0], &greedy(3))
        .unwrap()
        .remove(0)
        .token_ids[0];
    let params = SamplingParams {
        stop_token_ids: vec![first],
        ..greedy(3)
    };
    let output = llm.generate(PROMPTS[0], &params).unwrap().remove(0);
    assert_eq!(output.finish_reason, FinishReason::Stop);
    let snapshot = llm.get_metrics();
    assert_eq!(successes(&snapshot, "stop"), 1);
    assert_eq!(successes(&snapshot, "length"), 1);
}

#[test]
fn gauges_follow_the_queue_while_requests_run() {
    let model = tiny_model();
    let mut llm = llm_with(model.path(), |c| c.max_num_seqs = 2);
    for prompt in PROMPTS {
        llm.add_request(prompt, greedy(4)).unwrap();
    }
    let queued = llm.get_metrics();
    assert_eq!(gauge(&queued, Family::NumRequestsWaiting), 5.0);
    llm.step().unwrap();
    let running = llm.get_metrics();
    assert_eq!(gauge(&running, Family::NumRequestsRunning), 2.0);
    assert_eq!(gauge(&running, Family::NumRequestsWaiting), 3.0);
    assert!(gauge(&running, Family::KvCacheUsage) > 0.0);
    while llm.has_unfinished_requests() {
        llm.step().unwrap();
    }
}

#[test]
fn each_engine_has_its_own_metrics_with_its_labels_and_namespace() {
    let model = tiny_model();
    let mut first = llm(model.path());
    let mut config = common::config(model.path());
    config.metrics = MetricsConfig {
        namespace: Namespace::Vllm,
        model_name: Some("tiny".into()),
        engine_label: "7".into(),
    };
    let mut second = Llm::new(config).unwrap();
    first.generate(PROMPTS[0], &greedy(4)).unwrap();
    second.generate(PROMPTS, &greedy(2)).unwrap();

    let first_metrics = first.get_metrics();
    assert_eq!(counter(&first_metrics, Family::GenerationTokens), 4);
    let second_metrics = second.get_metrics();
    let vllm_name = Family::GenerationTokens.name(Namespace::Vllm);
    assert!(vllm_name.starts_with("vllm:"));
    assert_eq!(second_metrics.counter_total(&vllm_name), Some(10));
    let series = second_metrics.series(&vllm_name).next().unwrap();
    assert_eq!(
        series.labels().get("model_name").map(String::as_str),
        Some("tiny")
    );
    assert_eq!(series.labels().get("engine").map(String::as_str), Some("7"));
    assert!(second
        .recorder()
        .exposition_text()
        .unwrap()
        .contains("vllm:generation_tokens"));
}
