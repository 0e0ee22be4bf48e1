//! JSON Schemas of an eval run's report, for documents that describe it
//! (the HTTP API's OpenAPI document). Behind the `schema` feature.
//!
//! Each schema is derived on a private shape that mirrors the type's
//! serializer (counts as integers, optional fields the serializer skips);
//! the HTTP suite validates every answer the server gives against these
//! schemas, so a drift fails there.
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use std::collections::BTreeMap;

use bdk_events::{SessionId, schema_by_shape};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde_json::Value;

use crate::assert::{EventRef, Failure, Score};
use crate::case::TurnSummary;
use crate::runner::{
    CaseResult, CaseStatus, IterationResult, IterationStatus, RunOptions, RunResult, RunStatus,
    Summary,
};

/// The selection of an eval run.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "RunOptions")]
struct RunOptionsShape {
    filter_ids: Vec<String>,
    tags: Vec<String>,
    timeout_ms: Option<u64>,
    verbose: bool,
}

/// Where an eval run stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "RunStatus")]
enum RunStatusShape {
    Running,
    Completed,
    Failed,
    Cancelled,
}

/// An eval run.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EvalRun {
    /// `evr_...`.
    run_id: String,
    status: RunStatus,
    options: RunOptions,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    duration_ms: u64,
    summary: Summary,
    cases: Vec<CaseResult>,
    /// What broke the run, when its status is `failed`.
    error: Option<String>,
}

/// Case counts of a run.
#[derive(JsonSchema)]
struct EvalSummary {
    total: u64,
    passed: u64,
    failed: u64,
    /// Cancelled, or not finished yet.
    cancelled: u64,
}

/// Where one case of a run stands.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "CaseStatus")]
enum CaseStatusShape {
    Pending,
    Running,
    Passed,
    Failed,
    Cancelled,
}

/// One case of a run.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EvalCaseResult {
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
    iterations: Vec<IterationResult>,
    duration_ms: u64,
}

/// How one iteration ended.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "IterationStatus")]
enum IterationStatusShape {
    Passed,
    Failed,
    Timeout,
    Cancelled,
}

/// One iteration of a case.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EvalIteration {
    #[schemars(range(min = 1))]
    iteration: u64,
    status: IterationStatus,
    duration_ms: u64,
    failures: Vec<Failure>,
    scores: Vec<Score>,
    assertions: u64,
    turns: Vec<TurnSummary>,
    session_id: Option<SessionId>,
    /// Why the case body stopped early (a require form, expect_ok, a send
    /// error, the timeout, a cancel).
    stopped: Option<String>,
}

/// A judge's score.
#[derive(JsonSchema)]
struct EvalScore {
    name: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    value: f64,
}

/// One turn of an iteration.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EvalTurn {
    #[schemars(range(min = 1))]
    index: u64,
    prompt: String,
    message: String,
    ok: bool,
    tool_calls: Vec<String>,
}

/// A failed assertion.
#[derive(JsonSchema)]
struct EvalFailure {
    /// The assertion as written, like `calledTool("get_weather")`.
    assertion: String,
    /// `case`, or `turn N` for an assertion on one turn.
    scope: String,
    /// What went wrong.
    message: String,
    /// The event that broke it: the offending event, or the last one
    /// inspected when something expected never happened.
    event: Option<EventRef>,
}

/// The event an assertion failed on.
#[derive(JsonSchema)]
struct FailureEvent {
    index: u64,
    #[serde(rename = "type")]
    kind: String,
}

schema_by_shape!(RunOptions, RunOptionsShape);
schema_by_shape!(RunStatus, RunStatusShape);
schema_by_shape!(RunResult, EvalRun);
schema_by_shape!(Summary, EvalSummary);
schema_by_shape!(CaseStatus, CaseStatusShape);
schema_by_shape!(CaseResult, EvalCaseResult);
schema_by_shape!(IterationStatus, IterationStatusShape);
schema_by_shape!(IterationResult, EvalIteration);
schema_by_shape!(Score, EvalScore);
schema_by_shape!(TurnSummary, EvalTurn);
schema_by_shape!(Failure, EvalFailure);
schema_by_shape!(EventRef, FailureEvent);
