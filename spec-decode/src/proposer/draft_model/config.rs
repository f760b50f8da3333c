//! Settings of the draft-model proposer, and what keeps a draft model from serving a target.

use super::super::DraftSampling;

/// Settings of a [`DraftModelProposer`](super::DraftModelProposer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftModelProposerConfig {
    /// Most draft tokens per request and step (`k`), at least 1.
    pub num_speculative_tokens: usize,
    /// How draft tokens are chosen from the draft model's logits.
    pub sampling: DraftSampling,
    /// Most rows a request asked to draft takes in per call, at least 1. A longer backlog
    /// (left by a long suspension of drafting) goes through in calls of this many rows, the
    /// request drafting nothing until the last, so that no call runs far more rows than a
    /// step's budget; a request that is not asked to draft takes in its whole backlog (a
    /// prompt's prefill chunk).
    pub max_catch_up_rows: usize,
    /// Whether the rows the target committed are copied from its KV cache
    /// ([`ProposeBatch::target_kv`](crate::proposer::ProposeBatch::target_kv)) instead of run
    /// through the draft model, which then runs only each chain's root and drafts. Right for a
    /// draft model that is the target itself in other weights (the same layers: the target's
    /// keys and values are its own, computed at the target's precision), so the prompt is
    /// never prefilled twice; the proposer checks that the shapes of the two caches agree. A
    /// batch that offers no target cache has its rows run as without it.
    pub copies_target_cache: bool,
}

/// [`DraftModelProposerConfig::max_catch_up_rows`] by default: the engine's default budget of
/// rows per step, so that a prompt prefilled in one chunk is taken in with its first drafts.
pub const DEFAULT_MAX_CATCH_UP_ROWS: usize = 2048;

impl DraftModelProposerConfig {
    /// Chains of the draft model's argmax, `num_speculative_tokens` long.
    pub fn greedy(num_speculative_tokens: usize) -> Self {
        Self {
            num_speculative_tokens,
            sampling: DraftSampling::Greedy,
            max_catch_up_rows: DEFAULT_MAX_CATCH_UP_ROWS,
            copies_target_cache: false,
        }
    }
}

/// Why a draft model cannot draft for a target.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DraftModelError {
    /// `num_speculative_tokens` is 0.
    #[error("num_speculative_tokens must be at least 1")]
    NoDraftTokens,
    /// `max_catch_up_rows` is 0.
    #[error("max_catch_up_rows must be at least 1")]
    NoCatchUpRows,
    /// No draft-cache slot was asked for.
    #[error("num_slots must be at least 1 (one per request the engine runs at once)")]
    NoSlots,
    /// A fixed draft temperature that is not finite and positive.
    #[error("the draft temperature must be finite and > 0, got {0}")]
    Temperature(f32),
    /// The models' vocabularies differ in size, so their token ids cannot be the same.
    #[error(
        "the draft model's vocabulary has {draft} tokens and the target's {target}: a draft model \
         must share the target's tokenizer"
    )]
    VocabMismatch {
        /// Draft model vocabulary size.
        draft: usize,
        /// Target vocabulary size.
        target: usize,
    },
    /// The draft model is to copy the target's keys and values, but its layers differ from
    /// the target's.
    #[error(
        "the draft model cannot take the target's keys and values: its layers are {draft}, the \
         target's {target}"
    )]
    CacheMismatch {
        /// The draft model's layers (count, KV heads, head width, RoPE).
        draft: String,
        /// The target's.
        target: String,
    },
    /// The draft model's context is shorter than the target's.
    #[error("the draft model's context holds {draft} positions, fewer than the target's {target}")]
    ShortContext {
        /// Draft model `max_position_embeddings`.
        draft: usize,
        /// Target `max_position_embeddings`.
        target: usize,
    },
}

impl DraftModelProposerConfig {
    /// Checks `num_speculative_tokens >= 1`, `max_catch_up_rows >= 1` and a finite positive
    /// fixed draft temperature.
    pub fn validate(&self) -> Result<(), DraftModelError> {
        if self.num_speculative_tokens == 0 {
            return Err(DraftModelError::NoDraftTokens);
        }
        if self.max_catch_up_rows == 0 {
            return Err(DraftModelError::NoCatchUpRows);
        }
        if let DraftSampling::Sampled { temperature, .. } = self.sampling {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(DraftModelError::Temperature(temperature));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_settings_are_named() {
        assert_eq!(
            DraftModelProposerConfig::greedy(0).validate(),
            Err(DraftModelError::NoDraftTokens)
        );
        let hot = DraftModelProposerConfig {
            sampling: DraftSampling::Sampled {
                temperature: f32::INFINITY,
                seed: 0,
            },
            ..DraftModelProposerConfig::greedy(2)
        };
        assert_eq!(
            hot.validate(),
            Err(DraftModelError::Temperature(f32::INFINITY))
        );
        let stalled = DraftModelProposerConfig {
            max_catch_up_rows: 0,
            ..DraftModelProposerConfig::greedy(2)
        };
        assert_eq!(stalled.validate(), Err(DraftModelError::NoCatchUpRows));
        assert_eq!(DraftModelProposerConfig::greedy(4).validate(), Ok(()));
        let message = DraftModelError::VocabMismatch {
            draft: 100,
            target: 49152,
        }
        .to_string();
        assert!(
            message.contains("100") && message.contains("tokenizer"),
            "{message}"
        );
    }
}
