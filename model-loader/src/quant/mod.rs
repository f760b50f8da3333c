//! Weight formats of the linear layers: [`WeightFormat`] names one, [`PackedWeight`] holds a
//! `[out, in]` matrix in a packed one.
//!
//! - [`WeightFormat::F32`]: plain `f32` (the checkpoint's values).
//! - [`WeightFormat::Q8_0`]: ggml's Q8_0 — blocks of 32 consecutive values of a row, each an
//!   `f16` scale `d` and 32 signed 8-bit integers `q`, value `d * q` ([`Q8_0Matrix`]).
//! - [`WeightFormat::Bf16`]: bfloat16, rounded to nearest even ([`Bf16Matrix`]).
//! - [`WeightFormat::Q4_1`]: ggml's Q4_1 for the projections — blocks of 32 four-bit integers
//!   `q` with an `f16` scale `d` and minimum `m`, value `d * q + m` ([`Q4_1Matrix`]) — and
//!   Q8_0 for the token table and lm_head, as llama.cpp's Q4_1 files hold them (a 4-bit
//!   vocabulary projection costs more in quality than its bytes are worth).
//!
//! The CPU kernels ([`crate::kernels::gemv`], [`crate::kernels::gemm`]) read packed weights
//! directly. Backends without kernels for them (CUDA, the generic CPU path) get the packed
//! values dequantized to floats at load, so every backend computes with the same weights.

mod bf16;
mod q4_1;
mod q8_0;

pub use bf16::Bf16Matrix;
pub use q4_1::{Q4_1Block, Q4_1Group, Q4_1Matrix, Q4_1_BLOCK, Q4_1_GROUP};
pub(crate) use q8_0::quantize_block as q8_0_block;
pub use q8_0::{Q8_0Matrix, Q8_0_BLOCK, Q8_0_GROUP};

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The format the projections and the lm_head are held in (see the module docs).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum WeightFormat {
    /// 32-bit floats.
    #[default]
    #[serde(rename = "f32")]
    F32,
    /// ggml's Q8_0: 8-bit integers in blocks of 32 with an `f16` scale each.
    #[serde(rename = "q8_0")]
    Q8_0,
    /// bfloat16.
    #[serde(rename = "bf16")]
    Bf16,
    /// ggml's Q4_1 projections (4-bit integers in blocks of 32 with an `f16` scale and minimum
    /// each) beside a Q8_0 token table and lm_head.
    #[serde(rename = "q4_1")]
    Q4_1,
}

impl WeightFormat {
    /// Every format, in the order reports list them.
    pub const ALL: [WeightFormat; 4] = [
        WeightFormat::F32,
        WeightFormat::Q8_0,
        WeightFormat::Bf16,
        WeightFormat::Q4_1,
    ];

    /// The format's name as the command-line options and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::Q8_0 => "q8_0",
            WeightFormat::Bf16 => "bf16",
            WeightFormat::Q4_1 => "q4_1",
        }
    }

    /// The format of the token table and lm_head beside projections in this format: Q8_0 for
    /// [`WeightFormat::Q4_1`], else the format itself.
    pub fn table_format(self) -> WeightFormat {
        match self {
            WeightFormat::Q4_1 => WeightFormat::Q8_0,
            format => format,
        }
    }

    /// Whether rows `cols` wide can be packed in this format (never for [`WeightFormat::F32`],
    /// which is not packed; Q8_0 and Q4_1 need whole blocks).
    pub fn packs(self, cols: usize) -> bool {
        match self {
            WeightFormat::F32 => false,
            WeightFormat::Q8_0 => cols.is_multiple_of(Q8_0_BLOCK),
            WeightFormat::Q4_1 => cols.is_multiple_of(Q4_1_BLOCK),
            WeightFormat::Bf16 => true,
        }
    }
}

/// Rows that packing from a row source reads at a time for rows `cols` wide: about 1 MiB of
/// `f32`, so that a packed matrix never costs more than that in passing.
fn rows_per_read(cols: usize) -> usize {
    const READ_BYTES: usize = 1 << 20;
    (READ_BYTES / (4 * cols.max(1))).max(1)
}

