//! `/v1/models`: the list of served models (one).

use serde::{Deserialize, Serialize};

/// The `GET /v1/models` response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    /// The served models.
    pub data: Vec<ModelCard>,
}

/// One served model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelCard {
    /// The name requests use in `model`.
    pub id: String,
    /// `model`.
    pub object: String,
    /// Unix time the server started.
    pub created: u64,
    /// `aquila`.
    pub owned_by: String,
    /// Longest sequence (prompt plus output) of a request.
    pub max_model_len: usize,
}
