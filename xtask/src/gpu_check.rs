//! `cargo xtask gpu-check`: builds the CUDA binaries here and packs them with what a GPU
//! machine without a Rust toolchain or network needs to check the CUDA path (the scripts in
//! `xtask/gpu-check/`, the SmolLM2 tokenizer), then runs the check unless `--dry-run`.

use crate::cargo::{cargo, workspace_root};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Cargo profile of the bundle's binaries (release, without debug info, stripped).
const PROFILE: &str = "gpu-check";
/// The binaries the check runs.
const BINARIES: [&str; 3] = ["gpu-check", "bench", "bench-spec"];
/// Files of the default model the random models borrow (their tokenizer).
const TOKENIZER_FILES: [&str; 2] = ["tokenizer.json", "tokenizer_config.json"];
/// The bundle must fit the device machine's transfer limit.
const MAX_BUNDLE_BYTES: u64 = 64 << 20;

/// Builds and packs the bundle into `target/gpu-check-bundle/`; runs it unless `dry_run`.
pub fn gpu_check(dry_run: bool) -> Result<()> {
    let root = workspace_root();
    let tokenizer_source = root.join(crate::commands::DEFAULT_MODEL_DIR);
    crate::commands::ensure_default_model()?;

    let started = Instant::now();
    let mut build = vec!["build", "--profile", PROFILE, "-p", "aquila-examples"];
    build.extend(["--features", "cuda"]);
    for bin in BINARIES {
        build.extend(["--bin", bin]);
    }
    cargo(&build)?;
    println!(
        "xtask: CUDA binaries built in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let bundle = root.join("target").join("gpu-check-bundle");
    pack(&root, &tokenizer_source, &bundle)?;
    let size = dir_size(&bundle)?;
    println!(
        "xtask: bundle {} is {:.1} MiB (limit {} MiB)",
        bundle.display(),
        size as f64 / (1 << 20) as f64,
        MAX_BUNDLE_BYTES >> 20
    );
    if size > MAX_BUNDLE_BYTES {
        bail!("the bundle is larger than {} MiB", MAX_BUNDLE_BYTES >> 20);
    }
    if dry_run {
        println!(
            "xtask: dry run; on a GPU machine run {}",
            bundle.join("run.sh").display()
        );
        return Ok(());
    }
    let status = Command::new(bundle.join("run.sh"))
        .status()
        .context("starting the bundle's run.sh")?;
    if !status.success() {
        bail!("the GPU check failed ({status})");
    }
    Ok(())
}

/// Fills `bundle` (emptied first): `bin/` with the binaries, the scripts, `tokenizer/`.
fn pack(root: &Path, tokenizer_source: &Path, bundle: &Path) -> Result<()> {
    if bundle.exists() {
        std::fs::remove_dir_all(bundle)
            .with_context(|| format!("emptying {}", bundle.display()))?;
    }
    let built = root.join("target").join(PROFILE);
    for bin in BINARIES {
        copy(&built.join(bin), &bundle.join("bin").join(bin))?;
    }
    let scripts = root.join("xtask").join("gpu-check");
    for script in ["run.sh", "random_model.py"] {
        copy(&scripts.join(script), &bundle.join(script))?;
    }
    for file in TOKENIZER_FILES {
        copy(
            &tokenizer_source.join(file),
            &bundle.join("tokenizer").join(file),
        )?;
    }
    Ok(())
}

/// Copies `from` to `to` (permissions included), creating `to`'s directory.
fn copy(from: &Path, to: &Path) -> Result<()> {
    let dir = to.parent().map(PathBuf::from).unwrap_or_default();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Bytes of the files under `dir`.
fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
