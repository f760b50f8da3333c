//! # aquila-examples
//!
//! Runnable programs that show Aquila end to end (`eagle`, `serve`, `generate`, `import-model`,
//! `bench`, `bench-spec`, `train-eagle`, `gpu-check`), and the small pieces they share: `--device`
//! and `--dtype` ([`device`]), reading prompt files, the built-in prompt set, locating the
//! workspace's model directory, the speculative-decoding report computed from a metrics
//! snapshot, engines timed against each other step by step ([`interleaved`]), and the median
//! of repeated timings ([`stats`]).
#![warn(missing_docs)]

pub mod corpus;
pub mod device;
pub mod distill;
pub mod follow_ups;
pub mod heads;
pub mod interleaved;
pub mod manifest;
pub mod paths;
pub mod progress;
pub mod prompts;
pub mod report;
pub mod self_instruct;
pub mod serving_options;
pub mod speculative_options;
pub mod stats;
pub mod train_prompts;
pub mod training;
pub mod validation_sets;

/// Initializes `tracing` output on stderr, `warn` unless `RUST_LOG` says otherwise.
pub fn init_tracing() {
    init_tracing_at("warn");
}

/// Initializes `tracing` output on stderr at `level` unless `RUST_LOG` says otherwise.
pub fn init_tracing_at(level: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
}
