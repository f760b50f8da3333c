//! The EAGLE example: speculative decoding of chat prompts with an EAGLE head (or n-grams), and
//! the vLLM-style acceptance report read from the engine's metrics snapshot.
//!
//! Run it with `cargo xtask eagle [-- OPTIONS]`.

use anyhow::{bail, Context, Result};
use aquila_engine::{
    DraftLength, DraftTreeConfig, EagleDrafter, EngineConfig, Llm, NgramDrafter, Prompt,
    RequestOutput, SamplingParams, SpeculativeConfig, SpeculativeMethod,
};
use aquila_examples::device::{DeviceArgs, DeviceChoice};
use aquila_examples::heads;
use aquila_examples::paths::default_model_dir;
use aquila_examples::prompts::{builtin_chat_prompts, read_prompts_file};
use aquila_examples::report::SpecDecodeReport;
use aquila_metrics::MetricsServer;
use clap::{Parser, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Speculative decoding with EAGLE on the default model.
#[derive(Parser, Debug)]
#[command(name = "eagle", about)]
struct Args {
    /// Target model directory (Hugging Face layout).
    #[arg(long)]
    model: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    /// Drafting method; default: `eagle3` when an EAGLE-3 head is shipped, else `eagle`.
    #[arg(long, value_enum)]
    method: Option<Method>,
    /// Draft head directory (EAGLE-1 or EAGLE-3 checkpoint); defaults to the shipped head.
    #[arg(long)]
    draft: Option<PathBuf>,
    /// Draft tokens per step (chains), or the depth of EAGLE-2 draft trees.
    #[arg(long, default_value_t = 3)]
    num_spec_tokens: usize,
    /// EAGLE-2 dynamic draft trees of this many draft tokens (nodes besides the root) instead
    /// of chains; 0 drafts chains.
    #[arg(long, default_value_t = 0)]
    tree_nodes: usize,
    /// Children per expanded node (and nodes expanded per depth) of EAGLE-2 draft trees.
    #[arg(long, default_value_t = DraftTreeConfig::default().top_k)]
    tree_top_k: usize,
    /// Speculate only while at most this many requests run (larger batches decode plainly).
    #[arg(long)]
    disable_by_batch_size: Option<usize>,
    /// `adaptive`: each step, each request drafts the length (0 to --num-spec-tokens) that
    /// maximizes expected tokens per second from the engine's own timings; `fixed`: always
    /// --num-spec-tokens.
    #[arg(long, value_enum, default_value_t = DraftLengthArg::Adaptive)]
    draft_length: DraftLengthArg,
    /// With `--draft-length adaptive`: fewest draft tokens per request and step.
    #[arg(long, default_value_t = 0)]
    min_draft_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Output tokens per request.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Number of prompts (built-in set, cycled; or the first N of the prompts file).
    #[arg(long)]
    num_prompts: Option<usize>,
    /// JSON Lines prompts file (`{"prompt": ...}`, `{"prompt_token_ids": [...]}` or
    /// `{"messages": [...]}` per line) instead of the built-in chat prompts.
    #[arg(long)]
    prompts_file: Option<PathBuf>,
    /// Print every prompt's output.
    #[arg(long)]
    print_outputs: bool,
    /// Also run without speculation: print the speedup and how many outputs match.
    #[arg(long)]
    compare_baseline: bool,
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

/// The drafting methods of the example.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Method {
    /// EAGLE-1 head on the target's last hidden state.
    Eagle,
    /// EAGLE-3 head on three auxiliary layers.
    Eagle3,
    /// Prompt-lookup n-grams (no draft model).
    Ngram,
}

/// How many tokens each request drafts per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DraftLengthArg {
    /// Chosen per request and step by the engine's cost model.
    Adaptive,
    /// Always --num-spec-tokens.
    Fixed,
}

/// The method asked for, or the default: the shipped EAGLE-3 head when there is one.
fn resolve_method(args: &Args) -> Method {
    args.method.unwrap_or_else(|| {
        if heads::shipped_eagle3_head_dir()
            .join("config.json")
            .exists()
        {
            Method::Eagle3
        } else {
            Method::Eagle
        }
    })
}

/// Picks the draft head, saying which one is used.
fn resolve_draft(args: &Args, method: Method, model_dir: &Path) -> Result<Option<PathBuf>> {
    if matches!(method, Method::Ngram) {
        println!("draft: n-gram prompt lookup (no draft model)");
        return Ok(None);
    }
    if let Some(dir) = &args.draft {
        println!("draft: {}", dir.display());
        return Ok(Some(dir.clone()));
    }
    if matches!(method, Method::Eagle3) {
        let shipped = heads::shipped_eagle3_head_dir();
        if !shipped.join("config.json").exists() {
            bail!("--method eagle3 needs --draft DIR (no EAGLE-3 head is shipped)");
        }
        println!("draft: the shipped EAGLE-3 head {}", shipped.display());
        return Ok(Some(shipped));
    }
    let shipped = heads::shipped_head_dir();
    if shipped.join("config.json").exists() {
        println!("draft: the shipped EAGLE-1 head {}", shipped.display());
        return Ok(Some(shipped));
    }
    let random = heads::untrained_head_dir();
    heads::write_untrained_eagle1(model_dir, &random)?;
    println!(
        "draft: NO trained EAGLE head is shipped yet; using an UNTRAINED EAGLE-1 head with random \
         weights ({}). Output stays exact (verification is lossless) but acceptance is near zero. \
         Pass a trained head with --draft DIR, or try --method ngram.",
        random.display()
    );
    Ok(Some(random))
}

