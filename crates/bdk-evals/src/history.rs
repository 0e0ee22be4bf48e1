//! The run history a server keeps: at most one active run, the recent runs
//! newest first, capped by `max_playground_runs`. With `persist_runs` each
//! run is also written to the store's key-value space (namespace
//! [`RUNS_NAMESPACE`]), so any store engine keeps them across restarts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bdk_store::Store;
use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::runner::{CaseResult, CaseStatus, IterationResult, RunResult, RunStatus};

/// The kv namespace of persisted runs.
pub const RUNS_NAMESPACE: &str = "eval-runs";

/// Why a run cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("eval run {0} is still running")]
pub struct Busy(pub String);

/// Why a run cannot be cancelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// No such run.
    #[error("no eval run with id {0}")]
    NotFound(String),
    /// It already ended.
    #[error("eval run {0} is no longer running")]
    NotRunning(String),
}

struct Inner {
    runs: VecDeque<RunResult>,
    active: Option<(String, CancellationToken)>,
}

/// The history of one agent's eval runs.
pub struct RunHistory {
    store: Option<Arc<dyn Store>>,
    cap: usize,
    inner: Mutex<Inner>,
}

impl RunHistory {
    /// Opens the history. With a store, persisted runs are loaded (a run
    /// left `running` by a process that died is marked failed).
    pub async fn open(store: Option<Arc<dyn Store>>, cap: u32) -> RunHistory {
        let cap = cap.max(1) as usize;
        let mut runs: Vec<RunResult> = Vec::new();
        if let Some(s) = &store {
            match s.kv_list(RUNS_NAMESPACE, "").await {
                Ok(keys) => {
                    for key in keys {
                        match s.kv_get(RUNS_NAMESPACE, &key).await {
                            Ok(Some(v)) => match serde_json::from_value::<RunResult>(v) {
                                Ok(mut run) => {
                                    if run.status == RunStatus::Running {
                                        run.status = RunStatus::Failed;
                                        run.error = Some(
                                            "the server stopped while this run was in progress"
                                                .into(),
                                        );
                                        run.finished_at = Some(Utc::now());
                                    }
                                    runs.push(run);
                                }
                                Err(e) => {
                                    tracing::warn!(key = %key, error = %e, "skipping an unreadable eval run")
                                }
                            },
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(key = %key, error = %e, "failed to read an eval run")
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "failed to list persisted eval runs"),
            }
        }
        runs.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        let history = RunHistory {
            store,
            cap,
            inner: Mutex::new(Inner {
                runs: runs.into_iter().collect(),
                active: None,
            }),
        };
        let dropped = history.with(|i| {
            let mut out = Vec::new();
            while i.runs.len() > cap {
                if let Some(r) = i.runs.pop_back() {
                    out.push(r.run_id);
                }
            }
            out
        });
        history.forget(dropped).await;
        history
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Whether runs are persisted.
    pub fn durable(&self) -> bool {
        self.store.is_some()
    }

    /// Registers a new active run, or refuses while another one runs.
    pub async fn begin(&self, run: RunResult, cancel: CancellationToken) -> Result<(), Busy> {
        let dropped = self.with(|i| {
            if let Some((id, _)) = &i.active {
                return Err(Busy(id.clone()));
            }
            i.active = Some((run.run_id.clone(), cancel));
            i.runs.push_front(run.clone());
            let mut out = Vec::new();
            while i.runs.len() > self.cap {
                if let Some(r) = i.runs.pop_back() {
                    out.push(r.run_id);
                }
            }
            Ok(out)
        })?;
        self.forget(dropped).await;
        self.persist(&run).await;
        Ok(())
    }

    /// Records progress of the active run.
    pub fn iteration_started(&self, run_id: &str, case: &str) {
        self.update(run_id, |r| {
            if let Some(c) = r.cases.iter_mut().find(|c| c.id == case)
                && c.status == CaseStatus::Pending
            {
                c.status = CaseStatus::Running;
            }
        });
    }

    /// Records a finished iteration of the active run.
    pub fn iteration_finished(&self, run_id: &str, case: &str, it: &IterationResult) {
        self.update(run_id, |r| {
            if let Some(c) = r.cases.iter_mut().find(|c| c.id == case) {
                c.iterations.push(it.clone());
            }
        });
    }

    /// Records a finished case of the active run.
    pub fn case_finished(&self, run_id: &str, case: &CaseResult) {
        self.update(run_id, |r| {
            if let Some(c) = r.cases.iter_mut().find(|c| c.id == case.id) {
                *c = case.clone();
            }
            let count = |s: CaseStatus| r.cases.iter().filter(|c| c.status == s).count();
            r.summary.passed = count(CaseStatus::Passed);
            r.summary.failed = count(CaseStatus::Failed);
            r.summary.cancelled = count(CaseStatus::Cancelled);
        });
    }

    fn update(&self, run_id: &str, f: impl FnOnce(&mut RunResult)) {
        self.with(|i| {
            if let Some(r) = i.runs.iter_mut().find(|r| r.run_id == run_id) {
                f(r);
                r.duration_ms =
                    u64::try_from((Utc::now() - r.started_at).num_milliseconds()).unwrap_or(0);
            }
        });
    }

    /// Stores the final result and frees the active slot.
    pub async fn finish(&self, run: RunResult) {
        self.with(|i| {
            if let Some(r) = i.runs.iter_mut().find(|r| r.run_id == run.run_id) {
                *r = run.clone();
            }
            if i.active.as_ref().is_some_and(|(id, _)| *id == run.run_id) {
                i.active = None;
            }
        });
        self.persist(&run).await;
    }

    /// One run.
    pub fn get(&self, run_id: &str) -> Option<RunResult> {
        self.with(|i| i.runs.iter().find(|r| r.run_id == run_id).cloned())
    }

    /// Recent runs, newest first, and the active run's id.
    pub fn list(&self) -> (Vec<RunResult>, Option<String>) {
        self.with(|i| {
            (
                i.runs.iter().cloned().collect(),
                i.active.as_ref().map(|(id, _)| id.clone()),
            )
        })
    }

    /// Cancels the active run `run_id`.
    pub fn cancel(&self, run_id: &str) -> Result<(), CancelError> {
        self.with(|i| {
            if let Some((id, token)) = &i.active
                && id == run_id
            {
                token.cancel();
                return Ok(());
            }
            if i.runs.iter().any(|r| r.run_id == run_id) {
                Err(CancelError::NotRunning(run_id.to_owned()))
            } else {
                Err(CancelError::NotFound(run_id.to_owned()))
            }
        })
    }

    async fn persist(&self, run: &RunResult) {
        let Some(s) = &self.store else { return };
        match serde_json::to_value(run) {
            Ok(v) => {
                if let Err(e) = s.kv_put(RUNS_NAMESPACE, &run.run_id, v).await {
                    tracing::warn!(run_id = %run.run_id, error = %e, "failed to persist an eval run");
                }
            }
            Err(e) => {
                tracing::warn!(run_id = %run.run_id, error = %e, "failed to encode an eval run")
            }
        }
    }

    async fn forget(&self, ids: Vec<String>) {
        let Some(s) = &self.store else { return };
        for id in ids {
            if let Err(e) = s.kv_delete(RUNS_NAMESPACE, &id).await {
                tracing::warn!(run_id = %id, error = %e, "failed to drop an old eval run");
            }
        }
    }
}
