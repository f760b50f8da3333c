//! `cargo xtask bench peer`: Aquila against llama.cpp on the same model, formats and thread
//! count, measured alternately in the same run.
//!
//! llama.cpp comes from the `llama-cpp-python` source package on PyPI, which vendors it; the
//! tools are built once into `target/peer/` (`xtask/peer/build_llama_cpp.sh`). The shipped
//! SmolLM2 GGUF is converted with `llama-quantize` to each compared format, and then, round
//! after round, `llama-bench` and Aquila's `bench` measure prefill of 512 tokens and decode at
//! batch 1, each in a process of its own whose peak resident memory the kernel reports.
//! The K-quant files llama.cpp users run (Q4_K_M, Q6_K) are imported and generated from too.

use crate::cargo::{build_release_examples, workspace_root};
use crate::commands::{ensure_default_model, DEFAULT_MODEL_DIR};
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The shipped GGUF every format is converted from.
const SOURCE_GGUF: &str = "models/_dl/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Threads both engines run on.
const THREADS: usize = 2;

/// Prompt tokens of the prefill measurement.
const PREFILL_TOKENS: usize = 512;

/// Tokens of the decode measurement.
const DECODE_TOKENS: usize = 64;

/// The compared formats: Aquila's `--dtype` and llama-quantize's type name.
const FORMATS: [(&str, &str); 4] = [
    ("f32", "F32"),
    ("q8_0", "Q8_0"),
    ("bf16", "BF16"),
    ("q4_1", "Q4_1"),
];

/// K-quant formats imported and generated from (llama-quantize's type names).
const IMPORTED: [&str; 2] = ["Q4_K_M", "Q6_K"];

/// One engine's measurements of one format: its rates in each round and the peak resident
/// memory of its processes.
#[derive(Default, Clone)]
struct Measured {
    prefill: Vec<f64>,
    decode: Vec<f64>,
    peak_rss: u64,
}

impl Measured {
    fn add(&mut self, prefill: f64, decode: f64, peak_rss: u64) {
        self.prefill.push(prefill);
        self.decode.push(decode);
        self.peak_rss = self.peak_rss.max(peak_rss);
    }
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The median over the rounds of Aquila's rate over llama.cpp's in the same round: the two
/// run back to back, so a drift of the machine's speed between rounds (often 10 to 20% here)
/// moves both alike.
fn paired_ratio(aquila: &[f64], llama: &[f64]) -> f64 {
    let ratios: Vec<f64> = aquila.iter().zip(llama).map(|(a, l)| a / l).collect();
    median(&ratios)
}

/// `cargo xtask bench peer [--rounds N]`.
pub fn bench_peer(args: &[String]) -> Result<()> {
    let rounds = parse_rounds(args)?;
    ensure_default_model()?;
    let root = workspace_root();
    let cache = root.join("target/peer");
    let tools = build_llama_cpp(&root, &cache)?;
    build_release_examples(&["bench", "import-model", "generate"])?;
    let bin = root.join("target/release");
    let source = root.join(SOURCE_GGUF);
    if !source.is_file() {
        bail!(
            "{} is missing: run `cargo xtask import-model` first",
            source.display()
        );
    }
    let models = cache.join("models");
    std::fs::create_dir_all(&models)?;
    let ggufs: Vec<PathBuf> = FORMATS
        .iter()
        .map(|(name, kind)| quantize(&tools, &source, &models, name, kind))
        .collect::<Result<_>>()?;

    for kind in IMPORTED {
        let from = &ggufs[0];
        let gguf = quantize(&tools, from, &models, &kind.to_lowercase(), kind)?;
        let generated = import_and_generate(&bin, &gguf, &cache.join(kind.to_lowercase()))?;
        println!(
            "{} import: ok, {generated} tokens generated",
            kind.to_lowercase()
        );
    }

    let mut aquila = vec![Measured::default(); FORMATS.len()];
    let mut llama = vec![Measured::default(); FORMATS.len()];
    for round in 1..=rounds {
        for (i, (name, _)) in FORMATS.iter().enumerate() {
            eprintln!("xtask: round {round}/{rounds}, {name}: llama.cpp, then aquila");
            let (prefill, decode, rss) = run_llama_bench(&tools, &ggufs[i])?;
            llama[i].add(prefill, decode, rss);
            let (prefill, decode, rss) = run_aquila(&bin, &root, name)?;
            aquila[i].add(prefill, decode, rss);
        }
    }
    print_table(&aquila, &llama, &ggufs, rounds);
    Ok(())
}

fn parse_rounds(args: &[String]) -> Result<usize> {
    match args {
        [] => Ok(5),
        [flag, n] if flag == "--rounds" => match n.parse() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("--rounds takes a positive number, got `{n}`"),
        },
        _ => bail!("usage: cargo xtask bench peer [-- --rounds N]"),
    }
}

