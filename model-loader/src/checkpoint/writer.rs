//! Writing safetensors checkpoints: [`NamedTensor`]s (name, dtype, shape, bytes) to one file
//! or to shards with a `model.safetensors.index.json`, and pretty-printed JSON files.

use super::{WriteError, INDEX_FILE_NAME};
use half::{bf16, f16};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::collections::BTreeSet;
use std::path::Path;

/// A tensor to write: name, dtype, shape and little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// Tensor name.
    pub name: String,
    /// Element type of `bytes`.
    pub dtype: Dtype,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// Little-endian element bytes.
    pub bytes: Vec<u8>,
}

/// Floating-point storage type of written weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FloatType {
    /// 32-bit floats.
    #[default]
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
}

impl FloatType {
    /// The safetensors dtype of values stored in this type.
    pub fn dtype(self) -> Dtype {
        match self {
            Self::F32 => Dtype::F32,
            Self::F16 => Dtype::F16,
            Self::BF16 => Dtype::BF16,
        }
    }

    /// The Hugging Face `torch_dtype` name (`float32`, `float16`, `bfloat16`).
    pub fn torch_dtype(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
        }
    }
}

impl NamedTensor {
    /// A floating-point tensor stored as `dtype` (rounded to nearest for `F16` and `BF16`).
    pub fn float(name: &str, shape: &[usize], values: &[f32], dtype: FloatType) -> Self {
        let bytes = match dtype {
            FloatType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            FloatType::F16 => values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
            FloatType::BF16 => values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        };
        Self::raw(name, dtype.dtype(), shape, bytes)
    }

    /// An `f32` tensor.
    pub fn f32(name: &str, shape: &[usize], values: &[f32]) -> Self {
        Self::float(name, shape, values, FloatType::F32)
    }

    /// An `i64` tensor.
    pub fn i64(name: &str, shape: &[usize], values: &[i64]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::raw(name, Dtype::I64, shape, bytes)
    }

    /// A boolean tensor (one byte per value, 0 or 1).
    pub fn bool(name: &str, shape: &[usize], values: &[bool]) -> Self {
        Self::raw(
            name,
            Dtype::BOOL,
            shape,
            values.iter().map(|&b| u8::from(b)).collect(),
        )
    }

    /// A tensor from raw bytes.
    pub fn raw(name: &str, dtype: Dtype, shape: &[usize], bytes: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            bytes,
        }
    }
}

