//! What a tool is, as the agent folder and the runtime both describe it:
//! [`ToolSpec`], its [`Effect`] and [`Execution`], and where it comes from
//! ([`ToolSource`]). Plain data: running a tool is the runtime's business.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of the built-in tool that delegates to a subagent (the turn
/// loop runs it itself; discovery reserves the name).
pub const TASK_TOOL: &str = "task";

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
