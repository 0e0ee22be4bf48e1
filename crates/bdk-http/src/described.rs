//! Schemas of values other crates own and serialize, which this crate's
//! bodies embed: events, session ids, tool descriptions, cost reports,
//! artifacts, reminders, schedules, eval runs, the `bdk info` surface.
//!
//! Those crates serialize with serde and know nothing of OpenAPI (only this
//! crate does), so their wire shape is described here, once, by types that
//! are never built: a body field names one with `#[schemars(with = ...)]`.
//! The serialization stays the owner's; the openapi tests validate every
//! answer the server gives against these descriptions, so a drift fails
//! there.
#![expect(
    dead_code,
    reason = "descriptions only: these types are named in `#[schemars(with)]`, never built"
)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

pub(crate) use bdk_events::{AbUnit, Envelope, SessionId, SessionMode, TurnId, Usage};

/// Implements `JsonSchema` for a described type by a literal schema.
macro_rules! literal_schema {
    ($ty:ident, $name:literal, $schema:tt) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

/// Where a tool comes from.
// Mirrors `bdk_core::tool::ToolSource`.
pub(crate) struct ToolSource;
literal_schema!(ToolSource, "ToolSource", {
    "type": "string",
    "pattern": "^(builtin|manifest|native|mcp:.+)$",
    "description": "Where the tool comes from: `builtin` (a runtime tool), `manifest` (`agent/tools/<name>.toml`), `native` (Rust, given to the host), or `mcp:<connection>` (advertised by that MCP connection).",
});

/// Read or write.
// Mirrors `bdk_core::tool::Effect`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Effect {
    Read,
    Write,
}

/// Where a tool runs.
// Mirrors `bdk_core::tool::Execution`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Execution {
    Server,
    Agent,
}

/// How a turn ended, as the cost report lists it.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TurnStatus {
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

/// One ended turn's usage and price.
// Mirrors `bdk_models::prices::TurnCost`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CostTurn {
    turn_id: Option<TurnId>,
    status: TurnStatus,
    /// `provider/model`; null when the turn never reached a model.
    model: Option<String>,
    /// Null when the server reported no token usage for some step of the
    /// turn (unknown, not zero).
    usage: Option<Usage>,
    /// Null when the turn's start was not recorded.
    duration_ms: Option<u64>,
    /// Null when the model has no known price or the usage is unknown.
    estimated_cost_usd: Option<f64>,
}

/// Sums over a session's turns.
// Mirrors `bdk_models::prices::CostTotals`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CostTotals {
    turns: u64,
    /// Null when any turn's usage is unknown.
    usage: Option<Usage>,
    duration_ms: u64,
    /// Null when any turn's cost is unknown.
    estimated_cost_usd: Option<f64>,
}

/// Totals over the turns of a set of sessions.
// Mirrors `bdk_core::ab::AbTotals`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AbTotals {
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
// Mirrors `bdk_core::ab::ArmReport`.
#[derive(JsonSchema)]
pub(crate) struct AbArm {
    name: String,
    /// Percent of new sessions; null for an arm only recorded sessions name.
    weight: Option<u32>,
    /// Over the sessions drawn into the arm (pinned ones excluded).
    totals: AbTotals,
}

/// One session's enrollment.
// Mirrors `bdk_core::ab::Assignment`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AbAssignment {
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
// Mirrors `bdk_core::ab::ExperimentReport`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AbExperiment {
    name: String,
    description: Option<String>,
    /// False when only recorded sessions still name it.
    declared: bool,
    /// Whether new sessions are enrolled.
    enabled: bool,
    /// Null when not declared.
    unit: Option<ExperimentUnit>,
    /// Declared arms in manifest order, then arms only recorded sessions name.
    arms: Vec<AbArm>,
    /// Over every drawn session of the experiment.
    totals: AbTotals,
    /// Sessions whose arm was pinned (evals); not in the totals.
    pinned_sessions: u64,
    /// Newest first, at most `limit`.
    sessions: Vec<AbAssignment>,
    /// Assignments beyond `limit`.
    sessions_omitted: u64,
}

