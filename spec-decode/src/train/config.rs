//! [`TrainConfig`]: the hyper-parameters of a head's training run.

use serde::{Deserialize, Serialize};

use super::objective::Objective;
use super::TrainError;

/// Hyper-parameters of a training run.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// The loss.
    pub objective: Objective,
    /// Passes over the training sequences.
    pub epochs: usize,
    /// Most tokens per batch (a longer sequence forms a batch alone).
    pub batch_tokens: usize,
    /// Peak learning rate (AdamW).
    pub learning_rate: f64,
    /// Fraction of the steps spent warming up linearly.
    pub warmup_fraction: f64,
    /// Final learning rate of the cosine decay, as a fraction of the peak.
    pub min_lr_ratio: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f32,
    /// Gradient clipping: largest L2 norm of each parameter's gradient.
    pub grad_clip: f32,
    /// Draft steps unrolled per training row (training-time test; 1 = none).
    pub unroll: usize,
    /// Loss weight of unrolled step `j` is `unroll_decay^j`.
    pub unroll_decay: f32,
    /// Total width of the uniform noise added to step-0 input features (0 = none).
    pub noise: f32,
    /// Every `val_every`-th recorded sequence is held out for validation (0 = none).
    pub val_every: usize,
    /// Validate every this many optimizer steps (and at the end).
    pub eval_every: usize,
    /// Chain length the validation simulates (the `k` of the acceptance estimate).
    pub eval_chain: usize,
    /// Save a checkpoint every this many optimizer steps (and at the end).
    pub checkpoint_every: usize,
    /// Seed of batch order and noise.
    pub seed: u64,
    /// Stop after this many optimizer steps of the schedule (a later run with a checkpoint
    /// directory resumes from there); `None` runs the whole schedule.
    pub stop_after: Option<usize>,
}

impl TrainConfig {
    /// Defaults for EAGLE-1 (reference loss weights and noise, no unrolling, 4 epochs).
    pub fn eagle1() -> Self {
        Self {
            objective: Objective::eagle1(),
            epochs: 4,
            batch_tokens: 2048,
            learning_rate: 1e-3,
            warmup_fraction: 0.05,
            min_lr_ratio: 0.1,
            weight_decay: 0.0,
            grad_clip: 0.5,
            unroll: 1,
            unroll_decay: 0.8,
            noise: 0.2,
            val_every: 20,
            eval_every: 50,
            eval_chain: 3,
            checkpoint_every: 50,
            seed: 0,
            stop_after: None,
        }
    }

    /// Defaults for EAGLE-3 (token loss only, training-time test over 3 steps, no noise; six
    /// epochs, about 35 minutes on 2 CPU cores for 512 prompts).
    pub fn eagle3() -> Self {
        Self {
            objective: Objective::Eagle3,
            epochs: 6,
            unroll: 3,
            noise: 0.0,
            ..Self::eagle1()
        }
    }

    /// Checks that the run can happen.
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |message: &str| Err(TrainError::Config(message.to_string()));
        if self.epochs == 0 || self.batch_tokens < 2 {
            return bad("epochs and batch_tokens must be positive (batch_tokens >= 2)");
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return bad("learning_rate must be positive");
        }
        if !(0.0..1.0).contains(&self.warmup_fraction) || !(0.0..=1.0).contains(&self.min_lr_ratio)
        {
            return bad("warmup_fraction must be in [0, 1) and min_lr_ratio in [0, 1]");
        }
        if self.unroll == 0 || self.eval_chain == 0 {
            return bad("unroll and eval_chain must be at least 1");
        }
        let positive = self.grad_clip.is_finite() && self.grad_clip > 0.0;
        if !positive || self.noise < 0.0 || self.weight_decay < 0.0 {
            return bad("grad_clip must be positive; noise and weight_decay not negative");
        }
        if self.eval_every == 0 || self.checkpoint_every == 0 {
            return bad("eval_every and checkpoint_every must be positive");
        }
        Ok(())
    }
}

/// One optimizer step of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainPoint {
    /// Optimizer step (1-based).
    pub step: usize,
    /// Epoch of the step (0-based).
    pub epoch: usize,
    /// Training tokens consumed so far.
    pub tokens_seen: u64,
    /// The batch loss.
    pub loss: f32,
    /// The learning rate used.
    pub lr: f64,
    /// Top-1 accuracy of each unrolled step on the batch.
    pub accuracy: Vec<f64>,
}

/// One validation of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// Optimizer steps done.
    pub step: usize,
    /// Training tokens consumed so far.
    pub tokens_seen: u64,
    /// Mean validation loss per batch.
    pub loss: f32,
    /// Top-1 accuracy of each draft step of the simulated chain (teacher-forced).
    pub accuracy: Vec<f64>,
    /// Mean acceptance length of greedy chains of `eval_chain` drafts at temperature 0.
    pub acceptance_length: f64,
    /// The same scores on each of the data's validation sets
    /// ([`super::DistillData::with_validation_set`]), in their order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<SetScores>,
}

/// The validation scores of one named set of sequences that never train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetScores {
    /// The set's name.
    pub name: String,
    /// Mean loss per batch.
    pub loss: f32,
    /// Top-1 accuracy of each draft step of the simulated chain (teacher-forced).
    pub accuracy: Vec<f64>,
    /// Mean acceptance length of greedy chains of `eval_chain` drafts at temperature 0.
    pub acceptance_length: f64,
}

/// The losses and validations of a run (kept across resumes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainHistory {
    /// Every optimizer step.
    pub train: Vec<TrainPoint>,
    /// Every validation.
    pub evals: Vec<EvalPoint>,
}
