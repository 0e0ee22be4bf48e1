//! Tool routes: the catalog (`GET /v1/tools`, `GET /v1/tools/{name}`) and
//! direct calls with no model turn (`POST /v1/tools/{name}`).
//!
//! A direct call binds to a session by `sessionId` or by continuation token
//! (never both); the host decides the rest (owner check, busy session,
//! scratch workspace) and its errors map through `error`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_api::token::ChannelToken;
use bdk_core::host::{CallOrigin, DirectCall, DirectOutcome};
use bdk_core::mcp::ConnectionError;
use bdk_core::tool::{Effect, Execution, ToolSource, ToolSpec};
use bdk_events::SessionId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::True;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{JsonBody, PathParams};
use crate::state::Agent;

/// Body of `POST /v1/tools/{name}`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ToolCallRequest")]
pub(crate) struct CallBody {
    /// The tool input; omitted or null means `{}`.
    #[serde(default)]
    input: Value,
    /// Run inside this session: its workspace, its owner check, the call
    /// recorded on its stream.
    session_id: Option<String>,
    /// Or bind by token, `<channelId>:<key>` (as `/v1/sessions` shows it).
    /// Not together with `sessionId`; a token that matches no session runs
    /// the call in a temporary workspace with the token as its identity.
    continuation_token: Option<String>,
    /// Approve a `needs_approval` tool by calling it; recorded with the
    /// caller's principal (`action.approval_*` events in a bound session,
    /// the server log otherwise). Without it such a tool answers 403
    /// `approval_required`.
    #[serde(default)]
    approve: bool,
}

/// The path of the tool routes.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct ToolPath {
    /// The tool's name, as in the catalog.
    name: String,
}

/// A tool as the catalog describes it.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Tool {
    name: String,
    /// The display title the tool declares (`title` in its manifest, the
    /// MCP server's title, `NativeTool::title`); null when it declares none.
    title: Option<String>,
    source: ToolSource,
    description: String,
    effect: Effect,
    execution: Execution,
    needs_approval: bool,
    /// The tool's own timeout; null for the default.
    timeout_ms: Option<u64>,
    /// The JSON Schema of the input.
    input_schema: Value,
    /// The JSON Schema of the output, or null when none is declared.
    output_schema: Option<Value>,
}

impl Tool {
    fn new(spec: &ToolSpec, source: ToolSource) -> Tool {
        Tool {
            name: spec.name.clone(),
            title: spec.title.clone(),
            source,
            description: spec.description.clone(),
            effect: spec.effect,
            execution: spec.execution,
            needs_approval: spec.needs_approval,
            timeout_ms: spec.timeout_ms,
            input_schema: spec.input_schema.clone(),
            output_schema: spec.output_schema.clone(),
        }
    }
}

/// The tool catalog.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ToolsResponse")]
pub(crate) struct Tools {
    ok: True,
    tools: Vec<Tool>,
    /// MCP connections that could not start or list their tools; their
    /// tools are missing from `tools`.
    connection_errors: Vec<ConnectionError>,
}

/// One tool.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ToolResponse")]
pub(crate) struct OneTool {
    ok: True,
    tool: Tool,
}

/// The answer of a direct call: the tool ran (a tool that fails is still a
/// 200, with `isError: true`).
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ToolCallResponse")]
pub(crate) struct Called {
    ok: True,
    #[serde(flatten)]
    outcome: DirectOutcome,
}

/// `GET /v1/tools`: the server tools a caller can run directly or bind to a
/// session (built-ins only when the agent exposes them).
pub(crate) async fn list(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Tools> {
    let tools = agent
        .host
        .direct_tool_sources(CallOrigin::Remote)
        .iter()
        .map(|(spec, source)| Tool::new(spec, source.clone()))
        .collect();
    Json(Tools {
        ok: True,
        tools,
        connection_errors: agent.host.connection_errors(),
    })
}

/// `GET /v1/tools/{name}`: one tool, server or agent-execution.
pub(crate) async fn describe(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParams(ToolPath { name }): PathParams<ToolPath>,
) -> Result<Json<OneTool>, ApiError> {
    let server = agent.host.direct_tool_sources(CallOrigin::Remote);
    let agent_tools = agent.host.agent_tools();
    let found = server
        .iter()
        .map(|(spec, source)| (spec, source.clone()))
        .chain(agent_tools.iter().map(|spec| (spec, ToolSource::Manifest)))
        .find(|(t, _)| t.name == name)
        .map(|(spec, source)| Tool::new(spec, source));
    match found {
        Some(tool) => Ok(Json(OneTool { ok: True, tool })),
        None => Err(unknown_tool(&name, &server)),
    }
}

fn unknown_tool(name: &str, server: &[(ToolSpec, ToolSource)]) -> ApiError {
    let available: Vec<&str> = server.iter().map(|(t, _)| t.name.as_str()).collect();
    ApiError::new(
        ErrorCode::UnknownTool,
        format!(
            "unknown tool `{name}`; available tools: {}",
            available.join(", ")
        ),
    )
    .with_available(available.into_iter().map(str::to_owned).collect())
}

/// A channel continuation token: `<channelId>:<key>`, both parts non-empty.
fn check_token(token: &str) -> Result<(), ApiError> {
    match ChannelToken::parse(token) {
        Some(_) => Ok(()),
        None => Err(ApiError::new(
            ErrorCode::InvalidContinuationToken,
            "a continuation token looks like <channelId>:<key>, both parts non-empty",
        )),
    }
}

/// `POST /v1/tools/{name}`: run a server tool with no model turn.
pub(crate) async fn call(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    PathParams(ToolPath { name }): PathParams<ToolPath>,
    JsonBody(body): JsonBody<CallBody>,
) -> Result<Json<Called>, ApiError> {
    if body.session_id.is_some() && body.continuation_token.is_some() {
        return Err(ApiError::new(
            ErrorCode::InvalidContinuationToken,
            "pass sessionId or continuationToken, not both",
        ));
    }
    if let Some(token) = &body.continuation_token {
        check_token(token)?;
    }
    let session_id = match &body.session_id {
        Some(raw) => Some(SessionId::parse(raw).ok_or_else(|| {
            ApiError::new(
                ErrorCode::SessionNotFound,
                format!("session {raw} not found"),
            )
        })?),
        None => None,
    };
    let input = if body.input.is_null() {
        json!({})
    } else {
        body.input
    };
    let outcome = agent
        .host
        .call_tool(DirectCall {
            name,
            input,
            session_id,
            continuation_token: body.continuation_token,
            principal: caller.owner().map(str::to_owned),
            origin: CallOrigin::Remote,
            approve: body.approve,
            reporter: None,
        })
        .await?;
    Ok(Json(Called { ok: True, outcome }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shapes() {
        assert!(check_token("http:abc").is_ok());
        assert!(check_token("pr:owner/repo#1").is_ok());
        assert!(check_token("slack:T1:C2").is_ok());
        for bad in ["", "abc", ":abc", "abc:", ":"] {
            assert!(check_token(bad).is_err(), "{bad:?}");
        }
    }
}
