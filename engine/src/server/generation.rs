//! What both generation endpoints do around their own formats: check the model and the
//! context length, admit the request, and answer with the whole output or a stream of
//! server-sent events.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;

use super::error::ApiError;
use super::protocol::common::{CommonFields, Usage};
use super::request_log::RequestLog;
use super::AppState;
use crate::async_llm::{RequestEvent, RequestStream};
use crate::output::{RequestOutput, StopReason};
use crate::prompt::Prompt;
use crate::sampling_params::SamplingParams;

/// Fails with a 404 unless `requested` is absent or the served model's name.
pub fn check_model(state: &AppState, requested: Option<&str>) -> Result<(), ApiError> {
    match requested {
        Some(model) if model != &*state.model_name => Err(ApiError::unknown_model(model)),
        _ => Ok(()),
    }
}

/// The token limit of a request with `prompt_len` prompt tokens: `requested`, else `default`,
/// else what the context leaves; a prompt or limit beyond the context is a 400 (vLLM's
/// message).
pub fn resolve_max_tokens(
    requested: Option<usize>,
    default: Option<usize>,
    prompt_len: usize,
    max_model_len: usize,
) -> Result<usize, ApiError> {
    if prompt_len >= max_model_len {
        return Err(ApiError::invalid_field(
            "prompt",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, your \
                 request has {prompt_len} input tokens. Please reduce the length of the input."
            ),
        ));
    }
    let room = max_model_len - prompt_len;
    match requested {
        Some(max_tokens) if max_tokens > room => Err(ApiError::invalid_field(
            "max_tokens",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you \
                 requested {} tokens ({prompt_len} in the input, {max_tokens} in the \
                 completion). Please reduce the length of the input or completion.",
                prompt_len + max_tokens
            ),
        )),
        Some(max_tokens) => Ok(max_tokens),
        None => Ok(default.map_or(room, |default| default.min(room))),
    }
}

/// Admits a request for `prompt_token_ids` with `params` and answers it: server-sent events
/// in `F`'s chunks when `common` asks for a stream, else the final output as `whole` makes
/// the response from it (with the format, which names the response).
pub async fn answer<F: ChunkFormat>(
    state: &AppState,
    common: &CommonFields,
    prompt_token_ids: Vec<u32>,
    params: SamplingParams,
    log: &mut RequestLog,
    whole: impl FnOnce(F, RequestOutput) -> Response,
) -> Result<Response, ApiError> {
    let mut engine_stream = submit(state, prompt_token_ids, params, log).await?;
    let format = F::new(
        format!("{}{}", F::ID_PREFIX, engine_stream.request_id()),
        super::unix_time(),
        state.model_name.to_string(),
    );
    if common.stream.unwrap_or(false) {
        let include_usage = common
            .stream_options
            .as_ref()
            .is_some_and(|options| options.include_usage);
        return Ok(stream_response(
            engine_stream,
            format,
            include_usage,
            log.hand_over(),
        ));
    }
    let output = collect(&mut engine_stream).await?;
    log.finished(&output);
    Ok(whole(format, output))
}

/// Admits a request for `prompt_token_ids` with `params`.
async fn submit(
    state: &AppState,
    prompt_token_ids: Vec<u32>,
    params: SamplingParams,
    log: &mut RequestLog,
) -> Result<RequestStream, ApiError> {
    let stream = state
        .engine
        .add_request(Prompt::TokenIds(prompt_token_ids), params)
        .await?;
    log.set_request_id(stream.request_id());
    Ok(stream)
}

/// Waits for the request's final output.
async fn collect(stream: &mut RequestStream) -> Result<RequestOutput, ApiError> {
    while let Some(event) = stream.next().await {
        match event {
            RequestEvent::Delta(_) => {}
            RequestEvent::Finished(output) => return Ok(*output),
            RequestEvent::Failed(error) => return Err(ApiError::internal(error)),
        }
    }
    Err(ApiError::unavailable("the engine stopped"))
}

/// `stop`, `length` or `abort`, as OpenAI's `finish_reason`.
pub fn finish_reason(output: &RequestOutput) -> String {
    output.finish_reason.as_str().to_string()
}

