//! Speculative decoding at temperature 0 (on the CPU unless `--device` says otherwise; `--dtype
//! q8_0` or `bf16` for packed target weights): baseline tokens/s, then n-gram, EAGLE-1 and
//! (with a shipped or given head) EAGLE-3 drafting with a fixed k (tokens/s, mean acceptance
//! length, speedup), and the cost of one verification step of k + 1 rows relative to a one-row
//! decode step, which decides whether speculation can pay here. Then the adaptive draft length
//! of every drafter at several numbers of requests in flight, each against the plain engine at
//! the same number, and the best fixed k of every drafter with one request in flight.
//!
//! ```text
//! cargo xtask bench spec [-- --draft DIR --draft-eagle3 DIR --k 3 --num-prompts 8
//!                         --max-tokens 64 --max-num-seqs 1 --in-flight 1,4,8,16]
//! ```

use anyhow::{bail, Context, Result};
use aquila_engine::{
    DraftLength, EngineConfig, Llm, Prompt, SamplingParams, SpeculativeConfig, WeightFormat,
};
use aquila_examples::device::{BackendTask, DeviceArgs, DeviceChoice};
use aquila_examples::heads;
use aquila_examples::paths::default_model_dir;
use aquila_examples::prompts::builtin_chat_prompts;
use aquila_examples::report::SpecDecodeReport;
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::module::Module;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Measures speculative decoding against plain decoding in the same run.
#[derive(Parser, Debug)]
#[command(name = "bench-spec", about)]
struct Args {
    #[command(flatten)]
    device: DeviceArgs,
    /// Target model directory; defaults to the workspace's SmolLM2 import.
    #[arg(long)]
    model: Option<PathBuf>,
    /// EAGLE-1 head; defaults to the shipped head, else an untrained one.
    #[arg(long)]
    draft: Option<PathBuf>,
    /// EAGLE-3 head; defaults to the shipped head (the row is left out when there is none).
    #[arg(long)]
    draft_eagle3: Option<PathBuf>,
    /// Draft tokens per step.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Chat prompts (built-in set).
    #[arg(long, default_value_t = 4)]
    num_prompts: usize,
    /// Output tokens per prompt.
    #[arg(long, default_value_t = 48)]
    max_tokens: usize,
    /// Requests decoded together (1 measures single-request latency); default: all prompts.
    #[arg(long)]
    max_num_seqs: Option<usize>,
    /// Cached context length of the verification-cost measurement.
    #[arg(long, default_value_t = 128)]
    context: usize,
    /// Timed repetitions of each forward in the verification-cost measurement.
    #[arg(long, default_value_t = 10)]
    repeats: usize,
    /// Requests in flight of the adaptive rows (each gets at least that many prompts); empty
    /// skips them.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    in_flight: Vec<usize>,
}

/// A drafter of the benchmark: its name and its configuration for a given k.
struct Drafter {
    name: &'static str,
    config: Box<dyn Fn(usize) -> SpeculativeConfig>,
}

impl Drafter {
    /// Its configuration drafting `k` tokens with `draft_length`.
    fn speculative(&self, k: usize, draft_length: DraftLength) -> SpeculativeConfig {
        SpeculativeConfig {
            draft_length,
            ..(self.config)(k)
        }
    }
}

/// Where and how much one run generates.
#[derive(Clone, Copy, Debug)]
struct Workload {
    max_num_seqs: Option<usize>,
    num_prompts: usize,
}

/// One end-to-end configuration's result.
struct Row {
    name: String,
    report: SpecDecodeReport,
    token_ids: Vec<Vec<u32>>,
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
    if args.k == 0 || args.num_prompts == 0 || args.max_tokens == 0 || args.repeats == 0 {
        bail!("--k, --num-prompts, --max-tokens and --repeats must be positive");
    }
    if args.in_flight.contains(&0) {
        bail!("--in-flight counts must be positive");
    }
    let device = args.device.resolve()?;
    let model = args.model.clone().unwrap_or_else(default_model_dir);
    let draft = match &args.draft {
        Some(dir) => dir.clone(),
        None if heads::shipped_head_dir().join("config.json").exists() => heads::shipped_head_dir(),
        None => {
            let dir = heads::untrained_head_dir();
            heads::write_untrained_eagle1(&model, &dir)?;
            eprintln!("note: no trained head given or shipped; EAGLE uses an untrained head");
            dir
        }
    };

    let draft_eagle3 = args
        .draft_eagle3
        .clone()
        .or_else(|| Some(heads::shipped_eagle3_head_dir()))
        .filter(|dir| dir.join("config.json").exists());

