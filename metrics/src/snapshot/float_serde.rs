//! Serde for `f64` values that may be infinite or NaN (bucket bound `+Inf`, foreign gauges).
//!
//! Finite values are written as JSON numbers; the others as the Prometheus spellings `"+Inf"`,
//! `"-Inf"` and `"NaN"` (JSON has no number for them). Reading accepts both forms.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Writes `value` as a number, or as `"+Inf"`, `"-Inf"` or `"NaN"`.
pub(crate) fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.is_finite() {
        serializer.serialize_f64(*value)
    } else {
        serializer.serialize_str(prometheus_spelling(*value))
    }
}

/// Reads a number or one of the strings `"+Inf"`, `"-Inf"`, `"NaN"`.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    deserializer.deserialize_any(FloatVisitor)
}

/// The Prometheus text spelling of a non-finite value.
fn prometheus_spelling(value: f64) -> &'static str {
    if value.is_nan() {
        "NaN"
    } else if value > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// Parses a Prometheus float: a decimal number or `+Inf`, `Inf`, `-Inf`, `NaN` (any case).
pub(crate) fn parse_prometheus_float(text: &str) -> Option<f64> {
    match text.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => text.parse::<f64>().ok(),
    }
}

struct FloatVisitor;

impl Visitor<'_> for FloatVisitor {
    type Value = f64;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a number or one of \"+Inf\", \"-Inf\", \"NaN\"")
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<f64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<f64, E> {
        Ok(value as f64)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<f64, E> {
        Ok(value as f64)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<f64, E> {
        match value {
            "+Inf" | "-Inf" | "NaN" => Ok(parse_prometheus_float(value).unwrap_or(f64::NAN)),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Serialize, Deserialize, Debug)]
    struct Wrapped(#[serde(with = "super")] f64);

    #[test]
    fn non_finite_values_round_trip_as_strings() {
        for (value, json) in [
            (1.5, "1.5"),
            (f64::INFINITY, "\"+Inf\""),
            (f64::NEG_INFINITY, "\"-Inf\""),
        ] {
            assert_eq!(serde_json::to_string(&Wrapped(value)).unwrap(), json);
            assert_eq!(serde_json::from_str::<Wrapped>(json).unwrap().0, value);
        }
        assert_eq!(
            serde_json::to_string(&Wrapped(f64::NAN)).unwrap(),
            "\"NaN\""
        );
        assert!(serde_json::from_str::<Wrapped>("\"NaN\"")
            .unwrap()
            .0
            .is_nan());
        assert_eq!(serde_json::from_str::<Wrapped>("3").unwrap().0, 3.0);
        assert!(serde_json::from_str::<Wrapped>("\"lots\"").is_err());
    }

    #[test]
    fn prometheus_floats_parse() {
        assert_eq!(parse_prometheus_float("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_prometheus_float("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_prometheus_float("2.5e-3"), Some(0.0025));
        assert!(parse_prometheus_float("NaN").unwrap().is_nan());
        assert_eq!(parse_prometheus_float("ten"), None);
    }
}
