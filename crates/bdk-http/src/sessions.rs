//! Session routes: start, follow-up, events dump, stop, delete, list,
//! approvals.
//!
//! (The live stream is in `stream`, the cost route in `cost`.) Each handler
//! validates what HTTP alone can judge (body shape, `asOf`, id shape), then
//! makes one call into the host, whose errors map through `error`.

use std::sync::Arc;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{Operation, Response as DocResponse, StatusCode as DocStatus};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use bdk_api::paths;
use bdk_api::sessions::{
    Approval, ApprovalDecision, ApprovalsResponse, DeleteSessionResponse, EventsQuery,
    EventsResponse, FollowUpRequest, FollowUpResponse, MAX_DELIVERY_ID, OkResponse, SessionSummary,
    SessionsResponse, StartSessionRequest, StartSessionResponse, StopResponse,
};
use bdk_core::host::{ApprovalView, FollowUp, StartSession};
use bdk_events::{Envelope, SessionId, SessionMode};
use bdk_store::SessionRecord;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::api::{True, response};
use crate::auth::{Caller, request_host};
use crate::error::{ApiError, ErrorCode};
use crate::extract::{CallPath, JsonBody, QueryParams, SessionPath};
use crate::state::Agent;

/// The answer of the events route: NDJSON or one JSON document.
pub(crate) enum Events {
    Ndjson(Vec<u8>),
    Json(EventsResponse),
}

impl IntoResponse for Events {
    fn into_response(self) -> Response {
        match self {
            Events::Json(list) => Json(list).into_response(),
            Events::Ndjson(buf) => {
                let mut response = buf.into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/x-ndjson"),
                );
                response
            }
        }
    }
}

impl OperationOutput for Events {
    type Inner = EventsResponse;

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<DocResponse> {
        let envelope = ctx.schema.subschema_for::<Envelope>();
        let list = ctx.schema.subschema_for::<EventsResponse>();
        response(json!({
            "description": "The recorded events.",
            "content": {
                "application/x-ndjson": {"schema": envelope},
                "application/json": {"schema": list},
            },
        }))
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, DocResponse)> {
        Self::operation_response(ctx, operation)
            .map(|r| (Some(DocStatus::Code(200)), r))
            .into_iter()
            .collect()
    }
}

fn parse_as_of(raw: &str) -> Result<DateTime<Utc>, ApiError> {
    // RFC 3339 requires a zone (`Z` or an offset), so a zone-less local time
    // is refused here rather than guessed.
    DateTime::parse_from_rfc3339(raw)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidAsOf,
                format!(
                    "asOf must be an RFC 3339 instant with a zone, like 2026-01-15T09:00:00Z ({e})"
                ),
            )
        })
}

fn check_delivery_id(id: Option<&str>) -> Result<(), ApiError> {
    match id {
        Some(d) if d.is_empty() || d.len() > MAX_DELIVERY_ID || d.chars().any(char::is_control) => {
            Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "deliveryId must be 1-{MAX_DELIVERY_ID} characters without control characters"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The absolute base URL of this agent as the client addressed it:
/// `<scheme>://<host><prefix>`, or just the prefix when the request names
/// no usable host.
pub(crate) fn base_url(agent: &Agent, headers: &HeaderMap, uri: &Uri) -> String {
    // A proxy's scheme header is only believed where proxies are allowed.
    let https = !agent.shared.auth.is_local()
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let scheme = if https { "https" } else { "http" };
    match request_host(headers, uri).filter(|h| is_clean_host(h)) {
        Some(host) => format!("{scheme}://{host}{}", agent.prefix),
        None => agent.prefix.clone(),
    }
}

fn is_clean_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

fn playground_url(agent: &Agent, base: &str, id: &SessionId) -> Option<String> {
    agent
        .shared
        .playground
        .then(|| format!("{base}/playground?sessionId={id}"))
}

/// `POST /v1/session`: create a session, with a first turn when a message is given.
pub(crate) async fn start(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    headers: HeaderMap,
    uri: Uri,
    JsonBody(body): JsonBody<StartSessionRequest>,
) -> Result<Json<StartSessionResponse>, ApiError> {
    let as_of = body.as_of.as_deref().map(parse_as_of).transpose()?;
    check_delivery_id(body.delivery_id.as_deref())?;
    let started = agent
        .host
        .start_session(StartSession {
            message: body.message,
            mode: SessionMode::Chat,
            channel: "http".into(),
            principal: Some(caller.principal.clone()),
            continuation_token: None,
            title: body.title,
            purpose: body.purpose,
            dry_run: body.dry_run,
            as_of,
            workspace_files: body.workspace_files,
            delivery_id: body.delivery_id,
            // HTTP callers are drawn like everyone else: pinning an arm is
            // for evals run in process.
            arms: Default::default(),
        })
        .await?;
    let base = base_url(&agent, &headers, &uri);
    Ok(Json(StartSessionResponse {
        ok: True,
        trace_url: format!(
            "{base}{}",
            paths::fill(paths::SESSION_EVENTS, &[started.session_id.as_str()])
        ),
        playground_url: playground_url(&agent, &base, &started.session_id),
        session_id: started.session_id,
        continuation_token: started.continuation_token,
        delivery_id: started.delivery_id,
        turn_id: started.turn_id,
    }))
}

/// `POST /v1/session/{sessionId}`: a follow-up message.
pub(crate) async fn follow_up(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
    JsonBody(body): JsonBody<FollowUpRequest>,
) -> Result<Json<FollowUpResponse>, ApiError> {
    let Some(message) = body.message else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "message is required",
        ));
    };
    check_delivery_id(body.delivery_id.as_deref())?;
    let sent = agent
        .host
        .send(
            &id,
            FollowUp {
                message,
                continuation_token: body.continuation_token,
                admission: body.admission,
                delivery_id: body.delivery_id,
                principal: caller.owner().map(str::to_owned),
                sees_all: caller.sees_all,
                workspace_files: body.workspace_files,
            },
        )
        .await?;
    Ok(Json(FollowUpResponse {
        ok: True,
        session_id: sent.session_id,
        continuation_token: sent.continuation_token,
        delivery_id: sent.delivery_id,
        turn_id: sent.turn_id,
    }))
}

