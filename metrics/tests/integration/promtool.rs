//! The exposition of a realistic workload passes `promtool check metrics` (with no lint problem in
//! the default namespace). Needs `promtool` on PATH (Debian package `prometheus`); set
//! `AQUILA_SKIP_PROMTOOL=1` to skip.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use aquila_metrics::{Namespace, Recorder, RecorderConfig};
use common::Workload;

/// Runs `promtool check metrics` on `text`; returns its exit success and its output lines.
/// `None` when skipping was requested.
fn promtool_check(text: &str) -> Option<(bool, Vec<String>)> {
    if std::env::var_os("AQUILA_SKIP_PROMTOOL").is_some_and(|value| value == "1") {
        eprintln!("note: AQUILA_SKIP_PROMTOOL=1, skipping the promtool check");
        return None;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run promtool ({error}). Install it with \
                 `apt-get install -y --no-install-recommends prometheus`, \
                 or set AQUILA_SKIP_PROMTOOL=1 to skip this test"
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&output.stderr).lines())
        .map(str::to_owned)
        .filter(|line| !line.trim().is_empty())
        .collect();
    Some((output.status.success(), lines))
}

fn exposition(namespace: Namespace) -> String {
    let workload = Workload::default();
    let config = RecorderConfig::builder("SmolLM2-135M-Instruct")
        .namespace(namespace)
        .engines(["0", "1", "2"])
        .num_speculative_tokens(workload.k)
        .build()
        .unwrap();
    let recorder = Recorder::new(config).unwrap();
    workload.run(&recorder);
    recorder.exposition_text().unwrap()
}

#[test]
fn default_namespace_passes_promtool_without_lint_problems() {
    let text = exposition(Namespace::Aquila);
    let Some((success, lines)) = promtool_check(&text) else {
        return;
    };
    assert!(
        success && lines.is_empty(),
        "promtool reported:\n{}",
        lines.join("\n")
    );
}

#[test]
fn vllm_namespace_has_only_the_lint_problems_of_vllm_names() {
    // vLLM's names use `:` and a `_total` histogram; the text must still be valid, and those two
    // must be the only complaints.
    let text = exposition(Namespace::Vllm);
    let Some((_, lines)) = promtool_check(&text) else {
        return;
    };
    assert!(
        !lines.is_empty(),
        "promtool found none of the expected lint problems"
    );
    for line in &lines {
        let colon = line.ends_with("metric names should not contain ':'");
        let total = line
            == "vllm:iteration_tokens_total non-counter metrics should not have \"_total\" suffix";
        assert!(colon || total, "unexpected promtool output: {line}");
    }
}
