//! The request body limit, enforced before the body is read where the client declared its
//! length: a `Content-Length` over the limit gets its 413 at once, without receiving the body
//! (a client that sent `Expect: 100-continue` never sends it). Bodies of undeclared length are
//! cut off by axum's [`DefaultBodyLimit`](axum::extract::DefaultBodyLimit) while they are read.

use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Answers a request whose declared body is longer than `limit` bytes with a 413; passes the
/// others on.
pub async fn refuse_declared_oversize(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    match declared_length(&request) {
        Some(length) if length > limit => too_large(length, limit).into_response(),
        _ => next.run(request).await,
    }
}

/// The body length the request's `Content-Length` header declares, if it has a valid one.
fn declared_length(request: &Request) -> Option<usize> {
    request
        .headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The 413 of a body of `length` bytes over a limit of `limit`.
fn too_large(length: usize, limit: usize) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!(
            "the request body is {length} bytes, more than this server's limit of {limit} bytes"
        ),
        param: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_length(value: &str) -> Request {
        Request::builder()
            .header(CONTENT_LENGTH, value)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[test]
    fn the_declared_length_is_read_from_the_header() {
        assert_eq!(declared_length(&with_length("5242880")), Some(5 << 20));
        assert_eq!(declared_length(&with_length("not a number")), None);
        let no_header = Request::new(axum::body::Body::empty());
        assert_eq!(declared_length(&no_header), None);
    }

    #[test]
    fn the_refusal_names_both_sizes() {
        let error = too_large(5 << 20, 4 << 20);
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(error.message.contains("5242880 bytes"), "{}", error.message);
        assert!(error.message.contains("4194304 bytes"), "{}", error.message);
    }
}
