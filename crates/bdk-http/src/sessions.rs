//! Session routes: start, follow-up, events dump, stop, delete, list,
//! approvals.
//!
//! (The live stream is in `stream`, the cost route in `cost`.) Each handler
//! validates what HTTP alone can judge (body shape, `asOf`, id shape), then
//! makes one call into the host, whose errors map through `error`.

use std::collections::BTreeMap;
use std::sync::Arc;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{Operation, Response as DocResponse, StatusCode as DocStatus};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use bdk_core::host::{ApprovalView, FollowUp, StartSession};
use bdk_events::{Admission, Envelope, SessionId, SessionMode, TurnId};
use bdk_store::SessionRecord;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::{True, response};
use crate::auth::{Caller, request_host};
use crate::described;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{CallPath, JsonBody, QueryParams, SessionPath};
use crate::state::Agent;

/// Longest accepted caller-chosen delivery id.
const MAX_DELIVERY_ID: usize = 256;

/// Body of `POST /v1/session`. Every field is optional.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "StartSessionRequest")]
pub(crate) struct StartBody {
    /// The first message; must not be blank. Without it the session is
    /// created idle.
    message: Option<String>,
    /// A display title.
    title: Option<String>,
    /// Run read tools, stub write tools.
    #[serde(default)]
    dry_run: bool,
    /// An RFC 3339 instant with a zone; tools see it as now, and time
    /// arguments later than it are refused.
    #[schemars(extend("format" = "date-time"))]
    as_of: Option<String>,
    /// Files written into the session workspace before the turn: relative
    /// path to content. An absolute path, a `\` or a `..` that leaves the
    /// workspace is `400 invalid_request`.
    #[serde(default)]
    workspace_files: BTreeMap<String, String>,
    /// Free-form; `eval` marks regression traffic.
    purpose: Option<String>,
    /// The caller's id for this send (1-256 characters, no control
    /// characters); one is generated otherwise.
    #[schemars(length(min = 1, max = 256))]
    delivery_id: Option<String>,
}

/// Body of `POST /v1/session/{sessionId}`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "FollowUpRequest")]
pub(crate) struct FollowUpBody {
    /// The message; must not be blank.
    #[schemars(required)]
    message: Option<String>,
    /// The token of the last accepted send. Optional; when given it must be
    /// current.
    continuation_token: Option<String>,
    /// What to do when a turn is running.
    #[serde(default)]
    #[schemars(with = "described::Admission")]
    admission: Admission,
    /// As on start.
    #[schemars(length(min = 1, max = 256))]
    delivery_id: Option<String>,
    /// As on start, written before the turn.
    #[serde(default)]
    workspace_files: BTreeMap<String, String>,
}

/// Body of `POST /v1/session/{sessionId}/approvals/{callId}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "ApprovalDecision")]
pub(crate) struct DecisionBody {
    /// `approve` or `deny`.
    #[schemars(required, with = "Option<Decision>")]
    decision: Option<String>,
    /// Why; recorded with the decision.
    reason: Option<String>,
}

/// A decision on a parked call.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[expect(
    dead_code,
    reason = "describes the `decision` field, which the handler reads as text"
)]
enum Decision {
    Approve,
    Deny,
}

/// Query of `GET /v1/session/{sessionId}/events`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct EventsQuery {
    /// `ndjson` (one `Envelope` per line, the default) or `json` (an
    /// `EventsResponse`).
    #[schemars(with = "Option<EventsFormat>")]
    format: Option<String>,
}

/// The representations of the events route.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[expect(
    dead_code,
    reason = "describes the `format` parameter, which the handler reads as text"
)]
enum EventsFormat {
    Ndjson,
    Json,
}

/// The answer of `POST /v1/session`: the session was created.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "StartSessionResponse")]
pub(crate) struct Started {
    ok: True,
    #[schemars(with = "described::SessionId")]
    session_id: SessionId,
    /// `http:…`, opaque and rotated on every accepted follow-up.
    continuation_token: String,
    /// The id of the first message's send; absent without a message.
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_id: Option<String>,
    /// The first turn; absent without a message.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<described::TurnId>")]
    turn_id: Option<TurnId>,
    /// Where the session's events can be read, absolute when the request
    /// named a usable host.
    trace_url: String,
    /// The session in the playground, when it is mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    playground_url: Option<String>,
}

