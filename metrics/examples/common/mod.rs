//! A deterministic simulated serving workload that feeds a [`Recorder`] realistic statistics:
//! several engines, each batching several requests through prefill and speculative decode steps
//! with k-token drafts. Shared by the examples, the integration tests and the benchmark.

// Each including target uses a different part of this module.
#![allow(dead_code)]

use std::time::Duration;

use aquila_metrics::{
    EngineRecorder, EventSink, FinishReason, FinishedRequestStats, IterationStats, KvCacheUsage,
    Recorder, SchedulerStats, SpecDecodeEvent,
};

/// Shape of the simulated traffic.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Requests each engine serves.
    pub requests_per_engine: usize,
    /// Requests an engine runs at once.
    pub max_batch: usize,
    /// Draft tokens per verification.
    pub k: usize,
    /// Probability that the target accepts a draft token, given all earlier ones were accepted.
    pub acceptance: f64,
    /// KV-cache capacity of an engine, in tokens.
    pub kv_capacity_tokens: u64,
    /// Seed of the deterministic generator.
    pub seed: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            requests_per_engine: 12,
            max_batch: 4,
            k: 3,
            acceptance: 0.7,
            kv_capacity_tokens: 4096,
            seed: 0x5eed,
        }
    }
}

/// Totals the simulation produced, to check recorded metrics against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadTotals {
    /// Speculative-decoding events sent.
    pub events: u64,
    /// Requests finished.
    pub finished: u64,
    /// Tokens generated.
    pub generated: u64,
    /// Prompt tokens computed.
    pub prompt: u64,
    /// Simulated time the slowest engine took (engines run side by side).
    pub simulated_time: Duration,
}

/// One simulated request.
struct Request {
    id: u64,
    prompt_tokens: u64,
    max_tokens: u64,
    generated: u64,
    scheduled_at: Duration,
    first_token_at: Option<Duration>,
    last_token_at: Duration,
    /// Whether the request ends with EOS (after `max_tokens / 2` tokens) or by length.
    stops_early: bool,
    aborts: bool,
}

/// A small deterministic generator (xorshift64*), so examples and tests see the same traffic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn chance(&mut self, probability: f64) -> bool {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        unit < probability
    }
}

impl Workload {
    /// Runs the workload on every engine of `recorder`.
    pub fn run(&self, recorder: &Recorder) -> WorkloadTotals {
        let mut totals = WorkloadTotals::default();
        for (index, engine) in recorder.engines().iter().enumerate() {
            let mut rng = Rng(self.seed.wrapping_add(index as u64 * 0x9e37_79b9).max(1));
            self.run_engine(engine, &mut rng, &mut totals);
        }
        totals
    }

    fn run_engine(&self, engine: &EngineRecorder, rng: &mut Rng, totals: &mut WorkloadTotals) {
        let mut waiting: Vec<Request> = (0..self.requests_per_engine as u64)
            .map(|id| Request {
                id,
                prompt_tokens: 16 + rng.below(240),
                max_tokens: 8 + rng.below(56),
                generated: 0,
                scheduled_at: Duration::ZERO,
                first_token_at: None,
                last_token_at: Duration::ZERO,
                stops_early: rng.chance(0.5),
                aborts: id == 5,
            })
            .collect();
        waiting.reverse();
        let mut running: Vec<Request> = Vec::new();
        let mut now = Duration::ZERO;
        while !waiting.is_empty() || !running.is_empty() {
            let mut step = IterationStats::default();
            // Admit one request per step while the batch has room: its prefill runs this step.
            if running.len() < self.max_batch {
                if let Some(mut request) = waiting.pop() {
                    request.scheduled_at = now;
                    step.num_prompt_tokens = request.prompt_tokens;
                    running.push(request);
                }
            }
            let step_time = Duration::from_micros(
                4000 + 20 * (step.num_prompt_tokens + 4 * running.len() as u64),
            );
            now += step_time;
            for request in running.iter_mut() {
                self.advance(request, now, rng, engine, &mut step, totals);
            }
            let (finished, still_running): (Vec<Request>, Vec<Request>) = running
                .into_iter()
                .partition(|request| request.is_finished());
            running = still_running;
            totals.prompt += step.num_prompt_tokens;
            engine.record_iteration(&step);
            let kv_tokens: u64 = running.iter().map(|r| r.prompt_tokens + r.generated).sum();
            engine.record_scheduler(&SchedulerStats {
                num_running_reqs: running.len() as u64,
                num_waiting_reqs: waiting.len() as u64,
                kv_cache_usage: KvCacheUsage::new(
                    (kv_tokens as f64 / self.kv_capacity_tokens as f64).min(1.0),
                )
                .unwrap_or_default(),
                num_preemptions: 0,
            });
            for request in finished {
                engine.record_finished(&request.finished_stats(now));
                totals.finished += 1;
            }
        }
        totals.simulated_time = totals.simulated_time.max(now);
    }

    /// Moves `request` forward by one step: the first token after prefill, then one verification
    /// of a k-token draft per step.
    fn advance(
        &self,
        request: &mut Request,
        now: Duration,
        rng: &mut Rng,
        engine: &EngineRecorder,
        step: &mut IterationStats,
        totals: &mut WorkloadTotals,
    ) {
        let emitted = if request.first_token_at.is_none() {
            request.first_token_at = Some(now);
            step.time_to_first_tokens.push(now);
            1
        } else {
            let accepted = (0..self.k)
                .take_while(|_| rng.chance(self.acceptance))
                .count();
            let remaining = request.limit() - request.generated;
            // Only emitted tokens count: a run cut by the token limit accepts fewer drafts.
            let accepted = accepted.min(remaining.saturating_sub(1) as usize);
            engine.record_spec_decode(&SpecDecodeEvent {
                request_id: request.id,
                num_draft_tokens: self.k,
                draft_depth: self.k,
                num_accepted_tokens: accepted,
            });
            totals.events += 1;
            step.inter_token_latencies.push(now - request.last_token_at);
            accepted as u64 + 1
        };
        request.generated += emitted;
        request.last_token_at = now;
        step.num_generation_tokens += emitted;
        totals.generated += emitted;
    }
}

impl Request {
    /// Tokens this request will generate.
    fn limit(&self) -> u64 {
        if self.aborts {
            2.min(self.max_tokens)
        } else if self.stops_early {
            (self.max_tokens / 2).max(1)
        } else {
            self.max_tokens
        }
    }

    fn is_finished(&self) -> bool {
        self.generated >= self.limit()
    }

    fn finished_stats(&self, now: Duration) -> FinishedRequestStats {
        let first_token_at = self.first_token_at.unwrap_or(now);
        FinishedRequestStats {
            finish_reason: if self.aborts {
                FinishReason::Abort
            } else if self.stops_early {
                FinishReason::Stop
            } else {
                FinishReason::Length
            },
            e2e_latency: now,
            queue_time: self.scheduled_at,
            prefill_time: first_token_at - self.scheduled_at,
            decode_time: self.last_token_at - first_token_at,
            inference_time: self.last_token_at - self.scheduled_at,
            num_prompt_tokens: self.prompt_tokens,
            num_generation_tokens: self.generated,
        }
    }
}
