//! The port through which the runtime reaches an agent's MCP connections
//! (`agent/mcp-connections/`). The connections themselves live in `bdk-mcp`,
//! which implements [`McpHub`]; the core only knows this trait, so it never
//! depends on an MCP SDK.
//!
//! The port is defined beside the tool types it names (a hub lists
//! [`ToolSpec`](crate::tool::ToolSpec)s and advertises
//! [`Tool`](crate::tool::Tool)s, and a tool reaches the hub through its
//! context), in [`crate::tool`]; this module is its public name.

pub use crate::tool::{ConnectionError, McpError, McpHub};
