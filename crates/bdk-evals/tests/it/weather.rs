//! The weather example's evals, run in process against the real host, and
//! the Rust API driving the same agent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdk_core::host::Host;
use bdk_evals::runner::{IterationStatus, Quiet, RunStatus};
use bdk_evals::target::HostTarget;
use bdk_evals::{Assertions, Case, CaseSpec, Matcher, RunOptions, Runner, ToolMatch};
use bdk_store::FsStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather")
}

async fn host(state: &Path) -> Host {
    let discovery = bdk_core::discover(&example());
    let project = discovery.project.expect("the example is valid");
    let store = FsStore::open(state).unwrap();
    Host::builder(project, Arc::new(store))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_weather_example_suite_passes_in_process() {
    let loaded = bdk_evals::load(&example());
    assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
    let suite = loaded.suite.unwrap();
    let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
    assert!(ids.contains(&"weather/current-conditions"), "{ids:?}");
    assert!(ids.contains(&"judge/celsius-answer"), "{ids:?}");

    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let runner = Runner::new(
        suite.config.clone(),
        Arc::new(HostTarget::new(host.clone())),
    )
    .judges(bdk_evals::project_judges((*host.project()).clone()));
    let result = runner
        .run(
            "evr_test".into(),
            suite.cases.clone(),
            RunOptions::default(),
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    assert_eq!(result.status, RunStatus::Completed);
    assert!(
        result.passed(),
        "{}",
        bdk_evals::report::summary_table(&result)
    );
    let judged = result
        .cases
        .iter()
        .find(|c| c.id == "judge/celsius-answer")
        .unwrap();
    let scores = &judged.iterations[0].scores;
    assert_eq!(scores[0].name, "judge");
    assert!(scores[0].value >= 0.7);

    // Every eval session is marked as eval traffic.
    let sessions = host.list_sessions(None).await.unwrap();
    assert_eq!(sessions.len(), suite.cases.len());
    assert!(
        sessions
            .iter()
            .all(|s| s.purpose.as_deref() == Some("eval"))
    );
}

#[tokio::test]
async fn the_rust_api_records_every_failure_with_its_event() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let mut t = Case::in_process("rust/paris", host);
    let turn = t.send("What's the weather in Paris?").await.unwrap();
    turn.expect_ok().unwrap();
    assert!(turn.called_tool(
        "get_weather",
        ToolMatch::any().input(json!({"city": "Paris"}))
    ));
    let call = turn
        .require_tool_call("get_weather", ToolMatch::any())
        .unwrap();
    assert_eq!(call.input["city"], "Paris");
    // Three broken contracts, none of which stops the case.
    assert!(!turn.called_tool(
        "get_weather",
        ToolMatch::any().input(json!({"city": "Lyon"}))
    ));
    assert!(!turn.used_no_tools());
    assert!(!t.check("reply", &json!(t.reply()), &Matcher::contains("snow")));
    // A second turn in the same session.
    let second = t.send("hello").await.unwrap();
    assert_eq!(second.index, 2);
    assert!(second.used_no_tools());
    assert!(t.tool_order(&["get_weather"]));
    // The require form stops.
    let stop = second
        .require_tool_call("get_weather", ToolMatch::any())
        .unwrap_err();
    assert!(stop.reason.contains("never called"), "{}", stop.reason);

    let outcome = t.finish();
    assert!(!outcome.passed);
    let failures: Vec<String> = outcome.failures.iter().map(|f| f.line()).collect();
    assert_eq!(outcome.failures.len(), 4, "{failures:#?}");
    // The mismatched call points at the actions.requested event that made it.
    let lyon = &outcome.failures[0];
    assert_eq!(lyon.scope, "turn 1");
    assert!(lyon.message.contains("city"), "{}", lyon.message);
    assert_eq!(lyon.event.as_ref().unwrap().kind, "actions.requested");
    assert_eq!(
        outcome.failures[1].event.as_ref().unwrap().kind,
        "actions.requested"
    );
    assert!(outcome.failures[2].message.contains("snow"));
    assert_eq!(outcome.failures[3].scope, "turn 2");
    assert_eq!(
        outcome.failures[3].event.as_ref().unwrap().kind,
        "turn.completed"
    );
}

#[tokio::test]
async fn rust_cases_run_through_the_runner_with_iterations_timeouts_and_cancel() {
    let state = tempfile::tempdir().unwrap();
    let host = host(state.path()).await;
    let ok = CaseSpec::new("rust/ok", |t: &mut Case| {
        Box::pin(async move {
            let turn = t.send("hello").await?;
            turn.expect_ok()?;
            t.score("always", 1.0);
            Ok(())
        })
    })
    .iterations(3);
    // The scripted rule for "slow" holds the turn for 30 s; the case's own
    // timeout (200 ms) wins over the command line's (60 s).
    let slow = CaseSpec::new("rust/slow", |t: &mut Case| {
        Box::pin(async move {
            t.send("be slow").await?;
            Ok(())
        })
    })
    .timeout_ms(200);
    let runner = Runner::new(
        bdk_evals::EvalConfig::default(),
        Arc::new(HostTarget::new(host.clone())),
    );
    let opts = RunOptions {
        timeout_ms: Some(60_000),
        ..RunOptions::default()
    };
    let result = runner
        .run(
            "evr_a".into(),
            vec![ok.clone(), slow],
            opts,
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    let ok_case = &result.cases[0];
    assert_eq!(ok_case.iterations.len(), 3);
    assert_eq!(ok_case.pass_rate, 1.0);
    let slow_case = &result.cases[1];
    assert_eq!(slow_case.iterations[0].status, IterationStatus::Timeout);
    assert!(!result.passed());

    // Cancelling before the run starts reports every case as cancelled.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = runner
        .run(
            "evr_b".into(),
            vec![ok],
            RunOptions::default(),
            cancel,
            &Quiet,
        )
        .await;
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.summary.cancelled, 1);
}
