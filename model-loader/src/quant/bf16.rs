//! [`Bf16Matrix`]: a row-major matrix of bfloat16 values.

use half::bf16;
use std::ops::Range;

/// A `[rows, cols]` matrix of bfloat16 values (the upper 16 bits of an `f32`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bf16Matrix {
    rows: usize,
    cols: usize,
    values: Vec<bf16>,
}

impl Bf16Matrix {
    /// Row-major `values` rounded to the nearest bfloat16 (ties to even).
    ///
    /// # Panics
    /// If `values` does not hold `rows * cols` values.
    pub fn from_f32(values: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            values.len(),
            rows * cols,
            "from_f32: values are not [rows, cols]"
        );
        let values: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
        crate::huge_pages::back_with_huge_pages(&values);
        Self { rows, cols, values }
    }

    /// A `[rows, cols]` matrix rounded as [`Bf16Matrix::from_f32`] rounds, taking its values
    /// from `read` a range of rows at a time (`read(range)` returns those rows, row-major), so
    /// that the whole matrix is never held as `f32`.
    ///
    /// # Panics
    /// If `read` returns other than `range.len() * cols` values.
    pub fn from_rows(
        rows: usize,
        cols: usize,
        mut read: impl FnMut(Range<usize>) -> Vec<f32>,
    ) -> Self {
        let chunk = super::rows_per_read(cols);
        let mut values = Vec::with_capacity(rows * cols);
        for start in (0..rows).step_by(chunk) {
            let range = start..(start + chunk).min(rows);
            let read = read(range.clone());
            assert_eq!(read.len(), range.len() * cols, "from_rows: short read");
            values.extend(read.iter().map(|&v| bf16::from_f32(v)));
        }
        crate::huge_pages::back_with_huge_pages(&values);
        Self { rows, cols, values }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of values.
    pub fn bytes(&self) -> usize {
        2 * self.values.len()
    }

    /// Row `row`'s values.
    pub fn row(&self, row: usize) -> &[bf16] {
        &self.values[row * self.cols..(row + 1) * self.cols]
    }

    /// Row `row` as `f32` in `out`.
    ///
    /// # Panics
    /// If `row >= rows` or `out` is not `cols` long.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        assert!(
            row < self.rows && out.len() == self.cols,
            "dequantize_row: bad row or length"
        );
        for (o, v) in out.iter_mut().zip(self.row(row)) {
            *o = v.to_f32();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even() {
        // 1 + 2^-8 lies halfway between two bfloat16 values: ties go to the even one (1.0).
        let values = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), -2.5];
        let m = Bf16Matrix::from_f32(&values, 1, 3);
        let mut out = [0.0; 3];
        m.dequantize_row(0, &mut out);
        assert_eq!(out, [1.0, 1.0 + 2f32.powi(-6), -2.5]);
        assert_eq!(m.bytes(), 6);
    }
}
