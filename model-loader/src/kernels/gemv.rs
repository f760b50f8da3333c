//! Products of a few rows with weights stored `[out, in]` (Hugging Face layout): decoding,
//! draft verification and small batches, where reading the weights is the whole cost.
//!
//! Every output is a dot product of an input row with a contiguous weight row, so each worker
//! thread streams its own share of the weights once, whatever the number of input rows: a tile
//! of weight rows is multiplied with up to eight input rows at a time while it sits in
//! registers and L1 (four weight rows for up to four input rows, three for up to eight, so the
//! accumulators stay within the 32 vector registers). CPUs with AVX2 but no AVX-512 read the
//! weight rows one after another instead (module `avx2`). Q8_0 and Q4_1 weights go to their
//! own kernels (modules `q8_0` and `q4_1`), which work on groups of 16 interleaved weight rows
//! and up to six input rows at a time.

use super::aligned::{is_aligned, AlignedRows};
use super::q8_0::{InputPrecision, QuantizedRows};
use crate::quant::{Bf16Matrix, Q4_1Matrix, Q8_0Matrix, Q4_1_GROUP, Q8_0_GROUP};
use rayon::prelude::*;

/// Input rows up to which [`project_rows`], which streams each weight row once for all input
/// rows, is chosen over a general matrix product; larger products use GEMM (`bench_kernels`
/// compares the two).
pub const MAX_GEMV_ROWS: usize = 16;

/// Bytes of weights one parallel task reads (small enough to balance, large enough that
/// scheduling costs nothing).
const TASK_BYTES: usize = 64 * 1024;

/// Tasks cover whole multiples of this many weight rows: whole tiles of three and four rows,
/// and whole Q8_0 and Q4_1 groups.
const TASK_ROW_MULTIPLE: usize = 48;

/// Most input rows one tile multiplies.
const MAX_TILE_HEIGHT: usize = 8;

/// Most weight rows one tile multiplies.
const MAX_TILE_WIDTH: usize = 4;

/// Tile width for `height` input rows: four weight rows up to four input rows, three beyond
/// (8 × 3 accumulators, three weight and one input register: 28 of 32).
fn tile_width(height: usize) -> usize {
    if height <= 4 {
        MAX_TILE_WIDTH
    } else {
        3
    }
}

/// Output tile of the tile kernels: `dots[r][c]` for input row `r` and weight row `c`.
pub(super) type Dots = [[f32; MAX_TILE_WIDTH]; MAX_TILE_HEIGHT];

/// A `[out, in]` weight in one of the formats the kernels read.
#[derive(Debug, Clone, Copy)]
pub enum WeightRef<'a> {
    /// Row-major `f32` values.
    F32(&'a [f32]),
    /// Q8_0 blocks (the input rows are quantized per block for them).
    Q8_0(&'a Q8_0Matrix),
    /// bfloat16 values.
    Bf16(&'a Bf16Matrix),
    /// Q4_1 blocks (the input rows are quantized per block for them, as for Q8_0).
    Q4_1(&'a Q4_1Matrix),
}

impl WeightRef<'_> {
    /// Output rows for inputs `d_in` wide.
    pub fn rows(&self, d_in: usize) -> usize {
        match self {
            WeightRef::F32(w) => w.len() / d_in.max(1),
            WeightRef::Q8_0(m) => m.rows(),
            WeightRef::Bf16(m) => m.rows(),
            WeightRef::Q4_1(m) => m.rows(),
        }
    }

    /// Row `row` of a packed weight widened to `f32` in `out` (`d_in` long).
    ///
    /// # Panics
    /// For `f32` weights, which are not packed, or a row out of range.
    pub(super) fn widen_row(&self, row: usize, out: &mut [f32]) {
        match self {
            WeightRef::Q8_0(m) => m.dequantize_row(row, out),
            WeightRef::Bf16(m) => m.dequantize_row(row, out),
            WeightRef::Q4_1(m) => m.dequantize_row(row, out),
            WeightRef::F32(_) => panic!("f32 weights are not packed"),
        }
    }

    /// Whether the kernel reads the input rows quantized per block.
    fn reads_quantized_inputs(&self) -> bool {
        matches!(self, WeightRef::Q8_0(_) | WeightRef::Q4_1(_))
    }

    /// Whether the rows are `d_in` wide.
    fn has_width(&self, d_in: usize) -> bool {
        match self {
            WeightRef::F32(w) => w.len() % d_in.max(1) == 0,
            WeightRef::Q8_0(m) => m.cols() == d_in,
            WeightRef::Bf16(m) => m.cols() == d_in,
            WeightRef::Q4_1(m) => m.cols() == d_in,
        }
    }

    /// Bytes of one row `d_in` wide (the task size is counted in bytes read).
    fn row_bytes(&self, d_in: usize) -> usize {
        match self {
            WeightRef::F32(_) => 4 * d_in,
            WeightRef::Q8_0(_) => d_in + d_in / 16,
            WeightRef::Bf16(_) => 2 * d_in,
            WeightRef::Q4_1(_) => d_in / 2 + d_in / 8,
        }
        .max(1)
    }
}

/// One projection: a `[out, in]` weight and an optional `[out]` bias.
#[derive(Debug, Clone, Copy)]
pub struct ProjectionRef<'a> {
    /// The weight.
    pub weight: WeightRef<'a>,
    /// Optional `[out]` bias.
    pub bias: Option<&'a [f32]>,
}

impl ProjectionRef<'_> {
    fn outputs(&self, d_in: usize) -> usize {
        self.weight.rows(d_in)
    }
}

