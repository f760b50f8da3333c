//! The training objectives of EAGLE heads, as differentiable burn expressions.
//!
//! * EAGLE-1: `feature_weight * SmoothL1(f̂, f) + token_weight * CE(p_target, lm_head(f̂))`, the
//!   target distribution `p_target = softmax(lm_head(f))` of the true next feature.
//! * EAGLE-3: cross-entropy against the target's greedy token in the draft vocabulary (rows
//!   whose token is outside it carry no loss).
//! * EAGLE-3 distillation: cross-entropy against the target's recorded top-k distribution,
//!   restricted to the draft vocabulary and renormalized there.

use burn::nn::loss::{CrossEntropyLossConfig, HuberLossConfig, Reduction};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// Which loss a head is trained with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// Feature regression plus soft cross-entropy through the target's frozen lm_head.
    Eagle1 {
        /// Weight of the SmoothL1 feature loss.
        feature_weight: f32,
        /// Weight of the token cross-entropy.
        token_weight: f32,
    },
    /// Cross-entropy over the draft vocabulary against the target's greedy token.
    Eagle3,
    /// Cross-entropy over the draft vocabulary against the target's recorded top-k
    /// distribution (needs shards recorded with top-k).
    Eagle3Distill,
}

impl Objective {
    /// EAGLE-1 with the reference weights (1.0 feature, 0.1 token).
    pub fn eagle1() -> Self {
        Objective::Eagle1 {
            feature_weight: 1.0,
            token_weight: 0.1,
        }
    }
}

/// Mean SmoothL1 (Huber with delta 1) between `[rows, H]` predictions and targets.
pub fn smooth_l1<B: Backend>(predicted: Tensor<B, 2>, target: Tensor<B, 2>) -> Tensor<B, 1> {
    HuberLossConfig::new(1.0)
        .init()
        .forward(predicted, target, Reduction::Mean)
}

/// Mean over rows of `-sum_v p_target[v] * log_softmax(logits)[v]`.
pub fn soft_cross_entropy<B: Backend>(
    logits: Tensor<B, 2>,
    target_probs: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let [rows, _] = logits.dims();
    (target_probs * log_softmax(logits, 1))
        .sum()
        .neg()
        .div_scalar(rows.max(1) as f32)
}

/// Mean cross-entropy of `logits` against class `labels`.
pub fn hard_cross_entropy<B: Backend>(
    logits: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, labels)
}

/// Mean over rows of `-sum_j probs[r, j] * log_softmax(logits)[r, ids[r, j]]`: the soft
/// cross-entropy of a sparse target distribution (`[rows, K]` class ids and probabilities;
/// padding entries have probability 0).
pub fn sparse_soft_cross_entropy<B: Backend>(
    logits: Tensor<B, 2>,
    ids: Tensor<B, 2, Int>,
    probs: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let [rows, _] = logits.dims();
    (log_softmax(logits, 1).gather(1, ids) * probs)
        .sum()
        .neg()
        .div_scalar(rows.max(1) as f32)
}

/// `softmax(logits)` without gradient (a target distribution).
pub fn target_distribution<B: Backend>(logits: Tensor<B, 2>) -> Tensor<B, 2> {
    softmax(logits.detach(), 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type B = Flex;

    fn tensor(values: Vec<f32>, shape: [usize; 2]) -> Tensor<B, 2> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn soft_cross_entropy_of_a_one_hot_target_is_the_hard_one() {
        let logits = tensor(vec![1.0, 2.0, 0.5, -1.0, 0.0, 3.0], [2, 3]);
        let one_hot = tensor(vec![0.0, 1.0, 0.0, 0.0, 0.0, 1.0], [2, 3]);
        let labels = Tensor::<B, 1, Int>::from_data(
            TensorData::new(vec![1i64, 2], [2]),
            &Default::default(),
        );
        let soft: f32 = soft_cross_entropy(logits.clone(), one_hot).into_scalar();
        let hard: f32 = hard_cross_entropy(logits, labels).into_scalar();
        assert!((soft - hard).abs() < 1e-5, "{soft} vs {hard}");
    }

    #[test]
    fn sparse_soft_cross_entropy_matches_the_dense_one() {
        let logits = tensor(vec![1.0, 2.0, 0.5, -1.0, 0.0, 3.0], [2, 3]);
        let dense = tensor(vec![0.0, 0.75, 0.25, 0.5, 0.0, 0.5], [2, 3]);
        let ids = Tensor::<B, 2, Int>::from_data(
            TensorData::new(vec![1i64, 2, 0, 2], [2, 2]),
            &Default::default(),
        );
        let probs = tensor(vec![0.75, 0.25, 0.5, 0.5], [2, 2]);
        let sparse: f32 = sparse_soft_cross_entropy(logits.clone(), ids, probs).into_scalar();
        let reference: f32 = soft_cross_entropy(logits, dense).into_scalar();
        assert!((sparse - reference).abs() < 1e-5, "{sparse} vs {reference}");
    }

    #[test]
    fn smooth_l1_is_quadratic_near_zero_and_linear_far() {
        let zero = tensor(vec![0.0, 0.0], [1, 2]);
        let near: f32 = smooth_l1(tensor(vec![0.5, -0.5], [1, 2]), zero.clone()).into_scalar();
        let far: f32 = smooth_l1(tensor(vec![3.0, -3.0], [1, 2]), zero).into_scalar();
        assert!((near - 0.125).abs() < 1e-6, "{near}");
        assert!((far - 2.5).abs() < 1e-6, "{far}");
    }
}
