//! `cargo xtask dynamo-worker` and `cargo xtask scale-out-check`: Aquila workers behind NVIDIA
//! Dynamo. The worker is a crate of its own (`examples/dynamo-worker`, outside the workspace:
//! Dynamo pins tokio, axum and cudarc to versions the workspace does not share), built here
//! from its directory so that its `.cargo/config.toml` applies.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cargo::{build_release_examples, workspace_root};
use crate::commands::ensure_default_model;

/// The worker crate's directory, relative to the workspace root.
const WORKER_DIR: &str = "examples/dynamo-worker";
/// The virtual environment holding Dynamo's frontend and the `openai` client.
const VENV_DIR: &str = "target/dynamo-venv";
/// Dynamo's Python packages, at the version of the Rust crates the worker is built on.
const DYNAMO_PACKAGES: [&str; 2] = ["ai-dynamo==1.6.1", "ai-dynamo-runtime==1.6.1"];
/// What `ai-dynamo` 1.6.1 requires to run its frontend. It is installed without its declared
/// requirements because one of them (`aisimulate`, a planner simulator) is only published on
/// NVIDIA's own package index, and the frontend does not import it.
const FRONTEND_REQUIREMENTS: [&str; 14] = [
    "aiohttp>=3.14.3,<4",
    "certifi>=2026.10.19",
    "kubernetes>=32.0.1,<33",
    "msgspec>=0.19.0",
    "prometheus-client>=0.23.1,<1",
    "pyzmq>=26.0.0",
    "redis>=6.2.0,<9",
    "tqdm>=4.0.0",
    "transformers>=4.56.0",
    "typing-extensions>=4.10.0",
    "zstandard>=0.23.0,<1",
    "pydantic>=2.10.6,<=2.13.5",
    "uvloop>=0.21.0",
    "openai>=1.0",
];

/// `cargo xtask dynamo-worker -- ARGS`: builds the worker (release) and runs it with `args`.
pub fn dynamo_worker(args: &[String]) -> Result<()> {
    ensure_default_model()?;
    let worker = build_worker()?;
    let status = Command::new(&worker)
        .args(args)
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("could not start {}", worker.display()))?;
    if !status.success() {
        bail!("the worker failed ({status})");
    }
    Ok(())
}

/// `cargo xtask scale-out-check`: builds the worker and the `generate` example, makes the
/// frontend's virtual environment once, and runs `xtask/scale_out_check.py` in it.
pub fn scale_out_check() -> Result<()> {
    ensure_default_model()?;
    let root = workspace_root();
    let worker = build_worker()?;
    build_release_examples(&["generate"])?;
    let python = frontend_environment(&root)?;
    let status = Command::new(&python)
        .arg(root.join("xtask/scale_out_check.py"))
        .arg("--worker")
        .arg(&worker)
        .arg("--generate")
        .arg(root.join("target/release/generate"))
        .arg("--model")
        .arg(root.join(crate::commands::DEFAULT_MODEL_DIR))
        .arg("--log-dir")
        .arg(root.join("target/scale-out-logs"))
        .current_dir(&root)
        .status()
        .context("could not start the scale-out check")?;
    if !status.success() {
        bail!("the scale-out check failed ({status}); logs under target/scale-out-logs");
    }
    Ok(())
}

/// Builds the worker crate in release mode (Cargo's progress stays visible); returns the
/// binary's path.
fn build_worker() -> Result<PathBuf> {
    let root = workspace_root();
    let dir = root.join(WORKER_DIR);
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build.args(["build", "--release"]).current_dir(&dir);
    if std::env::var_os(SWAGGER_UI_URL_VAR).is_none() {
        let zip = swagger_ui_zip(&root)?;
        build.env(SWAGGER_UI_URL_VAR, format!("file://{}", zip.display()));
    }
    eprintln!("xtask: building the Dynamo worker (the first build compiles Dynamo: long)");
    let status = build.status().context("could not start cargo")?;
    if !status.success() {
        bail!(
            "building {WORKER_DIR} failed ({status}); it needs protoc and libclang \
             (`apt-get install protobuf-compiler libclang-dev`)"
        );
    }
    Ok(dir.join("target/release/aquila-dynamo-worker"))
}

/// The variable through which `utoipa-swagger-ui` (a dependency of `dynamo-llm`'s HTTP
/// service) takes the Swagger UI archive its build script would otherwise download from GitHub.
const SWAGGER_UI_URL_VAR: &str = "SWAGGER_UI_DOWNLOAD_URL";
/// The Swagger UI release `utoipa-swagger-ui` 9.0.2 embeds.
const SWAGGER_UI_VERSION: &str = "5.17.14";

/// The Swagger UI archive in the layout of a GitHub release (`swagger-ui-V/dist/...`), made
/// once under `target/swagger-ui/` from the npm registry's `swagger-ui-dist` package of the
/// same release, which holds the same `dist` files.
fn swagger_ui_zip(root: &Path) -> Result<PathBuf> {
    let dir = root.join("target/swagger-ui");
    let zip = dir.join(format!("swagger-ui-{SWAGGER_UI_VERSION}.zip"));
    if zip.exists() {
        return Ok(zip);
    }
    std::fs::create_dir_all(&dir).context("creating target/swagger-ui")?;
    eprintln!("xtask: fetching swagger-ui-dist@{SWAGGER_UI_VERSION} from the npm registry");
    run(Command::new("npm")
        .args(["pack", &format!("swagger-ui-dist@{SWAGGER_UI_VERSION}")])
        .current_dir(&dir))?;
    let package = format!("swagger-ui-dist-{SWAGGER_UI_VERSION}.tgz");
    run(Command::new("tar")
        .args(["xzf", &package])
        .current_dir(&dir))?;
    let partial = zip.with_extension("zip.part");
    let script = format!(
        "import os, zipfile\n\
         top = 'swagger-ui-{SWAGGER_UI_VERSION}'\n\
         with zipfile.ZipFile('{partial}', 'w', zipfile.ZIP_DEFLATED) as z:\n\
         \x20   z.writestr(top + '/', '')\n\
         \x20   for name in sorted(os.listdir('package')):\n\
         \x20       if os.path.isfile(os.path.join('package', name)):\n\
         \x20           z.write(os.path.join('package', name), top + '/dist/' + name)\n",
        partial = partial.display()
    );
    run(Command::new("python3")
        .args(["-c", &script])
        .current_dir(&dir))?;
    std::fs::rename(&partial, &zip).context("storing the Swagger UI archive")?;
    Ok(zip)
}

/// The virtual environment's Python, after making the environment if it is not complete.
fn frontend_environment(root: &Path) -> Result<PathBuf> {
    let venv = root.join(VENV_DIR);
    let python = venv.join("bin/python");
    let ready = venv.join(".aquila-ready");
    if ready.exists() {
        return Ok(python);
    }
    eprintln!("xtask: making {VENV_DIR} (Dynamo's frontend and the openai client, from PyPI)");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    let pip = |args: &[&str]| {
        run(Command::new(&python)
            .args(["-m", "pip", "install"])
            .args(args))
    };
    pip(&["--upgrade", "pip"])?;
    let mut dynamo = vec!["--no-deps"];
    dynamo.extend(DYNAMO_PACKAGES);
    pip(&dynamo)?;
    pip(&FRONTEND_REQUIREMENTS)?;
    std::fs::write(&ready, "").context("marking the virtual environment ready")?;
    Ok(python)
}

/// Runs `command`, failing if it fails.
fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
