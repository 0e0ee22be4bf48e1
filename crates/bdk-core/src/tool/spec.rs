//! The plain data of tools: what a tool is ([`ToolSpec`], [`Effect`],
//! [`Execution`], [`ToolSource`]), what a call knows of its session
//! ([`SessionInfo`]), what it returns ([`ToolOutput`]) and what it may tag
//! ([`NewArtifact`]).
//!
//! A leaf: it names no other module of the crate, so discovery, the
//! workspace and the MCP port can use these types without reaching the
//! runtime. Re-exported from [`crate::tool`], where callers name them.

use std::time::Duration;

use bdk_events::{SessionId, SessionMode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// A server tool with no title, output schema, approval or timeout of
    /// its own: how built-in tools (core's and extensions') describe
    /// themselves.
    pub fn server(name: &str, description: &str, input_schema: Value, effect: Effect) -> Self {
        Self {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            input_schema,
            output_schema: None,
            effect,
            execution: Execution::Server,
            needs_approval: false,
            timeout_ms: None,
        }
    }

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

/// An artifact to tag: what [`ToolServices::tag_artifact`] stores and
/// records in `artifact.tagged`.
///
/// [`ToolServices::tag_artifact`]: crate::tool::ToolServices::tag_artifact
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

/// The outcome of a call: what the model sees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    /// The result: any JSON value (a string is passed verbatim). For a
    /// result of content blocks, their structured content or their text
    /// (see [`super::content`]).
    pub content: Value,
    /// True when the call failed; `content` describes the failure.
    pub is_error: bool,
    /// The MCP content blocks the tool answered with, unchanged; empty for
    /// an ordinary result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Value>,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<Value>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            blocks: Vec::new(),
        }
    }

    /// A failed result with a message.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: Value::String(message.into()),
            is_error: true,
            blocks: Vec::new(),
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
