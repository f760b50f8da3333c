//! Running cargo and the example binaries from xtask.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of xtask's manifest directory).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo binary that started xtask (falls back to `cargo` on PATH).
fn cargo_program() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// Runs `cargo <args>` in the workspace root and fails if it fails.
pub fn cargo(args: &[&str]) -> Result<()> {
    cargo_with_env(args, &[])
}

/// Runs `cargo <args>` in the workspace root with the extra environment variables `env`, and
/// fails if it fails.
pub fn cargo_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let status = Command::new(cargo_program())
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("could not start cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Builds `aquila-examples`' binaries `bins` in the release profile (Cargo's progress stays
/// visible); they land in `target/release/`.
pub fn build_release_examples(bins: &[&str]) -> Result<()> {
    let mut args = vec!["build", "--release", "-p", "aquila-examples"];
    for bin in bins {
        args.extend(["--bin", bin]);
    }
    cargo(&args)
}

/// How an example binary is built.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The dev profile: shares its build with the tests (dependencies are optimized there too).
    Dev,
    /// The release profile, for benchmarks.
    Release,
}

impl Profile {
    /// Cargo's name for the profile.
    fn name(self) -> &'static str {
        match self {
            Profile::Dev => "dev profile",
            Profile::Release => "release profile",
        }
    }
}

/// Builds and runs `aquila-examples`' binary `bin` with `args`. Cargo's own build progress stays
/// visible (a first build takes minutes), then the binary's output follows.
pub fn run_example(bin: &str, profile: Profile, args: &[String]) -> Result<()> {
    eprintln!("xtask: building and starting `{bin}` ({})", profile.name());
    let mut cargo_args = vec!["run", "-p", "aquila-examples", "--bin", bin];
    if profile == Profile::Release {
        cargo_args.push("--release");
    }
    if cfg_cuda_requested() {
        cargo_args.extend(["--features", "cuda"]);
    }
    cargo_args.push("--");
    cargo_args.extend(args.iter().map(String::as_str));
    cargo(&cargo_args)
}

/// `AQUILA_CUDA=1` builds the examples with the CUDA backend.
fn cfg_cuda_requested() -> bool {
    std::env::var("AQUILA_CUDA").is_ok_and(|v| v == "1")
}
