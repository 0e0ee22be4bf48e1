//! The declarative form: `evals/evals.toml` and `evals/**/*.eval.toml`.
//!
//! Files are parsed and checked in full before anything runs; every problem
//! becomes a [`Diagnostic`] naming the file (and line when TOML knows it)
//! and the fix. A case in a file compiles into the same [`CaseBody`] a Rust
//! author would write by hand: each step is a [`Case::send`], each
//! expectation the `Assertion` value the Rust method of the same name builds
//! (`assert/assertion.rs`), checked by the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdk_project::rel_path;
use bdk_project::{Diagnostic, Severity};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::assert::{Assertion, EventDef, Stop};
use crate::case::{Case, SendOptions, Turn};

/// The body of a case: what a Rust author writes, and what a file compiles to.
pub type CaseBody =
    Arc<dyn for<'a> Fn(&'a mut Case) -> BoxFuture<'a, Result<(), Stop>> + Send + Sync>;

/// Largest accepted `max_concurrency`.
pub const MAX_CONCURRENCY: u32 = 200;
/// Default `max_playground_runs`.
pub const DEFAULT_PLAYGROUND_RUNS: u32 = 20;
/// Largest accepted `iterations`.
pub const MAX_ITERATIONS: u32 = 1000;

/// The judge model of a config, file or case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    /// `provider/model`, resolved like the agent's model.
    pub model: String,
}

/// A reporter that writes a file when the run ends.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReporterSpec {
    /// `json` or `junit`.
    #[serde(rename = "type")]
    pub kind: ReporterKind,
    /// Where to write, relative to the project root.
    pub path: String,
}

/// The file reporters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReporterKind {
    /// The run result as JSON.
    Json,
    /// JUnit XML.
    Junit,
}

/// `evals/evals.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Cases (and iterations) running at once, 1-200. Required.
    pub max_concurrency: u32,
    /// Default per-case timeout.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Default judge.
    #[serde(default)]
    pub judge: Option<JudgeSpec>,
    /// Reporters of every run.
    #[serde(default)]
    pub reporters: Vec<ReporterSpec>,
    /// Runs kept in the server's history.
    #[serde(default = "default_playground_runs")]
    pub max_playground_runs: u32,
    /// Keep server runs in the store (they survive restarts).
    #[serde(default)]
    pub persist_runs: bool,
}

