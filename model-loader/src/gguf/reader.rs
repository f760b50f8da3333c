//! Parsing GGUF headers (metadata and tensor table) and memory-mapping tensor data.

use super::cursor::Cursor;
use super::value::{GgufValue, MetadataExt};
use super::{GgmlType, GgufError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Most metadata entries accepted.
pub const MAX_METADATA_ENTRIES: u64 = 1 << 16;
/// Most tensors accepted.
pub const MAX_TENSORS: u64 = 1 << 16;
/// Most elements in one metadata array.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest nesting of metadata arrays.
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Most dimensions of a tensor (GGML's limit).
pub const MAX_DIMS: u32 = 4;
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGML order: `dims[0]` is the contiguous (row) length.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub byte_len: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The shape in row-major order (outermost first), as PyTorch and safetensors use it.
    pub fn row_major_shape(&self) -> Vec<usize> {
        row_major_shape(&self.dims)
    }
}

/// GGML dimensions (contiguous first) as a row-major shape (outermost first).
pub(crate) fn row_major_shape(dims: &[u64]) -> Vec<usize> {
    dims.iter().rev().map(|&d| d as usize).collect()
}

/// A parsed GGUF header: version, metadata and tensor table.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// The format version (2 or 3).
    pub version: u32,
    metadata: Vec<(String, GgufValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Offset of the data section from the start of the file.
    pub data_offset: u64,
}

impl MetadataExt for GgufHeader {
    fn value(&self, key: &str) -> Option<&GgufValue> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }
}

impl GgufHeader {
    /// Parses the header of a GGUF file held in `bytes` and checks that every tensor's data
    /// lies inside `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, GgufError> {
        let mut cursor = Cursor::new(bytes);
        let magic = cursor.array::<4>(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = cursor.u32(&|| "version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = cursor.u64(&|| "tensor count".into())?;
        check_limit("tensor count", tensor_count, MAX_TENSORS)?;
        let metadata_count = cursor.u64(&|| "metadata entry count".into())?;
        check_limit("metadata entry count", metadata_count, MAX_METADATA_ENTRIES)?;
        // Reject counts the file cannot hold before reserving room for them.
        // (Both counts are within their limits, so the products cannot overflow.)
        let needed =
            metadata_count * MIN_METADATA_ENTRY_BYTES + tensor_count * MIN_TENSOR_INFO_BYTES;
        if needed > cursor.remaining() {
            return Err(GgufError::Truncated {
                what: format!("{metadata_count} metadata entries and {tensor_count} tensors"),
                offset: cursor.position(),
                needed,
                available: cursor.remaining(),
            });
        }

        let mut header = Self {
            version,
            metadata: Vec::with_capacity(metadata_count as usize),
            metadata_index: HashMap::with_capacity(metadata_count as usize),
            tensors: Vec::with_capacity(tensor_count as usize),
            tensor_index: HashMap::with_capacity(tensor_count as usize),
            data_offset: 0,
        };
        for i in 0..metadata_count {
            let key = cursor.string(&|| format!("key of metadata entry {i}"))?;
            let value = read_value(&mut cursor, &key, 0)?;
            if header
                .metadata_index
                .insert(key.clone(), header.metadata.len())
                .is_some()
            {
                return Err(GgufError::DuplicateKey(key));
            }
            header.metadata.push((key, value));
        }
        let alignment = header.alignment()?;
        for i in 0..tensor_count {
            let info = read_tensor_info(&mut cursor, i, alignment)?;
            if header
                .tensor_index
                .insert(info.name.clone(), header.tensors.len())
                .is_some()
            {
                return Err(GgufError::DuplicateTensor(info.name));
            }
            header.tensors.push(info);
        }
        header.data_offset = cursor.position().div_ceil(alignment) * alignment;
        let available = (bytes.len() as u64).saturating_sub(header.data_offset);
        for info in &header.tensors {
            if info
                .offset
                .checked_add(info.byte_len)
                .is_none_or(|end| end > available)
            {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: info.name.clone(),
                    offset: info.offset,
                    size: info.byte_len,
                    available,
                });
            }
        }
        Ok(header)
    }

    /// Data alignment from `general.alignment` (a power of two), default 32.
    fn alignment(&self) -> Result<u64, GgufError> {
        const KEY: &str = "general.alignment";
        let alignment = self.optional_u64(KEY)?.unwrap_or(DEFAULT_ALIGNMENT);
        if !alignment.is_power_of_two() {
            return Err(GgufError::InvalidMetadata {
                key: KEY.into(),
                message: format!("{alignment} is not a power of two"),
            });
        }
        Ok(alignment)
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }
}

/// Fails with [`GgufError::LimitExceeded`] when `value > limit`.
fn check_limit(what: &str, value: u64, limit: u64) -> Result<(), GgufError> {
    if value > limit {
        return Err(GgufError::LimitExceeded {
            what: what.into(),
            value,
            limit,
        });
    }
    Ok(())
}

/// Smallest encoded metadata entry: an empty key (its `u64` length), a type code, a one-byte
/// value.
const MIN_METADATA_ENTRY_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoded tensor table entry: an empty name, one dimension, type code, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// Smallest encoded size of one value of a type, used to reject array counts the file
/// cannot hold before allocating.
fn min_encoded_len(type_id: u32) -> u64 {
    match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,
        9 => 12,
        _ => 8,
    }
}

/// Reads a value of the type code that comes next.
fn read_value(cursor: &mut Cursor<'_>, key: &str, depth: usize) -> Result<GgufValue, GgufError> {
    let type_id = cursor.u32(&|| format!("type of metadata value {key:?}"))?;
    read_typed_value(cursor, key, type_id, depth)
}

