//! Reporters: JSON, JUnit XML and the plain-text summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
#[cfg(feature = "junit")]
use std::time::Duration;

#[cfg(feature = "junit")]
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::runner::{CaseResult, CaseStatus, IterationStatus, RunResult};
use crate::spec::{CaseSpec, ReporterKind, ReporterSpec};

pub use crate::matcher::clip;

/// The run as pretty JSON.
pub fn json(result: &RunResult) -> String {
    serde_json::to_string_pretty(result).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn secs(ms: u64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

/// Every failure line of a case, iteration by iteration.
pub fn failure_lines(case: &CaseResult) -> Vec<String> {
    let mut lines = Vec::new();
    for it in &case.iterations {
        if it.status == IterationStatus::Passed {
            continue;
        }
        let prefix = if case.iteration_count > 1 {
            format!("iteration {}: ", it.iteration)
        } else {
            String::new()
        };
        for f in &it.failures {
            lines.push(format!("{prefix}{}", f.line()));
        }
        if let Some(s) = &it.stopped
            && (it.failures.is_empty() || it.status != IterationStatus::Failed)
        {
            lines.push(format!("{prefix}stopped: {s}"));
        }
    }
    lines
}

/// The run as JUnit XML: one `<testcase>` per case, a `<failure>` listing
/// every violated assertion (with its event), `<skipped>` when cancelled.
/// quick-junit escapes markup and drops what XML cannot carry (control
/// characters, ANSI escapes).
#[cfg(feature = "junit")]
pub fn junit(result: &RunResult) -> std::io::Result<String> {
    let mut report = Report::new("bdk evals");
    report
        .set_time(Duration::from_millis(result.duration_ms))
        .add_test_suite(test_suite(result, &result.run_id));
    report.to_string().map_err(std::io::Error::other)
}

/// One run as a JUnit test suite named `name`.
#[cfg(feature = "junit")]
fn test_suite(result: &RunResult, name: &str) -> TestSuite {
    let mut suite = TestSuite::new(name);
    suite
        .set_timestamp(result.started_at)
        .set_time(Duration::from_millis(result.duration_ms));
    for case in &result.cases {
        let status = match case.status {
            CaseStatus::Passed => TestCaseStatus::success(),
            CaseStatus::Failed => {
                let lines = failure_lines(case);
                let mut failure = TestCaseStatus::non_success(NonSuccessKind::Failure);
                failure
                    .set_message(format!(
                        "pass rate {:.2} below {:.2}; {} failure(s)",
                        case.pass_rate,
                        case.min_pass_rate,
                        lines.len()
                    ))
                    .set_type("assertion")
                    .set_description(lines.join("\n"));
                failure
            }
            CaseStatus::Cancelled | CaseStatus::Pending | CaseStatus::Running => {
                let mut skipped = TestCaseStatus::skipped();
                skipped.set_message("cancelled");
                skipped
            }
        };
        let mut test_case = TestCase::new(&case.id, status);
        test_case
            .set_classname(if case.file.is_empty() {
                "evals"
            } else {
                &case.file
            })
            .set_time(Duration::from_millis(case.duration_ms));
        suite.add_test_case(test_case);
    }
    suite
}

/// One arm's run of a suite run per arm (`bdk evals --per-arm`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ArmRun {
    /// The arm every case was pinned to.
    pub arm: String,
    /// The run.
    pub run: RunResult,
}

/// A suite run once per arm of `experiment`, as pretty JSON:
/// `{"experiment", "passed", "arms": [{"arm", "run"}]}`, each `run` the
/// shape of [`json`].
pub fn per_arm_json(experiment: &str, runs: &[ArmRun]) -> String {
    let value = serde_json::json!({
        "experiment": experiment,
        "passed": runs.iter().all(|r| r.run.passed()),
        "arms": runs,
    });
    serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// A suite run once per arm as JUnit XML: one test suite per arm, named
/// `<experiment>/<arm>`.
#[cfg(feature = "junit")]
pub fn per_arm_junit(experiment: &str, runs: &[ArmRun]) -> std::io::Result<String> {
    let mut report = Report::new("bdk evals");
    let total: u64 = runs.iter().map(|r| r.run.duration_ms).sum();
    report.set_time(Duration::from_millis(total));
    for r in runs {
        report.add_test_suite(test_suite(&r.run, &format!("{experiment}/{}", r.arm)));
    }
    report.to_string().map_err(std::io::Error::other)
}

/// The arms side by side: one row per case, one column per arm (status,
/// passing iterations, time), the totals per arm, then every failure under
/// its arm.
pub fn per_arm_table(experiment: &str, runs: &[ArmRun]) -> String {
    let mut out = String::new();
    let mut ids: Vec<&str> = Vec::new();
    for r in runs {
        for c in &r.run.cases {
            if !ids.contains(&c.id.as_str()) {
                ids.push(&c.id);
            }
        }
    }
    let width = ids
        .iter()
        .map(|id| id.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let cell = |c: Option<&CaseResult>| -> String {
        let Some(c) = c else {
            return "-".to_owned();
        };
        let passed = c
            .iterations
            .iter()
            .filter(|i| i.status == IterationStatus::Passed)
            .count();
        let status = match c.status {
            CaseStatus::Passed => "passed",
            CaseStatus::Failed => "FAILED",
            CaseStatus::Cancelled => "cancelled",
            CaseStatus::Pending => "pending",
            CaseStatus::Running => "running",
        };
        format!(
            "{status} {passed}/{} {}s",
            c.iteration_count,
            secs(c.duration_ms)
        )
    };
    let col = runs
        .iter()
        .map(|r| r.arm.chars().count())
        .max()
        .unwrap_or(0)
        .max(24);
    let _ = writeln!(out, "experiment {experiment}, one column per arm");
    let _ = write!(out, "{:<width$}", "case");
    for r in runs {
        let _ = write!(out, "  {:<col$}", r.arm);
    }
    let _ = writeln!(out);
    for id in &ids {
        let _ = write!(out, "{id:<width$}");
        for r in runs {
            let c = r.run.cases.iter().find(|c| c.id == *id);
            let _ = write!(out, "  {:<col$}", cell(c));
        }
        let _ = writeln!(out);
    }
    let _ = write!(out, "{:<width$}", "passed");
    for r in runs {
        let s = &r.run.summary;
        let _ = write!(
            out,
            "  {:<col$}",
            format!("{}/{} {}s", s.passed, s.total, secs(r.run.duration_ms))
        );
    }
    let _ = writeln!(out);
    for r in runs {
        for c in r
            .run
            .cases
            .iter()
            .filter(|c| c.status != CaseStatus::Passed)
        {
            for line in failure_lines(c) {
                let _ = writeln!(out, "  [{}] {}: {line}", r.arm, c.id);
            }
        }
        if let Some(e) = &r.run.error {
            let _ = writeln!(out, "  [{}] run error: {e}", r.arm);
        }
    }
    out
}

/// The summary table printed at the end of `bdk evals`, with every failure
/// under its case.
pub fn summary_table(result: &RunResult) -> String {
    let mut out = String::new();
    let width = result
        .cases
        .iter()
        .map(|c| c.id.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:<width$}  {:<9}  {:>5}  {:>9}",
        "case", "status", "pass", "time"
    );
    for c in &result.cases {
        let status = match c.status {
            CaseStatus::Passed => "passed",
            CaseStatus::Failed => "FAILED",
            CaseStatus::Cancelled => "cancelled",
            CaseStatus::Pending => "pending",
            CaseStatus::Running => "running",
        };
        let passed = c
            .iterations
            .iter()
            .filter(|i| i.status == IterationStatus::Passed)
            .count();
        let _ = writeln!(
            out,
            "{:<width$}  {:<9}  {:>5}  {:>8}s",
            c.id,
            status,
            format!("{passed}/{}", c.iteration_count),
            secs(c.duration_ms)
        );
        if c.status != CaseStatus::Passed {
            for line in failure_lines(c) {
                let _ = writeln!(out, "    - {line}");
            }
        }
    }
    let s = &result.summary;
    let _ = writeln!(
        out,
        "\n{} case(s): {} passed, {} failed, {} cancelled ({}s)",
        s.total,
        s.passed,
        s.failed,
        s.cancelled,
        secs(result.duration_ms)
    );
    if let Some(e) = &result.error {
        let _ = writeln!(out, "run error: {e}");
    }
    out
}

/// Without the `junit` feature a configured JUnit reporter is an error
/// that names the feature, never a silently missing file.
#[cfg(not(feature = "junit"))]
fn no_junit() -> std::io::Error {
    std::io::Error::other(
        "JUnit reports need bdk-evals' `junit` feature, which this build leaves out",
    )
}

/// The run as JUnit XML; this build has no JUnit writer (feature `junit`).
#[cfg(not(feature = "junit"))]
pub fn junit(_result: &RunResult) -> std::io::Result<String> {
    Err(no_junit())
}

/// A suite run per arm as JUnit XML; this build has no JUnit writer
/// (feature `junit`).
#[cfg(not(feature = "junit"))]
pub fn per_arm_junit(_experiment: &str, _runs: &[ArmRun]) -> std::io::Result<String> {
    Err(no_junit())
}

/// Writes the file reporters of a suite run per arm: like
/// [`write_reports`], each file holding every arm ([`per_arm_json`],
/// [`per_arm_junit`]).
pub fn write_per_arm_reports(
    root: &Path,
    config_reporters: &[ReporterSpec],
    cases: &[CaseSpec],
    experiment: &str,
    runs: &[ArmRun],
) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (spec, only) in reporter_plan(config_reporters, cases) {
        let subset: Vec<ArmRun> = runs
            .iter()
            .map(|r| ArmRun {
                arm: r.arm.clone(),
                run: subset_of(&r.run, only.as_deref()),
            })
            .collect();
        let text = match spec.kind {
            ReporterKind::Json => per_arm_json(experiment, &subset),
            ReporterKind::Junit => per_arm_junit(experiment, &subset)?,
        };
        written.push(write_report(root, &spec, &text)?);
    }
    Ok(written)
}

/// Which reporters get which cases: config reporters every case (`None`),
/// a reporter named only by files or cases just those.
fn reporter_plan(
    config_reporters: &[ReporterSpec],
    cases: &[CaseSpec],
) -> BTreeMap<ReporterSpec, Option<Vec<String>>> {
    let mut plan: BTreeMap<ReporterSpec, Option<Vec<String>>> = BTreeMap::new();
    for r in config_reporters {
        plan.insert(r.clone(), None);
    }
    for c in cases {
        for r in &c.reporters {
            match plan.entry(r.clone()) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Some(vec![c.id.clone()]));
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    if let Some(ids) = o.get_mut() {
                        ids.push(c.id.clone());
                    }
                }
            }
        }
    }
    plan
}