/// Writes `tensors` to one safetensors file (creating its directory). Fails, naming the file
/// and the tensor, when two tensors share a name or a tensor's bytes do not fit its dtype and
/// shape.
pub fn write_safetensors(path: &Path, tensors: &[NamedTensor]) -> Result<(), WriteError> {
    check_unique_names(path, tensors)?;
    let invalid = |message: String| WriteError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let views = tensors
        .iter()
        .map(|t| {
            TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
                .map(|view| (t.name.clone(), view))
                .map_err(|e| invalid(format!("tensor `{}`: {e}", t.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    create_parent(path)?;
    safetensors::serialize_to_file(views, None, path).map_err(|e| invalid(e.to_string()))?;
    make_readable(path)
}

/// `serialize_to_file` creates owner-only files (it goes through a temporary file); a
/// checkpoint is meant to be shared, so give it the usual `rw-r--r--`.
fn make_readable(path: &Path) -> Result<(), WriteError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| WriteError::io(path, e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Writes `tensors` into `dir` as `shards` files `model-0000i-of-0000n.safetensors` (tensors
/// dealt round-robin in order) plus `model.safetensors.index.json`. Every shard holds at least
/// one tensor, so `shards` must be within `1..=tensors.len()`.
pub fn write_sharded(dir: &Path, tensors: &[NamedTensor], shards: usize) -> Result<(), WriteError> {
    if shards == 0 || shards > tensors.len() {
        return Err(WriteError::Shards {
            dir: dir.to_path_buf(),
            shards,
            tensors: tensors.len(),
        });
    }
    check_unique_names(&dir.join(INDEX_FILE_NAME), tensors)?;
    let file_name = |i: usize| format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
    let mut weight_map = serde_json::Map::new();
    for shard in 0..shards {
        let part: Vec<NamedTensor> = tensors
            .iter()
            .skip(shard)
            .step_by(shards)
            .cloned()
            .collect();
        for tensor in &part {
            weight_map.insert(tensor.name.clone(), file_name(shard).into());
        }
        write_safetensors(&dir.join(file_name(shard)), &part)?;
    }
    let total_size: usize = tensors.iter().map(|t| t.bytes.len()).sum();
    let index = serde_json::json!({
        "metadata": {"total_size": total_size},
        "weight_map": weight_map,
    });
    write_json(&dir.join(INDEX_FILE_NAME), &index)
}

/// Writes `value` as pretty-printed JSON to `path` (creating its directory).
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), WriteError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| WriteError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    create_parent(path)?;
    std::fs::write(path, text).map_err(|e| WriteError::io(path, e))
}

fn create_parent(path: &Path) -> Result<(), WriteError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            std::fs::create_dir_all(parent).map_err(|e| WriteError::io(parent, e))
        }
        _ => Ok(()),
    }
}

fn check_unique_names(path: &Path, tensors: &[NamedTensor]) -> Result<(), WriteError> {
    let mut seen = BTreeSet::new();
    match tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
        Some(duplicate) => Err(WriteError::DuplicateName {
            path: path.to_path_buf(),
            name: duplicate.name.clone(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;

    #[test]
    fn written_tensors_read_back_in_every_float_type() {
        let dir = tempfile::tempdir().unwrap();
        let values = [0.5f32, -1.25, 3.0, 0.0, 2.5, -0.75];
        for dtype in [FloatType::F32, FloatType::F16, FloatType::BF16] {
            let path = dir.path().join(format!("{dtype:?}/model.safetensors"));
            let tensors = [
                NamedTensor::float("w", &[2, 3], &values, dtype),
                NamedTensor::i64("ids", &[2], &[-3, 7]),
                NamedTensor::bool("mask", &[3], &[true, false, true]),
            ];
            write_safetensors(&path, &tensors).unwrap();
            let checkpoint = Checkpoint::open(&path).unwrap();
            assert_eq!(checkpoint.info("w").unwrap().dtype, dtype.dtype());
            // Every value is exact in half precision.
            assert_eq!(checkpoint.read_f32("w").unwrap(), values);
            assert_eq!(checkpoint.read_i64("ids").unwrap(), [-3, 7]);
            assert_eq!(checkpoint.read_bool("mask").unwrap(), [true, false, true]);
        }
    }

    #[test]
    fn bad_tensors_and_shard_counts_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.safetensors");
        let short = NamedTensor::f32("short", &[2, 2], &[1.0, 2.0, 3.0]);
        let err = write_safetensors(&path, &[short]).unwrap_err();
        assert!(matches!(err, WriteError::Safetensors { .. }), "{err:?}");
        assert!(err.to_string().contains("bad.safetensors"), "{err}");
        assert!(err.to_string().contains("`short`"), "{err}");

        let twice = [
            NamedTensor::f32("a", &[1], &[1.0]),
            NamedTensor::f32("a", &[1], &[2.0]),
        ];
        let err = write_safetensors(&path, &twice).unwrap_err();
        assert!(matches!(err, WriteError::DuplicateName { ref name, .. } if name == "a"));
        assert!(!path.exists());

        let err = write_sharded(dir.path(), &twice[..1], 2).unwrap_err();
        assert!(
            matches!(
                err,
                WriteError::Shards {
                    shards: 2,
                    tensors: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(write_sharded(dir.path(), &twice[..1], 0).is_err());
    }
}
