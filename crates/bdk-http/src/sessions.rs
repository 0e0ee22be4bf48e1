//! Session routes: start, follow-up, events dump, stop, delete, list,
//! approvals.
//!
//! (The live stream is in `stream`, the cost route in `cost`.) Each handler
//! validates what HTTP alone can judge (body shape, `asOf`, id shape), then
//! makes one call into the host, whose errors map through `error`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bdk_core::host::{FollowUp, StartSession};
use bdk_events::{Admission, SessionId, SessionMode};
use bdk_store::SessionRecord;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Agent;
use crate::auth::{Caller, request_host};
use crate::error::{ApiError, ErrorCode};
use crate::extract::{CallPath, JsonBody, QueryParams, SessionPath};

/// Longest accepted caller-chosen delivery id.
const MAX_DELIVERY_ID: usize = 256;

/// Body of `POST /v1/session`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StartBody {
    message: Option<String>,
    title: Option<String>,
    #[serde(default)]
    dry_run: bool,
    as_of: Option<String>,
    #[serde(default)]
    workspace_files: BTreeMap<String, String>,
    purpose: Option<String>,
    delivery_id: Option<String>,
}

/// Body of `POST /v1/session/:id`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FollowUpBody {
    message: Option<String>,
    continuation_token: Option<String>,
    #[serde(default)]
    admission: Admission,
    delivery_id: Option<String>,
    #[serde(default)]
    workspace_files: BTreeMap<String, String>,
}

/// Body of `POST /v1/session/:id/approvals/:callId`.
#[derive(Debug, Deserialize)]
pub(crate) struct DecisionBody {
    decision: Option<String>,
    reason: Option<String>,
}

/// Query of `GET /v1/session/:id/events`.
#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    format: Option<String>,
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
    JsonBody(body): JsonBody<StartBody>,
) -> Result<Response, ApiError> {
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
        })
        .await?;
    let base = base_url(&agent, &headers, &uri);
    let mut out = json!({
        "ok": true,
        "sessionId": started.session_id,
        "continuationToken": started.continuation_token,
        "traceUrl": format!("{base}/v1/session/{}/events", started.session_id),
    });
    if let Some(d) = &started.delivery_id {
        out["deliveryId"] = json!(d);
    }
    if let Some(t) = &started.turn_id {
        out["turnId"] = json!(t);
    }
    if let Some(url) = playground_url(&agent, &base, &started.session_id) {
        out["playgroundUrl"] = json!(url);
    }
    Ok((StatusCode::OK, Json(out)).into_response())
}

/// `POST /v1/session/:id`: a follow-up message.
pub(crate) async fn follow_up(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
    JsonBody(body): JsonBody<FollowUpBody>,
) -> Result<Json<Value>, ApiError> {
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
    let mut out = json!({
        "ok": true,
        "sessionId": sent.session_id,
        "continuationToken": sent.continuation_token,
        "deliveryId": sent.delivery_id,
    });
    if let Some(t) = &sent.turn_id {
        out["turnId"] = json!(t);
    }
    Ok(Json(out))
}

/// `GET /v1/session/:id/events`: the recorded events, as NDJSON or JSON.
pub(crate) async fn events(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
    headers: HeaderMap,
    uri: Uri,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Response, ApiError> {
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
        let mut out = json!({"ok": true, "sessionId": id, "events": events});
        let base = base_url(&agent, &headers, &uri);
        if let Some(url) = playground_url(&agent, &base, &id) {
            out["playgroundUrl"] = json!(url);
        }
        return Ok(Json(out).into_response());
    }
    let mut buf = Vec::new();
    for env in &events {
        bdk_events::ndjson::encode_into(env, &mut buf).map_err(|e| ApiError::internal(&e))?;
    }
    let mut response = buf.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

/// `POST /v1/session/:id/stop`: interrupt the running turn.
pub(crate) async fn stop(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Value>, ApiError> {
    let stopped = agent.host.stop(&id, caller.owner()).await?;
    Ok(Json(json!({"ok": true, "stopped": stopped})))
}

/// `DELETE /v1/session/:id`: stop the running turn, then remove the session
/// (record, events, workspace) and disarm its reminders. Owner only.
pub(crate) async fn delete(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Value>, ApiError> {
    if !agent.host.delete_session(&id, caller.owner()).await? {
        return Err(ApiError::from(bdk_core::host::HostError::SessionNotFound(
            id.to_string(),
        )));
    }
    Ok(Json(json!({"ok": true, "sessionId": id})))
}

fn session_view(record: &SessionRecord, caller: &Caller) -> Value {
    let mut v = json!({
        "sessionId": record.id,
        "mode": record.mode,
        "channel": record.channel,
        "title": record.title,
        "principal": record.principal,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
    });
    // The token is the follow-up credential: only its owner gets it.
    if record.principal.as_deref() == Some(caller.principal.as_str()) {
        v["continuationToken"] = json!(record.continuation_token);
    }
    v
}

/// `GET /v1/sessions`: the caller's sessions (every session for a caller
/// that sees all), newest first.
pub(crate) async fn list(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let mut records = agent.host.list_sessions(caller.read_scope()).await?;
    records.reverse();
    let sessions: Vec<Value> = records.iter().map(|r| session_view(r, &caller)).collect();
    Ok(Json(json!({"ok": true, "sessions": sessions})))
}

/// `GET /v1/session/:id/approvals`: calls parked for a decision.
pub(crate) async fn approvals(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Value>, ApiError> {
    let approvals = agent.host.approvals(&id, caller.read_scope()).await?;
    Ok(Json(json!({"ok": true, "approvals": approvals})))
}

/// `POST /v1/session/:id/approvals/:callId`: approve or deny a parked call.
pub(crate) async fn resolve_approval(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    CallPath(id, call_id): CallPath,
    JsonBody(body): JsonBody<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({"ok": true})))
}
