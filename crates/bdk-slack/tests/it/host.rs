#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The pack inside a real host: the `slack.*` host-endpoint operations
//! reached by a Python tool over the socket named in its environment (the
//! way subprocess tools and handlers call them), against the fake Slack
//! Web API; and the durable claim of an event id, taken by `accept` and
//! given back by `release`.

use std::sync::Arc;

use bdk_core::host::Host;
use bdk_slack::{Ingress, Request, Slack, SlackOptions};
use bdk_testkit::endpoint::{ok, refused, run_client};
use bdk_testkit::slack::{FakeSlack, app_mention};
use serde_json::{Value, json};
use tempfile::TempDir;

const GENERAL: &str = "C0GENERAL";

struct Setup {
    _dir: TempDir,
    host: Host,
    slack: Slack,
    fake: FakeSlack,
}

/// A project with a Slack channel on the fake API, the client tool, and a
/// host over both; the token reaches the pack through injected secrets.
async fn setup() -> Setup {
    let fake = FakeSlack::start().await;
    let channel = format!(
        "kind = \"slack\"\n\n[slack]\napi_url = \"{}\"\n",
        fake.url()
    );
    let found = bdk_testkit::endpoint::client_agent()
        .channel("slack", &channel)
        .discover();
    let (dir, project) = (found.dir, found.project);
    let secrets: bdk_slack::Secrets =
        Arc::new(|name| (name == "SLACK_BOT_TOKEN").then(|| FakeSlack::BOT_TOKEN.to_owned()));
    let slack = Slack::from_project(&project, SlackOptions::default().with_secrets(secrets))
        .expect("the project has a Slack channel");
    let host = bdk_testkit::host::host_over(project, &dir.path().join("state"), |b| {
        b.extension(Arc::new(slack.clone()))
    })
    .await;
    Setup {
        _dir: dir,
        host,
        slack,
        fake,
    }
}

#[tokio::test]
async fn the_slack_operations_post_update_and_read_a_thread() {
    let s = setup().await;
    let parent = s
        .fake
        .post_user_message(GENERAL, "U0ALICE", "deploy went fine?", None);
    let a = run_client(
        &s.host,
        false,
        json!([
            {"op": "slack.post", "args": {"channel": GENERAL, "thread_ts": parent, "text": "**Yes**, see [the log](https://ci.example.com/1)"}},
        ]),
    )
    .await;
    let posted = ok(&a[0]).clone();
    let ts = posted["ts"].as_str().unwrap().to_owned();
    let a = run_client(
        &s.host,
        false,
        json!([
            {"op": "slack.update", "args": {"channel": GENERAL, "ts": ts, "text": "Yes & done"}},
            {"op": "slack.thread", "args": {"channel": GENERAL, "thread_ts": parent}},
        ]),
    )
    .await;
    ok(&a[0]);
    let thread = ok(&a[1]);
    let texts: Vec<&str> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["deploy went fine?", "Yes &amp; done"], "{thread}");
    // The first text went out as mrkdwn.
    let first = s
        .fake
        .requests()
        .into_iter()
        .find(|r| r.method == "chat.postMessage")
        .unwrap();
    assert_eq!(
        first.arg("text"),
        Some("*Yes*, see <https://ci.example.com/1|the log>")
    );
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {}", FakeSlack::BOT_TOKEN).as_str())
    );
}

