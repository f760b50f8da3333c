//! The speculative-decoding series of one engine.

use std::sync::{PoisonError, RwLock};

use aquila_spec_decode::SpecDecodeEvent;
use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::families::{bind, Families};
use crate::config::MAX_DRAFT_POSITIONS;
use crate::error::MetricsError;

/// Draft, draft-token and accepted-token counters, one accepted counter per draft position, and
/// the histogram of draft lengths.
pub(crate) struct SpecDecodeSeries {
    drafts: IntCounter,
    draft_length: Histogram,
    draft_tokens: IntCounter,
    accepted_tokens: IntCounter,
    /// Children of the per-position family, index = position; grows with deeper drafts.
    per_position: RwLock<Vec<IntCounter>>,
    per_position_family: IntCounterVec,
    model_name: String,
    engine: String,
}

impl SpecDecodeSeries {
    /// Binds the series of `engine`, with positions `0..k` created at 0.
    pub(crate) fn bind(
        families: &Families,
        model_name: &str,
        engine: &str,
        k: usize,
    ) -> Result<Self, MetricsError> {
        let labels = [model_name, engine];
        let series = SpecDecodeSeries {
            drafts: bind(&families.drafts, &labels)?,
            draft_length: bind(&families.draft_length, &labels)?,
            draft_tokens: bind(&families.draft_tokens, &labels)?,
            accepted_tokens: bind(&families.accepted_tokens, &labels)?,
            per_position: RwLock::new(Vec::with_capacity(k)),
            per_position_family: families.accepted_per_position.clone(),
            model_name: model_name.to_owned(),
            engine: engine.to_owned(),
        };
        series.grow_to(k)?;
        Ok(series)
    }

    /// Counts one verification. Events without draft tokens are not drafts and are ignored.
    pub(crate) fn record(&self, event: &SpecDecodeEvent) {
        if event.num_draft_tokens == 0 {
            return;
        }
        if event.num_accepted_tokens > event.num_draft_tokens {
            tracing::warn!(
                request_id = event.request_id,
                accepted = event.num_accepted_tokens,
                drafted = event.num_draft_tokens,
                "speculative-decoding event accepts more tokens than were drafted"
            );
        }
        self.drafts.inc();
        self.draft_length.observe(event.draft_depth as f64);
        self.draft_tokens.inc_by(event.num_draft_tokens as u64);
        self.accepted_tokens
            .inc_by(event.num_accepted_tokens as u64);
        let depth = event
            .draft_depth
            .max(event.num_accepted_tokens)
            .min(MAX_DRAFT_POSITIONS);
        {
            let per_position = self
                .per_position
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if per_position.len() >= depth {
                count_accepted(&per_position, event.num_accepted_tokens);
                return;
            }
        }
        if let Err(error) = self.grow_to(depth) {
            tracing::warn!(%error, depth, "cannot add per-position acceptance series");
        }
        let per_position = self
            .per_position
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        count_accepted(&per_position, event.num_accepted_tokens);
    }

    /// Creates the series of positions up to `depth` (exclusive) that do not exist yet.
    fn grow_to(&self, depth: usize) -> Result<(), MetricsError> {
        let mut per_position = self
            .per_position
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        while per_position.len() < depth {
            let position = per_position.len().to_string();
            let labels = [
                self.model_name.as_str(),
                self.engine.as_str(),
                position.as_str(),
            ];
            per_position.push(bind(&self.per_position_family, &labels)?);
        }
        Ok(())
    }
}

/// Adds one to the series of each accepted position (acceptance is a prefix: positions
/// `0..accepted`).
fn count_accepted(per_position: &[IntCounter], accepted: usize) {
    for counter in per_position.iter().take(accepted) {
        counter.inc();
    }
}
