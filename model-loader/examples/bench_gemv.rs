//! Micro benchmark of one decode step's projections at SmolLM2-135M sizes, per weight format.
//!
//! ```text
//! cargo run --release -p aquila-model-loader --example bench_gemv
//! ```
//!
//! Builds the projections of all 30 layers (fused q/k/v 576 -> 960, o 576 -> 576, fused
//! gate/up 576 -> 3072, down 1536 -> 576) and the tied lm_head (576 -> 49,152) with random
//! weights in f32, Q8_0, Q4_1 (beside a Q8_0 lm_head, as the engine keeps it) and bf16, then
//! runs them in order for 1, 4, 8, 16 and 128 input rows, as a decode step, a k = 3
//! verification, batched decoding of 8 and 16 requests and a prefill chunk do (through
//! `project_rows` up to `MAX_GEMV_ROWS` rows, `project_rows_gemm` beyond, as the engine
//! chooses), each step on the kernel threads as the engine runs a forward pass, with the
//! weights on huge pages as the engine keeps them. Q8_0 runs once more with its input rows
//! quantized to bytes (`q8_0b`, as llama.cpp does) instead of the engine's two byte planes, for
//! every row count, so the cost of the planes shows against the same weights in the same run.
//! Prints milliseconds per step, the weight bytes streamed per second, and that rate as a
//! ratio to a plain parallel read of a 512 MB buffer measured in the same run (the memory
//! bandwidth the threads can draw). Times are the fastest of repeated steps. The weights (96 to
//! 538 MB) exceed most CPUs' caches, so each step reads them from memory; where a last-level
//! cache holds a format's weights, its rate can exceed the plain read.

mod common;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::huge_pages::back_with_huge_pages;
use aquila_model_loader::kernels::gemm::project_rows_gemm;
use aquila_model_loader::kernels::gemv::{
    project_rows, project_rows_at, ProjectionRef, WeightRef, MAX_GEMV_ROWS,
};
use aquila_model_loader::kernels::InputPrecision;
use aquila_model_loader::quant::{Bf16Matrix, Q4_1Matrix, Q8_0Matrix};
use burn::backend::Flex;
use common::inputs;
use rayon::prelude::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Hidden size of SmolLM2-135M.
const HIDDEN: usize = 576;
/// Decoder layers of SmolLM2-135M.
const LAYERS: usize = 30;
/// `(outputs, inputs)` of one layer's projections, in the order a layer runs them.
const LAYER_SHAPES: [(usize, usize); 4] = [
    (960, HIDDEN),
    (HIDDEN, HIDDEN),
    (3072, HIDDEN),
    (HIDDEN, 1536),
];
/// Vocabulary of SmolLM2-135M (the lm_head's outputs).
const VOCAB: usize = 49_152;

/// Deterministic weights in `[-0.05, 0.05)`.
fn weights(len: usize, seed: u64) -> Vec<f32> {
    inputs(len, seed).into_iter().map(|v| v * 0.05).collect()
}

/// One projection's weights in one format.
enum Weight {
    F32(Vec<f32>),
    Q8_0(Q8_0Matrix),
    Q4_1(Q4_1Matrix),
    Bf16(Bf16Matrix),
}

impl Weight {
    fn as_ref(&self) -> WeightRef<'_> {
        match self {
            Weight::F32(w) => WeightRef::F32(w),
            Weight::Q8_0(w) => WeightRef::Q8_0(w),
            Weight::Q4_1(w) => WeightRef::Q4_1(w),
            Weight::Bf16(w) => WeightRef::Bf16(w),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Weight::F32(w) => 4 * w.len(),
            Weight::Q8_0(w) => w.bytes(),
            Weight::Q4_1(w) => w.bytes(),
            Weight::Bf16(w) => w.bytes(),
        }
    }
}

/// One model's projections: `(d_in, weight)` in step order.
struct Stored(Vec<(usize, Weight)>);

impl Stored {
    fn refs(&self) -> Vec<(usize, WeightRef<'_>)> {
        self.0.iter().map(|(d, w)| (*d, w.as_ref())).collect()
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|(_, w)| w.bytes()).sum()
    }
}