/// vLLM's `stop_reason`: the matched stop string or stop token id; `null` for EOS and length.
pub fn stop_reason(output: &RequestOutput) -> Option<Value> {
    match &output.stop_reason {
        Some(StopReason::String(stop)) => Some(Value::from(stop.as_str())),
        Some(StopReason::TokenId(id)) => Some(Value::from(*id)),
        _ => None,
    }
}

/// The stream chunks of one endpoint, as JSON.
pub trait ChunkFormat: Send + 'static {
    /// What the response id starts with, before the engine's request id (`chatcmpl-`).
    const ID_PREFIX: &'static str;
    /// The format of the response `id`, created at `created` (Unix seconds) by `model`.
    fn new(id: String, created: u64, model: String) -> Self;
    /// Chunks before any text (chat: the assistant role).
    fn opening(&self) -> Vec<Value>;
    /// A chunk of new text.
    fn text(&self, text: &str) -> Value;
    /// The last chunk of the choice, with its finish reason.
    fn finish(&self, output: &RequestOutput) -> Value;
    /// The usage chunk (`stream_options.include_usage`).
    fn usage(&self, usage: Usage) -> Value;
}

/// A streamed response in progress.
struct EventSource<F> {
    stream: RequestStream,
    format: F,
    include_usage: bool,
    log: RequestLog,
    opened: bool,
    done: bool,
}

/// Answers with server-sent events: the format's chunks as the engine produces text, then
/// `data: [DONE]`. A client that goes away drops the stream, which aborts the request.
fn stream_response<F: ChunkFormat>(
    stream: RequestStream,
    format: F,
    include_usage: bool,
    log: RequestLog,
) -> Response {
    let source = EventSource {
        stream,
        format,
        include_usage,
        log,
        opened: false,
        done: false,
    };
    let events = futures_util::stream::unfold(source, |mut source| async move {
        if source.done {
            return None;
        }
        let events = source.next_events().await;
        Some((events, source))
    })
    .flat_map(futures_util::stream::iter)
    .map(Ok::<Event, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

impl<F: ChunkFormat> EventSource<F> {
    /// The events of the next engine event that has something to say.
    async fn next_events(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        if !self.opened {
            self.opened = true;
            events.extend(self.format.opening().iter().map(json_event));
        }
        loop {
            match self.stream.next().await {
                Some(RequestEvent::Delta(delta)) if delta.new_text.is_empty() => continue,
                Some(RequestEvent::Delta(delta)) => {
                    events.push(json_event(&self.format.text(&delta.new_text)));
                }
                Some(RequestEvent::Finished(output)) => {
                    events.push(json_event(&self.format.finish(&output)));
                    if self.include_usage {
                        let usage = Usage::from_metrics(&output.metrics);
                        events.push(json_event(&self.format.usage(usage)));
                    }
                    self.end(&mut events);
                    self.log.finished(&output);
                }
                Some(RequestEvent::Failed(error)) => {
                    self.fail(ApiError::internal(error), &mut events)
                }
                None => self.fail(ApiError::unavailable("the engine stopped"), &mut events),
            }
            return events;
        }
    }

    fn fail(&mut self, error: ApiError, events: &mut Vec<Event>) {
        events.push(json_event(&error.body()));
        self.end(events);
        self.log.failed(&error);
    }

    fn end(&mut self, events: &mut Vec<Event>) {
        events.push(Event::default().data("[DONE]"));
        self.done = true;
    }
}

fn json_event(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_defaults_to_the_room_left() {
        assert_eq!(resolve_max_tokens(None, None, 10, 100).unwrap(), 90);
        assert_eq!(resolve_max_tokens(None, Some(16), 10, 100).unwrap(), 16);
        assert_eq!(resolve_max_tokens(None, Some(16), 90, 100).unwrap(), 10);
        assert_eq!(resolve_max_tokens(Some(90), None, 10, 100).unwrap(), 90);
    }

    #[test]
    fn the_context_bounds_prompt_and_limit() {
        let error = resolve_max_tokens(None, None, 100, 100).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("prompt"));
        assert!(error.message.contains("maximum context length is 100"));
        let error = resolve_max_tokens(Some(91), None, 10, 100).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("max_tokens"));
        assert!(error.message.contains("you requested 101 tokens"));
    }
}