/// `GET /v1/session/{sessionId}/events`: the recorded events, as NDJSON or JSON.
pub(crate) async fn events(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
    headers: HeaderMap,
    uri: Uri,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Events, ApiError> {
    let json_format = match query.format.as_deref() {
        None | Some("ndjson") => false,
        Some("json") => true,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("format must be `json` or `ndjson`, not `{other}`"),
            ));
        }
    };
    let events = agent.host.events(&id, 0, caller.read_scope()).await?;
    if json_format {
        let base = base_url(&agent, &headers, &uri);
        return Ok(Events::Json(EventsResponse {
            ok: True,
            playground_url: playground_url(&agent, &base, &id),
            session_id: id,
            events,
        }));
    }
    let mut buf = Vec::new();
    for env in &events {
        bdk_events::ndjson::encode_into(env, &mut buf).map_err(|e| ApiError::internal(&e))?;
    }
    Ok(Events::Ndjson(buf))
}

/// `POST /v1/session/{sessionId}/stop`: interrupt the running turn.
pub(crate) async fn stop(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<StopResponse>, ApiError> {
    let stopped = agent.host.stop(&id, caller.owner()).await?;
    Ok(Json(StopResponse { ok: True, stopped }))
}

/// `DELETE /v1/session/{sessionId}`: stop the running turn, then remove the session
/// (record, events, workspace) and disarm its reminders. Owner only.
pub(crate) async fn delete(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<DeleteSessionResponse>, ApiError> {
    if !agent.host.delete_session(&id, caller.owner()).await? {
        return Err(ApiError::from(bdk_core::host::HostError::SessionNotFound(
            id.to_string(),
        )));
    }
    Ok(Json(DeleteSessionResponse {
        ok: True,
        session_id: id,
    }))
}

fn session_view(record: SessionRecord, caller: &Caller) -> SessionSummary {
    // The token is the follow-up credential: only its owner gets it.
    let owned = record.principal.as_deref() == Some(caller.principal.as_str());
    SessionSummary {
        session_id: record.id,
        mode: record.mode,
        channel: record.channel,
        title: record.title,
        principal: record.principal,
        created_at: record.created_at,
        updated_at: record.updated_at,
        continuation_token: owned.then_some(record.continuation_token),
    }
}

/// `GET /v1/sessions`: the caller's sessions (every session for a caller
/// that sees all), newest first.
pub(crate) async fn list(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
) -> Result<Json<SessionsResponse>, ApiError> {
    let mut records = agent.host.list_sessions(caller.read_scope()).await?;
    records.reverse();
    let sessions = records
        .into_iter()
        .map(|r| session_view(r, &caller))
        .collect();
    Ok(Json(SessionsResponse { ok: True, sessions }))
}

/// `GET /v1/session/{sessionId}/approvals`: calls parked for a decision.
pub(crate) async fn approvals(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<ApprovalsResponse>, ApiError> {
    let approvals = agent.host.approvals(&id, caller.read_scope()).await?;
    let approvals = approvals
        .into_iter()
        .map(|a: ApprovalView| Approval {
            call_id: a.call_id,
            name: a.name,
            input: a.input,
            requested_at: a.requested_at,
        })
        .collect();
    Ok(Json(ApprovalsResponse {
        ok: True,
        approvals,
    }))
}

/// `POST /v1/session/{sessionId}/approvals/{callId}`: approve or deny a parked call.
pub(crate) async fn resolve_approval(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    CallPath(id, call_id): CallPath,
    JsonBody(body): JsonBody<ApprovalDecision>,
) -> Result<Json<OkResponse>, ApiError> {
    let approved = match body.decision.as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "decision must be \"approve\" or \"deny\"",
            ));
        }
    };
    agent
        .host
        .resolve_approval(&id, &call_id, approved, body.reason, caller.owner())
        .await?;
    Ok(Json(OkResponse { ok: True }))
}
