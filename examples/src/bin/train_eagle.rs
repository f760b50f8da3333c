//! Trains an EAGLE draft head for a target by self-distillation and exports it in the layout
//! the loader (and public EAGLE heads) use.
//!
//! ```text
//! cargo xtask train-eagle -- --method eagle3 --prompts 512 --epochs 6
//! ```
//!
//! 1. The built-in training prompts are answered by the target with the engine (greedy).
//! 2. One target forward per sequence records the features the head learns from.
//! 3. The head trains with burn's autodiff on the CPU (`Autodiff<Flex>`), validating its
//!    draft accuracy and simulated acceptance length on held-out sequences.
//! 4. The head is exported (`config.json`, `model.safetensors`) with a `TRAINING.md` record.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use aquila_engine::Device;
use aquila_examples::device::{check_device, default_device, parse_device};
use aquila_examples::distill::{build_distill_data, DistillSettings, GenerationSizes};
use aquila_examples::heads::{shipped_eagle3_head_dir, shipped_head_dir};
use aquila_examples::paths::{default_model_dir, workspace_root};
use aquila_examples::training::{
    build_head, write_training_record, HeadMethod, ProgressObserver, TrainingRecord,
};
use aquila_model_loader::checkpoint::FloatType;
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::LlamaModel;
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::train::{DistillData, TrainBackend, TrainConfig, TrainHistory};
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use clap::{Parser, ValueEnum};

/// Storage type of the exported weights.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ExportDtype {
    F32,
    F16,
    Bf16,
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
    /// Draft vocabulary size (EAGLE-3).
    #[arg(long, default_value_t = 8192)]
    draft_vocab: usize,
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
    /// Requests decoded together while generating responses.
    #[arg(long, default_value_t = 32)]
    max_num_seqs: usize,
}

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    let args = Args::parse();
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
    let settings = DistillSettings {
        num_prompts: args.prompts,
        prompt_seed: args.seed,
        max_tokens: args.max_tokens,
        shard_size: 64,
        tap: aquila_spec_decode::train::tap_name(&tap),
    };
    let sizes = GenerationSizes {
        max_num_seqs: args.max_num_seqs,
        record_batch_tokens: 1024,
    };
    let data = build_distill_data(
        &target_dir,
        &work_dir.join("responses"),
        &work_dir.join(method.name()).join("data"),
        &tap,
        &settings,
        sizes,
    )?;
    println!(
        "data: {} sequences, {} tokens ({} features)",
        data.sequences().len(),
        data.num_tokens(),
        data.tap()
    );

    let config = training_config(&args);
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
    /// Trains on backend `B` (seeded), then exports the head; returns the history.
    fn execute<B: TrainBackend>(&self, device: &B::Device) -> Result<TrainHistory> {
        B::seed(device, self.args.seed);
        let target = LlamaModel::<B>::load(self.target_dir, device)?.no_grad();
        let (train_set, _) = self.data.split(self.config.val_every);
        let head = build_head::<B>(
            self.args.method,
            &target,
            self.data,
            &train_set,
            self.args.draft_vocab,
            device,
        )?;
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
        Ok(history)
    }

    /// Trains on CUDA device `index` (f32).
    #[cfg(feature = "cuda")]
    fn on_cuda(&self, index: usize) -> Result<TrainHistory> {
        let device = burn::backend::cuda::CudaDevice::new(index);
        self.execute::<Autodiff<burn::backend::Cuda>>(&device)
    }

    /// Without the `cuda` feature there is no GPU backend to train on.
    #[cfg(not(feature = "cuda"))]
    fn on_cuda(&self, index: usize) -> Result<TrainHistory> {
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
