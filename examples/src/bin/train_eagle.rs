//! Trains an EAGLE draft head for a target by self-distillation and exports it in the layout
//! the loader (and public EAGLE heads) use.
//!
//! ```text
//! cargo xtask train-eagle -- --method eagle3 --prompts 320 --epochs 1 \
//!     --corpus python-docs,chatterbot --corpus-tokens 250000
//! ```
//!
//! 1. The built-in training prompts are answered by the target with the engine (greedy; with
//!    `--sampled-answers N`, also N answers per training prompt sampled at
//!    `--sample-temperature`, which only ever train; `--first-sampled-answer M` draws answers
//!    M to M + N - 1, new to a head warm-started from a run that drew M). With
//!    `--self-instruct N`, the target also writes N requests itself and answers them greedily
//!    (training only).
//! 2. With `--corpus`, text from package sources (the Python documentation from Debian, the
//!    ChatterBot dialogue corpus from PyPI) becomes chat samples, tokenized through the chat
//!    template; held-out documents are never recorded.
//! 3. One target forward per sequence records the features the head learns from, the greedy
//!    next token and the `--record-top-k` most likely ones.
//! 4. The head trains with burn's autodiff on the CPU (`Autodiff<Flex>`), validating its
//!    draft accuracy and simulated acceptance length on held-out self-distilled sequences
//!    and on the answers to `--validate-on` prompts files (unseen chat sets).
//! 5. The head is exported (`config.json`, `model.safetensors`) with a `TRAINING.md` record.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use aquila_engine::{ChatMessage, Device, WeightFormat};
use aquila_examples::corpus::{
    build_corpus_data, chat_samples, source_named, split_by_document, CorpusSettings,
};
use aquila_examples::device::{check_device, default_device, parse_device};
use aquila_examples::distill::{
    build_distill_data, Answers, DistillDirs, DistillSettings, GenerationSizes, PromptSet,
};
use aquila_examples::heads::{shipped_eagle3_head_dir, shipped_head_dir};
use aquila_examples::paths::{default_model_dir, workspace_root};
use aquila_examples::prompts::chat_prompt_line;
use aquila_examples::self_instruct::{
    self_instructed_prompts, DrawSettings, SelfInstructSettings, MAX_REQUEST_TOKENS,
};
use aquila_examples::train_prompts::{generate_training_prompts, held_out_prompts, TrainingPrompt};
use aquila_examples::training::{
    build_head, draft_vocab_coverage, eval_lines, load_head, write_training_record, HeadMethod,
    NewHeadSettings, OutputInit, ProgressObserver, TrainingRecord,
};
use aquila_examples::validation_sets::{
    set_name, validation_dir, validation_set, ValidationSettings,
};
use aquila_model_loader::checkpoint::FloatType;
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::train::{
    DistillData, FeatureShard, TrainBackend, TrainConfig, TrainHistory,
};
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use clap::{Parser, ValueEnum};
use rand::SeedableRng;

/// Storage type of the exported weights.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ExportDtype {
    F32,
    F16,
    Bf16,
}

/// What an EAGLE-3 head learns to predict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Labels {
    /// The target's greedy next token (cross-entropy).
    Greedy,
    /// The target's recorded top-k distribution in the draft vocabulary (soft cross-entropy).
    Distill,
}

