//! Bad requests get a 4xx in OpenAI's error shape naming the problem, a full queue a 503, and
//! none of them takes the engine down.

use aquila_engine::AsyncLlmConfig;
use serde_json::{json, Value};

use std::io::Read;

use crate::common::http::{post, post_declaring, read_head, request, send, Response};
use crate::common::server::TestServer;
use crate::common::{config, tiny_model};

/// Asserts `status` and that the error message contains `needle`.
fn assert_error(response: &Response, status: u16, needle: &str) {
    assert_eq!(response.status, status, "{}", response.body);
    let json = response.json();
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "error {message:?} does not mention {needle:?}"
    );
    assert_eq!(json["error"]["code"], status);
}

#[test]
fn bad_requests_are_refused_with_a_message_naming_the_problem() {
    let model = tiny_model();
    let server = TestServer::start(config(model.path()), AsyncLlmConfig::default());
    let addr = server.addr();
    let completions: &[(Value, u16, &str)] = &[
        (
            json!({"prompt": "hi", "temperature": "hot"}),
            400,
            "temperature: invalid type",
        ),
        (json!({"prompt": "hi", "max_tokens": -3}), 400, "max_tokens"),
        (json!({"prompt": 5}), 400, "prompt"),
        (json!({"max_tokens": 3}), 400, "missing field `prompt`"),
        (json!({"prompt": ""}), 400, "prompt must not be empty"),
        (json!({"prompt": []}), 400, "the prompt is empty"),
        (
            json!({"prompt": "hi", "model": "gpt-9"}),
            404,
            "`gpt-9` does not exist",
        ),
        (json!({"prompt": "hi", "n": 2}), 400, "n must be 1"),
        (
            json!({"prompt": "hi", "temperature": -1}),
            400,
            "temperature must be",
        ),
        (json!({"prompt": "hi", "top_p": 1.5}), 400, "top_p must be"),
        (json!({"prompt": "hi", "top_k": -7}), 400, "top_k must be"),
        (
            json!({"prompt": "hi", "presence_penalty": 3}),
            400,
            "presence_penalty",
        ),
        (
            json!({"prompt": "hi", "repetition_penalty": 0}),
            400,
            "repetition_penalty",
        ),
        (
            json!({"prompt": "hi", "max_tokens": 0}),
            400,
            "max_tokens must be at least 1",
        ),
        (
            json!({"prompt": "hi", "logprobs": 21}),
            400,
            "logprobs must be at most 20",
        ),
        (
            json!({"prompt": "hi", "stream": true, "logprobs": 1}),
            400,
            "stream",
        ),
        (
            json!({"prompt": "hi", "stream_options": {"include_usage": true}}),
            400,
            "stream_options",
        ),
        (
            json!({"prompt": "hi", "stop": ["a", ""]}),
            400,
            "stop string 1 is empty",
        ),
        (json!({"prompt": "hi", "echo": true}), 400, "echo"),
        (
            json!({"prompt": "hi", "logit_bias": {"5": 1}}),
            400,
            "logit_bias",
        ),
        (json!({"prompt": ["a", "b"]}), 400, "exactly one prompt"),
        (
            json!({"prompt": [1, 2, 999999]}),
            400,
            "outside the vocabulary",
        ),
        (
            json!({"prompt": "hi", "max_tokens": 100000}),
            400,
            "maximum context length",
        ),
        (
            json!({"prompt": "the cat ".repeat(4000)}),
            400,
            "maximum context length",
        ),
    ];
    for (body, status, needle) in completions {
        let response = post(addr, "/v1/completions", body);
        assert_error(&response, *status, needle);
    }
    let chat: &[(Value, u16, &str)] = &[
        (json!({"messages": []}), 400, "at least one message"),
        (
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            400,
            "role",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            "only text parts",
        ),
        (json!({"messages": "hello"}), 400, "messages: invalid type"),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "tools": [{}]}),
            400,
            "tools",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
            400,
            "top_logprobs",
        ),
    ];
    for (body, status, needle) in chat {
        let response = post(addr, "/v1/chat/completions", body);
        assert_error(&response, *status, needle);
    }
    let not_json = request(addr, "POST", "/v1/completions", Some("{\"prompt\": "));
    assert_error(&not_json, 400, "not valid JSON");
    // A body declared over the 4 MiB limit is refused before it is sent.
    let too_large = post_declaring(addr, "/v1/completions", 5 << 20);
    assert_error(
        &too_large,
        413,
        "5242880 bytes, more than this server's limit",
    );

    // Fields vLLM ignores are ignored; the engine still serves.
    let ok = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "the river", "max_tokens": 4, "unknown_field": 1, "user": "me"}),
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.json()["usage"]["completion_tokens"].as_u64().unwrap() <= 4);
    assert_eq!(server.engine.num_pending_requests(), 0);
}

#[test]
fn a_full_queue_answers_503_and_frees_up() {
    let model = tiny_model();
    let front = AsyncLlmConfig {
        max_pending_requests: 1,
    };
    let server = TestServer::start(config(model.path()), front);
    let long = json!({"prompt": "the cat", "max_tokens": 200, "ignore_eos": true, "stream": true});
    // The response head arrives once the request is admitted.
    let mut first = send(
        server.addr(),
        "POST",
        "/v1/completions",
        Some(&long.to_string()),
    );
    let mut reader = std::io::BufReader::new(&mut first);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    let refused = post(
        server.addr(),
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    );
    assert_error(&refused, 503, "queue is full");
    let mut rest = String::new();
    reader.read_to_string(&mut rest).expect("the first stream");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    let after = post(
        server.addr(),
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    );
    assert_eq!(after.status, 200, "{}", after.body);
}
