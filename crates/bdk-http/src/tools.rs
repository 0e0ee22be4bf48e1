//! Tool routes: the catalog (`GET /v1/tools`, `GET /v1/tools/:name`) and
//! direct calls with no model turn (`POST /v1/tools/:name`).
//!
//! A direct call binds to a session by `sessionId` or by continuation token
//! (never both); the host decides the rest (owner check, busy session,
//! scratch workspace) and its errors map through `error`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_core::host::{CallOrigin, DirectCall};
use bdk_core::tool::{ToolSource, ToolSpec};
use bdk_events::SessionId;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Agent;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{JsonBody, PathParam};

/// Body of `POST /v1/tools/:name`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallBody {
    #[serde(default)]
    input: Value,
    session_id: Option<String>,
    continuation_token: Option<String>,
    /// The caller approves a `needs_approval` tool by calling it.
    #[serde(default)]
    approve: bool,
}

fn view(spec: &ToolSpec, source: &ToolSource) -> Value {
    json!({
        "name": spec.name,
        "title": spec.title,
        "source": source,
        "description": spec.description,
        "effect": spec.effect,
        "execution": spec.execution,
        "needsApproval": spec.needs_approval,
        "timeoutMs": spec.timeout_ms,
        "inputSchema": spec.input_schema,
        "outputSchema": spec.output_schema,
    })
}

/// `GET /v1/tools`: the server tools a caller can run directly or bind to a
/// session (built-ins only when the agent exposes them).
pub(crate) async fn list(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Value> {
    let tools: Vec<Value> = agent
        .host
        .direct_tool_sources(CallOrigin::Remote)
        .iter()
        .map(|(spec, source)| view(spec, source))
        .collect();
    Json(json!({
        "ok": true,
        "tools": tools,
        "connectionErrors": agent.host.connection_errors(),
    }))
}

/// `GET /v1/tools/:name`: one tool, server or agent-execution.
pub(crate) async fn describe(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParam(name): PathParam,
) -> Result<Json<Value>, ApiError> {
    let server = agent.host.direct_tool_sources(CallOrigin::Remote);
    let agent_tools = agent.host.agent_tools();
    let found = server
        .iter()
        .map(|(spec, source)| (spec, source.clone()))
        .chain(agent_tools.iter().map(|spec| (spec, ToolSource::Manifest)))
        .find(|(t, _)| t.name == name)
        .map(|(spec, source)| view(spec, &source));
    match found {
        Some(tool) => Ok(Json(json!({"ok": true, "tool": tool}))),
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
    match token.split_once(':') {
        Some((channel, key)) if !channel.is_empty() && !key.is_empty() => Ok(()),
        _ => Err(ApiError::new(
            ErrorCode::InvalidContinuationToken,
            "a continuation token looks like <channelId>:<key>, both parts non-empty",
        )),
    }
}

/// `POST /v1/tools/:name`: run a server tool with no model turn.
pub(crate) async fn call(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<CallBody>,
) -> Result<Json<Value>, ApiError> {
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
        })
        .await?;
    let mut out = serde_json::to_value(&outcome).map_err(|e| ApiError::internal(&e))?;
    if let Value::Object(map) = &mut out {
        map.insert("ok".into(), Value::Bool(true));
    }
    Ok(Json(out))
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
