//! `POST /v1/chat/completions`: the conversation through the model's chat template.

use aquila_model_loader::tokenizer::ChatMessage;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::error::ApiError;
use super::generation::{
    answer, check_model, finish_reason, resolve_max_tokens, stop_reason, ChunkFormat,
};
use super::json_body::parse_body;
use super::logprobs::chat_logprobs;
use super::protocol::chat::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatMessageInput, ChatMessageOutput, MessageContent,
};
use super::protocol::common::Usage;
use super::request_log::RequestLog;
use super::sampling::sampling_params;
use super::AppState;
use crate::output::RequestOutput;

/// The handler: one JSON response, or server-sent events with `stream: true`.
pub async fn create_chat_completion(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut log = RequestLog::new("/v1/chat/completions");
    let result = run(&state, body, &mut log).await;
    log.respond(result)
}

async fn run(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    log: &mut RequestLog,
) -> Result<Response, ApiError> {
    let request: ChatCompletionRequest = parse_body(body)?;
    check_model(state, request.common.model.as_deref())?;
    check_supported(&request)?;
    let stream = request.common.stream.unwrap_or(false);
    log.set_stream(stream);
    let messages = messages(request.messages)?;
    let prompt_token_ids = state
        .engine
        .tokenizer()
        .encode_chat(&messages, true)
        .map_err(|error| ApiError::invalid_field("messages", format!("messages: {error}")))?;
    let max_tokens = resolve_max_tokens(
        request.max_completion_tokens.or(request.max_tokens),
        None,
        prompt_token_ids.len(),
        state.engine.max_model_len(),
    )?;
    let logprobs = match (request.logprobs, request.top_logprobs) {
        (Some(true), top) => Some(top.unwrap_or(0)),
        (_, Some(_)) => {
            return Err(ApiError::invalid_field(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ))
        }
        _ => None,
    };
    let params = sampling_params(&request.common, max_tokens, logprobs)?;
    let whole = |format: ChatChunks, output: RequestOutput| {
        let response = ChatCompletionResponse {
            id: format.id,
            object: "chat.completion".into(),
            created: format.created,
            model: format.model,
            choices: vec![ChatChoice {
                index: 0,
                message: ChatMessageOutput {
                    role: "assistant".into(),
                    content: output.text.clone(),
                },
                logprobs: chat_logprobs(&output, state.engine.tokenizer()),
                finish_reason: finish_reason(&output),
                stop_reason: stop_reason(&output),
            }],
            usage: Usage::from_metrics(&output.metrics),
        };
        Json(response).into_response()
    };
    answer(state, &request.common, prompt_token_ids, params, log, whole).await
}

/// Refuses the chat fields Aquila cannot honour.
fn check_supported(request: &ChatCompletionRequest) -> Result<(), ApiError> {
    if request.tools.as_ref().is_some_and(|tools| !tools.is_null()) {
        return Err(ApiError::invalid_field("tools", "tools are not supported"));
    }
    if request.functions.as_ref().is_some_and(|f| !f.is_null()) {
        return Err(ApiError::invalid_field(
            "functions",
            "functions are not supported",
        ));
    }
    let text_format = |format: &Value| format.is_null() || format["type"] == "text";
    if request
        .response_format
        .as_ref()
        .is_some_and(|f| !text_format(f))
    {
        return Err(ApiError::invalid_field(
            "response_format",
            "only response_format {\"type\": \"text\"} is supported",
        ));
    }
    Ok(())
}

/// The conversation as the chat template takes it: text content only.
fn messages(inputs: Vec<ChatMessageInput>) -> Result<Vec<ChatMessage>, ApiError> {
    if inputs.is_empty() {
        return Err(ApiError::invalid_field(
            "messages",
            "messages must hold at least one message",
        ));
    }
    inputs
        .into_iter()
        .enumerate()
        .map(|(index, input)| {
            if !matches!(input.role.as_str(), "system" | "user" | "assistant") {
                return Err(ApiError::invalid_field(
                    "messages",
                    format!(
                        "messages[{index}].role must be system, user or assistant, got {:?}",
                        input.role
                    ),
                ));
            }
            let content = match input.content {
                None => String::new(),
                Some(MessageContent::Text(text)) => text,
                Some(MessageContent::Parts(parts)) => {
                    let mut text = String::new();
                    for part in parts {
                        match (part.kind.as_str(), part.text) {
                            ("text", Some(part_text)) => text.push_str(&part_text),
                            (kind, _) => {
                                return Err(ApiError::invalid_field(
                                    "messages",
                                    format!(
                                        "messages[{index}].content: only text parts are \
                                         supported, got a {kind:?} part"
                                    ),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            Ok(ChatMessage::new(input.role, content))
        })
        .collect()
}

/// The chunk builder of one streamed chat completion.
struct ChatChunks {
    id: String,
    created: u64,
    model: String,
}

impl ChatChunks {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> Value {
        let chunk = ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        };
        serde_json::to_value(chunk).unwrap_or_default()
    }

    fn choice(delta: ChatDelta) -> ChatChunkChoice {
        ChatChunkChoice {
            index: 0,
            delta,
            finish_reason: None,
            stop_reason: None,
        }
    }
}

impl ChunkFormat for ChatChunks {
    const ID_PREFIX: &'static str = "chatcmpl-";

    fn new(id: String, created: u64, model: String) -> Self {
        Self { id, created, model }
    }

    fn opening(&self) -> Vec<Value> {
        let delta = ChatDelta {
            role: Some("assistant".into()),
            content: Some(String::new()),
        };
        vec![self.chunk(vec![Self::choice(delta)], None)]
    }

    fn text(&self, text: &str) -> Value {
        let delta = ChatDelta {
            role: None,
            content: Some(text.to_string()),
        };
        self.chunk(vec![Self::choice(delta)], None)
    }

    fn finish(&self, output: &RequestOutput) -> Value {
        let choice = ChatChunkChoice {
            finish_reason: Some(finish_reason(output)),
            stop_reason: stop_reason(output),
            ..Self::choice(ChatDelta::default())
        };
        self.chunk(vec![choice], None)
    }

    fn usage(&self, usage: Usage) -> Value {
        self.chunk(Vec::new(), Some(usage))
    }
}