/// Reads a value of type `type_id`.
fn read_typed_value(
    cursor: &mut Cursor<'_>,
    key: &str,
    type_id: u32,
    depth: usize,
) -> Result<GgufValue, GgufError> {
    let what = || format!("metadata value {key:?}");
    Ok(match type_id {
        0 => GgufValue::U8(u8::from_le_bytes(cursor.array(&what)?)),
        1 => GgufValue::I8(i8::from_le_bytes(cursor.array(&what)?)),
        2 => GgufValue::U16(u16::from_le_bytes(cursor.array(&what)?)),
        3 => GgufValue::I16(i16::from_le_bytes(cursor.array(&what)?)),
        4 => GgufValue::U32(u32::from_le_bytes(cursor.array(&what)?)),
        5 => GgufValue::I32(i32::from_le_bytes(cursor.array(&what)?)),
        6 => GgufValue::F32(f32::from_le_bytes(cursor.array(&what)?)),
        7 => match cursor.array::<1>(&what)?[0] {
            0 => GgufValue::Bool(false),
            1 => GgufValue::Bool(true),
            byte => {
                return Err(GgufError::InvalidBool {
                    key: key.into(),
                    byte,
                })
            }
        },
        8 => GgufValue::String(cursor.string(&what)?),
        9 => read_array(cursor, key, depth)?,
        10 => GgufValue::U64(u64::from_le_bytes(cursor.array(&what)?)),
        11 => GgufValue::I64(i64::from_le_bytes(cursor.array(&what)?)),
        12 => GgufValue::F64(f64::from_le_bytes(cursor.array(&what)?)),
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.into(),
                type_id,
            })
        }
    })
}

/// Reads an array: element type, count, then the elements.
fn read_array(cursor: &mut Cursor<'_>, key: &str, depth: usize) -> Result<GgufValue, GgufError> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::LimitExceeded {
            what: format!("array nesting of metadata value {key:?}"),
            value: depth as u64 + 1,
            limit: MAX_ARRAY_DEPTH as u64,
        });
    }
    let item_type = cursor.u32(&|| format!("element type of metadata array {key:?}"))?;
    let len = cursor.u64(&|| format!("length of metadata array {key:?}"))?;
    check_limit(
        &format!("length of metadata array {key:?}"),
        len,
        MAX_ARRAY_LEN,
    )?;
    let needed = len.saturating_mul(min_encoded_len(item_type));
    if needed > cursor.remaining() {
        return Err(GgufError::Truncated {
            what: format!("{len} elements of metadata array {key:?}"),
            offset: cursor.position(),
            needed,
            available: cursor.remaining(),
        });
    }
    let items = (0..len)
        .map(|_| read_typed_value(cursor, key, item_type, depth + 1))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GgufValue::Array(items))
}

/// Reads one tensor table entry and checks its dimensions, type and alignment.
fn read_tensor_info(
    cursor: &mut Cursor<'_>,
    index: u64,
    alignment: u64,
) -> Result<TensorInfo, GgufError> {
    let name = cursor.string(&|| format!("name of tensor {index}"))?;
    let what = || format!("tensor {name:?}");
    let n_dims = cursor.u32(&what)?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::tensor(
            &name,
            format!("{n_dims} dimensions (expected 1 to {MAX_DIMS})"),
        ));
    }
    let dims = (0..n_dims)
        .map(|_| cursor.u64(&what))
        .collect::<Result<Vec<_>, _>>()?;
    let type_id = cursor.u32(&what)?;
    let offset = cursor.u64(&what)?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.clone(),
        type_id,
    })?;
    if dims.contains(&0) {
        return Err(GgufError::tensor(
            &name,
            format!("dimensions {dims:?} contain a zero"),
        ));
    }
    let elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= 1 << 40)
        .ok_or_else(|| {
            GgufError::tensor(&name, format!("dimensions {dims:?} hold too many elements"))
        })?;
    if !dims[0].is_multiple_of(ggml_type.block_len()) {
        return Err(GgufError::tensor(
            &name,
            format!(
                "row length {} is not a multiple of the {} block length {}",
                dims[0],
                ggml_type.name(),
                ggml_type.block_len()
            ),
        ));
    }
    if !offset.is_multiple_of(alignment) {
        return Err(GgufError::tensor(
            &name,
            format!("data offset {offset} is not a multiple of the alignment {alignment}"),
        ));
    }
    let byte_len = elements / ggml_type.block_len() * ggml_type.block_bytes();
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        byte_len,
    })
}

/// A memory-mapped GGUF file with its parsed header.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    map: memmap2::Mmap,
    header: GgufHeader,
}

impl GgufFile {
    /// Opens and parses `path`; errors name the file.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let file = std::fs::File::open(path).map_err(|e| GgufError::io(path, e))?;
        // SAFETY: the map is read-only; the file is not expected to change while it is open
        // (a concurrent writer could change the bytes we read, never memory safety of Rust
        // values, as every read goes through bounds-checked slices of plain bytes).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| GgufError::io(path, e))?;
        let header = GgufHeader::parse(&map).map_err(|e| GgufError::File {
            path: path.to_path_buf(),
            error: Box::new(e),
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            map,
            header,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The raw bytes of tensor `info` (an entry of this file's tensor table).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<&[u8], GgufError> {
        let start = self.header.data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.byte_len));
        start
            .zip(end)
            .and_then(|(s, e)| self.map.get(s as usize..e as usize))
            .ok_or_else(|| GgufError::TensorOutOfBounds {
                tensor: info.name.clone(),
                offset: info.offset,
                size: info.byte_len,
                available: (self.map.len() as u64).saturating_sub(self.header.data_offset),
            })
    }
}