/// `result` cut down to the cases `only` names (all of them for `None`),
/// with the summary recounted.
fn subset_of(result: &RunResult, only: Option<&[String]>) -> RunResult {
    let mut subset = result.clone();
    if let Some(ids) = only {
        subset.cases.retain(|c| ids.contains(&c.id));
        let count = |s: CaseStatus| subset.cases.iter().filter(|c| c.status == s).count();
        subset.summary.total = subset.cases.len();
        subset.summary.passed = count(CaseStatus::Passed);
        subset.summary.failed = count(CaseStatus::Failed);
        subset.summary.cancelled =
            subset.summary.total - subset.summary.passed - subset.summary.failed;
    }
    subset
}

fn write_report(root: &Path, spec: &ReporterSpec, text: &str) -> std::io::Result<PathBuf> {
    let path = root.join(&spec.path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Writes the file reporters: config reporters get every case, a reporter
/// named only by files or cases gets just those cases. Returns the paths
/// written.
pub fn write_reports(
    root: &Path,
    config_reporters: &[ReporterSpec],
    cases: &[CaseSpec],
    result: &RunResult,
) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (spec, only) in reporter_plan(config_reporters, cases) {
        let subset = subset_of(result, only.as_deref());
        let text = match spec.kind {
            ReporterKind::Json => json(&subset),
            ReporterKind::Junit => junit(&subset)?,
        };
        written.push(write_report(root, &spec, &text)?);
    }
    Ok(written)
}

#[cfg(test)]
#[cfg_attr(not(feature = "junit"), allow(unused_imports, dead_code))]
mod tests {
    #[cfg(feature = "junit")]
    use std::time::Duration;

    #[cfg(feature = "junit")]
    use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

    use super::*;
    use crate::assert::{EventRef, Failure};
    use crate::runner::{IterationResult, RunOptions};

    fn iteration(status: IterationStatus, failures: Vec<Failure>) -> IterationResult {
        IterationResult {
            iteration: 1,
            status,
            duration_ms: 5,
            failures,
            scores: Vec::new(),
            assertions: 2,
            turns: Vec::new(),
            session_id: None,
            stopped: Some("timed out after 300 ms".into()),
        }
    }

    /// Without the `junit` feature a JUnit reporter is an error that names
    /// the feature, for one run, per arm, and through `write_reports`. (Run
    /// by the bdk-cli test that builds this crate for `http` alone.)
    #[cfg(not(feature = "junit"))]
    #[test]
    fn without_the_junit_feature_a_junit_reporter_is_an_error_naming_it() {
        let run = RunResult::new("evr_x".into(), RunOptions::default(), &[]);
        let e = junit(&run).unwrap_err().to_string();
        assert!(e.contains("`junit` feature"), "{e}");
        let arms = [ArmRun {
            arm: "a".into(),
            run: run.clone(),
        }];
        let e = per_arm_junit("tone", &arms).unwrap_err().to_string();
        assert!(e.contains("`junit` feature"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let reporters = [ReporterSpec {
            kind: ReporterKind::Junit,
            path: "report.xml".into(),
        }];
        let e = write_reports(dir.path(), &reporters, &[], &run)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`junit` feature"), "{e}");
        assert!(!dir.path().join("report.xml").exists());
    }

    #[cfg(feature = "junit")]
    #[test]
    fn junit_has_a_case_per_case_and_escapes_what_it_carries() {
        let specs: Vec<CaseSpec> = ["a/<ok>", "a/fails & \"quotes\"", "a/gone"]
            .into_iter()
            .map(|id| CaseSpec::new(id, |_| Box::pin(async { Ok(()) })))
            .collect();
        let mut run = RunResult::new("evr_1".into(), RunOptions::default(), &specs);
        run.duration_ms = 1500;
        run.cases[0].status = CaseStatus::Passed;
        run.cases[0].duration_ms = 20;
        run.cases[1].status = CaseStatus::Failed;
        run.cases[1].file = "evals/a.eval.toml".into();
        run.cases[1].min_pass_rate = 1.0;
        run.cases[1].iterations = vec![iteration(
            IterationStatus::Timeout,
            vec![Failure {
                assertion: "check(\"reply\")".into(),
                scope: "turn 1".into(),
                message: "expected <b> & 'x'\u{1}\u{1b}[31m, found ]]>".into(),
                event: Some(EventRef {
                    index: 7,
                    kind: "turn.completed".into(),
                }),
            }],
        )];
        run.cases[2].status = CaseStatus::Cancelled;

        let xml = junit(&run).unwrap();
        assert!(
            xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
            "{xml}"
        );
        assert!(xml.contains("expected &lt;b&gt; &amp;"), "{xml}");
        assert!(!xml.contains('\u{1}') && !xml.contains('\u{1b}'), "{xml}");
        assert!(!xml.contains("]]>"), "{xml}");

        let report = Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(report.name.as_deref(), Some("bdk evals"));
        assert_eq!(
            (report.tests, report.failures, report.errors, report.skipped),
            (3, 1, 0, 1)
        );
        assert_eq!(report.time, Some(Duration::from_millis(1500)));
        let suite = &report.test_suites[0];
        assert_eq!(suite.name.as_str(), "evr_1");
        let cases: Vec<(&str, &str)> = suite
            .test_cases
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.classname.as_ref().map_or("", |n| n.as_str()),
                )
            })
            .collect();
        assert_eq!(
            cases,
            [
                ("a/<ok>", "evals"),
                ("a/fails & \"quotes\"", "evals/a.eval.toml"),
                ("a/gone", "evals"),
            ]
        );
        assert_eq!(suite.test_cases[0].time, Some(Duration::from_millis(20)));
        let TestCaseStatus::NonSuccess {
            kind: NonSuccessKind::Failure,
            message,
            ty,
            description,
            ..
        } = &suite.test_cases[1].status
        else {
            panic!("not a failure: {:?}", suite.test_cases[1].status);
        };
        assert_eq!(
            message.as_deref(),
            Some("pass rate 0.00 below 1.00; 2 failure(s)")
        );
        assert_eq!(ty.as_deref(), Some("assertion"));
        assert_eq!(
            description.as_deref(),
            Some(
                "turn 1: check(\"reply\"): expected <b> & 'x', found ]]> (event #7 turn.completed)\nstopped: timed out after 300 ms"
            )
        );
        let TestCaseStatus::Skipped { message, .. } = &suite.test_cases[2].status else {
            panic!("not skipped: {:?}", suite.test_cases[2].status);
        };
        assert_eq!(message.as_deref(), Some("cancelled"));
    }

    #[test]
    fn clip_cuts_with_an_ellipsis() {
        assert_eq!(clip("abcdef", 5), "ab...");
        assert_eq!(clip("abc", 5), "abc");
    }
}
