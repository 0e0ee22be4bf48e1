//! Tools: the [`Tool`] trait every tool implements, whatever runs it.
//!
//! Kinds of tools, all behind the same trait so they behave alike everywhere
//! (model calls, direct calls, evals):
//! - [`subprocess`]: manifest tools with `command = [...]`, one JSON request
//!   on stdin, the result on stdout;
//! - [`native`]: Rust functions with a typed, schema-derived input;
//! - [`builtin`]: workspace file tools, `load_skill`, `tag_artifact` (and
//!   `task`, which the agent loop handles itself).
//!
//! [`schema`] validates input against a tool's JSON Schema before execution.
//!
//! This file holds the ports a call sees: [`Tool`], the [`ToolContext`] it
//! runs in and the [`ToolServices`] the host offers through it, among them
//! the agent's MCP connections ([`McpHub`], re-exported as `bdk_core::mcp`)
//! and the host's extensions. The plain data lives in [`spec`]. Everything
//! here names only leaves ([`spec`], [`report`], `endpoint::grant`,
//! `workspace::trees`), so the modules that
//! implement
//! these ports (the host, the endpoint, `bdk-mcp`) depend on tools and never
//! the other way round.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::SessionId;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::grant::EndpointGrant;
use crate::workspace::trees::Trees;

pub mod builtin;
pub mod content;
pub mod native;
pub mod report;
pub use bdk_project::schema;
pub mod services;
pub mod spec;
pub mod subprocess;

pub use report::{ToolNote, ToolReporter};
pub use services::{
    SendMessage, SendOutcome, ServiceError, SessionTarget, SessionView, ToolCalled, Waited,
};
pub use spec::{Effect, Execution, NewArtifact, SessionInfo, ToolOutput, ToolSource, ToolSpec};

/// Everything a tool call may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The call id (matches `actions.requested` / `action.result`).
    pub call_id: String,
    /// The session.
    pub session: SessionInfo,
    /// The workspace directory the call may read and write.
    pub workspace_dir: PathBuf,
    /// The host's way into the trees tools write: every file operation a
    /// built-in does in `workspace_dir` goes through `trees.root(..)`, which
    /// opens beneath the root and bounds the tree's blocking work
    /// (`Trees::default()` is a registry of the call's own).
    pub trees: Trees,
    /// The agent's durable state root.
    pub state_root: PathBuf,
    /// "Now" for the tool: the session's `asOf` when pinned, else the clock.
    pub now: DateTime<Utc>,
    /// True when `now` is pinned by `asOf`.
    pub as_of_pinned: bool,
    /// True in a dry-run session.
    pub dry_run: bool,
    /// The principal that approved the call, for `needs_approval` tools.
    pub approved_by: Option<String>,
    /// Fires when the call must stop (turn cancelled, host shutting down).
    pub cancel: CancellationToken,
    /// Host services (skills, artifacts, the store), when the caller has them.
    pub services: Option<Arc<dyn ToolServices>>,
    /// Where the tool's progress and log messages go, when the caller
    /// listens (see [`report`]); `None` sends them to the log.
    pub reporter: Option<ToolReporter>,
}

impl ToolContext {
    /// Reports progress or a log message of the call to its caller, or to
    /// the host's log (debug level) when the caller does not listen.
    pub fn report(&self, note: ToolNote) {
        match &self.reporter {
            Some(reporter) => reporter.report(note),
            None => tracing::debug!(call_id = %self.call_id, ?note, "tool report"),
        }
    }
}

/// Host services a built-in or native tool may need.
#[async_trait]
pub trait ToolServices: Send + Sync {
    /// The full text of a skill, or `None` when there is no such skill.
    fn skill(&self, name: &str) -> Option<String>;
    /// Tags an artifact for the session of the call; returns its id.
    async fn tag_artifact(
        &self,
        ctx: &ToolContext,
        artifact: NewArtifact,
    ) -> Result<String, String>;

    /// A capability on the host's local endpoint for the call of `ctx`, so a
    /// subprocess tool can reach host services over a socket; the token it
    /// carries is revoked when the grant is dropped. `None` when the caller
    /// offers no endpoint.
    async fn endpoint(&self, _ctx: &ToolContext) -> Option<EndpointGrant> {
        None
    }

    /// The agent's MCP connections (`host.mcp`), when the caller has them.
    fn mcp(&self) -> Option<Arc<dyn McpHub>> {
        None
    }

