//! The agent's MCP endpoints: `/v1/mcp` (`ask`, `check`, `call_tool`) and
//! `/v1/mcp/tools` (every deterministic server tool), served by `bdk-mcp`
//! in stateless streamable-HTTP mode behind the same auth chain as the
//! session API. The authenticated caller becomes the MCP principal, so
//! sessions started through `ask` belong to it and `check` only reads what
//! it may read.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bdk_mcp::server::{McpServer, Principal, Surface};
use http_body_util::Full;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{BodyLimit, read_limited};
use crate::state::Agent;

/// `POST /v1/mcp`: one JSON-RPC message for the conversational tools.
pub(crate) async fn agent(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    req: Request,
) -> Response {
    serve(&agent, caller, req, Surface::Agent).await
}

/// `POST /v1/mcp/tools`: one JSON-RPC message for the server tools.
pub(crate) async fn tools(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    req: Request,
) -> Response {
    serve(&agent, caller, req, Surface::Tools).await
}

/// `GET` and `DELETE` on the MCP endpoints: the server keeps no MCP session,
/// so there is no server-initiated stream to open and nothing to end.
pub(crate) async fn stateless() -> Response {
    let mut resp = ApiError::new(ErrorCode::MethodNotAllowed,
        "this MCP endpoint is stateless: POST JSON-RPC messages; there is no stream to open or session to end",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    resp
}

async fn serve(agent: &Agent, caller: Caller, req: Request, surface: Surface) -> Response {
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map_or(crate::extract::DEFAULT_MAX_BODY_BYTES, |l| l.0);
    let (mut parts, body) = req.into_parts();
    let bytes = match read_limited(body, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    // The streamable-HTTP transport wants clients to accept both JSON and
    // event streams. This server always answers plain JSON, so a client
    // that states no preference (curl, generic HTTP libraries) is served
    // as if it had named both.
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if matches!(accept, None | Some("" | "*/*")) {
        parts.headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    let principal = Principal {
        name: caller.principal,
        sees_all: caller.sees_all,
    };
    McpServer::new(agent.host.clone(), principal, surface)
        .handle_http(http::Request::from_parts(parts, Full::new(bytes)), limit)
        .await
        .map(axum::body::Body::new)
        .into_response()
}