/// Trains an EAGLE head by self-distillation from the target.
#[derive(Parser, Debug)]
#[command(name = "train-eagle", about)]
struct Args {
    /// EAGLE-3 (`eagle3`: aux features, draft vocabulary, training-time test; the shipped
    /// default) or EAGLE-1 (`eagle`: feature regression + token loss).
    #[arg(long, value_enum, default_value_t = HeadMethod::Eagle3)]
    method: HeadMethod,
    /// Target model directory (defaults to the workspace's SmolLM2 import).
    #[arg(long)]
    target: Option<PathBuf>,
    /// Where the trained head is written (defaults to the shipped head's directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Responses, feature shards and checkpoints (defaults to `models/eagle-train`); reruns
    /// resume there.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Number of built-in training prompts.
    #[arg(long, default_value_t = 512)]
    prompts: usize,
    /// Most response tokens per prompt.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Passes over the training data.
    #[arg(long)]
    epochs: Option<usize>,
    /// Most tokens per batch.
    #[arg(long)]
    batch_tokens: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Draft steps unrolled in training (training-time test).
    #[arg(long)]
    unroll: Option<usize>,
    /// Width of the uniform noise added to input features.
    #[arg(long)]
    noise: Option<f32>,
    /// Weight of the token cross-entropy (EAGLE-1).
    #[arg(long)]
    token_weight: Option<f32>,
    /// EAGLE-3 labels: the greedy token or the top-k distribution (`--record-top-k`).
    #[arg(long, value_enum, default_value_t = Labels::Greedy)]
    labels: Labels,
    /// Draft vocabulary size (EAGLE-3).
    #[arg(long, default_value_t = 8192)]
    draft_vocab: usize,
    /// Where an EAGLE-3 head's final norm and lm_head start: random, or copied from the
    /// target (its lm_head rows of the draft vocabulary), trained further or kept fixed.
    #[arg(long, value_enum, default_value_t = OutputInit::Random)]
    output_init: OutputInit,
    /// Width of a new head's MLPs (its decoder layers' `intermediate_size`); the target's
    /// by default. A wider head has more capacity at a higher cost per draft step.
    #[arg(long)]
    head_intermediate_size: Option<usize>,
    /// Decoder layers of a new head (EAGLE-3: the midlayer and standard layers after it); one
    /// by default. A deeper head has more capacity at a higher cost per draft step. With
    /// `--init-head`, deepens the saved head to this many layers: the added layers pass their
    /// input through until trained, so training starts from what the head drafts already.
    #[arg(long)]
    head_layers: Option<usize>,
    /// Start from the head in this directory (a warm start: its weights, its draft vocabulary
    /// and its shape, so `--draft-vocab`, `--head-intermediate-size` and `--output-init` do not
    /// apply, and `--head-layers` can only add layers) instead of a new one, and train it
    /// further on this run's data; a lower `--lr` than a new head's suits it. Keep the head's
    /// `--seed` and `--prompts`: they choose the held-out prompts.
    #[arg(long)]
    init_head: Option<PathBuf>,
    /// Validate every this many steps.
    #[arg(long)]
    eval_every: Option<usize>,
    /// Stop after this many optimizer steps of the schedule (rerun without it to resume);
    /// the head trained so far is exported.
    #[arg(long)]
    stop_after: Option<usize>,
    /// Seed of prompts, initialization, batch order and noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Storage type of the exported head.
    #[arg(long, value_enum, default_value_t = ExportDtype::F16)]
    dtype: ExportDtype,
    /// Where to train (responses and features are made on the CPU): `cpu` (`Autodiff<Flex>`)
    /// or `cuda[:N]` (`Autodiff<Cuda>`, f32; needs a CUDA build). Default: `cuda:0` in a CUDA
    /// build on a machine with a GPU, else `cpu`.
    #[arg(long, value_parser = parse_device)]
    device: Option<Device>,
    /// Weights the responses are generated with (`f32`, or `q8_0` to generate them faster);
    /// the features are recorded with the target's `f32` weights either way.
    #[arg(long, default_value = "f32")]
    response_weights: WeightFormat,
    /// Requests decoded together while generating responses.
    #[arg(long, default_value_t = 32)]
    max_num_seqs: usize,
    /// Also train on text from these package sources (comma-separated: `python-docs`,
    /// `chatterbot`), recorded at prefill speed; none by default.
    #[arg(long, value_delimiter = ',')]
    corpus: Vec<String>,
    /// Most corpus tokens recorded for training.
    #[arg(long, default_value_t = 1_000_000)]
    corpus_tokens: usize,
    /// One corpus document in this many is held out (never trained on).
    #[arg(long, default_value_t = 10)]
    corpus_holdout_every: u64,
    /// The target's most likely next tokens recorded per position (for `--objective
    /// distill`; 0 records the greedy token only).
    #[arg(long, default_value_t = 8)]
    record_top_k: usize,
    /// Print this many corpus samples (chosen at random) with the sources' sample counts, and
    /// exit without recording or training.
    #[arg(long)]
    corpus_preview: Option<usize>,
    /// Write the built-in training prompts whose greedy answers are held out for validation
    /// (every 20th of `--prompts` drawn with `--seed`) to this prompts file, for `eagle
    /// --prompts-file`, and exit without recording or training.
    #[arg(long)]
    write_held_out_prompts: Option<PathBuf>,
    /// Most response tokens of a corpus sample.
    #[arg(long, default_value_t = 384)]
    corpus_max_response: usize,
    /// Answers per training prompt sampled besides the greedy one (training only: the
    /// prompts whose greedy answers are held out get none); 0 by default.
    #[arg(long, default_value_t = 0)]
    sampled_answers: usize,
    /// Number of the first sampled answer: with `--init-head`, the count of sampled answers
    /// per prompt the head was trained on, so that this run samples new ones (the same
    /// `--seed` draws the same answers).
    #[arg(long, default_value_t = 0)]
    first_sampled_answer: usize,
    /// Softmax temperature of the sampled answers.
    #[arg(long, default_value_t = 0.8)]
    sample_temperature: f32,
    /// Also train on conversations of two turns: after each training prompt and the target's
    /// greedy answer, a follow-up of the prompt's kind ("Can you give me an example?") and the
    /// target's greedy answer to it (training only, like `--sampled-answers`).
    #[arg(long)]
    follow_ups: bool,
    /// Also train on the target's greedy answers to this many requests it wrote itself (drawn
    /// from its chat template's user turn, filtered and deduplicated; training only).
    #[arg(long, default_value_t = 0)]
    self_instruct: usize,
    /// Number of the first self-instructed request answered: with `--init-head`, the count of
    /// requests the head was trained on, so that this run answers only the new ones (a larger
    /// `--self-instruct` with the same `--seed` extends the same set).
    #[arg(long, default_value_t = 0)]
    first_self_instructed: usize,
    /// Softmax temperature of the self-instructed requests' draws.
    #[arg(long, default_value_t = 1.0)]
    self_instruct_temperature: f32,
    /// Nucleus threshold of the self-instructed requests' draws.
    #[arg(long, default_value_t = 0.95)]
    self_instruct_top_p: f32,
    /// Also validate on the target's greedy answers to the prompts of this file (a prompts
    /// file as for `eagle --prompts-file`; repeat it for several sets): recorded once, scored
    /// at every validation beside the held-out split and never trained on.
    #[arg(long)]
    validate_on: Vec<PathBuf>,
    /// Most answer tokens per prompt of the `--validate-on` sets (the eagle example's
    /// `--max-tokens`).
    #[arg(long, default_value_t = 64)]
    validate_max_tokens: usize,
    /// Score the head of `--init-head` on the held-out split and the `--validate-on` sets,
    /// and exit without training.
    #[arg(long)]
    evaluate_only: bool,
    /// Train on the sampled, follow-up, self-instructed and corpus data alone: the greedy
    /// answers only give the validation sequences (for a warm start, `--init-head`, that takes
    /// in data new to the head rather than another pass over the greedy answers it was trained
    /// on).
    #[arg(long)]
    new_data_only: bool,
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
    check_ranges(&args)?;
    let device = args.device.unwrap_or_else(default_device);
    check_device(device)?;
    println!("device: {device}, f32");
    let started = Instant::now();
    let target_dir = args.target.clone().unwrap_or_else(default_model_dir);
    let target_config = LlamaConfig::from_file(&target_dir.join("config.json"))
        .context("the target model (run `cargo xtask import-model`)")?;
    let method = args.method;
    let work_dir = args
        .work_dir
        .clone()
        .unwrap_or_else(|| workspace_root().join("models").join("eagle-train"));
    let out = args.out.clone().unwrap_or_else(|| match method {
        HeadMethod::Eagle => shipped_head_dir(),
        HeadMethod::Eagle3 => shipped_eagle3_head_dir(),
    });
    let tap = method.feature_tap(&target_config);
    if let Some(count) = args.corpus_preview {
        return preview_corpus(&args, &work_dir.join("corpus-packages"), count);
    }
    if let Some(path) = &args.write_held_out_prompts {
        return write_held_out_prompts(&args, path);
    }
    let settings = DistillSettings {
        prompt_set: PromptSet::BuiltIn,
        num_prompts: args.prompts,
        prompt_seed: args.seed,
        max_tokens: args.max_tokens,
        shard_size: 64,
        tap: aquila_spec_decode::train::tap_name(&tap),
        top_k: args.record_top_k,
        response_weights: args.response_weights,
        answers: Answers::Greedy,
    };
    let sizes = GenerationSizes {
        max_num_seqs: args.max_num_seqs,
        record_batch_tokens: 1024,
    };
    // The target's answers (in `responses_dir`) and their features (in `data_dir`).
    let greedy_responses = work_dir.join("responses");
    let answers = |responses_dir: &str,
                   data_dir: &str,
                   prompts: &[TrainingPrompt],
                   settings: &DistillSettings| {
        let dirs = DistillDirs {
            responses: &work_dir.join(responses_dir),
            data: &work_dir.join(method.name()).join(data_dir),
            first_turns: Some(&greedy_responses),
        };
        build_distill_data(&target_dir, dirs, &tap, prompts, settings, sizes)
    };
    let prompts = generate_training_prompts(args.prompts, args.seed)?;
    let distilled = answers("responses", "data", &prompts, &settings)?;
    let config = training_config(&args);
    let mut training_only = Vec::new();
    // Answers beyond the greedy ones train only: (name, responses dir, data dir, answers).
    let mut extra_answers = Vec::new();
    if args.sampled_answers > 0 {
        let sampled = Answers::Sampled {
            per_prompt: args.sampled_answers,
            first: args.first_sampled_answer,
            temperature: args.sample_temperature,
            skip_every: config.val_every,
        };
        extra_answers.push(("sampled", "responses-sampled", "sampled-data", sampled));
    }
    if args.follow_ups {
        let follow_ups = Answers::FollowUp {
            skip_every: config.val_every,
        };
        extra_answers.push((
            "follow-up",
            "responses-follow-up",
            "follow-up-data",
            follow_ups,
        ));
    }
    for (name, responses_dir, data_dir, kind) in extra_answers {
        let extra = DistillSettings {
            answers: kind,
            ..settings.clone()
        };
        let shards = answers(responses_dir, data_dir, &prompts, &extra)?;
        training_only.extend(counted(&format!("{name} answers"), shards));
    }
    if args.self_instruct > 0 {
        let drawing = SelfInstructSettings {
            count: args.self_instruct,
            first: args.first_self_instructed,
            draw: DrawSettings {
                seed: args.seed,
                temperature: args.self_instruct_temperature,
                top_p: args.self_instruct_top_p,
                max_tokens: MAX_REQUEST_TOKENS,
                weights: args.response_weights,
            },
        };
        let requests = self_instructed_prompts(
            &target_dir,
            &work_dir.join("self-instruct"),
            &drawing,
            sizes.max_num_seqs,
        )?;
        let self_instructed = DistillSettings {
            prompt_set: PromptSet::SelfInstructed(drawing),
            num_prompts: requests.len(),
            ..settings.clone()
        };
        let shards = answers(
            "responses-self-instruct",
            "self-instruct-data",
            &requests,
            &self_instructed,
        )?;
        training_only.extend(counted("self-instructed requests' answers", shards));
    }
    training_only.extend(corpus_shards(
        &args,
        &target_dir,
        &work_dir,
        &tap,
        sizes.record_batch_tokens,
    )?);
    let mut data = DistillData::with_training_only(distilled, training_only)?;
    if args.new_data_only {
        data = data.validating_only()?;
    }
    for file in &args.validate_on {
        let settings = ValidationSettings {
            tap: &tap,
            max_tokens: args.validate_max_tokens,
            top_k: args.record_top_k,
        };
        let dir = validation_dir(&work_dir.join(method.name()), file);
        let set = validation_set(&target_dir, file, &dir, settings, sizes)?;
        let name = set_name(file);
        println!(
            "validation set {name}: {} sequences, {} tokens",
            set.sequences().len(),
            set.num_tokens()
        );
        data = data.with_validation_set(name, set)?;
    }
    println!(
        "data: {} sequences, {} tokens ({} features){}",
        data.sequences().len(),
        data.num_tokens(),
        data.tap(),
        if args.new_data_only {
            "; the greedy answers only validate"
        } else {
            ""
        }
    );

