#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The reminder dev routes over HTTP on a loopback port: listing, firing
//! through the production path, 404 for an unknown id, and no routes at all
//! without `--dev`.

use crate::common;

use bdk_core::host::StartSession;
use bdk_http::Config;
use bdk_scheduler::reminders::{HostReminders, NewReminder};
use serde_json::json;

use common::{client, expect_error, expect_ok, get, serve};

#[tokio::test]
async fn dev_routes_list_and_fire_reminders() {
    let agent = common::agent("solo").await;
    let base = serve(
        vec![agent.mount(None)],
        Config {
            dev: true,
            ..Config::default()
        },
    )
    .await;
    let http = client();
    let session = agent
        .host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let r = agent
        .host
        .create_reminder(
            &session,
            NewReminder {
                every: Some("1h".into()),
                prompt: Some("time to check in".into()),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap();

    let listed = expect_ok(get(&http, format!("{base}/v1/dev/reminders")).await).await;
    assert_eq!(listed["reminders"].as_array().unwrap().len(), 1);
    assert_eq!(listed["reminders"][0]["id"], json!(r.id));
    assert_eq!(listed["reminders"][0]["status"], "armed");
    assert_eq!(listed["reminders"][0]["fireCount"], 0);

    let fired = expect_ok(
        http.post(format!("{base}/v1/dev/reminders/{}", r.id))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(fired["result"], "delivered");
    assert_eq!(fired["reminder"]["fireCount"], 1);
    assert_eq!(fired["reminder"]["status"], "armed");
    assert!(fired["turnId"].is_string(), "{fired}");
    // The fire went into the conversation as a follow-up.
    let events = common::settle(&http, &base, session.as_str(), 1).await;
    let received: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "message.received")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    assert_eq!(received, vec!["time to check in"]);

    expect_error(
        http.post(format!("{base}/v1/dev/reminders/rem_nope"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn dev_routes_are_absent_without_dev() {
    let single = common::single(Config::default()).await;
    expect_error(
        get(&single.http, format!("{}/v1/dev/reminders", single.base)).await,
        404,
        "not_found",
    )
    .await;
}

/// Regression: a reminder whose session was deleted fired into `lastError`
/// forever; firing it now disarms it with `session_deleted`.
#[tokio::test]
async fn firing_a_reminder_of_a_deleted_session_disarms_it() {
    let agent = common::agent("solo").await;
    let base = serve(
        vec![agent.mount(None)],
        Config {
            dev: true,
            ..Config::default()
        },
    )
    .await;
    let http = client();
    let session = agent
        .host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let r = agent
        .host
        .create_reminder(
            &session,
            NewReminder {
                every: Some("1h".into()),
                prompt: Some("still there?".into()),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap();
    assert!(agent.host.store().delete_session(&session).await.unwrap());
    let url = format!("{base}/v1/dev/reminders/{}", r.id);
    let body = expect_ok(http.post(&url).send().await.unwrap()).await;
    assert_eq!(body["result"], "disarmed", "{body}");
    assert_eq!(body["turnId"], serde_json::Value::Null);
    assert_eq!(body["reminder"]["status"], "disarmed");
    assert_eq!(body["reminder"]["reason"], "session_deleted");
    assert_eq!(body["reminder"]["fireCount"], 0);
    assert!(body["reminder"].get("lastError").is_none(), "{body}");
    // It is no longer armed, so a second fire is refused.
    expect_error(
        http.post(&url).send().await.unwrap(),
        400,
        "invalid_request",
    )
    .await;
    let list = expect_ok(get(&http, format!("{base}/v1/dev/reminders")).await).await;
    assert_eq!(list["reminders"][0]["reason"], "session_deleted");
}
