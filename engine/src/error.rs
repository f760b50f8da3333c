//! The engine's error type.

use std::path::PathBuf;

use crate::config::Device;
use crate::output::RequestId;
use crate::sampling_params::SamplingParamsError;

/// A prompt the engine cannot accept.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    Empty,
    /// The prompt leaves no room to generate within `max_model_len`.
    #[error(
        "the prompt has {len} tokens, but max_model_len is {max_model_len}: prompts may have at \
         most {} tokens",
        max_model_len - 1
    )]
    TooLong {
        /// Prompt tokens.
        len: usize,
        /// The engine's longest sequence.
        max_model_len: usize,
    },
    /// A prompt token id is not in the vocabulary.
    #[error(
        "prompt token {position} is id {token}, outside the vocabulary of {vocab_size} tokens"
    )]
    TokenOutOfVocab {
        /// Index of the token in the prompt.
        position: usize,
        /// The offending id.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// The text could not be tokenized or the chat template could not be rendered.
    #[error(transparent)]
    Tokenizer(#[from] aquila_model_loader::tokenizer::TokenizerError),
}

/// Any error of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A setting of [`crate::EngineConfig`] is invalid.
    #[error("invalid engine config: {field}: {reason}")]
    Config {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The draft model of speculative decoding could not be loaded or does not fit the target.
    #[error("loading the draft model from {dir}: {reason}")]
    DraftModel {
        /// The draft model directory.
        dir: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The device needs a feature this build does not have.
    #[error("device {device} is not available: {reason}")]
    DeviceUnavailable {
        /// The configured device.
        device: Device,
        /// Why.
        reason: String,
    },
    /// The model directory could not be loaded.
    #[error("loading the model from {dir}: {error}")]
    Load {
        /// The model directory.
        dir: PathBuf,
        /// What failed (part of the message, not also a `source()`, so error chains print
        /// it once).
        error: Box<aquila_model_loader::LoadError>,
    },
    /// The tokenizer of the model directory could not be loaded.
    #[error("loading the tokenizer from {dir}: {error}")]
    Tokenizer {
        /// The model directory.
        dir: PathBuf,
        /// What failed (part of the message, not also a `source()`).
        error: aquila_model_loader::tokenizer::TokenizerError,
    },
    /// The metrics recorder could not be created.
    #[error("creating the metrics recorder: {0}")]
    Metrics(#[from] aquila_metrics::MetricsError),
    /// A request's sampling parameters are invalid.
    #[error("invalid sampling parameters: {0}")]
    InvalidSamplingParams(#[from] SamplingParamsError),
    /// A request's prompt is invalid.
    #[error("invalid prompt: {0}")]
    InvalidPrompt(#[from] PromptError),
    /// One request of a batch is invalid; no request of the batch was added.
    #[error("request {index} of the batch: {error}")]
    InvalidBatchItem {
        /// Index of the request in the batch.
        index: usize,
        /// What is wrong with it (part of the message, not also a `source()`).
        error: Box<EngineError>,
    },
    /// A batch call got a different number of sampling parameter sets than prompts.
    #[error("{prompts} prompts but {params} sampling parameter sets")]
    ParamsCountMismatch {
        /// Number of prompts.
        prompts: usize,
        /// Number of parameter sets.
        params: usize,
    },
    /// No unfinished request has this id.
    #[error("no unfinished request has id {0}")]
    UnknownRequest(RequestId),
    /// Requests are unfinished but the scheduler found no work for them (an engine bug; the
    /// step loop stops instead of spinning).
    #[error("{unfinished} requests are unfinished but none could be scheduled")]
    Stalled {
        /// Unfinished requests.
        unfinished: usize,
    },
    /// The model's forward pass failed.
    #[error("model forward failed: {0}")]
    Model(String),
    /// Detokenizing generated tokens failed.
    #[error("detokenizing the output of request {request_id}: {error}")]
    Detokenize {
        /// The request.
        request_id: RequestId,
        /// What failed (part of the message, not also a `source()`).
        error: aquila_model_loader::tokenizer::TokenizerError,
    },
}

impl EngineError {
    /// Wraps `self` as the error of batch item `index`.
    pub(crate) fn at_batch_index(self, index: usize) -> Self {
        EngineError::InvalidBatchItem {
            index,
            error: Box::new(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem() {
        let err = EngineError::from(PromptError::TooLong {
            len: 10,
            max_model_len: 8,
        });
        assert_eq!(
            err.to_string(),
            "invalid prompt: the prompt has 10 tokens, but max_model_len is 8: prompts may have \
             at most 7 tokens"
        );
        let err = EngineError::from(SamplingParamsError::TopK).at_batch_index(3);
        assert!(err
            .to_string()
            .starts_with("request 3 of the batch: invalid sampling"));
    }

    #[test]
    fn a_checkpoint_mismatch_is_printed_once_through_the_error_chain() {
        use aquila_model_loader::checkpoint::{CheckpointError, MismatchReport};
        let report = MismatchReport {
            missing: (0..272)
                .map(|i| format!("model.layers.{i}.weight"))
                .collect(),
            ..MismatchReport::default()
        };
        let err = EngineError::Load {
            dir: "models/x".into(),
            error: Box::new(
                CheckpointError::Mismatch {
                    path: "models/x/model.safetensors".into(),
                    report,
                }
                .into(),
            ),
        };
        // Everything a chain printer shows: the message and every source's message.
        let mut chain = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        assert_eq!(chain.matches("272 missing tensors").count(), 1, "{chain}");
        assert!(chain.len() < 300, "{} bytes: {chain}", chain.len());
    }
}
