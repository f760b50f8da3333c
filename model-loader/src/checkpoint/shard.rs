//! One memory-mapped safetensors file and the byte ranges of its tensors.

use super::CheckpointError;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Size of the pages [`Shard::release`] drops (whole pages inside a range only).
pub(crate) const PAGE: usize = 4096;

/// The aligned window of cached file pages that Linux may map on one page fault: the
/// fault-around window (64 KiB by default) or, for a large folio of the page cache, the whole
/// folio, which lies inside one PMD-sized block (2 MiB on x86-64 and arm64 with 4 KiB pages).
pub(crate) const MAPPED_AROUND: usize = 2 << 20;

/// Where one tensor lives in a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorLocation {
    /// Element type.
    pub dtype: Dtype,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// Byte range in the mapped file.
    pub bytes: Range<usize>,
}

/// A memory-mapped safetensors file with a validated header.
#[derive(Debug)]
pub(crate) struct Shard {
    path: PathBuf,
    map: Mmap,
}

impl Shard {
    /// Maps `path` and validates its header: offsets must tile the data section exactly and
    /// the file must be exactly as long as the header says. Returns the shard and its tensors.
    pub(crate) fn open(
        path: &Path,
    ) -> Result<(Self, Vec<(String, TensorLocation)>), CheckpointError> {
        let io_error = |source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_error)?;
        // SAFETY: the map is read-only; the checkpoint files are not expected to change while
        // a model is loaded from them (as with every mmap-based safetensors loader).
        let map = unsafe { Mmap::map(&file) }.map_err(io_error)?;
        let (header_len, metadata) =
            SafeTensors::read_metadata(&map).map_err(|e| CheckpointError::InvalidFile {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let data_start = 8 + header_len;
        let tensors = metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (start, end) = info.data_offsets;
                let location = TensorLocation {
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    bytes: data_start + start..data_start + end,
                };
                (name, location)
            })
            .collect();
        Ok((
            Self {
                path: path.to_path_buf(),
                map,
            },
            tensors,
        ))
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of a tensor of this shard.
    pub(crate) fn bytes(&self, location: &TensorLocation) -> &[u8] {
        &self.map[location.bytes.clone()]
    }

    /// The bytes `bytes` of the mapped file.
    pub(crate) fn range(&self, bytes: &Range<usize>) -> &[u8] {
        &self.map[bytes.clone()]
    }

    /// Lets the kernel drop the resident pages of `bytes` of the file once read (the whole
    /// pages inside the range), so that a loaded model does not also keep its file's pages:
    /// they count in the process's resident memory for as long as the map lives. Reading the
    /// tensor again reads the file again. Best effort: a refusal changes nothing.
    pub(crate) fn release(&self, bytes: &Range<usize>) {
        #[cfg(unix)]
        {
            let start = bytes.start.next_multiple_of(PAGE);
            let end = bytes.end.min(self.map.len()) / PAGE * PAGE;
            if end > start {
                // SAFETY: the map is a private read-only file mapping: dropping its pages only
                // makes the next access read them from the file again, with the same contents.
                let _ = unsafe {
                    self.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = bytes;
    }

    /// [`Shard::release`] of `bytes` widened to the [`MAPPED_AROUND`] blocks it touches: a
    /// page fault inside `bytes` may map cached pages around it up to those bounds, which
    /// would otherwise stay mapped (and resident) after the read. Dropping a neighbour's pages
    /// early only makes its own read fault them in again from the page cache.
    pub(crate) fn release_with_neighbours(&self, bytes: &Range<usize>) {
        let start = bytes.start / MAPPED_AROUND * MAPPED_AROUND;
        let end = bytes.end.saturating_add(MAPPED_AROUND - 1) / MAPPED_AROUND * MAPPED_AROUND;
        self.release(&(start..end));
    }
}
