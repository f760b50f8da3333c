//! `/v1/chat/completions`: the request with its messages, the response, its stream chunks and
//! its log-probabilities.

use serde::{Deserialize, Serialize};

use super::common::{CommonFields, Usage};

/// A `POST /v1/chat/completions` body.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatCompletionRequest {
    /// The conversation, rendered with the model's chat template.
    pub messages: Vec<ChatMessageInput>,
    /// Most tokens to generate (deprecated by OpenAI for `max_completion_tokens`).
    pub max_tokens: Option<usize>,
    /// Most tokens to generate; default: what the context leaves.
    pub max_completion_tokens: Option<usize>,
    /// Return the sampled tokens' log-probabilities.
    pub logprobs: Option<bool>,
    /// With `logprobs`, also this many top tokens per position.
    pub top_logprobs: Option<usize>,
    /// Tool definitions; not supported (a 400).
    pub tools: Option<serde_json::Value>,
    /// Legacy function definitions; not supported (a 400).
    pub functions: Option<serde_json::Value>,
    /// Structured output formats; only `{"type": "text"}` is supported.
    pub response_format: Option<serde_json::Value>,
    /// The fields shared with completions.
    #[serde(flatten)]
    pub common: CommonFields,
}

/// One message of the conversation.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessageInput {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text, or a list of content parts of which only text parts are supported.
    pub content: Option<MessageContent>,
}

/// A message's `content`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<ContentPart>),
}

/// One content part.
#[derive(Clone, Debug, Deserialize)]
pub struct ContentPart {
    /// The part's type; only `text` is supported.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// A chat completion response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-<request id>`.
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    /// Unix time of the response.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// The assistant's reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Always 0.
    pub index: usize,
    /// The reply.
    pub message: ChatMessageOutput,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `abort`.
    pub finish_reason: String,
    /// The stop string or stop token id that matched (vLLM's extension).
    pub stop_reason: Option<serde_json::Value>,
}

/// A message the server writes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatMessageOutput {
    /// `assistant`.
    pub role: String,
    /// The generated text.
    pub content: String,
}

/// One chunk of a streamed chat completion.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    /// `chatcmpl-<request id>`, the same in every chunk.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    /// Unix time of the response.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// One choice (none in the usage chunk).
    pub choices: Vec<ChatChunkChoice>,
    /// Token counts, only in the last chunk with `include_usage`.
    pub usage: Option<Usage>,
}

/// What a chunk adds to the reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    /// Always 0.
    pub index: usize,
    /// The new part of the message.
    pub delta: ChatDelta,
    /// `stop`, `length` or `abort` in the last chunk of the choice.
    pub finish_reason: Option<String>,
    /// The stop string or stop token id that matched (vLLM's extension).
    pub stop_reason: Option<serde_json::Value>,
}

/// The new part of the assistant's message.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChatDelta {
    /// `assistant` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// Chat log-probabilities: one entry per generated token.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChatLogprobs {
    /// The generated tokens.
    pub content: Vec<ChatTokenLogprob>,
}

/// A generated token with its log-probability and the top alternatives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// The UTF-8 bytes of its text.
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position.
    pub top_logprobs: Vec<ChatTopLogprob>,
}

/// One of the most likely tokens at a position.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatTopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// The UTF-8 bytes of its text.
    pub bytes: Vec<u8>,
}