    if method == HeadMethod::Eagle3 {
        print_vocab_coverage(&data, &config, target_config.vocab_size);
    }
    let run = TrainingRun {
        args: &args,
        target_dir: &target_dir,
        checkpoints: work_dir.join(method.name()).join("checkpoints"),
        out: &out,
        data: &data,
        config: &config,
    };
    let history = match device {
        Device::Cpu | Device::CpuGeneric => run.execute::<Autodiff<Flex>>(&Default::default())?,
        Device::Cuda(index) => run.on_cuda(index)?,
    };
    let Some(history) = history else {
        return Ok(());
    };
    check_export(&out, &target_config)?;
    let record = TrainingRecord {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        method,
        sequences: data.sequences().len(),
        tokens: data.num_tokens(),
        config,
        history,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    write_training_record(&out, &record)?;
    println!("{}", record.summary());
    println!("head written to {}", out.display());
    Ok(())
}

/// `shards`, after printing how many tokens the data set `name` holds.
fn counted(name: &str, shards: Vec<FeatureShard>) -> Vec<FeatureShard> {
    let tokens: usize = shards.iter().map(FeatureShard::num_tokens).sum();
    println!("{name}: {tokens} tokens");
    shards
}

/// The corpus shards of `--corpus` (recorded now when missing), or none without sources.
fn corpus_shards(
    args: &Args,
    target_dir: &Path,
    work_dir: &Path,
    tap: &FeatureTap,
    record_batch_tokens: usize,
) -> Result<Vec<FeatureShard>> {
    if args.corpus.is_empty() {
        return Ok(Vec::new());
    }
    let corpus_settings = CorpusSettings {
        sources: args.corpus.clone(),
        max_tokens: args.corpus_tokens,
        holdout_every: args.corpus_holdout_every,
        max_response_tokens: args.corpus_max_response,
        shard_tokens: 16_384,
        seed: args.seed,
        tap: aquila_spec_decode::train::tap_name(tap),
        top_k: args.record_top_k,
    };
    let (shards, stats) = build_corpus_data(
        target_dir,
        &work_dir.join("corpus-packages"),
        &work_dir.join(args.method.name()).join("corpus"),
        tap,
        &corpus_settings,
        record_batch_tokens,
    )?;
    for (source, s) in &stats {
        println!(
            "corpus {source}: {} documents, {} samples ({} held out), recorded {} samples, \
             {} tokens ({} response)",
            s.documents,
            s.samples,
            s.held_out_samples,
            s.recorded_samples,
            s.recorded_tokens,
            s.response_tokens
        );
    }
    Ok(shards)
}

/// Prints how much of the held-out greedy tokens, and of each validation set's, draft
/// vocabularies of several sizes cover.
fn print_vocab_coverage(data: &DistillData, config: &TrainConfig, vocab_size: usize) {
    let (train_set, val_set) = data.split(config.val_every);
    let counts = data.response_token_counts(&train_set, vocab_size);
    let mut wanted = vec![(
        "held-out greedy tokens".to_string(),
        data.response_token_counts(&val_set, vocab_size),
    )];
    for set in data.validation_sets() {
        let sequences = set.data.sequences();
        let tokens = set.data.response_token_counts(&sequences, vocab_size);
        wanted.push((format!("{}'s greedy tokens", set.name), tokens));
    }
    let sizes = [1024, 2048, 4096, 8192, 16384, 32768];
    for (name, tokens) in wanted {
        let line: Vec<String> = draft_vocab_coverage(&counts, &tokens, &sizes)
            .iter()
            .map(|(size, share)| format!("{size}: {share:.4}"))
            .collect();
        println!("draft vocabulary coverage of {name}: {}", line.join(", "));
    }
}

/// Refuses a first sampled answer or self-instructed request without answers or requests to
/// start it from, an evaluation without a head to score, and two validation sets of one name.
fn check_ranges(args: &Args) -> Result<()> {
    if args.first_sampled_answer > 0 && args.sampled_answers == 0 {
        bail!("--first-sampled-answer needs --sampled-answers: how many answers to sample from it");
    }
    if args.head_intermediate_size == Some(0) {
        bail!("--head-intermediate-size must be at least 1");
    }
    if args.head_layers == Some(0) {
        bail!("--head-layers must be at least 1");
    }
    if args.init_head.is_some() && args.head_intermediate_size.is_some() {
        bail!(
            "--head-intermediate-size shapes a new head; a head of --init-head keeps its own \
             width (--head-layers can deepen it)"
        );
    }
    if args.evaluate_only && args.init_head.is_none() {
        bail!("--evaluate-only scores a saved head: name it with --init-head");
    }
    for (index, file) in args.validate_on.iter().enumerate() {
        let name = set_name(file);
        if args.validate_on[..index]
            .iter()
            .any(|f| set_name(f) == name)
        {
            bail!(
                "two --validate-on files are named {name}: each set is kept and reported under \
                 its file name"
            );
        }
    }
    if args.first_self_instructed > 0 && args.self_instruct == 0 {
        bail!(
            "--first-self-instructed needs --self-instruct above it: the count of requests whose \
             last ones are answered"
        );
    }
    Ok(())
}

/// Writes the prompts of the greedy answers the trainer holds out to `path` (see
/// `--write-held-out-prompts`).
fn write_held_out_prompts(args: &Args, path: &Path) -> Result<()> {
    let prompts = generate_training_prompts(args.prompts, args.seed)?;
    let held_out = held_out_prompts(&prompts, training_config(args).val_every);
    let lines: Vec<String> = held_out
        .iter()
        .map(|prompt| chat_prompt_line(&[ChatMessage::new("user", prompt.text.as_str())]))
        .collect();
    std::fs::write(path, lines.join("\n") + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "{} held-out prompts of {} written to {}",
        held_out.len(),
        prompts.len(),
        path.display()
    );
    Ok(())
}

/// Prints `count` random training samples of the corpus sources and how many each gives.
fn preview_corpus(args: &Args, download_dir: &Path, count: usize) -> Result<()> {
    use rand::seq::IndexedRandom;
    let mut documents = Vec::new();
    for name in &args.corpus {
        documents.extend(source_named(name)?.documents(download_dir)?);
    }
    let (train, held_out) = split_by_document(chat_samples(&documents), args.corpus_holdout_every);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    for sample in train.choose_multiple(&mut rng, count) {
        println!("=== {} / {}", sample.source, sample.document);
        for message in &sample.messages {
            println!("[{}] {}", message.role, message.content);
        }
    }
    println!(
        "{} documents, {} training samples, {} held out",
        documents.len(),
        train.len(),
        held_out.len()
    );
    Ok(())
}

/// One training run: what [`TrainingRun::execute`] needs, whatever the backend.
struct TrainingRun<'a> {
    args: &'a Args,
    target_dir: &'a Path,
    checkpoints: PathBuf,
    out: &'a Path,
    data: &'a DistillData,
    config: &'a TrainConfig,
}

