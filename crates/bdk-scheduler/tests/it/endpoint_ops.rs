#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `reminders.*` host-endpoint operations the `Reminders` extension
//! adds, reached by a Python tool (no Rust) over the socket named in its
//! environment.

use std::sync::Arc;

use bdk_core::discover;
use bdk_core::host::{DirectCall, DirectOutcome, Host, StartSession};
use bdk_events::SessionId;
use bdk_scheduler::Reminders;
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;

/// A project with the client tool and a host over it with reminders.
async fn setup() -> (TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "You are a test agent.\n"),
        ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
        (
            "agent/tools/client.toml",
            bdk_testkit::endpoint::CLIENT_TOML,
        ),
        ("agent/tools/client.py", bdk_testkit::endpoint::CLIENT_PY),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(d.project.unwrap(), store)
        .extension(Arc::new(Reminders::new()))
        .build()
        .await
        .unwrap();
    (dir, host)
}

/// Runs the client tool with `requests`, bound to `session` when given.
async fn run_client(host: &Host, session: Option<&SessionId>, requests: Value) -> DirectOutcome {
    run_client_as(host, session, None, requests).await
}

/// [`run_client`] as `principal`.
async fn run_client_as(
    host: &Host,
    session: Option<&SessionId>,
    principal: Option<&str>,
    requests: Value,
) -> DirectOutcome {
    let out = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: json!({ "requests": requests }),
            session_id: session.cloned(),
            principal: principal.map(str::to_owned),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    out
}

fn answers(out: &DirectOutcome) -> &Vec<Value> {
    out.result["answers"].as_array().unwrap()
}

