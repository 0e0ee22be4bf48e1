//! The runner over the weather example: the concurrency bound, pass rates
//! over iterations, judges that fail or are missing, and file reporters.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bdk_core::host::Host;
use bdk_evals::runner::{CaseStatus, Progress, Quiet};
use bdk_evals::spec::{ReporterKind, ReporterSpec};
use bdk_evals::target::HostTarget;
use bdk_evals::{Assertions, Case, CaseSpec, EvalConfig, Judge, Matcher, RunOptions, Runner};
use bdk_models::scripted::{RulesFile, ScriptedModel};
use bdk_store::FsStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather")
}

async fn host(state: &Path) -> Host {
    let project = bdk_core::discover(&example()).project.unwrap();
    let store = FsStore::open(state).unwrap();
    Host::builder(project, Arc::new(store))
        .build()
        .await
        .unwrap()
}

fn hello(id: &str) -> CaseSpec {
    CaseSpec::new(id, |t: &mut Case| {
        Box::pin(async move {
            t.send("hello").await?.expect_ok()?;
            Ok(())
        })
    })
}

#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Progress for InFlight {
    fn iteration_started(&self, _case: &str, _iteration: u32) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn iteration_finished(&self, _case: &str, _r: &bdk_evals::runner::IterationResult) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn concurrency_never_exceeds_max_concurrency() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let cases: Vec<CaseSpec> = (0..4)
        .map(|i| hello(&format!("c/{i}")).iterations(2))
        .collect();
    for limit in [1u32, 3] {
        let config = EvalConfig {
            max_concurrency: limit,
            ..EvalConfig::default()
        };
        let runner = Runner::new(config, Arc::new(HostTarget::new(host.clone())));
        let progress = InFlight::default();
        let r = runner
            .run(
                "evr_c".into(),
                cases.clone(),
                RunOptions::default(),
                CancellationToken::new(),
                &progress,
            )
            .await;
        assert!(r.passed());
        let max = progress.max.load(Ordering::SeqCst);
        assert!(
            max >= 1 && max <= limit as usize,
            "limit {limit}, saw {max}"
        );
    }
}

#[tokio::test]
async fn pass_rates_over_iterations_meet_their_minimum() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let flaky = |min: f64| {
        let mut spec = CaseSpec::new(format!("flaky/{min}"), |t: &mut Case| {
            Box::pin(async move {
                t.send("hello").await?;
                // The second of three iterations breaks its contract.
                let reply = if t.iteration() == 2 { "broken" } else { "fine" };
                t.check("iteration", &json!(reply), &Matcher::literal(json!("fine")));
                Ok(())
            })
        })
        .iterations(3);
        spec.min_pass_rate = min;
        spec
    };
    let runner = Runner::new(EvalConfig::default(), Arc::new(HostTarget::new(host)));
    let r = runner
        .run(
            "evr_p".into(),
            vec![flaky(0.6), flaky(1.0)],
            RunOptions::default(),
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    let lenient = r.cases.iter().find(|c| c.id == "flaky/0.6").unwrap();
    let strict = r.cases.iter().find(|c| c.id == "flaky/1").unwrap();
    for c in [lenient, strict] {
        assert_eq!(c.iterations.len(), 3);
        assert!((c.pass_rate - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(c.iterations[1].failures.len(), 1);
        assert_eq!(
            c.iterations[1].failures[0].event.as_ref().unwrap().kind,
            "session.waiting"
        );
    }
    assert_eq!(lenient.status, CaseStatus::Passed);
    assert_eq!(strict.status, CaseStatus::Failed);
}

#[tokio::test]
async fn judges_that_cannot_judge_are_failures_not_crashes() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;

    // No judge at all.
    let mut t = Case::in_process("j/none", host.clone());
    t.send("What's the weather in Paris?").await.unwrap();
    assert!(!t.judge("mentions Paris", 0.5).await);
    let out = t.finish();
    assert!(
        out.failures[0].message.contains("no judge model"),
        "{:?}",
        out.failures
    );

    // A judge whose answer is not a verdict.
    let rules = RulesFile::parse(
        "[[rules]]\nreply = \"I think it is fine.\"\n",
        Path::new("judge.toml"),
    )
    .unwrap();
    let judge = Arc::new(Judge::new(Arc::new(ScriptedModel::from_rules(
        rules,
        "scripted/judge",
    ))));
    let mut t = Case::in_process("j/prose", host.clone()).with_judge(judge);
    t.send("What's the weather in Paris?").await.unwrap();
    assert!(!t.judge("mentions Paris", 0.5).await);
    let out = t.finish();
    assert!(
        out.failures[0].message.contains("no usable verdict"),
        "{:?}",
        out.failures
    );
    assert_eq!(
        out.failures[0].event.as_ref().unwrap().kind,
        "turn.completed"
    );

    // An unknown judge model in a spec fails the case with a clear message.
    let mut spec = hello("j/unknown");
    spec.judge = Some(bdk_evals::spec::JudgeSpec {
        model: "scripted/nope".into(),
    });
    let runner = Runner::new(
        EvalConfig::default(),
        Arc::new(HostTarget::new(host.clone())),
    )
    .judges(bdk_evals::project_judges((*host.project()).clone()));
    let r = runner
        .run(
            "evr_j".into(),
            vec![spec],
            RunOptions::default(),
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    let f = &r.cases[0].iterations[0].failures[0];
    assert!(
        f.message.contains("agent/scripted/nope.toml"),
        "{}",
        f.message
    );
}

#[tokio::test]
async fn reporters_write_their_cases() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let out = tempfile::tempdir().unwrap();
    let only = ReporterSpec {
        kind: ReporterKind::Json,
        path: "reports/only-b.json".into(),
    };
    let mut b = hello("r/b");
    b.reporters = vec![only];
    let cases = vec![hello("r/a"), b];
    let runner = Runner::new(EvalConfig::default(), Arc::new(HostTarget::new(host)));
    let r = runner
        .run(
            "evr_r".into(),
            cases.clone(),
            RunOptions::default(),
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    let all = ReporterSpec {
        kind: ReporterKind::Junit,
        path: "reports/all.xml".into(),
    };
    let written = bdk_evals::report::write_reports(out.path(), &[all], &cases, &r).unwrap();
    assert_eq!(written.len(), 2);
    let xml = std::fs::read_to_string(out.path().join("reports/all.xml")).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 2);
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("reports/only-b.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["cases"].as_array().unwrap().len(), 1);
    assert_eq!(json["cases"][0]["id"], "r/b");
    assert_eq!(json["summary"]["total"], 1);
}
