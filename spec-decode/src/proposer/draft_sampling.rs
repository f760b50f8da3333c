//! How a proposer picks its draft tokens from its distribution: argmax, or sampled with a
//! per-request random stream.

use super::ProposeRequest;
use crate::sampling::{probabilities, sample, RequestRng, SamplingConfig};

/// How a proposer that drafts from a distribution (an EAGLE head, a draft model) picks each
/// draft token from its logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DraftSampling {
    /// The drafter's argmax (as vLLM and the EAGLE reference chains). Drafts are deterministic
    /// and verified with a one-hot `q`.
    Greedy,
    /// Sampled from the drafter's softmax at this temperature (`> 0`), with a per-request random
    /// stream derived from `seed` and the request id. Each draft carries its `q` rows, so the
    /// verifier accepts with `min(1, p/q)`.
    Sampled {
        /// Softmax temperature of the draft distribution.
        temperature: f32,
        /// Seed from which each request's draft stream is derived.
        seed: u64,
    },
    /// As the request samples: the argmax for a greedy request, and for a request that
    /// samples ([`ProposeRequest::temperature`] above 0) a draft sampled from the drafter's
    /// softmax at the request's own temperature, from a stream derived from the request's
    /// [`ProposeRequest::seed`]. A sampled draft is accepted with probability
    /// `sum_x min(p(x), q(x))` against the argmax's `p(argmax q)`, which is higher wherever
    /// the target spreads its probability over tokens that the drafter also gives weight to.
    FollowRequests,
}

impl DraftSampling {
    /// The draft stream of `request`, if its drafts may be sampled: derived from the
    /// proposer's seed and the request's id (`Sampled`), or from the request's own seed alone
    /// (`FollowRequests`).
    pub(crate) fn stream_for(&self, request: &ProposeRequest<'_>) -> Option<RequestRng> {
        match *self {
            DraftSampling::Greedy => None,
            DraftSampling::Sampled { seed, .. } => Some(draft_stream(seed, request.request_id)),
            DraftSampling::FollowRequests => Some(draft_stream(request.seed, 0)),
        }
    }

    /// The temperature the drafts of a request sampled at `request_temperature` (0: greedy)
    /// are sampled at, or `None` where they are the drafter's argmax.
    pub(crate) fn temperature_for(&self, request_temperature: f32) -> Option<f32> {
        match *self {
            DraftSampling::Greedy => None,
            DraftSampling::Sampled { temperature, .. } => Some(temperature),
            DraftSampling::FollowRequests => {
                (request_temperature > 0.0).then_some(request_temperature)
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

/// The stream drawn from `seed` for request `request_id` (SplitMix64 finalizer: distinct,
/// well-mixed seeds for neighbouring ids and seeds).
fn draft_stream(seed: u64, request_id: u64) -> RequestRng {
    let mut z = seed ^ request_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    RequestRng::new(z ^ (z >> 31))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request `id` seeded `seed` that samples at 1.0.
    fn request(id: u64, seed: u64) -> ProposeRequest<'static> {
        ProposeRequest {
            request_id: id,
            tokens: &[],
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 1,
            stop: None,
            temperature: 1.0,
            seed,
            drafting_suspended: false,
        }
    }

    #[test]
    fn request_streams_are_reproducible_and_distinct() {
        let sampling = DraftSampling::Sampled {
            temperature: 1.0,
            seed: 7,
        };
        let draw = |sampling: DraftSampling, id, seed| {
            sampling.stream_for(&request(id, seed)).unwrap().next_u64()
        };
        assert_eq!(draw(sampling, 1, 0), draw(sampling, 1, 5));
        assert_ne!(draw(sampling, 1, 0), draw(sampling, 2, 0));
        assert!(DraftSampling::Greedy.stream_for(&request(1, 0)).is_none());
        // Following requests, the request's own seed decides, whatever its id.
        let following = DraftSampling::FollowRequests;
        assert_eq!(draw(following, 1, 7), draw(following, 9, 7));
        assert_ne!(draw(following, 1, 7), draw(following, 1, 8));
        assert_eq!(draw(following, 3, 7), draw(sampling, 0, 0));
    }

    #[test]
    fn drafts_follow_the_request_only_where_asked() {
        let following = DraftSampling::FollowRequests;
        assert_eq!(
            following.temperature_for(0.0),
            None,
            "greedy requests draft the argmax"
        );
        assert_eq!(following.temperature_for(0.7), Some(0.7));
        let fixed = DraftSampling::Sampled {
            temperature: 1.5,
            seed: 0,
        };
        assert_eq!(fixed.temperature_for(0.0), Some(1.5));
        assert_eq!(DraftSampling::Greedy.temperature_for(1.0), None);
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