fn default_playground_runs() -> u32 {
    DEFAULT_PLAYGROUND_RUNS
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            max_concurrency: 4,
            timeout_ms: None,
            judge: None,
            reporters: Vec::new(),
            max_playground_runs: DEFAULT_PLAYGROUND_RUNS,
            persist_runs: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDef {
    description: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    timeout_ms: Option<u64>,
    iterations: Option<u32>,
    judge: Option<JudgeSpec>,
    #[serde(default)]
    reporters: Vec<ReporterSpec>,
    #[serde(default)]
    cases: Vec<toml::Spanned<CaseDef>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseDef {
    name: String,
    description: Option<String>,
    tags: Option<Vec<String>>,
    metadata: Option<serde_json::Map<String, Value>>,
    timeout_ms: Option<u64>,
    iterations: Option<u32>,
    min_pass_rate: Option<f64>,
    judge: Option<JudgeSpec>,
    #[serde(default)]
    reporters: Vec<ReporterSpec>,
    #[serde(default)]
    steps: Vec<StepDef>,
    #[serde(default)]
    expect: Vec<FileAssertion>,
    /// Pins the session to one arm of an A/B experiment.
    arm: Option<ArmPinDef>,
}

/// `arm = { experiment = "...", arm = "..." }` in a case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArmPinDef {
    experiment: String,
    arm: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepDef {
    send: Option<String>,
    approve: Option<String>,
    deny: Option<String>,
    reason: Option<String>,
    #[serde(default)]
    workspace_files: BTreeMap<String, String>,
    #[serde(default)]
    expect_ok: bool,
    #[serde(default)]
    expect: Vec<FileAssertion>,
}

/// An assertion as a file writes it, before [`Assertion::compile`].
type FileAssertion = Assertion<Value, EventDef>;

async fn apply_turn(a: &Assertion, t: &Turn) -> Result<(), Stop> {
    if let Assertion::Judge { rubric, threshold } = a {
        t.judge(rubric, *threshold).await;
        return Ok(());
    }
    crate::assert::apply(t, a, &t.message, 1)
}

async fn apply_case(a: &Assertion, c: &Case) -> Result<(), Stop> {
    if let Assertion::Judge { rubric, threshold } = a {
        c.judge(rubric, *threshold).await;
        return Ok(());
    }
    crate::assert::apply(c, a, c.reply(), c.turns().len())
}

struct StepPlan {
    action: StepAction,
    expect_ok: bool,
    expect: Vec<Assertion>,
}

/// What a step does before its assertions.
enum StepAction {
    /// Sends a message (the first opens the session).
    Send {
        message: String,
        files: BTreeMap<String, String>,
    },
    /// Approves or denies a parked call of the last turn, by tool name or
    /// call id.
    Resolve {
        call: String,
        approved: bool,
        reason: Option<String>,
    },
}

fn body_of(steps: Vec<StepPlan>, expect: Vec<Assertion>) -> CaseBody {
    let plan = Arc::new((steps, expect));
    Arc::new(move |case: &mut Case| {
        let plan = Arc::clone(&plan);
        Box::pin(async move {
            let (steps, expect) = &*plan;
            for step in steps {
                let turn = match &step.action {
                    StepAction::Send { message, files } => {
                        case.send_with(
                            message,
                            SendOptions {
                                workspace_files: files.clone(),
                            },
                        )
                        .await?
                    }
                    StepAction::Resolve {
                        call,
                        approved: true,
                        ..
                    } => case.approve(call).await?,
                    StepAction::Resolve {
                        call,
                        approved: false,
                        reason,
                    } => case.deny(call, reason.as_deref()).await?,
                };
                for a in &step.expect {
                    apply_turn(a, &turn).await?;
                }
                if step.expect_ok {
                    turn.expect_ok()?;
                }
            }
            for a in expect {
                apply_case(a, case).await?;
            }
            Ok(())
        })
    })
}

/// One case, from a file or from Rust.
#[derive(Clone)]
pub struct CaseSpec {
    /// `path/under/evals/<case name>` (no `.eval.toml`).
    pub id: String,
    /// The file it came from, relative to the project root (empty for Rust cases).
    pub file: String,
    /// What it checks.
    pub description: Option<String>,
    /// Tags for filtering.
    pub tags: Vec<String>,
    /// File metadata with the case's merged over it.
    pub metadata: Value,
    /// Timeout (case over file).
    pub timeout_ms: Option<u64>,
    /// How many times it runs.
    pub iterations: u32,
    /// The share of iterations that must pass (default 1).
    pub min_pass_rate: f64,
    /// Judge (case over file over config).
    pub judge: Option<JudgeSpec>,
    /// Reporters (file's plus case's; config reporters always apply).
    pub reporters: Vec<ReporterSpec>,
    /// Messages sent, in order (for listings).
    pub messages: Vec<String>,
    /// A/B arms the case's session is pinned to: experiment -> arm (a
    /// file case's `arm`; checked against the project's experiments).
    pub arms: BTreeMap<String, String>,
    /// What runs.
    pub body: CaseBody,
}

impl std::fmt::Debug for CaseSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaseSpec")
            .field("id", &self.id)
            .field("tags", &self.tags)
            .finish_non_exhaustive()
    }
}

