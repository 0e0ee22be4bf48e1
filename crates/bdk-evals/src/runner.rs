//! The runner: selects cases, runs every iteration under the concurrency
//! bound and its timeout, and folds the outcomes into a [`RunResult`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::assert::{Failure, Score};
use crate::case::{Case, CaseOutcome, TurnSummary};
use crate::judge::Judge;
use crate::spec::{CaseSpec, EvalConfig, JudgeSpec};
use crate::target::Target;

/// Used when neither the case, the command line nor the config sets a timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;

/// What to run and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunOptions {
    /// Case ids (or id prefixes ending at a `/`); any one may match.
    pub filter_ids: Vec<String>,
    /// Tags; any one may match. With ids too, a case must match both groups.
    pub tags: Vec<String>,
    /// Timeout from the command line (below a case's own, above the config's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Keep turn details of passing iterations in the result.
    pub verbose: bool,
}

/// True when `id` is selected by `filter` (the id itself, or a prefix ending at `/`).
fn id_matches(id: &str, filter: &str) -> bool {
    let f = filter.trim_end_matches('/');
    id == f || id.strip_prefix(f).is_some_and(|rest| rest.starts_with('/'))
}

/// The cases selected by `opts`: OR within ids and within tags, AND across the two.
pub fn select(cases: &[CaseSpec], opts: &RunOptions) -> Vec<CaseSpec> {
    cases
        .iter()
        .filter(|c| {
            opts.filter_ids.is_empty() || opts.filter_ids.iter().any(|f| id_matches(&c.id, f))
        })
        .filter(|c| opts.tags.is_empty() || opts.tags.iter().any(|t| c.tags.contains(t)))
        .cloned()
        .collect()
}

/// How one iteration ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IterationStatus {
    /// Every assertion held.
    Passed,
    /// An assertion failed or the body stopped.
    Failed,
    /// The case timed out.
    Timeout,
    /// The run was cancelled.
    Cancelled,
}

/// One iteration of a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IterationResult {
    /// 1-based.
    pub iteration: u32,
    /// How it ended.
    pub status: IterationStatus,
    /// Wall time.
    pub duration_ms: u64,
    /// Violated assertions.
    pub failures: Vec<Failure>,
    /// Recorded scores.
    pub scores: Vec<Score>,
    /// How many assertions ran.
    pub assertions: u32,
    /// The turns.
    pub turns: Vec<TurnSummary>,
    /// The eval session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Why the body stopped early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// The state of a case in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaseStatus {
    /// Not started.
    Pending,
    /// Some iteration is running.
    Running,
    /// Its pass rate met its minimum.
    Passed,
    /// It did not.
    Failed,
    /// The run was cancelled before it finished.
    Cancelled,
}

/// One case of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseResult {
    /// The case id.
    pub id: String,
    /// Its file, relative to the project root.
    pub file: String,
    /// What it checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its merged metadata.
    pub metadata: Value,
    /// Where it stands.
    pub status: CaseStatus,
    /// Passed iterations / iterations run.
    pub pass_rate: f64,
    /// The pass rate it needs.
    pub min_pass_rate: f64,
    /// Total iterations configured.
    pub iteration_count: u32,
    /// Finished iterations, in order.
    pub iterations: Vec<IterationResult>,
    /// Wall time of its slowest iteration.
    pub duration_ms: u64,
}

impl CaseResult {
    /// A case not started yet.
    pub fn pending(spec: &CaseSpec) -> CaseResult {
        CaseResult {
            id: spec.id.clone(),
            file: spec.file.clone(),
            description: spec.description.clone(),
            tags: spec.tags.clone(),
            metadata: spec.metadata.clone(),
            status: CaseStatus::Pending,
            pass_rate: 0.0,
            min_pass_rate: spec.min_pass_rate,
            iteration_count: spec.iterations,
            iterations: Vec::new(),
            duration_ms: 0,
        }
    }

    fn finish(&mut self) {
        self.iterations.sort_by_key(|i| i.iteration);
        let run = self.iterations.len();
        let passed = self
            .iterations
            .iter()
            .filter(|i| i.status == IterationStatus::Passed)
            .count();
        self.pass_rate = if run == 0 {
            0.0
        } else {
            passed as f64 / run as f64
        };
        self.duration_ms = self
            .iterations
            .iter()
            .map(|i| i.duration_ms)
            .max()
            .unwrap_or(0);
        self.status = if self
            .iterations
            .iter()
            .any(|i| i.status == IterationStatus::Cancelled)
            || run < self.iteration_count as usize
        {
            CaseStatus::Cancelled
        } else if self.pass_rate + 1e-9 >= self.min_pass_rate {
            CaseStatus::Passed
        } else {
            CaseStatus::Failed
        };
    }
}

