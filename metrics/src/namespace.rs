//! The name prefix every metric family carries.

use serde::{Deserialize, Serialize};

/// The prefix of every family name a [`Recorder`](crate::Recorder) registers.
///
/// * [`Namespace::Aquila`] (the default) writes `aquila_` names. They pass `promtool check metrics`
///   with no lint problem: Prometheus reserves `:` for recording rules and its linter reports
///   every name that contains one.
/// * [`Namespace::Vllm`] writes names identical to vLLM's (`vllm:num_requests_running`,
///   `vllm:iteration_tokens_total`, ...) so that dashboards and alerts written for vLLM work
///   unchanged. Those names inherit vLLM's two lint problems: the colon, and the `_total` suffix of
///   the `iteration_tokens_total` histogram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Namespace {
    /// `aquila_` names, lint-clean.
    #[default]
    Aquila,
    /// `vllm:` names, identical to vLLM's Prometheus families.
    Vllm,
}

impl Namespace {
    /// The text that starts every family name in this namespace.
    pub fn prefix(self) -> &'static str {
        match self {
            Namespace::Aquila => "aquila_",
            Namespace::Vllm => "vllm:",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_namespace_is_lint_clean_aquila() {
        assert_eq!(Namespace::default(), Namespace::Aquila);
        assert!(!Namespace::Aquila.prefix().contains(':'));
        assert_eq!(Namespace::Vllm.prefix(), "vllm:");
    }
}
