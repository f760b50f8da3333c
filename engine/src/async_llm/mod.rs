//! [`AsyncLlm`]: an asynchronous front of [`Llm`] (vLLM's `AsyncLLM`) for servers.
//!
//! The engine runs its step loop on its own thread (`engine_loop.rs`); requests arrive through a
//! command channel and their deltas and final outputs stream back through one channel per
//! request ([`RequestStream`], `stream.rs`). Dropping a stream before its request finished (a
//! client that went away) aborts the request, which frees its KV cache. At most
//! [`AsyncLlmConfig::max_pending_requests`] requests are admitted at a time; more are refused
//! with [`AsyncLlmError::QueueFull`] instead of queueing without bound.

mod engine_loop;
mod stream;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use aquila_metrics::{Recorder, Snapshot};
use aquila_model_loader::tokenizer::Tokenizer;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::llm::Llm;
use crate::output::RequestId;
use crate::prompt::Prompt;
use crate::sampling_params::SamplingParams;

use engine_loop::{Command, EngineLoop};
pub use stream::{RequestEvent, RequestStream};

/// Settings of the asynchronous front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncLlmConfig {
    /// Most requests admitted at once (running and waiting together); further requests are
    /// refused with [`AsyncLlmError::QueueFull`] until one finishes.
    pub max_pending_requests: usize,
}

impl Default for AsyncLlmConfig {
    /// 256 admitted requests.
    fn default() -> Self {
        Self {
            max_pending_requests: 256,
        }
    }
}

/// How [`AsyncLlm::shutdown`] treats the requests that are still unfinished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Refuse new requests, finish the admitted ones, then stop.
    Drain,
    /// Abort every unfinished request (their streams end with an aborted output), then stop.
    Abort,
}

/// Why a request could not be admitted.
#[derive(Debug, thiserror::Error)]
pub enum AsyncLlmError {
    /// The engine rejected the request (invalid sampling parameters or prompt).
    #[error(transparent)]
    Rejected(#[from] EngineError),
    /// As many requests as [`AsyncLlmConfig::max_pending_requests`] are already admitted.
    #[error("the engine's queue is full ({limit} requests admitted); retry later")]
    QueueFull {
        /// The configured limit.
        limit: usize,
    },
    /// The engine is shutting down or its thread has stopped.
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// An [`Llm`] stepping on its own thread, driven from async code.
///
/// ```no_run
/// use aquila_engine::{AsyncLlm, AsyncLlmConfig, EngineConfig, Llm, Prompt, RequestEvent,
///     SamplingParams};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let llm = Llm::new(EngineConfig::new("models/smollm2-135m-instruct"))?;
/// let engine = AsyncLlm::start(llm, AsyncLlmConfig::default());
/// let mut stream = engine
///     .add_request(Prompt::Text("The sky is".into()), SamplingParams::greedy(8))
///     .await?;
/// while let Some(event) = stream.next().await {
///     match event {
///         RequestEvent::Delta(delta) => print!("{}", delta.new_text),
///         RequestEvent::Finished(output) => println!(" ({:?})", output.finish_reason),
///         RequestEvent::Failed(error) => eprintln!("engine error: {error}"),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct AsyncLlm {
    commands: mpsc::Sender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
    admitted: Arc<AtomicUsize>,
    accepting: AtomicBool,
    config: AsyncLlmConfig,
    tokenizer: Arc<Tokenizer>,
    recorder: Arc<Recorder>,
    max_model_len: usize,
    model_name: String,
}

impl std::fmt::Debug for AsyncLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncLlm")
            .field("config", &self.config)
            .field("model_name", &self.model_name)
            .finish_non_exhaustive()
    }
}

impl AsyncLlm {
    /// Moves `llm` onto a new thread that steps it whenever requests are unfinished.
    pub fn start(llm: Llm, config: AsyncLlmConfig) -> Self {
        let tokenizer = Arc::new(llm.tokenizer().clone());
        let recorder = llm.recorder();
        let max_model_len = llm.max_model_len();
        let model_name = recorder.config().model_name().to_string();
        let admitted = Arc::new(AtomicUsize::new(0));
        let (commands, receiver) = mpsc::channel();
        let engine_loop = EngineLoop::new(llm, receiver, Arc::clone(&admitted));
        let thread = std::thread::Builder::new()
            .name("aquila-engine".into())
            .spawn(move || engine_loop.run())
            .expect("spawning the engine thread");
        Self {
            commands,
            thread: Mutex::new(Some(thread)),
            admitted,
            accepting: AtomicBool::new(true),
            config,
            tokenizer,
            recorder,
            max_model_len,
            model_name,
        }
    }

    /// Validates and queues a request; its deltas and final output arrive on the returned
    /// stream. Dropping the stream early aborts the request.
    pub async fn add_request(
        &self,
        prompt: Prompt,
        params: SamplingParams,
    ) -> Result<RequestStream, AsyncLlmError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(AsyncLlmError::ShuttingDown);
        }
        self.reserve_slot()?;
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (reply, admitted) = oneshot::channel();
        let command = Command::Add {
            prompt,
            params,
            events,
            reply,
        };
        if self.commands.send(command).is_err() {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return Err(AsyncLlmError::ShuttingDown);
        }
        // The engine thread releases the slot of a request it rejects or refuses.
        let id = admitted.await.map_err(|_| AsyncLlmError::ShuttingDown)??;
        Ok(RequestStream::new(id, receiver, self.commands.clone()))
    }

    /// Aborts request `id` if it is unfinished (its stream ends with an aborted output).
    pub fn abort(&self, id: RequestId) {
        // A stopped engine has no request left to abort.
        let _ = self.commands.send(Command::Abort(id));
    }

    /// Stops the engine thread: waits for it to drain the admitted requests or aborts them,
    /// per `mode`. Later requests are refused with [`AsyncLlmError::ShuttingDown`]. Blocks
    /// until the thread has stopped; calling it again does nothing.
    pub fn shutdown(&self, mode: ShutdownMode) {
        self.accepting.store(false, Ordering::Release);
        let _ = self.commands.send(Command::Shutdown(mode));
        let thread = self.thread.lock().map(|mut t| t.take()).unwrap_or(None);
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }

    /// Whether the engine thread accepts requests (not shut down, not stopped).
    pub fn is_running(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
            && self
                .thread
                .lock()
                .is_ok_and(|t| t.as_ref().is_some_and(|t| !t.is_finished()))
    }

    /// Requests admitted and not yet finished.
    pub fn num_pending_requests(&self) -> usize {
        self.admitted.load(Ordering::Acquire)
    }

    /// The settings the front was started with.
    pub fn config(&self) -> AsyncLlmConfig {
        self.config
    }

    /// A snapshot of the engine's metrics.
    pub fn get_metrics(&self) -> Snapshot {
        self.recorder.snapshot()
    }

    /// The engine's metrics recorder (for `/metrics`).
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Longest sequence (prompt plus output) a request may reach.
    pub fn max_model_len(&self) -> usize {
        self.max_model_len
    }

    /// The model name of the engine's metrics (`model_name` label).
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// Takes one admission slot, or fails when all are taken.
    fn reserve_slot(&self) -> Result<(), AsyncLlmError> {
        let limit = self.config.max_pending_requests;
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| AsyncLlmError::QueueFull { limit })
    }
}

impl Drop for AsyncLlm {
    /// Aborts what is unfinished and joins the engine thread.
    fn drop(&mut self) {
        self.shutdown(ShutdownMode::Abort);
    }
}
