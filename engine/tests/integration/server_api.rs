//! The OpenAI-compatible server on the tiny model: completions and chat, streamed and not,
//! against the offline engine; usage with speculative figures; logprobs; models, health and
//! metrics.

use aquila_engine::{
    AsyncLlmConfig, ChatMessage, DraftLength, EngineConfig, Prompt, SamplingParams,
    SpeculativeConfig,
};
use serde_json::{json, Value};

use crate::common::http::{get, post};
use crate::common::server::TestServer;
use crate::common::spec::with_speculative;
use crate::common::{config, llm_with, tiny_model, PROMPTS};

/// The tiny engine's config with n-gram drafting (its repetitive greedy text gets drafts
/// accepted), of a fixed length, so that each request's drafts depend on its own tokens
/// only (the adaptive length follows measured step costs) and the server's per-request figures
/// can be compared with the offline engine's.
fn ngram_config(model: &std::path::Path) -> EngineConfig {
    let speculative = SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::ngram(3)
    };
    with_speculative(config(model), speculative)
}

/// The text of every chunk, concatenated (completions: `text`; chat: `delta.content`).
fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .flat_map(|chunk| chunk["choices"].as_array().cloned().unwrap_or_default())
        .filter_map(|choice| {
            choice["text"]
                .as_str()
                .or(choice["delta"]["content"].as_str())
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn completions_match_the_offline_engine_streamed_and_not() {
    let model = tiny_model();
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let mut offline = llm_with(model.path(), |c| *c = ngram_config(model.path()));
    let expected = offline.generate(PROMPTS.to_vec(), &params).unwrap();
    let server = TestServer::start(ngram_config(model.path()), AsyncLlmConfig::default());

    for (prompt, expected) in PROMPTS.iter().zip(&expected) {
        let body = json!({"model": server.model(), "prompt": prompt, "max_tokens": 12,
                          "temperature": 0, "ignore_eos": true});
        let response = post(server.addr(), "/v1/completions", &body);
        assert_eq!(response.status, 200, "{}", response.body);
        let json = response.json();
        assert_eq!(json["object"], "text_completion");
        assert_eq!(json["choices"][0]["text"], expected.text.as_str());
        assert_eq!(json["choices"][0]["finish_reason"], "length");
        let usage = &json["usage"];
        assert_eq!(usage["prompt_tokens"], expected.prompt_token_ids.len());
        assert_eq!(usage["completion_tokens"], 12);
        assert_eq!(usage["total_tokens"], expected.prompt_token_ids.len() + 12);
        let spec = &usage["spec_decode"];
        assert_eq!(spec["num_drafts"], expected.metrics.num_drafts);
        assert_eq!(
            spec["num_accepted_tokens"],
            expected.metrics.num_accepted_tokens
        );
        assert_eq!(spec["num_draft_tokens"], expected.metrics.num_draft_tokens);

        let streamed = post(
            server.addr(),
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": true,
                    "stream": true, "stream_options": {"include_usage": true}}),
        );
        assert_eq!(streamed.status, 200);
        assert!(streamed.headers.contains("content-type: text/event-stream"));
        let chunks = streamed.sse_json();
        assert_eq!(streamed_text(&chunks), expected.text);
        let finish = &chunks[chunks.len() - 2]["choices"][0];
        assert_eq!(finish["finish_reason"], "length");
        assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 12);
    }
    let drafts: u64 = expected.iter().map(|o| o.metrics.num_drafts as u64).sum();
    assert!(
        drafts > 0,
        "n-gram drafting made no drafts on the tiny model"
    );
}

#[test]
fn chat_matches_the_offline_engine_streamed_and_not() {
    let model = tiny_model();
    let mut offline = llm_with(model.path(), |_| {});
    let messages = vec![
        ChatMessage::system("the assistant answers"),
        ChatMessage::user("the cat sat on the mat"),
    ];
    let expected = offline
        .generate(Prompt::Chat(messages), &SamplingParams::greedy(10))
        .unwrap()
        .remove(0);
    let server = TestServer::start(config(model.path()), AsyncLlmConfig::default());
    let body = json!({
        "messages": [
            {"role": "system", "content": "the assistant answers"},
            {"role": "user", "content": [{"type": "text", "text": "the cat sat on the mat"}]},
        ],
        "max_completion_tokens": 10, "temperature": 0.0,
    });
    let response = post(server.addr(), "/v1/chat/completions", &body);
    assert_eq!(response.status, 200, "{}", response.body);
    let json = response.json();
    assert_eq!(json["object"], "chat.completion");
    assert_eq!(json["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        json["choices"][0]["message"]["content"],
        expected.text.as_str()
    );
    assert_eq!(
        json["choices"][0]["finish_reason"],
        expected.finish_reason.as_str()
    );
    assert_eq!(json["usage"]["completion_tokens"], expected.token_ids.len());
    assert_eq!(json["usage"]["spec_decode"]["mean_acceptance_length"], 1.0);

    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let streamed = post(server.addr(), "/v1/chat/completions", &streamed_body);
    let chunks = streamed.sse_json();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|chunk| chunk["object"] == "chat.completion.chunk"));
    assert_eq!(streamed_text(&chunks), expected.text);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        expected.finish_reason.as_str()
    );
}

#[test]
fn stop_strings_logprobs_and_seeds_map_to_the_engine() {
    let model = tiny_model();
    let server = TestServer::start(config(model.path()), AsyncLlmConfig::default());
    let complete = |extra: Value| {
        let mut body = json!({"prompt": PROMPTS[0], "max_tokens": 8, "ignore_eos": true});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = post(server.addr(), "/v1/completions", &body);
        assert_eq!(response.status, 200, "{}", response.body);
        response.json()["choices"][0].clone()
    };

    let greedy = complete(json!({"temperature": 0, "logprobs": 2}));
    let logprobs = &greedy["logprobs"];
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), 8);
    assert_eq!(logprobs["top_logprobs"][0].as_object().unwrap().len(), 2);
    assert!(logprobs["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    assert_eq!(
        logprobs["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect::<String>(),
        greedy["text"].as_str().unwrap()
    );

    // A stop string cut from the greedy text ends the request before it.
    let text = greedy["text"].as_str().unwrap();
    let stop: String = text.chars().skip(2).take(2).collect();
    let stopped = complete(json!({"temperature": 0, "stop": [stop]}));
    assert_eq!(stopped["finish_reason"], "stop", "{text:?} {stop:?}");
    assert_eq!(stopped["stop_reason"], stop.as_str());
    assert_eq!(stopped["text"], &text[..text.find(&stop).unwrap()]);

    let seeded = json!({"temperature": 1.0, "top_p": 0.9, "top_k": 20, "seed": 3});
    assert_eq!(complete(seeded.clone())["text"], complete(seeded)["text"]);
}

#[test]
fn models_health_and_metrics() {
    let model = tiny_model();
    let server = TestServer::start(config(model.path()), AsyncLlmConfig::default());
    let models = get(server.addr(), "/v1/models").json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], server.model());
    assert_eq!(
        models["data"][0]["max_model_len"],
        server.engine.max_model_len()
    );
    assert_eq!(get(server.addr(), "/health").status, 200);
    let metrics = get(server.addr(), "/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.headers.contains("content-type: text/plain"));
    assert!(metrics
        .body
        .contains("aquila_spec_decode_num_drafts_total{"));
}