impl TrainingRun<'_> {
    /// Trains on backend `B` (seeded), then exports the head; returns the history. With
    /// `--evaluate-only`, prints the head's validation instead and returns `None`.
    fn execute<B: TrainBackend>(&self, device: &B::Device) -> Result<Option<TrainHistory>> {
        B::seed(device, self.args.seed);
        let target = LlamaModel::<B>::load(self.target_dir, device)?.no_grad();
        let (train_set, _) = self.data.split(self.config.val_every);
        let head = match &self.args.init_head {
            Some(dir) => {
                let head = load_head::<B>(self.args.method, dir, target.config(), device)?;
                match self.args.head_layers {
                    Some(layers) => head.deepened_to(layers, device)?,
                    None => head,
                }
            }
            None => build_head::<B>(
                self.args.method,
                &target,
                self.data,
                &train_set,
                &NewHeadSettings {
                    draft_vocab: self.args.draft_vocab,
                    layers: self.args.head_layers.unwrap_or(1),
                    intermediate_size: self.args.head_intermediate_size,
                    output: self.args.output_init,
                },
                device,
            )?,
        };
        if self.args.evaluate_only {
            let point = head.validate(&target, self.data, self.config)?;
            for line in eval_lines(&point) {
                println!("{line}");
            }
            return Ok(None);
        }
        let mut observer = ProgressObserver::new();
        let (trained, history) = head.train(
            &target,
            self.data,
            self.config,
            Some(&self.checkpoints),
            &mut observer,
        )?;
        observer.finish();
        let dtype = match self.args.dtype {
            ExportDtype::F32 => FloatType::F32,
            ExportDtype::F16 => FloatType::F16,
            ExportDtype::Bf16 => FloatType::BF16,
        };
        trained.export(self.out, dtype)?;
        Ok(Some(history))
    }

    /// Trains on CUDA device `index` (f32).
    #[cfg(feature = "cuda")]
    fn on_cuda(&self, index: usize) -> Result<Option<TrainHistory>> {
        let device = burn::backend::cuda::CudaDevice::new(index);
        self.execute::<Autodiff<burn::backend::Cuda>>(&device)
    }

    /// Without the `cuda` feature there is no GPU backend to train on.
    #[cfg(not(feature = "cuda"))]
    fn on_cuda(&self, index: usize) -> Result<Option<TrainHistory>> {
        Err(aquila_examples::device::DeviceError::NotBuiltWithCuda(Device::Cuda(index)).into())
    }
}

