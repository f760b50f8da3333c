//! Feeds a simulated serving workload (two engines, k = 3 drafts) into a recorder, then prints the
//! typed snapshot of the interval as JSON, the speculative-decoding summary (total and per
//! engine), and the periodic log lines.
//!
//! `cargo run -p aquila-metrics --example snapshot`

mod common;

use std::time::Duration;

use aquila_metrics::{Recorder, RecorderConfig, SpecDecodeSummary, StatsLogger};
use common::Workload;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let workload = Workload::default();
    let config = RecorderConfig::builder("SmolLM2-135M-Instruct")
        .engines(["0", "1"])
        .num_speculative_tokens(workload.k)
        .build()?;
    let recorder = Recorder::new(config)?;
    let mut logger = StatsLogger::for_recorder(&recorder, Duration::from_millis(100))?;

    let before = recorder.snapshot();
    let totals = workload.run(&recorder);
    let mut interval = recorder.snapshot().delta(&before)?;
    // The simulation runs far faster than real time: state throughputs over simulated time.
    interval.captured_at = Some(totals.simulated_time);
    interval.window = Some(totals.simulated_time);

    println!("{}", serde_json::to_string_pretty(&interval)?);
    let namespace = recorder.namespace();
    print_summary(
        "all engines",
        &SpecDecodeSummary::from_snapshot(&interval, namespace),
    );
    for (engine, summary) in SpecDecodeSummary::per_engine(&interval, namespace) {
        print_summary(&format!("engine {engine}"), &summary);
    }
    println!(
        "periodic log lines over {:.2} s of simulated time:",
        totals.simulated_time.as_secs_f64()
    );
    logger.observe(interval)?;
    Ok(())
}

fn print_summary(scope: &str, summary: &SpecDecodeSummary) {
    let rates: Vec<String> = summary
        .per_position_acceptance_rates()
        .iter()
        .map(|rate| format!("{rate:.3}"))
        .collect();
    println!(
        "{scope}: drafts {}, draft tokens {}, accepted {}, acceptance rate {:.3}, \
         mean acceptance length {:.3}, per-position [{}], accepted throughput {:.1} tokens/s",
        summary.drafts,
        summary.draft_tokens,
        summary.accepted_tokens,
        summary.acceptance_rate(),
        summary.mean_acceptance_length(),
        rates.join(", "),
        summary.accepted_throughput().unwrap_or(0.0),
    );
}
