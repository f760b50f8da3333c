//! Dynamo's preprocessed requests as Aquila sampling parameters, and Aquila's outputs as
//! Dynamo's engine outputs.

use aquila_engine::{FinishReason, RequestOutput, SamplingParams, StopReason};
use dynamo_llm::protocols::common::llm_backend::LLMEngineOutput;
use dynamo_llm::protocols::common::preprocessor::PreprocessedRequest;
use dynamo_llm::protocols::common::FinishReason as DynamoFinishReason;

/// The sampling parameters of `request`, whose prompt must leave room in `max_model_len`:
/// `max_tokens` defaults to that room, as the frontend leaves it unset when the client does.
/// Fields Aquila has no counterpart for (beam search, `n` > 1, guided decoding) are refused
/// with a message naming them, rather than ignored.
pub fn sampling_params(
    request: &PreprocessedRequest,
    max_model_len: usize,
) -> Result<SamplingParams, String> {
    let prompt_len = request.token_ids.len();
    if prompt_len == 0 {
        return Err("the prompt has no tokens".into());
    }
    if prompt_len >= max_model_len {
        return Err(format!(
            "the prompt has {prompt_len} tokens; this worker's context holds {max_model_len}"
        ));
    }
    let room = max_model_len - prompt_len;
    let sampling = &request.sampling_options;
    if sampling.n.is_some_and(|n| n > 1) || sampling.best_of.is_some_and(|n| n > 1) {
        return Err("n and best_of above 1 are not supported".into());
    }
    if sampling.use_beam_search == Some(true) {
        return Err("beam search is not supported".into());
    }
    if sampling.guided_decoding.is_some() {
        return Err("guided decoding is not supported".into());
    }
    let stop = &request.stop_conditions;
    let max_tokens = match stop.max_tokens {
        Some(n) if n as usize > room => {
            return Err(format!(
                "max_tokens {n} with a {prompt_len}-token prompt exceeds this worker's context \
                 of {max_model_len}"
            ))
        }
        Some(n) => n as usize,
        None => room,
    };
    let defaults = SamplingParams::default();
    let stop_token_ids = [
        &stop.stop_token_ids,
        &stop.stop_token_ids_visible,
        &stop.stop_token_ids_hidden,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .copied()
    .collect();
    Ok(SamplingParams {
        temperature: sampling.temperature.unwrap_or(defaults.temperature),
        top_k: match sampling.top_k {
            Some(k) if k > 0 => Some(k as usize),
            _ => None,
        },
        top_p: sampling.top_p.unwrap_or(defaults.top_p),
        min_p: sampling.min_p.unwrap_or(defaults.min_p),
        seed: sampling.seed.map(|seed| seed as u64),
        max_tokens,
        min_tokens: stop.min_tokens.map_or(0, |n| n as usize),
        stop: stop.stop.clone().unwrap_or_default(),
        stop_token_ids,
        ignore_eos: stop.ignore_eos.unwrap_or(false),
        presence_penalty: sampling.presence_penalty.unwrap_or(0.0),
        frequency_penalty: sampling.frequency_penalty.unwrap_or(0.0),
        repetition_penalty: sampling.repetition_penalty.unwrap_or(1.0),
        ..defaults
    })
}

/// The tokens one engine step added.
pub fn tokens_output(token_ids: Vec<u32>) -> LLMEngineOutput {
    LLMEngineOutput {
        token_ids,
        ..LLMEngineOutput::default()
    }
}

/// The last output of a finished request: no tokens (the deltas carried them all), and why it
/// finished.
pub fn finish_output(output: &RequestOutput) -> LLMEngineOutput {
    let finish_reason = match (&output.finish_reason, &output.stop_reason) {
        (FinishReason::Stop, Some(StopReason::Eos(_))) => DynamoFinishReason::EoS,
        (FinishReason::Stop, _) => DynamoFinishReason::Stop,
        (FinishReason::Length, _) => DynamoFinishReason::Length,
        (FinishReason::Abort, _) => DynamoFinishReason::Cancelled,
    };
    LLMEngineOutput {
        finish_reason: Some(finish_reason),
        ..LLMEngineOutput::default()
    }
}

/// The last output of a request the engine failed.
pub fn error_output(message: String) -> LLMEngineOutput {
    LLMEngineOutput {
        finish_reason: Some(DynamoFinishReason::Error(message)),
        ..LLMEngineOutput::default()
    }
}

/// The last output of a request cancelled from Dynamo's side.
pub fn cancelled_output() -> LLMEngineOutput {
    LLMEngineOutput {
        finish_reason: Some(DynamoFinishReason::Cancelled),
        ..LLMEngineOutput::default()
    }
}
