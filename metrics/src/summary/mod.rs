//! Figures derived from a snapshot or a delta: speculative-decoding acceptance, engine
//! throughput and the time of a step's phases.

mod engine;
mod spec_decode;
mod step_times;

use std::time::Duration;

pub use engine::EngineSummary;
pub use spec_decode::SpecDecodeSummary;
pub use step_times::StepTimeSummary;

/// `amount` per second over `window`; `None` without a window or over an empty one.
fn per_second(amount: u64, window: Option<Duration>) -> Option<f64> {
    let seconds = window?.as_secs_f64();
    (seconds > 0.0).then(|| amount as f64 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_needs_a_non_empty_window() {
        assert_eq!(per_second(30, Some(Duration::from_secs(3))), Some(10.0));
        assert_eq!(per_second(30, Some(Duration::ZERO)), None);
        assert_eq!(per_second(30, None), None);
    }
}
