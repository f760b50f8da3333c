//! Input rows copied to cache-line-aligned memory for the float kernels.
//!
//! The `f32` and bfloat16 kernels load every input row once per weight row and input row, so
//! a row that starts off a vector boundary splits every other load over two cache lines (an
//! allocator aligns buffers to 16 bytes only). With several input rows per pass, the loads of
//! the inputs are what bounds the kernel, and split loads cost as much again; copying the rows
//! to an aligned buffer once per product is a few kilobytes against megabytes of weights.

/// Alignment of the copies: one cache line, the width of an AVX-512 vector.
pub(crate) const ALIGNMENT: usize = 64;

/// Floats per aligned line.
const LINE_FLOATS: usize = ALIGNMENT / std::mem::size_of::<f32>();

/// One cache line of floats.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([f32; LINE_FLOATS]);

// SAFETY: `Line` is 16 `f32`s, 64 bytes with an alignment of 64: no padding, and every bit
// pattern is a valid value.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Line` is `Copy`, `repr(C)` and `'static`.
unsafe impl bytemuck::Pod for Line {}

/// A copy of some `f32` values that starts on an [`ALIGNMENT`] boundary.
pub(crate) struct AlignedRows {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedRows {
    /// A copy of `values`, aligned.
    pub(crate) fn copy_of(values: &[f32]) -> Self {
        let mut lines = vec![Line([0.0; LINE_FLOATS]); values.len().div_ceil(LINE_FLOATS)];
        bytemuck::cast_slice_mut::<Line, f32>(&mut lines)[..values.len()].copy_from_slice(values);
        Self {
            lines,
            len: values.len(),
        }
    }

    /// The copied values.
    pub(crate) fn as_slice(&self) -> &[f32] {
        &bytemuck::cast_slice::<Line, f32>(&self.lines)[..self.len]
    }
}

/// Whether `values` starts on an [`ALIGNMENT`] boundary.
pub(crate) fn is_aligned(values: &[f32]) -> bool {
    (values.as_ptr() as usize).is_multiple_of(ALIGNMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_aligned_and_equal_to_their_values() {
        let values: Vec<f32> = (0..100).map(|i| i as f32 * 0.5 - 7.0).collect();
        for start in 0..5 {
            for len in [0, 1, 15, 16, 17, 95] {
                let source = &values[start..start + len];
                let copy = AlignedRows::copy_of(source);
                assert!(
                    is_aligned(copy.as_slice()),
                    "copy of {len} values off {start}"
                );
                assert_eq!(copy.as_slice(), source);
            }
        }
        let copy = AlignedRows::copy_of(&values);
        assert!(!is_aligned(&copy.as_slice()[1..]));
    }
}
