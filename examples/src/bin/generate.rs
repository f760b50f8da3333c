//! Offline generation with the Aquila engine: one prompt or a JSON Lines file of prompts, run in
//! continuous batches, printed and optionally written as JSON.
//!
//! ```text
//! cargo run -p aquila-examples --bin generate -- --model models/smollm2-135m-instruct \
//!     --prompt "The capital of France is" --max-tokens 32
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use aquila_engine::{
    ChatMessage, EngineConfig, Llm, Prompt, RequestDelta, RequestOutput, SamplingParams, StopReason,
};
use aquila_examples::device::DeviceArgs;
use aquila_examples::paths::default_model_dir;
use aquila_examples::progress;
use aquila_examples::prompts::read_prompts_file;
use clap::Parser;
use indicatif::ProgressBar;
use serde::Serialize;

/// Generates completions of prompts with the Aquila engine.
#[derive(Parser, Debug)]
#[command(name = "generate", about)]
struct Args {
    /// Model directory (Hugging Face layout); defaults to the workspace's SmolLM2 import.
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    /// One text prompt.
    #[arg(long, conflicts_with = "prompts_file")]
    prompt: Option<String>,
    /// Send `--prompt` as a user chat message through the chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// JSON Lines prompts: `{"prompt": ...}`, `{"prompt_token_ids": [...]}` or
    /// `{"messages": [...]}` per line.
    #[arg(long)]
    prompts_file: Option<PathBuf>,
    /// Most tokens to generate per prompt.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Keep only the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sampling seed (per request; unset derives one per request from the engine seed 0).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop strings (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating after the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Most requests running at once.
    #[arg(long, default_value_t = 16)]
    max_num_seqs: usize,
    /// Most tokens per engine step.
    #[arg(long, default_value_t = 2048)]
    max_num_batched_tokens: usize,
    /// Write every request's prompt ids, output ids, text, finish reason and metrics as JSON.
    #[arg(long)]
    output_json: Option<PathBuf>,
}

/// One request in the `--output-json` file.
#[derive(Serialize)]
struct JsonOutput<'a> {
    request_id: u64,
    prompt: Option<&'a str>,
    prompt_token_ids: &'a [u32],
    token_ids: &'a [u32],
    text: &'a str,
    finish_reason: &'static str,
    stop_reason: Option<serde_json::Value>,
    metrics: &'a aquila_engine::RequestMetrics,
}

impl<'a> From<&'a RequestOutput> for JsonOutput<'a> {
    fn from(output: &'a RequestOutput) -> Self {
        let stop_reason = output.stop_reason.as_ref().map(|reason| match reason {
            StopReason::Eos(id) => serde_json::json!({ "eos": id }),
            StopReason::TokenId(id) => serde_json::json!({ "token_id": id }),
            StopReason::String(text) => serde_json::json!({ "string": text }),
        });
        JsonOutput {
            request_id: output.request_id,
            prompt: output.prompt.as_deref(),
            prompt_token_ids: &output.prompt_token_ids,
            token_ids: &output.token_ids,
            text: &output.text,
            finish_reason: output.finish_reason.as_str(),
            stop_reason,
            metrics: &output.metrics,
        }
    }
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
    let device = args.device.resolve()?;
    let prompts = load_prompts(&args)?;
    let params = sampling_params(&args);

    let model = args.model.clone().unwrap_or_else(default_model_dir);
    eprintln!("device: {device}");
    let mut config = EngineConfig::new(&model);
    device.apply(&mut config);
    config.max_num_seqs = args.max_num_seqs;
    config.max_num_batched_tokens = args.max_num_batched_tokens;
    let mut llm =
        Llm::new(config).with_context(|| format!("starting the engine on {}", model.display()))?;

    let progress = progress_bar(prompts.len() as u64);
    let mut generated_tokens = 0u64;
    let start = Instant::now();
    let outputs = llm.generate_stream(prompts, &params, |delta: &RequestDelta| {
        generated_tokens += delta.new_token_ids.len() as u64;
        if delta.finished {
            progress.inc(1);
        }
        progress.set_message(format!("{generated_tokens} tokens"));
    })?;
    let elapsed = start.elapsed();
    progress.finish_and_clear();

    for output in &outputs {
        print_output(output);
    }
    print_summary(&outputs, elapsed);
    if let Some(path) = &args.output_json {
        write_json(path, &outputs)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The prompts from `--prompt` or `--prompts-file`.
fn load_prompts(args: &Args) -> Result<Vec<Prompt>> {
    match (&args.prompt, &args.prompts_file) {
        (Some(text), None) if args.chat => {
            Ok(vec![Prompt::Chat(vec![ChatMessage::user(text.as_str())])])
        }
        (Some(text), None) => Ok(vec![Prompt::Text(text.clone())]),
        (None, Some(path)) => Ok(read_prompts_file(path)?),
        _ => bail!("give either --prompt TEXT or --prompts-file FILE.jsonl"),
    }
}

/// The sampling parameters from the command line.
fn sampling_params(args: &Args) -> SamplingParams {
    SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed,
        max_tokens: args.max_tokens,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        ..SamplingParams::default()
    }
}

fn progress_bar(requests: u64) -> ProgressBar {
    progress::bar(
        requests,
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests, {msg}",
    )
}

fn print_output(output: &RequestOutput) {
    println!("=== request {}", output.request_id);
    match &output.prompt {
        Some(prompt) => println!("prompt: {prompt:?}"),
        None => println!("prompt token ids: {:?}", output.prompt_token_ids),
    }
    println!("output: {:?}", output.text);
    println!(
        "finish: {} ({:?}), {} prompt + {} generated tokens",
        output.finish_reason.as_str(),
        output.stop_reason,
        output.prompt_token_ids.len(),
        output.token_ids.len()
    );
}

fn print_summary(outputs: &[RequestOutput], elapsed: Duration) {
    let generated: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    let prompt: usize = outputs.iter().map(|o| o.prompt_token_ids.len()).sum();
    let seconds = elapsed.as_secs_f64().max(f64::EPSILON);
    println!(
        "{} requests, {prompt} prompt tokens, {generated} generated tokens in {:.2} s \
         ({:.1} generated tokens/s)",
        outputs.len(),
        seconds,
        generated as f64 / seconds
    );
}

fn write_json(path: &Path, outputs: &[RequestOutput]) -> Result<()> {
    let rows: Vec<JsonOutput<'_>> = outputs.iter().map(JsonOutput::from).collect();
    let text = serde_json::to_string_pretty(&rows)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