/// Builds (once) llama.cpp's tools and returns their directory.
fn build_llama_cpp(root: &Path, cache: &Path) -> Result<PathBuf> {
    let script = root.join("xtask/peer/build_llama_cpp.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(cache)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "building llama.cpp failed ({}); see the output above",
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout.lines().last().unwrap_or_default().trim();
    Ok(PathBuf::from(dir))
}

/// `from` converted by llama-quantize to `kind` in `dir` (once).
fn quantize(tools: &Path, from: &Path, dir: &Path, name: &str, kind: &str) -> Result<PathBuf> {
    let out = dir.join(format!("smollm2-135m-instruct-{name}.gguf"));
    if out.is_file() {
        return Ok(out);
    }
    let partial = out.with_extension("partial");
    let status = Command::new(tools.join("llama-quantize"))
        .arg("--allow-requantize")
        .arg(from)
        .arg(&partial)
        .arg(kind)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("could not run llama-quantize")?;
    if !status.success() {
        bail!("llama-quantize to {kind} failed ({status})");
    }
    std::fs::rename(&partial, &out)?;
    Ok(out)
}

/// Imports `gguf` into `dir` with Aquila's importer and generates from it; returns the
/// number of tokens generated.
fn import_and_generate(bin: &Path, gguf: &Path, dir: &Path) -> Result<usize> {
    if !dir.join("config.json").is_file() {
        let status = Command::new(bin.join("import-model"))
            .arg("--gguf")
            .arg(gguf)
            .arg("--out")
            .arg(dir)
            .stdout(Stdio::null())
            .status()
            .context("could not run import-model")?;
        if !status.success() {
            bail!("importing {} failed ({status})", gguf.display());
        }
    }
    let output = Command::new(bin.join("generate"))
        .arg("--model")
        .arg(dir)
        .args(["--prompt", "The capital of France is", "--max-tokens", "16"])
        .args(["--ignore-eos"])
        .stderr(Stdio::null())
        .output()
        .context("could not run generate")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!("generating from {} failed: {stdout}", dir.display());
    }
    // "1 requests, 6 prompt tokens, 16 generated tokens in ..."
    stdout
        .lines()
        .find_map(|line| {
            let (_, rest) = line.split_once(" prompt tokens, ")?;
            rest.split_once(" generated tokens")?.0.parse().ok()
        })
        .with_context(|| format!("no token count in generate's output: {stdout}"))
}

/// Runs `command`, returning its standard output and its peak resident memory in bytes.
fn run_measured(command: &mut Command) -> Result<(String, u64)> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("could not start {command:?}"))?;
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout)?;
    }
    let (status, max_rss_kib) = wait_with_rusage(child.id())?;
    if status != 0 {
        bail!("{command:?} failed (wait status {status}): {stdout}");
    }
    Ok((stdout, max_rss_kib * 1024))
}

/// Waits for process `pid`; returns its wait status and its peak resident memory in KiB.
fn wait_with_rusage(pid: u32) -> Result<(i32, u64)> {
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; both pointers are valid.
    let waited = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    if waited < 0 {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    Ok((status, usage.ru_maxrss.max(0) as u64))
}

/// llama-bench's best prefill and decode rates on `gguf`, and its peak memory.
fn run_llama_bench(tools: &Path, gguf: &Path) -> Result<(f64, f64, u64)> {
    let (stdout, rss) = run_measured(
        Command::new(tools.join("llama-bench"))
            .arg("-m")
            .arg(gguf)
            .args(["-t", &THREADS.to_string()])
            .args(["-p", &PREFILL_TOKENS.to_string()])
            .args(["-n", &DECODE_TOKENS.to_string()])
            .args(["-r", "1", "-o", "json"]),
    )?;
    let results: serde_json::Value =
        serde_json::from_str(&stdout).context("llama-bench's JSON output")?;
    let rate = |prompt: usize, generated: usize| -> Result<f64> {
        results
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["n_prompt"] == prompt && r["n_gen"] == generated)
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| format!("no pp{prompt}/tg{generated} result from llama-bench"))
    };
    Ok((rate(PREFILL_TOKENS, 0)?, rate(0, DECODE_TOKENS)?, rss))
}

