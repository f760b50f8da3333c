//! [`RequestLog`]: the one `tracing` line the server writes per request, whether it finished,
//! was refused, failed, or lost its client.

use std::time::Instant;

use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::output::{RequestId, RequestOutput};

/// Collects what the line of one request says and writes it once.
#[derive(Debug)]
pub struct RequestLog {
    endpoint: &'static str,
    started: Instant,
    stream: bool,
    request_id: Option<RequestId>,
    written: bool,
}

impl RequestLog {
    /// The log of a request to `endpoint`, timed from now.
    pub fn new(endpoint: &'static str) -> Self {
        Self {
            endpoint,
            started: Instant::now(),
            stream: false,
            request_id: None,
            written: false,
        }
    }

    /// Notes whether the response is streamed.
    pub fn set_stream(&mut self, stream: bool) {
        self.stream = stream;
    }

    /// Notes the engine's id of the admitted request.
    pub fn set_request_id(&mut self, id: RequestId) {
        self.request_id = Some(id);
    }

    /// Moves the duty to write the line to a new log (the one a streamed response keeps).
    pub fn hand_over(&mut self) -> Self {
        self.written = true;
        Self {
            written: false,
            ..*self
        }
    }

    /// Writes the line of a finished request.
    pub fn finished(&mut self, output: &RequestOutput) {
        self.written = true;
        let metrics = &output.metrics;
        tracing::info!(
            endpoint = self.endpoint,
            request_id = output.request_id,
            stream = self.stream,
            prompt_tokens = metrics.num_prompt_tokens,
            completion_tokens = metrics.num_generation_tokens,
            finish_reason = output.finish_reason.as_str(),
            drafts = metrics.num_drafts,
            accepted_tokens = metrics.num_accepted_tokens,
            elapsed_ms = self.elapsed_ms(),
            "request finished"
        );
    }

    /// The response of a handler's `result`: the response itself, or the error's, after
    /// writing the failed request's line.
    pub fn respond(&mut self, result: Result<Response, ApiError>) -> Response {
        result.unwrap_or_else(|error| {
            self.failed(&error);
            error.into_response()
        })
    }

    /// Writes the line of a request answered with an error.
    pub fn failed(&mut self, error: &ApiError) {
        self.written = true;
        tracing::info!(
            endpoint = self.endpoint,
            request_id = self.request_id,
            stream = self.stream,
            status = error.status.as_u16(),
            error = %error.message,
            elapsed_ms = self.elapsed_ms(),
            "request failed"
        );
    }

    fn elapsed_ms(&self) -> u128 {
        self.started.elapsed().as_millis()
    }
}

impl Drop for RequestLog {
    /// A log dropped unwritten belongs to a request whose client went away.
    fn drop(&mut self) {
        if !self.written {
            tracing::info!(
                endpoint = self.endpoint,
                request_id = self.request_id,
                stream = self.stream,
                elapsed_ms = self.elapsed_ms(),
                "client went away; request aborted"
            );
        }
    }
}
