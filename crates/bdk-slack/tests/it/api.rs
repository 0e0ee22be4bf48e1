#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The Web API client against the fake Slack API over real sockets: the
//! form encoding and bearer token, `ok: false` as errors with Slack's code,
//! `missing_scope`, `auth.test`'s scopes, and the bounded 429 retries.

use std::time::{Duration, Instant};

use bdk_slack::api::{ApiError, ClientOptions, SlackClient};
use bdk_testkit::slack::{Failure, FakeSlack};
use serde_json::json;

fn client(fake: &FakeSlack, token: &str) -> SlackClient {
    SlackClient::new(
        &fake.url(),
        token,
        ClientOptions {
            max_attempts: 3,
            max_wait: Duration::from_secs(5),
            backoff: Duration::from_millis(10),
            timeout: Duration::from_secs(10),
        },
    )
    .unwrap()
}

#[tokio::test]
async fn calls_are_form_encoded_with_the_bearer_token() {
    let fake = FakeSlack::start().await;
    let c = client(&fake, FakeSlack::BOT_TOKEN);
    let answer = c
        .call(
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "a & b", "blocks": [{"type": "divider"}], "thread_ts": null}),
        )
        .await
        .unwrap();
    assert_eq!(answer["ok"], true);
    let r = &fake.requests()[0];
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/x-www-form-urlencoded"),
        "{r:?}"
    );
    assert_eq!(r.arg("text"), Some("a & b"));
    assert_eq!(r.args["blocks"], json!([{"type": "divider"}]));
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {}", FakeSlack::BOT_TOKEN).as_str())
    );
    let me = c.auth_test().await.unwrap();
    assert_eq!(me.user_id, FakeSlack::BOT_USER);
    assert!(me.scopes.contains(&"chat:write".to_owned()), "{me:?}");
}

#[tokio::test]
async fn refusals_carry_slacks_code() {
    let fake = FakeSlack::start().await;
    let c = client(&fake, FakeSlack::BOT_TOKEN);
    let e = c
        .call(
            "chat.postMessage",
            json!({"channel": "C0NOPE", "text": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "slack_channel_not_found");
    let e = client(&fake, "xoxb-unknown").auth_test().await.unwrap_err();
    assert_eq!(e.slack_error(), Some("invalid_auth"));
    fake.add_token("xoxb-readonly", &["channels:history"]);
    let e = client(&fake, "xoxb-readonly")
        .call(
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "x"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ApiError::Slack { error, needed: Some(n), .. } if error == "missing_scope" && n == "chat:write"),
        "{e:?}"
    );
}

#[tokio::test]
async fn rate_limits_are_waited_out_within_bounds() {
    let fake = FakeSlack::start().await;
    let c = client(&fake, FakeSlack::BOT_TOKEN);
    fake.fail_next(Failure::new(429, "chat.postMessage").header("retry-after", "1"));
    let started = Instant::now();
    c.call(
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "x"}),
    )
    .await
    .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 200]);
    // Asked to wait longer than allowed: fails at once.
    fake.fail_next(Failure::new(429, "chat.update").header("retry-after", "3600"));
    let e = c
        .call(
            "chat.update",
            json!({"channel": "C0GENERAL", "ts": "1.1", "text": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "slack_rate_limited");
    // A 500 is not retried for a write (it may have happened), but is for
    // a read.
    fake.fail_next(Failure::new(500, "chat.postMessage"));
    let e = c
        .call(
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "slack_unavailable");
    fake.fail_next(Failure::new(500, "auth.test"));
    c.auth_test().await.unwrap();
}
