//! Safetensors checkpoints: [`Checkpoint`] maps one file or every shard named by a
//! `model.safetensors.index.json`, converts `f32`/`f16`/`bf16` tensors to `f32` on read, and
//! [`StrictReader`] takes tensors by name and shape with complete mismatch reports.
//!
//! Writing goes the other way: [`ExportedTensor`]s (values in Hugging Face layout, as module
//! `export` methods return them) become [`NamedTensor`]s in a chosen [`FloatType`], which
//! [`write_safetensors`] and [`write_sharded`] store in files that [`Checkpoint`] reads.

mod convert;
mod error;
mod exported;
mod index;
mod shard;
mod strict;
mod writer;

pub use error::{CheckpointError, MismatchReport, ShapeMismatch, WriteError};
pub use exported::{ExportedTensor, ExportedValues};
pub use safetensors::Dtype;
pub use strict::StrictReader;
pub use writer::{write_json, write_safetensors, write_sharded, FloatType, NamedTensor};

use index::ShardIndex;
use shard::{Shard, TensorLocation};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// File name of a single-file checkpoint.
pub const SINGLE_FILE_NAME: &str = "model.safetensors";
/// File name of a sharded checkpoint's index.
pub const INDEX_FILE_NAME: &str = "model.safetensors.index.json";

/// The element type and shape of a checkpoint tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type as stored.
    pub dtype: Dtype,
    /// Shape (row-major).
    pub shape: Vec<usize>,
}

/// A memory-mapped safetensors checkpoint (one file or several shards).
#[derive(Debug)]
pub struct Checkpoint {
    origin: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, (usize, TensorLocation)>,
}