/// The trainer settings: the method's defaults with the command line's overrides.
fn training_config(args: &Args) -> TrainConfig {
    let mut config = args.method.default_config();
    config.seed = args.seed;
    config.stop_after = args.stop_after;
    if let Some(v) = args.epochs {
        config.epochs = v;
    }
    if let Some(v) = args.batch_tokens {
        config.batch_tokens = v;
    }
    if let Some(v) = args.lr {
        config.learning_rate = v;
    }
    if let Some(v) = args.unroll {
        config.unroll = v;
    }
    if let Some(v) = args.noise {
        config.noise = v;
    }
    if let Some(v) = args.eval_every {
        config.eval_every = v;
        config.checkpoint_every = v;
    }
    if args.method == HeadMethod::Eagle3 && args.labels == Labels::Distill {
        config.objective = aquila_spec_decode::train::Objective::Eagle3Distill;
    }
    if let (Some(w), aquila_spec_decode::train::Objective::Eagle1 { token_weight, .. }) =
        (args.token_weight, &mut config.objective)
    {
        *token_weight = w;
    }
    config
}

/// Loads the exported head back with the engine's loader, as `cargo xtask eagle` will.
fn check_export(out: &Path, target: &LlamaConfig) -> Result<()> {
    let head = EagleHead::<Flex>::load(out, target, &Default::default())
        .with_context(|| format!("loading the exported head from {}", out.display()))?;
    head.check_target(target)?;
    Ok(())
}
