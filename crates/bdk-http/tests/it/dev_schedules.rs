#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Schedules through the HTTP app: `POST /v1/dev/schedules/:id` under
//! `--dev` (task sessions, channel hand-offs, unknown ids), its absence
//! without `--dev`, tool schedules (the answer carries the call), the
//! schedule list with last runs and skipped fires (`GET /v1/dev/schedules`),
//! and the cadence the app's background work starts on a manual clock
//! (fires in production once started, never under `--dev`).

use crate::common;

use std::sync::Arc;

use bdk_core::discover;
use bdk_core::host::Host;
use bdk_http::{App, Config, Mount, Schedules};
use bdk_scheduler::ManualClock;
use bdk_store::{FsStore, Store};
use chrono::{TimeZone, Utc};
use common::{client, expect_error, expect_ok, get, is, serve, stream};
use tempfile::TempDir;

const INBOX: &str = r#"
description = "Receives scheduled hand-offs."
auth = "default"

[[routes]]
method = "POST"
path = "/"
message = "{{ method }} {{ path }}"
"#;

/// A subprocess tool that answers with the request it was sent, so a test
/// sees the input and the call context (principal, session) it got.
const STAMP: &str = r#"
description = "Answers with the request it received."
effect = "read"
command = ["sh", "-c", "cat"]

[input_schema]
type = "object"
required = ["note"]
properties = { note = { type = "string" } }
"#;

async fn agent(cron: &str) -> (TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "agent/agent.toml",
            "name = \"sched\"\ndescription = \"Schedules.\"\nmodel = \"scripted\"\n".to_owned(),
        ),
        ("agent/instructions.md", "You run on a schedule.\n".to_owned()),
        (
            "agent/scripted.toml",
            "[[rules]]\nreply = \"echo: {{ user }}\"\n".to_owned(),
        ),
        ("agent/channels/inbox.toml", INBOX.to_owned()),
        (
            "agent/schedules/nightly.md",
            format!("---\ncron: \"{cron}\"\n---\n\nSummarize the day.\n"),
        ),
        ("agent/tools/stamp.toml", STAMP.to_owned()),
        (
            "agent/schedules/stamp.toml",
            "cron = \"0 6 * * *\"\ntool = \"stamp\"\n\n[input]\nnote = \"from the schedule\"\n"
                .to_owned(),
        ),
        (
            "agent/schedules/relay.toml",
            "cron = \"0 6 * * *\"\nchannel = \"inbox\"\nmessage = \"morning\"\ncontinuation_key = \"daily\"\n"
                .to_owned(),
        ),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let project = d.project.unwrap();
    assert_eq!(project.schedules.len(), 3);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(project, store).build().await.unwrap();
    (dir, host)
}

fn mount(host: &Host) -> Mount {
    Mount {
        slug: None,
        host: host.clone(),
        diagnostics: Vec::new(),
        reload: None,
    }
}

