//! Forward-pass throughput of a Hugging Face Llama model on the CPU backend (f32).
//!
//! ```text
//! cargo run --release -p aquila-model-loader --example bench_forward -- --model DIR
//! ```
//!
//! Prints the load time, prefill tokens/s at each `--prefill` length, single-sequence decode
//! tokens/s with a KV cache (after a `--context`-token prompt) and batched decode tokens/s for
//! `--batch` sequences; then, for the MLP's `[2 * intermediate, hidden]` projection at several
//! row counts, the weight-streaming kernel, the prefill kernel and burn's matrix product (which
//! sets `MAX_GEMV_ROWS`), and the cost of the KV-cache append strategies at the decode context
//! (why the cache concatenates instead of writing into a padded buffer). Ratios are against a
//! baseline measured in the same run (a batch-1 decode step, or the kernels against each
//! other); `cargo xtask bench peer` measures llama.cpp.

use aquila_model_loader::kernels::gemm::project_rows_gemm;
use aquila_model_loader::kernels::gemv::{project_rows, ProjectionRef, WeightRef};
use aquila_model_loader::model::{
    FeatureTap, ForwardBatch, LlamaModel, SequenceInput, MAX_GEMV_ROWS,
};
use burn::backend::Flex;
use burn::tensor::{Distribution, Tensor, TensorData};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};

type B = Flex;