/// Totals of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Selected cases.
    pub total: usize,
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Cancelled or never started.
    pub cancelled: usize,
}

/// The state of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Cases are running.
    Running,
    /// Every case ran (some may have failed: see the summary).
    Completed,
    /// The run itself broke (see `error`).
    Failed,
    /// The run was cancelled.
    Cancelled,
}

/// A run: live while it runs (the HTTP snapshot), final afterwards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// `evr_...`.
    pub run_id: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The selection and timeout it ran with.
    pub options: RunOptions,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Wall time so far.
    pub duration_ms: u64,
    /// Totals.
    pub summary: Summary,
    /// Every selected case, in id order.
    pub cases: Vec<CaseResult>,
    /// What broke the run, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunResult {
    /// A run about to start over `cases`.
    pub fn new(run_id: String, options: RunOptions, cases: &[CaseSpec]) -> RunResult {
        RunResult {
            run_id,
            status: RunStatus::Running,
            options,
            started_at: Utc::now(),
            finished_at: None,
            duration_ms: 0,
            summary: Summary {
                total: cases.len(),
                ..Summary::default()
            },
            cases: cases.iter().map(CaseResult::pending).collect(),
            error: None,
        }
    }

    /// True when every case passed.
    pub fn passed(&self) -> bool {
        self.status == RunStatus::Completed && self.summary.passed == self.summary.total
    }

    fn tally(&mut self) {
        let count = |s: CaseStatus| self.cases.iter().filter(|c| c.status == s).count();
        self.summary = Summary {
            total: self.cases.len(),
            passed: count(CaseStatus::Passed),
            failed: count(CaseStatus::Failed),
            cancelled: self.cases.len() - count(CaseStatus::Passed) - count(CaseStatus::Failed),
        };
    }
}

/// A fresh run id.
pub fn new_run_id() -> String {
    format!("evr_{}", uuid::Uuid::now_v7().simple())
}

/// Told about progress as the run goes. Called from the runner's task;
/// implementations must not block.
pub trait Progress: Send + Sync {
    /// An iteration started.
    fn iteration_started(&self, _case: &str, _iteration: u32) {}
    /// An iteration ended.
    fn iteration_finished(&self, _case: &str, _result: &IterationResult) {}
    /// Every iteration of a case ended.
    fn case_finished(&self, _result: &CaseResult) {}
}

/// Ignores progress.
pub struct Quiet;
impl Progress for Quiet {}

/// Resolves judge models by name.
pub type JudgeResolver = Arc<dyn Fn(&JudgeSpec) -> Result<Arc<Judge>, String> + Send + Sync>;

/// Runs cases against one target.
pub struct Runner {
    config: EvalConfig,
    target: Arc<dyn Target>,
    judges: Option<JudgeResolver>,
    cache: Mutex<HashMap<String, Arc<Judge>>>,
    /// A/B arms every case's session is pinned to, under the case's own.
    arms: BTreeMap<String, String>,
}

struct Unit {
    spec: CaseSpec,
    iteration: u32,
}

impl Runner {
    /// A runner with `config` (concurrency, default timeout) against `target`.
    pub fn new(config: EvalConfig, target: Arc<dyn Target>) -> Runner {
        Runner {
            config,
            target,
            judges: None,
            cache: Mutex::default(),
            arms: BTreeMap::new(),
        }
    }

    /// Pins every case's session to `arm` of `experiment` (a suite run per
    /// arm). A case that pins its own arm of the same experiment keeps it.
    pub fn pin_arm(mut self, experiment: impl Into<String>, arm: impl Into<String>) -> Runner {
        self.arms.insert(experiment.into(), arm.into());
        self
    }

    /// Resolves judge models through `resolver`.
    pub fn judges(mut self, resolver: JudgeResolver) -> Runner {
        self.judges = Some(resolver);
        self
    }

    fn judge_for(&self, spec: Option<&JudgeSpec>) -> Result<Option<Arc<Judge>>, String> {
        let Some(spec) = spec else { return Ok(None) };
        let Some(resolve) = &self.judges else {
            return Err(format!(
                "judge model {} cannot be resolved here",
                spec.model
            ));
        };
        let mut cache = match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(j) = cache.get(&spec.model) {
            return Ok(Some(Arc::clone(j)));
        }
        let j = resolve(spec)?;
        cache.insert(spec.model.clone(), Arc::clone(&j));
        Ok(Some(j))
    }

