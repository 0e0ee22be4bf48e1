//! JSON Schemas of the spec types other documents describe (the HTTP API's
//! OpenAPI document). Behind the `schema` feature.
//!
//! Each schema is derived on a private shape that mirrors the type's
//! serializer (`ToolSource` serializes as one string), or written as a
//! literal; the HTTP suite validates every answer the server gives against
//! these schemas, so a drift fails there.
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use std::borrow::Cow;

use bdk_events::schema_by_shape;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::Diagnostic;
use crate::experiment::ExperimentUnit;
use crate::tool::{Effect, Execution, ToolSource};

impl JsonSchema for ToolSource {
    fn schema_name() -> Cow<'static, str> {
        "ToolSource".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^(builtin|manifest|native|mcp:.+)$",
            "description": "Where the tool comes from: `builtin` (a runtime tool), `manifest` (`agent/tools/<name>.toml`), `native` (Rust, given to the host), or `mcp:<connection>` (advertised by that MCP connection).",
        })
    }
}

/// Read or write.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Effect")]
enum EffectShape {
    Read,
    Write,
}
schema_by_shape!(Effect, EffectShape);

/// Where a tool runs.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Execution")]
enum ExecutionShape {
    Server,
    Agent,
}
schema_by_shape!(Execution, ExecutionShape);

/// A discovery problem.
#[derive(JsonSchema)]
#[schemars(rename = "Diagnostic")]
struct DiagnosticShape {
    /// `error` or `warning`.
    severity: String,
    /// The file or folder concerned, relative to the project root.
    file: String,
    /// What is wrong.
    message: String,
    /// How to fix it.
    fix: String,
}
schema_by_shape!(Diagnostic, DiagnosticShape);

/// What an experiment draws its arms by.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "ExperimentUnit")]
enum ExperimentUnitShape {
    Session,
    ChannelKey,
}
schema_by_shape!(ExperimentUnit, ExperimentUnitShape);
