//! Engine throughput: prefill tokens/s and decode tokens/s at batch 1 and batch 8
//! (`--device` and `--dtype` pick the device and the weight format). The baseline measured in
//! the same run is the engine's own batch-1 decode, which the batch-8 aggregate is compared
//! with; `cargo xtask bench peer` compares with llama.cpp, built and run in the same run.
//!
//! ```text
//! cargo run --release -p aquila-examples --bin bench -- --model models/smollm2-135m-instruct
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use aquila_engine::{EngineConfig, Llm, Prompt, SamplingParams};
use aquila_examples::device::{DeviceArgs, DeviceChoice};
use aquila_examples::paths::default_model_dir;
use aquila_examples::progress;
use clap::Parser;
use indicatif::ProgressBar;

/// Measures prefill and decode throughput of the engine.
#[derive(Parser, Debug)]
#[command(name = "bench", about)]
struct Args {
    /// Model directory; defaults to the workspace's SmolLM2 import.
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    /// Prompt tokens of the prefill measurement.
    #[arg(long, default_value_t = 512)]
    prefill_tokens: usize,
    /// Tokens each request decodes in the decode measurements.
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    /// Prompt tokens of each decoding request.
    #[arg(long, default_value_t = 32)]
    decode_prompt_tokens: usize,
    /// Timed repetitions of each measurement (the best is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Decode at batch 1 only (no batch-8 measurement).
    #[arg(long)]
    batch1_only: bool,
    /// Print one JSON object (`prefill_tokens_per_s`, `decode_tokens_per_s`,
    /// `decode_batch8_tokens_per_s`) instead of the table.
    #[arg(long)]
    json: bool,
}

/// The measured rates, tokens/s.
#[derive(serde::Serialize)]
struct Rates {
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    decode_batch8_tokens_per_s: Option<f64>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.prefill_tokens == 0 || args.decode_tokens < 2 || args.repeats == 0 {
        bail!("--prefill-tokens and --repeats must be positive and --decode-tokens at least 2");
    }
    let device = args.device.resolve()?;
    let model = args.model.clone().unwrap_or_else(default_model_dir);
    let mut config = EngineConfig::new(&model);
    device.apply(&mut config);
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = args.prefill_tokens.max(8 * args.decode_prompt_tokens);
    let mut llm =
        Llm::new(config).with_context(|| format!("starting the engine on {}", model.display()))?;
    let vocab_size = llm.vocab_size();

    let runs = 1 + args.repeats; // The first run of each measurement warms up.
    let batches: &[usize] = if args.batch1_only { &[1] } else { &[1, 8] };
    let progress = if args.json {
        ProgressBar::hidden()
    } else {
        progress::bar(
            ((1 + batches.len()) * runs) as u64,
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
        )
    };

    progress.set_message("prefill");
    let mut prefill = Vec::new();
    for run in 0..runs {
        let prompt = token_ids(args.prefill_tokens, vocab_size, run as u64);
        let elapsed = time_prefill(&mut llm, prompt)?;
        prefill.push(args.prefill_tokens as f64 / elapsed.as_secs_f64());
        progress.inc(1);
    }
    let mut decode = vec![Vec::new(); batches.len()];
    for (&batch, rates) in batches.iter().zip(decode.iter_mut()) {
        progress.set_message(format!("decode, batch {batch}"));
        for run in 0..runs {
            rates.push(time_decode(&mut llm, &args, batch, run as u64)?);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();

    let best = |rates: &[f64]| rates[1..].iter().copied().fold(0.0, f64::max);
    let rates = Rates {
        prefill_tokens_per_s: best(&prefill),
        decode_tokens_per_s: best(&decode[0]),
        decode_batch8_tokens_per_s: decode.get(1).map(|rates| best(rates)),
    };
    if args.json {
        println!("{}", serde_json::to_string(&rates)?);
    } else {
        print_table(&args, device, &rates);
    }
    Ok(())
}

/// `len` deterministic pseudo-random token ids below `vocab_size` (an LCG seeded by `seed`).
fn token_ids(len: usize, vocab_size: usize, seed: u64) -> Vec<u32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab_size as u64) as u32
        })
        .collect()
}

/// Time of the step that prefills `prompt` (in one chunk) and samples its first token.
fn time_prefill(llm: &mut Llm, prompt: Vec<u32>) -> Result<Duration> {
    llm.add_request(Prompt::TokenIds(prompt), SamplingParams::greedy(1))?;
    let start = Instant::now();
    let step = llm.step()?;
    let elapsed = start.elapsed();
    if step.finished.len() != 1 || llm.has_unfinished_requests() {
        bail!("the prefill did not finish in one step: raise --max-num-batched-tokens");
    }
    Ok(elapsed)
}

/// Decode tokens/s of `batch` requests decoding together: tokens generated after every request
/// has its first token, over the time of those steps.
fn time_decode(llm: &mut Llm, args: &Args, batch: usize, run: u64) -> Result<f64> {
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(args.decode_tokens)
    };
    for request in 0..batch {
        let prompt = token_ids(
            args.decode_prompt_tokens,
            llm.vocab_size(),
            1000 * run + request as u64,
        );
        llm.add_request(Prompt::TokenIds(prompt), params.clone())?;
    }
    let first = llm.step()?; // Prefill of the whole batch, first token of each request.
    if first.deltas.len() != batch {
        bail!("the batch was not prefilled in one step");
    }
    let start = Instant::now();
    let mut tokens = 0;
    while llm.has_unfinished_requests() {
        let step = llm.step()?;
        tokens += step
            .deltas
            .iter()
            .map(|d| d.new_token_ids.len())
            .sum::<usize>();
    }
    Ok(tokens as f64 / start.elapsed().as_secs_f64())
}

fn print_table(args: &Args, device: DeviceChoice, rates: &Rates) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "aquila engine on {device} ({threads} CPU threads); prefill of {} tokens, decode of {} \
         tokens after {}-token prompts; best of {} runs",
        args.prefill_tokens, args.decode_tokens, args.decode_prompt_tokens, args.repeats
    );
    println!("{:<30} {:>12}", "measurement", "tokens/s");
    println!("{:<30} {:>12.1}", "prefill", rates.prefill_tokens_per_s);
    println!(
        "{:<30} {:>12.1}",
        "decode, batch 1", rates.decode_tokens_per_s
    );
    if let Some(batch8) = rates.decode_batch8_tokens_per_s {
        println!(
            "{:<30} {:>12.1}   {:.2}x decode at batch 1 (same run)",
            "decode, batch 8 (aggregate)",
            batch8,
            batch8 / rates.decode_tokens_per_s
        );
    }
    println!("llama.cpp is measured in the same run by `cargo xtask bench peer`");
}
