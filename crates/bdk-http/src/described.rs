//! Schemas of answers that have no Rust type to carry one: documents
//! assembled as JSON values (the `bdk info` surface, an eval case as
//! listed, a reminder fire's result word) and the protocols other crates
//! speak (MCP's JSON-RPC, the OpenAPI document itself).
//!
//! Every payload with a type of its own describes itself where the type
//! lives (the `schema` features of bdk-events, bdk-models, bdk-store,
//! bdk-project and bdk-evals; bdk-exec, bdk-core and bdk-scheduler, which
//! depend on schemars anyway). What is left is described here by types
//! that are never built: a body field names one with
//! `#[schemars(with = ...)]`. The openapi tests validate every answer the
//! server gives against these descriptions, so a drift fails there.
#![expect(
    dead_code,
    reason = "descriptions only: these types are named in `#[schemars(with)]`, never built"
)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use bdk_core::Diagnostic;
use bdk_core::mcp::ConnectionError;
use bdk_core::project::ExperimentUnit;
use bdk_core::project::tool::{Effect, Execution, ToolSource};
use bdk_events::SessionMode;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

/// Implements `JsonSchema` for a described type by a literal schema.
macro_rules! literal_schema {
    ($ty:ident, $name:literal, $schema:tt) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

/// How a reminder's fire went: `disarmed` when the reminder's session no longer
/// exists, so it is disarmed with reason `session_deleted` instead of firing.
// Mirrors `bdk_scheduler::reminders::FireOutcome::result`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FireResult {
    Delivered,
    Skip,
    Stop,
    Failed,
    Disarmed,
}

/// One eval case as listed.
// Mirrors `bdk_evals::CaseSpec::listing`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalCase {
    /// `<path under evals/ without .eval.toml>/<case name>`.
    id: String,
    /// The case file, relative to the project root.
    file: String,
    description: Option<String>,
    tags: Vec<String>,
    /// File metadata with the case's merged over it.
    metadata: BTreeMap<String, Value>,
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    #[schemars(range(min = 1))]
    iterations: u64,
    #[schemars(range(min = 0.0, max = 1.0))]
    min_pass_rate: f64,
    /// The judge model, when the case has one.
    judge: Option<String>,
    /// The messages its steps send, in order.
    messages: Vec<String>,
    /// A/B arms the case pins: experiment -> arm.
    arms: Option<BTreeMap<String, String>>,
}

/// The agent's surface, as `bdk info --json` prints it.
// Mirrors `bdk_core::project::info::surface`, with the host's tools added.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Info {
    name: String,
    /// From `agent.toml`.
    description: Option<String>,
    /// `provider/model` from `agent.toml`; null for the default.
    model: Option<String>,
    /// Reasoning effort.
    effort: Option<String>,
    /// Step limit of a turn.
    max_steps: Option<u64>,
    /// Turns beyond it are queued.
    max_running_turns: Option<u64>,
    /// Which built-in tools are on.
    builtin_tools: Option<BTreeMap<String, Value>>,
    instructions: Option<InfoInstructions>,
    /// Manifest tools, then advertised MCP tools and native tools
    /// (built-ins are summarized under `builtinTools`).
    tools: Vec<InfoTool>,
    skills: Vec<BTreeMap<String, Value>>,
    subagents: Vec<BTreeMap<String, Value>>,
    mcp_connections: Vec<BTreeMap<String, Value>>,
    channels: Vec<InfoChannel>,
    hooks: Vec<BTreeMap<String, Value>>,
    schedules: Vec<BTreeMap<String, Value>>,
    /// Result gates in the order they run: the `gates/` programs and the
    /// host's Rust gates.
    gates: Option<Vec<InfoGate>>,
    /// A/B experiments (`agent/experiments/<name>.toml`).
    experiments: Option<Vec<InfoExperiment>>,
    sandbox_files: Option<Vec<String>>,
    scripted_rules: Option<Vec<String>>,
    evals: Option<bool>,
    diagnostics: Vec<Diagnostic>,
    /// MCP connections that could not start or list their tools.
    connection_errors: Option<Vec<ConnectionError>>,
    /// Only while a watcher reloads the agent as its folder changes (`bdk
    /// dev`): how the last reload went.
    reload: Option<InfoReload>,
}

/// The reload status of an agent under `bdk dev`.
// Mirrors `crate::state::Reload`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoReload {
    /// The version served: 1 as started, one more per reload.
    version: u64,
    /// False when the folder's last change did not load (the version above
    /// is still served).
    ok: bool,
    /// When the watcher last looked at a change.
    at: chrono::DateTime<chrono::Utc>,
    /// Why the last change did not load, when `ok` is false.
    errors: Vec<Diagnostic>,
    /// Parts that changed but apply only after a restart (`MCP
    /// connections`, `channels`, `hooks`, `schedules`, `max_running_turns`).
    needs_restart: Vec<String>,
}

