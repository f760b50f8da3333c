//! Settings of the draft-model proposer, and what keeps a draft model from serving a target.

use super::super::DraftSampling;

/// Settings of a [`DraftModelProposer`](super::DraftModelProposer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftModelProposerConfig {
    /// Most draft tokens per request and step (`k`), at least 1.
    pub num_speculative_tokens: usize,
    /// How draft tokens are chosen from the draft model's logits.
    pub sampling: DraftSampling,
}

impl DraftModelProposerConfig {
    /// Chains of the draft model's argmax, `num_speculative_tokens` long.
    pub fn greedy(num_speculative_tokens: usize) -> Self {
        Self {
            num_speculative_tokens,
            sampling: DraftSampling::Greedy,
        }
    }
}

/// Why a draft model cannot draft for a target.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DraftModelError {
    /// `num_speculative_tokens` is 0.
    #[error("num_speculative_tokens must be at least 1")]
    NoDraftTokens,
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
    /// Checks `num_speculative_tokens >= 1` and a finite positive fixed draft temperature.
    pub fn validate(&self) -> Result<(), DraftModelError> {
        if self.num_speculative_tokens == 0 {
            return Err(DraftModelError::NoDraftTokens);
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
