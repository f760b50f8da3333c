//! `/v1/completions`: the request, the response, its stream chunks and its log-probabilities.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{CommonFields, Usage};

/// A `POST /v1/completions` body.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    /// The prompt: text or token ids (a list of one of either is accepted too).
    pub prompt: PromptInput,
    /// Most tokens to generate (default 16, as OpenAI and vLLM).
    pub max_tokens: Option<usize>,
    /// Return the log-probabilities of the sampled tokens and of this many top tokens.
    pub logprobs: Option<usize>,
    /// Prepend the prompt to the text; not supported (`true` is a 400).
    pub echo: Option<bool>,
    /// Text after the completion; not supported (a 400).
    pub suffix: Option<String>,
    /// Candidates to pick the best of; only 1 is supported.
    pub best_of: Option<u32>,
    /// The fields shared with chat completions.
    #[serde(flatten)]
    pub common: CommonFields,
}

/// The `prompt` field.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// One text.
    Text(String),
    /// Token ids.
    TokenIds(Vec<u32>),
    /// Several texts (only one is supported).
    Texts(Vec<String>),
    /// Several token id lists (only one is supported).
    TokenIdLists(Vec<Vec<u32>>),
}

/// A completion response, or one chunk of a streamed one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// `cmpl-<request id>`.
    pub id: String,
    /// `text_completion`.
    pub object: String,
    /// Unix time of the response.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// One choice (or none in a stream's usage chunk).
    pub choices: Vec<CompletionChoice>,
    /// Token counts (in a stream only in the last chunk, with `include_usage`).
    pub usage: Option<Usage>,
}

/// One completion (or its new text in a stream chunk).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompletionChoice {
    /// Always 0.
    pub index: usize,
    /// The generated text (in a chunk, the new text).
    pub text: String,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop`, `length` or `abort` once finished.
    pub finish_reason: Option<String>,
    /// The stop string or stop token id that matched (vLLM's extension).
    pub stop_reason: Option<serde_json::Value>,
}

/// The legacy completions log-probability format.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    /// Each generated token's text.
    pub tokens: Vec<String>,
    /// Each generated token's log-probability.
    pub token_logprobs: Vec<f32>,
    /// The top tokens at each position, text to log-probability.
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    /// Offset of each token's text in the generated text.
    pub text_offset: Vec<usize>,
}
