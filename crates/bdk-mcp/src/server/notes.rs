//! A tool's own reports during a direct call (`/v1/mcp/tools`, and
//! `call_tool` on `/v1/mcp`), forwarded to the MCP caller: progress as
//! progress notifications (when the call carries a progress token, as MCP
//! requires), log messages as log notifications (always: the tool chose to
//! say them). The first notification turns the answer into an event stream
//! for that one request, as for `ask` (see `progress.rs`).
//!
//! The tool side never waits: its reporter puts notes in a bounded queue and
//! drops them when the caller lags [`QUEUE`] notes behind. Every note queued
//! before the tool answers is sent before the answer.
//!
//! It names the core's tool reports and rmcp, nothing of the server around
//! it. Logging is deprecated in rmcp for the coming protocol revision; see
//! `progress.rs` for why it is used.
#![allow(deprecated)]

use std::future::Future;

use bdk_core::tool::{ToolNote, ToolReporter};
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::mpsc;

/// Notes waiting to be sent, at most.
const QUEUE: usize = 256;

/// Sends one call's notes to its caller.
pub(crate) struct Forwarder {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    logger: String,
    notes: mpsc::Receiver<ToolNote>,
}

/// A reporter for a call of `tool`, and what forwards what it reports.
pub(crate) fn channel(
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    tool: &str,
) -> (ToolReporter, Forwarder) {
    let (tx, notes) = mpsc::channel(QUEUE);
    let reporter = ToolReporter::new(move |note| {
        // Full or closed: the note is advice, and the tool must not wait.
        let _ = tx.try_send(note);
    });
    let forwarder = Forwarder {
        peer,
        token,
        logger: format!("bdk.tool.{tool}"),
        notes,
    };
    (reporter, forwarder)
}

impl Forwarder {
    /// Runs `call`, forwarding notes as they come, and the ones still
    /// queued when it answers before returning its answer.
    pub(crate) async fn alongside<F: Future>(mut self, call: F) -> F::Output {
        futures::pin_mut!(call);
        loop {
            tokio::select! {
                biased;
                out = &mut call => {
                    while let Ok(note) = self.notes.try_recv() {
                        self.send(note).await;
                    }
                    return out;
                }
                Some(note) = self.notes.recv() => self.send(note).await,
            }
        }
    }

    async fn send(&self, note: ToolNote) {
        // A caller that went away ends nothing here: the call still runs
        // to its answer.
        match note {
            ToolNote::Progress {
                progress,
                total,
                message,
            } => {
                let Some(token) = &self.token else { return };
                let mut param = ProgressNotificationParam::new(token.clone(), progress);
                if let Some(total) = total {
                    param = param.with_total(total);
                }
                if let Some(message) = message {
                    param = param.with_message(message);
                }
                let _ = self.peer.notify_progress(param).await;
            }
            ToolNote::Log { level, data } => {
                let level: LoggingLevel =
                    serde_json::from_value(Value::String(level)).unwrap_or(LoggingLevel::Info);
                let param =
                    LoggingMessageNotificationParam::new(level, data).with_logger(&self.logger);
                let _ = self.peer.notify_logging_message(param).await;
            }
        }
    }
}
