//! Speculative decoding at temperature 0 (on the CPU unless `--device` says otherwise; `--dtype
//! q8_0`, `bf16` or `q4_1` for packed target weights): baseline tokens/s, then n-gram, EAGLE-1,
//! (with a shipped or given head) EAGLE-3 and draft-model drafting (the target itself with
//! Q4_1 weights on the CPU, or `--draft-model DIR`) with a fixed k (tokens/s, mean acceptance
//! length, speedup, the drafter's mean time per engine step), and the cost of one verification
//! step of k + 1 rows relative to a one-row decode step, which decides whether speculation can
//! pay here. Then the adaptive draft length of every drafter at several numbers of requests in
//! flight, each against the plain engine at the same number, and the best fixed k of every
//! drafter with one request in flight.
//!
//! Configurations compared with each other run as a group: their engines share one copy of the
//! weights and are all started and warmed up; then, for `--rounds` rounds, every engine takes
//! the whole workload and the engines take engine steps in turn (each round starting one
//! configuration later), each timed over its own steps. Every figure is a median over the
//! rounds, so that neither the machine's drifts, fast or slow, nor where in memory an engine's
//! weights landed decide a comparison.
//!
//! ```text
//! cargo xtask bench spec [-- --draft DIR --draft-eagle3 DIR --k 3 --num-prompts 8
//!                         --max-tokens 64 --max-num-seqs 1 --in-flight 1,4,8,16 --rounds 5
//!                         --drafters ngram,eagle1,eagle3,draft-model]
//! ```

use anyhow::{bail, Context, Result};
use aquila_engine::{
    DraftLength, EngineConfig, Llm, SamplingParams, SpeculativeConfig, WeightFormat,
};
use aquila_examples::device::{BackendTask, DeviceArgs, DeviceChoice};
use aquila_examples::heads;
use aquila_examples::interleaved::run_interleaved;
use aquila_examples::paths::default_model_dir;
use aquila_examples::progress;
use aquila_examples::prompts::builtin_chat_prompts;
use aquila_examples::report::SpecDecodeReport;
use aquila_examples::stats::median;
use aquila_metrics::Snapshot;
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::module::Module;
use clap::Parser;
use indicatif::ProgressBar;
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
    /// Draft model of the draft-model row; defaults to the target itself (in Q4_1 on the CPU).
    #[arg(long)]
    draft_model: Option<PathBuf>,
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
    /// Requests in flight of the adaptive rows (each gets at least twice that many prompts, so
    /// that most of its steps run that many requests); empty
    /// skips them.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    in_flight: Vec<usize>,
    /// Timed rounds per configuration; the engines compared with each other take steps in
    /// turn within a round, and every figure is the median over the rounds (the machine's
    /// speed drifts by several percent between runs).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Drafters measured (EAGLE-3 only where a head is shipped or given).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ngram,eagle1,eagle3,draft-model"
    )]
    drafters: Vec<DrafterKind>,
}

/// A drafter the benchmark can measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DrafterKind {
    /// Prompt-lookup n-gram drafting.
    Ngram,
    /// An EAGLE-1 head.
    Eagle1,
    /// An EAGLE-3 head.
    Eagle3,
    /// A draft language model.
    DraftModel,
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

/// One end-to-end configuration: its name, drafting (none for the plain engine) and workload.
struct Config {
    name: String,
    speculative: Option<SpeculativeConfig>,
    workload: Workload,
}

impl Config {
    fn new(name: String, speculative: Option<SpeculativeConfig>, workload: Workload) -> Self {
        Self {
            name,
            speculative,
            workload,
        }
    }
}

/// One configuration's results: a report per timed round and the outputs (the same in every
/// round at temperature 0).
struct Row {
    name: String,
    rounds: Vec<SpecDecodeReport>,
    token_ids: Vec<Vec<u32>>,
}

impl Row {
    /// Median output tokens per second over the rounds.
    fn tokens_per_second(&self) -> f64 {
        median(
            self.rounds
                .iter()
                .map(SpecDecodeReport::output_tokens_per_second)
                .collect(),
        )
    }

    /// This row's tokens per second over `reference`'s, round by round.
    fn round_speedups(&self, reference: &Row) -> Vec<f64> {
        self.rounds
            .iter()
            .zip(&reference.rounds)
            .map(|(mine, theirs)| {
                mine.output_tokens_per_second() / theirs.output_tokens_per_second()
            })
            .collect()
    }

    /// Median over the rounds of this row's tokens per second over `reference`'s in the same
    /// round.
    fn speedup_over(&self, reference: &Row) -> f64 {
        median(self.round_speedups(reference))
    }

    /// Median over the rounds of the drafter's mean time per engine step, in milliseconds (0
    /// without a drafter).
    fn drafting_ms(&self) -> f64 {
        median(
            self.rounds
                .iter()
                .map(|r| r.step_times.drafting.as_secs_f64() * 1e3)
                .collect(),
        )
    }

