//! [`RequestStream`]: one request's deltas and final output, as the engine thread sends them.

use std::sync::mpsc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::engine_loop::Command;
use crate::output::{RequestDelta, RequestId, RequestOutput};

/// What the engine reports about one request.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestEvent {
    /// Text and tokens a step added (the last delta has `finished` set).
    Delta(RequestDelta),
    /// The final output; the last event of the stream.
    Finished(Box<RequestOutput>),
    /// An engine step failed and the request was aborted; the last event of the stream.
    Failed(String),
}

/// The events of one admitted request, in order.
///
/// Dropping the stream before its [`RequestEvent::Finished`] or [`RequestEvent::Failed`] event
/// aborts the request, which frees its KV cache.
#[derive(Debug)]
pub struct RequestStream {
    id: RequestId,
    events: UnboundedReceiver<RequestEvent>,
    commands: mpsc::Sender<Command>,
    ended: bool,
}

impl RequestStream {
    /// A stream of request `id`'s `events`; `commands` reaches the engine thread for aborts.
    pub(super) fn new(
        id: RequestId,
        events: UnboundedReceiver<RequestEvent>,
        commands: mpsc::Sender<Command>,
    ) -> Self {
        Self {
            id,
            events,
            commands,
            ended: false,
        }
    }

    /// The engine's id of the request.
    pub fn request_id(&self) -> RequestId {
        self.id
    }

    /// The next event, or `None` after the last one (or if the engine stopped).
    pub async fn next(&mut self) -> Option<RequestEvent> {
        if self.ended {
            return None;
        }
        let event = self.events.recv().await;
        self.ended = matches!(
            event,
            None | Some(RequestEvent::Finished(_) | RequestEvent::Failed(_))
        );
        event
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.ended {
            // The engine thread may have stopped already; then nothing is left to abort.
            let _ = self.commands.send(Command::Abort(self.id));
        }
    }
}