fn assert_error(answer: &Value, code: &str) {
    assert_eq!(answer["ok"], json!(false), "{answer}");
    assert_eq!(answer["error"], json!(code), "{answer}");
    assert!(
        answer["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
}

fn assert_ok(answer: &Value) -> &Value {
    assert_eq!(answer["ok"], json!(true), "{answer}");
    &answer["result"]
}

/// `reminders.create` without a schedule is refused with the reason.
#[tokio::test]
async fn a_reminder_without_a_schedule_is_refused_with_the_reason() {
    let (_dir, host) = setup().await;
    let session = host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let out = run_client(
        &host,
        Some(&session),
        json!([{"op": "reminders.create", "args": {}}]),
    )
    .await;
    let a = answers(&out);
    assert_error(&a[0], "invalid_args");
    assert!(
        a[0]["message"].as_str().unwrap().contains("exactly one of"),
        "{}",
        a[0]
    );
}

/// The `reminders.*` ops manage the calling session's reminders; an unbound
/// call has no session to attach them to.
#[tokio::test]
async fn reminder_ops_are_scoped_to_the_calling_session() {
    let (_dir, host) = setup().await;
    let session = host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let out = run_client(
        &host,
        Some(&session),
        json!([
            {"op": "reminders.create", "args": {"every": "1h", "prompt": "check the queue"}},
            {"op": "reminders.list", "args": {}},
            {"op": "reminders.create", "args": {"delay": "-5m", "prompt": "x"}},
        ]),
    )
    .await;
    let a = answers(&out);
    let created = assert_ok(&a[0]);
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "armed");
    assert_eq!(created["sessionId"], json!(session.as_str()));
    assert_eq!(assert_ok(&a[1])["reminders"][0]["id"], json!(id));
    assert_error(&a[2], "invalid_args");
    assert!(
        a[2]["message"].as_str().unwrap().contains("positive"),
        "{}",
        a[2]
    );

    let out = run_client(
        &host,
        Some(&session),
        json!([{"op": "reminders.cancel", "args": {"id": id}}]),
    )
    .await;
    assert_eq!(assert_ok(&answers(&out)[0])["status"], "cancelled");

    let out = run_client(&host, None, json!([{"op": "reminders.list", "args": {}}])).await;
    assert_error(&answers(&out)[0], "no_session");
}

/// A call bound to no session (a handler's) names the session whose
/// reminders it manages, and reaches only sessions its principal owns or
/// nobody owns; a bound call may not name another session.
#[tokio::test]
async fn unbound_calls_name_the_session_they_manage() {
    let (_dir, host) = setup().await;
    let start = |principal: Option<&str>| {
        let host = host.clone();
        let principal = principal.map(str::to_owned);
        async move {
            host.start_session(StartSession {
                principal,
                ..Default::default()
            })
            .await
            .unwrap()
            .session_id
        }
    };
    let open = start(None).await;
    let mine = start(Some("schedule:digest")).await;
    let theirs = start(Some("alice")).await;
    let out = run_client_as(
        &host,
        None,
        Some("schedule:digest"),
        json!([
            {"op": "reminders.create", "args": {"sessionId": open.as_str(), "delay": "1h", "prompt": "a"}},
            {"op": "reminders.create", "args": {"sessionId": mine.as_str(), "delay": "1h", "prompt": "b"}},
            {"op": "reminders.create", "args": {"sessionId": theirs.as_str(), "delay": "1h", "prompt": "c"}},
            {"op": "reminders.list", "args": {"sessionId": "ses_missing"}},
            {"op": "reminders.list", "args": {"sessionId": 5}},
            {"op": "reminders.list", "args": {"sessionId": mine.as_str()}},
        ]),
    )
    .await;
    let a = answers(&out);
    assert_eq!(assert_ok(&a[0])["sessionId"], json!(open.as_str()));
    assert_eq!(assert_ok(&a[1])["sessionId"], json!(mine.as_str()));
    assert_error(&a[2], "forbidden");
    assert_error(&a[3], "session_not_found");
    assert_error(&a[4], "invalid_args");
    let listed = assert_ok(&a[5])["reminders"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["prompt"], "b");
    assert!(Reminders::of(&host).unwrap().list(Some(&theirs)).is_empty());

    let out = run_client(
        &host,
        Some(&open),
        json!([{"op": "reminders.list", "args": {"sessionId": mine.as_str()}}]),
    )
    .await;
    assert_error(&answers(&out)[0], "invalid_args");
}

/// Issue 43, item 4: the reminders' records and fire claims sat in
/// namespaces any tool could read and write through the endpoint, so a
/// tool could arm a reminder on another session, or delete one, behind the
/// `reminders.*` rules. Those namespaces are the server's now: every
/// `kv.*` operation on them is refused, and a reminder is reached only
/// through `reminders.*`.
#[tokio::test]
async fn the_reminder_namespaces_are_refused_to_tools() {
    let (_dir, host) = setup().await;
    let session = host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let out = run_client(
        &host,
        Some(&session),
        json!([{"op": "reminders.create", "args": {"delay": "1h", "prompt": "check"}}]),
    )
    .await;
    let id = assert_ok(&answers(&out)[0])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        bdk_scheduler::reminders::NAMESPACES,
        ["reminders", "reminder-fires"]
    );
    let requests: Vec<Value> = bdk_scheduler::reminders::NAMESPACES
        .iter()
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .chain([
            json!({"op": "kv.delete", "args": {"namespace": "reminders", "key": id}}),
            json!({"op": "kv.put", "args": {"namespace": "follow-ups", "key": "k", "value": 1}}),
            json!({"op": "reminders.list", "args": {}}),
        ])
        .collect();
    let out = run_client(&host, Some(&session), json!(requests)).await;
    let a = answers(&out);
    for (n, namespace) in bdk_scheduler::reminders::NAMESPACES.iter().enumerate() {
        bdk_testkit::endpoint::assert_reserved(&a[n * 4..n * 4 + 4], namespace);
    }
    assert_error(&a[8], "reserved_namespace");
    assert_ok(&a[9]);
    assert_eq!(assert_ok(&a[10])["reminders"][0]["id"], json!(id));
    assert_eq!(
        host.store().kv_get("reminders", "probe").await.unwrap(),
        None
    );
}