/// A raw output pointer shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: every task writes a disjoint set of output elements (its own columns), and the
// buffers outlive the parallel loop that uses the pointers.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// The input rows as each weight format's kernel reads them.
struct Inputs<'a> {
    x: &'a [f32],
    /// The rows quantized per block, when a projection has Q8_0 or Q4_1 weights.
    quantized: Option<QuantizedRows>,
}

impl Inputs<'_> {
    /// `dots` for weight rows `col..col + width` and input rows `row..row + height` (`f32`
    /// and bfloat16 weights).
    fn dot_tile(
        &self,
        weight: WeightRef<'_>,
        d_in: usize,
        (col, width): (usize, usize),
        (row, height): (usize, usize),
        dots: &mut Dots,
    ) {
        match weight {
            WeightRef::F32(w) => {
                let weights = &w[col * d_in..(col + width) * d_in];
                let xs = &self.x[row * d_in..(row + height) * d_in];
                dot_tile(weights, width, xs, height, d_in, dots);
            }
            WeightRef::Bf16(m) => super::bf16::dot_tile(m, col, width, self.x, row, height, dots),
            WeightRef::Q8_0(_) | WeightRef::Q4_1(_) => {
                unreachable!("Q8_0 and Q4_1 weights go through their group kernels")
            }
        }
    }
}