/// Reads a `[rows, cols]` matrix through `read` in consecutive ranges of whole groups of
/// `group` rows (about [`rows_per_read`] rows each) and hands `fill` each range's first row
/// and values.
///
/// # Panics
/// If `read` returns other than `range.len() * cols` values.
fn read_group_ranges(
    rows: usize,
    cols: usize,
    group: usize,
    mut read: impl FnMut(std::ops::Range<usize>) -> Vec<f32>,
    mut fill: impl FnMut(usize, &[f32]),
) {
    let chunk = rows_per_read(cols).next_multiple_of(group);
    for start in (0..rows).step_by(chunk) {
        let range = start..(start + chunk).min(rows);
        let values = read(range.clone());
        assert_eq!(values.len(), range.len() * cols, "a short read of rows");
        fill(start, &values);
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown weight format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown weight format `{0}`: choose f32, q8_0, bf16 or q4_1")]
pub struct UnknownWeightFormat(pub String);

impl FromStr for WeightFormat {
    type Err = UnknownWeightFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WeightFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownWeightFormat(s.to_string()))
    }
}

/// A row-major `[out, in]` weight matrix in a packed format; cloning shares the values.
#[derive(Clone, Debug)]
pub enum PackedWeight {
    /// Q8_0 blocks.
    Q8_0(Arc<Q8_0Matrix>),
    /// bfloat16 values.
    Bf16(Arc<Bf16Matrix>),
    /// Q4_1 blocks.
    Q4_1(Arc<Q4_1Matrix>),
}

impl PackedWeight {
    /// `values` (row-major `[rows, cols]`) packed in `format`, or `None` for
    /// [`WeightFormat::F32`] and for shapes the format cannot hold (Q8_0 and Q4_1 need rows
    /// whose width is a multiple of their block).
    ///
    /// # Panics
    /// If `values` does not hold `rows * cols` values.
    pub fn pack(format: WeightFormat, values: &[f32], rows: usize, cols: usize) -> Option<Self> {
        assert_eq!(
            values.len(),
            rows * cols,
            "pack: values are not [rows, cols]"
        );
        Self::pack_rows(format, rows, cols, |range| {
            values[range.start * cols..range.end * cols].to_vec()
        })
    }

    /// A `[rows, cols]` matrix packed in `format` as [`PackedWeight::pack`] packs it, taking
    /// its values from `read` a range of rows at a time (`read(range)` returns those rows,
    /// row-major), so that the whole matrix is never held as `f32`; `None` where
    /// [`WeightFormat::packs`] says no.
    ///
    /// # Panics
    /// If `read` returns other than `range.len() * cols` values.
    pub fn pack_rows(
        format: WeightFormat,
        rows: usize,
        cols: usize,
        read: impl FnMut(std::ops::Range<usize>) -> Vec<f32>,
    ) -> Option<Self> {
        if !format.packs(cols) {
            return None;
        }
        match format {
            WeightFormat::F32 => None,
            WeightFormat::Q8_0 => {
                Q8_0Matrix::quantize_rows(rows, cols, read).map(|m| PackedWeight::Q8_0(Arc::new(m)))
            }
            WeightFormat::Bf16 => Some(PackedWeight::Bf16(Arc::new(Bf16Matrix::from_rows(
                rows, cols, read,
            )))),
            WeightFormat::Q4_1 => {
                Q4_1Matrix::quantize_rows(rows, cols, read).map(|m| PackedWeight::Q4_1(Arc::new(m)))
            }
        }
    }

    /// The format.
    pub fn format(&self) -> WeightFormat {
        match self {
            PackedWeight::Q8_0(_) => WeightFormat::Q8_0,
            PackedWeight::Bf16(_) => WeightFormat::Bf16,
            PackedWeight::Q4_1(_) => WeightFormat::Q4_1,
        }
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        match self {
            PackedWeight::Q8_0(m) => [m.rows(), m.cols()],
            PackedWeight::Bf16(m) => [m.rows(), m.cols()],
            PackedWeight::Q4_1(m) => [m.rows(), m.cols()],
        }
    }

    /// Bytes the packed values occupy.
    pub fn bytes(&self) -> usize {
        match self {
            PackedWeight::Q8_0(m) => m.bytes(),
            PackedWeight::Bf16(m) => m.bytes(),
            PackedWeight::Q4_1(m) => m.bytes(),
        }
    }

    /// Row `row` as `f32`, written to `out` (`cols` long).
    ///
    /// # Panics
    /// If `row` is out of range or `out` is not `cols` long.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        match self {
            PackedWeight::Q8_0(m) => m.dequantize_row(row, out),
            PackedWeight::Bf16(m) => m.dequantize_row(row, out),
            PackedWeight::Q4_1(m) => m.dequantize_row(row, out),
        }
    }

    /// The whole matrix as row-major `f32`.
    pub fn dequantize(&self) -> Vec<f32> {
        let [rows, cols] = self.shape();
        dequantize_rows(rows, cols, |r, row| self.dequantize_row(r, row))
    }
}

