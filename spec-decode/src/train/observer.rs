//! [`TrainObserver`]: how a caller follows a run (progress bars, logs).

use super::{EvalPoint, TrainPoint};

/// Callbacks of a training run; every method does nothing by default.
pub trait TrainObserver {
    /// The run starts at `start_step` of `total_steps` (non-zero when resumed).
    fn on_start(&mut self, _total_steps: usize, _start_step: usize) {}
    /// An optimizer step finished.
    fn on_step(&mut self, _point: &TrainPoint) {}
    /// A validation finished.
    fn on_eval(&mut self, _point: &EvalPoint) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct SilentObserver;

impl TrainObserver for SilentObserver {}
