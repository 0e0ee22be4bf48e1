//! The port through which the runtime reaches an agent's MCP connections
//! (`agent/mcp-connections/`). The connections themselves live in `bdk-mcp`,
//! which implements [`McpHub`]; the core only knows this trait, so it never
//! depends on an MCP SDK.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::tool::{Tool, ToolOutput, ToolSpec};

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