impl CaseSpec {
    /// A Rust-authored case.
    pub fn new(
        id: impl Into<String>,
        body: impl for<'a> Fn(&'a mut Case) -> BoxFuture<'a, Result<(), Stop>> + Send + Sync + 'static,
    ) -> CaseSpec {
        CaseSpec {
            id: id.into(),
            file: String::new(),
            description: None,
            tags: Vec::new(),
            metadata: Value::Object(serde_json::Map::new()),
            timeout_ms: None,
            iterations: 1,
            min_pass_rate: 1.0,
            judge: None,
            reporters: Vec::new(),
            messages: Vec::new(),
            arms: BTreeMap::new(),
            body: Arc::new(body),
        }
    }

    /// Pins the case's session to `arm` of `experiment`.
    pub fn arm(mut self, experiment: impl Into<String>, arm: impl Into<String>) -> CaseSpec {
        self.arms.insert(experiment.into(), arm.into());
        self
    }

    /// With tags.
    pub fn tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> CaseSpec {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// With iterations.
    pub fn iterations(mut self, n: u32) -> CaseSpec {
        self.iterations = n.max(1);
        self
    }

    /// With a timeout.
    pub fn timeout_ms(mut self, ms: u64) -> CaseSpec {
        self.timeout_ms = Some(ms);
        self
    }

    /// The listing shape (`GET /v1/dev/evals`).
    pub fn listing(&self) -> Value {
        json!({
            "id": self.id,
            "file": self.file,
            "description": self.description,
            "tags": self.tags,
            "metadata": self.metadata,
            "timeoutMs": self.timeout_ms,
            "iterations": self.iterations,
            "minPassRate": self.min_pass_rate,
            "judge": self.judge.as_ref().map(|j| &j.model),
            "messages": self.messages,
            "arms": self.arms,
        })
    }
}

/// Every case of a project, with its config.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The project root.
    pub root: PathBuf,
    /// `evals/evals.toml` (defaults when the suite is built in Rust).
    pub config: EvalConfig,
    /// Cases sorted by id.
    pub cases: Vec<CaseSpec>,
}

/// The result of [`load`]: the suite when there were no errors, and every problem found.
#[derive(Debug)]
pub struct Loaded {
    /// The suite (`None` when an error was found, or there is no `evals/`).
    pub suite: Option<Suite>,
    /// Every problem, errors and warnings.
    pub diagnostics: Vec<Diagnostic>,
}

struct Diags<'a> {
    root: &'a Path,
    list: Vec<Diagnostic>,
}

impl Diags<'_> {
    fn error(&mut self, file: &Path, message: impl Into<String>, fix: impl Into<String>) {
        self.push(Severity::Error, file, message.into(), fix.into());
    }
    fn warn(&mut self, file: &Path, message: impl Into<String>, fix: impl Into<String>) {
        self.push(Severity::Warning, file, message.into(), fix.into());
    }
    fn push(&mut self, severity: Severity, file: &Path, message: String, fix: String) {
        self.list.push(Diagnostic {
            severity,
            file: rel_path(self.root, file),
            message,
            fix,
        });
    }
    fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }
}

fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
    format!(
        "invalid TOML at line {line}, column {col}: {}",
        crate::matcher::one_line(e.message())
    )
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && name.len() <= 100
        && chars.all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Reads the project's `evals/` folder. No folder: no suite and no
/// diagnostics. Anything wrong is reported; the suite is returned only when
/// there are no errors.
pub fn load(project_root: &Path) -> Loaded {
    let dir = project_root.join("evals");
    let mut d = Diags {
        root: project_root,
        list: Vec::new(),
    };
    if !dir.is_dir() {
        return Loaded {
            suite: None,
            diagnostics: Vec::new(),
        };
    }
    let mut files = Vec::new();
    walk(&dir, &mut files, &mut d);
    files.sort();

    let config_path = dir.join("evals.toml");
    let config = if config_path.is_file() {
        read_config(&config_path, &mut d)
    } else {
        if !files.is_empty() {
            d.error(
                &config_path,
                "evals/evals.toml is missing; it is required when eval files exist",
                "create evals/evals.toml with at least `max_concurrency = 4`",
            );
        }
        None
    };

    let mut cases = Vec::new();
    let mut ids = BTreeSet::new();
    for file in &files {
        for case in read_file(&dir, file, config.as_ref(), &mut d) {
            if !ids.insert(case.id.clone()) {
                d.error(
                    file,
                    format!("duplicate case id `{}`", case.id),
                    "give every case in a file its own name",
                );
            }
            cases.push(case);
        }
    }
    cases.sort_by(|a, b| a.id.cmp(&b.id));
    check_arms(project_root, &cases, &mut d);
    let suite = match config {
        Some(config) if !d.has_errors() => Some(Suite {
            root: project_root.to_path_buf(),
            config,
            cases,
        }),
        _ => None,
    };
    Loaded {
        suite,
        diagnostics: d.list,
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, d: &mut Diags<'_>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            d.error(
                dir,
                format!("cannot read the folder: {e}"),
                "check its permissions",
            );
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&path, out, d);
        } else if name.ends_with(".eval.toml") {
            out.push(path);
        } else if !(name == "evals.toml" && path.parent() == Some(d.root.join("evals").as_path())) {
            d.warn(
                &path,
                "not an eval file; it is ignored",
                "name eval files `<name>.eval.toml`, or move this file out of evals/",
            );
        }
    }
}

