//! Configuration of a [`Recorder`](crate::Recorder) and its validating builder.

use std::collections::{BTreeMap, HashSet};

use crate::buckets::BucketSet;
use crate::error::MetricsError;
use crate::namespace::Namespace;

/// The deepest draft position a recorder keeps a per-position series for. Deeper positions of an
/// event are counted in the totals but not per position.
pub const MAX_DRAFT_POSITIONS: usize = 1024;

/// The default `max_model_len`, which bounds the per-request token histograms.
pub const DEFAULT_MAX_MODEL_LEN: u64 = 8192;

/// How a [`Recorder`](crate::Recorder) names and shapes its families. Build one with
/// [`RecorderConfig::builder`].
#[derive(Clone, Debug, PartialEq)]
pub struct RecorderConfig {
    namespace: Namespace,
    model_name: String,
    engines: Vec<String>,
    num_speculative_tokens: usize,
    max_model_len: u64,
    custom_buckets: BTreeMap<BucketSet, Vec<f64>>,
}

impl RecorderConfig {
    /// Starts a configuration for the served model `model_name` (the `model_name` label), with the
    /// defaults: namespace [`Namespace::Aquila`], one engine labelled `"0"`, no speculative
    /// positions, `max_model_len` [`DEFAULT_MAX_MODEL_LEN`] and vLLM's bucket bounds.
    pub fn builder(model_name: impl Into<String>) -> RecorderConfigBuilder {
        RecorderConfigBuilder {
            config: RecorderConfig {
                namespace: Namespace::default(),
                model_name: model_name.into(),
                engines: vec!["0".to_owned()],
                num_speculative_tokens: 0,
                max_model_len: DEFAULT_MAX_MODEL_LEN,
                custom_buckets: BTreeMap::new(),
            },
        }
    }

    /// The name prefix of every family.
    pub fn namespace(&self) -> Namespace {
        self.namespace
    }

    /// The value of the `model_name` label.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The values of the `engine` label, one per engine; the first is the recorder's default
    /// engine.
    pub fn engines(&self) -> &[String] {
        &self.engines
    }

    /// The number of speculative positions `k` whose per-position series exist from the start.
    pub fn num_speculative_tokens(&self) -> usize {
        self.num_speculative_tokens
    }

    /// The longest sequence the model serves; it bounds the per-request token histograms.
    pub fn max_model_len(&self) -> u64 {
        self.max_model_len
    }

    /// The upper bounds used for `set`: the custom ones if given, else the defaults.
    pub fn bucket_bounds(&self, set: BucketSet) -> Vec<f64> {
        match self.custom_buckets.get(&set) {
            Some(bounds) => bounds.clone(),
            None => set.default_bounds(self.max_model_len),
        }
    }
}

/// Builds a [`RecorderConfig`]; [`RecorderConfigBuilder::build`] checks every setting.
#[derive(Clone, Debug)]
pub struct RecorderConfigBuilder {
    config: RecorderConfig,
}