/// The model's projection shapes `(outputs, inputs)` in step order.
fn shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<_> = (0..LAYERS).flat_map(|_| LAYER_SHAPES).collect();
    shapes.push((VOCAB, HIDDEN));
    shapes
}

/// The model's projections in `format`; `q4_1` keeps the lm_head in Q8_0, as the engine does.
fn build(format: &str) -> Stored {
    let all = shapes();
    let lm_head = all.len() - 1;
    let weights = all.iter().enumerate().map(|(i, &(out, d_in))| {
        let w = weights(out * d_in, i as u64 + 1);
        let q8_0 = || Weight::Q8_0(Q8_0Matrix::quantize(&w, out, d_in).expect("finite"));
        let weight = match format {
            "f32" => {
                back_with_huge_pages(&w);
                Weight::F32(w.clone())
            }
            "q8_0" => q8_0(),
            "q4_1" if i == lm_head => q8_0(),
            "q4_1" => Weight::Q4_1(Q4_1Matrix::quantize(&w, out, d_in).expect("finite")),
            _ => Weight::Bf16(Bf16Matrix::from_f32(&w, out, d_in)),
        };
        (d_in, weight)
    });
    Stored(weights.collect())
}

/// Bytes per second of a plain parallel read of a buffer far larger than any cache.
fn plain_read_rate() -> f64 {
    let buffer: Vec<u64> = (0..64u64 << 20).collect();
    back_with_huge_pages(&buffer);
    let read = || {
        buffer
            .par_chunks(1 << 16)
            .map(|chunk| chunk.iter().fold(0u64, |a, &v| a ^ v))
            .reduce(|| 0, |a, b| a ^ b)
    };
    let best = fastest(|| {
        black_box(Flex::on_kernel_threads(read));
    });
    std::mem::size_of_val(buffer.as_slice()) as f64 / best.as_secs_f64()
}

/// Fastest of repeated calls of `f` over about two seconds.
fn fastest(mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut best = Duration::MAX;
    while start.elapsed() < Duration::from_secs(2) || best == Duration::MAX {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
    }
    best
}

/// Fastest of repeated steps of `rows` input rows through every projection, as the engine
/// projects them, or with Q8_0 inputs at `precision` for any number of rows.
fn time_step(stored: &Stored, rows: usize, precision: Option<InputPrecision>) -> Duration {
    let refs = stored.refs();
    let input_rows: Vec<Vec<f32>> = [HIDDEN, 1536]
        .iter()
        .map(|&d| inputs(rows * d, 99))
        .collect();
    let step = || {
        for &(d_in, weight) in &refs {
            let x = if d_in == HIDDEN {
                &input_rows[0]
            } else {
                &input_rows[1]
            };
            let projection = [ProjectionRef { weight, bias: None }];
            let out = match precision {
                Some(precision) => {
                    project_rows_at(black_box(x), rows, d_in, &projection, precision)
                }
                None if rows <= MAX_GEMV_ROWS => {
                    project_rows(black_box(x), rows, d_in, &projection)
                }
                None => project_rows_gemm(black_box(x), rows, d_in, &projection),
            };
            black_box(out);
        }
    };
    fastest(|| Flex::on_kernel_threads(step))
}

fn main() {
    let plain = plain_read_rate();
    println!(
        "rayon threads: {}; plain read: {:.1} GB/s",
        rayon::current_num_threads(),
        plain / 1e9
    );
    let runs = [
        ("f32", None),
        ("q8_0", None),
        ("q8_0b", Some(InputPrecision::Byte)),
        ("q4_1", None),
        ("bf16", None),
    ];
    for (format, precision) in runs {
        let stored = build(format.trim_end_matches('b'));
        let mb = stored.bytes() as f64 / 1e6;
        for rows in [1, 4, 8, 16, 128] {
            let step = time_step(&stored, rows, precision);
            let rate = stored.bytes() as f64 / step.as_secs_f64();
            println!(
                "{format:<5} {rows} row(s): {:>7.2} ms/step  {:>6.1} GB/s  {:.2}x plain read  ({mb:.0} MB of weights)",
                step.as_secs_f64() * 1e3,
                rate / 1e9,
                rate / plain
            );
        }
    }
}
