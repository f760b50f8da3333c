//! Servers for the server tests: an engine front and HTTP server on a free loopback port, and
//! readers of the engine's metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aquila_engine::server::{BackgroundServer, ServerConfig};
use aquila_engine::{AsyncLlm, AsyncLlmConfig, EngineConfig, Llm};
use aquila_metrics::{Family, Metric, Namespace, Snapshot};

/// An engine front and its HTTP server.
pub struct TestServer {
    /// The engine front (for metrics snapshots).
    pub engine: Arc<AsyncLlm>,
    /// The HTTP server.
    pub server: BackgroundServer,
}

impl TestServer {
    /// Serves an engine with `config` on a free loopback port.
    pub fn start(config: EngineConfig, front: AsyncLlmConfig) -> Self {
        Self::serve(Llm::new(config).expect("engine"), front)
    }

    /// Serves `llm` on a free loopback port.
    pub fn serve(llm: Llm, front: AsyncLlmConfig) -> Self {
        let engine = Arc::new(AsyncLlm::start(llm, front));
        let server =
            BackgroundServer::start(Arc::clone(&engine), ServerConfig::default(), "127.0.0.1:0")
                .expect("server");
        Self { engine, server }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The served model name.
    pub fn model(&self) -> String {
        self.engine.model_name().to_string()
    }

    /// Waits until no request is admitted and the KV cache is empty; panics after `timeout`.
    pub fn wait_until_idle(&self, timeout: Duration) -> Snapshot {
        let deadline = Instant::now() + timeout;
        loop {
            let snapshot = self.engine.get_metrics();
            let idle = self.engine.num_pending_requests() == 0
                && gauge(&snapshot, Family::KvCacheUsage) == 0.0
                && gauge(&snapshot, Family::NumRequestsRunning) == 0.0;
            if idle {
                return snapshot;
            }
            assert!(
                Instant::now() < deadline,
                "the engine is not idle after {timeout:?}: {} requests admitted, KV usage {}",
                self.engine.num_pending_requests(),
                gauge(&snapshot, Family::KvCacheUsage)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A gauge summed over label sets.
pub fn gauge(snapshot: &Snapshot, family: Family) -> f64 {
    snapshot
        .gauge_total(&family.name(Namespace::Aquila))
        .unwrap_or_default()
}

/// A counter summed over label sets.
pub fn counter(snapshot: &Snapshot, family: Family) -> u64 {
    snapshot
        .counter_total(&family.name(Namespace::Aquila))
        .unwrap_or_default()
}

/// Finished requests with `reason` (`stop`, `length` or `abort`).
pub fn finished_with(snapshot: &Snapshot, reason: &str) -> u64 {
    snapshot
        .series(&Family::RequestSuccess.name(Namespace::Aquila))
        .filter_map(|metric| match metric {
            Metric::Counter(c)
                if c.labels.get("finished_reason").map(String::as_str) == Some(reason) =>
            {
                Some(c.value)
            }
            _ => None,
        })
        .sum()
}
