//! The endpoints that do not generate: `GET /v1/models`, `GET /health` and `GET /metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::protocol::models::{ModelCard, ModelList};
use super::AppState;

/// The served model.
pub async fn list_models(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        data: vec![ModelCard {
            id: state.model_name.to_string(),
            object: "model".into(),
            created: state.started,
            owned_by: "aquila".into(),
            max_model_len: state.engine.max_model_len(),
        }],
    })
}

/// 200 while the engine thread accepts requests, 503 once it stopped.
pub async fn health(State(state): State<AppState>) -> Response {
    if state.engine.is_running() {
        StatusCode::OK.into_response()
    } else {
        ApiError::unavailable("the engine is not running").into_response()
    }
}

/// The engine's metrics in the Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    match state.engine.recorder().exposition_text() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => ApiError::internal(error.to_string()).into_response(),
    }
}
