//! The EAGLE example: speculative decoding of chat prompts with an EAGLE head (or n-grams), and
//! the vLLM-style acceptance report read from the engine's metrics snapshot.
//!
//! Run it with `cargo xtask eagle [-- OPTIONS]`.

use anyhow::{bail, Context, Result};
use aquila_engine::{
    DraftLength, EagleDrafter, EngineConfig, Llm, Prompt, SamplingParams, SpeculativeConfig,
    SpeculativeMethod,
};
use aquila_examples::device::{DeviceArgs, DeviceChoice};
use aquila_examples::interleaved::{run_interleaved, InterleavedRun};
use aquila_examples::paths::default_model_dir;
use aquila_examples::prompts::{builtin_chat_prompts, read_prompts_files};
use aquila_examples::report::SpecDecodeReport;
use aquila_examples::speculative_options::SpeculativeOptions;
use aquila_examples::stats::median;
use aquila_metrics::{MetricsServer, Snapshot};
use clap::Parser;
use std::path::{Path, PathBuf};

/// Speculative decoding with EAGLE on the default model.
#[derive(Parser, Debug)]
#[command(name = "eagle", about)]
struct Args {
    /// Target model directory (Hugging Face layout).
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    speculative: SpeculativeOptions,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Output tokens per request.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Number of prompts (built-in set, cycled; or the first N of the prompts files' prompts).
    #[arg(long)]
    num_prompts: Option<usize>,
    /// JSON Lines prompts file (`{"prompt": ...}`, `{"prompt_token_ids": [...]}` or
    /// `{"messages": [...]}` per line) instead of the built-in chat prompts. Repeat it to pool
    /// several sets: their prompts run together, file after file, and the report's acceptance
    /// is over all of them.
    #[arg(long)]
    prompts_file: Vec<PathBuf>,
    /// Print every prompt's output.
    #[arg(long)]
    print_outputs: bool,
    /// Also run without speculation: print the speedup and how many outputs match.
    #[arg(long)]
    compare_baseline: bool,
    /// Timed rounds of `--compare-baseline`: the speculative engine and the plain engine (on
    /// the same weights) take engine steps in turn, alternating which goes first, each timed
    /// over its own steps, and the speedup is the median of the rounds' ratios, so that the
    /// machine's drifts do not decide it. The first round includes what each engine learns as
    /// it starts (the adaptive policy's costs).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write the metrics snapshot of the speculative run as JSON.
    #[arg(long)]
    metrics_json: Option<PathBuf>,
    /// Write every request's output as JSON.
    #[arg(long)]
    output_json: Option<PathBuf>,
    /// Serve Prometheus `/metrics` at this address (e.g. 127.0.0.1:9090) while running.
    #[arg(long)]
    serve_metrics: Option<String>,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Requests decoded together (1 measures single-request latency, where speculation is
    /// meant to help; the engine's default batches up to 16).
    #[arg(long)]
    max_num_seqs: Option<usize>,
}

fn load_prompts(args: &Args) -> Result<Vec<Prompt>> {
    let mut prompts = if args.prompts_file.is_empty() {
        builtin_chat_prompts(args.num_prompts.unwrap_or(8))
    } else {
        read_prompts_files(&args.prompts_file)?
    };
    if let Some(n) = args.num_prompts {
        prompts.truncate(n);
    }
    Ok(prompts)
}

fn sampling_params(args: &Args) -> Result<SamplingParams> {
    let mut params = SamplingParams::greedy(args.max_tokens);
    params.temperature = args.temperature;
    params.seed = Some(args.seed);
    Ok(params)
}

fn engine_config(
    args: &Args,
    model: &Path,
    device: DeviceChoice,
    speculative: Option<SpeculativeConfig>,
) -> EngineConfig {
    let mut config = EngineConfig::new(model);
    device.apply(&mut config);
    config.speculative = speculative;
    config.seed = args.seed;
    if let Some(max_num_seqs) = args.max_num_seqs {
        config.max_num_seqs = max_num_seqs;
    }
    config
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
    let device = args.device.resolve()?;
    let model_dir = args.model.clone().unwrap_or_else(default_model_dir);
    if !model_dir.join("config.json").exists() {
        bail!(
            "no model at {}: run `cargo xtask import-model` first",
            model_dir.display()
        );
    }
    println!("target: {}", model_dir.display());
    println!("device: {device}");
    let Some(speculative) = args.speculative.speculative_config(&model_dir)? else {
        bail!("the eagle example shows speculative decoding: choose a drafting --method");
    };
    let prompts = load_prompts(&args)?;
    let params = sampling_params(&args)?;
    let k = speculative.num_speculative_tokens;
    let shape = match &speculative.method {
        SpeculativeMethod::Eagle(EagleDrafter {
            tree: Some(tree), ..
        })
        | SpeculativeMethod::Eagle3(EagleDrafter {
            tree: Some(tree), ..
        }) => format!(
            "EAGLE-2 trees of depth {k}, top-k {}, {} draft tokens",
            tree.top_k, tree.num_nodes
        ),
        _ => format!("k = {k}"),
    };
    let length = match speculative.draft_length {
        DraftLength::Fixed => "fixed draft length".to_string(),
        DraftLength::Adaptive {
            min_draft_tokens: 0,
        } => "adaptive draft length".to_string(),
        DraftLength::Adaptive { min_draft_tokens } => {
            format!("adaptive draft length (at least {min_draft_tokens})")
        }
    };
    println!(
        "{} prompts, {shape}, {length}, temperature {}, max_tokens {}",
        prompts.len(),
        args.temperature,
        args.max_tokens
    );

    let rounds = if args.compare_baseline {
        args.rounds
    } else {
        1
    };
    if rounds == 0 {
        bail!("--rounds must be positive");
    }
    let mut llm = Llm::new(engine_config(&args, &model_dir, device, Some(speculative)))?;
    let _server = match &args.serve_metrics {
        Some(addr) => {
            let server = MetricsServer::start(llm.recorder(), addr)?;
            println!("serving metrics at {}", server.url());
            Some(server)
        }
        None => None,
    };
    let mut baseline = match args.compare_baseline {
        true => Some(Llm::sharing_weights_with(
            &llm,
            engine_config(&args, &model_dir, device, None),
        )?),
        false => None,
    };
    let speculative_before = llm.get_metrics();
    let baseline_before = baseline.as_ref().map(Llm::get_metrics);
    let mut speculative_runs = Vec::with_capacity(rounds);
    let mut baseline_runs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let Some(baseline) = baseline.as_mut() else {
            speculative_runs.extend(run_interleaved(&mut [&mut llm], &prompts, &params)?);
            continue;
        };
        // The two engines take steps in turn, the plain one first in every other round.
        let baseline_first = round % 2 == 1;
        let mut in_turn = [&mut llm, baseline];
        if baseline_first {
            in_turn.reverse();
        }
        let mut runs = run_interleaved(&mut in_turn, &prompts, &params)?;
        if baseline_first {
            runs.reverse();
        }
        let mut runs = runs.into_iter();
        speculative_runs.extend(runs.next());
        baseline_runs.extend(runs.next());
    }
    let report = combined_report(&llm, &speculative_before, &speculative_runs)?;
    let outputs = &speculative_runs[0].outputs;

    if args.print_outputs {
        for output in outputs {
            println!("{}", "-".repeat(50));
            println!("request {}: {:?}", output.request_id, output.text);
        }
    }
    println!("{report}");

    if let Some(path) = &args.metrics_json {
        let json = serde_json::to_string_pretty(&llm.get_metrics())?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("metrics snapshot written to {}", path.display());
    }
    if let Some(path) = &args.output_json {
        let json = serde_json::to_string_pretty(outputs)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("outputs written to {}", path.display());
    }

    if let (Some(baseline), Some(before)) = (&baseline, &baseline_before) {
        let base_report = combined_report(baseline, before, &baseline_runs)?;
        // Outputs are compared within each round; the worst round is reported.
        let matching = speculative_runs
            .iter()
            .zip(&baseline_runs)
            .map(|(spec, base)| {
                spec.outputs
                    .iter()
                    .zip(&base.outputs)
                    .filter(|(spec, base)| spec.token_ids == base.token_ids)
                    .count()
            })
            .min()
            .unwrap_or(0);
        let ratios: Vec<f64> = speculative_runs
            .iter()
            .zip(&baseline_runs)
            .map(|(spec, base)| base.busy.as_secs_f64() / spec.busy.as_secs_f64().max(f64::EPSILON))
            .collect();
        println!(
            "baseline: {:.2} s, {:.1} output tokens/s, mean step: forward {:.2} ms",
            base_report.wall_time.as_secs_f64(),
            base_report.output_tokens_per_second(),
            base_report.step_times.forward.as_secs_f64() * 1e3
        );
        let per_round: Vec<String> = ratios.iter().map(|r| format!("{r:.2}x")).collect();
        println!(
            "speedup: {:.2}x (median of {} rounds: {})",
            median(ratios.clone()),
            ratios.len(),
            per_round.join(", ")
        );
        println!("baseline match: {matching}/{}", outputs.len());
        if args.temperature == 0.0 && matching != outputs.len() {
            bail!(
                "greedy speculative outputs differ from the baseline: speculation is not lossless"
            );
        }
    }
    Ok(())
}

/// The report of `runs` of `llm` taken together: its metrics since `before` (taken before the
/// first of them; the other engine's runs between them do not touch its metrics) and the sum
/// of the times of their steps.
fn combined_report(
    llm: &Llm,
    before: &Snapshot,
    runs: &[InterleavedRun],
) -> Result<SpecDecodeReport> {
    let delta = llm.get_metrics().delta(before)?;
    let wall = runs.iter().map(|run| run.busy).sum();
    Ok(SpecDecodeReport::from_snapshot(
        &delta,
        llm.metrics_namespace(),
        wall,
    ))
}
