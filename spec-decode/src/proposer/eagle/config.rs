//! Settings of the EAGLE proposer: chains, or EAGLE-2 dynamic trees.

use super::super::DraftSampling;
use crate::sampling::SamplingError;

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

    #[test]
    fn trees_draft_greedily() {
        let following = DraftSampling::FollowRequests;
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
}