    /// The timeout of a case: its own (case or file), then the command
    /// line's, then the config's, then [`DEFAULT_TIMEOUT_MS`].
    pub fn timeout_for(&self, spec: &CaseSpec, opts: &RunOptions) -> Duration {
        Duration::from_millis(
            spec.timeout_ms
                .or(opts.timeout_ms)
                .or(self.config.timeout_ms)
                .unwrap_or(DEFAULT_TIMEOUT_MS),
        )
    }

    /// Runs `cases` (already selected) and returns the result. `cancel`
    /// stops everything promptly: running turns are stopped and unfinished
    /// cases are reported as cancelled.
    pub async fn run(
        &self,
        run_id: String,
        cases: Vec<CaseSpec>,
        opts: RunOptions,
        cancel: CancellationToken,
        progress: &dyn Progress,
    ) -> RunResult {
        let started = Instant::now();
        let mut result = RunResult::new(run_id, opts.clone(), &cases);
        let mut by_id: BTreeMap<String, CaseResult> = result
            .cases
            .iter()
            .map(|c| (c.id.clone(), c.clone()))
            .collect();
        let units: Vec<Unit> = cases
            .iter()
            .flat_map(|spec| {
                (1..=spec.iterations).map(move |iteration| Unit {
                    spec: spec.clone(),
                    iteration,
                })
            })
            .collect();
        let limit = self
            .config
            .max_concurrency
            .clamp(1, crate::spec::MAX_CONCURRENCY) as usize;
        let mut stream = futures::stream::iter(units)
            .map(|unit| {
                let cancel = cancel.clone();
                let opts = &opts;
                async move {
                    if cancel.is_cancelled() {
                        return (unit.spec.id.clone(), None);
                    }
                    progress.iteration_started(&unit.spec.id, unit.iteration);
                    let r = self.run_unit(&unit, opts, cancel).await;
                    progress.iteration_finished(&unit.spec.id, &r);
                    (unit.spec.id.clone(), Some(r))
                }
            })
            .buffer_unordered(limit);
        while let Some((id, r)) = stream.next().await {
            let Some(case) = by_id.get_mut(&id) else {
                continue;
            };
            let Some(r) = r else { continue };
            case.iterations.push(r);
            case.status = CaseStatus::Running;
            let done = case.iterations.len() >= case.iteration_count as usize;
            if done {
                case.finish();
                progress.case_finished(case);
            }
        }
        drop(stream);
        for case in by_id.values_mut() {
            if matches!(case.status, CaseStatus::Running | CaseStatus::Pending) {
                case.finish();
                progress.case_finished(case);
            }
        }
        result.cases = by_id.into_values().collect();
        result.tally();
        result.status = if cancel.is_cancelled() {
            RunStatus::Cancelled
        } else {
            RunStatus::Completed
        };
        result.finished_at = Some(Utc::now());
        result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if !opts.verbose {
            for c in &mut result.cases {
                for i in &mut c.iterations {
                    if i.status == IterationStatus::Passed {
                        for t in &mut i.turns {
                            t.message = crate::matcher::clip(&t.message, 200);
                        }
                    }
                }
            }
        }
        result
    }

    async fn run_unit(
        &self,
        unit: &Unit,
        opts: &RunOptions,
        cancel: CancellationToken,
    ) -> IterationResult {
        let started = Instant::now();
        let spec = &unit.spec;
        let elapsed = |s: Instant| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX);
        let judge = match self.judge_for(spec.judge.as_ref()) {
            Ok(j) => j,
            Err(e) => {
                return IterationResult {
                    iteration: unit.iteration,
                    status: IterationStatus::Failed,
                    duration_ms: elapsed(started),
                    failures: vec![Failure {
                        assertion: "judge".into(),
                        scope: "case".into(),
                        message: format!("the judge model cannot be used: {e}"),
                        event: None,
                    }],
                    scores: Vec::new(),
                    assertions: 0,
                    turns: Vec::new(),
                    session_id: None,
                    stopped: Some("judge model unavailable".into()),
                };
            }
        };
        let signal = cancel.child_token();
        let mut case = Case::new(spec.id.clone(), Arc::clone(&self.target), judge);
        let mut arms = self.arms.clone();
        arms.extend(spec.arms.iter().map(|(e, a)| (e.clone(), a.clone())));
        case.pin_arms(arms);
        case.set_run_values(
            unit.iteration,
            spec.iterations,
            signal.clone(),
            spec.metadata.clone(),
        );
        let timeout = self.timeout_for(spec, opts);
        let body = Arc::clone(&spec.body);
        let ended = {
            let fut = body(&mut case);
            tokio::select! {
                r = tokio::time::timeout(timeout, fut) => match r {
                    Ok(Ok(())) => None,
                    Ok(Err(stop)) => Some((IterationStatus::Failed, stop.reason)),
                    Err(_) => Some((IterationStatus::Timeout, format!("timed out after {} ms", timeout.as_millis()))),
                },
                () = cancel.cancelled() => Some((IterationStatus::Cancelled, "the run was cancelled".into())),
            }
        };
        // A case that ends with a call still waiting for approval leaves no
        // turn running behind it.
        if case.parked() {
            case.stop_turn().await;
        }
        let mut status = IterationStatus::Passed;
        if let Some((s, reason)) = ended {
            if s != IterationStatus::Failed {
                signal.cancel();
                case.stop_turn().await;
            }
            case.mark_stopped(reason);
            status = s;
        }
        let outcome: CaseOutcome = case.finish();
        if status == IterationStatus::Passed && !outcome.passed {
            status = IterationStatus::Failed;
        }
        IterationResult {
            iteration: unit.iteration,
            status,
            duration_ms: elapsed(started),
            failures: outcome.failures,
            scores: outcome.scores,
            assertions: outcome.assertions,
            turns: outcome.turns,
            session_id: outcome.session_id,
            stopped: outcome.stopped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, tags: &[&str]) -> CaseSpec {
        CaseSpec::new(id, |_c| Box::pin(async { Ok(()) })).tags(tags.iter().copied())
    }

