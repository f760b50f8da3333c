//! Lifecycle timestamps of one request, on a monotonic clock, and the latencies derived from
//! them for [`RequestMetrics`] and the metrics recorder.

use std::time::{Duration, Instant, SystemTime};

use aquila_metrics::FinishedRequestStats;

use crate::output::{FinishReason, RequestMetrics};

/// When a request reached each stage.
#[derive(Clone, Debug)]
pub(crate) struct RequestTiming {
    /// Arrival, monotonic.
    arrival: Instant,
    /// Arrival, wall clock (the base the other wall-clock times are derived from).
    arrival_wall: SystemTime,
    /// Last time it entered the waiting queue (arrival, or a preemption).
    queued: Instant,
    /// First time it was scheduled.
    first_scheduled: Option<Instant>,
    /// Last time it was admitted from the waiting queue.
    last_scheduled: Option<Instant>,
    /// When its first token was generated.
    first_token: Option<Instant>,
    /// When its latest token was generated.
    last_token: Option<Instant>,
    /// When it finished.
    finished: Option<Instant>,
}

/// The latency a step's new tokens contribute to the iteration statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenLatency {
    /// The request's first tokens: time from arrival.
    FirstToken(Duration),
    /// Later tokens: time since the previous step that generated tokens for it.
    InterToken(Duration),
}

impl RequestTiming {
    /// A request arriving at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            arrival: now,
            arrival_wall: SystemTime::now(),
            queued: now,
            first_scheduled: None,
            last_scheduled: None,
            first_token: None,
            last_token: None,
            finished: None,
        }
    }

    /// The request was admitted from the waiting queue at `now`.
    pub fn scheduled(&mut self, now: Instant) {
        self.first_scheduled.get_or_insert(now);
        self.last_scheduled = Some(now);
    }

    /// The request was preempted at `now` and waits again.
    pub fn preempted(&mut self, now: Instant) {
        self.queued = now;
    }

    /// The request generated tokens at `now`; returns the latency to report.
    pub fn tokens_generated(&mut self, now: Instant) -> TokenLatency {
        let latency = match self.last_token {
            None => {
                self.first_token = Some(now);
                TokenLatency::FirstToken(now - self.arrival)
            }
            Some(previous) => TokenLatency::InterToken(now - previous),
        };
        self.last_token = Some(now);
        latency
    }

    /// The request finished at `now`.
    pub fn finished(&mut self, now: Instant) {
        self.finished = Some(now);
    }

    /// The recorder's statistics of the finished request (vLLM's intervals: queue = last
    /// queueing to last scheduling; prefill = last scheduling to first token; decode = first
    /// to last token; inference = last scheduling to last token; e2e = arrival to finish).
    /// Stages never reached count as zero.
    pub fn finished_stats(
        &self,
        reason: FinishReason,
        num_prompt_tokens: usize,
        num_generation_tokens: usize,
    ) -> FinishedRequestStats {
        let finished = self.finished.unwrap_or(self.arrival);
        let scheduled = self.last_scheduled;
        let since = |later: Option<Instant>, earlier: Option<Instant>| match (later, earlier) {
            (Some(later), Some(earlier)) => later.saturating_duration_since(earlier),
            _ => Duration::ZERO,
        };
        FinishedRequestStats {
            finish_reason: reason,
            e2e_latency: finished - self.arrival,
            queue_time: since(scheduled, Some(self.queued)),
            prefill_time: since(self.first_token, scheduled),
            decode_time: since(self.last_token, self.first_token),
            inference_time: since(self.last_token, scheduled),
            num_prompt_tokens: num_prompt_tokens as u64,
            num_generation_tokens: num_generation_tokens as u64,
        }
    }

    /// The per-request metrics (spec-decode counts and preemptions are filled in by the caller).
    pub fn request_metrics(
        &self,
        num_prompt_tokens: usize,
        num_generation_tokens: usize,
    ) -> RequestMetrics {
        let wall = |at: Option<Instant>| at.map(|at| self.arrival_wall + (at - self.arrival));
        let since_arrival = |at: Option<Instant>| at.map(|at| at - self.arrival);
        RequestMetrics {
            arrival_time: self.arrival_wall,
            first_scheduled_time: wall(self.first_scheduled),
            first_token_time: wall(self.first_token),
            finished_time: wall(self.finished),
            queue_time: since_arrival(self.first_scheduled),
            time_to_first_token: since_arrival(self.first_token),
            e2e_latency: since_arrival(self.finished),
            num_prompt_tokens,
            num_generation_tokens,
            num_preemptions: 0,
            num_drafts: 0,
            num_draft_tokens: 0,
            num_accepted_tokens: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn intervals_follow_the_lifecycle() {
        let t0 = Instant::now();
        let mut timing = RequestTiming::new(t0);
        timing.scheduled(t0 + ms(10));
        assert_eq!(
            timing.tokens_generated(t0 + ms(30)),
            TokenLatency::FirstToken(ms(30))
        );
        timing.preempted(t0 + ms(40));
        timing.scheduled(t0 + ms(50));
        assert_eq!(
            timing.tokens_generated(t0 + ms(70)),
            TokenLatency::InterToken(ms(40))
        );
        timing.finished(t0 + ms(75));

        let stats = timing.finished_stats(FinishReason::Length, 4, 2);
        assert_eq!(stats.finish_reason, FinishReason::Length);
        assert_eq!(stats.e2e_latency, ms(75));
        assert_eq!(
            stats.queue_time,
            ms(10),
            "requeued at 40, rescheduled at 50"
        );
        assert_eq!(
            stats.prefill_time,
            Duration::ZERO,
            "first token came before the last scheduling"
        );
        assert_eq!(stats.decode_time, ms(40));
        assert_eq!(stats.inference_time, ms(20));
        assert_eq!(
            (stats.num_prompt_tokens, stats.num_generation_tokens),
            (4, 2)
        );

        let metrics = timing.request_metrics(4, 2);
        assert_eq!(metrics.queue_time, Some(ms(10)));
        assert_eq!(metrics.time_to_first_token, Some(ms(30)));
        assert_eq!(metrics.e2e_latency, Some(ms(75)));
        let first_token = metrics.first_token_time.unwrap();
        assert_eq!(
            first_token.duration_since(metrics.arrival_time).unwrap(),
            ms(30)
        );
    }

    #[test]
    fn a_request_aborted_while_waiting_has_zero_phases() {
        let t0 = Instant::now();
        let mut timing = RequestTiming::new(t0);
        timing.finished(t0 + ms(5));
        let stats = timing.finished_stats(FinishReason::Abort, 3, 0);
        assert_eq!(stats.e2e_latency, ms(5));
        assert_eq!(stats.queue_time, Duration::ZERO);
        assert_eq!(stats.decode_time, Duration::ZERO);
        let metrics = timing.request_metrics(3, 0);
        assert_eq!(metrics.first_scheduled_time, None);
        assert_eq!(metrics.time_to_first_token, None);
    }
}
