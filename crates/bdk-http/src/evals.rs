//! The eval routes the playground's Evals tab and remote tooling use:
//!
//! - `GET /v1/dev/evals`: the discovered cases and the eval config;
//! - `GET /v1/dev/evals/runs`: recent runs, newest first, and the active run;
//! - `POST /v1/dev/evals/runs`: start a run in the background (`202`), `404`
//!   when the selection matches no case, `409` while another run is active;
//! - `GET /v1/dev/evals/runs/{id}`: a run's live snapshot, then its result;
//! - `POST /v1/dev/evals/runs/{id}/cancel`: cancel the active run (`404`
//!   unknown, `409` already over).
//!
//! They are served with or without `--dev`, behind the app's auth chain.
//! Eval files are read on every request, so edits show up without a
//! restart. Runs go through `bdk-evals` against this agent's host; every
//! session they open carries purpose `eval`. The run history lives in
//! memory, capped by `max_playground_runs`, and in the store's key-value
//! space too when `persist_runs` is set.

pub(crate) mod state;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use bdk_core::{Diagnostic, Severity};
use bdk_evals::history::{CancelError, RunHistory};
use bdk_evals::runner::{
    self, CaseResult, IterationResult, Progress, RunOptions, RunResult, RunStatus, Runner,
};
use bdk_evals::target::HostTarget;
use bdk_evals::{EvalConfig, Suite};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::{Accepted, True};
use crate::auth::Caller;
use crate::described;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{JsonBody, PathParams};
use crate::state::Agent;

/// The cases discovered under `evals/` and the eval config.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "EvalList")]
pub(crate) struct EvalList {
    ok: True,
    #[schemars(with = "Vec<described::EvalCase>")]
    evals: Vec<Value>,
    config: ConfigView,
    diagnostics: Vec<Diagnostic>,
}

/// The eval config in force.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "EvalConfig")]
pub(crate) struct ConfigView {
    #[schemars(range(min = 1, max = 200))]
    max_concurrency: u32,
    timeout_ms: Option<u64>,
    /// The judge model, when the suite has one.
    judge: Option<String>,
    #[schemars(range(min = 1))]
    max_playground_runs: u32,
    persist_runs: bool,
    /// Whether this server keeps runs in its store.
    durable_runs: bool,
}

/// Recent eval runs, newest first.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "EvalRunList")]
pub(crate) struct RunList {
    ok: True,
    runs: Vec<RunResult>,
    /// The run in progress, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    active_run_id: Option<String>,
}

/// The run started; poll it by id.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "EvalRunStarted")]
pub(crate) struct RunStarted {
    ok: True,
    run_id: String,
    run: RunResult,
}

/// One eval run.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "EvalRunView")]
pub(crate) struct RunView {
    ok: True,
    run: RunResult,
}

/// The path of an eval run.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct RunPath {
    /// The run id (`evr_...`).
    id: String,
}

/// Most entries accepted in `filterIds` or `tags`.
const MAX_SELECTORS: usize = 500;
/// Longest accepted selector.
const MAX_SELECTOR_CHARS: usize = 300;
/// Largest accepted `timeoutMs` (one hour).
const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// How long the cancel route waits for the run to settle before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

fn config_view(config: Option<&EvalConfig>, durable: bool) -> ConfigView {
    let c = config.cloned().unwrap_or_default();
    ConfigView {
        max_concurrency: c.max_concurrency,
        timeout_ms: c.timeout_ms,
        judge: c.judge.map(|j| j.model),
        max_playground_runs: c.max_playground_runs,
        persist_runs: c.persist_runs,
        durable_runs: durable,
    }
}

fn suite_of(loaded: bdk_evals::spec::Loaded) -> Result<Option<Suite>, ApiError> {
    let errors: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    if errors.is_empty() {
        return Ok(loaded.suite);
    }
    Err(ApiError::new(
        ErrorCode::InvalidEvals,
        format!(
            "the eval files have {} error(s); run `bdk validate` or see `diagnostics`",
            errors.len()
        ),
    )
    .with_diagnostics(loaded.diagnostics))
}

