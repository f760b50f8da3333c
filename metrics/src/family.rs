//! The catalog of metric families a [`Recorder`](crate::Recorder) registers: names, types, help
//! text, labels and bucket sets.

use serde::{Deserialize, Serialize};

use crate::buckets::BucketSet;
use crate::namespace::Namespace;

/// Label carrying the served model name; present on every family.
pub const MODEL_NAME_LABEL: &str = "model_name";
/// Label carrying the engine (data-parallel rank) label; present on every family.
pub const ENGINE_LABEL: &str = "engine";
/// Label carrying the 0-based draft position of the per-position acceptance counter.
pub const POSITION_LABEL: &str = "position";
/// Label carrying the finish reason (`stop`, `length`, `abort`) of the request-success counter.
pub const FINISHED_REASON_LABEL: &str = "finished_reason";

/// The Prometheus type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FamilyKind {
    /// A monotonically increasing integer count (exposed with a `_total` suffix).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Counts of observations in cumulative buckets, with their count and sum.
    Histogram,
}

/// One metric family of the recorder. Use [`Family::name`] to look a family up in a
/// [`Snapshot`](crate::Snapshot) and [`Family::exposition_name`] for the name Prometheus scrapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Family {
    /// Gauge: requests in the running batch.
    NumRequestsRunning,
    /// Gauge: requests waiting to be scheduled.
    NumRequestsWaiting,
    /// Gauge: fraction (0 to 1) of KV-cache blocks in use.
    KvCacheUsage,
    /// Counter: preemptions.
    NumPreemptions,
    /// Counter: prompt (prefill) tokens computed.
    PromptTokens,
    /// Counter: generated tokens.
    GenerationTokens,
    /// Counter with a `finished_reason` label: finished requests by reason.
    RequestSuccess,
    /// Counter: verified drafts (one per request per verification step with at least one draft
    /// token).
    SpecDecodeNumDrafts,
    /// Counter: draft tokens proposed.
    SpecDecodeNumDraftTokens,
    /// Counter: draft tokens accepted.
    SpecDecodeNumAcceptedTokens,
    /// Counter with a `position` label: drafts whose token at that position was accepted.
    SpecDecodeNumAcceptedTokensPerPos,
    /// Histogram: draft positions of each verified draft (a chain's length, a tree's depth), as
    /// the engine chose them.
    SpecDecodeDraftLength,
    /// Histogram: time from arrival to the first token (seconds).
    TimeToFirstToken,
    /// Histogram: time between consecutive output steps of a request (seconds).
    InterTokenLatency,
    /// Histogram: per-request decode time divided by the tokens after the first (seconds).
    RequestTimePerOutputToken,
    /// Histogram: time from arrival to finish (seconds).
    E2eRequestLatency,
    /// Histogram: time waiting before the last scheduling (seconds).
    RequestQueueTime,
    /// Histogram: time from scheduling to the last token (seconds).
    RequestInferenceTime,
    /// Histogram: time from scheduling to the first token (seconds).
    RequestPrefillTime,
    /// Histogram: time from the first to the last token (seconds).
    RequestDecodeTime,
    /// Histogram: prompt tokens per finished request.
    RequestPromptTokens,
    /// Histogram: generated tokens per finished request.
    RequestGenerationTokens,
    /// Histogram: tokens (prompt and generation) one engine step processed.
    IterationTokens,
    /// Histogram: the target model's forward pass of each engine step (seconds).
    ModelForwardTime,
    /// Histogram: the drafter's call after each engine step's forward pass, taking in the
    /// step's rows and drafting the next tokens (seconds; engines with a drafter only).
    SpecDecodeDraftTime,
}

impl Family {
    /// Every family, in the order the catalog lists them.
    pub const ALL: [Family; 25] = [
        Family::NumRequestsRunning,
        Family::NumRequestsWaiting,
        Family::KvCacheUsage,
        Family::NumPreemptions,
        Family::PromptTokens,
        Family::GenerationTokens,
        Family::RequestSuccess,
        Family::SpecDecodeNumDrafts,
        Family::SpecDecodeNumDraftTokens,
        Family::SpecDecodeNumAcceptedTokens,
        Family::SpecDecodeNumAcceptedTokensPerPos,
        Family::SpecDecodeDraftLength,
        Family::TimeToFirstToken,
        Family::InterTokenLatency,
        Family::RequestTimePerOutputToken,
        Family::E2eRequestLatency,
        Family::RequestQueueTime,
        Family::RequestInferenceTime,
        Family::RequestPrefillTime,
        Family::RequestDecodeTime,
        Family::RequestPromptTokens,
        Family::RequestGenerationTokens,
        Family::IterationTokens,
        Family::ModelForwardTime,
        Family::SpecDecodeDraftTime,
    ];

