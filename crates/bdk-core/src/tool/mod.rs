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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::{SessionId, SessionMode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub mod builtin;
pub mod native;
pub mod schema;
pub mod subprocess;

/// Whether a tool only reads or may change something.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Reads only: runs concurrently with other reads, executes in dry runs,
    /// may be retried after a transient failure.
    Read,
    /// May change something (the default when undeclared): runs in order,
    /// stubbed in dry runs.
    #[default]
    Write,
}

/// Where a tool runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    /// On the serving host (callable directly).
    #[default]
    Server,
    /// As a script in the session workspace; not callable on the host.
    Agent,
}

/// What the runtime knows about a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The name the model sees.
    pub name: String,
    /// A display title for people (listings, the playground), when the tool
    /// declares one; the model sees `name` and `description` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: Value,
    /// JSON Schema of the output, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Read or write.
    pub effect: Effect,
    /// Server or agent.
    pub execution: Execution,
    /// Calls park until a person approves them.
    #[serde(default)]
    pub needs_approval: bool,
    /// Execution timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl ToolSpec {
    /// The timeout to apply, falling back to `default`.
    pub fn timeout(&self, default: Duration) -> Duration {
        self.timeout_ms.map_or(default, Duration::from_millis)
    }
}

/// Read-only facts about the session a call runs in.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id, or `None` for an unbound direct call.
    pub id: Option<SessionId>,
    /// The channel (`http`, `cli`, ...).
    pub channel: String,
    /// Chat or task.
    pub mode: SessionMode,
    /// The owning principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// Everything a tool call may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The call id (matches `actions.requested` / `action.result`).
    pub call_id: String,
    /// The session.
    pub session: SessionInfo,
    /// The workspace directory the call may read and write.
    pub workspace_dir: PathBuf,
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
}

/// An artifact to tag: what [`ToolServices::tag_artifact`] stores and
/// records in `artifact.tagged`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewArtifact {
    /// What it is (`report`, `patch`, ...).
    pub kind: String,
    /// Its display name.
    pub name: String,
    /// The workspace-relative path of the file it was read from; `None` for
    /// content given inline.
    pub path: Option<String>,
    /// The bytes.
    pub content: Vec<u8>,
    /// The media type.
    pub content_type: String,
    /// Extra facts (a JSON object).
    pub metadata: Value,
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
    async fn endpoint(&self, _ctx: &ToolContext) -> Option<crate::endpoint::EndpointGrant> {
        None
    }

    /// The agent's MCP connections (`host.mcp`), when the caller has them.
    fn mcp(&self) -> Option<Arc<dyn crate::mcp::McpHub>> {
        None
    }

    /// The reminders of the call's session (`host.reminders`), when the
    /// call is bound to a session of a host.
    fn reminders(&self) -> Option<Arc<dyn crate::reminders::SessionReminders>> {
        None
    }
}

/// The outcome of a call: what the model sees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    /// The result: any JSON value (a string is passed verbatim).
    pub content: Value,
    /// True when the call failed; `content` describes the failure.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<Value>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed result with a message.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: Value::String(message.into()),
            is_error: true,
        }
    }

    /// The result as text for the model: strings verbatim, other JSON serialized.
    pub fn to_text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Where a tool comes from, as listings show it (`"builtin"`,
/// `"manifest"`, `"native"`, `"mcp:<connection>"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ToolSource {
    /// A built-in tool of the runtime (workspace files, shell, artifacts,
    /// reminders, `load_skill`).
    Builtin,
    /// A manifest of the agent folder (`agent/tools/<name>.toml`).
    Manifest,
    /// A Rust tool given to the host builder.
    Native,
    /// A tool advertised by the MCP connection of this name.
    Mcp(String),
}

impl std::fmt::Display for ToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolSource::Builtin => f.write_str("builtin"),
            ToolSource::Manifest => f.write_str("manifest"),
            ToolSource::Native => f.write_str("native"),
            ToolSource::Mcp(connection) => write!(f, "mcp:{connection}"),
        }
    }
}

impl Serialize for ToolSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
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