/// `x` (`[rows, d_in]`) times every projection of `projections`: output `b` is
/// `[rows, out_b]` with `out_b[r, j] = x[r] · weight_b[j] + bias_b[j]`. With Q8_0 or Q4_1
/// weights, `x` is quantized per block of 32 first, at about 15 bits
/// ([`InputPrecision::Split`]).
///
/// # Panics
/// If a weight's rows are not `d_in` wide, a bias has the wrong length, or `x` is not
/// `rows * d_in` long.
pub fn project_rows(
    x: &[f32],
    rows: usize,
    d_in: usize,
    projections: &[ProjectionRef<'_>],
) -> Vec<Vec<f32>> {
    project_rows_at(x, rows, d_in, projections, InputPrecision::Split)
}

/// [`project_rows`] with the input rows of Q8_0 and Q4_1 weights quantized at `precision` (benchmarks
/// compare the precisions with it).
pub fn project_rows_at(
    x: &[f32],
    rows: usize,
    d_in: usize,
    projections: &[ProjectionRef<'_>],
    precision: InputPrecision,
) -> Vec<Vec<f32>> {
    assert_eq!(x.len(), rows * d_in, "project_rows: x is not [rows, d_in]");
    for p in projections {
        assert!(p.weight.has_width(d_in), "weight rows must be d_in wide");
        if let Some(bias) = p.bias {
            assert_eq!(
                bias.len(),
                p.outputs(d_in),
                "bias length must equal outputs"
            );
        }
    }
    let mut outputs: Vec<Vec<f32>> = projections
        .iter()
        .map(|p| vec![0.0; rows * p.outputs(d_in)])
        .collect();
    if rows == 0 || d_in == 0 {
        for (p, out) in projections.iter().zip(&mut outputs) {
            if let Some(bias) = p.bias {
                out.chunks_exact_mut(bias.len())
                    .for_each(|row| row.copy_from_slice(bias));
            }
        }
        return outputs;
    }
    let needs_quantized = projections
        .iter()
        .any(|p| p.weight.reads_quantized_inputs());
    let needs_floats = projections
        .iter()
        .any(|p| !p.weight.reads_quantized_inputs());
    let aligned = (needs_floats && !is_aligned(x)).then(|| AlignedRows::copy_of(x));
    let x = aligned.as_ref().map_or(x, AlignedRows::as_slice);
    let inputs = Inputs {
        x,
        quantized: needs_quantized.then(|| QuantizedRows::new(x, rows, d_in, precision)),
    };
    let tasks: Vec<(usize, usize, usize)> = projections
        .iter()
        .enumerate()
        .flat_map(|(b, p)| {
            let n = p.outputs(d_in);
            let task_rows = (TASK_BYTES / p.weight.row_bytes(d_in))
                .max(TASK_ROW_MULTIPLE)
                .next_multiple_of(TASK_ROW_MULTIPLE);
            (0..n)
                .step_by(task_rows)
                .map(move |start| (b, start, (start + task_rows).min(n)))
        })
        .collect();
    let pointers: Vec<SharedOut> = outputs
        .iter_mut()
        .map(|o| SharedOut(o.as_mut_ptr()))
        .collect();
    let run = |&(b, start, end): &(usize, usize, usize)| {
        let p = &projections[b];
        let n = p.outputs(d_in);
        let out = pointers[b];
        if let Some(quantized) = &inputs.quantized {
            let output = super::q8_0::Output { values: out.0, n };
            // SAFETY (both): the output is this projection's [rows, n] buffer, and the task's
            // groups (its columns: tasks start on group boundaries) are written by this task
            // only.
            match p.weight {
                WeightRef::Q8_0(m) => {
                    let groups = start / Q8_0_GROUP..end.div_ceil(Q8_0_GROUP);
                    unsafe { super::q8_0::project_groups(m, groups, quantized, p.bias, output) };
                    return;
                }
                WeightRef::Q4_1(m) => {
                    let groups = start / Q4_1_GROUP..end.div_ceil(Q4_1_GROUP);
                    unsafe { super::q4_1::project_groups(m, groups, quantized, p.bias, output) };
                    return;
                }
                WeightRef::F32(_) | WeightRef::Bf16(_) => {}
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(weight_rows) = in_order_rows(p.weight, start, end, d_in) {
            let write = |r: usize, c: usize, dot: f32| {
                let bias = p.bias.map_or(0.0, |bias| bias[start + c]);
                // SAFETY: (r, start + c) is inside this output's [rows, n] buffer, and column
                // start + c belongs to this task only.
                unsafe { *out.0.add(r * n + start + c) = dot + bias };
            };
            // SAFETY: `in_order_rows` answers only where AVX2 and FMA are available; the rows
            // are the task's `end - start` weight rows and `x` holds `rows` input rows.
            unsafe { super::avx2::dot_rows(weight_rows, end - start, x, rows, d_in, write) };
            return;
        }
        let mut col = start;
        // One width for the whole task: the widest tile the tallest row block allows.
        let tile = tile_width(rows.min(MAX_TILE_HEIGHT));
        while col < end {
            let width = (end - col).min(tile);
            let mut row = 0;
            while row < rows {
                let height = (rows - row).min(MAX_TILE_HEIGHT);
                let mut dots: Dots = [[0.0; MAX_TILE_WIDTH]; MAX_TILE_HEIGHT];
                inputs.dot_tile(p.weight, d_in, (col, width), (row, height), &mut dots);
                for (r, dots) in dots.iter().enumerate().take(height) {
                    for (c, &dot) in dots.iter().enumerate().take(width) {
                        let bias = p.bias.map_or(0.0, |bias| bias[col + c]);
                        // SAFETY: (row + r, col + c) is inside this output's [rows, n] buffer,
                        // and column col + c belongs to this task only.
                        unsafe { *out.0.add((row + r) * n + col + c) = dot + bias };
                    }
                }
                row += height;
            }
            col += width;
        }
    };
    if tasks.len() > 1 && rayon::current_num_threads() > 1 {
        tasks.par_iter().for_each(run);
    } else {
        tasks.iter().for_each(run);
    }
    outputs
}

/// Weight rows `start..end` for the AVX2 kernel, which reads them in order: `Some` for `f32`
/// and bfloat16 weights on CPUs with AVX2 where the AVX-512 kernel of that format is missing.
#[cfg(target_arch = "x86_64")]
fn in_order_rows(
    weight: WeightRef<'_>,
    start: usize,
    end: usize,
    d_in: usize,
) -> Option<super::avx2::WeightRows<'_>> {
    use super::avx2::WeightRows;
    if !super::has_avx2() {
        return None;
    }
    match weight {
        WeightRef::F32(w) if !super::has_avx512() => {
            Some(WeightRows::F32(&w[start * d_in..end * d_in]))
        }
        WeightRef::Bf16(m) if !super::bf16::has_avx512bw() => Some(WeightRows::Bf16(m, start)),
        _ => None,
    }
}

/// `dots[r][c] = xs[r] · weights[c]` for `height` (≤ 8) input rows and `width` weight rows
/// (≤ [`tile_width`] of the height), all `d_in` wide.
fn dot_tile(
    weights: &[f32],
    width: usize,
    xs: &[f32],
    height: usize,
    d_in: usize,
    dots: &mut Dots,
) {
    assert!(height <= MAX_TILE_HEIGHT && width <= tile_width(height));
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: AVX-512F is available (checked above); the slices hold `width` weight
        // rows and `height` input rows of `d_in` values.
        dispatch_tile!(width, height, avx512::dot_tile(weights, xs, d_in, dots));
        return;
    }
    for (r, x) in xs.chunks_exact(d_in).take(height).enumerate() {
        for (c, w) in weights.chunks_exact(d_in).take(width).enumerate() {
            dots[r][c] = portable_dot(x, w);
        }
    }
}

/// A dot product in 16 independent lanes (which the compiler vectorizes), summed at the end.
fn portable_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (a_chunks, b_chunks) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// How far ahead (in weight rows) the tile kernel prefetches.
    const PREFETCH_ROWS: usize = 8;

    /// `dots[r][c] = xs[r] · weights[c]` for `H` input rows and `W` weight rows.
    ///
    /// # Safety
    /// AVX-512F must be available; `weights` must hold `W * d_in` and `xs` `H * d_in` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dot_tile<const W: usize, const H: usize>(
        weights: &[f32],
        xs: &[f32],
        d_in: usize,
        dots: &mut super::Dots,
    ) {
        assert!(weights.len() >= W * d_in && xs.len() >= H * d_in);
        let (w, x) = (weights.as_ptr(), xs.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); W]; H];
        let mut wv = [_mm512_setzero_ps(); W];
        let full = d_in - d_in % 16;
        let mut k = 0;
        while k < full {
            for (c, v) in wv.iter_mut().enumerate() {
                // SAFETY: k + 16 <= d_in, inside weight row c.
                *v = unsafe { _mm512_loadu_ps(w.add(c * d_in + k)) };
                // The same line PREFETCH_ROWS rows further, into L2: hardware prefetchers stop
                // at page boundaries, software prefetches do not (and never fault, even past
                // the end). Into L2 rather than L1: a prefetch into L1 holds one of the core's
                // few L1 miss buffers until its line arrives, which caps the misses in flight
                // and so the bandwidth one core draws; L2 tracks many more.
                _mm_prefetch::<_MM_HINT_T1>(w.wrapping_add((c + PREFETCH_ROWS) * d_in + k).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: k + 16 <= d_in, inside input row r.
                let xv = unsafe { _mm512_loadu_ps(x.add(r * d_in + k)) };
                for (a, v) in acc.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(*v, xv, *a);
                }
            }
            k += 16;
        }
        if k < d_in {
            let mask: __mmask16 = super::super::tail_mask(d_in - k);
            for (c, v) in wv.iter_mut().enumerate() {
                // SAFETY: the mask limits the load to the d_in - k values left in row c.
                *v = unsafe { _mm512_maskz_loadu_ps(mask, w.add(c * d_in + k)) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: the mask limits the load to the values left in input row r.
                let xv = unsafe { _mm512_maskz_loadu_ps(mask, x.add(r * d_in + k)) };
                for (a, v) in acc.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(*v, xv, *a);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                dots[r][c] = _mm512_reduce_add_ps(*a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{sine_values as values, Projections};
    use super::*;

    fn reference(x: &[f32], rows: usize, d_in: usize, p: &ProjectionRef<'_>) -> Vec<f32> {
        let WeightRef::F32(weight) = p.weight else {
            unreachable!("f32 fixtures")
        };
        let n = weight.len() / d_in;
        let mut out = vec![0.0; rows * n];
        for r in 0..rows {
            for j in 0..n {
                let dot: f64 = (0..d_in)
                    .map(|k| f64::from(x[r * d_in + k]) * f64::from(weight[j * d_in + k]))
                    .sum();
                out[r * n + j] = dot as f32 + p.bias.map_or(0.0, |b| b[j]);
            }
        }
        out
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_rows_match_portable_dots() {
        use super::super::avx2::{dot_rows, WeightRows};
        use crate::quant::Bf16Matrix;
        if !super::super::has_avx2() {
            return;
        }
        const WEIGHT_ROWS: usize = 5;
        const INPUT_ROWS: usize = 9;
        // Widths below one vector, with a tail after whole vectors, and after whole groups of
        // two and four vectors.
        for d_in in [5, 13, 24, 64, 579] {
            let weights = values(WEIGHT_ROWS * d_in, 0.3);
            let xs = values(INPUT_ROWS * d_in, 1.1);
            let bf16 = Bf16Matrix::from_f32(&weights, WEIGHT_ROWS, d_in);
            let rounded: Vec<f32> = weights
                .iter()
                .map(|&w| half::bf16::from_f32(w).to_f32())
                .collect();
            for (rows, reference) in [
                (WeightRows::F32(&weights), &weights),
                (WeightRows::Bf16(&bf16, 0), &rounded),
            ] {
                for height in 1..=INPUT_ROWS {
                    let mut got = vec![f32::NAN; height * WEIGHT_ROWS];
                    let write = |r: usize, c: usize, dot: f32| got[r * WEIGHT_ROWS + c] = dot;
                    // SAFETY: AVX2 is available (checked above); `rows` holds WEIGHT_ROWS rows
                    // and `xs` at least `height` rows of d_in values.
                    unsafe { dot_rows(rows, WEIGHT_ROWS, &xs, height, d_in, write) };
                    for (i, &got) in got.iter().enumerate() {
                        let (r, c) = (i / WEIGHT_ROWS, i % WEIGHT_ROWS);
                        let want =
                            portable_dot(&xs[r * d_in..][..d_in], &reference[c * d_in..][..d_in]);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "d_in {d_in}, {height} input rows, ({r}, {c}): {got} vs {want}"
                        );
                        // The same bits as the input row multiplied on its own.
                        let mut alone = f32::NAN;
                        let write = |_: usize, col: usize, dot: f32| {
                            if col == c {
                                alone = dot;
                            }
                        };
                        // SAFETY: as above, with one input row.
                        unsafe { dot_rows(rows, WEIGHT_ROWS, &xs[r * d_in..], 1, d_in, write) };
                        assert_eq!(got.to_bits(), alone.to_bits(), "d_in {d_in}, ({r}, {c})");
                    }
                }
            }
        }
    }

    #[test]
    fn matches_a_reference_for_odd_shapes() {
        for (rows, d_in, outs) in [
            (1, 576, vec![576, 192, 192]),
            (3, 37, vec![5, 1]),
            (7, 100, vec![13]),
            (16, 64, vec![70, 9]),
            (5, 576, vec![576, 64]),
            (12, 130, vec![17, 3]),
            (2, 2000, vec![300]),
        ] {
            let x = values(rows * d_in, 0.3);
            let fixture = Projections::new(d_in, &outs);
            let projections = fixture.refs(|i| i % 2 == 0);
            let got = project_rows(&x, rows, d_in, &projections);
            for (p, got) in projections.iter().zip(&got) {
                let want = reference(&x, rows, d_in, p);
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn packed_weights_match_a_reference() {
        use crate::quant::{Bf16Matrix, Q4_1Matrix, Q8_0Matrix};
        for (rows, d_in, out) in [(1, 576, 70), (5, 96, 13), (16, 64, 40), (9, 32, 7)] {
            let x = values(rows * d_in, 0.7);
            let w = values(out * d_in, 2.0);
            let bias = values(out, 5.0);
            let q8 = Q8_0Matrix::quantize(&w, out, d_in).unwrap();
            let bf16 = Bf16Matrix::from_f32(&w, out, d_in);
            let q4 = Q4_1Matrix::quantize(&w, out, d_in).unwrap();
            let widen = |m: WeightRef<'_>| -> Vec<f32> {
                let mut all = vec![0.0; out * d_in];
                for (r, row) in all.chunks_exact_mut(d_in).enumerate() {
                    m.widen_row(r, row);
                }
                all
            };
            let cases = [
                // Q8_0 and Q4_1 keep the inputs at about 15 bits: near the exact inputs'
                // products.
                ("q8_0", WeightRef::Q8_0(&q8), 1e-3),
                ("bf16", WeightRef::Bf16(&bf16), 1e-4),
                ("q4_1", WeightRef::Q4_1(&q4), 1e-3),
            ];
            for (label, weight, tolerance) in cases {
                let widened = widen(weight);
                let p = ProjectionRef {
                    weight,
                    bias: Some(&bias),
                };
                let got = project_rows(&x, rows, d_in, &[p]);
                let dense = ProjectionRef {
                    weight: WeightRef::F32(&widened),
                    bias: Some(&bias),
                };
                let want = reference(&x, rows, d_in, &dense);
                for (g, w) in got[0].iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= tolerance * (1.0 + w.abs()),
                        "{label}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// A request's logits must not depend on the batch it is verified in, or speculative
    /// outputs would differ from plain ones: every format gives each input row the same bits
    /// whatever the number of rows beside it.
    #[test]
    fn each_row_gets_the_same_bits_whatever_the_rows_beside_it() {
        use crate::quant::{Bf16Matrix, Q4_1Matrix, Q8_0Matrix};
        let (d_in, out, most_rows) = (160, 50, MAX_GEMV_ROWS);
        let x = values(most_rows * d_in, 0.9);
        let w = values(out * d_in, 1.7);
        let q8 = Q8_0Matrix::quantize(&w, out, d_in).unwrap();
        let bf16 = Bf16Matrix::from_f32(&w, out, d_in);
        let q4 = Q4_1Matrix::quantize(&w, out, d_in).unwrap();
        for weight in [
            WeightRef::F32(&w),
            WeightRef::Q8_0(&q8),
            WeightRef::Bf16(&bf16),
            WeightRef::Q4_1(&q4),
        ] {
            let p = ProjectionRef { weight, bias: None };
            let alone: Vec<Vec<f32>> = (0..most_rows)
                .map(|r| project_rows(&x[r * d_in..][..d_in], 1, d_in, &[p]).remove(0))
                .collect();
            for rows in 1..=most_rows {
                let got = project_rows(&x[..rows * d_in], rows, d_in, &[p]).remove(0);
                for (r, got) in got.chunks_exact(out).enumerate() {
                    let same = got
                        .iter()
                        .zip(&alone[r])
                        .all(|(g, a)| g.to_bits() == a.to_bits());
                    assert!(same, "{weight:?}: row {r} of {rows} differs from alone");
                }
            }
        }
    }

    #[test]
    fn empty_inputs_give_the_bias() {
        let weight = values(6, 1.0);
        let bias = [1.0, 2.0, 3.0];
        let p = ProjectionRef {
            weight: WeightRef::F32(&weight),
            bias: Some(&bias),
        };
        assert_eq!(project_rows(&[], 0, 2, &[p]), vec![Vec::<f32>::new()]);
    }

    #[test]
    #[should_panic(expected = "x is not [rows, d_in]")]
    fn a_short_input_is_refused() {
        let weight = values(6, 1.0);
        let p = ProjectionRef {
            weight: WeightRef::F32(&weight),
            bias: None,
        };
        project_rows(&[1.0], 1, 2, &[p]);
    }
}
