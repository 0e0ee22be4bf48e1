//! JSON Schemas of the host's reports (the A/B report, a direct call's
//! outcome, the memory figures), for documents that describe them (the
//! HTTP API's OpenAPI document).
//!
//! Each schema is derived on a private shape that mirrors the type's
//! serializer (optional fields the serializer skips, sizes as counts); the
//! HTTP suite validates every answer the server gives against these
//! schemas, so a drift fails there. (No feature: this crate depends on
//! schemars anyway, for native tools' input schemas.)
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use bdk_events::{AbUnit, SessionId, schema_by_shape};
use bdk_project::ExperimentUnit;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde_json::Value;

use crate::ab::{AbTotals, ArmReport, Assignment, ExperimentReport};
use crate::host::{DirectOutcome, MemoryStats};

/// Totals over the turns of a set of sessions.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AbTotals")]
struct AbTotalsShape {
    sessions: u64,
    /// Ended turns (`turn.completed` and `turn.failed`).
    turns: u64,
    /// Turns that ended in `turn.failed`, whatever its status.
    failed_turns: u64,
    /// Input tokens of the turns that reported usage.
    input_tokens: u64,
    /// Output tokens of the turns that reported usage.
    output_tokens: u64,
    /// Turns whose provider reported no usage.
    turns_without_usage: u64,
    /// Estimated cost of the turns with a known price.
    estimated_cost_usd: f64,
    /// Turns without a known cost (unpriced model or unknown usage).
    unpriced_turns: u64,
    /// Summed duration of the turns with a known duration.
    duration_ms: u64,
    /// Null before the first timed turn.
    mean_turn_duration_ms: Option<f64>,
}

/// One arm of an experiment, with its totals.
#[derive(JsonSchema)]
struct AbArm {
    name: String,
    /// Percent of new sessions; null for an arm only recorded sessions name.
    weight: Option<u32>,
    /// Over the sessions drawn into the arm (pinned ones excluded).
    totals: AbTotals,
}

/// One session's enrollment.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AbAssignment {
    session_id: SessionId,
    arm: String,
    /// Null for records written before units were recorded.
    unit: Option<AbUnit>,
    /// The session id or channel token the arm was drawn from.
    unit_key: Option<String>,
    created_at: DateTime<Utc>,
    /// The session's own totals.
    totals: AbTotals,
}

/// One experiment of the A/B report.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AbExperiment {
    name: String,
    description: Option<String>,
    /// False when only recorded sessions still name it.
    declared: bool,
    /// Whether new sessions are enrolled.
    enabled: bool,
    /// Null when not declared.
    unit: Option<ExperimentUnit>,
    /// Declared arms in manifest order, then arms only recorded sessions name.
    arms: Vec<ArmReport>,
    /// Over every drawn session of the experiment.
    totals: AbTotals,
    /// Sessions whose arm was pinned (evals); not in the totals.
    pinned_sessions: u64,
    /// Newest first, at most `limit`.
    sessions: Vec<Assignment>,
    /// Assignments beyond `limit`.
    sessions_omitted: u64,
}

/// The outcome of a direct tool call.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "DirectOutcome")]
struct DirectOutcomeShape {
    tool_name: String,
    /// `tool_<name>_…`.
    call_id: String,
    /// True when the tool failed; `result` is then the failure, as the
    /// model would see it.
    is_error: bool,
    /// The tool's result (for a result of content blocks, their
    /// structured content or their text).
    result: Value,
    /// The MCP content blocks the tool answered with (text, image, audio,
    /// resource, resource link), unchanged; absent for an ordinary result.
    content: Option<Vec<Value>>,
    duration_ms: u64,
    /// Present (true) when a session-bound read ran in a temporary
    /// workspace because the session's could not be created.
    scratch_workspace: Option<bool>,
    session_id: Option<SessionId>,
    /// Who approved the call, for a `needs_approval` tool: the caller's
    /// principal.
    approved_by: Option<String>,
}

/// What the host holds in memory for sessions.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "MemoryStats")]
struct MemoryStatsShape {
    /// Sessions in use right now: a turn running or queued, a send, stop or
    /// direct call in progress.
    active_sessions: u64,
    /// Resting sessions whose conversation is cached.
    cached_transcripts: u64,
    /// The estimated size of those conversations; at most
    /// `transcriptBudgetBytes`.
    cached_transcript_bytes: u64,
    /// The cache's budget (`--session-cache`); 0 caches nothing.
    transcript_budget_bytes: u64,
    /// Conversations dropped from the cache since start (rebuilt from the
    /// events when needed).
    evicted_transcripts: u64,
    /// Sessions the store holds in-memory state for: those in use and a
    /// bounded number of recent ones (0 for PostgreSQL).
    store_resident_sessions: u64,
    /// Idle sessions whose store state was dropped since start.
    store_evicted_sessions: u64,
}

schema_by_shape!(AbTotals, AbTotalsShape);
schema_by_shape!(ArmReport, AbArm);
schema_by_shape!(Assignment, AbAssignment);
schema_by_shape!(ExperimentReport, AbExperiment);
schema_by_shape!(DirectOutcome, DirectOutcomeShape);
schema_by_shape!(MemoryStats, MemoryStatsShape);