/// A durable output a session tagged.
// Mirrors `bdk_store::ArtifactRecord`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Artifact {
    /// `art_…`.
    id: String,
    session_id: Option<SessionId>,
    principal: Option<String>,
    kind: String,
    name: String,
    content_type: String,
    size: u64,
    /// Free-form.
    metadata: Option<Value>,
    created_at: DateTime<Utc>,
}

/// An MCP connection that could not start or list its tools.
// Mirrors `bdk_core::mcp::ConnectionError`.
#[derive(JsonSchema)]
pub(crate) struct ConnectionError {
    /// The connection name.
    name: String,
    /// What went wrong.
    message: String,
}

/// The outcome of a direct tool call.
// Mirrors `bdk_core::host::DirectOutcome`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DirectOutcome {
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
// Mirrors `bdk_core::host::MemoryStats`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryStats {
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

/// A discovery problem.
// Mirrors `bdk_core::Diagnostic`.
#[derive(JsonSchema)]
pub(crate) struct Diagnostic {
    /// `error` or `warning`.
    severity: String,
    /// The file or folder concerned, relative to the project root.
    file: String,
    /// What is wrong.
    message: String,
    /// How to fix it.
    fix: String,
}

/// The direct call a tool schedule made, as the principal `schedule:<name>`.
// Mirrors `bdk_scheduler::ToolCall`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleToolCall {
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
pub(crate) enum ScheduleKind {
    Prompt,
    Handoff,
    Tool,
    Handler,
}

/// What a handler schedule's program answered.
// Mirrors `bdk_scheduler::HandlerRun`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleHandlerRun {
    /// Its answer (a JSON object; `{"truncated": true, "bytes": n}` when
    /// larger than 16 KiB).
    answer: Value,
    duration_ms: u64,
    /// The sessions its answer listed.
    session_ids: Vec<SessionId>,
}

/// A failed fire, as the last-run record remembers it.
#[derive(JsonSchema)]
pub(crate) struct ScheduleFailure {
    at: DateTime<Utc>,
    error: String,
}

/// One schedule's state.
// Mirrors `bdk_scheduler::ScheduleStatus`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleStatus {
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
    last_run: Option<ScheduleRun>,
    /// Fires skipped under the catch-up policy (skip).
    missed: Option<MissedFires>,
}

/// How a schedule's latest fire ended.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleRun {
    finished_at: DateTime<Utc>,
    /// The scheduled minute; absent for a dispatch by hand.
    scheduled_for: Option<DateTime<Utc>>,
    ok: bool,
    session_ids: Vec<SessionId>,
    tool_call: Option<ScheduleToolCall>,
    handler: Option<ScheduleHandlerRun>,
    /// Why the fire failed.
    error: Option<String>,
    /// The code of a handler's failure (`handler_timeout`,
    /// `handler_exited`, `handler_bad_answer`, ...,
    /// `handler_reported_failure`).
    error_code: Option<String>,
    /// Fires that failed in a row up to this one (0 after a success).
    failures: u64,
    /// The latest failed fire, kept across later successes.
    last_failure: Option<ScheduleFailure>,
}

/// The catch-up policy that skipped fires.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CatchUp {
    Skip,
}

/// Fires a schedule skipped.
#[derive(JsonSchema)]
pub(crate) struct MissedFires {
    /// The schedule name.
    schedule: String,
    policy: CatchUp,
    total: u64,
    incidents: Vec<MissedIncident>,
}

/// Why fires were skipped.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MissReason {
    ServerDown,
    LateWake,
}

/// One run of skipped fires.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MissedIncident {
    detected_at: DateTime<Utc>,
    reason: MissReason,
    count: u64,
    skipped: Vec<DateTime<Utc>>,
}

/// How a reminder fires.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReminderKind {
    Delay,
    Every,
    Cron,
    At,
}

/// Where a reminder stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReminderStatus {
    Armed,
    Completed,
    Cancelled,
    Disarmed,
}