    /// The Prometheus type of this family.
    pub fn kind(self) -> FamilyKind {
        use Family::*;
        match self {
            NumRequestsRunning | NumRequestsWaiting | KvCacheUsage => FamilyKind::Gauge,
            NumPreemptions
            | PromptTokens
            | GenerationTokens
            | RequestSuccess
            | SpecDecodeNumDrafts
            | SpecDecodeNumDraftTokens
            | SpecDecodeNumAcceptedTokens
            | SpecDecodeNumAcceptedTokensPerPos => FamilyKind::Counter,
            _ => FamilyKind::Histogram,
        }
    }

    /// The name without namespace prefix and without the counters' `_total` suffix.
    fn stem(self, namespace: Namespace) -> &'static str {
        use Family::*;
        match self {
            NumRequestsRunning => "num_requests_running",
            NumRequestsWaiting => "num_requests_waiting",
            KvCacheUsage => "kv_cache_usage_perc",
            NumPreemptions => "num_preemptions",
            PromptTokens => "prompt_tokens",
            GenerationTokens => "generation_tokens",
            RequestSuccess => "request_success",
            SpecDecodeNumDrafts => "spec_decode_num_drafts",
            SpecDecodeNumDraftTokens => "spec_decode_num_draft_tokens",
            SpecDecodeNumAcceptedTokens => "spec_decode_num_accepted_tokens",
            SpecDecodeNumAcceptedTokensPerPos => "spec_decode_num_accepted_tokens_per_pos",
            SpecDecodeDraftLength => "spec_decode_draft_length",
            TimeToFirstToken => "time_to_first_token_seconds",
            InterTokenLatency => "inter_token_latency_seconds",
            RequestTimePerOutputToken => "request_time_per_output_token_seconds",
            E2eRequestLatency => "e2e_request_latency_seconds",
            RequestQueueTime => "request_queue_time_seconds",
            RequestInferenceTime => "request_inference_time_seconds",
            RequestPrefillTime => "request_prefill_time_seconds",
            RequestDecodeTime => "request_decode_time_seconds",
            RequestPromptTokens => "request_prompt_tokens",
            RequestGenerationTokens => "request_generation_tokens",
            // vLLM's histogram keeps a `_total` suffix that Prometheus reserves for counters.
            IterationTokens => match namespace {
                Namespace::Vllm => "iteration_tokens_total",
                Namespace::Aquila => "iteration_tokens",
            },
            ModelForwardTime => "model_forward_time_seconds",
            SpecDecodeDraftTime => "spec_decode_draft_time_seconds",
        }
    }

    /// The name this family has in a [`Snapshot`](crate::Snapshot): the exposition name, except
    /// that counters drop their `_total` suffix (as vLLM's snapshot reader reports them).
    pub fn name(self, namespace: Namespace) -> String {
        format!("{}{}", namespace.prefix(), self.stem(namespace))
    }

    /// The name Prometheus scrapes (counters end in `_total`).
    pub fn exposition_name(self, namespace: Namespace) -> String {
        match self.kind() {
            FamilyKind::Counter => format!("{}_total", self.name(namespace)),
            FamilyKind::Gauge | FamilyKind::Histogram => self.name(namespace),
        }
    }

    /// The `# HELP` text of this family.
    pub fn help(self) -> &'static str {
        use Family::*;
        match self {
            NumRequestsRunning => "Requests currently in the running batch.",
            NumRequestsWaiting => "Requests waiting to be scheduled.",
            KvCacheUsage => "Fraction of KV-cache blocks in use (1 means full).",
            NumPreemptions => "Requests preempted by the scheduler.",
            PromptTokens => "Prompt tokens computed in prefill.",
            GenerationTokens => "Tokens generated.",
            RequestSuccess => "Finished requests, by finish reason.",
            SpecDecodeNumDrafts => "Speculative drafts verified.",
            SpecDecodeNumDraftTokens => "Speculative draft tokens proposed.",
            SpecDecodeNumAcceptedTokens => "Speculative draft tokens accepted.",
            SpecDecodeNumAcceptedTokensPerPos => {
                "Drafts whose token at this 0-based position was accepted."
            }
            SpecDecodeDraftLength => {
                "Draft positions per verified draft (chain length, tree depth)."
            }
            TimeToFirstToken => "Time from request arrival to its first token, in seconds.",
            InterTokenLatency => "Time between consecutive output steps of a request, in seconds.",
            RequestTimePerOutputToken => {
                "Per-request mean time per output token after the first, in seconds."
            }
            E2eRequestLatency => "Time from request arrival to finish, in seconds.",
            RequestQueueTime => "Time a request waited before it was last scheduled, in seconds.",
            RequestInferenceTime => {
                "Time from a request's last scheduling to its last token, in seconds."
            }
            RequestPrefillTime => {
                "Time from a request's last scheduling to its first token, in seconds."
            }
            RequestDecodeTime => "Time from a request's first token to its last, in seconds.",
            RequestPromptTokens => "Prompt tokens per finished request.",
            RequestGenerationTokens => "Generated tokens per finished request.",
            IterationTokens => "Tokens (prompt and generation) processed per engine step.",
            ModelForwardTime => {
                "Time of the target model's forward pass per engine step, in seconds."
            }
            SpecDecodeDraftTime => {
                "Time of the drafter's call per engine step (taking in the step's rows, drafting \
                 the next tokens), in seconds."
            }
        }
    }

    /// The label this family has besides `model_name` and `engine`, if any.
    pub fn extra_label(self) -> Option<&'static str> {
        match self {
            Family::RequestSuccess => Some(FINISHED_REASON_LABEL),
            Family::SpecDecodeNumAcceptedTokensPerPos => Some(POSITION_LABEL),
            _ => None,
        }
    }

    /// The label names of this family, in order: `model_name`, `engine`, then the extra label.
    pub fn label_names(self) -> Vec<&'static str> {
        let mut names = vec![MODEL_NAME_LABEL, ENGINE_LABEL];
        names.extend(self.extra_label());
        names
    }

    /// The bucket set a histogram family uses (`None` for counters and gauges).
    pub fn bucket_set(self) -> Option<BucketSet> {
        use Family::*;
        match self {
            TimeToFirstToken => Some(BucketSet::TimeToFirstToken),
            InterTokenLatency | RequestTimePerOutputToken => Some(BucketSet::InterTokenLatency),
            E2eRequestLatency | RequestQueueTime | RequestInferenceTime | RequestPrefillTime
            | RequestDecodeTime => Some(BucketSet::RequestLatency),
            RequestPromptTokens | RequestGenerationTokens => Some(BucketSet::RequestTokens),
            IterationTokens => Some(BucketSet::IterationTokens),
            SpecDecodeDraftLength => Some(BucketSet::DraftLength),
            ModelForwardTime | SpecDecodeDraftTime => Some(BucketSet::StepTime),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn vllm_names_match_vllm() {
        let ns = Namespace::Vllm;
        assert_eq!(
            Family::SpecDecodeNumDrafts.exposition_name(ns),
            "vllm:spec_decode_num_drafts_total"
        );
        assert_eq!(
            Family::SpecDecodeNumDrafts.name(ns),
            "vllm:spec_decode_num_drafts"
        );
        assert_eq!(
            Family::KvCacheUsage.exposition_name(ns),
            "vllm:kv_cache_usage_perc"
        );
        assert_eq!(
            Family::IterationTokens.exposition_name(ns),
            "vllm:iteration_tokens_total"
        );
        assert_eq!(
            Family::TimeToFirstToken.exposition_name(ns),
            "vllm:time_to_first_token_seconds"
        );
    }

    #[test]
    fn aquila_names_avoid_lint_problems() {
        for family in Family::ALL {
            let name = family.exposition_name(Namespace::Aquila);
            assert!(name.starts_with("aquila_") && !name.contains(':'), "{name}");
            assert_eq!(
                name.ends_with("_total"),
                family.kind() == FamilyKind::Counter,
                "{name}"
            );
        }
    }

    #[test]
    fn catalog_is_consistent() {
        let names: HashSet<String> = Family::ALL
            .iter()
            .map(|f| f.name(Namespace::Aquila))
            .collect();
        assert_eq!(
            names.len(),
            Family::ALL.len(),
            "family names must be unique"
        );
        for family in Family::ALL {
            assert_eq!(
                family.bucket_set().is_some(),
                family.kind() == FamilyKind::Histogram,
                "{family:?}"
            );
            assert!(!family.help().is_empty());
            assert_eq!(
                &family.label_names()[..2],
                &[MODEL_NAME_LABEL, ENGINE_LABEL]
            );
        }
    }
}