impl RecorderConfigBuilder {
    /// Sets the name prefix of every family.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.config.namespace = namespace;
        self
    }

    /// Uses a single engine with this `engine` label value.
    pub fn engine(self, label: impl Into<String>) -> Self {
        self.engines([label])
    }

    /// Uses these `engine` label values (for example `"0"` to `"3"` for four data-parallel
    /// engines). Every series is created for each of them; the first is the default engine.
    pub fn engines<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.engines = labels.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `k`, the number of speculative positions: series for positions `0..k` exist (at 0)
    /// before any draft is recorded. A deeper draft adds positions as it arrives.
    pub fn num_speculative_tokens(mut self, k: usize) -> Self {
        self.config.num_speculative_tokens = k;
        self
    }

    /// Sets the longest sequence the model serves (bounds of the per-request token histograms).
    pub fn max_model_len(mut self, max_model_len: u64) -> Self {
        self.config.max_model_len = max_model_len;
        self
    }

    /// Replaces the bucket upper bounds of one bucket set (checked by [`BucketSet::validate`]).
    pub fn buckets(mut self, set: BucketSet, bounds: Vec<f64>) -> Self {
        self.config.custom_buckets.insert(set, bounds);
        self
    }

    /// Checks every setting and returns the configuration.
    pub fn build(self) -> Result<RecorderConfig, MetricsError> {
        let config = self.config;
        let invalid = |field, reason: &str| MetricsError::InvalidConfig {
            field,
            reason: reason.to_owned(),
        };
        if config.model_name.trim().is_empty() {
            return Err(invalid("model_name", "must not be empty"));
        }
        if config.engines.is_empty() {
            return Err(invalid("engines", "at least one engine label is required"));
        }
        if config.engines.iter().any(|label| label.is_empty()) {
            return Err(invalid("engines", "engine labels must not be empty"));
        }
        let mut seen = HashSet::new();
        if let Some(duplicate) = config.engines.iter().find(|label| !seen.insert(*label)) {
            return Err(invalid(
                "engines",
                &format!("engine label `{duplicate}` is given twice"),
            ));
        }
        if config.num_speculative_tokens > MAX_DRAFT_POSITIONS {
            return Err(invalid(
                "num_speculative_tokens",
                &format!(
                    "{} exceeds the supported maximum of {MAX_DRAFT_POSITIONS}",
                    config.num_speculative_tokens
                ),
            ));
        }
        if config.max_model_len == 0 {
            return Err(invalid("max_model_len", "must be at least 1"));
        }
        for (set, bounds) in &config.custom_buckets {
            set.validate(bounds)?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let config = RecorderConfig::builder("m").build().unwrap();
        assert_eq!(config.namespace(), Namespace::Aquila);
        assert_eq!(config.engines(), ["0"]);
        assert_eq!(config.num_speculative_tokens(), 0);
        assert_eq!(config.max_model_len(), DEFAULT_MAX_MODEL_LEN);
        assert_eq!(
            config.bucket_bounds(BucketSet::RequestTokens).last(),
            Some(&5000.0)
        );
    }

    #[test]
    fn custom_buckets_replace_defaults() {
        let config = RecorderConfig::builder("m")
            .buckets(BucketSet::IterationTokens, vec![4.0, 64.0])
            .build()
            .unwrap();
        assert_eq!(
            config.bucket_bounds(BucketSet::IterationTokens),
            vec![4.0, 64.0]
        );
        assert_eq!(config.bucket_bounds(BucketSet::RequestLatency).len(), 21);
    }

    #[test]
    fn impossible_settings_are_named() {
        let field_of = |builder: RecorderConfigBuilder| match builder.build().unwrap_err() {
            MetricsError::InvalidConfig { field, .. } => field,
            other => panic!("unexpected error {other}"),
        };
        assert_eq!(field_of(RecorderConfig::builder(" ")), "model_name");
        assert_eq!(
            field_of(RecorderConfig::builder("m").engines(Vec::<String>::new())),
            "engines"
        );
        assert_eq!(field_of(RecorderConfig::builder("m").engine("")), "engines");
        assert_eq!(
            field_of(RecorderConfig::builder("m").engines(["0", "1", "0"])),
            "engines"
        );
        assert_eq!(
            field_of(RecorderConfig::builder("m").num_speculative_tokens(MAX_DRAFT_POSITIONS + 1)),
            "num_speculative_tokens"
        );
        assert_eq!(
            field_of(RecorderConfig::builder("m").max_model_len(0)),
            "max_model_len"
        );
        let err = RecorderConfig::builder("m")
            .buckets(BucketSet::TimeToFirstToken, vec![2.0, 1.0])
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            MetricsError::InvalidBuckets {
                set: BucketSet::TimeToFirstToken,
                ..
            }
        ));
    }
}