impl Checkpoint {
    /// Opens a checkpoint: a directory (its index if present, else `model.safetensors`), an
    /// index file (`*.json`) or a single safetensors file.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        if path.is_dir() {
            let index = path.join(INDEX_FILE_NAME);
            let single = path.join(SINGLE_FILE_NAME);
            if index.is_file() {
                Self::open_index(&index)
            } else if single.is_file() {
                Self::open_file(&single)
            } else {
                Err(CheckpointError::NotFound {
                    dir: path.to_path_buf(),
                })
            }
        } else if path.extension().is_some_and(|e| e == "json") {
            Self::open_index(path)
        } else {
            Self::open_file(path)
        }
    }

    /// Opens one safetensors file.
    pub fn open_file(path: &Path) -> Result<Self, CheckpointError> {
        let mut checkpoint = Self {
            origin: path.to_path_buf(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        checkpoint.add_shard(path)?;
        Ok(checkpoint)
    }

    /// Opens a sharded checkpoint from its index file. Every shard it names is mapped; every
    /// tensor the index lists must be in the shard it names.
    pub fn open_index(index_path: &Path) -> Result<Self, CheckpointError> {
        let index = ShardIndex::read(index_path)?;
        let mut checkpoint = Self {
            origin: index_path.to_path_buf(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        for shard_path in index.shard_paths(index_path) {
            checkpoint.add_shard(&shard_path)?;
        }
        for (name, file) in &index.weight_map {
            let in_named_shard = checkpoint.tensors.get(name).is_some_and(|(shard, _)| {
                checkpoint.shards[*shard].path().file_name() == Some(file.as_ref())
            });
            if !in_named_shard {
                return Err(CheckpointError::InvalidIndex {
                    path: index_path.to_path_buf(),
                    message: format!("tensor `{name}` is not in {file}"),
                });
            }
        }
        Ok(checkpoint)
    }

    fn add_shard(&mut self, path: &Path) -> Result<(), CheckpointError> {
        let (shard, tensors) = Shard::open(path)?;
        let shard_id = self.shards.len();
        for (name, location) in tensors {
            match self.tensors.entry(name) {
                Entry::Vacant(slot) => {
                    slot.insert((shard_id, location));
                }
                Entry::Occupied(existing) => {
                    return Err(CheckpointError::DuplicateTensor {
                        name: existing.key().clone(),
                        first: self.shards[existing.get().0].path().to_path_buf(),
                        second: path.to_path_buf(),
                    })
                }
            }
        }
        self.shards.push(shard);
        Ok(())
    }

    /// The file or index the checkpoint was opened from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Dtype and shape of `name`, if present.
    pub fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|(_, location)| TensorInfo {
            dtype: location.dtype,
            shape: location.shape.clone(),
        })
    }

    /// Reads a floating-point tensor (`F32`, `F16`, `BF16` or `F64`) as `f32`, row-major.
    ///
    /// The tensor is converted a few MiB at a time, and the file pages of each piece are
    /// released once converted, so that reading a large tensor (a 113 MB embedding table)
    /// never holds both its file pages and its `f32` copy in memory.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, CheckpointError> {
        /// Source bytes converted at a time (a multiple of every element size).
        const PIECE: usize = 8 << 20;
        let (shard, location) = self.locate(name)?;
        let bytes = shard.bytes(location);
        let mut values = Vec::with_capacity(bytes.len() * 8 / location.dtype.bitsize().max(1));
        // Released so far: up to the page that the next piece shares with this one.
        let mut released_from = location.bytes.start;
        for (index, piece) in bytes.chunks(PIECE).enumerate() {
            let converted = convert::to_f32(location.dtype, piece)
                .ok_or_else(|| unsupported(shard, name, location, "a floating-point type"))?;
            values.extend_from_slice(&converted);
            let end = location.bytes.start + index * PIECE + piece.len();
            shard.release(&(released_from..end));
            released_from = (end / shard::PAGE * shard::PAGE).max(location.bytes.start);
        }
        shard.release_with_neighbours(&location.bytes);
        Ok(values)
    }

    /// Reads rows `rows` of a floating-point tensor (its first dimension; a row holds the
    /// product of the others) as `f32`, row-major, releasing their file pages once converted,
    /// so that a large matrix can be packed a few rows at a time.
    pub fn read_f32_rows(
        &self,
        name: &str,
        rows: Range<usize>,
    ) -> Result<Vec<f32>, CheckpointError> {
        let (shard, location) = self.locate(name)?;
        let total_rows = location.shape.first().copied().unwrap_or(1);
        if rows.start > rows.end || rows.end > total_rows {
            return Err(CheckpointError::InvalidTensor {
                path: shard.path().to_path_buf(),
                name: name.to_string(),
                message: format!("rows {rows:?} are outside its {total_rows} rows"),
            });
        }
        let element_bytes = location.dtype.bitsize() / 8;
        let row_bytes = location
            .shape
            .iter()
            .skip(1)
            .try_fold(element_bytes, |bytes, &d| bytes.checked_mul(d));
        let offset = |row: usize| {
            row_bytes
                .and_then(|b| b.checked_mul(row))
                .and_then(|b| b.checked_add(location.bytes.start))
        };
        let range = match (offset(rows.start), offset(rows.end)) {
            (Some(start), Some(end)) if end <= location.bytes.end => start..end,
            _ => {
                return Err(CheckpointError::InvalidTensor {
                    path: shard.path().to_path_buf(),
                    name: name.to_string(),
                    message: format!("its shape {:?} does not fit its bytes", location.shape),
                })
            }
        };
        let values = convert::to_f32(location.dtype, shard.range(&range))
            .ok_or_else(|| unsupported(shard, name, location, "a floating-point type"))?;
        shard.release_with_neighbours(&range);
        Ok(values)
    }

    /// Reads a floating-point matrix stored `[rows, cols]` as `f32` in `[cols, rows]` order
    /// (a Hugging Face `[out, in]` linear weight becomes burn's `[in, out]`).
    pub fn read_f32_transposed(&self, name: &str) -> Result<Vec<f32>, CheckpointError> {
        let (shard, location) = self.locate(name)?;
        let &[rows, cols] = location.shape.as_slice() else {
            return Err(CheckpointError::InvalidTensor {
                path: shard.path().to_path_buf(),
                name: name.to_string(),
                message: format!("expected a matrix, found shape {:?}", location.shape),
            });
        };
        let data = self.read_f32(name)?;
        Ok(convert::transpose(&data, rows, cols))
    }

    /// Reads an integer tensor (`I64` or `I32`) as `i64`.
    pub fn read_i64(&self, name: &str) -> Result<Vec<i64>, CheckpointError> {
        let (shard, location) = self.locate(name)?;
        convert::to_i64(location.dtype, shard.bytes(location))
            .ok_or_else(|| unsupported(shard, name, location, "I64 or I32"))
    }

    /// Reads a boolean tensor (`BOOL`, or `U8` holding 0/1).
    pub fn read_bool(&self, name: &str) -> Result<Vec<bool>, CheckpointError> {
        let (shard, location) = self.locate(name)?;
        match convert::to_bool(location.dtype, shard.bytes(location)) {
            Ok(Some(values)) => Ok(values),
            Ok(None) => Err(unsupported(shard, name, location, "BOOL")),
            Err(byte) => Err(CheckpointError::InvalidTensor {
                path: shard.path().to_path_buf(),
                name: name.to_string(),
                message: format!("boolean byte {byte} is neither 0 nor 1"),
            }),
        }
    }

    /// A [`StrictReader`] over this checkpoint.
    pub fn strict(&self) -> StrictReader<'_> {
        StrictReader::new(self)
    }

    fn locate(&self, name: &str) -> Result<(&Shard, &TensorLocation), CheckpointError> {
        self.tensors
            .get(name)
            .map(|(shard, location)| (&self.shards[*shard], location))
            .ok_or_else(|| CheckpointError::TensorNotFound {
                path: self.origin.clone(),
                name: name.to_string(),
            })
    }
}

fn unsupported(
    shard: &Shard,
    name: &str,
    location: &TensorLocation,
    expected: &'static str,
) -> CheckpointError {
    CheckpointError::UnsupportedDtype {
        path: shard.path().to_path_buf(),
        name: name.to_string(),
        dtype: format!("{:?}", location.dtype),
        expected,
    }
}