    let (one_row, k_rows) = device.run(VerificationCost {
        model_dir: &model,
        weights: device.weights,
        args: &args,
    })??;
    let mut drafters = vec![
        Drafter {
            name: "n-gram",
            config: Box::new(SpeculativeConfig::ngram),
        },
        Drafter {
            name: "EAGLE-1",
            config: {
                let draft = draft.clone();
                Box::new(move |k| SpeculativeConfig::eagle(&draft, k))
            },
        },
    ];
    if let Some(dir) = draft_eagle3.clone() {
        drafters.push(Drafter {
            name: "EAGLE-3",
            config: Box::new(move |k| SpeculativeConfig::eagle3(&dir, k)),
        });
    }
    let workload = Workload {
        max_num_seqs: args.max_num_seqs,
        num_prompts: args.num_prompts,
    };
    let mut configs: Vec<(String, Option<SpeculativeConfig>, Workload)> =
        vec![("baseline".to_string(), None, workload)];
    for drafter in &drafters {
        configs.push((
            format!("{}, k = {}", drafter.name, args.k),
            Some(drafter.speculative(args.k, DraftLength::Fixed)),
            workload,
        ));
    }
    let fixed_rows = configs.len();
    for &in_flight in &args.in_flight {
        let workload = Workload {
            max_num_seqs: Some(in_flight),
            num_prompts: args.num_prompts.max(in_flight),
        };
        configs.push((format!("{in_flight} baseline"), None, workload));
        for drafter in &drafters {
            let adaptive = drafter.speculative(args.k, DraftLength::default());
            configs.push((
                format!("{in_flight} {} adaptive", drafter.name),
                Some(adaptive),
                workload,
            ));
        }
    }
    let one_in_flight = Workload {
        max_num_seqs: Some(1),
        num_prompts: args.num_prompts,
    };
    let best_fixed_from = configs.len();
    if args.in_flight.contains(&1) {
        for drafter in &drafters {
            for k in 1..=args.k {
                let fixed = drafter.speculative(k, DraftLength::Fixed);
                configs.push((
                    format!("1 {} k = {k}", drafter.name),
                    Some(fixed),
                    one_in_flight,
                ));
            }
        }
    }
    let progress = ProgressBar::new(configs.len() as u64);
    progress.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    for (name, speculative, workload) in configs {
        progress.set_message(name.clone());
        rows.push(run_config(
            &model,
            device,
            name,
            speculative,
            workload,
            &args,
        )?);
        progress.inc(1);
    }
    progress.finish_and_clear();
    let adaptive_rows = rows.split_off(fixed_rows);

    println!(
        "SmolLM2 on {device}, temperature 0, {} prompts x {} tokens; EAGLE-1 draft: {}",
        args.num_prompts,
        args.max_tokens,
        draft.display()
    );
    if let Some(dir) = &draft_eagle3 {
        println!("EAGLE-3 draft: {}", dir.display());
    }
    println!(
        "one decode step (1 row): {:.1} ms; verification of k + 1 = {} rows: {:.1} ms; ratio {:.2}",
        ms(one_row),
        args.k + 1,
        ms(k_rows),
        k_rows.as_secs_f64() / one_row.as_secs_f64()
    );
    let baseline = rows[0].report.output_tokens_per_second();
    println!(
        "{:<24} {:>10} {:>12} {:>9} {:>8}",
        "configuration", "tokens/s", "mean accept", "speedup", "match"
    );
    for row in &rows {
        print_row(row, &rows[0], baseline);
    }
    if !args.in_flight.is_empty() {
        print_adaptive(&adaptive_rows, drafters.len(), best_fixed_from - fixed_rows);
    }
    Ok(())
}

/// Prints one configuration's line against its `baseline` row (`baseline_tps` tokens/s).
fn print_row(row: &Row, baseline: &Row, baseline_tps: f64) {
    let matching = row
        .token_ids
        .iter()
        .zip(&baseline.token_ids)
        .filter(|(a, b)| a == b)
        .count();
    println!(
        "{:<24} {:>10.1} {:>12.2} {:>8.2}x {:>5}/{}",
        row.name,
        row.report.output_tokens_per_second(),
        row.report.summary.mean_acceptance_length(),
        row.report.output_tokens_per_second() / baseline_tps,
        matching,
        row.token_ids.len()
    );
}

