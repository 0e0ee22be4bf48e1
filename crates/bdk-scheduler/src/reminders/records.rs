//! The plain parts of reminders: the schedule grammar (`delay`, `every`,
//! `cron`, `at`) and next-fire computation, the stored records and their
//! errors, and [`SessionReminders`], the port through which tools reach the
//! reminders of their session.
//!
//! A leaf (it names only [`crate::cron`]): the tools and the endpoint
//! operations use it without depending on the engine in
//! [`crate::reminders`]. Re-exported from there.

use async_trait::async_trait;
use bdk_events::SessionId;
use bdk_store::StoreError;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cron::CronExpr;

/// The store kv namespace holding one record per reminder, keyed by id.
pub const KV_NAMESPACE: &str = "reminders";
/// The reason a reminder is disarmed when its handler tool is gone after a restart.
pub const HANDLER_LOST: &str = "handler_lost_on_restart";
/// The reason a reminder is disarmed when its session no longer exists.
pub const SESSION_DELETED: &str = "session_deleted";
/// The key-value namespace of scheduled-fire claims (`<id>@<due time>`):
/// hosts sharing one store (replicas) fire each due time once.
pub const CLAIMS_NAMESPACE: &str = "reminder-fires";
/// The longest accepted `delay` or `every`.
const MAX_DURATION: TimeDelta = TimeDelta::days(365);
/// Errors of the reminder API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReminderError {
    /// The schedule is malformed or has no future fire time.
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
    /// The request is incomplete or contradictory.
    #[error("invalid reminder: {0}")]
    InvalidRequest(String),
    /// No session with that id.
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// Reminders bind to chat sessions only.
    #[error("session {0} is a task session; reminders need a chat session")]
    TaskSession(String),
    /// The named handler is not a callable server tool.
    #[error("unknown handler tool `{0}`")]
    UnknownHandler(String),
    /// No reminder with that id (in the caller's scope).
    #[error("reminder {0} not found")]
    NotFound(String),
    /// The reminder is no longer armed.
    #[error("reminder {0} is not armed")]
    NotArmed(String),
    /// Delivering the reminder failed.
    #[error("delivery failed: {0}")]
    Delivery(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The reminders are not attached to a running host: the host was not
    /// built with the `Reminders` extension, or it is gone.
    #[error(
        "reminders are not available: the host was not built with bdk_scheduler::Reminders, or it has shut down"
    )]
    Detached,
}

impl ReminderError {
    /// A stable error code for HTTP and tool answers.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSchedule(_) | Self::InvalidRequest(_) => "invalid_request",
            Self::SessionNotFound(_) | Self::NotFound(_) => "not_found",
            Self::TaskSession(_) => "task_session",
            Self::UnknownHandler(_) => "unknown_tool",
            Self::NotArmed(_) => "conflict",
            Self::Delivery(_) | Self::Store(_) => "internal",
            Self::Detached => "unavailable",
        }
    }
}

/// Result alias of this module.
pub type ReminderResult<T> = Result<T, ReminderError>;

// ---------------------------------------------------------------------------
// Schedules

/// How a reminder is scheduled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ScheduleKind {
    /// Once, after a duration.
    Delay,
    /// Repeatedly, with a fixed period.
    Every,
    /// On a 5-field UTC cron expression.
    Cron,
    /// Once, at an RFC 3339 instant.
    At,
}

/// Parses `10m`, `90s`, `2h`, `3d`: a positive whole number and one unit.
pub fn parse_duration(text: &str) -> ReminderResult<TimeDelta> {
    let text = text.trim();
    let bad = |why: &str| ReminderError::InvalidSchedule(format!("duration `{text}`: {why}"));
    if text.starts_with('-') {
        return Err(bad("must be positive"));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| bad("missing unit (s, m, h or d)"))?;
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits
        .parse()
        .map_err(|_| bad("expected a whole number followed by s, m, h or d"))?;
    let delta = match unit {
        "s" => TimeDelta::try_seconds(n),
        "m" => TimeDelta::try_minutes(n),
        "h" => TimeDelta::try_hours(n),
        "d" => TimeDelta::try_days(n),
        _ => return Err(bad("unknown unit; use s, m, h or d")),
    }
    .ok_or_else(|| bad("too long"))?;
    if delta <= TimeDelta::zero() {
        return Err(bad("must be positive"));
    }
    if delta > MAX_DURATION {
        return Err(bad("longer than 365 days"));
    }
    Ok(delta)
}

