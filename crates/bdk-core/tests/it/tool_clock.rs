#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! "Now" for tools comes from the host's injected clock: in model turns, in
//! direct calls bound to a session and in unbound direct calls, while a
//! session's `asOf` still pins it.

use std::sync::Arc;

use bdk_core::Project;
use bdk_core::clock::{Clock, ManualClock};
use bdk_core::host::{DirectCall, Host, StartSession};
use bdk_core::tool::ToolContext;
use bdk_core::tool::native::native_tool;
use bdk_store::{FsStore, Store};
use bdk_testkit::AgentFolder;
use chrono::{DateTime, TimeDelta, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tempfile::TempDir;

const RULES: &str = r#"
[[rules]]
user_contains = "time"
tool_calls = [{ name = "what_time", input = {} }]

[[rules]]
tool_result = "what_time"
reply = "now {{ result.now }} pinned {{ result.pinned }}"

[[rules]]
reply = "ok"
"#;

fn project() -> (TempDir, Project) {
    let d = AgentFolder::new()
        .agent_toml("model = \"scripted\"\n[builtin_tools]\nworkspace = false\nartifacts = false\n")
        .instructions("You tell the time.\n")
        .rules(RULES)
        .discover();
    (d.dir, d.project)
}

#[derive(Deserialize, JsonSchema)]
struct NoInput {}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

async fn host(dir: &TempDir, p: Project, clock: &ManualClock) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let what_time = native_tool(
        "what_time",
        "The current time as the tool sees it.",
        |_: NoInput, ctx: ToolContext| async move {
            let pinned = if ctx.as_of_pinned { "yes" } else { "no" };
            Ok(json!({"now": ctx.now.to_rfc3339(), "pinned": pinned}))
        },
    );
    Host::builder(p, store)
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .tool(Arc::new(what_time))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn tools_read_now_from_the_injected_clock() {
    let (dir, p) = project();
    let start = t("2031-05-06T07:08:09Z");
    let clock = ManualClock::new(start);
    let host = host(&dir, p, &clock).await;
    assert_eq!(host.clock().now(), start);

    // A model turn.
    let started = host
        .start_session(StartSession {
            message: Some("what time is it".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let id = started.session_id.clone();
    let turn = host
        .wait_turn(&id, started.turn_id.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        turn.reply,
        format!("now {} pinned no", start.to_rfc3339()),
        "{turn:?}"
    );

    // A direct call bound to the session, after the clock moved.
    clock.advance(TimeDelta::hours(3));
    let bound = host
        .call_tool(DirectCall {
            name: "what_time".into(),
            input: json!({}),
            session_id: Some(id),
            ..DirectCall::default()
        })
        .await
        .unwrap();
    let later = start + TimeDelta::hours(3);
    assert_eq!(bound.result["now"], later.to_rfc3339());

    // An unbound direct call.
    clock.set(t("2040-01-01T00:00:00Z"));
    let unbound = host
        .call_tool(DirectCall {
            name: "what_time".into(),
            input: json!({}),
            ..DirectCall::default()
        })
        .await
        .unwrap();
    assert_eq!(unbound.result["now"], "2040-01-01T00:00:00+00:00");
}

#[tokio::test]
async fn as_of_still_pins_now_over_the_clock() {
    let (dir, p) = project();
    let clock = ManualClock::new(t("2031-05-06T07:08:09Z"));
    let host = host(&dir, p, &clock).await;
    let pinned = t("2020-02-02T02:02:02Z");
    let started = host
        .start_session(StartSession {
            message: Some("what time is it".into()),
            as_of: Some(pinned),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let id = started.session_id.clone();
    let turn = host
        .wait_turn(&id, started.turn_id.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        turn.reply,
        format!("now {} pinned yes", pinned.to_rfc3339())
    );
    clock.advance(TimeDelta::days(1));
    let bound = host
        .call_tool(DirectCall {
            name: "what_time".into(),
            input: json!({}),
            session_id: Some(id),
            ..DirectCall::default()
        })
        .await
        .unwrap();
    assert_eq!(bound.result["now"], pinned.to_rfc3339());
    assert_eq!(bound.result["pinned"], "yes");
}
