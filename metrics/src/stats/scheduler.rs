//! The scheduler's state after a step.

use serde::{Deserialize, Serialize};

use crate::error::MetricsError;

/// The fraction of KV-cache capacity in use, always within `0.0..=1.0`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct KvCacheUsage(f64);

impl KvCacheUsage {
    /// A usage given as a fraction; it must be finite and within `0.0..=1.0`.
    pub fn new(fraction: f64) -> Result<Self, MetricsError> {
        if fraction.is_finite() && (0.0..=1.0).contains(&fraction) {
            Ok(KvCacheUsage(fraction))
        } else {
            Err(MetricsError::InvalidStatistic {
                field: "kv_cache_usage",
                reason: format!("{fraction} is not a fraction within 0..=1"),
            })
        }
    }

    /// The usage of `used` out of `total` KV-cache blocks (`total` must be positive and at least
    /// `used`).
    pub fn from_blocks(used: u64, total: u64) -> Result<Self, MetricsError> {
        if total == 0 || used > total {
            return Err(MetricsError::InvalidStatistic {
                field: "kv_cache_usage",
                reason: format!("{used} used blocks out of {total} is not a valid usage"),
            });
        }
        Ok(KvCacheUsage(used as f64 / total as f64))
    }

    /// The fraction in use.
    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for KvCacheUsage {
    type Error = MetricsError;

    fn try_from(fraction: f64) -> Result<Self, Self::Error> {
        KvCacheUsage::new(fraction)
    }
}

impl From<KvCacheUsage> for f64 {
    fn from(usage: KvCacheUsage) -> f64 {
        usage.0
    }
}

/// The scheduler's state after one engine step. Running, waiting and KV usage set gauges;
/// preemptions add to a counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStats {
    /// Requests in the running batch.
    pub num_running_reqs: u64,
    /// Requests waiting to be scheduled.
    pub num_waiting_reqs: u64,
    /// Fraction of the KV cache in use.
    pub kv_cache_usage: KvCacheUsage,
    /// Requests preempted during this step (added to the preemption counter).
    pub num_preemptions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_accepts_fractions_only() {
        assert_eq!(KvCacheUsage::new(0.25).unwrap().fraction(), 0.25);
        assert_eq!(KvCacheUsage::from_blocks(3, 4).unwrap().fraction(), 0.75);
        assert!(KvCacheUsage::new(1.5).is_err());
        assert!(KvCacheUsage::new(-0.1).is_err());
        assert!(KvCacheUsage::new(f64::NAN).is_err());
        assert!(KvCacheUsage::from_blocks(1, 0).is_err());
        let err = KvCacheUsage::from_blocks(5, 4).unwrap_err().to_string();
        assert!(
            err.contains("kv_cache_usage") && err.contains("5 used blocks out of 4"),
            "{err}"
        );
    }

    #[test]
    fn usage_deserialization_validates() {
        let ok: KvCacheUsage = serde_json::from_str("0.5").unwrap();
        assert_eq!(ok.fraction(), 0.5);
        assert!(serde_json::from_str::<KvCacheUsage>("2.0").is_err());
    }
}