/// A reminder.
// Mirrors `bdk_scheduler::reminders::Reminder`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Reminder {
    /// The reminder id (`rem_...`).
    id: String,
    session_id: SessionId,
    kind: ReminderKind,
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

/// How a reminder's fire went: `disarmed` when the reminder's session no longer
/// exists, so it is disarmed with reason `session_deleted` instead of firing.
// Mirrors `bdk_scheduler::reminders::FireOutcome::result`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FireResult {
    Delivered,
    Skip,
    Stop,
    Failed,
    Disarmed,
}

/// One eval case as listed.
// Mirrors `bdk_evals::CaseSpec::listing`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalCase {
    /// `<path under evals/ without .eval.toml>/<case name>`.
    id: String,
    /// The case file, relative to the project root.
    file: String,
    description: Option<String>,
    tags: Vec<String>,
    /// File metadata with the case's merged over it.
    metadata: BTreeMap<String, Value>,
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    #[schemars(range(min = 1))]
    iterations: u64,
    #[schemars(range(min = 0.0, max = 1.0))]
    min_pass_rate: f64,
    /// The judge model, when the case has one.
    judge: Option<String>,
    /// The messages its steps send, in order.
    messages: Vec<String>,
    /// A/B arms the case pins: experiment -> arm.
    arms: Option<BTreeMap<String, String>>,
}

/// The selection of an eval run.
// Mirrors `bdk_evals::runner::RunOptions`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunOptions {
    filter_ids: Vec<String>,
    tags: Vec<String>,
    timeout_ms: Option<u64>,
    verbose: bool,
}

/// Where an eval run stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RunStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

/// An eval run.
// Mirrors `bdk_evals::runner::RunResult`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalRun {
    /// `evr_...`.
    run_id: String,
    status: RunStatus,
    options: RunOptions,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    duration_ms: u64,
    summary: EvalSummary,
    cases: Vec<EvalCaseResult>,
    /// What broke the run, when its status is `failed`.
    error: Option<String>,
}

/// Case counts of a run.
#[derive(JsonSchema)]
pub(crate) struct EvalSummary {
    total: u64,
    passed: u64,
    failed: u64,
    /// Cancelled, or not finished yet.
    cancelled: u64,
}

/// Where one case of a run stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CaseStatus {
    Pending,
    Running,
    Passed,
    Failed,
    Cancelled,
}

/// One case of a run.
// Mirrors `bdk_evals::runner::CaseResult`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalCaseResult {
    id: String,
    file: String,
    description: Option<String>,
    tags: Vec<String>,
    metadata: BTreeMap<String, Value>,
    status: CaseStatus,
    #[schemars(range(min = 0.0, max = 1.0))]
    pass_rate: f64,
    #[schemars(range(min = 0.0, max = 1.0))]
    min_pass_rate: f64,
    #[schemars(range(min = 1))]
    iteration_count: u64,
    iterations: Vec<EvalIteration>,
    duration_ms: u64,
}

/// How one iteration ended.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum IterationStatus {
    Passed,
    Failed,
    Timeout,
    Cancelled,
}

/// One iteration of a case.
// Mirrors `bdk_evals::runner::IterationResult`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalIteration {
    #[schemars(range(min = 1))]
    iteration: u64,
    status: IterationStatus,
    duration_ms: u64,
    failures: Vec<EvalFailure>,
    scores: Vec<EvalScore>,
    assertions: u64,
    turns: Vec<EvalTurn>,
    session_id: Option<SessionId>,
    /// Why the case body stopped early (a require form, expect_ok, a send
    /// error, the timeout, a cancel).
    stopped: Option<String>,
}

/// A judge's score.
#[derive(JsonSchema)]
pub(crate) struct EvalScore {
    name: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    value: f64,
}

/// One turn of an iteration.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EvalTurn {
    #[schemars(range(min = 1))]
    index: u64,
    prompt: String,
    message: String,
    ok: bool,
    tool_calls: Vec<String>,
}

