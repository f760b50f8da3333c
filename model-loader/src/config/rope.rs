//! Rotary position embedding settings: the base (`rope_theta`) and optional frequency scaling,
//! read from the top-level `rope_theta`/`rope_scaling` keys or from transformers 5's
//! `rope_parameters` object, and the inverse frequencies they define.

use super::fields::Fields;
use super::ConfigError;

/// The RoPE base used when a config names none (the Hugging Face default).
pub const DEFAULT_ROPE_THETA: f64 = 10_000.0;

/// How the RoPE frequencies are rescaled for longer contexts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Position interpolation: every frequency is divided by `factor`.
    Linear {
        /// The interpolation factor (> 0).
        factor: f64,
    },
    /// Llama 3.1 scaling: low frequencies are divided by `factor`, high frequencies are kept,
    /// and the band between is interpolated smoothly.
    Llama3 {
        /// Divisor of the low frequencies (> 0).
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was pre-trained with.
        original_max_position_embeddings: usize,
    },
}

/// RoPE settings of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    /// The base of the geometric frequency progression (`rope_theta`).
    pub theta: f64,
    /// Optional frequency scaling; `None` is the default (unscaled) RoPE.
    pub scaling: Option<RopeScaling>,
}

impl Default for RopeConfig {
    fn default() -> Self {
        Self {
            theta: DEFAULT_ROPE_THETA,
            scaling: None,
        }
    }
}

impl RopeConfig {
    /// Reads the RoPE settings of a config object.
    ///
    /// transformers 5 keeps everything in `rope_parameters` (`rope_type`, `rope_theta` and the
    /// scaling fields); older configs use a top-level `rope_theta` and a `rope_scaling` object
    /// whose kind is in `rope_type` or `type`. `rope_parameters` wins when both are present.
    pub(crate) fn from_fields(fields: &Fields<'_>) -> Result<Self, ConfigError> {
        let parameters = fields.object("rope_parameters")?;
        let theta = match parameters
            .as_ref()
            .and_then(|p| p.has("rope_theta").then_some(p))
        {
            Some(p) => p.required_positive_f64("rope_theta")?,
            None => fields
                .positive_f64("rope_theta")?
                .unwrap_or(DEFAULT_ROPE_THETA),
        };
        let scaling_fields = match parameters {
            Some(p) if has_rope_kind(&p) => Some(p),
            _ => fields.object("rope_scaling")?,
        };
        let scaling = match scaling_fields {
            Some(s) => parse_scaling(&s)?,
            None => None,
        };
        Ok(Self { theta, scaling })
    }

    /// The `head_dim / 2` inverse frequencies `1 / theta^(2i / head_dim)`, rescaled as the
    /// config says. Rotation angle of pair `i` at position `p` is `p * inv_freq[i]`.
    pub fn inverse_frequencies(&self, head_dim: usize) -> Vec<f64> {
        let half = head_dim / 2;
        (0..half)
            .map(|i| {
                let base = 1.0 / self.theta.powf((2 * i) as f64 / head_dim as f64);
                match self.scaling {
                    None => base,
                    Some(RopeScaling::Linear { factor }) => base / factor,
                    Some(RopeScaling::Llama3 {
                        factor,
                        low_freq_factor,
                        high_freq_factor,
                        original_max_position_embeddings,
                    }) => llama3_frequency(
                        base,
                        factor,
                        low_freq_factor,
                        high_freq_factor,
                        original_max_position_embeddings as f64,
                    ),
                }
            })
            .collect()
    }
}

/// Whether a `rope_parameters` object names a scaling kind other than the default.
fn has_rope_kind(fields: &Fields<'_>) -> bool {
    fields.has("rope_type") || fields.has("type")
}

/// Applies Llama 3.1 scaling to one inverse frequency.
fn llama3_frequency(
    inv_freq: f64,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_len: f64,
) -> f64 {
    let wavelength = 2.0 * std::f64::consts::PI / inv_freq;
    let low_freq_wavelength = original_len / low_freq_factor;
    let high_freq_wavelength = original_len / high_freq_factor;
    if wavelength < high_freq_wavelength {
        inv_freq
    } else if wavelength > low_freq_wavelength {
        inv_freq / factor
    } else {
        let smooth =
            (original_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
        (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
    }
}

/// Parses a `rope_scaling` (or scaling part of `rope_parameters`) object.
fn parse_scaling(fields: &Fields<'_>) -> Result<Option<RopeScaling>, ConfigError> {
    let (kind_field, kind) = match fields.string("rope_type")? {
        Some(kind) => ("rope_type", kind),
        None => match fields.string("type")? {
            Some(kind) => ("type", kind),
            None => return Err(fields.invalid("rope_type", "missing scaling kind")),
        },
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: fields.required_positive_f64("factor")?,
        })),
        "llama3" => {
            let low_freq_factor = fields.required_positive_f64("low_freq_factor")?;
            let high_freq_factor = fields.required_positive_f64("high_freq_factor")?;
            if high_freq_factor <= low_freq_factor {
                return Err(fields.invalid(
                    "high_freq_factor",
                    format!(
                        "must exceed low_freq_factor ({low_freq_factor}), found {high_freq_factor}"
                    ),
                ));
            }
            Ok(Some(RopeScaling::Llama3 {
                factor: fields.required_positive_f64("factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: fields
                    .required_positive("original_max_position_embeddings")?,
            }))
        }
        other => Err(fields.invalid(
            kind_field,
            format!("unsupported RoPE scaling {other:?} (supported: default, linear, llama3)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(json: serde_json::Value) -> Result<RopeConfig, ConfigError> {
        RopeConfig::from_fields(&Fields::new(&json, Path::new("config.json")).unwrap())
    }

    #[test]
    fn default_theta_when_absent() {
        assert_eq!(parse(serde_json::json!({})).unwrap(), RopeConfig::default());
    }

    #[test]
    fn rope_parameters_win_over_top_level() {
        let rope = parse(serde_json::json!({
            "rope_theta": 1.0,
            "rope_parameters": {"rope_type": "linear", "rope_theta": 500000.0, "factor": 2.0}
        }))
        .unwrap();
        assert_eq!(rope.theta, 500000.0);
        assert_eq!(rope.scaling, Some(RopeScaling::Linear { factor: 2.0 }));
    }

    #[test]
    fn legacy_type_key_is_read() {
        let rope =
            parse(serde_json::json!({"rope_scaling": {"type": "linear", "factor": 4.0}})).unwrap();
        assert_eq!(rope.scaling, Some(RopeScaling::Linear { factor: 4.0 }));
    }

    #[test]
    fn unsupported_kind_names_the_field() {
        let err = parse(serde_json::json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
            .unwrap_err();
        assert!(err.to_string().contains("rope_scaling.rope_type"), "{err}");
        assert!(err.to_string().contains("yarn"), "{err}");
    }

    #[test]
    fn linear_scaling_divides_every_frequency() {
        let plain = RopeConfig::default().inverse_frequencies(8);
        let scaled = RopeConfig {
            theta: DEFAULT_ROPE_THETA,
            scaling: Some(RopeScaling::Linear { factor: 4.0 }),
        }
        .inverse_frequencies(8);
        for (p, s) in plain.iter().zip(&scaled) {
            assert!((p / 4.0 - s).abs() < 1e-15);
        }
        assert_eq!(plain[0], 1.0);
        assert!((plain[1] - 0.1).abs() < 1e-15);
    }
}
