//! The xtask commands.

use crate::cargo::{cargo, cargo_with_env, run_example, workspace_root, Profile};
use anyhow::{bail, Result};

/// Directory of the default target model, relative to the workspace root.
pub const DEFAULT_MODEL_DIR: &str = "models/smollm2-135m-instruct";

/// Imports the default model unless it is already there (the importer is idempotent too, but
/// skipping it here saves building and starting it).
pub fn ensure_default_model() -> Result<()> {
    let marker = workspace_root().join(DEFAULT_MODEL_DIR).join("config.json");
    if marker.exists() {
        return Ok(());
    }
    eprintln!("xtask: {DEFAULT_MODEL_DIR} is missing; importing it first");
    run_example("import-model", Profile::Dev, &[])
}

/// `cargo xtask eagle`.
pub fn eagle(args: &[String]) -> Result<()> {
    ensure_default_model()?;
    run_example("eagle", Profile::Dev, args)
}

/// `cargo xtask serve`.
pub fn serve(args: &[String]) -> Result<()> {
    ensure_default_model()?;
    run_example("serve", Profile::Dev, args)
}

/// `cargo xtask test`: exactly what CI runs.
pub fn test(skip_cuda_check: bool) -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo_with_env(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    ensure_default_model()?;
    cargo(&["test", "--workspace", "--no-fail-fast"])?;
    if !skip_cuda_check {
        cargo(&["check", "-p", "aquila-examples", "--features", "cuda"])?;
    }
    Ok(())
}

/// `cargo xtask import-model`.
pub fn import_model(args: &[String]) -> Result<()> {
    run_example("import-model", Profile::Dev, args)
}

/// `cargo xtask tokenize`.
pub fn tokenize(args: &[String]) -> Result<()> {
    run_example("tokenize", Profile::Dev, args)
}

/// `cargo xtask generate`.
pub fn generate(args: &[String]) -> Result<()> {
    ensure_default_model()?;
    run_example("generate", Profile::Dev, args)
}

/// `cargo xtask bench <which>`.
pub fn bench(which: &str, args: &[String]) -> Result<()> {
    match which {
        "engine" => {
            ensure_default_model()?;
            run_example("bench", Profile::Release, args)
        }
        "peer" => crate::peer::bench_peer(args),
        "spec" => {
            ensure_default_model()?;
            run_example("bench-spec", Profile::Release, args)
        }
        "forward" => {
            ensure_default_model()?;
            let mut cargo_args = vec![
                "run",
                "--release",
                "-p",
                "aquila-model-loader",
                "--example",
                "bench_forward",
                "--",
            ];
            let default_model = workspace_root().join(DEFAULT_MODEL_DIR);
            let default_model = default_model.to_string_lossy();
            if !args
                .iter()
                .any(|a| a == "--model" || a.starts_with("--model="))
            {
                cargo_args.extend(["--model", default_model.as_ref()]);
            }
            cargo_args.extend(args.iter().map(String::as_str));
            cargo(&cargo_args)
        }
        "metrics" => cargo(&["bench", "-p", "aquila-metrics"]),
        "rejection" => cargo(&[
            "bench",
            "-p",
            "aquila-spec-decode",
            "--no-default-features",
            "--bench",
            "rejection",
        ]),
        other => {
            bail!("unknown benchmark `{other}`: choose engine, peer, forward, spec, metrics or rejection")
        }
    }
}

/// `cargo xtask train-eagle`: self-distillation data, training and export of a draft head.
pub fn train_eagle(args: &[String]) -> Result<()> {
    ensure_default_model()?;
    run_example("train-eagle", Profile::Dev, args)
}