/// A failed assertion.
// Mirrors `bdk_evals::Failure`.
#[derive(JsonSchema)]
pub(crate) struct EvalFailure {
    /// The assertion as written, like `calledTool("get_weather")`.
    assertion: String,
    /// `case`, or `turn N` for an assertion on one turn.
    scope: String,
    /// What went wrong.
    message: String,
    /// The event that broke it: the offending event, or the last one
    /// inspected when something expected never happened.
    event: Option<FailureEvent>,
}

/// The event an assertion failed on.
#[derive(JsonSchema)]
pub(crate) struct FailureEvent {
    index: u64,
    #[serde(rename = "type")]
    kind: String,
}

/// The agent's surface, as `bdk info --json` prints it.
// Mirrors `bdk_core::project::info::surface`, with the host's tools added.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Info {
    name: String,
    /// From `agent.toml`.
    description: Option<String>,
    /// `provider/model` from `agent.toml`; null for the default.
    model: Option<String>,
    /// Reasoning effort.
    effort: Option<String>,
    /// Step limit of a turn.
    max_steps: Option<u64>,
    /// Turns beyond it are queued.
    max_running_turns: Option<u64>,
    /// Which built-in tools are on.
    builtin_tools: Option<BTreeMap<String, Value>>,
    instructions: Option<InfoInstructions>,
    /// Manifest tools, then advertised MCP tools and native tools
    /// (built-ins are summarized under `builtinTools`).
    tools: Vec<InfoTool>,
    skills: Vec<BTreeMap<String, Value>>,
    subagents: Vec<BTreeMap<String, Value>>,
    mcp_connections: Vec<BTreeMap<String, Value>>,
    channels: Vec<InfoChannel>,
    hooks: Vec<BTreeMap<String, Value>>,
    schedules: Vec<BTreeMap<String, Value>>,
    /// Result gates in the order they run: the `gates/` programs and the
    /// host's Rust gates.
    gates: Option<Vec<InfoGate>>,
    /// A/B experiments (`agent/experiments/<name>.toml`).
    experiments: Option<Vec<InfoExperiment>>,
    sandbox_files: Option<Vec<String>>,
    scripted_rules: Option<Vec<String>>,
    evals: Option<bool>,
    diagnostics: Vec<Diagnostic>,
    /// MCP connections that could not start or list their tools.
    connection_errors: Option<Vec<ConnectionError>>,
    /// Only while a watcher reloads the agent as its folder changes (`bdk
    /// dev`): how the last reload went.
    reload: Option<InfoReload>,
}

/// The reload status of an agent under `bdk dev`.
// Mirrors `crate::state::Reload`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoReload {
    /// The version served: 1 as started, one more per reload.
    version: u64,
    /// False when the folder's last change did not load (the version above
    /// is still served).
    ok: bool,
    /// When the watcher last looked at a change.
    at: chrono::DateTime<chrono::Utc>,
    /// Why the last change did not load, when `ok` is false.
    errors: Vec<Diagnostic>,
    /// Parts that changed but apply only after a restart (`MCP
    /// connections`, `channels`, `hooks`, `schedules`, `max_running_turns`).
    needs_restart: Vec<String>,
}

/// A result gate as `bdk info` lists it.
// Mirrors `bdk_core::project::info::gate_json`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoGate {
    name: String,
    /// What it checks; empty when undeclared.
    description: String,
    /// Replies a turn may offer before this gate's reject fails it.
    max_attempts: u32,
    /// How long one check may take.
    timeout_ms: u64,
    /// What a broken check means: `fail` or `accept`.
    on_error: String,
    /// `program` (a `gates/` manifest) or `native` (a Rust gate).
    source: String,
    /// Programs only: the manifest, relative to the project.
    file: Option<String>,
}

/// An A/B experiment as `bdk info` lists it.
#[derive(JsonSchema)]
pub(crate) struct InfoExperiment {
    name: String,
    /// From the manifest.
    description: Option<String>,
    /// What arms are drawn by.
    unit: ExperimentUnit,
    /// False: no new session is enrolled.
    enabled: bool,
    /// The manifest, relative to the project.
    file: String,
    arms: Vec<InfoArm>,
}

