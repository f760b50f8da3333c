//! What the tests of the integer group kernels (Q8_0 and Q4_1 weights, modules `q8_0` and
//! `q4_1`) share: a format's outputs through each of its kernels, and their check against an
//! `f64` reference on the same quantized inputs.

use super::q8_0::{InputPrecision, Output, QuantizedRows};
use super::test_util::Lcg;

/// A weight format's matrix and the entry points of its kernels.
pub(super) trait GroupWeights {
    /// Output rows.
    fn rows(&self) -> usize;
    /// Input width.
    fn cols(&self) -> usize;
    /// Groups of 16 rows.
    fn groups(&self) -> usize;
    /// Row `row` as `f32`.
    fn dequantize_row(&self, row: usize, out: &mut [f32]);
    /// The CPU's best kernel for group `group` and every input row.
    ///
    /// # Safety
    /// `out` must be `[x.rows(), self.rows()]` and written by no one else meanwhile.
    unsafe fn dispatched(&self, group: usize, x: &QuantizedRows, bias: &[f32], out: Output);
    /// The portable kernel for group `group` and every input row.
    ///
    /// # Safety
    /// As for [`GroupWeights::dispatched`].
    unsafe fn portable(&self, group: usize, x: &QuantizedRows, bias: &[f32], out: Output);
    /// The AVX2 kernel for group `group` and input row `row`.
    ///
    /// # Safety
    /// As for [`GroupWeights::dispatched`], on a CPU with AVX2, FMA and F16C; split inputs must
    /// carry their 16-bit values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_row(
        &self,
        group: usize,
        x: &QuantizedRows,
        row: usize,
        bias: &[f32],
        out: Output,
    );
}

/// Implements [`GroupWeights`] for the matrix type `$matrix` through the kernels in scope where
/// it is invoked (`project_groups`, `portable_group_dots`, `avx2::group_dots`), which every
/// group-kernel module names alike.
macro_rules! impl_group_weights {
    ($matrix:ty) => {
        impl $crate::kernels::group_kernel_tests::GroupWeights for $matrix {
            fn rows(&self) -> usize {
                <$matrix>::rows(self)
            }

            fn cols(&self) -> usize {
                <$matrix>::cols(self)
            }

            fn groups(&self) -> usize {
                <$matrix>::groups(self)
            }

            fn dequantize_row(&self, row: usize, out: &mut [f32]) {
                <$matrix>::dequantize_row(self, row, out)
            }

            unsafe fn dispatched(
                &self,
                group: usize,
                x: &QuantizedRows,
                bias: &[f32],
                out: Output,
            ) {
                // SAFETY: the caller's guarantee.
                unsafe { project_groups(self, group..group + 1, x, Some(bias), out) }
            }

            unsafe fn portable(&self, group: usize, x: &QuantizedRows, bias: &[f32], out: Output) {
                // SAFETY: the caller's guarantee.
                unsafe { portable_group_dots(self, group, x, 0..x.rows(), Some(bias), out) }
            }

            #[cfg(target_arch = "x86_64")]
            unsafe fn avx2_row(
                &self,
                group: usize,
                x: &QuantizedRows,
                row: usize,
                bias: &[f32],
                out: Output,
            ) {
                // SAFETY: the caller's guarantee.
                unsafe {
                    dispatch_rows!(
                        x.precision,
                        1,
                        [1],
                        avx2::group_dots(self, group, x, row, Some(bias), out)
                    )
                }
            }
        }
    };
}
pub(super) use impl_group_weights;

/// Which kernel a test runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kernel {
    /// The CPU's best.
    Dispatched,
    /// The AVX2 kernel, even where AVX-512 VNNI is there.
    Avx2,
    /// The portable twin.
    Portable,
}

/// Every group's outputs by `kernel`.
pub(super) fn outputs(
    w: &impl GroupWeights,
    x: &QuantizedRows,
    bias: &[f32],
    kernel: Kernel,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; x.rows() * w.rows()];
    let output = Output {
        values: out.as_mut_ptr(),
        n: w.rows(),
    };
    for group in 0..w.groups() {
        // SAFETY: `out` is [rows, n] and only this call writes it; the AVX2 kernel runs only
        // where the CPU has AVX2, FMA and F16C, one input row at a time.
        unsafe {
            match kernel {
                Kernel::Dispatched => w.dispatched(group, x, bias, output),
                Kernel::Portable => w.portable(group, x, bias, output),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => {
                    assert!(super::has_avx2());
                    for row in 0..x.rows() {
                        w.avx2_row(group, x, row, bias, output);
                    }
                }
                #[cfg(not(target_arch = "x86_64"))]
                Kernel::Avx2 => unreachable!("no AVX2 off x86-64"),
            }
        }
    }
    out
}

/// Σ over blocks of the widened weights of row `c` times the input block's scale and integers,
/// with input row `r`'s quantized values, in `f64`.
fn reference(w: &impl GroupWeights, c: usize, x: &QuantizedRows, r: usize) -> f64 {
    let mut row = vec![0.0; w.cols()];
    w.dequantize_row(c, &mut row);
    row.chunks_exact(w.cols() / x.blocks)
        .enumerate()
        .map(|(b, wb)| {
            let scale = f64::from(x.scales[r * x.blocks + b]);
            wb.iter()
                .enumerate()
                .map(|(k, &w)| f64::from(w) * f64::from(x.value(r, b, k)) * scale)
                .sum::<f64>()
        })
        .sum()
}

/// Checks every kernel the CPU has against [`reference`] for `rows` random input rows (and a
/// random bias), at both input precisions.
pub(super) fn check_against_reference(w: &impl GroupWeights, rows: usize, rng: &mut Lcg) {
    let (cols, n) = (w.cols(), w.rows());
    let x = rng.vec(rows * cols, -2.0, 2.0);
    let bias = rng.vec(n, -1.0, 1.0);
    for precision in [InputPrecision::Byte, InputPrecision::Split] {
        // Split inputs carry their 16-bit values for the AVX2 kernel here too.
        let q = QuantizedRows::new(&x, rows, cols, precision).with_wide_values();
        let avx2 = super::has_avx2();
        let kernels = [Kernel::Dispatched, Kernel::Portable, Kernel::Avx2];
        for kernel in kernels.into_iter().filter(|&k| k != Kernel::Avx2 || avx2) {
            let out = outputs(w, &q, &bias, kernel);
            for r in 0..rows {
                for c in 0..n {
                    let want = reference(w, c, &q, r) + f64::from(bias[c]);
                    let got = f64::from(out[r * n + c]);
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{kernel:?} {precision:?}, {cols} cols, row {r}, column {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
