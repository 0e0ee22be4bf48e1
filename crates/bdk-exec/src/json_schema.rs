//! The JSON Schema of an MCP connection's failure, for documents that
//! describe it (the HTTP API's OpenAPI document).
//!
//! Derived on a private shape that mirrors the type's serializer; the HTTP
//! suite validates every answer the server gives against it. (No feature:
//! this crate depends on schemars anyway, for tool input schemas.)
#![expect(
    dead_code,
    reason = "a shape only: named by the `JsonSchema` impl, never built"
)]

use bdk_events::schema_by_shape;
use schemars::JsonSchema;

/// An MCP connection that could not start or list its tools.
#[derive(JsonSchema)]
#[schemars(rename = "ConnectionError")]
struct ConnectionError {
    /// The connection name.
    name: String,
    /// What went wrong.
    message: String,
}

schema_by_shape!(crate::tool::ConnectionError, ConnectionError);