#[derive(Debug, Parser)]
#[command(about = "Forward-pass throughput of a Llama model (CPU, f32)")]
struct Args {
    /// Model directory (config.json + safetensors).
    #[arg(long)]
    model: PathBuf,
    /// Prefill lengths to measure.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    prefill: Vec<usize>,
    /// Timed repetitions of each prefill (after one warm-up).
    #[arg(long, default_value_t = 3)]
    prefill_runs: usize,
    /// Prompt length before decoding.
    #[arg(long, default_value_t = 128)]
    context: usize,
    /// Decode steps to time.
    #[arg(long, default_value_t = 64)]
    decode_steps: usize,
    /// Rows of the speculative-verification measurement (a root and its drafts).
    #[arg(long, default_value_t = 4)]
    verify_rows: usize,
    /// Sequences decoded together in the batched measurement.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Skip the decode, kernel and KV-append measurements (e.g. to profile prefill alone).
    #[arg(long)]
    prefill_only: bool,
    /// Worker threads (default: rayon's choice, one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// Deterministic prompt tokens spread over the vocabulary.
fn prompt(len: usize, vocab: usize, salt: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + salt * 104_729 + 13) % vocab) as u32)
        .collect()
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64).with_message(what.to_string());
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Prefills `len` tokens into a fresh cache `runs` times; returns the best tokens/s.
fn bench_prefill(model: &LlamaModel<B>, len: usize, runs: usize) -> f64 {
    let tokens = prompt(len, model.config().vocab_size, 0);
    let bar = progress(runs + 1, &format!("prefill {len}"));
    let mut best = Duration::MAX;
    for run in 0..=runs {
        let mut cache = model.new_kv_cache(1);
        let batch = ForwardBatch::new(vec![SequenceInput::new(0, tokens.clone(), 0)]);
        let start = Instant::now();
        let out = model
            .forward(&batch, &mut cache, &FeatureTap::None)
            .expect("valid batch");
        let _ = out.logits.into_data();
        if run > 0 {
            best = best.min(start.elapsed());
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    len as f64 / best.as_secs_f64()
}

/// Prefills `sequences` prompts of `context` tokens, then times `steps` greedy decode steps of
/// all of them together; returns generated tokens/s.
fn bench_decode(model: &LlamaModel<B>, sequences: usize, context: usize, steps: usize) -> f64 {
    let vocab = model.config().vocab_size;
    let mut cache = model.new_kv_cache(sequences);
    let prefill: Vec<SequenceInput> = (0..sequences)
        .map(|slot| SequenceInput::new(slot, prompt(context, vocab, slot), 0))
        .collect();
    let out = model
        .forward(&ForwardBatch::new(prefill), &mut cache, &FeatureTap::None)
        .expect("valid batch");
    let mut logits: Vec<f32> = out.logits.into_data().to_vec().expect("f32 logits");
    let bar = progress(steps, &format!("decode batch {sequences}"));
    let start = Instant::now();
    for _ in 0..steps {
        let batch = ForwardBatch::new(
            (0..sequences)
                .map(|slot| {
                    let next = argmax(&logits[slot * vocab..(slot + 1) * vocab]);
                    SequenceInput::new(slot, vec![next], cache.len(slot))
                })
                .collect(),
        );
        let out = model
            .forward(&batch, &mut cache, &FeatureTap::None)
            .expect("valid batch");
        logits = out.logits.into_data().to_vec().expect("f32 logits");
        bar.inc(1);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    (sequences * steps) as f64 / elapsed.as_secs_f64()
}

/// Prefills one `context`-token prompt, then times `steps` verification forwards of `rows`
/// causal rows (a root and its drafts) with logits for every row, rolling the cache back after
/// each as a full rejection would; returns milliseconds per forward.
fn bench_verify(model: &LlamaModel<B>, rows: usize, context: usize, steps: usize) -> f64 {
    let vocab = model.config().vocab_size;
    let mut cache = model.new_kv_cache(1);
    let prefill = SequenceInput::new(0, prompt(context, vocab, 0), 0);
    model
        .forward(
            &ForwardBatch::new(vec![prefill]),
            &mut cache,
            &FeatureTap::None,
        )
        .expect("valid batch");
    let drafts = prompt(rows, vocab, 1);
    let bar = progress(steps, &format!("verify {rows} rows"));
    let start = Instant::now();
    for _ in 0..steps {
        let input = SequenceInput::new(0, drafts.clone(), context).with_all_logits();
        let out = model
            .forward(
                &ForwardBatch::new(vec![input]),
                &mut cache,
                &FeatureTap::None,
            )
            .expect("valid batch");
        let _ = out.logits.into_data();
        cache.truncate(0, context);
        bar.inc(1);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    elapsed.as_secs_f64() * 1e3 / steps as f64
}

/// Microseconds per `[rows, d_in] x [d_out, d_in]ᵀ` product with the weight-streaming kernel,
/// with the prefill kernel (the two CPU paths of `SplitLinear`) and with burn's matrix product
/// on the transposed weight (its generic path).
fn bench_projection(rows: usize, d_in: usize, d_out: usize) -> [f64; 3] {
    let device = Default::default();
    let x: Vec<f32> = (0..rows * d_in).map(|v| (v as f32 * 0.1).sin()).collect();
    let weight: Vec<f32> = (0..d_out * d_in).map(|v| (v as f32 * 0.3).cos()).collect();
    let projection = [ProjectionRef {
        weight: WeightRef::F32(&weight),
        bias: None,
    }];
    let gemv = median_micros(9, 20, || {
        std::hint::black_box(project_rows(&x, rows, d_in, &projection));
    });
    let gemm = median_micros(9, 20, || {
        std::hint::black_box(project_rows_gemm(&x, rows, d_in, &projection));
    });
    let x = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [rows, d_in]), &device);
    let weight = Tensor::<B, 2>::from_data(TensorData::new(weight.clone(), [d_out, d_in]), &device);
    let burn = median_micros(9, 20, || {
        let y = x.clone().matmul(weight.clone().transpose());
        std::hint::black_box(y.into_data());
    });
    [gemv, gemm, burn]
}

/// Median of `batches` timings of `reps` calls of `f`, in microseconds per call.
fn median_micros(batches: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..batches)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / reps as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[batches / 2]
}

/// Microseconds per one-row append to a `[kv_heads, len, head_dim]` history: by
/// concatenation (what `KvCache` does) and by `slice_assign` into a buffer padded to `len + 256`.
fn bench_kv_append(model: &LlamaModel<B>, len: usize) -> (f64, f64) {
    let config = model.config();
    let (heads, dim) = (config.num_key_value_heads, config.head_dim);
    let device = model.device();
    let history: Tensor<B, 3> = Tensor::random([heads, len, dim], Distribution::Default, &device);
    let row: Tensor<B, 3> = Tensor::random([heads, 1, dim], Distribution::Default, &device);
    let concat = median_micros(9, 100, || {
        std::hint::black_box(Tensor::cat(vec![history.clone(), row.clone()], 1));
    });
    let mut padded: Option<Tensor<B, 3>> = Some(Tensor::zeros([heads, len + 256, dim], &device));
    let assign = median_micros(9, 100, || {
        let buffer = padded
            .take()
            .expect("the buffer is put back after each write");
        padded = Some(buffer.slice_assign([0..heads, len..len + 1, 0..dim], row.clone()));
    });
    (concat, assign)
}

fn main() {
    let args = Args::parse();
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .expect("the global thread pool is configured once");
    }
    let device = Default::default();
    let start = Instant::now();
    let model = match LlamaModel::<B>::load(&args.model, &device) {
        Ok(model) => model,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let load = start.elapsed();
    let config = model.config();
    println!(
        "model: {} ({} layers, hidden {}, vocab {}), {} threads",
        args.model.display(),
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size,
        rayon::current_num_threads(),
    );
    println!("load: {:.2} s", load.as_secs_f64());

    for &len in &args.prefill {
        let rate = bench_prefill(&model, len, args.prefill_runs.max(1));
        println!("prefill {len:>4} tokens: {rate:8.1} tokens/s");
    }
    if args.prefill_only {
        return;
    }
    let single = bench_decode(&model, 1, args.context, args.decode_steps);
    println!(
        "decode batch 1 (context {}): {single:8.1} tokens/s",
        args.context
    );
    let verify = bench_verify(&model, args.verify_rows, args.context, args.decode_steps);
    println!(
        "verify {} rows of one sequence (context {}): {verify:6.2} ms per forward  ({:.2}x a batch-1 decode step)",
        args.verify_rows,
        args.context,
        verify * single / 1e3
    );
    let batched = bench_decode(&model, args.batch, args.context, args.decode_steps);
    println!(
        "decode batch {} (context {}): {batched:8.1} tokens/s  ({:.2}x batch 1)",
        args.batch,
        args.context,
        batched / single
    );
    let (d_in, d_out) = (config.hidden_size, 2 * config.intermediate_size);
    for rows in [
        1,
        4,
        5,
        8,
        MAX_GEMV_ROWS,
        MAX_GEMV_ROWS + 1,
        2 * MAX_GEMV_ROWS,
        128,
    ] {
        let [gemv, gemm, burn] = bench_projection(rows, d_in, d_out);
        let used = if rows <= MAX_GEMV_ROWS { gemv } else { gemm };
        println!(
            "projection {rows:>3} x [{d_out}, {d_in}]: weight-streaming {gemv:7.1} us, prefill kernel {gemm:7.1} us, burn matmul {burn:7.1} us (used path {:.2}x burn)",
            burn / used
        );
    }
    for len in [args.context, 4 * args.context] {
        let (concat, assign) = bench_kv_append(&model, len);
        println!(
            "kv append at {len} rows, one layer: concatenate {concat:.1} us, slice_assign into padded buffer {assign:.1} us"
        );
    }
}