/// `GET /v1/dev/evals`: `{ok, evals, config, diagnostics}`.
pub(crate) async fn list(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
) -> Result<Json<EvalList>, ApiError> {
    let loaded = agent.evals.load().await?;
    let config = loaded.suite.as_ref().map(|s| s.config.clone());
    let history = agent.evals.history(config.as_ref()).await;
    let evals = loaded
        .suite
        .as_ref()
        .map(|s| s.cases.iter().map(bdk_evals::CaseSpec::listing).collect())
        .unwrap_or_default();
    Ok(Json(EvalList {
        ok: True,
        evals,
        config: config_view(config.as_ref(), history.durable()),
        diagnostics: loaded.diagnostics,
    }))
}

/// `GET /v1/dev/evals/runs`: `{ok, runs, activeRunId?}`, newest first.
pub(crate) async fn runs(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
) -> Result<Json<RunList>, ApiError> {
    let history = match agent.evals.history.get() {
        Some(h) => Arc::clone(h),
        None => {
            let loaded = agent.evals.load().await?;
            agent
                .evals
                .history(loaded.suite.as_ref().map(|s| &s.config))
                .await
        }
    };
    let (runs, active) = history.list();
    Ok(Json(RunList {
        ok: True,
        runs,
        active_run_id: active,
    }))
}

/// Body of `POST /v1/dev/evals/runs`: the selection. Entries of
/// `filterIds` (case ids, or id prefixes ending at a `/`) and of `tags` are
/// alternatives; when both are given a case must match one of each.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "EvalRunRequest")]
pub(crate) struct StartBody {
    #[schemars(length(max = 500), inner(length(min = 1, max = 300)))]
    filter_ids: Option<Vec<String>>,
    #[schemars(length(max = 500), inner(length(min = 1, max = 300)))]
    tags: Option<Vec<String>>,
    /// Per-case timeout; a case's or file's own timeout wins.
    #[schemars(range(min = 1, max = 3_600_000))]
    timeout_ms: Option<u64>,
    /// Keep whole replies of passing turns.
    verbose: Option<bool>,
}

fn check_selectors(name: &str, values: &[String]) -> Result<(), ApiError> {
    if values.len() > MAX_SELECTORS {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{name} takes at most {MAX_SELECTORS} entries"),
        ));
    }
    if values.iter().any(|v| {
        v.is_empty() || v.chars().count() > MAX_SELECTOR_CHARS || v.chars().any(char::is_control)
    }) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "{name} entries must be 1-{MAX_SELECTOR_CHARS} characters without control characters"
            ),
        ));
    }
    Ok(())
}

/// Feeds runner progress into the history, for polling clients.
struct Snapshot {
    history: Arc<RunHistory>,
    run_id: String,
}

impl Progress for Snapshot {
    fn iteration_started(&self, case: &str, _iteration: u32) {
        self.history.iteration_started(&self.run_id, case);
    }
    fn iteration_finished(&self, case: &str, result: &IterationResult) {
        self.history.iteration_finished(&self.run_id, case, result);
    }
    fn case_finished(&self, result: &CaseResult) {
        self.history.case_finished(&self.run_id, result);
    }
}

