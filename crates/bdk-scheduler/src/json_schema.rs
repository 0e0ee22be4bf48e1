//! JSON Schemas of the schedule and reminder reports, for documents that
//! describe them (the HTTP API's OpenAPI document).
//!
//! Each schema is derived on a private shape that mirrors the type's
//! serializer (`kind` and `policy` are strings the schema names as enums);
//! the HTTP suite validates every answer the server gives against these
//! schemas, so a drift fails there. Behind the `schema` feature.
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use bdk_events::{SessionId, schema_by_shape};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde_json::Value;

use crate::reminders::records::{Reminder, ReminderStatus, ScheduleKind as ReminderSchedule};
use crate::status::{
    Failure, HandlerRun, LastRun, MissedFires, MissedIncident, MissedReason, ScheduleStatus,
    ToolRun,
};

/// The direct call a tool schedule made, as the principal `schedule:<name>`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ScheduleToolCall {
    /// The tool.
    tool_name: String,
    /// The call id (`tool_<name>_...`).
    call_id: String,
    /// True when the tool answered an error.
    is_error: bool,
    /// What the tool returned.
    result: Value,
    duration_ms: u64,
}

/// What a schedule does when it fires.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ScheduleKind {
    Prompt,
    Handoff,
    Tool,
    Handler,
}

/// What a handler schedule's program answered.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ScheduleHandlerRun {
    /// Its answer (a JSON object; `{"truncated": true, "bytes": n}` when
    /// larger than 16 KiB).
    answer: Value,
    duration_ms: u64,
    /// The sessions its answer listed.
    session_ids: Vec<SessionId>,
}

/// A failed fire, as the last-run record remembers it.
#[derive(JsonSchema)]
struct ScheduleFailure {
    at: DateTime<Utc>,
    error: String,
}

/// One schedule's state.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ScheduleStatus")]
struct ScheduleStatusShape {
    /// The schedule name.
    name: String,
    /// Its 5-field UTC cron expression.
    cron: String,
    kind: ScheduleKind,
    /// The next scheduled minute after now.
    next_fire_at: Option<DateTime<Utc>>,
    /// The latest scheduled minute that fired (claimed) on record.
    last_claimed_for: Option<DateTime<Utc>>,
    /// How the latest fire (scheduled or by hand) ended.
    last_run: Option<LastRun>,
    /// Fires skipped under the catch-up policy (skip).
    missed: Option<MissedFires>,
}

/// How a schedule's latest fire ended.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ScheduleRun {
    finished_at: DateTime<Utc>,
    /// The scheduled minute; absent for a dispatch by hand.
    scheduled_for: Option<DateTime<Utc>>,
    ok: bool,
    session_ids: Vec<SessionId>,
    tool_call: Option<ToolRun>,
    handler: Option<HandlerRun>,
    /// Why the fire failed.
    error: Option<String>,
    /// The code of a handler's failure (`handler_timeout`,
    /// `handler_exited`, `handler_bad_answer`, ...,
    /// `handler_reported_failure`).
    error_code: Option<String>,
    /// Fires that failed in a row up to this one (0 after a success).
    failures: u64,
    /// The latest failed fire, kept across later successes.
    last_failure: Option<Failure>,
}

/// The catch-up policy that skipped fires.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
enum CatchUp {
    Skip,
}

/// Fires a schedule skipped.
#[derive(JsonSchema)]
#[schemars(rename = "MissedFires")]
struct MissedFiresShape {
    /// The schedule name.
    schedule: String,
    policy: CatchUp,
    total: u64,
    incidents: Vec<MissedIncident>,
}

/// Why fires were skipped.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum MissReason {
    ServerDown,
    LateWake,
}

/// One run of skipped fires.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "MissedIncident")]
struct MissedIncidentShape {
    detected_at: DateTime<Utc>,
    reason: MissedReason,
    count: u64,
    skipped: Vec<DateTime<Utc>>,
}

/// How a reminder fires.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ReminderKind {
    Delay,
    Every,
    Cron,
    At,
}

/// Where a reminder stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "ReminderStatus")]
enum ReminderStatusShape {
    Armed,
    Completed,
    Cancelled,
    Disarmed,
}

/// A reminder.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Reminder")]
struct ReminderShape {
    /// The reminder id (`rem_...`).
    id: String,
    session_id: SessionId,
    kind: ReminderSchedule,
    /// The schedule as given: a duration, a 5-field UTC cron expression or
    /// an RFC 3339 time.
    schedule: String,
    /// The message sent into the conversation (prompt form).
    prompt: Option<String>,
    /// The standing cancellation condition shown to the model.
    until: Option<String>,
    /// The server tool called on fire (handler form).
    handler: Option<String>,
    /// The handler's input.
    args: Option<Value>,
    status: ReminderStatus,
    /// Why the host disarmed it (`handler_lost_on_restart`,
    /// `session_deleted`).
    reason: Option<String>,
    fire_count: u64,
    next_fire_at: Option<DateTime<Utc>>,
    last_fired_at: Option<DateTime<Utc>>,
    /// The last delivery failure.
    last_error: Option<String>,
    created_at: DateTime<Utc>,
}

schema_by_shape!(ToolRun, ScheduleToolCall);
schema_by_shape!(HandlerRun, ScheduleHandlerRun);
schema_by_shape!(Failure, ScheduleFailure);
schema_by_shape!(ScheduleStatus, ScheduleStatusShape);
schema_by_shape!(LastRun, ScheduleRun);
schema_by_shape!(MissedFires, MissedFiresShape);
schema_by_shape!(MissedReason, MissReason);
schema_by_shape!(MissedIncident, MissedIncidentShape);
schema_by_shape!(ReminderSchedule, ReminderKind);
schema_by_shape!(ReminderStatus, ReminderStatusShape);
schema_by_shape!(Reminder, ReminderShape);
