//! An OpenAI-compatible HTTP server over [`AsyncLlm`] (feature `server`): `POST
//! /v1/completions` and `POST /v1/chat/completions` (both with `stream: true` as server-sent
//! events), `GET /v1/models`, `GET /health` and the engine's Prometheus `GET /metrics`.
//!
//! [`router`] gives an axum [`Router`] to mount in one's own service; [`serve`] runs it on a
//! listener until a shutdown signal; [`BackgroundServer`] runs it on its own thread for
//! synchronous programs and tests.
//!
//! Layout, one job per file: `protocol/` (the wire format), `body_limit.rs` (413 for a declared
//! body over the limit, before it is read), `json_body.rs` (parsing with errors that name the
//! field), `sampling.rs` (request fields to [`SamplingParams`]),
//! `generation.rs` (model and context checks, admission, whole or streamed responses),
//! `completions.rs` and `chat.rs` (the two generation endpoints), `logprobs.rs`, `info.rs`
//! (models, health, metrics), `error.rs` (OpenAI's error shape), `request_log.rs` (one log
//! line per request).
//!
//! ```no_run
//! use std::sync::Arc;
//! use aquila_engine::server::{router, ServerConfig};
//! use aquila_engine::{AsyncLlm, AsyncLlmConfig, EngineConfig, Llm};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let llm = Llm::new(EngineConfig::new("models/smollm2-135m-instruct"))?;
//! let engine = Arc::new(AsyncLlm::start(llm, AsyncLlmConfig::default()));
//! let app = router(Arc::clone(&engine), ServerConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! [`SamplingParams`]: crate::SamplingParams

mod body_limit;
mod chat;
mod completions;
mod error;
mod generation;
mod info;
mod json_body;
mod logprobs;
pub mod protocol;
mod request_log;
mod sampling;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};
use tokio::sync::oneshot;

use crate::async_llm::{AsyncLlm, ShutdownMode};

pub use error::ApiError;

/// Settings of the HTTP layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The model name clients pass in `model` and `/v1/models` lists; `None` uses the engine's
    /// model name (its metrics' `model_name` label).
    pub served_model_name: Option<String>,
    /// Largest request body in bytes; larger bodies get a 413.
    pub max_body_bytes: usize,
}

impl Default for ServerConfig {
    /// The engine's model name and a 4 MiB body limit.
    fn default() -> Self {
        Self {
            served_model_name: None,
            max_body_bytes: 4 << 20,
        }
    }
}

/// What every handler reads.
#[derive(Clone, Debug)]
pub struct AppState {
    engine: Arc<AsyncLlm>,
    model_name: Arc<str>,
    /// Unix time the router was built (`created` of the model card).
    started: u64,
}

/// The server's routes over `engine`, ready to serve or to merge into another router.
pub fn router(engine: Arc<AsyncLlm>, config: ServerConfig) -> Router {
    let model_name = config
        .served_model_name
        .unwrap_or_else(|| engine.model_name().to_string());
    let state = AppState {
        engine,
        model_name: model_name.into(),
        started: unix_time(),
    };
    Router::new()
        .route("/v1/completions", post(completions::create_completion))
        .route("/v1/chat/completions", post(chat::create_chat_completion))
        .route("/v1/models", get(info::list_models))
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            config.max_body_bytes,
            body_limit::refuse_declared_oversize,
        ))
        .with_state(state)
}

/// Serves `router(engine, config)` on `listener` until `shutdown` completes, then stops the
/// engine: draining the admitted requests or aborting them, per `mode`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<AsyncLlm>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mode: ShutdownMode,
) -> std::io::Result<()> {
    let app = router(Arc::clone(&engine), config);
    let stopping_engine = Arc::clone(&engine);
    let signal = async move {
        shutdown.await;
        if mode == ShutdownMode::Abort {
            // Ends the open streams (their requests abort), so the connections can close.
            let _ = tokio::task::spawn_blocking(move || stopping_engine.shutdown(mode)).await;
        }
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await;
    // Joining the engine thread blocks: keep it off the async workers.
    let stopped = tokio::task::spawn_blocking(move || engine.shutdown(mode)).await;
    if let Err(error) = stopped {
        tracing::error!(%error, "stopping the engine failed");
    }
    served
}

/// The server on its own thread and tokio runtime, for synchronous programs and tests.
#[derive(Debug)]
pub struct BackgroundServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl BackgroundServer {
    /// Binds `addr` (e.g. `127.0.0.1:0` for a free port) and serves `engine` there.
    pub fn start(engine: Arc<AsyncLlm>, config: ServerConfig, addr: &str) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("aquila-server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    serve(listener, engine, config, shutdown, ShutdownMode::Abort).await
                })
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections, aborts the unfinished requests and joins the thread.
    pub fn shutdown(mut self) -> std::io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(|thread| thread.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the server thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        if let Err(error) = self.stop_and_join() {
            tracing::error!(%error, "the server stopped with an error");
        }
    }
}

/// Seconds since the Unix epoch (`created` fields).
fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
