//! The engine thread of [`super::AsyncLlm`]: takes commands, steps the [`Llm`] while requests
//! are unfinished, and routes each step's deltas and outputs to the requests' channels.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use super::stream::RequestEvent;
use super::{AsyncLlmError, ShutdownMode};
use crate::llm::Llm;
use crate::output::{RequestId, StepOutput};
use crate::prompt::Prompt;
use crate::sampling_params::SamplingParams;

/// A message to the engine thread.
#[derive(Debug)]
pub(crate) enum Command {
    /// Admit a request; its events go to `events`, its id (or rejection) to `reply`.
    Add {
        prompt: Prompt,
        params: SamplingParams,
        events: UnboundedSender<RequestEvent>,
        reply: oneshot::Sender<Result<RequestId, AsyncLlmError>>,
    },
    /// Abort a request whose client went away.
    Abort(RequestId),
    /// Stop the loop.
    Shutdown(ShutdownMode),
}

/// The state of the engine thread.
pub(super) struct EngineLoop {
    llm: Llm,
    commands: Receiver<Command>,
    /// The event channel of every unfinished request.
    streams: HashMap<RequestId, UnboundedSender<RequestEvent>>,
    /// Admission slots taken (shared with the front, which takes them; this loop frees them).
    admitted: Arc<AtomicUsize>,
    /// Refuse new requests and stop once the admitted ones finished.
    draining: bool,
    /// Stop now.
    stopped: bool,
}

impl EngineLoop {
    /// A loop over `llm` fed by `commands`.
    pub(super) fn new(llm: Llm, commands: Receiver<Command>, admitted: Arc<AtomicUsize>) -> Self {
        Self {
            llm,
            commands,
            streams: HashMap::new(),
            admitted,
            draining: false,
            stopped: false,
        }
    }

    /// Runs until shut down (or until every front handle is gone), then aborts what is left.
    pub(super) fn run(mut self) {
        while !self.stopped {
            if self.streams.is_empty() {
                if self.draining {
                    break;
                }
                // Idle: sleep until a command arrives.
                match self.commands.recv() {
                    Ok(command) => self.handle(command),
                    Err(_) => break,
                }
            }
            self.take_pending_commands();
            if !self.stopped && !self.streams.is_empty() {
                self.step();
            }
        }
        self.abort_all();
    }

    /// Handles every command that already arrived, without waiting.
    fn take_pending_commands(&mut self) {
        loop {
            match self.commands.try_recv() {
                Ok(command) => self.handle(command),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.stopped = true;
                    return;
                }
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Add {
                prompt,
                params,
                events,
                reply,
            } => self.add(prompt, params, events, reply),
            Command::Abort(id) => self.abort(id),
            Command::Shutdown(ShutdownMode::Drain) => self.draining = true,
            Command::Shutdown(ShutdownMode::Abort) => self.stopped = true,
        }
    }

    fn add(
        &mut self,
        prompt: Prompt,
        params: SamplingParams,
        events: UnboundedSender<RequestEvent>,
        reply: oneshot::Sender<Result<RequestId, AsyncLlmError>>,
    ) {
        if self.draining || self.stopped {
            self.release_slot();
            let _ = reply.send(Err(AsyncLlmError::ShuttingDown));
            return;
        }
        match self.llm.add_request(prompt, params) {
            Ok(id) => {
                self.streams.insert(id, events);
                if reply.send(Ok(id)).is_err() {
                    // The caller stopped waiting for the id: nobody reads this request.
                    self.abort(id);
                }
            }
            Err(error) => {
                self.release_slot();
                let _ = reply.send(Err(AsyncLlmError::Rejected(error)));
            }
        }
    }

    /// Aborts an unfinished request whose client went away.
    fn abort(&mut self, id: RequestId) {
        if self.streams.remove(&id).is_some() {
            if let Err(error) = self.llm.abort(id) {
                tracing::warn!(request_id = id, %error, "abort failed");
            }
            self.release_slot();
        }
    }

    /// Runs one engine step and routes its results.
    fn step(&mut self) {
        match self.llm.step() {
            Ok(output) => self.route(output),
            Err(error) => {
                tracing::error!(%error, "engine step failed; aborting the unfinished requests");
                let message = error.to_string();
                for (id, events) in std::mem::take(&mut self.streams) {
                    let _ = self.llm.abort(id);
                    self.release_slot();
                    let _ = events.send(RequestEvent::Failed(message.clone()));
                }
            }
        }
    }

    /// Sends each delta and final output to its request's stream; aborts the requests whose
    /// stream was dropped.
    fn route(&mut self, output: StepOutput) {
        let mut gone = Vec::new();
        for delta in output.deltas {
            if let Some(events) = self.streams.get(&delta.request_id) {
                let id = delta.request_id;
                if events.send(RequestEvent::Delta(delta)).is_err() {
                    gone.push(id);
                }
            }
        }
        for finished in output.finished {
            if let Some(events) = self.streams.remove(&finished.request_id) {
                // Free the slot first: a client that saw its output may send the next request.
                self.release_slot();
                let _ = events.send(RequestEvent::Finished(Box::new(finished)));
            }
        }
        for id in gone {
            self.abort(id);
        }
    }

    /// Aborts every unfinished request, ending each stream with its aborted output.
    fn abort_all(&mut self) {
        for (id, events) in std::mem::take(&mut self.streams) {
            self.release_slot();
            match self.llm.abort(id) {
                Ok(output) => {
                    let _ = events.send(RequestEvent::Finished(Box::new(output)));
                }
                Err(error) => {
                    let _ = events.send(RequestEvent::Failed(error.to_string()));
                }
            }
        }
    }

    fn release_slot(&self) {
        self.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}