/// A row-major `[rows, cols]` matrix whose rows `row_values` writes, in parallel.
pub(crate) fn dequantize_rows(
    rows: usize,
    cols: usize,
    row_values: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0f32; rows * cols];
    dequantize_rows_into(&mut out, cols, row_values);
    out
}

/// Fills the row-major matrix `out` (`cols` wide) in parallel, row `r` by `row_values(r, row)`.
pub(crate) fn dequantize_rows_into(
    out: &mut [f32],
    cols: usize,
    row_values: impl Fn(usize, &mut [f32]) + Sync,
) {
    use rayon::prelude::*;
    if cols > 0 {
        out.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, row)| row_values(r, row));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for format in WeightFormat::ALL {
            assert_eq!(format.name().parse::<WeightFormat>(), Ok(format));
            let json = serde_json::to_string(&format).unwrap();
            assert_eq!(json, format!("\"{format}\""));
        }
        assert_eq!("Q8_0".parse::<WeightFormat>(), Ok(WeightFormat::Q8_0));
        let err = "q4".parse::<WeightFormat>().unwrap_err();
        assert!(err.to_string().contains("choose f32, q8_0, bf16 or q4_1"));
        assert_eq!(WeightFormat::Q4_1.table_format(), WeightFormat::Q8_0);
        assert_eq!(WeightFormat::Bf16.table_format(), WeightFormat::Bf16);
    }

    #[test]
    fn packing_keeps_the_shape_and_close_values() {
        let (rows, cols) = (3, 64);
        let values: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        assert!(PackedWeight::pack(WeightFormat::F32, &values, rows, cols).is_none());
        for (format, tolerance) in [
            (WeightFormat::Q8_0, 1.0 / 127.0),
            (WeightFormat::Bf16, 1.0 / 127.0),
            (WeightFormat::Q4_1, 1.0 / 15.0),
        ] {
            let packed = PackedWeight::pack(format, &values, rows, cols).unwrap();
            assert_eq!((packed.format(), packed.shape()), (format, [rows, cols]));
            for (a, b) in packed.dequantize().iter().zip(&values) {
                assert!((a - b).abs() <= tolerance, "{format}: {a} vs {b}");
            }
        }
        // Q8_0 and Q4_1 rows must be whole blocks.
        for format in [WeightFormat::Q8_0, WeightFormat::Q4_1] {
            assert!(PackedWeight::pack(format, &values[..3 * 40], 3, 40).is_none());
        }
    }

    #[test]
    fn packing_from_row_ranges_equals_packing_the_whole_matrix() {
        // More rows than one read takes, and a last read that cuts a Q8_0 group.
        let cols = 64;
        let rows = 2 * rows_per_read(cols) + 21;
        let values: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.013).cos()).collect();
        for format in [WeightFormat::Q8_0, WeightFormat::Bf16, WeightFormat::Q4_1] {
            let mut reads = Vec::new();
            let packed = PackedWeight::pack_rows(format, rows, cols, |range| {
                reads.push(range.clone());
                values[range.start * cols..range.end * cols].to_vec()
            })
            .unwrap();
            // The whole-matrix constructors.
            let whole = match format {
                WeightFormat::Q8_0 => {
                    PackedWeight::Q8_0(Arc::new(Q8_0Matrix::quantize(&values, rows, cols).unwrap()))
                }
                WeightFormat::Q4_1 => {
                    PackedWeight::Q4_1(Arc::new(Q4_1Matrix::quantize(&values, rows, cols).unwrap()))
                }
                _ => PackedWeight::Bf16(Arc::new(Bf16Matrix::from_f32(&values, rows, cols))),
            };
            assert_eq!(packed.dequantize(), whole.dequantize(), "{format}");
            assert_eq!(packed.bytes(), whole.bytes());
            assert!(reads.len() >= 3, "{format}: {reads:?}");
            assert!(reads.windows(2).all(|w| w[0].end == w[1].start));
            assert_eq!((reads[0].start, reads.last().unwrap().end), (0, rows));
        }
        assert!(PackedWeight::pack_rows(WeightFormat::F32, 2, cols, |_| unreachable!()).is_none());
        assert!(PackedWeight::pack_rows(WeightFormat::Q8_0, 2, 40, |_| unreachable!()).is_none());
    }
}