    struct Nowhere;

    #[async_trait::async_trait]
    impl Target for Nowhere {
        async fn start(
            &self,
            _: &str,
            _: &str,
            _: &std::collections::BTreeMap<String, String>,
        ) -> Result<crate::target::Opened, crate::target::TargetError> {
            Err(crate::target::TargetError("unused".into()))
        }
        async fn follow_up(
            &self,
            _: &crate::target::Opened,
            _: &str,
            _: &std::collections::BTreeMap<String, String>,
        ) -> Result<crate::target::Opened, crate::target::TargetError> {
            Err(crate::target::TargetError("unused".into()))
        }
        async fn wait_turn(
            &self,
            _: &bdk_events::SessionId,
            _: &bdk_events::TurnId,
        ) -> Result<(), crate::target::TargetError> {
            Ok(())
        }
        async fn events(
            &self,
            _: &bdk_events::SessionId,
        ) -> Result<Vec<bdk_events::Envelope>, crate::target::TargetError> {
            Ok(Vec::new())
        }
        async fn stop(&self, _: &bdk_events::SessionId) {}
    }

    #[test]
    fn timeouts_take_the_case_then_the_command_line_then_the_config() {
        let config = EvalConfig {
            timeout_ms: Some(3000),
            ..EvalConfig::default()
        };
        let runner = Runner::new(config, Arc::new(Nowhere));
        let cli = RunOptions {
            timeout_ms: Some(2000),
            ..RunOptions::default()
        };
        let own = spec("a", &[]).timeout_ms(1000);
        let plain = spec("b", &[]);
        let ms = |d: Duration| d.as_millis();
        assert_eq!(ms(runner.timeout_for(&own, &cli)), 1000);
        assert_eq!(ms(runner.timeout_for(&plain, &cli)), 2000);
        assert_eq!(ms(runner.timeout_for(&plain, &RunOptions::default())), 3000);
        let bare = Runner::new(EvalConfig::default(), Arc::new(Nowhere));
        assert_eq!(
            ms(bare.timeout_for(&plain, &RunOptions::default())),
            u128::from(DEFAULT_TIMEOUT_MS)
        );
    }

    #[test]
    fn filters_are_or_within_a_field_and_and_across() {
        let cases = vec![
            spec("a/one", &["x"]),
            spec("a/two", &["y"]),
            spec("b/one", &["x", "y"]),
            spec("ab/one", &["x"]),
        ];
        let ids = |o: RunOptions| -> Vec<String> {
            select(&cases, &o).into_iter().map(|c| c.id).collect()
        };
        assert_eq!(ids(RunOptions::default()).len(), 4);
        assert_eq!(
            ids(RunOptions {
                filter_ids: vec!["a".into()],
                ..Default::default()
            }),
            ["a/one", "a/two"]
        );
        assert_eq!(
            ids(RunOptions {
                tags: vec!["y".into()],
                ..Default::default()
            }),
            ["a/two", "b/one"]
        );
        assert_eq!(
            ids(RunOptions {
                filter_ids: vec!["a/one".into(), "b".into()],
                tags: vec!["y".into()],
                ..Default::default()
            }),
            ["b/one"]
        );
        assert!(
            ids(RunOptions {
                filter_ids: vec!["zzz".into()],
                ..Default::default()
            })
            .is_empty()
        );
    }
}