#[tokio::test]
async fn dev_dispatch_starts_a_task_session_that_completes() {
    let (_dir, host) = agent("0 3 * * *").await;
    let config = Config {
        dev: true,
        ..Config::default()
    };
    let base = serve(vec![mount(&host)], config).await;
    let http = client();

    let body = expect_ok(
        http.post(format!("{base}/v1/dev/schedules/nightly"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["scheduleId"], "nightly");
    let ids = body["sessionIds"].as_array().unwrap();
    assert_eq!(ids.len(), 1, "{body}");
    let id = ids[0].as_str().unwrap();

    let events = stream(&http, &base, id, 0)
        .await
        .until(|e| e["type"] == "session.completed" || e["type"] == "session.failed")
        .await;
    assert!(
        is("session.completed")(events.last().unwrap()),
        "{events:#?}"
    );
    let text = serde_json::to_string(&events).unwrap();
    assert!(text.contains("echo: Summarize the day."), "{text}");

    let record = host
        .session(&bdk_events::SessionId::parse(id).unwrap(), None)
        .await
        .unwrap();
    let record = serde_json::to_value(&record).unwrap();
    assert_eq!(record["channel"], "schedule", "{record}");
    assert_eq!(record["principal"], "schedule:nightly", "{record}");
    assert_eq!(record["mode"], "task", "{record}");
}

#[tokio::test]
async fn dev_dispatch_of_a_handoff_joins_one_conversation_per_key() {
    let (_dir, host) = agent("0 3 * * *").await;
    let config = Config {
        dev: true,
        ..Config::default()
    };
    let base = serve(vec![mount(&host)], config).await;
    let http = client();
    let url = format!("{base}/v1/dev/schedules/relay");
    let first = expect_ok(http.post(&url).send().await.unwrap()).await;
    let id = first["sessionIds"][0].as_str().unwrap().to_owned();
    // Let the first turn end so the second message is a plain follow-up.
    stream(&http, &base, &id, 0)
        .await
        .until(is("session.waiting"))
        .await;
    let second = expect_ok(http.post(&url).send().await.unwrap()).await;
    assert_eq!(second["scheduleId"], "relay");
    assert_eq!(second["sessionIds"][0], id.as_str(), "{second}");
    let record = host
        .session(&bdk_events::SessionId::parse(&id).unwrap(), None)
        .await
        .unwrap();
    let record = serde_json::to_value(&record).unwrap();
    assert_eq!(record["continuationToken"], "inbox:daily", "{record}");
}

#[tokio::test]
async fn unknown_schedules_and_non_dev_servers_answer_404() {
    let (_dir, host) = agent("0 3 * * *").await;
    let http = client();
    let dev = serve(
        vec![mount(&host)],
        Config {
            dev: true,
            ..Config::default()
        },
    )
    .await;
    let body = expect_error(
        http.post(format!("{dev}/v1/dev/schedules/nope"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    assert!(body["message"].as_str().unwrap().contains("nope"), "{body}");

    let prod = serve(vec![mount(&host)], Config::default()).await;
    expect_error(
        http.post(format!("{prod}/v1/dev/schedules/nightly"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    assert!(host.list_sessions(None).await.unwrap().is_empty());
}

/// Waits (bounded) until the host lists `n` sessions.
async fn wait_for_sessions(host: &Host, n: usize) {
    // Polling: the host publishes no event for "a session was created".
    let count = bdk_testkit::poll::until_some(&format!("{n} sessions"), || async {
        let count = host.list_sessions(None).await.unwrap().len();
        (count >= n).then_some(count)
    })
    .await;
    assert_eq!(count, n);
}

#[tokio::test]
async fn the_cadence_fires_in_production_and_never_under_dev() {
    let start = Utc.with_ymd_and_hms(2026, 3, 10, 9, 0, 30).unwrap();

    let (_dev_dir, dev_host) = agent("* * * * *").await;
    let dev_clock = ManualClock::new(start);
    // Building an app starts nothing; its background work does, and
    // never under `--dev`.
    let _dev_workers = App::new(
        vec![mount(&dev_host)],
        Config {
            dev: true,
            ..Config::default()
        },
    )
    .background
    .start(Schedules::On(Arc::new(dev_clock.clone())));

    let (_dir, host) = agent("* * * * *").await;
    let clock = ManualClock::new(start);
    let built = App::new(vec![mount(&host)], Config::default());
    let workers = built
        .background
        .start(Schedules::On(Arc::new(clock.clone())));
    clock.advance(chrono::Duration::minutes(1));
    dev_clock.advance(chrono::Duration::minutes(1));
    wait_for_sessions(&host, 1).await;
    clock.advance(chrono::Duration::minutes(1));
    wait_for_sessions(&host, 2).await;
    let claims = host.store().kv_list("schedules", "nightly@").await.unwrap();
    assert_eq!(
        claims,
        vec![
            "nightly@2026-03-10T09:01:00Z",
            "nightly@2026-03-10T09:02:00Z"
        ]
    );
    // The production app fired twice while the dev one, on a clock that
    // moved the same way, fired nothing.
    assert!(dev_host.list_sessions(None).await.unwrap().is_empty());
    workers.shutdown().await;
}

#[tokio::test]
async fn dev_dispatch_of_a_tool_schedule_answers_with_the_call() {
    let (_dir, host) = agent("0 3 * * *").await;
    let config = Config {
        dev: true,
        ..Config::default()
    };
    let base = serve(vec![mount(&host)], config).await;
    let http = client();
    let body = expect_ok(
        http.post(format!("{base}/v1/dev/schedules/stamp"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["scheduleId"], "stamp");
    assert_eq!(body["sessionIds"], serde_json::json!([]), "{body}");
    let call = &body["toolCall"];
    assert_eq!(call["toolName"], "stamp");
    assert_eq!(call["isError"], false, "{body}");
    let request = &call["result"];
    assert_eq!(request["input"]["note"], "from the schedule", "{body}");
    assert_eq!(request["context"]["principal"], "schedule:stamp");
    assert_eq!(request["context"]["sessionId"], serde_json::Value::Null);
    // No session was created for it.
    assert!(host.list_sessions(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn dev_schedule_list_shows_next_fires_last_runs_and_skipped_fires() {
    let (_dir, host) = agent("0 3 * * *").await;
    let http = client();
    let prod = serve(vec![mount(&host)], Config::default()).await;
    expect_error(
        get(&http, format!("{prod}/v1/dev/schedules")).await,
        404,
        "not_found",
    )
    .await;

    // A skip recorded by an earlier production run over this state root.
    let missed = serde_json::json!({
        "schedule": "nightly",
        "policy": "skip",
        "total": 2,
        "incidents": [{
            "detectedAt": "2026-03-12T08:00:00Z",
            "reason": "server_down",
            "count": 2,
            "skipped": ["2026-03-11T03:00:00Z", "2026-03-12T03:00:00Z"],
        }],
    });
    host.store()
        .kv_put("schedules", "missed:nightly", missed.clone())
        .await
        .unwrap();
    host.store()
        .kv_put(
            "schedules",
            "nightly@2026-03-10T03:00:00Z",
            serde_json::json!({}),
        )
        .await
        .unwrap();

    let base = serve(
        vec![mount(&host)],
        Config {
            dev: true,
            ..Config::default()
        },
    )
    .await;
    expect_ok(
        http.post(format!("{base}/v1/dev/schedules/stamp"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let body = expect_ok(get(&http, format!("{base}/v1/dev/schedules")).await).await;
    let list = body["schedules"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["nightly", "relay", "stamp"]);
    let by = |n: &str| list.iter().find(|s| s["name"] == n).unwrap();

    let nightly = by("nightly");
    assert_eq!(nightly["kind"], "prompt");
    assert_eq!(nightly["cron"], "0 3 * * *");
    assert_eq!(nightly["missed"], missed);
    assert_eq!(nightly["lastClaimedFor"], "2026-03-10T03:00:00Z");
    assert!(nightly.get("lastRun").is_none(), "{nightly}");
    // The next 03:00 UTC after now, whatever the wall clock says.
    let next: chrono::DateTime<Utc> = nightly["nextFireAt"].as_str().unwrap().parse().unwrap();
    assert!(next > Utc::now());
    assert_eq!(next.format("%H:%M:%S").to_string(), "03:00:00");

    assert_eq!(by("relay")["kind"], "handoff");
    let stamp = by("stamp");
    assert_eq!(stamp["kind"], "tool");
    assert_eq!(stamp["lastRun"]["ok"], true, "{stamp}");
    assert!(stamp["lastRun"].get("scheduledFor").is_none(), "{stamp}");
    assert_eq!(stamp["lastRun"]["toolCall"]["toolName"], "stamp");
    assert!(stamp.get("missed").is_none());
}