/// A result gate as `bdk info` lists it.
// Mirrors `bdk_core::project::info::gate_json`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoGate {
    name: String,
    /// What it checks; empty when undeclared.
    description: String,
    /// Replies a turn may offer before this gate's reject fails it.
    max_attempts: u32,
    /// How long one check may take.
    timeout_ms: u64,
    /// What a broken check means: `fail` or `accept`.
    on_error: String,
    /// `program` (a `gates/` manifest) or `native` (a Rust gate).
    source: String,
    /// Programs only: the manifest, relative to the project.
    file: Option<String>,
}

/// An A/B experiment as `bdk info` lists it.
#[derive(JsonSchema)]
pub(crate) struct InfoExperiment {
    name: String,
    /// From the manifest.
    description: Option<String>,
    /// What arms are drawn by.
    unit: ExperimentUnit,
    /// False: no new session is enrolled.
    enabled: bool,
    /// The manifest, relative to the project.
    file: String,
    arms: Vec<InfoArm>,
}

/// One arm of an experiment.
#[derive(JsonSchema)]
pub(crate) struct InfoArm {
    name: String,
    /// Percent of the new sessions (the weights add up to 100).
    weight: u32,
    /// The overlay file, relative to the project.
    instructions: Option<String>,
    /// The `provider/model` the arm runs on.
    model: Option<String>,
    /// The effort the arm runs with.
    effort: Option<String>,
}

/// The agent's instruction files.
#[derive(JsonSchema)]
pub(crate) struct InfoInstructions {
    files: Option<Vec<String>>,
    chars: Option<u64>,
}

/// How a manifest tool runs.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Runner {
    Command,
    Url,
    Script,
}

/// A tool as `bdk info` lists it.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoTool {
    name: String,
    /// The declared display title, or null.
    title: Option<String>,
    source: ToolSource,
    description: String,
    effect: Effect,
    execution: Execution,
    needs_approval: Option<bool>,
    /// The tool's own timeout; null for the default.
    timeout_ms: Option<u64>,
    /// The JSON Schema of the input.
    input_schema: Value,
    /// The JSON Schema of the output, or null.
    output_schema: Option<Value>,
    /// Manifest tools only.
    runner: Option<Runner>,
    /// Manifest tools only: the manifest, relative to the project.
    file: Option<String>,
}

/// A channel as `bdk info` lists it. Each route answers `ChannelAccepted`
/// (the routes declare no output schema of their own).
#[derive(JsonSchema)]
pub(crate) struct InfoChannel {
    name: String,
    /// From the channel manifest.
    description: Option<String>,
    routes: Vec<InfoChannelRoute>,
}

/// A method a channel route may declare.
#[derive(JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum ChannelMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

/// One route of a channel.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoChannelRoute {
    method: ChannelMethod,
    /// The route's path relative to `/v1/channels/<name>`, as declared (`/`
    /// for the channel's own URL).
    path: String,
    /// The path under the agent's base path: `/v1/channels/<name>...`.
    full_path: String,
    /// From the route.
    description: Option<String>,
    /// The mode of the sessions it starts.
    mode: SessionMode,
    /// The JSON Schema the body is checked against (`body_schema`), or null
    /// when undeclared.
    body_schema: Option<Value>,
    /// The JSON Schema the query is checked against (`query_schema`), or
    /// null when undeclared.
    query_schema: Option<Value>,
}

/// A JSON-RPC 2.0 request or notification of the MCP protocol (the MCP
/// server of `bdk-mcp` reads it).
#[derive(JsonSchema)]
pub(crate) struct JsonRpcRequest {
    jsonrpc: JsonRpcVersion,
    id: Option<JsonRpcId>,
    method: String,
    params: Option<BTreeMap<String, Value>>,
}

/// A JSON-RPC 2.0 response: `result` on success, `error` otherwise.
#[derive(JsonSchema)]
pub(crate) struct JsonRpcResponse {
    jsonrpc: JsonRpcVersion,
    id: Option<JsonRpcId>,
    result: Option<BTreeMap<String, Value>>,
    error: Option<JsonRpcError>,
}

/// A JSON-RPC error.
#[derive(JsonSchema)]
pub(crate) struct JsonRpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

/// Always `"2.0"`.
pub(crate) struct JsonRpcVersion;

impl JsonSchema for JsonRpcVersion {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "JsonRpcVersion".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"const": "2.0"})
    }
}

/// A JSON-RPC id.
pub(crate) struct JsonRpcId;

impl JsonSchema for JsonRpcId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "JsonRpcId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": ["string", "integer"]})
    }
}

/// An OpenAPI 3.1 document (this crate serves its own, generated).
pub(crate) struct OpenApiDocument;
literal_schema!(OpenApiDocument, "OpenApiDocument", {
    "type": "object",
    "description": "An OpenAPI 3.1 document.",
    "required": ["openapi", "info", "paths"],
    "properties": {"openapi": {"type": "string", "pattern": "^3\\.1\\."}},
});