fn load_prompts(args: &Args) -> Result<Vec<Prompt>> {
    let mut prompts = match &args.prompts_file {
        Some(path) => read_prompts_file(path)?,
        None => builtin_chat_prompts(args.num_prompts.unwrap_or(8)),
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

/// Runs `generate` and returns the outputs, the wall time and the snapshot delta.
fn timed_generate(
    llm: &mut Llm,
    prompts: &[Prompt],
    params: &SamplingParams,
) -> Result<(
    Vec<RequestOutput>,
    std::time::Duration,
    aquila_metrics::Snapshot,
)> {
    let before = llm.get_metrics();
    let start = Instant::now();
    let outputs = llm.generate(prompts.to_vec(), params)?;
    let wall = start.elapsed();
    let delta = llm.get_metrics().delta(&before)?;
    Ok((outputs, wall, delta))
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
    let chosen = resolve_method(&args);
    let draft = resolve_draft(&args, chosen, &model_dir)?;
    let tree = (args.tree_nodes > 0).then_some(DraftTreeConfig {
        top_k: args.tree_top_k,
        num_nodes: args.tree_nodes,
    });
    let method = match (chosen, draft) {
        (Method::Eagle, Some(draft_model)) => {
            SpeculativeMethod::Eagle(EagleDrafter { draft_model, tree })
        }
        (Method::Eagle3, Some(draft_model)) => {
            SpeculativeMethod::Eagle3(EagleDrafter { draft_model, tree })
        }
        (Method::Ngram, _) if tree.is_some() => {
            bail!("--tree-nodes needs an EAGLE method; n-gram drafting proposes chains")
        }
        (Method::Ngram, _) => SpeculativeMethod::Ngram(NgramDrafter::default()),
        (_, None) => bail!("an EAGLE method needs a draft head (--draft DIR)"),
    };
    let mut speculative = SpeculativeConfig::new(method, args.num_spec_tokens);
    speculative.disable_by_batch_size = args.disable_by_batch_size;
    speculative.draft_length = match args.draft_length {
        DraftLengthArg::Adaptive => DraftLength::Adaptive {
            min_draft_tokens: args.min_draft_tokens,
        },
        DraftLengthArg::Fixed if args.min_draft_tokens > 0 => {
            bail!("--min-draft-tokens bounds --draft-length adaptive only")
        }
        DraftLengthArg::Fixed => DraftLength::Fixed,
    };
    let prompts = load_prompts(&args)?;
    let params = sampling_params(&args)?;
    let shape = match tree {
        Some(tree) => format!(
            "EAGLE-2 trees of depth {}, top-k {}, {} draft tokens",
            args.num_spec_tokens, tree.top_k, tree.num_nodes
        ),
        None => format!("k = {}", args.num_spec_tokens),
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

    let mut llm = Llm::new(engine_config(&args, &model_dir, device, Some(speculative)))?;
    let _server = match &args.serve_metrics {
        Some(addr) => {
            let server = MetricsServer::start(llm.recorder(), addr)?;
            println!("serving metrics at {}", server.url());
            Some(server)
        }
        None => None,
    };
    let (outputs, wall, delta) = timed_generate(&mut llm, &prompts, &params)?;
    let namespace = llm.metrics_namespace();
    let report = SpecDecodeReport::from_snapshot(&delta, namespace, wall);

    if args.print_outputs {
        for output in &outputs {
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
        let json = serde_json::to_string_pretty(&outputs)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("outputs written to {}", path.display());
    }

    if args.compare_baseline {
        let mut baseline = Llm::new(engine_config(&args, &model_dir, device, None))?;
        let (base_outputs, base_wall, base_delta) =
            timed_generate(&mut baseline, &prompts, &params)?;
        let base_report = SpecDecodeReport::from_snapshot(&base_delta, namespace, base_wall);
        let matching = outputs
            .iter()
            .zip(&base_outputs)
            .filter(|(spec, base)| spec.token_ids == base.token_ids)
            .count();
        println!(
            "baseline: {:.2} s, {:.1} output tokens/s",
            base_wall.as_secs_f64(),
            base_report.output_tokens_per_second()
        );
        println!(
            "speedup: {:.2}x",
            base_wall.as_secs_f64() / wall.as_secs_f64().max(f64::EPSILON)
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