    /// Mean acceptance length over all rounds' drafts (1 without drafts).
    fn mean_acceptance_length(&self) -> f64 {
        let drafts: u64 = self.rounds.iter().map(|r| r.summary.drafts).sum();
        let accepted: u64 = self.rounds.iter().map(|r| r.summary.accepted_tokens).sum();
        1.0 + accepted as f64 / drafts.max(1) as f64
    }
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
    if args.k == 0
        || args.num_prompts == 0
        || args.max_tokens == 0
        || args.repeats == 0
        || args.rounds == 0
    {
        bail!("--k, --num-prompts, --max-tokens, --repeats and --rounds must be positive");
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
    let mut drafters = Vec::new();
    if args.drafters.contains(&DrafterKind::Ngram) {
        drafters.push(Drafter {
            name: "n-gram",
            config: Box::new(SpeculativeConfig::ngram),
        });
    }
    if args.drafters.contains(&DrafterKind::Eagle1) {
        let draft = draft.clone();
        drafters.push(Drafter {
            name: "EAGLE-1",
            config: Box::new(move |k| SpeculativeConfig::eagle(&draft, k)),
        });
    }
    if let Some(dir) = draft_eagle3
        .clone()
        .filter(|_| args.drafters.contains(&DrafterKind::Eagle3))
    {
        drafters.push(Drafter {
            name: "EAGLE-3",
            config: Box::new(move |k| SpeculativeConfig::eagle3(&dir, k)),
        });
    }
    if args.drafters.contains(&DrafterKind::DraftModel) {
        let dir = args.draft_model.clone().unwrap_or_else(|| model.clone());
        drafters.push(Drafter {
            name: "draft model",
            config: Box::new(move |k| SpeculativeConfig::draft_model(&dir, k)),
        });
    }
    if drafters.is_empty() {
        bail!("--drafters selects no drafter that can run (EAGLE-3 needs a shipped or given head)");
    }
    let workload = Workload {
        max_num_seqs: args.max_num_seqs,
        num_prompts: args.num_prompts,
    };
    let mut fixed_group = vec![Config::new("baseline".to_string(), None, workload)];
    for drafter in &drafters {
        fixed_group.push(Config::new(
            format!("{}, k = {}", drafter.name, args.k),
            Some(drafter.speculative(args.k, DraftLength::Fixed)),
            workload,
        ));
    }
    let mut groups = vec![fixed_group];
    for &in_flight in &args.in_flight {
        let workload = Workload {
            max_num_seqs: Some(in_flight),
            num_prompts: args.num_prompts.max(2 * in_flight),
        };
        let mut group = vec![Config::new(format!("{in_flight} baseline"), None, workload)];
        for drafter in &drafters {
            group.push(Config::new(
                format!("{in_flight} {} adaptive", drafter.name),
                Some(drafter.speculative(args.k, DraftLength::default())),
                workload,
            ));
        }
        groups.push(group);
    }
    let adaptive_groups = groups.len() - 1;
    if args.in_flight.contains(&1) {
        let one_in_flight = Workload {
            max_num_seqs: Some(1),
            num_prompts: args.num_prompts,
        };
        for drafter in &drafters {
            let mut group = vec![Config::new(
                format!("1 {} adaptive", drafter.name),
                Some(drafter.speculative(args.k, DraftLength::default())),
                one_in_flight,
            )];
            for k in 1..=args.k {
                group.push(Config::new(
                    format!("1 {} k = {k}", drafter.name),
                    Some(drafter.speculative(k, DraftLength::Fixed)),
                    one_in_flight,
                ));
            }
            groups.push(group);
        }
    }
    let runs: usize = groups.iter().map(Vec::len).sum::<usize>() * (args.rounds + 1);
    let progress = progress::bar(
        runs as u64,
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
    );
    let mut measured = Vec::with_capacity(groups.len());
    for group in &groups {
        measured.push(run_group(&model, device, group, &args, &progress)?);
    }
    progress.finish_and_clear();

    println!(
        "SmolLM2 on {device}, temperature 0, {} prompts x {} tokens, median of {} interleaved \
         rounds; EAGLE-1 draft: {}",
        args.num_prompts,
        args.max_tokens,
        args.rounds,
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
    print_header("configuration");
    print_against_baseline(&measured[0]);
    if adaptive_groups > 0 {
        println!(
            "adaptive draft length, against the plain engine with as many requests in flight:"
        );
        print_header("in flight, configuration");
        for group in &measured[1..=adaptive_groups] {
            print_against_baseline(group);
        }
        println!("the adaptive rows' speedups round by round:");
        for group in &measured[1..=adaptive_groups] {
            for row in &group[1..] {
                print_rounds(row, &group[0]);
            }
        }
    }
    let fixed_at_one = &measured[adaptive_groups + 1..];
    if !fixed_at_one.is_empty() {
        println!("fixed k with one request in flight, against the adaptive draft length:");
        print_header("configuration");
        for group in fixed_at_one {
            print_against_best_fixed(group);
        }
    }
    Ok(())
}

/// Prints the column headers, the first one named `first`.
fn print_header(first: &str) {
    println!(
        "{:<24} {:>10} {:>12} {:>9} {:>8} {:>9}",
        first, "tokens/s", "mean accept", "speedup", "match", "draft ms"
    );
}

/// Prints a group whose first row is its plain-engine baseline, every row against it.
fn print_against_baseline(group: &[Row]) {
    let baseline = &group[0];
    for row in group {
        print_row(row, baseline);
    }
}

/// Prints a group of an adaptive row followed by fixed-k rows of the same drafter, each
/// against the adaptive row, then the adaptive row against the best fixed k.
fn print_against_best_fixed(group: &[Row]) {
    let adaptive = &group[0];
    for row in group {
        print_row(row, adaptive);
    }
    let Some(best) = group[1..]
        .iter()
        .max_by(|a, b| a.tokens_per_second().total_cmp(&b.tokens_per_second()))
    else {
        return;
    };
    println!(
        "{}: {:.1} tokens/s against the best fixed k ({}: {:.1} tokens/s), {:.2}x",
        adaptive.name,
        adaptive.tokens_per_second(),
        best.name,
        best.tokens_per_second(),
        adaptive.speedup_over(best)
    );
}

/// Prints one configuration's line against `reference` (speedup: the median of the rounds'
/// ratios; match: outputs equal to the reference's).
fn print_row(row: &Row, reference: &Row) {
    let matching = row
        .token_ids
        .iter()
        .zip(&reference.token_ids)
        .filter(|(a, b)| a == b)
        .count();
    println!(
        "{:<24} {:>10.1} {:>12.2} {:>8.2}x {:>5}/{:<2} {:>9.2}",
        row.name,
        row.tokens_per_second(),
        row.mean_acceptance_length(),
        row.speedup_over(reference),
        matching,
        row.token_ids.len(),
        row.drafting_ms()
    );
}

/// Prints `row`'s speedups over `reference` in each round, in the order the rounds ran.
fn print_rounds(row: &Row, reference: &Row) {
    let rounds: Vec<String> = row
        .round_speedups(reference)
        .iter()
        .map(|ratio| format!("{ratio:.2}x"))
        .collect();
    println!("{:<24} {}", row.name, rounds.join(" "));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Runs a group of configurations side by side, on one shared copy of the weights: every
/// engine is started and warmed up on its whole workload (so that the adaptive policy has
/// measured its costs at this number in flight), then each round gives every engine the
/// workload and lets the engines take steps in turn (each round starting one engine later), each
/// timed over its own steps, so that the machine's drifts fall on all of them alike.
fn run_group(
    model: &Path,
    device: DeviceChoice,
    group: &[Config],
    args: &Args,
    progress: &ProgressBar,
) -> Result<Vec<Row>> {
    let params = SamplingParams::greedy(args.max_tokens);
    let mut engines = Vec::with_capacity(group.len());
    for config in group {
        progress.set_message(format!("{} (warm-up)", config.name));
        let mut engine_config = EngineConfig::new(model);
        device.apply(&mut engine_config);
        engine_config.speculative = config.speculative.clone();
        if let Some(max_num_seqs) = config.workload.max_num_seqs {
            engine_config.max_num_seqs = max_num_seqs;
        }
        // One copy of the weights for the whole group: every engine then reads the same
        // memory, so that no configuration gains or loses by where its copy landed.
        let mut llm = match engines.first() {
            None => Llm::new(engine_config),
            Some(first) => Llm::sharing_weights_with(first, engine_config),
        }
        .with_context(|| format!("starting `{}`", config.name))?;
        llm.generate(builtin_chat_prompts(config.workload.num_prompts), &params)?;
        progress.inc(1);
        engines.push(llm);
    }
    let mut rows: Vec<Row> = group
        .iter()
        .map(|config| Row {
            name: config.name.clone(),
            rounds: Vec::new(),
            token_ids: Vec::new(),
        })
        .collect();
    let count = group.len();
    for round in 0..args.rounds {
        // Each round starts one configuration later, so that no configuration always steps
        // right after the same neighbour.
        progress.set_message(format!("round {}", round + 1));
        let prompts = builtin_chat_prompts(group[0].workload.num_prompts);
        let before: Vec<Snapshot> = engines.iter().map(Llm::get_metrics).collect();
        let mut in_turn: Vec<&mut Llm> = engines.iter_mut().collect();
        in_turn.rotate_left(round % count);
        let mut runs = run_interleaved(&mut in_turn, &prompts, &params)?;
        runs.rotate_right(round % count);
        for (index, run) in runs.into_iter().enumerate() {
            let (llm, config, row) = (&engines[index], &group[index], &mut rows[index]);
            let delta = llm.get_metrics().delta(&before[index])?;
            row.rounds.push(SpecDecodeReport::from_snapshot(
                &delta,
                llm.metrics_namespace(),
                run.busy,
            ));
            let token_ids: Vec<Vec<u32>> = run.outputs.into_iter().map(|o| o.token_ids).collect();
            if round > 0 && token_ids != row.token_ids {
                bail!(
                    "`{}` generated other tokens in round {}",
                    config.name,
                    round + 1
                );
            }
            row.token_ids = token_ids;
            progress.inc(1);
        }
    }
    Ok(rows)
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
