//! Request fields to [`SamplingParams`], as vLLM maps them; fields Aquila does not support are
//! refused with a 400 naming them.

use super::error::ApiError;
use super::protocol::common::CommonFields;
use crate::sampling_params::SamplingParams;

/// The sampling parameters of a request generating up to `max_tokens` tokens, with `logprobs`
/// top tokens per position when asked for. The engine checks the ranges when it admits the
/// request (its errors name the field).
pub fn sampling_params(
    common: &CommonFields,
    max_tokens: usize,
    logprobs: Option<usize>,
) -> Result<SamplingParams, ApiError> {
    check_supported(common, logprobs)?;
    let defaults = SamplingParams::default();
    Ok(SamplingParams {
        temperature: common.temperature.unwrap_or(defaults.temperature),
        top_k: top_k(common.top_k)?,
        top_p: common.top_p.unwrap_or(defaults.top_p),
        min_p: common.min_p.unwrap_or(defaults.min_p),
        seed: common.seed,
        max_tokens,
        min_tokens: common.min_tokens.unwrap_or(defaults.min_tokens),
        stop: common
            .stop
            .clone()
            .map(|stop| stop.into_vec())
            .unwrap_or_default(),
        stop_token_ids: common.stop_token_ids.clone().unwrap_or_default(),
        ignore_eos: common.ignore_eos.unwrap_or(defaults.ignore_eos),
        presence_penalty: common.presence_penalty.unwrap_or(defaults.presence_penalty),
        frequency_penalty: common
            .frequency_penalty
            .unwrap_or(defaults.frequency_penalty),
        repetition_penalty: common
            .repetition_penalty
            .unwrap_or(defaults.repetition_penalty),
        logprobs,
        skip_special_tokens: common
            .skip_special_tokens
            .unwrap_or(defaults.skip_special_tokens),
    })
}

/// vLLM's `top_k`: -1 (or 0) disables it, otherwise at least 1.
fn top_k(requested: Option<i64>) -> Result<Option<usize>, ApiError> {
    match requested {
        None | Some(-1) | Some(0) => Ok(None),
        Some(k) if k > 0 => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::invalid_field(
            "top_k",
            format!("top_k must be -1 (disabled) or at least 1, got {k}"),
        )),
    }
}

/// Refuses the shared fields whose values Aquila cannot honour.
fn check_supported(common: &CommonFields, logprobs: Option<usize>) -> Result<(), ApiError> {
    if let Some(n) = common.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid_field(
            "n",
            format!("n must be 1 (one choice per request), got {n}"),
        ));
    }
    if common
        .logit_bias
        .as_ref()
        .is_some_and(|bias| !bias.is_empty())
    {
        return Err(ApiError::invalid_field(
            "logit_bias",
            "logit_bias is not supported",
        ));
    }
    let stream = common.stream.unwrap_or(false);
    if common.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_field(
            "stream_options",
            "stream_options can only be set when stream is true",
        ));
    }
    if stream && logprobs.is_some() {
        return Err(ApiError::invalid_field(
            "logprobs",
            "logprobs are not supported with stream: true; ask without streaming",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::protocol::common::{StopStrings, StreamOptions};

    #[test]
    fn maps_the_fields_and_defaults_like_vllm() {
        let common = CommonFields {
            temperature: Some(0.0),
            top_k: Some(-1),
            top_p: Some(0.9),
            seed: Some(7),
            stop: Some(StopStrings::One("\n".into())),
            presence_penalty: Some(0.5),
            ..CommonFields::default()
        };
        let params = sampling_params(&common, 12, Some(2)).unwrap();
        assert_eq!(params.temperature, 0.0);
        assert_eq!(params.top_k, None);
        assert_eq!(params.top_p, 0.9);
        assert_eq!(params.seed, Some(7));
        assert_eq!(params.stop, vec!["\n".to_string()]);
        assert_eq!(params.presence_penalty, 0.5);
        assert_eq!(params.max_tokens, 12);
        assert_eq!(params.logprobs, Some(2));
        assert_eq!(params.repetition_penalty, 1.0);
        assert!(params.skip_special_tokens);
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let named = |common: CommonFields, logprobs: Option<usize>| {
            sampling_params(&common, 4, logprobs).unwrap_err().param
        };
        let n = CommonFields {
            n: Some(2),
            ..CommonFields::default()
        };
        assert_eq!(named(n, None).as_deref(), Some("n"));
        let top_k = CommonFields {
            top_k: Some(-5),
            ..CommonFields::default()
        };
        assert_eq!(named(top_k, None).as_deref(), Some("top_k"));
        let options_without_stream = CommonFields {
            stream_options: Some(StreamOptions::default()),
            ..CommonFields::default()
        };
        assert_eq!(
            named(options_without_stream, None).as_deref(),
            Some("stream_options")
        );
        let streamed_logprobs = CommonFields {
            stream: Some(true),
            ..CommonFields::default()
        };
        assert_eq!(
            named(streamed_logprobs, Some(1)).as_deref(),
            Some("logprobs")
        );
    }
}
