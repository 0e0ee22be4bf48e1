//! What `ask` tells a caller that asked to hear how the turn goes (a
//! progress token on the `tools/call` request): a progress notification and
//! a log message for each model step, tool call, approval wait and the
//! turn's end, read from the session's event stream while `ask` waits. The
//! first notification turns the answer into an event stream (rmcp falls
//! back from JSON to SSE for that one request); the endpoint stays
//! stateless, and a caller without a token gets plain JSON as before.
//!
//! It names the host, rmcp and the turn's event stream (`turn.rs`), nothing
//! of the server around it.
//!
//! rmcp marks MCP logging deprecated (SEP-2577 drops it from the coming
//! protocol revision); the protocol versions clients speak today have it,
//! and it is how they show a server's messages, so it is used here on
//! purpose.
#![allow(deprecated)]

use bdk_core::host::Host;
use bdk_events::{Event, SessionId, TurnId};
use futures::StreamExt;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};

/// The logger name on the turn's log messages.
const LOGGER: &str = "bdk.turn";

/// Sends one caller's notifications for one `ask`.
pub(crate) struct Reporter {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: u32,
}

impl Reporter {
    pub(crate) fn new(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        Self {
            peer,
            token,
            sent: 0,
        }
    }

    /// Follows `turn` in `session` from event index `from` until it ends
    /// (or the stream does), reporting as it goes.
    pub(crate) async fn follow(
        mut self,
        host: &Host,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) {
        let events = super::turn::events(host, session, turn, from).await;
        futures::pin_mut!(events);
        while let Some(envelope) = events.next().await {
            let data = envelope.event.data_json().unwrap_or(Value::Null);
            let kind = envelope.event.kind().to_owned();
            match &envelope.event {
                Event::StepStarted(s) => {
                    self.send(LoggingLevel::Info, format!("step {}", s.step), &kind, data)
                        .await;
                }
                Event::ActionsRequested(a) => {
                    for call in &a.actions {
                        self.send(
                            LoggingLevel::Info,
                            format!("calling {}", call.name),
                            &kind,
                            json!({"callId": call.call_id, "name": call.name, "input": call.input}),
                        )
                        .await;
                    }
                }
                Event::ActionResult(r) => {
                    let (level, message) = if r.is_error {
                        (
                            LoggingLevel::Warning,
                            format!("{} failed after {} ms", r.name, r.duration_ms),
                        )
                    } else {
                        (
                            LoggingLevel::Info,
                            format!("{} answered in {} ms", r.name, r.duration_ms),
                        )
                    };
                    self.send(level, message, &kind, data).await;
                }
                Event::ActionApprovalRequested(a) => {
                    self.send(
                        LoggingLevel::Notice,
                        format!("{} waits for approval", a.name),
                        &kind,
                        data,
                    )
                    .await;
                }
                Event::TurnCompleted(_) => {
                    self.send(LoggingLevel::Info, "reply ready".to_owned(), &kind, data)
                        .await;
                }
                Event::TurnFailed(f) => {
                    self.send(
                        LoggingLevel::Error,
                        format!("turn {}: {}", f.status.as_str(), f.message),
                        &kind,
                        data,
                    )
                    .await;
                }
                _ => {}
            }
        }
    }

    async fn send(&mut self, level: LoggingLevel, message: String, kind: &str, data: Value) {
        self.sent += 1;
        let progress = ProgressNotificationParam::new(self.token.clone(), f64::from(self.sent))
            .with_message(message.clone());
        // A caller that went away ends nothing here: `ask` still answers
        // (or times out) on its own.
        let _ = self.peer.notify_progress(progress).await;
        let log = LoggingMessageNotificationParam::new(
            level,
            json!({"message": message, "type": kind, "data": data}),
        )
        .with_logger(LOGGER);
        let _ = self.peer.notify_logging_message(log).await;
    }
}