fn read_config(path: &Path, d: &mut Diags<'_>) -> Option<EvalConfig> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            d.error(
                path,
                format!("cannot read: {e}"),
                "make the file readable UTF-8",
            );
            return None;
        }
    };
    let config: EvalConfig = match toml::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            d.error(
                path,
                toml_error(&text, &e),
                "fix the TOML; keys: max_concurrency (required), timeout_ms, judge.model, reporters, max_playground_runs, persist_runs",
            );
            return None;
        }
    };
    let mut ok = true;
    if !(1..=MAX_CONCURRENCY).contains(&config.max_concurrency) {
        d.error(
            path,
            format!(
                "max_concurrency is {}, outside 1-{MAX_CONCURRENCY}",
                config.max_concurrency
            ),
            "set max_concurrency between 1 and 200",
        );
        ok = false;
    }
    if config.timeout_ms == Some(0) {
        d.error(
            path,
            "timeout_ms must be positive",
            "remove timeout_ms or set it above 0",
        );
        ok = false;
    }
    if config.max_playground_runs == 0 {
        d.error(
            path,
            "max_playground_runs must be at least 1",
            "remove it (default 20) or set it above 0",
        );
        ok = false;
    }
    ok &= check_judge(config.judge.as_ref(), path, d);
    ok &= check_reporters(&config.reporters, path, d);
    ok.then_some(config)
}

fn check_judge(j: Option<&JudgeSpec>, path: &Path, d: &mut Diags<'_>) -> bool {
    match j {
        Some(j) if j.model.trim().is_empty() => {
            d.error(
                path,
                "judge.model is empty",
                "name a model, like `scripted` or `xai/grok-4`",
            );
            false
        }
        _ => true,
    }
}

fn check_reporters(r: &[ReporterSpec], path: &Path, d: &mut Diags<'_>) -> bool {
    let mut ok = true;
    for rep in r {
        let p = Path::new(&rep.path);
        if rep.path.is_empty()
            || p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            d.error(
                path,
                format!(
                    "reporter path `{}` must be relative to the project and stay inside it",
                    rep.path
                ),
                "use a path like `reports/evals.xml`",
            );
            ok = false;
        }
    }
    ok
}

