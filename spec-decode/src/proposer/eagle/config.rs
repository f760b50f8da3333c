//! Settings of the EAGLE proposer: chains, or EAGLE-2 dynamic trees.

use super::super::ProposeRequest;
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
    /// As the request samples: the argmax for a greedy request, and for a request that
    /// samples ([`ProposeRequest::temperature`] above 0) a draft sampled from the head's
    /// softmax at the request's own temperature, from a stream derived from the request's
    /// [`ProposeRequest::seed`]. A sampled draft is accepted with probability
    /// `sum_x min(p(x), q(x))` against the argmax's `p(argmax q)`, which is higher wherever
    /// the target spreads its probability over tokens that the head also gives weight to.
    FollowRequests,
}

/// Shape of an EAGLE-2 dynamic draft tree.
///
/// Drafting expands the tree `depth` rounds: the root gets its `top_k` likeliest children, then
/// each round feeds the `top_k` best nodes of the newest depth (by cumulative draft
/// log-probability) through the head and gives each of them its `top_k` likeliest children.
/// Reranking then keeps the `num_nodes` best draft tokens of all candidates (with their
/// ancestors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagleTreeConfig {
    /// Expansion rounds = deepest draft token (>= 1).
    pub depth: usize,
    /// Children drafted per expanded node, and nodes expanded per round (>= 1).
    pub top_k: usize,
    /// Draft tokens kept after reranking (the tree's nodes besides the root, >= 1).
    pub num_nodes: usize,
}

impl EagleTreeConfig {
    /// Checks that every size is at least 1.
    pub fn validate(&self) -> Result<(), SamplingError> {
        for (name, value) in [
            ("tree.depth", self.depth),
            ("tree.top_k", self.top_k),
            ("tree.num_nodes", self.num_nodes),
        ] {
            if value == 0 {
                return Err(SamplingError {
                    name,
                    expected: "at least 1",
                    value: 0.0,
                });
            }
        }
        Ok(())
    }
}

/// Settings of an [`EagleProposer`](super::EagleProposer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EagleProposerConfig {
    /// Draft tokens per request and step (`k`), at least 1; with a tree, its `num_nodes`.
    pub num_speculative_tokens: usize,
    /// How draft tokens are chosen.
    pub sampling: DraftSampling,
    /// `Some`: EAGLE-2 trees of this shape instead of chains (greedy drafting only).
    pub tree: Option<EagleTreeConfig>,
}

impl EagleProposerConfig {
    /// Greedy chains of `num_speculative_tokens` tokens.
    pub fn greedy(num_speculative_tokens: usize) -> Self {
        Self {
            num_speculative_tokens,
            sampling: DraftSampling::Greedy,
            tree: None,
        }
    }

    /// Greedy EAGLE-2 trees of shape `tree` (`num_speculative_tokens = tree.num_nodes`).
    pub fn tree(tree: EagleTreeConfig) -> Self {
        Self {
            num_speculative_tokens: tree.num_nodes,
            sampling: DraftSampling::Greedy,
            tree: Some(tree),
        }
    }

    /// Checks `num_speculative_tokens >= 1` and a finite positive sampling temperature; with a
    /// tree, also its sizes (see [`EagleTreeConfig::validate`]), greedy drafting and
    /// `num_speculative_tokens == tree.num_nodes`.
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
        let Some(tree) = self.tree else {
            return Ok(());
        };
        tree.validate()?;
        if self.sampling != DraftSampling::Greedy {
            return Err(SamplingError {
                name: "sampling",
                expected: "DraftSampling::Greedy when tree is set (trees take the top-k children)",
                value: match self.sampling {
                    DraftSampling::Sampled { temperature, .. } => temperature,
                    _ => f32::NAN,
                },
            });
        }
        if self.num_speculative_tokens != tree.num_nodes {
            return Err(SamplingError {
                name: "num_speculative_tokens",
                expected: "equal to tree.num_nodes",
                value: self.num_speculative_tokens as f32,
            });
        }
        Ok(())
    }

    /// The most draft steps of one call: the chain length, or the tree's depth. A request's
    /// `max_draft_tokens` and its context room can only lower it.
    pub(super) fn max_draft_depth(&self) -> usize {
        self.tree
            .map_or(self.num_speculative_tokens, |tree| tree.depth)
    }
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
    /// are sampled at, or `None` where they are the head's argmax.
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
            tree: None,
        };
        assert_eq!(hot.validate().unwrap_err().name, "draft temperature");
        assert!(EagleProposerConfig::greedy(3).validate().is_ok());
    }

    #[test]
    fn impossible_tree_settings_name_the_field() {
        let shape = EagleTreeConfig {
            depth: 3,
            top_k: 2,
            num_nodes: 2,
        };
        let config = EagleProposerConfig::tree(shape);
        assert_eq!(config.num_speculative_tokens, 2);
        assert_eq!(config.sampling, DraftSampling::Greedy);
        assert!(config.validate().is_ok(), "num_nodes < depth is allowed");
        assert_eq!(config.max_draft_depth(), 3);
        assert_eq!(EagleProposerConfig::greedy(4).max_draft_depth(), 4);
        assert_eq!(EagleProposerConfig::greedy(4).tree, None);
        for (name, shape) in [
            ("tree.depth", EagleTreeConfig { depth: 0, ..shape }),
            ("tree.top_k", EagleTreeConfig { top_k: 0, ..shape }),
            (
                "tree.num_nodes",
                EagleTreeConfig {
                    num_nodes: 0,
                    ..shape
                },
            ),
        ] {
            let err = EagleProposerConfig {
                num_speculative_tokens: 2,
                ..EagleProposerConfig::tree(shape)
            }
            .validate()
            .unwrap_err();
            assert_eq!(err.name, name);
        }
        let sampled = EagleProposerConfig {
            sampling: DraftSampling::Sampled {
                temperature: 0.5,
                seed: 1,
            },
            ..config
        };
        let err = sampled.validate().unwrap_err();
        assert_eq!(err.name, "sampling");
        assert!(err.to_string().contains("Greedy"), "{err}");
        let mismatched = EagleProposerConfig {
            num_speculative_tokens: 3,
            ..config
        };
        let err = mismatched.validate().unwrap_err();
        assert_eq!((err.name, err.value), ("num_speculative_tokens", 3.0));
    }

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
        let tree = EagleProposerConfig {
            sampling: following,
            ..EagleProposerConfig::tree(EagleTreeConfig {
                depth: 2,
                top_k: 2,
                num_nodes: 3,
            })
        };
        assert_eq!(tree.validate().unwrap_err().name, "sampling");
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
