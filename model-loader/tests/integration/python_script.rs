//! Runs one of the crate's Python reference scripts (`model-loader/scripts/`), which makes its
//! own virtual environment under the target directory on first use.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `scripts/{script}` with `--venv target/{venv} --out target/{out}` and `args`; returns
/// the output folder. Fails the test, saying what is needed, when Python cannot run it.
pub fn run_reference_script(script: &str, venv: &str, out: &str, args: &[&str]) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = target.join(out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    let python = std::env::var("AQUILA_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .arg(&script)
        .arg("--venv")
        .arg(target.join(venv))
        .arg("--out")
        .arg(&out)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {python} ({e}): this test needs Python 3 with venv and pip \
                 (set AQUILA_PYTHON to choose the interpreter)"
            )
        });
    assert!(
        output.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    out
}
