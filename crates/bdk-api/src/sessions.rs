//! The bodies of the session routes: start, follow-up, events, stop,
//! delete, list, approvals.
//!
//! Requests keep optional what the server checks itself (a missing
//! `message` on a follow-up is `400 invalid_request`, not a parse error),
//! so a client builds them with the constructors or `..Default::default()`.

use std::collections::BTreeMap;

use bdk_events::{Admission, Envelope, SessionId, SessionMode, TurnId};
use chrono::{DateTime, Utc};
#[cfg(feature = "schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::True;

/// Longest caller-chosen delivery id.
pub const MAX_DELIVERY_ID: usize = 256;

/// Body of `POST /v1/session`. Every field is optional.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StartSessionRequest {
    /// The first message; must not be blank. Without it the session is
    /// created idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Run read tools, stub write tools.
    #[serde(default)]
    pub dry_run: bool,
    /// An RFC 3339 instant with a zone; tools see it as now, and time
    /// arguments later than it are refused.
    #[cfg_attr(feature = "schema", schemars(extend("format" = "date-time")))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    /// Files written into the session workspace before the turn: relative
    /// path to content. An absolute path, a `\` or a `..` that leaves the
    /// workspace is `400 invalid_request`.
    #[serde(default)]
    pub workspace_files: BTreeMap<String, String>,
    /// Free-form; `eval` marks regression traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// The caller's id for this send (1-256 characters, no control
    /// characters); one is generated otherwise.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 256)))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
}

impl StartSessionRequest {
    /// A session whose first turn answers `message`.
    pub fn message(message: impl Into<String>) -> Self {
        StartSessionRequest {
            message: Some(message.into()),
            ..Default::default()
        }
    }
}

/// Body of `POST /v1/session/{sessionId}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FollowUpRequest {
    /// The message; must not be blank.
    #[cfg_attr(feature = "schema", schemars(required))]
    pub message: Option<String>,
    /// The token of the last accepted send. Optional; when given it must be
    /// current.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continuation_token: Option<String>,
    /// What to do when a turn is running.
    #[serde(default)]
    pub admission: Admission,
    /// As on start.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 256)))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// As on start, written before the turn.
    #[serde(default)]
    pub workspace_files: BTreeMap<String, String>,
}

impl FollowUpRequest {
    /// `message`, sent with the token of the last accepted send.
    pub fn message(message: impl Into<String>, continuation_token: Option<String>) -> Self {
        FollowUpRequest {
            message: Some(message.into()),
            continuation_token,
            ..Default::default()
        }
    }
}

/// Body of `POST /v1/session/{sessionId}/approvals/{callId}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct ApprovalDecision {
    /// `approve` or `deny`.
    #[cfg_attr(feature = "schema", schemars(required, with = "Option<Decision>"))]
    pub decision: Option<String>,
    /// Why; recorded with the decision.
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// `decision`, with an optional reason.
    pub fn new(decision: Decision, reason: Option<String>) -> Self {
        ApprovalDecision {
            decision: Some(decision.as_str().to_owned()),
            reason,
        }
    }
}

/// A decision on a parked call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    // Variants without doc comments: the schema stays a plain `enum`.
    #[allow(missing_docs)]
    Approve,
    #[allow(missing_docs)]
    Deny,
}

impl Decision {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// Query of `GET /v1/session/{sessionId}/events`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema), schemars(inline))]
pub struct EventsQuery {
    /// `ndjson` (one `Envelope` per line, the default) or `json` (an
    /// `EventsResponse`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<EventsFormat>"))]
    pub format: Option<String>,
}

/// The representations of the events route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum EventsFormat {
    // Variants without doc comments: the schema stays a plain `enum`.
    #[allow(missing_docs)]
    Ndjson,
    #[allow(missing_docs)]
    Json,
}

/// Query of `GET /v1/session/{sessionId}/stream`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema), schemars(inline))]
#[serde(rename_all = "camelCase")]
pub struct StreamQuery {
    /// The first event index to send; an index past the end waits for that
    /// event.
    #[serde(default)]
    pub start_index: u64,
}

/// The answer of `POST /v1/session`: the session was created.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StartSessionResponse {
    /// Always `true`.
    pub ok: True,
    /// The new session.
    pub session_id: SessionId,
    /// `http:…`, opaque and rotated on every accepted follow-up.
    pub continuation_token: String,
    /// The id of the first message's send; absent without a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The first turn; absent without a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// Where the session's events can be read, absolute when the request
    /// named a usable host.
    pub trace_url: String,
    /// The session in the playground, when it is mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playground_url: Option<String>,
}

/// The answer of `POST /v1/session/{sessionId}`: the message was accepted.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FollowUpResponse {
    /// Always `true`.
    pub ok: True,
    /// The session.
    pub session_id: SessionId,
    /// The new token: keep it for the next follow-up.
    pub continuation_token: String,
    /// The id of this send.
    pub delivery_id: String,
    /// Absent when a coalesced message was queued behind the running turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
}

/// The recorded events of a session, as one JSON document.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EventsResponse {
    /// Always `true`.
    pub ok: True,
    /// The session.
    pub session_id: SessionId,
    /// Every event, by index.
    pub events: Vec<Envelope>,
    /// The session in the playground, when it is mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playground_url: Option<String>,
}

/// The answer of the stop route.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct StopResponse {
    /// Always `true`.
    pub ok: True,
    /// False when no turn was running.
    pub stopped: bool,
}

/// The answer of the delete route: the session is gone.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeleteSessionResponse {
    /// Always `true`.
    pub ok: True,
    /// The session that was deleted.
    pub session_id: SessionId,
}

/// One session as the list shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session.
    pub session_id: SessionId,
    /// `chat` or `task`.
    pub mode: SessionMode,
    /// `http`, `cli` or a custom channel id.
    pub channel: String,
    /// The display title.
    pub title: Option<String>,
    /// The owner; null for sessions created without one.
    pub principal: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The follow-up credential; only on sessions the caller owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation_token: Option<String>,
}

/// The caller's sessions, newest first.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct SessionsResponse {
    /// Always `true`.
    pub ok: True,
    /// Newest first.
    pub sessions: Vec<SessionSummary>,
}

/// A call waiting for approval.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// The call id, for the decision route.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The validated input.
    pub input: Value,
    /// When it was parked.
    pub requested_at: DateTime<Utc>,
}

/// The calls of a session parked for a decision.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct ApprovalsResponse {
    /// Always `true`.
    pub ok: True,
    /// Oldest first.
    pub approvals: Vec<Approval>,
}

/// A plain acknowledgement.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct OkResponse {
    /// Always `true`.
    pub ok: True,
}