/// Parses a 5-field UTC cron expression with the matcher `bdk validate` and
/// the schedule cadence use; one that never fires is refused.
pub(crate) fn parse_cron(spec: &str) -> ReminderResult<CronExpr> {
    CronExpr::parse(spec).map_err(|e| ReminderError::InvalidSchedule(e.to_string()))
}

/// Parses an RFC 3339 instant with an explicit zone.
pub fn parse_at(text: &str) -> ReminderResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            ReminderError::InvalidSchedule(format!(
                "`at` must be an RFC 3339 time with a zone (like 2026-01-02T09:00:00Z): {e}"
            ))
        })
}

/// The fire after `after` for a schedule, or `None` when it has no more.
/// One-shot kinds (`delay`, `at`) have no fire after their first one.
pub(crate) fn next_fire(
    kind: &ScheduleKind,
    spec: &str,
    after: DateTime<Utc>,
) -> ReminderResult<Option<DateTime<Utc>>> {
    Ok(match kind {
        ScheduleKind::Delay | ScheduleKind::At => None,
        ScheduleKind::Every => Some(after + parse_duration(spec)?),
        ScheduleKind::Cron => parse_cron(spec)?.next_after(after),
    })
}

// ---------------------------------------------------------------------------
// Records

/// The lifecycle of a reminder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReminderStatus {
    /// Waiting for its next fire.
    Armed,
    /// A one-shot that fired, or a handler that answered `stop`.
    Completed,
    /// Cancelled by a caller.
    Cancelled,
    /// Stopped by the host; `reason` says why.
    Disarmed,
}

/// A stored reminder (the JSON in kv namespace `reminders`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reminder {
    /// `rem_...`.
    pub id: String,
    /// The chat session it belongs to.
    pub session_id: SessionId,
    /// The schedule kind.
    pub kind: ScheduleKind,
    /// The schedule text as given (`10m`, `0 9 * * 1`, an RFC 3339 time).
    pub schedule: String,
    /// The message sent into the conversation (prompt form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The standing cancellation condition shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The server tool called on fire (named-handler form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The handler's input.
    #[serde(default)]
    pub args: Value,
    /// Its state.
    pub status: ReminderStatus,
    /// Why it is no longer armed, when the host stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many times it fired.
    pub fire_count: u64,
    /// When it fires next (armed reminders only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire_at: Option<DateTime<Utc>>,
    /// When it last fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired_at: Option<DateTime<Utc>>,
    /// The last delivery failure, if the last fire failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// A request to create a reminder: exactly one of `delay`, `every`, `cron`,
/// `at`, and exactly one of `prompt` or `handler`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewReminder {
    /// Once, after this duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// Repeatedly, with this period (at least 1 minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// On this 5-field UTC cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Once, at this RFC 3339 time (with a zone), in the future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The message sent into the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The standing cancellation condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// A server tool called with `args` instead of sending a prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The handler's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// What one fire did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FireOutcome {
    /// The reminder after the fire.
    pub reminder: Reminder,
    /// `delivered`, `skip` or `stop` (a handler's answer), `failed`,
    /// `disarmed`; `skip` also when another host sharing the store delivered
    /// or cancelled this fire.
    pub result: String,
    /// The turn the fire started, when it started one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<bdk_events::TurnId>,
}

/// The claim key of one scheduled fire: `<id>@<due time, RFC 3339 in UTC>`.
pub fn claim_key(id: &str, due: DateTime<Utc>) -> String {
    format!(
        "{id}@{}",
        due.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

// ---------------------------------------------------------------------------
// Session-scoped access for tools

/// Finds the reminders of a session (`None` when the host is gone): what
/// the tools and the endpoint operations are given by the extension.
pub(crate) type SessionLookup =
    std::sync::Arc<dyn Fn(SessionId) -> Option<std::sync::Arc<dyn SessionReminders>> + Send + Sync>;

/// Reminders of one session, as tools see them (`Reminders::for_call`).
#[async_trait]
pub trait SessionReminders: Send + Sync {
    /// Creates a reminder in the session.
    async fn create(&self, req: NewReminder) -> ReminderResult<Reminder>;
    /// The session's reminders.
    async fn list(&self) -> ReminderResult<Vec<Reminder>>;
    /// Cancels one of the session's reminders.
    async fn cancel(&self, id: &str) -> ReminderResult<Reminder>;
}