fn merge_metadata(
    base: &serde_json::Map<String, Value>,
    over: Option<&serde_json::Map<String, Value>>,
) -> Value {
    let mut out = base.clone();
    if let Some(over) = over {
        for (k, v) in over {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn read_file(
    evals_dir: &Path,
    path: &Path,
    config: Option<&EvalConfig>,
    d: &mut Diags<'_>,
) -> Vec<CaseSpec> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            d.error(
                path,
                format!("cannot read: {e}"),
                "make the file readable UTF-8",
            );
            return Vec::new();
        }
    };
    let file: FileDef = match toml::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            d.error(
                path,
                toml_error(&text, &e),
                "fix the TOML; see docs/evals.md for the case format",
            );
            return Vec::new();
        }
    };
    let rel = rel_path(evals_dir, path);
    let stem = rel.strip_suffix(".eval.toml").unwrap_or(&rel).to_owned();
    if file.cases.is_empty() {
        d.warn(
            path,
            "the file has no [[cases]]",
            "add a [[cases]] table or delete the file",
        );
    }
    if file.iterations == Some(0) || file.iterations.is_some_and(|n| n > MAX_ITERATIONS) {
        d.error(
            path,
            format!("iterations must be 1-{MAX_ITERATIONS}"),
            "fix iterations",
        );
    }
    if file.timeout_ms == Some(0) {
        d.error(
            path,
            "timeout_ms must be positive",
            "remove timeout_ms or set it above 0",
        );
    }
    check_judge(file.judge.as_ref(), path, d);
    check_reporters(&file.reporters, path, d);
    let file_meta = file.metadata.clone().unwrap_or_default();
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for spanned in file.cases {
        let (line, _) = line_col(&text, spanned.span().start);
        let c = spanned.into_inner();
        let at = |m: String| format!("case `{}` (line {line}): {m}", c.name);
        if !valid_name(&c.name) {
            d.error(
                path,
                at("name must be 1-100 characters of [A-Za-z0-9._-], starting with a letter or digit".into()),
                "rename the case",
            );
            continue;
        }
        if !names.insert(c.name.clone()) {
            d.error(
                path,
                at("another case in this file has the same name".into()),
                "rename one of them",
            );
            continue;
        }
        if c.steps.is_empty() {
            d.error(
                path,
                at("the case has no [[cases.steps]]".into()),
                "add a step with `send = \"...\"`",
            );
            continue;
        }
        if c.iterations == Some(0) || c.iterations.is_some_and(|n| n > MAX_ITERATIONS) {
            d.error(
                path,
                at(format!("iterations must be 1-{MAX_ITERATIONS}")),
                "fix iterations",
            );
            continue;
        }
        if c.timeout_ms == Some(0) {
            d.error(
                path,
                at("timeout_ms must be positive".into()),
                "remove timeout_ms or set it above 0",
            );
            continue;
        }
        if let Some(r) = c.min_pass_rate
            && !(0.0..=1.0).contains(&r)
        {
            d.error(
                path,
                at(format!("min_pass_rate {r} is outside 0..=1")),
                "use a share like 0.8",
            );
            continue;
        }
        if !check_judge(c.judge.as_ref(), path, d) || !check_reporters(&c.reporters, path, d) {
            continue;
        }
        let mut failed = false;
        let mut uses_judge = false;
        let mut compile_all =
            |defs: &[FileAssertion], where_: &str, d: &mut Diags<'_>| -> Vec<Assertion> {
                let mut v = Vec::new();
                for (i, a) in defs.iter().enumerate() {
                    match a.clone().compile() {
                        Ok(c2) => {
                            uses_judge |= matches!(c2, Assertion::Judge { .. });
                            v.push(c2);
                        }
                        Err(m) => {
                            failed = true;
                            d.error(
                                path,
                                at(format!("{where_}expect[{i}]: {m}")),
                                "fix the assertion (see docs/evals.md)",
                            );
                        }
                    }
                }
                v
            };
        let mut steps = Vec::new();
        let mut messages = Vec::new();
        let mut empty_send = false;
        for (i, s) in c.steps.iter().enumerate() {
            let action = match (&s.send, &s.approve, &s.deny) {
                (Some(send), None, None) => {
                    if send.trim().is_empty() {
                        d.error(
                            path,
                            at(format!("steps[{i}].send is empty")),
                            "give the step a message",
                        );
                        empty_send = true;
                    }
                    if s.reason.is_some() {
                        d.error(
                            path,
                            at(format!(
                                "steps[{i}].reason goes with approve or deny, not send"
                            )),
                            "remove reason, or make the step an approve or deny step",
                        );
                        empty_send = true;
                    }
                    messages.push(send.clone());
                    StepAction::Send {
                        message: send.clone(),
                        files: s.workspace_files.clone(),
                    }
                }
                (None, Some(call), None) | (None, None, Some(call)) => {
                    if i == 0 {
                        d.error(
                            path,
                            at(format!("steps[{i}] resolves an approval before any send")),
                            "start the case with a `send` step that makes the agent call the tool",
                        );
                        empty_send = true;
                    }
                    if call.trim().is_empty() || !s.workspace_files.is_empty() {
                        d.error(
                            path,
                            at(format!("steps[{i}]: approve or deny names a tool (or call id) and takes no workspace_files")),
                            "write `approve = \"<tool>\"` or `deny = \"<tool>\"`",
                        );
                        empty_send = true;
                    }
                    StepAction::Resolve {
                        call: call.clone(),
                        approved: s.approve.is_some(),
                        reason: s.reason.clone(),
                    }
                }
                _ => {
                    d.error(
                        path,
                        at(format!("steps[{i}] needs exactly one of send, approve or deny")),
                        "give the step `send = \"...\"`, or `approve`/`deny` with the tool whose call waits",
                    );
                    empty_send = true;
                    continue;
                }
            };
            let expect = compile_all(&s.expect, &format!("steps[{i}]."), d);
            steps.push(StepPlan {
                action,
                expect_ok: s.expect_ok,
                expect,
            });
        }
        let expect = compile_all(&c.expect, "", d);
        failed |= empty_send;
        let judge = c
            .judge
            .clone()
            .or_else(|| file.judge.clone())
            .or_else(|| config.and_then(|cfg| cfg.judge.clone()));
        if uses_judge && judge.is_none() {
            d.error(
                path,
                at("uses a judge assertion but no judge model is configured".into()),
                "set [judge] model in evals/evals.toml, or judge = { model = \"...\" } in the file or case",
            );
            failed = true;
        }
        if failed {
            continue;
        }
        let mut reporters = file.reporters.clone();
        reporters.extend(c.reporters.iter().cloned());
        out.push(CaseSpec {
            id: format!("{stem}/{}", c.name),
            file: rel_path(d.root, path),
            description: c.description.clone().or_else(|| file.description.clone()),
            tags: c
                .tags
                .clone()
                .or_else(|| file.tags.clone())
                .unwrap_or_default(),
            metadata: merge_metadata(&file_meta, c.metadata.as_ref()),
            timeout_ms: c.timeout_ms.or(file.timeout_ms),
            iterations: c.iterations.or(file.iterations).unwrap_or(1),
            min_pass_rate: c.min_pass_rate.unwrap_or(1.0),
            judge,
            reporters,
            messages,
            arms: c
                .arm
                .iter()
                .map(|p| (p.experiment.clone(), p.arm.clone()))
                .collect(),
            body: body_of(steps, expect),
        });
    }
    out
}

