//! The learning-rate schedule: linear warm-up, then cosine decay to a floor.

/// Linear warm-up from 0 to `peak` over `warmup_steps`, then cosine decay to
/// `peak * min_ratio` at `total_steps` (and flat after).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosine {
    /// Peak learning rate.
    pub peak: f64,
    /// Steps of linear warm-up.
    pub warmup_steps: usize,
    /// Total number of optimizer steps.
    pub total_steps: usize,
    /// Final learning rate as a fraction of the peak.
    pub min_ratio: f64,
}

impl WarmupCosine {
    /// Learning rate of optimizer step `step` (0-based).
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.peak * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_then_decays_to_the_floor() {
        let schedule = WarmupCosine {
            peak: 1.0,
            warmup_steps: 4,
            total_steps: 14,
            min_ratio: 0.1,
        };
        assert_eq!(schedule.lr(0), 0.25);
        assert_eq!(schedule.lr(3), 1.0);
        assert!((schedule.lr(4) - 1.0).abs() < 1e-12);
        assert!((schedule.lr(9) - 0.55).abs() < 1e-12);
        assert!((schedule.lr(14) - 0.1).abs() < 1e-12);
        assert!((schedule.lr(100) - 0.1).abs() < 1e-12);
        let lrs: Vec<f64> = (4..15).map(|s| schedule.lr(s)).collect();
        assert!(lrs.windows(2).all(|w| w[1] <= w[0]));
    }
}
