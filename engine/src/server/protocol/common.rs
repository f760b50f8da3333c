//! Request fields both generation endpoints share, and the `usage` object of their responses.

use serde::{Deserialize, Serialize};

use crate::output::RequestMetrics;

/// Fields of `/v1/completions` and `/v1/chat/completions` requests besides the prompt, the
/// token limit and log-probabilities (vLLM's names, including its extra sampling fields).
/// Fields not listed are ignored, as vLLM ignores them.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CommonFields {
    /// The served model's name; requests for another model get a 404.
    pub model: Option<String>,
    /// Stream server-sent events instead of one JSON response.
    pub stream: Option<bool>,
    /// Options of streamed responses.
    pub stream_options: Option<StreamOptions>,
    /// Number of choices; only 1 is supported.
    pub n: Option<u32>,
    /// Softmax temperature (0 = greedy); default 1.
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1].
    pub top_p: Option<f32>,
    /// Keep only the k most likely tokens; -1 or 0 keeps all (vLLM).
    pub top_k: Option<i64>,
    /// Drop tokens below this fraction of the top token's probability.
    pub min_p: Option<f32>,
    /// Seed of the request's random stream.
    pub seed: Option<u64>,
    /// Stop strings: one string or a list.
    pub stop: Option<StopStrings>,
    /// Token ids that end generation.
    pub stop_token_ids: Option<Vec<u32>>,
    /// Penalty on tokens already generated, in [-2, 2].
    pub presence_penalty: Option<f32>,
    /// Penalty per occurrence of a generated token, in [-2, 2].
    pub frequency_penalty: Option<f32>,
    /// Multiplicative penalty on prompt and output tokens; > 0, 1 disables it.
    pub repetition_penalty: Option<f32>,
    /// Fewest tokens generated before a stop condition may end the request.
    pub min_tokens: Option<usize>,
    /// Keep generating after the end-of-sequence token.
    pub ignore_eos: Option<bool>,
    /// Leave special tokens out of the text (default true).
    pub skip_special_tokens: Option<bool>,
    /// Per-token logit biases; not supported (a non-empty map is a 400).
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// The end user's name; accepted and ignored.
    pub user: Option<String>,
}

/// `stream_options` of a streamed request.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the request's `usage` before `data: [DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// The `stop` field: a single string or a list of strings.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum StopStrings {
    /// One stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

impl StopStrings {
    /// The strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopStrings::One(stop) => vec![stop],
            StopStrings::Many(stops) => stops,
        }
    }
}

/// Token counts of a request, with its speculative-decoding figures as an extension.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
    /// Speculative decoding of this request (zeros without it); an Aquila extension.
    pub spec_decode: SpecDecodeUsage,
}

/// Speculative-decoding figures of one request.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecDecodeUsage {
    /// Verifications of drafts.
    pub num_drafts: usize,
    /// Draft tokens proposed.
    pub num_draft_tokens: usize,
    /// Draft tokens accepted.
    pub num_accepted_tokens: usize,
    /// Tokens per verification, the bonus token counted: `1 + accepted / drafts` (1 without
    /// drafts).
    pub mean_acceptance_length: f64,
}

impl Usage {
    /// The usage of a finished request.
    pub fn from_metrics(metrics: &RequestMetrics) -> Self {
        let drafts = metrics.num_drafts;
        let mean_acceptance_length = if drafts == 0 {
            1.0
        } else {
            1.0 + metrics.num_accepted_tokens as f64 / drafts as f64
        };
        Self {
            prompt_tokens: metrics.num_prompt_tokens,
            completion_tokens: metrics.num_generation_tokens,
            total_tokens: metrics.num_prompt_tokens + metrics.num_generation_tokens,
            spec_decode: SpecDecodeUsage {
                num_drafts: drafts,
                num_draft_tokens: metrics.num_draft_tokens,
                num_accepted_tokens: metrics.num_accepted_tokens,
                mean_acceptance_length,
            },
        }
    }
}
