//! `POST /v1/completions`.

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
use super::logprobs::completion_logprobs;
use super::protocol::common::Usage;
use super::protocol::completions::{
    CompletionChoice, CompletionRequest, CompletionResponse, PromptInput,
};
use super::request_log::RequestLog;
use super::sampling::sampling_params;
use super::AppState;
use crate::output::RequestOutput;

/// OpenAI's default `max_tokens` of completions.
const DEFAULT_MAX_TOKENS: usize = 16;

/// The handler: one JSON response, or server-sent events with `stream: true`.
pub async fn create_completion(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut log = RequestLog::new("/v1/completions");
    let result = run(&state, body, &mut log).await;
    log.respond(result)
}

async fn run(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    log: &mut RequestLog,
) -> Result<Response, ApiError> {
    let request: CompletionRequest = parse_body(body)?;
    check_model(state, request.common.model.as_deref())?;
    check_supported(&request)?;
    let stream = request.common.stream.unwrap_or(false);
    log.set_stream(stream);
    let prompt_token_ids = prompt_token_ids(state, request.prompt)?;
    let max_tokens = resolve_max_tokens(
        request.max_tokens,
        Some(DEFAULT_MAX_TOKENS),
        prompt_token_ids.len(),
        state.engine.max_model_len(),
    )?;
    let params = sampling_params(&request.common, max_tokens, request.logprobs)?;
    let whole = |format: CompletionChunks, output: RequestOutput| {
        let mut response = format.response(&output, finish_reason(&output), &output.text);
        response.choices[0].logprobs = completion_logprobs(&output, state.engine.tokenizer());
        response.usage = Some(Usage::from_metrics(&output.metrics));
        Json(response).into_response()
    };
    answer(state, &request.common, prompt_token_ids, params, log, whole).await
}

/// Refuses the completion fields Aquila cannot honour.
fn check_supported(request: &CompletionRequest) -> Result<(), ApiError> {
    if request.echo == Some(true) {
        return Err(ApiError::invalid_field("echo", "echo is not supported"));
    }
    if request.suffix.is_some() {
        return Err(ApiError::invalid_field("suffix", "suffix is not supported"));
    }
    if let Some(best_of) = request.best_of.filter(|&n| n != 1) {
        return Err(ApiError::invalid_field(
            "best_of",
            format!("best_of must be 1, got {best_of}"),
        ));
    }
    Ok(())
}

/// The prompt's token ids: text is tokenized as the engine does (special tokens added as the
/// tokenizer configures); a list must hold exactly one prompt.
fn prompt_token_ids(state: &AppState, prompt: PromptInput) -> Result<Vec<u32>, ApiError> {
    let text = match prompt {
        PromptInput::TokenIds(ids) => return Ok(ids),
        PromptInput::Text(text) => text,
        PromptInput::Texts(texts) => single(texts)?,
        PromptInput::TokenIdLists(lists) => return single(lists),
    };
    if text.is_empty() {
        return Err(ApiError::invalid_field(
            "prompt",
            "prompt must not be empty",
        ));
    }
    state
        .engine
        .tokenizer()
        .encode(&text, true)
        .map_err(|error| ApiError::invalid_field("prompt", format!("prompt: {error}")))
}

/// The one element of a batched `prompt`.
fn single<T>(mut prompts: Vec<T>) -> Result<T, ApiError> {
    match prompts.len() {
        1 => Ok(prompts.remove(0)),
        n => Err(ApiError::invalid_field(
            "prompt",
            format!("prompt must hold exactly one prompt, got a list of {n}; send one request per prompt"),
        )),
    }
}

/// The response and chunk builder of one completion.
struct CompletionChunks {
    id: String,
    created: u64,
    model: String,
}

impl CompletionChunks {
    fn response(&self, output: &RequestOutput, finish: String, text: &str) -> CompletionResponse {
        CompletionResponse {
            choices: vec![CompletionChoice {
                index: 0,
                text: text.to_string(),
                logprobs: None,
                finish_reason: Some(finish),
                stop_reason: stop_reason(output),
            }],
            ..self.chunk(Vec::new())
        }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>) -> CompletionResponse {
        CompletionResponse {
            id: self.id.clone(),
            object: "text_completion".into(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: None,
        }
    }
}

impl ChunkFormat for CompletionChunks {
    const ID_PREFIX: &'static str = "cmpl-";

    fn new(id: String, created: u64, model: String) -> Self {
        Self { id, created, model }
    }

    fn opening(&self) -> Vec<Value> {
        Vec::new()
    }

    fn text(&self, text: &str) -> Value {
        let choice = CompletionChoice {
            index: 0,
            text: text.to_string(),
            logprobs: None,
            finish_reason: None,
            stop_reason: None,
        };
        to_value(&self.chunk(vec![choice]))
    }

    fn finish(&self, output: &RequestOutput) -> Value {
        to_value(&self.response(output, finish_reason(output), ""))
    }

    fn usage(&self, usage: Usage) -> Value {
        to_value(&CompletionResponse {
            usage: Some(usage),
            ..self.chunk(Vec::new())
        })
    }
}

fn to_value(response: &CompletionResponse) -> Value {
    serde_json::to_value(response).unwrap_or_default()
}
