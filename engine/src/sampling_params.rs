//! Per-request sampling and stopping parameters, validated when a request is submitted.

use serde::{Deserialize, Serialize};

/// Largest number of top log-probabilities a request may ask for per generated token.
pub const MAX_LOGPROBS: usize = 20;

/// How one request samples tokens and when it stops.
///
/// Defaults: temperature 1, no top-k/top-p/min-p filtering, no penalties, 16 tokens, no stop
/// strings, EOS stops, special tokens left out of the text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens; `None` keeps all.
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in (0, 1].
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the top token's, in [0, 1].
    pub min_p: f32,
    /// Seed of this request's random stream; `None` derives one from the engine seed and the
    /// request id.
    pub seed: Option<u64>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Fewest tokens to generate before EOS, stop token ids or stop strings may end the request
    /// (EOS and stop token ids are masked out until then).
    pub min_tokens: usize,
    /// Strings that end generation; the returned text stops before the first match.
    pub stop: Vec<String>,
    /// Token ids that end generation (kept in the output token ids).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating after the model's EOS token.
    pub ignore_eos: bool,
    /// Subtracted once from the logit of every token already generated, in [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was generated, in [-2, 2].
    pub frequency_penalty: f32,
    /// Divides positive (multiplies negative) logits of tokens in the prompt or output; > 0,
    /// 1 disables it.
    pub repetition_penalty: f32,
    /// Return the log-probability of each generated token and of the `n` most likely tokens at
    /// its position (at most [`MAX_LOGPROBS`]).
    pub logprobs: Option<usize>,
    /// Leave special tokens (EOS, chat markers) out of the generated text.
    pub skip_special_tokens: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            max_tokens: 16,
            min_tokens: 0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logprobs: None,
            skip_special_tokens: true,
        }
    }
}

/// A sampling parameter that is out of range; each variant names the field and the value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplingParamsError {
    /// `temperature` is negative or not finite.
    #[error("temperature must be finite and >= 0, got {0}")]
    Temperature(f32),
    /// `top_k` is `Some(0)`.
    #[error("top_k must be at least 1 (use None to disable it), got 0")]
    TopK,
    /// `top_p` is outside (0, 1].
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    /// `min_p` is outside [0, 1].
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    /// `max_tokens` is 0.
    #[error("max_tokens must be at least 1, got 0")]
    MaxTokens,
    /// `min_tokens` exceeds `max_tokens`.
    #[error("min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens})")]
    MinTokens {
        /// The requested minimum.
        min_tokens: usize,
        /// The requested maximum.
        max_tokens: usize,
    },
    /// A stop string is empty.
    #[error("stop string {index} is empty")]
    EmptyStop {
        /// Index of the empty string in `stop`.
        index: usize,
    },
    /// A stop token id is not in the vocabulary.
    #[error("stop_token_ids contains {token}, outside the vocabulary of {vocab_size} tokens")]
    StopTokenId {
        /// The offending id.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// `presence_penalty` is outside [-2, 2].
    #[error("presence_penalty must be in [-2, 2], got {0}")]
    PresencePenalty(f32),
    /// `frequency_penalty` is outside [-2, 2].
    #[error("frequency_penalty must be in [-2, 2], got {0}")]
    FrequencyPenalty(f32),
    /// `repetition_penalty` is not a positive finite number.
    #[error("repetition_penalty must be finite and > 0, got {0}")]
    RepetitionPenalty(f32),
    /// `logprobs` asks for more than [`MAX_LOGPROBS`].
    #[error("logprobs must be at most {MAX_LOGPROBS}, got {0}")]
    Logprobs(usize),
}

