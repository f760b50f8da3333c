//! Feeds a simulated serving workload (two engines, several requests each, k = 3 drafts) into a
//! recorder and prints the Prometheus exposition text to stdout.
//!
//! `cargo run -p aquila-metrics --example exposition [-- --vllm]`: `--vllm` uses vLLM's names.

mod common;

use aquila_metrics::{MetricsError, Namespace, Recorder, RecorderConfig};
use common::Workload;

fn main() -> Result<(), MetricsError> {
    let namespace = if std::env::args().any(|arg| arg == "--vllm") {
        Namespace::Vllm
    } else {
        Namespace::Aquila
    };
    let workload = Workload::default();
    let config = RecorderConfig::builder("SmolLM2-135M-Instruct")
        .namespace(namespace)
        .engines(["0", "1"])
        .num_speculative_tokens(workload.k)
        .build()?;
    let recorder = Recorder::new(config)?;
    workload.run(&recorder);
    print!("{}", recorder.exposition_text()?);
    Ok(())
}
