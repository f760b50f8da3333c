//! The async engine front on the tiny model: streams match the offline engine, a dropped
//! stream aborts its request and frees its KV cache, and shutdown drains or aborts.

use std::time::Duration;

use aquila_engine::{
    AsyncLlm, AsyncLlmConfig, AsyncLlmError, FinishReason, Prompt, RequestEvent, RequestOutput,
    RequestStream, ShutdownMode,
};

use crate::common::server::{finished_with, gauge};
use crate::common::{greedy, llm, tiny_model, PROMPTS};
use aquila_metrics::Family;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Reads a stream to its end: the concatenated delta text and the final output.
async fn drain(mut stream: RequestStream) -> (String, RequestOutput) {
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event {
            RequestEvent::Delta(delta) => text.push_str(&delta.new_text),
            RequestEvent::Finished(output) => return (text, *output),
            RequestEvent::Failed(error) => panic!("engine failure: {error}"),
        }
    }
    panic!("the stream ended without an output")
}

#[test]
fn streams_match_the_offline_engine() {
    let model = tiny_model();
    let expected = llm(model.path())
        .generate(PROMPTS.to_vec(), &greedy(10))
        .unwrap();
    let engine = AsyncLlm::start(llm(model.path()), AsyncLlmConfig::default());
    let outputs = runtime().block_on(async {
        let mut streams = Vec::new();
        for prompt in PROMPTS {
            let stream = engine
                .add_request(Prompt::from(prompt), greedy(10))
                .await
                .unwrap();
            streams.push(stream);
        }
        let mut outputs = Vec::new();
        for stream in streams {
            outputs.push(drain(stream).await);
        }
        outputs
    });
    for ((text, output), expected) in outputs.iter().zip(&expected) {
        assert_eq!(output.token_ids, expected.token_ids);
        assert_eq!(text, &expected.text);
    }
    assert_eq!(engine.num_pending_requests(), 0);
}

#[test]
fn a_dropped_stream_aborts_its_request_and_frees_its_kv_cache() {
    let model = tiny_model();
    let engine = AsyncLlm::start(llm(model.path()), AsyncLlmConfig::default());
    runtime().block_on(async {
        let mut stream = engine
            .add_request(Prompt::from(PROMPTS[0]), greedy(400))
            .await
            .unwrap();
        assert!(matches!(stream.next().await, Some(RequestEvent::Delta(_))));
        drop(stream);
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while engine.num_pending_requests() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request was not aborted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let snapshot = engine.get_metrics();
    assert_eq!(finished_with(&snapshot, "abort"), 1);
    assert_eq!(gauge(&snapshot, Family::KvCacheUsage), 0.0);
}

#[test]
fn shutdown_drains_or_aborts_and_then_refuses() {
    let model = tiny_model();
    let rt = runtime();
    for mode in [ShutdownMode::Drain, ShutdownMode::Abort] {
        let engine = AsyncLlm::start(llm(model.path()), AsyncLlmConfig::default());
        let stream = rt
            .block_on(engine.add_request(Prompt::from(PROMPTS[2]), greedy(300)))
            .unwrap();
        engine.shutdown(mode);
        assert!(!engine.is_running());
        let (_, output) = rt.block_on(drain(stream));
        let expected = match mode {
            ShutdownMode::Drain => FinishReason::Length,
            ShutdownMode::Abort => FinishReason::Abort,
        };
        assert_eq!(output.finish_reason, expected);
        let refused = rt.block_on(engine.add_request(Prompt::from("hi"), greedy(2)));
        assert!(matches!(refused, Err(AsyncLlmError::ShuttingDown)));
    }
}

#[test]
fn invalid_requests_are_rejected_and_free_their_slot() {
    let model = tiny_model();
    let engine = AsyncLlm::start(
        llm(model.path()),
        AsyncLlmConfig {
            max_pending_requests: 1,
        },
    );
    let rt = runtime();
    for _ in 0..3 {
        let rejected = rt.block_on(engine.add_request(Prompt::TokenIds(vec![]), greedy(2)));
        assert!(matches!(rejected, Err(AsyncLlmError::Rejected(_))));
    }
    let stream = rt
        .block_on(engine.add_request(Prompt::from("hi"), greedy(50)))
        .unwrap();
    let full = rt.block_on(engine.add_request(Prompt::from("hi"), greedy(2)));
    assert!(matches!(full, Err(AsyncLlmError::QueueFull { limit: 1 })));
    let (_, output) = rt.block_on(drain(stream));
    assert_eq!(output.token_ids.len(), 50);
}
