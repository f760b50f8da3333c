//! GGUF metadata values.

use super::GgufError;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Unsigned 8-bit integer (type 0).
    U8(u8),
    /// Signed 8-bit integer (type 1).
    I8(i8),
    /// Unsigned 16-bit integer (type 2).
    U16(u16),
    /// Signed 16-bit integer (type 3).
    I16(i16),
    /// Unsigned 32-bit integer (type 4).
    U32(u32),
    /// Signed 32-bit integer (type 5).
    I32(i32),
    /// 32-bit float (type 6).
    F32(f32),
    /// Boolean stored as one byte (type 7).
    Bool(bool),
    /// UTF-8 string (type 8).
    String(String),
    /// Array of values of one type (type 9).
    Array(Vec<GgufValue>),
    /// Unsigned 64-bit integer (type 10).
    U64(u64),
    /// Signed 64-bit integer (type 11).
    I64(i64),
    /// 64-bit float (type 12).
    F64(f64),
}

impl GgufValue {
    /// The name of the value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }

    /// The value as a non-negative integer, if it is an integer type holding one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(u64::from(v)),
            Self::U16(v) => Some(u64::from(v)),
            Self::U32(v) => Some(u64::from(v)),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(i64::from(v)),
            Self::I16(v) => Some(i64::from(v)),
            Self::I32(v) => Some(i64::from(v)),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float, if it is a float type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(f64::from(v)),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a boolean, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Typed access to metadata by key, with errors naming the key.
pub trait MetadataExt {
    /// The value stored under `key`.
    fn value(&self, key: &str) -> Option<&GgufValue>;

    /// A required value.
    fn required(&self, key: &str) -> Result<&GgufValue, GgufError> {
        self.value(key)
            .ok_or_else(|| GgufError::MissingMetadata(key.to_string()))
    }

    /// A required non-negative integer.
    fn required_u64(&self, key: &str) -> Result<u64, GgufError> {
        let value = self.required(key)?;
        value
            .as_u64()
            .ok_or_else(|| mismatch(key, "a non-negative integer", value))
    }

    /// An optional non-negative integer.
    fn optional_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.value(key)
            .map(|value| {
                value
                    .as_u64()
                    .ok_or_else(|| mismatch(key, "a non-negative integer", value))
            })
            .transpose()
    }

    /// An optional float.
    fn optional_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.value(key)
            .map(|value| {
                value
                    .as_f64()
                    .ok_or_else(|| mismatch(key, "a float", value))
            })
            .transpose()
    }

    /// An optional string.
    fn optional_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.value(key)
            .map(|value| {
                value
                    .as_str()
                    .ok_or_else(|| mismatch(key, "a string", value))
            })
            .transpose()
    }

    /// A required string.
    fn required_str(&self, key: &str) -> Result<&str, GgufError> {
        self.optional_str(key)?
            .ok_or_else(|| GgufError::MissingMetadata(key.to_string()))
    }

    /// An optional boolean.
    fn optional_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.value(key)
            .map(|value| {
                value
                    .as_bool()
                    .ok_or_else(|| mismatch(key, "a bool", value))
            })
            .transpose()
    }

    /// A required array.
    fn required_array(&self, key: &str) -> Result<&[GgufValue], GgufError> {
        let value = self.required(key)?;
        value
            .as_array()
            .ok_or_else(|| mismatch(key, "an array", value))
    }
}

/// A [`GgufError::MetadataType`] for `key`.
pub(crate) fn mismatch(key: &str, expected: &'static str, found: &GgufValue) -> GgufError {
    GgufError::MetadataType {
        key: key.to_string(),
        expected,
        found: found.type_name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_conversions_respect_sign() {
        assert_eq!(GgufValue::I32(-1).as_u64(), None);
        assert_eq!(GgufValue::I32(7).as_u64(), Some(7));
        assert_eq!(GgufValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(GgufValue::F32(0.5).as_u64(), None);
        assert_eq!(GgufValue::F32(0.5).as_f64(), Some(0.5));
    }

    #[test]
    fn typed_access_names_key_and_types() {
        struct One(GgufValue);
        impl MetadataExt for One {
            fn value(&self, key: &str) -> Option<&GgufValue> {
                (key == "k").then_some(&self.0)
            }
        }
        let meta = One(GgufValue::String("x".into()));
        let err = meta.required_u64("k").unwrap_err().to_string();
        assert!(err.contains("\"k\"") && err.contains("string"), "{err}");
        assert!(matches!(
            meta.required_u64("other"),
            Err(GgufError::MissingMetadata(_))
        ));
        assert_eq!(meta.optional_str("k").unwrap(), Some("x"));
    }
}
