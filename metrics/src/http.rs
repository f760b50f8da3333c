//! A small `/metrics` HTTP endpoint for online serving.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tiny_http::{Header, Method, Request, Response, Server};

use crate::error::MetricsError;
use crate::recorder::Recorder;

/// The path the endpoint serves.
pub const METRICS_PATH: &str = "/metrics";

/// Serves a recorder's exposition text at `GET /metrics` from a background thread.
///
/// Other paths answer 404 and other methods 405. Dropping the server (or calling
/// [`MetricsServer::shutdown`]) stops and joins the serving thread; the listening socket closes
/// as tiny_http's accept thread exits, just after.
pub struct MetricsServer {
    server: Arc<Server>,
    local_addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (for example `"127.0.0.1:0"`; port 0 picks a free port, see
    /// [`MetricsServer::local_addr`]) and serves `recorder`.
    pub fn start(recorder: Arc<Recorder>, addr: &str) -> Result<Self, MetricsError> {
        let bind_error = |reason: String| MetricsError::Bind {
            addr: addr.to_owned(),
            reason,
        };
        let server = Server::http(addr).map_err(|error| bind_error(error.to_string()))?;
        let local_addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| bind_error("the listener has no IP address".into()))?;
        let server = Arc::new(server);
        let stopping = Arc::new(AtomicBool::new(false));
        let worker = std::thread::Builder::new()
            .name(format!("aquila-metrics-http-{}", local_addr.port()))
            .spawn({
                let server = Arc::clone(&server);
                let stopping = Arc::clone(&stopping);
                move || serve(&server, &recorder, &stopping)
            })
            .map_err(|error| bind_error(format!("cannot start the server thread: {error}")))?;
        tracing::info!(%local_addr, "serving Prometheus metrics at {METRICS_PATH}");
        Ok(MetricsServer {
            server,
            local_addr,
            stopping,
            worker: Some(worker),
        })
    }

    /// The address the endpoint listens on (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The full URL of the endpoint, for example `http://127.0.0.1:9090/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}{METRICS_PATH}", self.local_addr)
    }

    /// Stops serving and waits for the server thread to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.stopping.store(true, Ordering::SeqCst);
            self.server.unblock();
            if worker.join().is_err() {
                tracing::error!("the metrics server thread panicked");
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

/// Answers requests until `stopping` is set (and the server unblocked).
fn serve(server: &Server, recorder: &Recorder, stopping: &AtomicBool) {
    while !stopping.load(Ordering::SeqCst) {
        match server.recv() {
            Ok(request) => respond(request, recorder),
            Err(error) if !stopping.load(Ordering::SeqCst) => {
                tracing::warn!(%error, "metrics endpoint failed to accept a request");
            }
            Err(_) => {}
        }
    }
}

fn respond(request: Request, recorder: &Recorder) {
    let path = request.url().split('?').next().unwrap_or_default();
    let is_read = matches!(request.method(), Method::Get | Method::Head);
    let response = if path != METRICS_PATH {
        text_response(
            404,
            "not found; metrics are served at /metrics\n".into(),
            "text/plain",
        )
    } else if !is_read {
        text_response(405, "only GET and HEAD are allowed\n".into(), "text/plain")
    } else {
        match recorder.exposition_text() {
            Ok(text) => text_response(200, text, prometheus::TEXT_FORMAT),
            Err(error) => {
                tracing::error!(%error, "cannot encode metrics");
                text_response(500, format!("{error}\n"), "text/plain")
            }
        }
    };
    if let Err(error) = request.respond(response) {
        tracing::debug!(%error, "metrics client went away before the response was sent");
    }
}

fn text_response(
    status: u16,
    body: String,
    content_type: &str,
) -> Response<std::io::Cursor<Vec<u8>>> {
    let response = Response::from_string(body).with_status_code(status);
    match Header::from_bytes("Content-Type", content_type) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    }
}
