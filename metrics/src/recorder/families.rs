//! Registration of every [`Family`] in a recorder's own registry, and binding of per-engine series.

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::config::RecorderConfig;
use crate::error::MetricsError;
use crate::family::Family;

/// The registered label-vector of every family.
pub(crate) struct Families {
    pub(crate) running: GaugeVec,
    pub(crate) waiting: GaugeVec,
    pub(crate) kv_cache_usage: GaugeVec,
    pub(crate) preemptions: IntCounterVec,
    pub(crate) prompt_tokens: IntCounterVec,
    pub(crate) generation_tokens: IntCounterVec,
    pub(crate) request_success: IntCounterVec,
    pub(crate) drafts: IntCounterVec,
    pub(crate) draft_tokens: IntCounterVec,
    pub(crate) accepted_tokens: IntCounterVec,
    pub(crate) accepted_per_position: IntCounterVec,
    pub(crate) draft_length: HistogramVec,
    pub(crate) time_to_first_token: HistogramVec,
    pub(crate) inter_token_latency: HistogramVec,
    pub(crate) time_per_output_token: HistogramVec,
    pub(crate) e2e_latency: HistogramVec,
    pub(crate) queue_time: HistogramVec,
    pub(crate) inference_time: HistogramVec,
    pub(crate) prefill_time: HistogramVec,
    pub(crate) decode_time: HistogramVec,
    pub(crate) request_prompt_tokens: HistogramVec,
    pub(crate) request_generation_tokens: HistogramVec,
    pub(crate) iteration_tokens: HistogramVec,
    pub(crate) model_forward_time: HistogramVec,
    pub(crate) draft_time: HistogramVec,
}

impl Families {
    /// Creates every family of [`Family::ALL`] and registers it in `registry`.
    pub(crate) fn register(
        config: &RecorderConfig,
        registry: &Registry,
    ) -> Result<Self, MetricsError> {
        let r = Registrar { config, registry };
        Ok(Families {
            running: r.gauge(Family::NumRequestsRunning)?,
            waiting: r.gauge(Family::NumRequestsWaiting)?,
            kv_cache_usage: r.gauge(Family::KvCacheUsage)?,
            preemptions: r.counter(Family::NumPreemptions)?,
            prompt_tokens: r.counter(Family::PromptTokens)?,
            generation_tokens: r.counter(Family::GenerationTokens)?,
            request_success: r.counter(Family::RequestSuccess)?,
            drafts: r.counter(Family::SpecDecodeNumDrafts)?,
            draft_tokens: r.counter(Family::SpecDecodeNumDraftTokens)?,
            accepted_tokens: r.counter(Family::SpecDecodeNumAcceptedTokens)?,
            accepted_per_position: r.counter(Family::SpecDecodeNumAcceptedTokensPerPos)?,
            draft_length: r.histogram(Family::SpecDecodeDraftLength)?,
            time_to_first_token: r.histogram(Family::TimeToFirstToken)?,
            inter_token_latency: r.histogram(Family::InterTokenLatency)?,
            time_per_output_token: r.histogram(Family::RequestTimePerOutputToken)?,
            e2e_latency: r.histogram(Family::E2eRequestLatency)?,
            queue_time: r.histogram(Family::RequestQueueTime)?,
            inference_time: r.histogram(Family::RequestInferenceTime)?,
            prefill_time: r.histogram(Family::RequestPrefillTime)?,
            decode_time: r.histogram(Family::RequestDecodeTime)?,
            request_prompt_tokens: r.histogram(Family::RequestPromptTokens)?,
            request_generation_tokens: r.histogram(Family::RequestGenerationTokens)?,
            iteration_tokens: r.histogram(Family::IterationTokens)?,
            model_forward_time: r.histogram(Family::ModelForwardTime)?,
            draft_time: r.histogram(Family::SpecDecodeDraftTime)?,
        })
    }
}

/// Creates families from the catalog and registers them.
struct Registrar<'a> {
    config: &'a RecorderConfig,
    registry: &'a Registry,
}

impl Registrar<'_> {
    fn opts(&self, family: Family) -> Opts {
        Opts::new(
            family.exposition_name(self.config.namespace()),
            family.help(),
        )
    }

    fn register<C: Collector + Clone + 'static>(
        &self,
        family: Family,
        made: prometheus::Result<C>,
    ) -> Result<C, MetricsError> {
        let error = |source| MetricsError::Registration {
            family: family.exposition_name(self.config.namespace()),
            source,
        };
        let collector = made.map_err(error)?;
        self.registry
            .register(Box::new(collector.clone()))
            .map_err(error)?;
        Ok(collector)
    }

    fn counter(&self, family: Family) -> Result<IntCounterVec, MetricsError> {
        self.register(
            family,
            IntCounterVec::new(self.opts(family), &family.label_names()),
        )
    }

    fn gauge(&self, family: Family) -> Result<GaugeVec, MetricsError> {
        self.register(
            family,
            GaugeVec::new(self.opts(family), &family.label_names()),
        )
    }

    fn histogram(&self, family: Family) -> Result<HistogramVec, MetricsError> {
        let bounds = family
            .bucket_set()
            .map(|set| self.config.bucket_bounds(set))
            .unwrap_or_default();
        let opts = HistogramOpts::from(self.opts(family)).buckets(bounds);
        self.register(family, HistogramVec::new(opts, &family.label_names()))
    }
}

/// The child of `vec` for `label_values` (created at 0 if new).
pub(crate) fn bind<T: MetricVecBuilder>(
    vec: &MetricVec<T>,
    label_values: &[&str],
) -> Result<T::M, MetricsError> {
    vec.get_metric_with_label_values(label_values)
        .map_err(|source| MetricsError::Registration {
            family: vec
                .desc()
                .first()
                .map_or_else(String::new, |desc| desc.fq_name.clone()),
            source,
        })
}
