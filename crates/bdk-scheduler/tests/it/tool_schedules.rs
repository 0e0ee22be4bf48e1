#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! TOML tool schedules through the production dispatcher over a real host:
//! the call goes through the host's direct-call path as the schedule's
//! principal, its result comes back and is recorded, on demand and on the
//! cadence.

use std::sync::{Arc, Mutex};

use bdk_core::clock::{Clock, ManualClock};
use bdk_core::host::{Host, HostError};
use bdk_core::project::{Schedule, ScheduleAction};
use bdk_core::tool::ToolContext;
use bdk_core::tool::native::native_tool;
use bdk_core::{Project, discover};
use bdk_scheduler::{
    CLAIMS_NAMESPACE, Dispatcher, LastRun, ScheduleError, Scheduler, claim_key, schedule_status,
};
use bdk_store::{FsStore, Store};
use bdk_testkit::poll;
use chrono::{DateTime, TimeZone, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, JsonSchema)]
struct SweepInput {
    /// What to sweep.
    target: String,
}

/// What the tool saw: the principal, the session, the input and "now".
type Seen = Arc<Mutex<Vec<(Option<String>, bool, String, DateTime<Utc>)>>>;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, h, m, s).unwrap()
}

fn tool_schedule(name: &str, cron: &str, tool: &str, input: serde_json::Value) -> Schedule {
    Schedule {
        name: name.to_owned(),
        path: format!("agent/schedules/{name}.toml").into(),
        cron: cron.to_owned(),
        action: ScheduleAction::Tool {
            tool: tool.to_owned(),
            input,
        },
    }
}

fn project(dir: &TempDir) -> Project {
    bdk_testkit::write_files(
        dir.path(),
        &[
            ("agent/agent.toml", "model = \"scripted\"\n"),
            ("agent/instructions.md", "You sweep.\n"),
            ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
        ],
    );
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let mut p = d.project.unwrap();
    // Native tools are registered in Rust, so these schedules are added
    // here rather than discovered (discovery checks manifest tools).
    p.schedules = vec![
        tool_schedule("sweep", "*/5 * * * *", "sweep", json!({"target": "cache"})),
        tool_schedule("broken", "0 * * * *", "sweep", json!({"target": "fail"})),
        tool_schedule("gone", "0 * * * *", "vanished", json!({})),
    ];
    p
}

async fn host(dir: &TempDir, clock: &ManualClock) -> (Host, Seen) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let sweep = native_tool(
        "sweep",
        "Sweeps a target.",
        move |input: SweepInput, ctx: ToolContext| {
            let log = Arc::clone(&log);
            async move {
                log.lock().unwrap().push((
                    ctx.session.principal.clone(),
                    ctx.session.id.is_some(),
                    input.target.clone(),
                    ctx.now,
                ));
                if input.target == "fail" {
                    return Err("nothing to sweep".to_owned());
                }
                Ok(json!({"swept": input.target}))
            }
        },
    );
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(project(dir), store)
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .tool(Arc::new(sweep))
        .build()
        .await
        .unwrap();
    (host, seen)
}

async fn last_run(host: &Host, name: &str) -> Option<LastRun> {
    host.store()
        .kv_get(CLAIMS_NAMESPACE, &format!("last:{name}"))
        .await
        .unwrap()
        .map(|v| serde_json::from_value(v).unwrap())
}

#[tokio::test]
async fn dispatch_calls_the_tool_as_the_schedule_principal_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at(9, 0, 0));
    let (host, seen) = host(&dir, &clock).await;
    let dispatcher = Dispatcher::new(host.clone());

    let done = dispatcher.dispatch_schedule("sweep").await.unwrap();
    assert_eq!(done.schedule_id, "sweep");
    assert!(done.session_ids.is_empty(), "{done:?}");
    let call = done.tool_call.clone().expect("a tool call");
    assert_eq!(call.tool_name, "sweep");
    assert!(!call.is_error);
    assert_eq!(call.result, json!({"swept": "cache"}));
    assert!(call.call_id.starts_with("tool_sweep_"), "{}", call.call_id);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [(
            Some("schedule:sweep".to_owned()),
            false,
            "cache".to_owned(),
            at(9, 0, 0)
        )]
    );
    let run = last_run(&host, "sweep").await.unwrap();
    assert!(run.ok);
    assert_eq!(run.scheduled_for, None, "a dispatch by hand");
    assert_eq!(run.tool_call, Some(call));
    // No claim: the cadence is unaffected by a dispatch by hand.
    assert!(
        host.store()
            .kv_list(CLAIMS_NAMESPACE, "sweep@")
            .await
            .unwrap()
            .is_empty()
    );

    // A tool that answers an error still ran: the error is the result.
    let done = dispatcher.dispatch_schedule("broken").await.unwrap();
    let call = done.tool_call.unwrap();
    assert!(call.is_error);
    assert!(
        call.result.to_string().contains("nothing to sweep"),
        "{call:?}"
    );
    assert!(
        last_run(&host, "broken")
            .await
            .unwrap()
            .tool_call
            .unwrap()
            .is_error
    );

    // A tool that is not there fails the fire, and the record says why.
    let err = dispatcher.dispatch_schedule("gone").await.unwrap_err();
    assert!(
        matches!(&err, ScheduleError::Host(HostError::UnknownTool { name, .. }) if name == "vanished"),
        "{err}"
    );
    let run = last_run(&host, "gone").await.unwrap();
    assert!(!run.ok);
    assert!(run.error.unwrap().contains("vanished"));
}

#[tokio::test]
async fn the_cadence_fires_tool_schedules_with_the_shared_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at(9, 3, 0));
    let (host, seen) = host(&dir, &clock).await;
    let schedules = vec![host.project().schedules[0].clone()];
    let scheduler = Scheduler::start(
        &schedules,
        Arc::clone(host.store()),
        Arc::new(Dispatcher::new(host.clone())),
        Arc::new(clock.clone()),
        CancellationToken::new(),
    )
    .unwrap();
    clock.wait_for_sleepers(at(9, 5, 0), 1).await;
    clock.set(at(9, 5, 0));
    let run = poll::until_some("the run's record", || last_run(&host, "sweep")).await;
    scheduler.shutdown().await;
    assert!(run.ok, "{run:?}");
    assert_eq!(run.scheduled_for, Some(at(9, 5, 0)));
    assert_eq!(run.tool_call.unwrap().result, json!({"swept": "cache"}));
    // The tool read "now" from the same clock the cadence runs on.
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [(
            Some("schedule:sweep".to_owned()),
            false,
            "cache".to_owned(),
            at(9, 5, 0)
        )]
    );
    assert!(
        host.store()
            .kv_get(CLAIMS_NAMESPACE, &claim_key("sweep", at(9, 5, 0)))
            .await
            .unwrap()
            .is_some()
    );
    let status = schedule_status(host.store(), &schedules, at(9, 5, 0))
        .await
        .unwrap();
    assert_eq!(status[0].kind, "tool");
    assert_eq!(status[0].next_fire_at, Some(at(9, 10, 0)));
}