/// Checks the arms cases pin against the project's experiments (discovered
/// here only when some case pins one): an unknown experiment or arm is an
/// error on the case's file.
fn check_arms(project_root: &Path, cases: &[CaseSpec], d: &mut Diags<'_>) {
    if cases.iter().all(|c| c.arms.is_empty()) {
        return;
    }
    let project = bdk_project::discover(project_root).project;
    for case in cases {
        for (experiment, arm) in &case.arms {
            let file = project_root.join(&case.file);
            let found = project.as_ref().and_then(|p| p.experiment(experiment));
            match found {
                None => d.error(
                    &file,
                    format!(
                        "case `{}` pins an arm of experiment `{experiment}`, which the agent does not declare",
                        case.id
                    ),
                    format!("declare agent/experiments/{experiment}.toml, or correct `arm.experiment`"),
                ),
                Some(e) if e.arm(arm).is_none() => {
                    let arms: Vec<&str> = e.arms.iter().map(|a| a.name.as_str()).collect();
                    d.error(
                        &file,
                        format!(
                            "case `{}` pins arm `{arm}`, which experiment `{experiment}` does not have",
                            case.id
                        ),
                        format!("pin one of its arms: {}", arms.join(", ")),
                    );
                }
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::EVENT_TYPES;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const CASE: &str = r#"
description = "file description"
tags = ["weather"]
timeout_ms = 5000
metadata = { owner = "a", team = "x" }

[[cases]]
name = "paris"
metadata = { owner = "b" }
[[cases.steps]]
send = "What's the weather in Paris?"
expect = [{ assert = "called_tool", name = "get_weather", input = { city = "Paris" } }]

[[cases]]
name = "hello"
description = "case description"
tags = ["smoke"]
timeout_ms = 100
iterations = 3
[[cases.steps]]
send = "hello"
[[cases.expect]]
assert = "used_no_tools"
"#;

    #[test]
    fn files_compile_with_overrides_and_merged_metadata() {
        let dir = project(&[
            (
                "evals/evals.toml",
                "max_concurrency = 2\ntimeout_ms = 9000\n",
            ),
            ("evals/sub/basic.eval.toml", CASE),
        ]);
        let loaded = load(dir.path());
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        let suite = loaded.suite.unwrap();
        assert_eq!(suite.config.max_playground_runs, 20);
        let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["sub/basic/hello", "sub/basic/paris"]);
        let hello = &suite.cases[0];
        assert_eq!(hello.description.as_deref(), Some("case description"));
        assert_eq!(hello.tags, ["smoke"]);
        assert_eq!(hello.timeout_ms, Some(100));
        assert_eq!(hello.iterations, 3);
        let paris = &suite.cases[1];
        assert_eq!(paris.description.as_deref(), Some("file description"));
        assert_eq!(paris.tags, ["weather"]);
        assert_eq!(paris.timeout_ms, Some(5000));
        assert_eq!(paris.metadata, json!({"owner": "b", "team": "x"}));
        assert_eq!(paris.file, "evals/sub/basic.eval.toml");
    }

    #[test]
    fn bad_files_get_diagnostics_with_lines_and_fixes() {
        let dir = project(&[
            ("evals/evals.toml", "max_concurrency = 500\n"),
            (
                "evals/bad.eval.toml",
                "[[cases]]\nname = \"x\"\n[[cases.steps]]\nsend = \"hi\"\nexpect = [{ assert = \"called_tol\", name = \"a\" }]\n",
            ),
            (
                "evals/worse.eval.toml",
                "[[cases]]\nname = \"y\"\n[[cases.steps]]\nsend = \"hi\"\nexpect = [{ assert = \"event\", type = \"turn.done\" }, { assert = \"called_tool\", name = \"a\", input = { c = { \"$regex\" = \"(\" } } }]\n",
            ),
            ("evals/notes.txt", "stray"),
        ]);
        let loaded = load(dir.path());
        assert!(loaded.suite.is_none());
        let text: Vec<String> = loaded
            .diagnostics
            .iter()
            .map(|d| format!("{}: {}", d.file, d.message))
            .collect();
        let all = text.join("\n");
        assert!(
            all.contains("evals/evals.toml: max_concurrency is 500"),
            "{all}"
        );
        assert!(
            all.contains("evals/bad.eval.toml: invalid TOML at line 5"),
            "{all}"
        );
        assert!(all.contains("unknown variant `called_tol`"), "{all}");
        assert!(all.contains("unknown event type `turn.done`"), "{all}");
        assert!(all.contains("invalid $regex"), "{all}");
        assert!(all.contains("evals/notes.txt: not an eval file"), "{all}");
    }

    #[test]
    fn eval_files_without_a_config_are_an_error() {
        let dir = project(&[(
            "evals/a.eval.toml",
            "[[cases]]\nname = \"a\"\n[[cases.steps]]\nsend = \"hi\"\n",
        )]);
        let loaded = load(dir.path());
        assert!(loaded.suite.is_none());
        assert!(
            loaded.diagnostics[0]
                .message
                .contains("evals.toml is missing")
        );
    }

    #[test]
    fn judge_assertions_need_a_judge_model() {
        let dir = project(&[
            ("evals/evals.toml", "max_concurrency = 1\n"),
            (
                "evals/j.eval.toml",
                "[[cases]]\nname = \"j\"\n[[cases.steps]]\nsend = \"hi\"\nexpect = [{ assert = \"judge\", rubric = \"polite\" }]\n",
            ),
        ]);
        let loaded = load(dir.path());
        assert!(loaded.suite.is_none());
        assert!(
            loaded
                .diagnostics
                .iter()
                .any(|d| d.message.contains("no judge model"))
        );
    }

    /// The diagnostics of one bad assertion in a step's `expect`.
    fn assertion_diagnostics(table: &str) -> Vec<String> {
        let case = format!(
            "[[cases]]\nname = \"c\"\n[[cases.steps]]\nsend = \"hi\"\nexpect = [{table}]\n"
        );
        let dir = project(&[
            ("evals/evals.toml", "max_concurrency = 1\n"),
            ("evals/a.eval.toml", &case),
        ]);
        let loaded = load(dir.path());
        assert!(loaded.suite.is_none(), "{table}");
        loaded.diagnostics.into_iter().map(|d| d.message).collect()
    }

    /// Pins the text a wrong assertion gets, word for word: serde's for a
    /// wrong shape (kinds and fields listed in declaration order), the
    /// assertion's own for a wrong value.
    #[test]
    fn a_bad_assertion_gets_the_diagnostic_that_names_its_fault() {
        let toml = |col: u32, m: &str| format!("invalid TOML at line 5, column {col}: {m}");
        let at = |m: &str| format!("case `c` (line 1): steps[0].expect[0]: {m}");
        let cases = [
            (
                r#"{ assert = "called_tol", name = "a" }"#,
                toml(
                    22,
                    "unknown variant `called_tol`, expected one of `succeeded`, `called_tool`, `require_tool_call`, `not_called_tool`, `loaded_skill`, `tool_order`, `used_no_tools`, `max_tool_calls`, `no_failed_actions`, `called_subagent`, `tagged_artifact`, `event`, `not_event`, `event_order`, `events_satisfy`, `require_input_request`, `gate_verdict`, `gate_attempts`, `check`, `score`, `judge`",
                ),
            ),
            (
                r#"{ assert = "called_tool", nme = "x" }"#,
                toml(
                    10,
                    "unknown field `nme`, expected one of `name`, `input`, `output`, `status`, `count`",
                ),
            ),
            (
                r#"{ assert = "require_tool_call", name = "a", count = 1 }"#,
                toml(
                    10,
                    "unknown field `count`, expected one of `name`, `input`, `output`, `status`",
                ),
            ),
            (
                r#"{ assert = "called_subagent", name = "a", input = 1 }"#,
                toml(
                    10,
                    "unknown field `input`, expected one of `name`, `prompt`, `reply`, `status`, `count`",
                ),
            ),
            (
                r#"{ assert = "event", typ = "turn.started" }"#,
                toml(10, "unknown field `typ`, expected `type` or `data`"),
            ),
            (
                r#"{ assert = "event_order", events = [{ type = "turn.started", dat = 1 }] }"#,
                toml(10, "unknown field `dat`, expected `type` or `data`"),
            ),
            (
                r#"{ assert = "succeeded", x = 1 }"#,
                toml(10, "unknown field `x`, there are no fields"),
            ),
            (
                r#"{ assert = "check", value = "answer", expect = 1 }"#,
                toml(
                    10,
                    "unknown variant `answer`, expected one of `reply`, `tool_names`, `tool_call_count`, `event_count`, `turn_count`",
                ),
            ),
            (
                r#"{ assert = "events_satisfy", label = "l", type = "turn.started" }"#,
                toml(10, "missing field `data`"),
            ),
            (
                r#"{ assert = "tool_order", names = [] }"#,
                at("tool_order needs at least one name"),
            ),
            (
                r#"{ assert = "event_order", events = [] }"#,
                at("event_order needs at least one event"),
            ),
            (
                r#"{ assert = "event_order", events = [{ type = "turn.started", data = { "$nope" = 1 } }] }"#,
                at(
                    "events[0].data: invalid matcher at $: unknown operator `$nope`; use $regex, $contains, $any, $absent or $eq",
                ),
            ),
            (
                r#"{ assert = "called_subagent", name = "a", reply = { "$contains" = 1 } }"#,
                at("reply: invalid matcher at $: $contains takes a string"),
            ),
            (
                r#"{ assert = "check", value = "reply", expect = { "$regex" = 2 } }"#,
                at("expect: invalid matcher at $: $regex takes a string pattern"),
            ),
            (
                r#"{ assert = "score", name = "s", value = 1.5 }"#,
                at("score 1.5 is outside 0..=1"),
            ),
            (
                r#"{ assert = "judge", rubric = "r", threshold = 2.0 }"#,
                at("judge threshold 2 is outside 0..=1"),
            ),
            (
                r#"{ assert = "judge", rubric = " " }"#,
                at("judge needs a rubric"),
            ),
        ];
        for (table, want) in cases {
            assert_eq!(assertion_diagnostics(table), [want], "{table}");
        }
        let [typo] = &assertion_diagnostics(
            r#"{ assert = "event_order", events = [{ type = "turn.started" }, { type = "turn.done" }] }"#,
        )[..] else {
            panic!("one diagnostic expected");
        };
        assert_eq!(
            *typo,
            at(&format!(
                "events[1]: unknown event type `turn.done`; known types: {}",
                EVENT_TYPES.join(", ")
            ))
        );
    }
}