/// Aquila's `bench` (prefill and batch-1 decode) in `format`, and its peak memory.
fn run_aquila(bin: &Path, root: &Path, format: &str) -> Result<(f64, f64, u64)> {
    let (stdout, rss) = run_measured(
        Command::new(bin.join("bench"))
            .arg("--model")
            .arg(root.join(DEFAULT_MODEL_DIR))
            .args(["--device", "cpu", "--dtype", format])
            .args(["--prefill-tokens", &PREFILL_TOKENS.to_string()])
            .args(["--decode-tokens", &DECODE_TOKENS.to_string()])
            .args(["--repeats", "1", "--batch1-only", "--json"])
            .env("RAYON_NUM_THREADS", THREADS.to_string()),
    )?;
    let rates: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("bench's JSON output: {stdout}"))?;
    let get = |key: &str| {
        rates[key]
            .as_f64()
            .with_context(|| format!("no {key} in bench's output"))
    };
    Ok((
        get("prefill_tokens_per_s")?,
        get("decode_tokens_per_s")?,
        rss,
    ))
}

fn print_table(aquila: &[Measured], llama: &[Measured], ggufs: &[PathBuf], rounds: usize) {
    const MB: f64 = 1e6;
    println!(
        "aquila / llama.cpp, both on {THREADS} threads, measured alternately in this run \
         (ratios: the median over {rounds} rounds of each round's ratio; rates: each engine's \
         median); prefill of {PREFILL_TOKENS} tokens, decode of {DECODE_TOKENS} tokens at \
         batch 1; peak resident memory of each engine's process"
    );
    println!(
        "{:<6} {:>12} {:>12} {:>26} {:>26} {:>12} {:>12} {:>10}",
        "format",
        "prefill-512",
        "decode-b1",
        "prefill tok/s (aq / l.c)",
        "decode tok/s (aq / l.c)",
        "aquila RSS",
        "l.cpp RSS",
        "GGUF"
    );
    for (i, (name, _)) in FORMATS.iter().enumerate() {
        let (a, l) = (&aquila[i], &llama[i]);
        let gguf = std::fs::metadata(&ggufs[i]).map_or(0, |m| m.len());
        println!(
            "{:<6} {:>11.2}x {:>11.2}x {:>26} {:>26} {:>9.0} MB {:>9.0} MB {:>7.0} MB",
            name,
            paired_ratio(&a.prefill, &l.prefill),
            paired_ratio(&a.decode, &l.decode),
            format!("{:.1} / {:.1}", median(&a.prefill), median(&l.prefill)),
            format!("{:.1} / {:.1}", median(&a.decode), median(&l.decode)),
            a.peak_rss as f64 / MB,
            l.peak_rss as f64 / MB,
            gguf as f64 / MB,
        );
    }
    for (i, (name, _)) in FORMATS.iter().enumerate() {
        let rounds = |a: &[f64], l: &[f64]| {
            let each: Vec<String> = a
                .iter()
                .zip(l)
                .map(|(a, l)| format!("{:.2}x", a / l))
                .collect();
            each.join(" ")
        };
        println!(
            "{name} rounds: prefill {}; decode {}",
            rounds(&aquila[i].prefill, &llama[i].prefill),
            rounds(&aquila[i].decode, &llama[i].decode)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_median_of_the_rounds_ratios() {
        // The machine ran twice as fast in the second round: both engines moved alike, and
        // the paired ratio sees 1.1x in every round.
        let aquila = [11.0, 22.0, 11.0];
        let llama = [10.0, 20.0, 10.0];
        assert!((paired_ratio(&aquila, &llama) - 1.1).abs() < 1e-12);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