/// `POST /v1/dev/evals/runs`: starts a run; `202 {ok, runId, run}`.
pub(crate) async fn start(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    JsonBody(body): JsonBody<StartBody>,
) -> Result<Accepted<RunStarted>, ApiError> {
    let filter_ids = body.filter_ids.unwrap_or_default();
    let tags = body.tags.unwrap_or_default();
    check_selectors("filterIds", &filter_ids)?;
    check_selectors("tags", &tags)?;
    if let Some(t) = body.timeout_ms
        && !(1..=MAX_TIMEOUT_MS).contains(&t)
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("timeoutMs must be between 1 and {MAX_TIMEOUT_MS}"),
        ));
    }
    let evals = &agent.evals;
    let Some(suite) = suite_of(evals.load().await?)? else {
        return Err(ApiError::new(
            ErrorCode::NoMatchingEvals,
            "this agent has no evals/ folder",
        ));
    };
    let opts = RunOptions {
        filter_ids,
        tags,
        timeout_ms: body.timeout_ms,
        verbose: body.verbose.unwrap_or(false),
    };
    let cases = runner::select(&suite.cases, &opts);
    if cases.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NoMatchingEvals,
            format!(
                "no eval case matches the selection ({} case(s) exist)",
                suite.cases.len()
            ),
        ));
    }
    let history = evals.history(Some(&suite.config)).await;
    let _starting = evals.starting.lock().await;
    let run_id = runner::new_run_id();
    let cancel = evals.shutdown.child_token();
    let snapshot = runner::RunResult::new(run_id.clone(), opts.clone(), &cases);
    if let Err(busy) = history.begin(snapshot.clone(), cancel.clone()).await {
        return Err(ApiError::new(
            ErrorCode::EvalRunActive,
            format!("eval run {} is still running; cancel it or wait", busy.0),
        )
        .with_active_run(busy.0));
    }
    let target = HostTarget::new(evals.host.clone()).with_principal(caller.principal.clone());
    let runner = Runner::new(suite.config.clone(), Arc::new(target))
        .judges(bdk_evals::project_judges((*evals.host.project()).clone()));
    let finished = evals.finished.clone();
    let progress = Snapshot {
        history: Arc::clone(&history),
        run_id: run_id.clone(),
    };
    // The run is owned by its cancel token, a child of the server's
    // shutdown token: cancel and shutdown both end it promptly.
    tokio::spawn(async move {
        let result = runner.run(run_id, cases, opts, cancel, &progress).await;
        history.finish(result).await;
        finished.send_modify(|n| *n = n.wrapping_add(1));
    });
    Ok(Accepted(RunStarted {
        ok: True,
        run_id: snapshot.run_id.clone(),
        run: snapshot,
    }))
}

async fn current_history(agent: &Agent) -> Result<Arc<RunHistory>, ApiError> {
    match agent.evals.history.get() {
        Some(h) => Ok(Arc::clone(h)),
        None => {
            let loaded = agent.evals.load().await?;
            Ok(agent
                .evals
                .history(loaded.suite.as_ref().map(|s| &s.config))
                .await)
        }
    }
}

fn run_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::EvalRunNotFound,
        format!("no eval run with id `{}`", crate_clip(id)),
    )
}

fn crate_clip(id: &str) -> String {
    bdk_evals::report::clip(id, 80)
}

/// `GET /v1/dev/evals/runs/{id}`: `{ok, run}`.
pub(crate) async fn run(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParams(RunPath { id }): PathParams<RunPath>,
) -> Result<Json<RunView>, ApiError> {
    let history = current_history(&agent).await?;
    match history.get(&id) {
        Some(run) => Ok(Json(RunView { ok: True, run })),
        None => Err(run_not_found(&id)),
    }
}

/// `POST /v1/dev/evals/runs/{id}/cancel`: cancels the active run and
/// answers `{ok, run}` once it settled (or after a short wait, still
/// `running`; poll the run route then).
pub(crate) async fn cancel(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParams(RunPath { id }): PathParams<RunPath>,
) -> Result<Json<RunView>, ApiError> {
    let history = current_history(&agent).await?;
    let mut finished = agent.evals.finished.subscribe();
    match history.cancel(&id) {
        Ok(()) => {}
        Err(CancelError::NotFound(_)) => return Err(run_not_found(&id)),
        Err(CancelError::NotRunning(_)) => {
            return Err(ApiError::new(
                ErrorCode::EvalRunFinished,
                format!("eval run `{}` is no longer running", crate_clip(&id)),
            ));
        }
    }
    let settled = async {
        loop {
            if history
                .get(&id)
                .is_none_or(|r| r.status != RunStatus::Running)
            {
                break;
            }
            if finished.changed().await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CANCEL_WAIT, settled).await;
    match history.get(&id) {
        Some(run) => Ok(Json(RunView { ok: True, run })),
        None => Err(run_not_found(&id)),
    }
}