/// What an experiment draws its arms by.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExperimentUnit {
    Session,
    ChannelKey,
}

/// One arm of an experiment.
#[derive(JsonSchema)]
pub(crate) struct InfoArm {
    name: String,
    /// Percent of the new sessions (the weights add up to 100).
    weight: u32,
    /// The overlay file, relative to the project.
    instructions: Option<String>,
    /// The `provider/model` the arm runs on.
    model: Option<String>,
    /// The effort the arm runs with.
    effort: Option<String>,
}

/// The agent's instruction files.
#[derive(JsonSchema)]
pub(crate) struct InfoInstructions {
    files: Option<Vec<String>>,
    chars: Option<u64>,
}

/// How a manifest tool runs.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Runner {
    Command,
    Url,
    Script,
}

/// A tool as `bdk info` lists it.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoTool {
    name: String,
    /// The declared display title, or null.
    title: Option<String>,
    source: ToolSource,
    description: String,
    effect: Effect,
    execution: Execution,
    needs_approval: Option<bool>,
    /// The tool's own timeout; null for the default.
    timeout_ms: Option<u64>,
    /// The JSON Schema of the input.
    input_schema: Value,
    /// The JSON Schema of the output, or null.
    output_schema: Option<Value>,
    /// Manifest tools only.
    runner: Option<Runner>,
    /// Manifest tools only: the manifest, relative to the project.
    file: Option<String>,
}

/// A channel as `bdk info` lists it. Each route answers `ChannelAccepted`
/// (the routes declare no output schema of their own).
#[derive(JsonSchema)]
pub(crate) struct InfoChannel {
    name: String,
    /// From the channel manifest.
    description: Option<String>,
    routes: Vec<InfoChannelRoute>,
}

/// A method a channel route may declare.
#[derive(JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum ChannelMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

/// One route of a channel.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InfoChannelRoute {
    method: ChannelMethod,
    /// The route's path relative to `/v1/channels/<name>`, as declared (`/`
    /// for the channel's own URL).
    path: String,
    /// The path under the agent's base path: `/v1/channels/<name>...`.
    full_path: String,
    /// From the route.
    description: Option<String>,
    /// The mode of the sessions it starts.
    mode: SessionMode,
    /// The JSON Schema the body is checked against (`body_schema`), or null
    /// when undeclared.
    body_schema: Option<Value>,
    /// The JSON Schema the query is checked against (`query_schema`), or
    /// null when undeclared.
    query_schema: Option<Value>,
}

/// A JSON-RPC 2.0 request or notification of the MCP protocol (the MCP
/// server of `bdk-mcp` reads it).
#[derive(JsonSchema)]
pub(crate) struct JsonRpcRequest {
    jsonrpc: JsonRpcVersion,
    id: Option<JsonRpcId>,
    method: String,
    params: Option<BTreeMap<String, Value>>,
}

/// A JSON-RPC 2.0 response: `result` on success, `error` otherwise.
#[derive(JsonSchema)]
pub(crate) struct JsonRpcResponse {
    jsonrpc: JsonRpcVersion,
    id: Option<JsonRpcId>,
    result: Option<BTreeMap<String, Value>>,
    error: Option<JsonRpcError>,
}

/// A JSON-RPC error.
#[derive(JsonSchema)]
pub(crate) struct JsonRpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

/// Always `"2.0"`.
pub(crate) struct JsonRpcVersion;

impl JsonSchema for JsonRpcVersion {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "JsonRpcVersion".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"const": "2.0"})
    }
}

/// A JSON-RPC id.
pub(crate) struct JsonRpcId;

impl JsonSchema for JsonRpcId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "JsonRpcId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": ["string", "integer"]})
    }
}

/// An OpenAPI 3.1 document (this crate serves its own, generated).
pub(crate) struct OpenApiDocument;
literal_schema!(OpenApiDocument, "OpenApiDocument", {
    "type": "object",
    "description": "An OpenAPI 3.1 document.",
    "required": ["openapi", "info", "paths"],
    "properties": {"openapi": {"type": "string", "pattern": "^3\\.1\\."}},
});