    /// The extensions of the host the call runs on (see
    /// `bdk_core::extension`), as `Any`: an extension's own helpers find
    /// themselves here (e.g. `bdk_scheduler::Reminders::for_call`).
    fn extensions(&self) -> Vec<Arc<dyn std::any::Any + Send + Sync>> {
        Vec::new()
    }

    /// Sends a message into a session the caller may reach (see
    /// [`services`] for who reaches what), starting the session of a key
    /// that has none. A call cannot send into its own session.
    async fn send(
        &self,
        _ctx: &ToolContext,
        _send: SendMessage,
    ) -> Result<SendOutcome, ServiceError> {
        Err(ServiceError::unavailable("send"))
    }

    /// A session the caller may reach, as it is now.
    async fn session_get(
        &self,
        _ctx: &ToolContext,
        _target: SessionTarget,
    ) -> Result<SessionView, ServiceError> {
        Err(ServiceError::unavailable("session.get"))
    }

    /// Waits (at most `timeout`) until a session the caller may reach comes
    /// to rest, and returns it. A call cannot wait for its own session.
    async fn session_wait(
        &self,
        _ctx: &ToolContext,
        _target: SessionTarget,
        _timeout: std::time::Duration,
    ) -> Result<Waited, ServiceError> {
        Err(ServiceError::unavailable("session.wait"))
    }

    /// Calls one of the agent's server tools for the caller, as the agent's
    /// own machinery (built-ins allowed; a `needs_approval` tool is
    /// refused), unbound or bound to a session the caller may reach other
    /// than its own.
    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        _tool: &str,
        _input: Value,
        _session: Option<SessionId>,
    ) -> Result<ToolCalled, ServiceError> {
        Err(ServiceError::unavailable("tools.call"))
    }
}

/// A callable tool.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's spec.
    fn spec(&self) -> &ToolSpec;

    /// Where the tool comes from. A tool written in Rust is
    /// [`ToolSource::Native`] unless it says otherwise.
    fn source(&self) -> ToolSource {
        ToolSource::Native
    }

    /// Runs the tool with validated input. Failures are returned as
    /// [`ToolOutput::error`], never as panics; the call must end promptly when
    /// `ctx.cancel` fires.
    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput;

    /// True when a failure is worth retrying (read tools only): timeouts and
    /// crashes of the tool's process, not a tool's own error result.
    fn is_transient(&self, _output: &ToolOutput) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------
// The MCP port

/// A connection that could not be started or could not list its tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionError {
    /// The connection name (manifest file stem).
    pub name: String,
    /// What went wrong.
    pub message: String,
}

/// Why an MCP operation failed before a tool could answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// No connection has this name.
    #[error("unknown MCP connection `{0}`")]
    UnknownConnection(String),
    /// The connection could not be started or failed while talking.
    #[error("MCP connection `{name}` failed: {message}")]
    Connection {
        /// The connection name.
        name: String,
        /// What went wrong.
        message: String,
    },
}

/// The agent's MCP connections, as host code sees them (`host.mcp`).
#[async_trait]
pub trait McpHub: Send + Sync + 'static {
    /// The connection names, sorted.
    fn names(&self) -> Vec<String>;

    /// The tools a connection offers, starting it when needed.
    async fn list_tools(&self, name: &str) -> Result<Vec<ToolSpec>, McpError>;

    /// Calls a tool of a connection. A tool's own failure, a timeout, a
    /// crash or a malformed answer is an error [`ToolOutput`]; `Err` only
    /// names an unknown connection.
    async fn call_tool(&self, name: &str, tool: &str, args: Value) -> Result<ToolOutput, McpError>;

    /// Connections that failed to start or to list their tools.
    fn connection_errors(&self) -> Vec<ConnectionError>;

    /// The tools of connections with `advertise_tools = true`, as far as
    /// they are listed by now.
    fn advertised_tools(&self) -> Vec<Arc<dyn Tool>>;

    /// A counter that grows whenever [`McpHub::advertised_tools`] or
    /// [`McpHub::connection_errors`] change (a listing finished, a server
    /// sent `tools/list_changed`), so the host knows when to rebuild.
    fn generation(&self) -> u64;

    /// Waits until the first listing of every advertising connection has
    /// finished (successfully or not). Bounded by the connections' timeouts.
    async fn ready(&self);

    /// Closes every connection and stops child processes.
    async fn shutdown(&self);
}
