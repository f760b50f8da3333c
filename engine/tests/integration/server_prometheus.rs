//! A real Prometheus server scrapes the engine's `/metrics` while requests run; its queries for
//! the speculative counters return the engine snapshot's values. The shipped scrape config
//! passes `promtool check config`.
//!
//! Needs `prometheus` and `promtool` (Debian package `prometheus`, which `.ci/run` installs);
//! the test installs the package with apt-get when they are missing and fails saying so when it
//! cannot.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aquila_engine::{AsyncLlmConfig, SpeculativeConfig};
use aquila_metrics::{Family, Namespace};
use serde_json::json;

use crate::common::http::{get, post};
use crate::common::server::{counter, TestServer};
use crate::common::spec::with_speculative;
use crate::common::{config, tiny_model, PROMPTS};
use crate::server_dashboard::deploy_dir;

/// How long the clients keep requests running while Prometheus scrapes.
const LOAD_TIME: Duration = Duration::from_secs(4);

/// The path of `program`, installing the Debian package `prometheus` when it is missing.
fn prometheus_tool(program: &str) -> PathBuf {
    let find = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|path| path.is_file())
        })
    };
    if let Some(path) = find() {
        return path;
    }
    eprintln!("{program} is missing: installing the Debian package prometheus");
    let installed = Command::new("sh")
        .args([
            "-c",
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
             --no-install-recommends prometheus",
        ])
        .status();
    find().unwrap_or_else(|| {
        panic!(
            "{program} is missing and installing it failed ({installed:?}): run `apt-get install \
             prometheus` (as root)"
        )
    })
}

/// A Prometheus server process, killed on drop.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second, with its data in `dir`.
    fn start(target: &str, dir: &Path) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: aquila\n    \
                 static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus_tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        Self { child, addr }
    }

    /// The value of the instant query `query` (one series), if Prometheus answers one.
    fn query(&self, query: &str) -> Option<f64> {
        let addr = self.addr.parse().unwrap();
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        // Not listening yet: no answer (the HTTP helper panics on a refused connection).
        std::net::TcpStream::connect(addr).ok()?;
        let response = get(addr, &format!("/api/v1/query?query={encoded}"));
        let json: serde_json::Value = serde_json::from_str(&response.body).ok()?;
        json["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|value| value.parse().ok())
    }

    /// Waits until `query` returns `expected`; panics with the last value after `timeout`.
    fn wait_for(&self, query: &str, expected: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.query(query);
            if value == Some(expected) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus answered {value:?} to {query}, the engine snapshot says {expected}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_shipped_scrape_config_is_valid() {
    let config = deploy_dir().join("prometheus/prometheus.yml");
    let output = Command::new(prometheus_tool("promtool"))
        .args(["check", "config"])
        .arg(&config)
        .output()
        .expect("running promtool");
    assert!(
        output.status.success(),
        "promtool check config failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn prometheus_scrapes_the_speculative_counters_the_engine_counts() {
    let model = tiny_model();
    let spec = SpeculativeConfig::ngram(3);
    let server = TestServer::start(
        with_speculative(config(model.path()), spec),
        AsyncLlmConfig::default(),
    );
    let data = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(&server.addr().to_string(), data.path());
    prometheus.wait_for("up{job=\"aquila\"}", 1.0, Duration::from_secs(60));

    // Once Prometheus scrapes, clients keep requests running for a few scrapes.
    let addr = server.addr();
    let clients: Vec<_> = (0..4)
        .map(|client| {
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut requests = 0;
                while start.elapsed() < LOAD_TIME {
                    let body = json!({"prompt": PROMPTS[(client + requests) % PROMPTS.len()],
                                      "max_tokens": 48, "ignore_eos": true, "temperature": 0});
                    let response = post(addr, "/v1/completions", &body);
                    assert_eq!(response.status, 200, "{}", response.body);
                    requests += 1;
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("client");
    }
    server.wait_until_idle(Duration::from_secs(30));

    let snapshot = server.engine.get_metrics();
    let drafts = counter(&snapshot, Family::SpecDecodeNumDrafts);
    assert!(drafts > 0, "n-gram drafting made no drafts");
    let timeout = Duration::from_secs(30);
    for family in [
        Family::SpecDecodeNumDrafts,
        Family::SpecDecodeNumDraftTokens,
        Family::SpecDecodeNumAcceptedTokens,
        Family::GenerationTokens,
    ] {
        let query = format!("sum({})", family.exposition_name(Namespace::Aquila));
        prometheus.wait_for(&query, counter(&snapshot, family) as f64, timeout);
    }
    let per_position = snapshot
        .vector_total(&Family::SpecDecodeNumAcceptedTokensPerPos.name(Namespace::Aquila))
        .unwrap();
    let query = "sum(aquila_spec_decode_num_accepted_tokens_per_pos_total)";
    prometheus.wait_for(query, per_position.iter().sum::<u64>() as f64, timeout);
    // Some scrape saw requests running.
    prometheus.wait_for(
        "max(max_over_time(aquila_num_requests_running[1m])) > bool 0",
        1.0,
        timeout,
    );
}