/// The answer of `POST /v1/session/{sessionId}`: the message was accepted.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "FollowUpResponse")]
pub(crate) struct Sent {
    ok: True,
    #[schemars(with = "described::SessionId")]
    session_id: SessionId,
    /// The new token: keep it for the next follow-up.
    continuation_token: String,
    /// The id of this send.
    delivery_id: String,
    /// Absent when a coalesced message was queued behind the running turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<described::TurnId>")]
    turn_id: Option<TurnId>,
}

/// The recorded events of a session, as one JSON document.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "EventsResponse")]
pub(crate) struct EventList {
    ok: True,
    #[schemars(with = "described::SessionId")]
    session_id: SessionId,
    #[schemars(with = "Vec<described::Envelope>")]
    events: Vec<Envelope>,
    /// The session in the playground, when it is mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    playground_url: Option<String>,
}

/// The answer of the events route: NDJSON or one JSON document.
pub(crate) enum Events {
    Ndjson(Vec<u8>),
    Json(EventList),
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
    type Inner = EventList;

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<DocResponse> {
        let envelope = ctx.schema.subschema_for::<described::Envelope>();
        let list = ctx.schema.subschema_for::<EventList>();
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

/// The answer of the stop route.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "StopResponse")]
pub(crate) struct Stopped {
    ok: True,
    /// False when no turn was running.
    stopped: bool,
}

/// The answer of the delete route: the session is gone.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "DeleteSessionResponse")]
pub(crate) struct Deleted {
    ok: True,
    #[schemars(with = "described::SessionId")]
    session_id: SessionId,
}

/// One session as the list shows it.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionSummary {
    #[schemars(with = "described::SessionId")]
    session_id: SessionId,
    #[schemars(with = "described::SessionMode")]
    mode: SessionMode,
    /// `http`, `cli` or a custom channel id.
    channel: String,
    /// The display title.
    title: Option<String>,
    /// The owner; null for sessions created without one.
    principal: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// The follow-up credential; only on sessions the caller owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    continuation_token: Option<String>,
}

/// The caller's sessions, newest first.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "SessionsResponse")]
pub(crate) struct Sessions {
    ok: True,
    sessions: Vec<SessionSummary>,
}

/// The calls of a session parked for a decision.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ApprovalsResponse")]
pub(crate) struct Approvals {
    ok: True,
    #[schemars(with = "Vec<described::Approval>")]
    approvals: Vec<ApprovalView>,
}

/// A plain acknowledgement.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "OkResponse")]
pub(crate) struct Done {
    ok: True,
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
) -> Result<Json<Started>, ApiError> {
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
    Ok(Json(Started {
        ok: True,
        trace_url: format!("{base}/v1/session/{}/events", started.session_id),
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
    JsonBody(body): JsonBody<FollowUpBody>,
) -> Result<Json<Sent>, ApiError> {
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
    Ok(Json(Sent {
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
        return Ok(Events::Json(EventList {
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
) -> Result<Json<Stopped>, ApiError> {
    let stopped = agent.host.stop(&id, caller.owner()).await?;
    Ok(Json(Stopped { ok: True, stopped }))
}

/// `DELETE /v1/session/{sessionId}`: stop the running turn, then remove the session
/// (record, events, workspace) and disarm its reminders. Owner only.
pub(crate) async fn delete(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Deleted>, ApiError> {
    if !agent.host.delete_session(&id, caller.owner()).await? {
        return Err(ApiError::from(bdk_core::host::HostError::SessionNotFound(
            id.to_string(),
        )));
    }
    Ok(Json(Deleted {
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
) -> Result<Json<Sessions>, ApiError> {
    let mut records = agent.host.list_sessions(caller.read_scope()).await?;
    records.reverse();
    let sessions = records
        .into_iter()
        .map(|r| session_view(r, &caller))
        .collect();
    Ok(Json(Sessions { ok: True, sessions }))
}

/// `GET /v1/session/{sessionId}/approvals`: calls parked for a decision.
pub(crate) async fn approvals(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Approvals>, ApiError> {
    let approvals = agent.host.approvals(&id, caller.read_scope()).await?;
    Ok(Json(Approvals {
        ok: True,
        approvals,
    }))
}

/// `POST /v1/session/{sessionId}/approvals/{callId}`: approve or deny a parked call.
pub(crate) async fn resolve_approval(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    CallPath(id, call_id): CallPath,
    JsonBody(body): JsonBody<DecisionBody>,
) -> Result<Json<Done>, ApiError> {
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
    Ok(Json(Done { ok: True }))
}