#[tokio::test]
async fn the_slack_operations_refuse_bad_arguments_and_dry_runs() {
    let s = setup().await;
    let a = run_client(
        &s.host,
        false,
        json!([
            {"op": "slack.post", "args": {"text": "no channel and no thread"}},
            {"op": "slack.post", "args": {"channel": "#general", "text": "a name, not an id"}},
            {"op": "slack.post", "args": {"channel": GENERAL, "text": "  "}},
            {"op": "slack.post", "args": {"channel": GENERAL, "thread_ts": "yesterday", "text": "x"}},
            {"op": "slack.post", "args": {"channel": GENERAL, "text": "x", "blocks": "not blocks"}},
            {"op": "slack.post", "args": {"channel": GENERAL, "text": "x", "sneaky": 1}},
            {"op": "slack.update", "args": {"channel": GENERAL, "text": "no ts"}},
            {"op": "slack.thread", "args": {"channel": GENERAL}},
        ]),
    )
    .await;
    for answer in &a {
        refused(answer, "invalid_args");
    }
    assert!(s.fake.requests().is_empty());
    // Slack's refusal is the operation's failure, with Slack's code.
    let a = run_client(
        &s.host,
        false,
        json!([{"op": "slack.post", "args": {"channel": "C0NOWHERE", "text": "hi"}}]),
    )
    .await;
    let m = refused(&a[0], "unavailable");
    assert!(m.contains("slack_channel_not_found"), "{m}");
    // A dry run reads but does not write.
    let parent = s.fake.post_user_message(GENERAL, "U0ALICE", "hello", None);
    let a = run_client(
        &s.host,
        true,
        json!([
            {"op": "slack.post", "args": {"channel": GENERAL, "text": "hi"}},
            {"op": "slack.update", "args": {"channel": GENERAL, "ts": parent, "text": "hi"}},
            {"op": "slack.thread", "args": {"channel": GENERAL, "thread_ts": parent}},
        ]),
    )
    .await;
    refused(&a[0], "dry_run");
    refused(&a[1], "dry_run");
    ok(&a[2]);
}

#[tokio::test]
async fn an_event_id_is_claimed_once_and_a_released_claim_runs_again() {
    let s = setup().await;
    let mention = app_mention(GENERAL, "U0ALICE", "<@U0BOT> hi", "1700000000.000100", None);
    let request = |id: &str| Request::Event {
        event_id: id.to_owned(),
        team_id: Some(FakeSlack::TEAM.to_owned()),
        event: mention.clone(),
    };
    let first = s.slack.accept("slack", request("Ev1")).await.unwrap();
    assert!(matches!(first, Ingress::Engage { .. }), "{first:?}");
    let again = s.slack.accept("slack", request("Ev1")).await.unwrap();
    assert!(matches!(again, Ingress::Duplicate { .. }), "{again:?}");
    s.slack.release("slack", "Ev1").await;
    let retried = s.slack.accept("slack", request("Ev1")).await.unwrap();
    assert!(matches!(retried, Ingress::Engage { .. }), "{retried:?}");
    assert!(s.slack.accept("nope", request("Ev2")).await.is_err());
    // The bot's identity came from auth.test, once.
    let auth = s
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "auth.test")
        .count();
    assert_eq!(auth, 1);
}

/// Issue 43, item 4: a tool listed and deleted the pack's event claims
/// through the endpoint, so Slack's retry of an event ran again. The pack's
/// namespaces are the server's: every `kv.*` operation on them is refused,
/// and a claimed event stays claimed.
#[tokio::test]
async fn the_packs_namespaces_are_refused_to_tools() {
    let s = setup().await;
    let mention = app_mention(GENERAL, "U0ALICE", "<@U0BOT> hi", "1700000000.000200", None);
    let request = || Request::Event {
        event_id: "EvKept".to_owned(),
        team_id: Some(FakeSlack::TEAM.to_owned()),
        event: mention.clone(),
    };
    let first = s.slack.accept("slack", request()).await.unwrap();
    assert!(matches!(first, Ingress::Engage { .. }), "{first:?}");
    assert_eq!(
        bdk_slack::NAMESPACES,
        ["slack-events", "slack-threads", "slack-progress"]
    );
    let requests: Vec<Value> = bdk_slack::NAMESPACES
        .iter()
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .chain([
            json!({"op": "kv.delete", "args": {"namespace": "slack-events", "key": "slack/EvKept"}}),
            json!({"op": "kv.put", "args": {"namespace": "standup-notes", "key": "k", "value": 1}}),
        ])
        .collect();
    let a = run_client(&s.host, false, json!(requests)).await;
    for (n, namespace) in bdk_slack::NAMESPACES.iter().enumerate() {
        bdk_testkit::endpoint::assert_reserved(&a[n * 4..n * 4 + 4], namespace);
    }
    refused(&a[12], "reserved_namespace");
    ok(&a[13]);
    let again = s.slack.accept("slack", request()).await.unwrap();
    assert!(matches!(again, Ingress::Duplicate { .. }), "{again:?}");
}