/// Prints the adaptive rows (groups of a baseline and `drafters` adaptive rows, one per
/// number in flight, then the fixed-k rows at one request from `fixed_from`), each against
/// the baseline of its group, and each drafter's best fixed k at one request.
fn print_adaptive(rows: &[Row], drafters: usize, fixed_from: usize) {
    println!("adaptive draft length, against the plain engine with as many requests in flight:");
    println!(
        "{:<24} {:>10} {:>12} {:>9} {:>8}",
        "in flight, configuration", "tokens/s", "mean accept", "speedup", "match"
    );
    let (groups, fixed) = rows.split_at(fixed_from);
    let mut adaptive_at_one = Vec::new();
    let mut baseline_at_one = None;
    for group in groups.chunks(drafters + 1) {
        let baseline = &group[0];
        let baseline_tps = baseline.report.output_tokens_per_second();
        for row in group {
            print_row(row, baseline, baseline_tps);
        }
        if baseline.name.starts_with("1 ") {
            adaptive_at_one = group[1..].iter().collect();
            baseline_at_one = Some(baseline);
        }
    }
    let Some(baseline) = baseline_at_one else {
        return;
    };
    let baseline_tps = baseline.report.output_tokens_per_second();
    println!("fixed k with one request in flight:");
    for row in fixed {
        print_row(row, baseline, baseline_tps);
    }
    let per_drafter = fixed.len() / drafters.max(1);
    for (adaptive, fixed) in adaptive_at_one.iter().zip(fixed.chunks(per_drafter.max(1))) {
        let Some(best) = fixed.iter().max_by(|a, b| {
            let tps = |row: &Row| row.report.output_tokens_per_second();
            tps(a).total_cmp(&tps(b))
        }) else {
            continue;
        };
        println!(
            "{}: {:.1} tokens/s against the best fixed k ({}: {:.1} tokens/s), {:.2}x",
            adaptive.name,
            adaptive.report.output_tokens_per_second(),
            best.name,
            best.report.output_tokens_per_second(),
            adaptive.report.output_tokens_per_second() / best.report.output_tokens_per_second()
        );
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Generates the workload once to warm up, then once timed.
fn run_config(
    model: &Path,
    device: DeviceChoice,
    name: String,
    speculative: Option<SpeculativeConfig>,
    workload: Workload,
    args: &Args,
) -> Result<Row> {
    let mut config = EngineConfig::new(model);
    device.apply(&mut config);
    config.speculative = speculative;
    if let Some(max_num_seqs) = workload.max_num_seqs {
        config.max_num_seqs = max_num_seqs;
    }
    let mut llm = Llm::new(config).with_context(|| format!("starting `{name}`"))?;
    let prompts: Vec<Prompt> = builtin_chat_prompts(workload.num_prompts);
    let params = SamplingParams::greedy(args.max_tokens);
    // The warm-up runs the whole workload, so that the timed run sees an engine in its steady
    // state (the adaptive policy has measured its costs at this number in flight).
    llm.generate(prompts.clone(), &params)?;
    let before = llm.get_metrics();
    let start = Instant::now();
    let outputs = llm.generate(prompts, &params)?;
    let wall = start.elapsed();
    let delta = llm.get_metrics().delta(&before)?;
    Ok(Row {
        name,
        report: SpecDecodeReport::from_snapshot(&delta, llm.metrics_namespace(), wall),
        token_ids: outputs.into_iter().map(|o| o.token_ids).collect(),
    })
}

/// Median time of a forward of 1 row and of k + 1 rows over a cached context.
struct VerificationCost<'a> {
    model_dir: &'a Path,
    weights: WeightFormat,
    args: &'a Args,
}

impl BackendTask for VerificationCost<'_> {
    type Output = Result<(Duration, Duration)>;

    fn run<B: KernelBackend>(self, device: &B::Device) -> Self::Output {
        let args = self.args;
        let model =
            LlamaModel::<B>::load_in_format(self.model_dir, self.weights, device)?.no_grad();
        let vocab = model.config().vocab_size as u32;
        let context: Vec<u32> = (0..args.context as u32)
            .map(|i| (i * 7919) % vocab)
            .collect();
        let mut cache = model.new_kv_cache(1);
        let prefill = ForwardBatch::new(vec![SequenceInput::new(0, context, 0)]);
        model.forward(&prefill, &mut cache, &FeatureTap::None)?;
        let mut time_rows = |rows: usize| -> Result<Duration> {
            let tokens: Vec<u32> = (0..rows as u32).map(|i| (i * 31 + 5) % vocab).collect();
            let batch = ForwardBatch::new(vec![
                SequenceInput::new(0, tokens, args.context).with_all_logits()
            ]);
            let mut times = Vec::with_capacity(args.repeats + 1);
            for _ in 0..=args.repeats {
                let start = Instant::now();
                let out = model.forward(&batch, &mut cache, &FeatureTap::None)?;
                let _ = out.logits.into_data();
                times.push(start.elapsed());
                cache.truncate(0, args.context);
            }
            times.remove(0);
            times.sort();
            Ok(times[times.len() / 2])
        };
        let one = time_rows(1)?;
        let many = time_rows(args.k + 1)?;
        Ok((one, many))
    }
}
