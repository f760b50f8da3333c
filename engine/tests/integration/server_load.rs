//! 32 concurrent streaming clients on loopback, a quarter of which go away mid-stream: every
//! request completes or is aborted, aborted requests free their KV cache, and the server
//! keeps serving.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use aquila_engine::AsyncLlmConfig;
use serde_json::json;

use crate::common::http::{post, read_head, read_response, send};
use crate::common::server::{finished_with, TestServer};
use crate::common::{config, tiny_model, PROMPTS};

const CLIENTS: usize = 32;
/// Every fourth client disconnects after its first chunk.
const DISCONNECT_EVERY: usize = 4;

/// What happened to one client.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The stream ended with a finish reason and `[DONE]`.
    Completed,
    /// A clean error response (e.g. 503).
    Refused(u16),
    /// The client went away after its first chunk.
    Disconnected,
}

fn run_client(addr: std::net::SocketAddr, index: usize) -> Outcome {
    let disconnects = index.is_multiple_of(DISCONNECT_EVERY);
    // Clients that go away ask for long outputs, so that they leave well before the end.
    let max_tokens = if disconnects { 400 } else { 24 };
    let body = json!({
        "prompt": PROMPTS[index % PROMPTS.len()], "max_tokens": max_tokens, "ignore_eos": true,
        "stream": true, "temperature": 0.8, "seed": index,
    })
    .to_string();
    let stream = send(addr, "POST", "/v1/completions", Some(&body));
    if !disconnects {
        let response = read_response(stream);
        if response.status != 200 {
            return Outcome::Refused(response.status);
        }
        let chunks = response.sse_json();
        let finish = &chunks.last().unwrap()["choices"][0]["finish_reason"];
        assert_eq!(finish, "length", "client {index}: {}", response.body);
        return Outcome::Completed;
    }
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    if status != 200 {
        return Outcome::Refused(status);
    }
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        reader.read_line(&mut line).expect("a first chunk");
    }
    Outcome::Disconnected
}

#[test]
fn concurrent_streams_complete_or_abort_and_free_their_kv_cache() {
    let model = tiny_model();
    let server = TestServer::start(config(model.path()), AsyncLlmConfig::default());
    let addr = server.addr();
    let before = server.engine.get_metrics();

    let clients: Vec<_> = (0..CLIENTS)
        .map(|index| std::thread::spawn(move || run_client(addr, index)))
        .collect();
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .map(|client| client.join().expect("client thread"))
        .collect();

    let disconnected = outcomes
        .iter()
        .filter(|o| **o == Outcome::Disconnected)
        .count();
    let completed = outcomes
        .iter()
        .filter(|o| **o == Outcome::Completed)
        .count();
    assert_eq!(disconnected, CLIENTS / DISCONNECT_EVERY, "{outcomes:?}");
    assert_eq!(completed, CLIENTS - disconnected, "{outcomes:?}");

    let after = server.wait_until_idle(Duration::from_secs(60));
    let delta = after.delta(&before).unwrap();
    assert_eq!(finished_with(&delta, "abort"), disconnected as u64);
    assert_eq!(finished_with(&delta, "length"), completed as u64);

    let still_serving = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "the river", "max_tokens": 4}),
    );
    assert_eq!(still_serving.status, 200, "{}", still_serving.body);
}
