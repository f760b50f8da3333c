//! The series of one engine and the cheap handle that records into them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aquila_spec_decode::{EventSink, SpecDecodeEvent};
use prometheus::{Gauge, Histogram, IntCounter};

use super::families::{bind, Families};
use super::spec_decode::SpecDecodeSeries;
use crate::error::MetricsError;
use crate::stats::{FinishReason, FinishedRequestStats, IterationStats, SchedulerStats};

/// Every series of one engine label, bound once so that recording is a handful of atomic adds.
struct EngineSeries {
    engine: String,
    running: Gauge,
    waiting: Gauge,
    kv_cache_usage: Gauge,
    preemptions: IntCounter,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    /// Indexed by [`FinishReason::index`].
    request_success: Vec<IntCounter>,
    spec_decode: SpecDecodeSeries,
    time_to_first_token: Histogram,
    inter_token_latency: Histogram,
    time_per_output_token: Histogram,
    e2e_latency: Histogram,
    queue_time: Histogram,
    inference_time: Histogram,
    prefill_time: Histogram,
    decode_time: Histogram,
    request_prompt_tokens: Histogram,
    request_generation_tokens: Histogram,
    iteration_tokens: Histogram,
    model_forward_time: Histogram,
    draft_time: Histogram,
}

/// Records the statistics of one engine (one `engine` label value) of a
/// [`Recorder`](crate::Recorder).
///
/// Cheap to clone and thread-safe: hand one to each engine (or each data-parallel rank); all
/// clones write the same series. Every method is a few atomic operations.
#[derive(Clone)]
pub struct EngineRecorder {
    series: Arc<EngineSeries>,
}

impl EngineRecorder {
    /// Creates (at 0) every series of `engine`, with per-position series for `0..k`.
    pub(crate) fn bind(
        families: &Families,
        model_name: &str,
        engine: &str,
        k: usize,
    ) -> Result<Self, MetricsError> {
        let labels = [model_name, engine];
        let request_success = FinishReason::ALL
            .iter()
            .map(|reason| {
                bind(
                    &families.request_success,
                    &[model_name, engine, reason.as_str()],
                )
            })
            .collect::<Result<_, _>>()?;
        let series = EngineSeries {
            engine: engine.to_owned(),
            running: bind(&families.running, &labels)?,
            waiting: bind(&families.waiting, &labels)?,
            kv_cache_usage: bind(&families.kv_cache_usage, &labels)?,
            preemptions: bind(&families.preemptions, &labels)?,
            prompt_tokens: bind(&families.prompt_tokens, &labels)?,
            generation_tokens: bind(&families.generation_tokens, &labels)?,
            request_success,
            spec_decode: SpecDecodeSeries::bind(families, model_name, engine, k)?,
            time_to_first_token: bind(&families.time_to_first_token, &labels)?,
            inter_token_latency: bind(&families.inter_token_latency, &labels)?,
            time_per_output_token: bind(&families.time_per_output_token, &labels)?,
            e2e_latency: bind(&families.e2e_latency, &labels)?,
            queue_time: bind(&families.queue_time, &labels)?,
            inference_time: bind(&families.inference_time, &labels)?,
            prefill_time: bind(&families.prefill_time, &labels)?,
            decode_time: bind(&families.decode_time, &labels)?,
            request_prompt_tokens: bind(&families.request_prompt_tokens, &labels)?,
            request_generation_tokens: bind(&families.request_generation_tokens, &labels)?,
            iteration_tokens: bind(&families.iteration_tokens, &labels)?,
            model_forward_time: bind(&families.model_forward_time, &labels)?,
            draft_time: bind(&families.draft_time, &labels)?,
        };
        Ok(EngineRecorder {
            series: Arc::new(series),
        })
    }

    /// The `engine` label value this handle records under.
    pub fn engine(&self) -> &str {
        &self.series.engine
    }

    /// Records one engine step: adds its prompt and generation tokens, observes the step's token
    /// count, every time to first token and inter-token latency it carries, and the times of its
    /// forward pass and drafting call where it has them.
    pub fn record_iteration(&self, stats: &IterationStats) {
        let s = &self.series;
        s.prompt_tokens.inc_by(stats.num_prompt_tokens);
        s.generation_tokens.inc_by(stats.num_generation_tokens);
        s.iteration_tokens.observe(stats.num_tokens() as f64);
        observe_all(&s.time_to_first_token, &stats.time_to_first_tokens);
        observe_all(&s.inter_token_latency, &stats.inter_token_latencies);
        observe_all(&s.model_forward_time, stats.forward_time.as_slice());
        observe_all(&s.draft_time, stats.draft_time.as_slice());
    }

    /// Records the scheduler's state: sets the running, waiting and KV-usage gauges and adds the
    /// step's preemptions.
    pub fn record_scheduler(&self, stats: &SchedulerStats) {
        let s = &self.series;
        s.running.set(stats.num_running_reqs as f64);
        s.waiting.set(stats.num_waiting_reqs as f64);
        s.kv_cache_usage.set(stats.kv_cache_usage.fraction());
        s.preemptions.inc_by(stats.num_preemptions);
    }

    /// Records a finished request: counts it under its finish reason and observes its phase
    /// durations, token counts and (with two or more tokens) time per output token.
    pub fn record_finished(&self, stats: &FinishedRequestStats) {
        let s = &self.series;
        if let Some(counter) = s.request_success.get(stats.finish_reason.index()) {
            counter.inc();
        }
        s.e2e_latency.observe(stats.e2e_latency.as_secs_f64());
        s.queue_time.observe(stats.queue_time.as_secs_f64());
        s.prefill_time.observe(stats.prefill_time.as_secs_f64());
        s.decode_time.observe(stats.decode_time.as_secs_f64());
        s.inference_time.observe(stats.inference_time.as_secs_f64());
        s.request_prompt_tokens
            .observe(stats.num_prompt_tokens as f64);
        s.request_generation_tokens
            .observe(stats.num_generation_tokens as f64);
        if let Some(per_token) = stats.time_per_output_token() {
            s.time_per_output_token.observe(per_token.as_secs_f64());
        }
    }
}

fn observe_all(histogram: &Histogram, durations: &[Duration]) {
    for duration in durations {
        histogram.observe(duration.as_secs_f64());
    }
}

impl EventSink for EngineRecorder {
    /// Counts one verification: a draft, its draft tokens, its accepted tokens and each accepted
    /// position. Events with no draft tokens (nothing was proposed) are not drafts and are
    /// ignored. A draft deeper than any before adds per-position series.
    fn record_spec_decode(&self, event: &SpecDecodeEvent) {
        self.series.spec_decode.record(event);
    }
}

impl fmt::Debug for EngineRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineRecorder")
            .field("engine", &self.series.engine)
            .finish_non_exhaustive()
    }
}
