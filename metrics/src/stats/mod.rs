//! The engine statistics vocabulary: what the engine reports to a [`Recorder`](crate::Recorder)
//! each step and when a request finishes.
//!
//! * [`IterationStats`]: one per engine step (tokens processed, first-token and inter-token
//!   latencies of the requests that advanced).
//! * [`SchedulerStats`]: the scheduler's state after a step (running and waiting requests, KV-cache
//!   usage, preemptions).
//! * [`FinishedRequestStats`]: one per finished request (finish reason, phase durations, token
//!   counts).
//!
//! Speculative-decoding outcomes arrive separately, as
//! [`SpecDecodeEvent`](aquila_spec_decode::SpecDecodeEvent)s through the
//! [`EventSink`](aquila_spec_decode::EventSink) trait.

mod finished;
mod iteration;
mod scheduler;

pub use finished::{FinishReason, FinishedRequestStats};
pub use iteration::IterationStats;
pub use scheduler::{KvCacheUsage, SchedulerStats};
