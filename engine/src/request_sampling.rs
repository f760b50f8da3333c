//! A request's sampling state: its parameters, the spec-decode sampling pipeline derived from
//! them and its own random stream (verification draws every sampled token from it).

use aquila_spec_decode::sampling::{RequestRng, SamplingConfig};

use crate::sampling_params::SamplingParams;

/// How one request samples.
#[derive(Debug)]
pub(crate) struct RequestSampling {
    /// The request's parameters.
    pub params: SamplingParams,
    /// The sampling pipeline derived from the parameters.
    pub config: SamplingConfig,
    /// The request's own random stream.
    pub rng: RequestRng,
    /// The seed of that stream (the request's own, or the one the engine derived for it); a
    /// drafter that samples the request's drafts derives its stream from it.
    pub seed: u64,
}

impl RequestSampling {
    /// The sampling state of a request with (validated) `params`, drawing from `seed`'s stream.
    pub fn new(params: SamplingParams, seed: u64) -> Self {
        Self {
            config: sampling_config(&params),
            rng: RequestRng::new(seed),
            seed,
            params,
        }
    }
}

/// The spec-decode sampling pipeline of `params` (validated).
fn sampling_config(params: &SamplingParams) -> SamplingConfig {
    SamplingConfig {
        temperature: params.temperature,
        top_k: params.top_k.unwrap_or(0),
        top_p: params.top_p,
        min_p: params.min_p,
        presence_penalty: params.presence_penalty,
        frequency_penalty: params.frequency_penalty,
        repetition_penalty: params.repetition_penalty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_become_the_sampling_pipeline() {
        let params = SamplingParams {
            temperature: 0.5,
            top_k: Some(7),
            top_p: 0.9,
            min_p: 0.1,
            repetition_penalty: 1.2,
            ..SamplingParams::default()
        };
        let config = RequestSampling::new(params, 1).config;
        assert_eq!(config.top_k, 7);
        assert_eq!(config.top_p, 0.9);
        assert_eq!(config.repetition_penalty, 1.2);
        config.validate().unwrap();
        assert_eq!(sampling_config(&SamplingParams::default()).top_k, 0);
    }
}
