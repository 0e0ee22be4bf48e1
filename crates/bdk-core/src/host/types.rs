//! The values the host API takes and returns: session and follow-up
//! options, direct calls and their outcomes, approval and turn views.

use std::collections::BTreeMap;

use bdk_events::{FailStatus, SessionId, SessionMode, TurnId, Usage};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::tool::ToolReporter;

/// Options for [`Host::start_session`](crate::host::Host::start_session).
#[derive(Clone, Debug, Default)]
pub struct StartSession {
    /// The first message; `None` creates an idle session.
    pub message: Option<String>,
    /// Chat (default) or task.
    pub mode: SessionMode,
    /// The creating channel (`http`, `cli`, ...). Empty means `http`.
    pub channel: String,
    /// The owning principal.
    pub principal: Option<String>,
    /// A continuation token chosen by the channel (`<channelId>:<key>`);
    /// `None` generates an opaque `http:` token.
    pub continuation_token: Option<String>,
    /// Display title.
    pub title: Option<String>,
    /// Free-form purpose.
    pub purpose: Option<String>,
    /// Stub writes.
    pub dry_run: bool,
    /// Pin "now".
    pub as_of: Option<DateTime<Utc>>,
    /// Files written into the workspace before the first turn.
    pub workspace_files: BTreeMap<String, String>,
    /// The delivery id of the first message (generated when absent).
    pub delivery_id: Option<String>,
    /// A/B arms chosen instead of drawn: experiment -> arm (an eval case
    /// pinning an arm). Recorded as `ab.assigned` with unit `pinned`; an
    /// unknown experiment or arm refuses the start.
    pub arms: BTreeMap<String, String>,
}

/// What [`Host::start_session`](crate::host::Host::start_session) returns.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    /// The new session.
    pub session_id: SessionId,
    /// Its continuation token.
    pub continuation_token: String,
    /// The first turn, when a message was given.
    pub turn_id: Option<TurnId>,
    /// The first message's delivery id.
    pub delivery_id: Option<String>,
    /// The stream index of the turn's `message.received` (a good
    /// `startIndex` for following the turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

/// Options for [`Host::send`](crate::host::Host::send).
#[derive(Clone, Debug, Default)]
pub struct FollowUp {
    /// The message.
    pub message: String,
    /// The token the caller holds; when given it must be current (else
    /// [`HostError::StaleToken`](crate::host::HostError::StaleToken)). It rotates on every accepted send.
    pub continuation_token: Option<String>,
    /// Preempt (default) or coalesce.
    pub admission: bdk_events::Admission,
    /// The caller's delivery id (generated when absent).
    pub delivery_id: Option<String>,
    /// The caller.
    pub principal: Option<String>,
    /// The caller may read every session (dev mode on loopback): it is told
    /// that a task session takes no follow-ups (409) before being told it
    /// does not own the session (403), since it can see the session anyway.
    pub sees_all: bool,
    /// Files written into the workspace before the turn.
    pub workspace_files: BTreeMap<String, String>,
}

/// What [`Host::send`](crate::host::Host::send) returns.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sent {
    /// The session.
    pub session_id: SessionId,
    /// The rotated continuation token.
    pub continuation_token: String,
    /// The send's delivery id.
    pub delivery_id: String,
    /// The turn the message started; `None` when it was queued behind a
    /// running turn (coalesce).
    pub turn_id: Option<TurnId>,
    /// The stream index of the turn's `message.received`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

/// Whether a direct call carries an approval, for [`Host::direct_refusal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Approval {
    /// It approves the call.
    Given,
    /// It does not.
    Missing,
    /// No call yet: a listing, where approval tools a caller could approve
    /// stay in.
    Listing,
}

/// Where a direct call comes from, which decides what it may reach.
///
/// | | manifest, native and MCP tools | built-ins | `needs_approval` tools |
/// | --- | --- | --- | --- |
/// | [`CallOrigin::Agent`] | yes | yes | only with [`DirectCall::approve`] |
/// | [`CallOrigin::Remote`] | yes | only those in `[builtin_tools] direct` | only with [`DirectCall::approve`] |
/// | [`CallOrigin::Mcp`] | yes | only those in `[builtin_tools] direct` | never |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallOrigin {
    /// A caller of the HTTP API (`POST /v1/tools/:name`), or any embedder
    /// that does not say otherwise.
    #[default]
    Remote,
    /// An MCP client (`/v1/mcp/tools`, `call_tool`, `bdk mcp`): it can never
    /// carry an approval.
    Mcp,
    /// The agent's own machinery and its operator: schedules, reminder
    /// handlers, `bdk call`.
    Agent,
}

/// A direct (model-less) tool call.
#[derive(Clone, Debug, Default)]
pub struct DirectCall {
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// Bind to this session.
    pub session_id: Option<SessionId>,
    /// Or to the session holding this continuation token.
    pub continuation_token: Option<String>,
    /// The caller.
    pub principal: Option<String>,
    /// Where the call comes from.
    pub origin: CallOrigin,
    /// The caller approves a `needs_approval` tool by making the call; the
    /// approval is recorded with its principal (as `action.approval_*`
    /// events when the call is bound to a session, in the log otherwise).
    /// Refused from [`CallOrigin::Mcp`].
    pub approve: bool,
    /// Where the tool's progress and log messages go while it runs, when
    /// the caller listens (an MCP caller does); else to the log.
    pub reporter: Option<ToolReporter>,
}

/// The outcome envelope of a direct call.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectOutcome {
    /// The tool.
    pub tool_name: String,
    /// The call id (`tool_<name>_...`).
    pub call_id: String,
    /// True when the tool failed.
    pub is_error: bool,
    /// The tool's result.
    pub result: Value,
    /// The MCP content blocks the tool answered with, unchanged (see
    /// [`crate::tool::content`]); absent for an ordinary result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
    /// Execution time.
    pub duration_ms: u64,
    /// True when a session-bound read fell back to a scratch workspace.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scratch_workspace: bool,
    /// The session the call was recorded in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Who approved the call, for a `needs_approval` tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// A call waiting for approval.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The validated input.
    pub input: Value,
    /// When it was parked.
    pub requested_at: DateTime<Utc>,
}

/// How a turn ended, read back from the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnResult {
    /// The turn.
    pub turn_id: TurnId,
    /// True for `turn.completed`.
    pub ok: bool,
    /// The reply (or the failure message).
    pub reply: String,
    /// Failure status, when it failed.
    pub status: Option<FailStatus>,
    /// Usage; `None` when not known.
    pub usage: Option<Usage>,
}

/// What [`Host::reload`](super::Host::reload) did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reloaded {
    /// The version new turns now take (the host starts at 1).
    pub version: u64,
    /// Parts of the project that changed but apply only after a restart
    /// (`MCP connections`, `channels`, `hooks`, `schedules`,
    /// `max_running_turns`).
    pub needs_restart: Vec<String>,
}
