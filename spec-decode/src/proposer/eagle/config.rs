//! Settings of the EAGLE chain proposer.

use crate::sampling::{probabilities, sample, RequestRng, SamplingConfig, SamplingError};

/// How the EAGLE proposer picks each draft token from the head's logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DraftSampling {
    /// The head's argmax (as vLLM and the EAGLE reference chains). Drafts are deterministic
    /// and verified with a one-hot `q`.
    Greedy,
    /// Sampled from the head's softmax at this temperature (`> 0`), with a per-request random
    /// stream derived from `seed` and the request id. Each draft carries its `q` rows, so the
    /// verifier accepts with `min(1, p/q)`.
    Sampled {
        /// Softmax temperature of the draft distribution.
        temperature: f32,
        /// Seed from which each request's draft stream is derived.
        seed: u64,
    },
}

/// Settings of an [`EagleProposer`](super::EagleProposer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EagleProposerConfig {
    /// Draft tokens per request and step (`k`), at least 1.
    pub num_speculative_tokens: usize,
    /// How draft tokens are chosen.
    pub sampling: DraftSampling,
}

impl EagleProposerConfig {
    /// Greedy chains of `num_speculative_tokens` tokens.
    pub fn greedy(num_speculative_tokens: usize) -> Self {
        Self {
            num_speculative_tokens,
            sampling: DraftSampling::Greedy,
        }
    }

    /// Checks `num_speculative_tokens >= 1` and a finite positive sampling temperature.
    pub fn validate(&self) -> Result<(), SamplingError> {
        if self.num_speculative_tokens == 0 {
            return Err(SamplingError {
                name: "num_speculative_tokens",
                expected: "at least 1",
                value: 0.0,
            });
        }
        if let DraftSampling::Sampled { temperature, .. } = self.sampling {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(SamplingError {
                    name: "draft temperature",
                    expected: "finite and > 0",
                    value: temperature,
                });
            }
        }
        Ok(())
    }
}

impl DraftSampling {
    /// The random stream of request `request_id`, if drafts are sampled.
    pub(crate) fn stream_for(&self, request_id: u64) -> Option<RequestRng> {
        match *self {
            DraftSampling::Greedy => None,
            DraftSampling::Sampled { seed, .. } => {
                // SplitMix64 finalizer: distinct, well-mixed seeds for neighbouring ids.
                let mut z = seed ^ request_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                Some(RequestRng::new(z ^ (z >> 31)))
            }
        }
    }

    /// Samples a draft id from one row of draft-vocabulary logits; returns the id and the
    /// distribution it was drawn from.
    pub(crate) fn sample_row(
        temperature: f32,
        logits: &[f32],
        rng: &mut RequestRng,
    ) -> (u32, Vec<f32>) {
        let config = SamplingConfig {
            temperature,
            ..SamplingConfig::default()
        };
        let probs = probabilities(logits, &config);
        (sample(&probs, rng), probs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_settings_name_the_field() {
        let err = EagleProposerConfig::greedy(0).validate().unwrap_err();
        assert_eq!(err.name, "num_speculative_tokens");
        let hot = EagleProposerConfig {
            num_speculative_tokens: 2,
            sampling: DraftSampling::Sampled {
                temperature: 0.0,
                seed: 1,
            },
        };
        assert_eq!(hot.validate().unwrap_err().name, "draft temperature");
        assert!(EagleProposerConfig::greedy(3).validate().is_ok());
    }

    #[test]
    fn request_streams_are_reproducible_and_distinct() {
        let sampling = DraftSampling::Sampled {
            temperature: 1.0,
            seed: 7,
        };
        let draw = |id| sampling.stream_for(id).unwrap().next_u64();
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        assert!(DraftSampling::Greedy.stream_for(1).is_none());
    }

    #[test]
    fn sampled_rows_return_their_distribution() {
        let mut rng = RequestRng::new(3);
        let (token, probs) = DraftSampling::sample_row(1.0, &[0.0, 50.0, 0.0], &mut rng);
        assert_eq!(token, 1);
        assert!((probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(probs[1] > 0.99);
    }
}
