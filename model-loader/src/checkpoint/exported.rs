//! [`ExportedTensor`]: a tensor taken out of a model in Hugging Face layout, with its values
//! still at full precision, ready to be stored in any [`FloatType`].

use super::{FloatType, NamedTensor};

/// The values of an exported tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportedValues {
    /// Floating-point values (weights); stored in the [`FloatType`] the writer asks for.
    F32(Vec<f32>),
    /// Integers (e.g. EAGLE-3 `d2t`); stored as `I64`.
    I64(Vec<i64>),
    /// Flags (e.g. EAGLE-3 `t2d`); stored as `BOOL`.
    Bool(Vec<bool>),
}

impl ExportedValues {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::Bool(v) => v.len(),
        }
    }

    /// Whether there is no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A named tensor in Hugging Face layout (linear weights `[out, in]`), as module `export`
/// methods return it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedTensor {
    /// Checkpoint name (e.g. `layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// The values; their count is the product of `shape`.
    pub values: ExportedValues,
}

impl ExportedTensor {
    /// A floating-point tensor.
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, values: Vec<f32>) -> Self {
        Self {
            name: name.into(),
            shape,
            values: ExportedValues::F32(values),
        }
    }

    /// An integer tensor.
    pub fn i64(name: impl Into<String>, shape: Vec<usize>, values: Vec<i64>) -> Self {
        Self {
            name: name.into(),
            shape,
            values: ExportedValues::I64(values),
        }
    }

    /// A boolean tensor.
    pub fn bool(name: impl Into<String>, shape: Vec<usize>, values: Vec<bool>) -> Self {
        Self {
            name: name.into(),
            shape,
            values: ExportedValues::Bool(values),
        }
    }

    /// The floating-point values, or `None` for an integer or boolean tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.values {
            ExportedValues::F32(values) => Some(values),
            _ => None,
        }
    }

    /// The tensor as stored: floats in `float_type`, integers as `I64`, flags as `BOOL`.
    pub fn to_named(&self, float_type: FloatType) -> NamedTensor {
        match &self.values {
            ExportedValues::F32(v) => NamedTensor::float(&self.name, &self.shape, v, float_type),
            ExportedValues::I64(v) => NamedTensor::i64(&self.name, &self.shape, v),
            ExportedValues::Bool(v) => NamedTensor::bool(&self.name, &self.shape, v),
        }
    }
}
