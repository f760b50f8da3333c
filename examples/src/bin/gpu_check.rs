//! Checks of the generic burn path on an accelerator, run by the `cargo xtask gpu-check`
//! bundle on a GPU machine (no Rust toolchain needed there):
//!
//! - `parity`: the logits of a model (tiny fixtures when no `--model` is given) on `--device`
//!   against the CPU kernels, teacher-forced rows and KV-cache decode steps;
//! - `heads`: untrained EAGLE-1 and EAGLE-3 heads for a target, for `bench-spec`.
//!
//! ```text
//! gpu-check parity --device cuda:0 [--model DIR]
//! gpu-check heads --model DIR --out DIR
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aquila_engine::{DType, Device, WeightFormat};
use aquila_examples::device::{BackendTask, DeviceArgs, DeviceChoice};
use aquila_examples::heads::{write_untrained_eagle1, write_untrained_eagle3};
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::module::Module;
use clap::{Parser, Subcommand};

/// Checks of the generic burn path on an accelerator.
#[derive(Parser, Debug)]
#[command(name = "gpu-check", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Logits on `--device` against the CPU kernels (f32).
    Parity {
        /// Model directory; default: two tiny fixtures (tied, and with attention biases).
        #[arg(long)]
        model: Option<PathBuf>,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Writes untrained EAGLE-1 and EAGLE-3 heads for a target into `OUT/eagle1`, `OUT/eagle3`.
    Heads {
        /// Target model directory.
        #[arg(long)]
        model: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Sequences of the parity check, their length, and the decode steps after them.
const SEQUENCES: usize = 3;
const SEQUENCE_LEN: usize = 24;
const DECODE_STEPS: usize = 4;

fn main() -> Result<()> {
    aquila_examples::init_tracing();
    match Cli::parse().command {
        Command::Parity { model, device } => {
            let device = device.resolve()?;
            match model {
                Some(dir) => parity(&dir, device),
                None => tiny_parity(device),
            }
        }
        Command::Heads { model, out } => {
            write_untrained_eagle1(&model, &out.join("eagle1"))?;
            write_untrained_eagle3(&model, &out.join("eagle3"))?;
            println!("heads written to {}", out.display());
            Ok(())
        }
    }
}

/// Parity on the tiny fixtures.
fn tiny_parity(device: DeviceChoice) -> Result<()> {
    let fixtures = [
        ("tiny, tied", TinyLlamaOptions::default()),
        (
            "tiny, attention biases, 3 layers",
            TinyLlamaOptions {
                tied: false,
                num_layers: 3,
                attention_bias: true,
                ..TinyLlamaOptions::default()
            },
        ),
    ];
    for (name, options) in fixtures {
        let dir = tempfile::tempdir()?;
        write_tiny_llama(dir.path(), &options).with_context(|| format!("writing {name}"))?;
        println!("fixture: {name}");
        parity(dir.path(), device)?;
    }
    Ok(())
}

/// Compares the logits of the model in `dir` on `device` with the CPU kernels'; fails when an
/// f32 run differs by more than 1e-3 of the logits' scale or picks another argmax.
fn parity(dir: &Path, device: DeviceChoice) -> Result<()> {
    let config = LlamaConfig::from_file(&dir.join("config.json"))?;
    let vocab = config.vocab_size;
    let sequences: Vec<Vec<u32>> = (0..SEQUENCES)
        .map(|s| {
            (0..SEQUENCE_LEN)
                .map(|i| ((s * 7919 + i * 104_729 + 1) % vocab) as u32)
                .collect()
        })
        .collect();
    let run = |choice: DeviceChoice| -> Result<Vec<f32>> {
        choice.run(ParityLogits {
            model_dir: dir,
            sequences: &sequences,
        })?
    };
    let cpu = DeviceChoice {
        device: Device::Cpu,
        dtype: DType::F32,
        weights: WeightFormat::F32,
    };
    let expected = run(cpu)?;
    let actual = run(device)?;
    let comparison = Comparison::of(&expected, &actual, vocab);
    let tolerance = if device.dtype == DType::F32 {
        1e-3
    } else {
        5e-2
    };
    let passed = comparison.max_relative <= tolerance && comparison.argmax_agree == comparison.rows;
    println!(
        "parity {device} vs {cpu}: {} rows, max |diff| {:.2e} ({:.2e} of the logit scale, \
         tolerance {tolerance:.0e}), argmax agrees on {}/{}: {}",
        comparison.rows,
        comparison.max_abs,
        comparison.max_relative,
        comparison.argmax_agree,
        comparison.rows,
        if passed { "PASS" } else { "FAIL" }
    );
    if !passed && device.dtype == DType::F32 {
        bail!("{device} does not match the CPU on {}", dir.display());
    }
    Ok(())
}

/// Teacher-forced logits of every row of the sequences, then of a few decode steps through
/// the KV cache, flattened.
struct ParityLogits<'a> {
    model_dir: &'a Path,
    sequences: &'a [Vec<u32>],
}

impl BackendTask for ParityLogits<'_> {
    type Output = Result<Vec<f32>>;

    fn run<B: KernelBackend>(self, device: &B::Device) -> Self::Output {
        let model = LlamaModel::<B>::load(self.model_dir, device)?.no_grad();
        let vocab = model.config().vocab_size;
        let mut cache = model.new_kv_cache(self.sequences.len());
        let prefill = self
            .sequences
            .iter()
            .enumerate()
            .map(|(slot, tokens)| SequenceInput::new(slot, tokens.clone(), 0).with_all_logits())
            .collect();
        let mut logits = Vec::new();
        let mut batch = ForwardBatch::new(prefill);
        for step in 0..=DECODE_STEPS {
            let out = model.forward(&batch, &mut cache, &FeatureTap::None)?;
            let values = out.logits.into_data().convert::<f32>();
            logits.extend(
                values
                    .to_vec::<f32>()
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            );
            let decode = (0..self.sequences.len())
                .map(|slot| {
                    let token = ((slot * 31 + step * 17 + 3) % vocab) as u32;
                    SequenceInput::new(slot, vec![token], cache.len(slot))
                })
                .collect();
            batch = ForwardBatch::new(decode);
        }
        Ok(logits)
    }
}

/// How two sets of logits rows differ.
struct Comparison {
    rows: usize,
    max_abs: f32,
    /// Largest row difference over the row's largest magnitude (at least 1).
    max_relative: f32,
    argmax_agree: usize,
}

impl Comparison {
    fn of(expected: &[f32], actual: &[f32], vocab: usize) -> Self {
        let mut comparison = Comparison {
            rows: expected.len() / vocab,
            max_abs: 0.0,
            max_relative: 0.0,
            argmax_agree: 0,
        };
        for (want, got) in expected.chunks(vocab).zip(actual.chunks(vocab)) {
            let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            let diff = want
                .iter()
                .zip(got)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            comparison.max_abs = comparison.max_abs.max(diff);
            comparison.max_relative = comparison.max_relative.max(diff / scale);
            comparison.argmax_agree += usize::from(argmax(want) == argmax(got));
        }
        if expected.len() != actual.len() {
            comparison.argmax_agree = 0;
        }
        comparison
    }
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}
