//! Engine throughput and load figures.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::per_second;
use crate::family::Family;
use crate::namespace::Namespace;
use crate::snapshot::Snapshot;

/// Engine load and throughput over the span a snapshot covers, summed over every engine
/// (KV-cache usage is their mean) unless the snapshot was narrowed with [`Snapshot::select`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineSummary {
    /// Prompt tokens computed.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generation_tokens: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Requests running at the time of the snapshot.
    pub running: u64,
    /// Requests waiting at the time of the snapshot.
    pub waiting: u64,
    /// Mean KV-cache usage fraction at the time of the snapshot.
    pub kv_cache_usage: f64,
    /// The span the counts cover, when known.
    pub window: Option<Duration>,
}

impl EngineSummary {
    /// Reads the engine families of `namespace` from `snapshot`. Missing families count as zero.
    pub fn from_snapshot(snapshot: &Snapshot, namespace: Namespace) -> Self {
        let counter = |family: Family| snapshot.counter_total(&family.name(namespace)).unwrap_or(0);
        // Gauges hold whole request counts; rounding removes float noise only.
        let requests = |family: Family| {
            snapshot
                .gauge_total(&family.name(namespace))
                .unwrap_or(0.0)
                .max(0.0)
                .round() as u64
        };
        EngineSummary {
            prompt_tokens: counter(Family::PromptTokens),
            generation_tokens: counter(Family::GenerationTokens),
            preemptions: counter(Family::NumPreemptions),
            running: requests(Family::NumRequestsRunning),
            waiting: requests(Family::NumRequestsWaiting),
            kv_cache_usage: snapshot
                .gauge_mean(&Family::KvCacheUsage.name(namespace))
                .unwrap_or(0.0),
            window: snapshot.window,
        }
    }

    /// Prompt tokens per second over the window (`None` without a window).
    pub fn prompt_throughput(&self) -> Option<f64> {
        per_second(self.prompt_tokens, self.window)
    }

    /// Generated tokens per second over the window (`None` without a window).
    pub fn generation_throughput(&self) -> Option<f64> {
        per_second(self.generation_tokens, self.window)
    }

    /// Whether nothing was computed over the window and no request is running or waiting.
    pub fn is_idle(&self) -> bool {
        self.prompt_tokens == 0
            && self.generation_tokens == 0
            && self.running == 0
            && self.waiting == 0
    }

    /// The periodic log line, in the style of vLLM's: `Avg prompt throughput: ... tokens/s, Avg
    /// generation throughput: ... tokens/s, Running: N reqs, Waiting: N reqs, KV cache usage: x%`
    /// (with `Preemptions: N` after the waiting requests when there were any).
    pub fn log_line(&self) -> String {
        let preemptions = if self.preemptions > 0 {
            format!(", Preemptions: {}", self.preemptions)
        } else {
            String::new()
        };
        format!(
            "Avg prompt throughput: {:.1} tokens/s, Avg generation throughput: {:.1} tokens/s, \
             Running: {} reqs, Waiting: {} reqs{preemptions}, KV cache usage: {:.1}%",
            self.prompt_throughput().unwrap_or(0.0),
            self.generation_throughput().unwrap_or(0.0),
            self.running,
            self.waiting,
            100.0 * self.kv_cache_usage,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_line_format() {
        let mut summary = EngineSummary {
            prompt_tokens: 1000,
            generation_tokens: 250,
            preemptions: 0,
            running: 3,
            waiting: 1,
            kv_cache_usage: 0.125,
            window: Some(Duration::from_secs(10)),
        };
        assert_eq!(
            summary.log_line(),
            "Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 25.0 tokens/s, \
             Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 12.5%"
        );
        summary.preemptions = 2;
        assert!(summary
            .log_line()
            .contains("Waiting: 1 reqs, Preemptions: 2, KV cache usage"));
        assert!(!summary.is_idle());
        assert!(EngineSummary::default().is_idle());
    }
}
