//! Typed access to the fields of a JSON config object, with errors that name the file and the
//! (dotted) field. A `null` value counts as absent, as in Hugging Face configs.

use super::ConfigError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Reads `path` and parses it as a JSON object.
pub(crate) fn read_json_object(path: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_json_object(&text, path)
}

/// Parses `text` (from `origin`) as a JSON object.
pub(crate) fn parse_json_object(text: &str, origin: &Path) -> Result<Value, ConfigError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json {
        path: origin.to_path_buf(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(ConfigError::Json {
            path: origin.to_path_buf(),
            message: "the top level is not an object".to_string(),
        });
    }
    Ok(value)
}

/// The fields of one JSON object of a config file.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    object: &'a Map<String, Value>,
    origin: PathBuf,
    prefix: String,
}

impl<'a> Fields<'a> {
    /// The fields of `value`, which must be an object (checked by [`parse_json_object`]).
    pub(crate) fn new(value: &'a Value, origin: &Path) -> Result<Self, ConfigError> {
        let object = value.as_object().ok_or_else(|| ConfigError::Json {
            path: origin.to_path_buf(),
            message: "the top level is not an object".to_string(),
        })?;
        Ok(Self {
            object,
            origin: origin.to_path_buf(),
            prefix: String::new(),
        })
    }

    /// The file the fields come from.
    pub(crate) fn origin(&self) -> &Path {
        &self.origin
    }

    /// The full (dotted) name of field `name`.
    pub(crate) fn qualified(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// An [`ConfigError::InvalidField`] for field `name`.
    pub(crate) fn invalid(&self, name: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(&self.origin, &self.qualified(name), message)
    }

    /// Whether field `name` is present and not `null`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    fn required<T>(&self, name: &str, value: Option<T>) -> Result<T, ConfigError> {
        value.ok_or_else(|| ConfigError::missing(&self.origin, &self.qualified(name)))
    }

    /// A nested object, if present.
    pub(crate) fn object(&self, name: &str) -> Result<Option<Fields<'a>>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(object)) => Ok(Some(Fields {
                object,
                origin: self.origin.clone(),
                prefix: format!("{}{name}.", self.prefix),
            })),
            Some(other) => Err(self.invalid(name, format!("expected an object, found {other}"))),
        }
    }

    /// A string, if present.
    pub(crate) fn string(&self, name: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.invalid(name, format!("expected a string, found {other}"))),
        }
    }

    /// A list of strings, if present.
    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<&'a str>>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str().ok_or_else(|| {
                        self.invalid(name, format!("expected a list of strings, found {item}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.invalid(name, format!("expected a list, found {other}"))),
        }
    }

    /// A boolean, if present.
    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => {
                Err(self.invalid(name, format!("expected true or false, found {other}")))
            }
        }
    }

    /// A non-negative integer, if present.
    pub(crate) fn usize(&self, name: &str) -> Result<Option<usize>, ConfigError> {
        self.get(name)
            .map(|value| self.as_usize(name, value))
            .transpose()
    }

    /// A positive integer, if present.
    pub(crate) fn positive(&self, name: &str) -> Result<Option<usize>, ConfigError> {
        match self.usize(name)? {
            Some(0) => Err(self.invalid(name, "must be positive, found 0")),
            other => Ok(other),
        }
    }

    /// A required positive integer.
    pub(crate) fn required_positive(&self, name: &str) -> Result<usize, ConfigError> {
        let value = self.positive(name)?;
        self.required(name, value)
    }

    /// A finite, strictly positive number, if present.
    pub(crate) fn positive_f64(&self, name: &str) -> Result<Option<f64>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(value) => match value.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(self.invalid(name, format!("expected a positive number, found {value}"))),
            },
        }
    }

    /// A required finite, strictly positive number.
    pub(crate) fn required_positive_f64(&self, name: &str) -> Result<f64, ConfigError> {
        let value = self.positive_f64(name)?;
        self.required(name, value)
    }

    /// Token ids given as one integer or a list of integers; empty when absent.
    pub(crate) fn token_ids(&self, name: &str) -> Result<Vec<u32>, ConfigError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(|v| self.as_u32(name, v)).collect(),
            Some(value) => Ok(vec![self.as_u32(name, value)?]),
        }
    }

    /// A list of non-negative integers, if present.
    pub(crate) fn usize_list(&self, name: &str) -> Result<Option<Vec<usize>>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| self.as_usize(name, v))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.invalid(name, format!("expected a list, found {other}"))),
        }
    }

    fn as_usize(&self, name: &str, value: &Value) -> Result<usize, ConfigError> {
        value
            .as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| {
                self.invalid(
                    name,
                    format!("expected a non-negative integer, found {value}"),
                )
            })
    }

    fn as_u32(&self, name: &str, value: &Value) -> Result<u32, ConfigError> {
        value
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| self.invalid(name, format!("expected a token id, found {value}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields_of(value: &Value) -> Fields<'_> {
        Fields::new(value, Path::new("config.json")).unwrap()
    }

    #[test]
    fn null_counts_as_absent() {
        let value = serde_json::json!({"a": null});
        let fields = fields_of(&value);
        assert!(!fields.has("a"));
        assert_eq!(fields.usize("a").unwrap(), None);
        let err = fields.required_positive("a").unwrap_err();
        assert!(matches!(err, ConfigError::MissingField { ref field, .. } if field == "a"));
    }

    #[test]
    fn nested_fields_are_named_with_their_prefix() {
        let value = serde_json::json!({"outer": {"factor": -1.0}});
        let fields = fields_of(&value);
        let outer = fields.object("outer").unwrap().unwrap();
        let err = outer.positive_f64("factor").unwrap_err();
        assert!(err.to_string().contains("outer.factor"), "{err}");
        assert!(err.to_string().contains("config.json"), "{err}");
    }

    #[test]
    fn wrong_types_are_reported() {
        let value = serde_json::json!({"n": "7", "b": 1, "ids": [1, -2], "zero": 0});
        let fields = fields_of(&value);
        assert!(fields.usize("n").is_err());
        assert!(fields.bool("b").is_err());
        assert!(fields.token_ids("ids").is_err());
        assert!(fields.positive("zero").is_err());
        assert_eq!(fields.usize("zero").unwrap(), Some(0));
    }

    #[test]
    fn token_ids_accept_one_or_many() {
        let value = serde_json::json!({"one": 2, "many": [2, 7]});
        let fields = fields_of(&value);
        assert_eq!(fields.token_ids("one").unwrap(), vec![2]);
        assert_eq!(fields.token_ids("many").unwrap(), vec![2, 7]);
        assert!(fields.token_ids("none").unwrap().is_empty());
    }

    #[test]
    fn non_object_top_level_is_rejected() {
        assert!(parse_json_object("[1, 2]", Path::new("x.json")).is_err());
        assert!(parse_json_object("{", Path::new("x.json")).is_err());
    }
}