impl SamplingParams {
    /// Greedy decoding (temperature 0) of up to `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            temperature: 0.0,
            max_tokens,
            ..Self::default()
        }
    }

    /// Whether this request picks the argmax token.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks every field against its range and the stop token ids against `vocab_size`.
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplingParamsError> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(SamplingParamsError::Temperature(self.temperature));
        }
        if self.top_k == Some(0) {
            return Err(SamplingParamsError::TopK);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingParamsError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingParamsError::MinP(self.min_p));
        }
        if self.max_tokens == 0 {
            return Err(SamplingParamsError::MaxTokens);
        }
        if self.min_tokens > self.max_tokens {
            return Err(SamplingParamsError::MinTokens {
                min_tokens: self.min_tokens,
                max_tokens: self.max_tokens,
            });
        }
        if let Some(index) = self.stop.iter().position(String::is_empty) {
            return Err(SamplingParamsError::EmptyStop { index });
        }
        if let Some(&token) = self
            .stop_token_ids
            .iter()
            .find(|&&token| token as usize >= vocab_size)
        {
            return Err(SamplingParamsError::StopTokenId { token, vocab_size });
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(SamplingParamsError::PresencePenalty(self.presence_penalty));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(SamplingParamsError::FrequencyPenalty(
                self.frequency_penalty,
            ));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return Err(SamplingParamsError::RepetitionPenalty(
                self.repetition_penalty,
            ));
        }
        if let Some(n) = self.logprobs.filter(|&n| n > MAX_LOGPROBS) {
            return Err(SamplingParamsError::Logprobs(n));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: usize = 100;

    fn rejects(params: SamplingParams, field: &str) {
        let err = params.validate(VOCAB).unwrap_err().to_string();
        assert!(err.contains(field), "error {err:?} does not name {field}");
    }

    #[test]
    fn defaults_and_greedy_are_valid() {
        SamplingParams::default().validate(VOCAB).unwrap();
        let greedy = SamplingParams::greedy(8);
        greedy.validate(VOCAB).unwrap();
        assert!(greedy.is_greedy());
        assert!(!SamplingParams::default().is_greedy());
    }

    #[test]
    fn each_out_of_range_field_is_named() {
        let base = SamplingParams::default;
        rejects(
            SamplingParams {
                temperature: -0.5,
                ..base()
            },
            "temperature",
        );
        rejects(
            SamplingParams {
                temperature: f32::NAN,
                ..base()
            },
            "temperature",
        );
        rejects(
            SamplingParams {
                top_k: Some(0),
                ..base()
            },
            "top_k",
        );
        rejects(
            SamplingParams {
                top_p: 0.0,
                ..base()
            },
            "top_p",
        );
        rejects(
            SamplingParams {
                top_p: 1.5,
                ..base()
            },
            "top_p",
        );
        rejects(
            SamplingParams {
                min_p: -0.1,
                ..base()
            },
            "min_p",
        );
        rejects(
            SamplingParams {
                max_tokens: 0,
                ..base()
            },
            "max_tokens",
        );
        rejects(
            SamplingParams {
                min_tokens: 20,
                max_tokens: 10,
                ..base()
            },
            "min_tokens",
        );
        rejects(
            SamplingParams {
                stop: vec!["a".into(), String::new()],
                ..base()
            },
            "stop string 1",
        );
        rejects(
            SamplingParams {
                stop_token_ids: vec![3, 100],
                ..base()
            },
            "stop_token_ids",
        );
        rejects(
            SamplingParams {
                presence_penalty: 2.5,
                ..base()
            },
            "presence_penalty",
        );
        rejects(
            SamplingParams {
                frequency_penalty: -3.0,
                ..base()
            },
            "frequency_penalty",
        );
        rejects(
            SamplingParams {
                repetition_penalty: 0.0,
                ..base()
            },
            "repetition_penalty",
        );
        rejects(
            SamplingParams {
                logprobs: Some(21),
                ..base()
            },
            "logprobs",
        );
    }

    #[test]
    fn deserializes_with_defaults_for_missing_fields() {
        let params: SamplingParams =
            serde_json::from_str(r#"{"temperature": 0.5, "max_tokens": 4}"#).unwrap();
        assert_eq!(params.temperature, 0.5);
        assert_eq!(params.max_tokens, 4);
        assert_eq!(params.top_p, 1.0);
        assert!(params.skip_special_tokens);
    }
}
