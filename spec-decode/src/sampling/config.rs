//! The validated per-request sampling configuration.

use serde::{Deserialize, Serialize};

/// A sampling parameter that is out of range; the message names the parameter and the value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{name} must be {expected}, got {value}")]
pub struct SamplingError {
    /// The field of [`SamplingConfig`] that is out of range (e.g. `"top_p"`).
    pub name: &'static str,
    /// The accepted range, in words (e.g. `"in (0, 1]"`).
    pub expected: &'static str,
    /// The rejected value.
    pub value: f32,
}

/// How one request turns target logits into the distribution it samples from.
///
/// The pipeline order follows vLLM: penalties (on the raw logits) → temperature → min-p →
/// top-k → top-p → softmax. A temperature of 0 means greedy decoding: the argmax of the
/// penalized logits, with every filter ignored.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingConfig {
    /// Softmax temperature, finite and `>= 0`; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only tokens whose logit is at least the `top_k`-th largest (ties at the boundary are
    /// all kept); 0 turns the filter off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in (0, 1];
    /// 1 turns the filter off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely token's, in [0, 1];
    /// 0 turns the filter off.
    pub min_p: f32,
    /// Subtracted once from the logit of every token that occurs in the output, in [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the output, in [-2, 2].
    pub frequency_penalty: f32,
    /// Divides positive and multiplies negative logits of tokens that occur in the prompt or the
    /// output; finite and `> 0`, 1 turns it off.
    pub repetition_penalty: f32,
}

impl Default for SamplingConfig {
    /// Plain sampling at temperature 1 with no filter and no penalty.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
        }
    }
}

impl SamplingConfig {
    /// Greedy decoding with no penalty.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Whether this configuration picks the argmax token (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether any of the presence, frequency or repetition penalties changes logits.
    pub fn has_penalties(&self) -> bool {
        self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
    }

    /// Checks every field against its range; the error names the first field out of range.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let check = |name, expected, value: f32, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(SamplingError {
                    name,
                    expected,
                    value,
                })
            }
        };
        let t = self.temperature;
        check(
            "temperature",
            "finite and >= 0",
            t,
            t.is_finite() && t >= 0.0,
        )?;
        let p = self.top_p;
        check("top_p", "in (0, 1]", p, p > 0.0 && p <= 1.0)?;
        let m = self.min_p;
        check("min_p", "in [0, 1]", m, (0.0..=1.0).contains(&m))?;
        let pres = self.presence_penalty;
        check(
            "presence_penalty",
            "in [-2, 2]",
            pres,
            (-2.0..=2.0).contains(&pres),
        )?;
        let freq = self.frequency_penalty;
        check(
            "frequency_penalty",
            "in [-2, 2]",
            freq,
            (-2.0..=2.0).contains(&freq),
        )?;
        let rep = self.repetition_penalty;
        check(
            "repetition_penalty",
            "finite and > 0",
            rep,
            rep.is_finite() && rep > 0.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_greedy_are_valid() {
        assert!(SamplingConfig::default().validate().is_ok());
        assert!(SamplingConfig::greedy().validate().is_ok());
        assert!(SamplingConfig::greedy().is_greedy());
        assert!(!SamplingConfig::default().is_greedy());
        assert!(!SamplingConfig::default().has_penalties());
    }

    #[test]
    fn errors_name_the_parameter_and_value() {
        let cfg = SamplingConfig {
            top_p: 1.5,
            ..SamplingConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "top_p must be in (0, 1], got 1.5"
        );
        let cfg = SamplingConfig {
            temperature: f32::NAN,
            ..SamplingConfig::default()
        };
        assert_eq!(cfg.validate().unwrap_err().name, "temperature");
    }

    #[test]
    fn every_out_of_range_field_is_rejected() {
        let base = SamplingConfig::default();
        let cases = [
            (
                "temperature",
                SamplingConfig {
                    temperature: -0.5,
                    ..base
                },
            ),
            ("top_p", SamplingConfig { top_p: 0.0, ..base }),
            (
                "min_p",
                SamplingConfig {
                    min_p: 1.01,
                    ..base
                },
            ),
            (
                "presence_penalty",
                SamplingConfig {
                    presence_penalty: 2.5,
                    ..base
                },
            ),
            (
                "frequency_penalty",
                SamplingConfig {
                    frequency_penalty: -3.0,
                    ..base
                },
            ),
            (
                "repetition_penalty",
                SamplingConfig {
                    repetition_penalty: 0.0,
                    ..base
                },
            ),
            (
                "repetition_penalty",
                SamplingConfig {
                    repetition_penalty: f32::INFINITY,
                    ..base
                },
            ),
        ];
        for (name, cfg) in cases {
            assert_eq!(cfg.validate().unwrap_err().name, name, "{cfg:?}");
        }
    }
}
