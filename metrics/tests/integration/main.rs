//! aquila-metrics' integration tests, one binary: the recorder, its readers and its exposition.
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

#[path = "../../examples/common/mod.rs"]
mod common;

mod concurrency;
mod http_endpoint;
mod isolation;
mod log_lines;
mod promtool;
mod readme_families;
mod spec_decode_metrics;
mod step_times;
mod vllm_reader_port;
