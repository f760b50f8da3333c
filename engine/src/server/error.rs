//! [`ApiError`]: an error response in OpenAI's shape, `{"error": {"message", "type", "param",
//! "code"}}`, with its HTTP status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::async_llm::AsyncLlmError;

/// An HTTP error with an OpenAI-style body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for the client.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
}

/// The JSON body of an error response.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: u16,
}

impl ApiError {
    /// 400: the request is invalid.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
        }
    }

    /// 400 naming the offending field.
    pub fn invalid_field(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::bad_request(message)
        }
    }

    /// 404: the request names a model this server does not serve.
    pub fn unknown_model(model: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model".into()),
        }
    }

    /// 503: the engine cannot take the request now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            param: None,
        }
    }

    /// 500: the engine failed while running the request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            param: None,
        }
    }

    /// The error's `type`, as vLLM names them.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestTooLargeError",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
            _ => "InternalServerError",
        }
    }

    /// The JSON body, also sent as a server-sent event when a stream fails.
    pub fn body(&self) -> serde_json::Value {
        let body = ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        serde_json::to_value(body).unwrap_or_default()
    }
}

impl From<AsyncLlmError> for ApiError {
    fn from(error: AsyncLlmError) -> Self {
        match error {
            AsyncLlmError::Rejected(error) => ApiError::bad_request(error.to_string()),
            AsyncLlmError::QueueFull { .. } | AsyncLlmError::ShuttingDown => {
                ApiError::unavailable(error.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let body = ApiError::invalid_field("temperature", "temperature must be >= 0").body();
        assert_eq!(body["error"]["message"], "temperature must be >= 0");
        assert_eq!(body["error"]["type"], "BadRequestError");
        assert_eq!(body["error"]["param"], "temperature");
        assert_eq!(body["error"]["code"], 400);
    }

    #[test]
    fn a_full_queue_is_unavailable() {
        let error = ApiError::from(AsyncLlmError::QueueFull { limit: 4 });
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(error.message.contains("queue is full"));
    }
}
