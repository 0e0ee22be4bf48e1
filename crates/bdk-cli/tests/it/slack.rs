#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The Slack pack through the real `bdk serve`, on the Slack helper example
//! (examples/slack-helper), against the fake Slack Web API
//! (`bdk_testkit::slack::FakeSlack`), with Events API and interactivity
//! requests built from the payload shapes of Slack's docs and signed as
//! Slack signs them.

use std::path::{Path, PathBuf};

use bdk_testkit::slack::{
    FakeSlack, Recorded, app_mention, block_actions, bot_message_event, event_callback,
    interactivity_body, message_event, sign, url_verification,
};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common;
use common::{Server, client, copy_dir};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const GENERAL: &str = "C0GENERAL";
const ALERTS: &str = "C0ALERTS";
const ALICE: &str = "U0ALICE";
const BOB: &str = "U0BOB";

/// A private copy of the Slack helper example.
fn helper() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("slack-helper");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/slack-helper"),
        &dir,
    );
    (tmp, dir)
}

fn serve(dir: &Path, api: &str, secret: Option<&str>) -> Server {
    serve_with_token(dir, api, secret, FakeSlack::BOT_TOKEN)
}

fn serve_with_token(dir: &Path, api: &str, secret: Option<&str>, token: &str) -> Server {
    let mut cmd = Server::command(&[dir]);
    cmd.env_remove("SLACK_SIGNING_SECRET")
        .env("SLACK_API_URL", api)
        .env("SLACK_BOT_TOKEN", token);
    if let Some(s) = secret {
        cmd.env("SLACK_SIGNING_SECRET", s);
    }
    Server::spawn(cmd)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// POSTs `body` as Slack does: signed with `secret` at `timestamp`.
async fn post_signed(
    url: &str,
    content_type: &str,
    body: &[u8],
    secret: &str,
    timestamp: i64,
    retry: Option<u32>,
) -> (u16, Value) {
    let mut req = client()
        .post(url)
        .header("content-type", content_type)
        .header("user-agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
        .header("x-slack-request-timestamp", timestamp.to_string())
        .header("x-slack-signature", sign(secret, timestamp, body));
    if let Some(n) = retry {
        req = req
            .header("x-slack-retry-num", n.to_string())
            .header("x-slack-retry-reason", "http_timeout");
    }
    let r = req.body(body.to_vec()).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Sends one event (wrapped in its `event_callback`) as Slack does.
async fn event(url: &str, event: Value, id: &str) -> (u16, Value) {
    let body = serde_json::to_vec(&event_callback(event, id)).unwrap();
    post_signed(url, "application/json", &body, SECRET, now(), None).await
}

/// Clicks a button of the card `card` (a message the bot posted) as `user`.
async fn click(
    url: &str,
    user: &str,
    card: &Value,
    thread_ts: &str,
    action_id: &str,
) -> (u16, Value) {
    let block = card["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .expect("the card has buttons");
    let button = block["elements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action_id"] == action_id)
        .expect("the button");
    let payload = block_actions(
        user,
        GENERAL,
        card["ts"].as_str().unwrap(),
        Some(thread_ts),
        action_id,
        button["value"].as_str().unwrap(),
        "https://hooks.slack.com/actions/T0FAKE/1/x",
    );
    let body = interactivity_body(&payload);
    post_signed(
        url,
        "application/x-www-form-urlencoded",
        body.as_bytes(),
        SECRET,
        now(),
        None,
    )
    .await
}

/// The calls that change Slack, as `method text` (first line).
fn writes(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method.starts_with("chat.") || r.method.starts_with("files."))
        .map(|r| {
            let text = r.arg("text").unwrap_or("").lines().next().unwrap_or("");
            format!("{} {text}", r.method)
        })
        .collect()
}

/// The bot's messages in a thread, oldest first.
fn bot_messages(fake: &FakeSlack, thread_ts: &str) -> Vec<Value> {
    fake.thread(GENERAL, thread_ts)
        .into_iter()
        .filter(|m| m["user"] == FakeSlack::BOT_USER || m["bot_id"] == FakeSlack::BOT_ID)
        .collect()
}

async fn events(base: &str, session: &str) -> Vec<Value> {
    let url = format!("{base}/slack-helper/v1/session/{session}/events");
    common::wait_for(&client(), &url, |e| e["type"] == "session.waiting").await
}

#[tokio::test]
async fn a_mention_gets_a_placeholder_replaced_by_the_reply_in_its_thread() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = helper();
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);

    // Slack's URL check.
    let body = serde_json::to_vec(&url_verification(
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
    ))
    .unwrap();
    let (status, answer) = post_signed(&hook, "application/json", &body, SECRET, now(), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );

    let ts = fake.post_user_message(GENERAL, ALICE, "<@U0BOT> is checkout up?", None);
    let mention = app_mention(GENERAL, ALICE, "<@U0BOT> is checkout up?", &ts, None);
    let (status, answer) = event(&hook, mention.clone(), "Ev0MENTION1").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "accepted");
    assert_eq!(answer["created"], true);
    let session = answer["sessionId"].as_str().unwrap().to_owned();

    let seen = fake
        .wait_for("the reply", |rs| {
            rs.iter().any(|r| {
                r.method == "chat.update" && r.arg("text").is_some_and(|t| t.contains("degraded"))
            })
        })
        .await;
    let w = writes(&seen);
    assert!(w[0].starts_with("chat.postMessage :hourglass"), "{w:#?}");
    assert!(
        w.last()
            .unwrap()
            .starts_with("chat.update *checkout* is degraded."),
        "the reply is mrkdwn: {w:#?}"
    );
    // One message from the bot in the thread: the placeholder, now the reply.
    let mine = bot_messages(&fake, &ts);
    assert_eq!(mine.len(), 1, "{mine:#?}");
    assert!(
        mine[0]["text"].as_str().unwrap().contains("• error rate"),
        "{mine:#?}"
    );
    assert_eq!(mine[0]["thread_ts"], ts.as_str());
    // Every call carried the bot token.
    for r in &seen {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {}", FakeSlack::BOT_TOKEN).as_str()),
            "{}",
            r.summary()
        );
    }
    let evs = events(&server.base, &session).await;
    let outbound: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "channel.outbound")
        .collect();
    assert_eq!(outbound.len(), 1, "{outbound:#?}");
    assert_eq!(outbound[0]["data"]["action"], "reply");

    // Slack's retry of the same event runs nothing.
    let before = fake.requests().len();
    let body = serde_json::to_vec(&event_callback(mention, "Ev0MENTION1")).unwrap();
    let (status, again) =
        post_signed(&hook, "application/json", &body, SECRET, now(), Some(1)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outcome"], "duplicate");
    assert_eq!(again["sessionId"], session.as_str());
    assert_eq!(fake.requests().len(), before);

    // A reply in the thread (no mention) reaches the same session.
    let reply_ts = fake.post_user_message(GENERAL, BOB, "and is payments up?", Some(&ts));
    let (status, answer) = event(
        &hook,
        message_event(
            GENERAL,
            "channel",
            BOB,
            "and is payments up?",
            &reply_ts,
            Some(&ts),
        ),
        "Ev0REPLY1",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    assert_eq!(answer["sessionId"], session.as_str());
    fake.wait_for("the second reply", |_| bot_messages(&fake, &ts).len() == 2)
        .await;

    // The bot's own message, another bot, an edit, and chatter outside any
    // thread the bot is in: nothing runs.
    let ignored = [
        message_event(
            GENERAL,
            "channel",
            FakeSlack::BOT_USER,
            "my own words",
            "9.1",
            Some(&ts),
        ),
        bot_message_event(
            GENERAL,
            "channel",
            "B0OTHER",
            "another bot",
            "9.2",
            Some(&ts),
        ),
        json!({"type": "message", "subtype": "message_changed", "channel": GENERAL, "ts": "9.3", "message": {"text": "edited"}}),
        message_event(GENERAL, "channel", BOB, "lunch?", "9.4", None),
        message_event(
            GENERAL,
            "channel",
            BOB,
            "in a thread without the bot",
            "9.5",
            Some("8.0"),
        ),
    ];
    for (i, e) in ignored.into_iter().enumerate() {
        let (status, answer) = event(&hook, e, &format!("Ev0IGNORED{i}")).await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (200, Some("ignored")),
            "{i}: {answer}"
        );
    }
}

#[tokio::test]
async fn approvals_are_asked_with_buttons_and_decided_by_an_approver() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = helper();
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);

    // Bob asks for a deploy: the call parks and a card appears.
    let ts = fake.post_user_message(GENERAL, BOB, "<@U0BOT> deploy staging", None);
    let (status, answer) = event(
        &hook,
        app_mention(GENERAL, BOB, "<@U0BOT> deploy staging", &ts, None),
        "Ev0DEPLOY1",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    fake.wait_for("the card", |_| {
        bot_messages(&fake, &ts)
            .iter()
            .any(|m| m["blocks"].is_array())
    })
    .await;
    let card = bot_messages(&fake, &ts)
        .into_iter()
        .find(|m| m["blocks"].is_array())
        .unwrap();
    assert!(card["text"].as_str().unwrap().contains("deploy"), "{card}");

    // A second mention while the turn waits is coalesced into it.
    let more_ts = fake.post_user_message(GENERAL, BOB, "<@U0BOT> is checkout up?", Some(&ts));
    let (status, answer) = event(
        &hook,
        app_mention(
            GENERAL,
            BOB,
            "<@U0BOT> is checkout up?",
            &more_ts,
            Some(&ts),
        ),
        "Ev0MORE1",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    assert_eq!(answer["sessionId"], session.as_str());
    assert_eq!(answer["created"], false);
    assert!(answer.get("turnId").is_none(), "no new turn: {answer}");

    // Bob started the thread but is not an approver: refused, still parked.
    let (status, answer) = click(&hook, BOB, &card, &ts, "bdk_approve").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "refused", "{answer}");
    fake.wait_for("the note to Bob", |_| {
        fake.ephemerals().iter().any(|m| {
            m["user"] == BOB
                && m["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("can approve"))
        })
    })
    .await;
    // A forged card value for another session is not acted on.
    let mut forged = card.clone();
    forged["blocks"] = json!([{"type": "actions", "elements": [
        {"type": "button", "action_id": "bdk_approve", "value": json!({"session": "ses_0000000000000000000000000", "call": "call_x", "approve": true}).to_string()}
    ]}]);
    let (_, answer) = click(&hook, ALICE, &forged, &ts, "bdk_approve").await;
    assert_eq!(answer["outcome"], "ignored", "{answer}");

    // Alice approves: the call runs, the card shows who decided, and the
    // reply replaces the placeholder.
    let (status, answer) = click(&hook, ALICE, &card, &ts, "bdk_approve").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "approved", "{answer}");
    let evs = events(&server.base, &session).await;
    assert!(
        evs.iter().any(|e| e["type"] == "turn.completed"),
        "{evs:#?}"
    );
    fake.wait_for("the reply", |_| {
        bot_messages(&fake, &ts).iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("*checkout* is degraded"))
        })
    })
    .await;
    let decided = bot_messages(&fake, &ts)
        .into_iter()
        .find(|m| m["ts"] == card["ts"])
        .unwrap();
    let shown = decided["blocks"].to_string();
    assert!(shown.contains("<@U0ALICE>"), "{decided}");
    assert!(!shown.contains("bdk_approve"), "no buttons left: {decided}");
    let evs = events(&server.base, &session).await;
    let resolved = evs
        .iter()
        .find(|e| e["type"] == "action.approval_resolved")
        .unwrap();
    assert_eq!(resolved["data"]["by"], "slack:U0ALICE");
    assert_eq!(resolved["data"]["approved"], true);
    let deployed = evs
        .iter()
        .find(|e| e["type"] == "action.result" && e["data"]["name"] == "deploy")
        .unwrap();
    assert_eq!(deployed["data"]["isError"], false, "{deployed}");
    // The coalesced question reached the session.
    let carried = evs.iter().any(|e| {
        matches!(
            e["type"].as_str(),
            Some("nudge.delivered" | "message.received")
        ) && e.to_string().contains("is checkout up?")
    });
    assert!(carried, "{evs:#?}");
    // A second click on the decided card changes nothing.
    let (_, answer) = click(&hook, ALICE, &card, &ts, "bdk_approve").await;
    assert_eq!(answer["outcome"], "ignored", "{answer}");
}

#[tokio::test]
async fn the_stop_word_ends_the_turn_and_alerts_open_their_own_thread() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = helper();
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);

    let ts = fake.post_user_message(GENERAL, ALICE, "<@U0BOT> deploy production", None);
    let (_, answer) = event(
        &hook,
        app_mention(GENERAL, ALICE, "<@U0BOT> deploy production", &ts, None),
        "Ev0PROD1",
    )
    .await;
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    fake.wait_for("the card", |_| {
        bot_messages(&fake, &ts)
            .iter()
            .any(|m| m["blocks"].is_array())
    })
    .await;
    let stop_ts = fake.post_user_message(GENERAL, ALICE, "stop", Some(&ts));
    let (status, answer) = event(
        &hook,
        message_event(GENERAL, "channel", ALICE, "stop", &stop_ts, Some(&ts)),
        "Ev0STOP1",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "stopped", "{answer}");
    assert_eq!(answer["sessionId"], session.as_str());
    fake.wait_for("the stopped placeholder", |_| {
        bot_messages(&fake, &ts)
            .iter()
            .any(|m| m["text"].as_str().is_some_and(|t| t.contains("Stopped")))
    })
    .await;
    let evs = events(&server.base, &session).await;
    let failed = evs.iter().find(|e| e["type"] == "turn.failed").unwrap();
    assert_eq!(failed["data"]["status"], "cancelled");

    // An alert from a bot in the watched channel opens a session in its
    // own thread.
    let (status, answer) = event(
        &hook,
        bot_message_event(
            ALERTS,
            "channel",
            "B0PAGER",
            "checkout is DOWN (5xx > 5%)",
            "7.000100",
            None,
        ),
        "Ev0ALERT1",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    fake.wait_for("the alert's answer", |_| {
        fake.messages(ALERTS).iter().any(|m| {
            m["thread_ts"] == "7.000100"
                && m["user"] == FakeSlack::BOT_USER
                && m["text"].as_str().is_some_and(|t| t.contains("degraded"))
        })
    })
    .await;
}

#[tokio::test]
async fn forged_stale_and_hostile_requests_are_refused() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = helper();
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);
    let body = serde_json::to_vec(&event_callback(
        app_mention(GENERAL, ALICE, "<@U0BOT> hi", "1.000001", None),
        "Ev0HOSTILE1",
    ))
    .unwrap();

    // The wrong secret, a stale timestamp (six minutes), no headers.
    let (status, a) = post_signed(&hook, "application/json", &body, "wrong", now(), None).await;
    assert_eq!(status, 401, "{a}");
    assert_eq!(a["error"], "unauthorized");
    let (status, a) =
        post_signed(&hook, "application/json", &body, SECRET, now() - 360, None).await;
    assert_eq!(status, 401, "{a}");
    assert!(
        a["message"].as_str().unwrap().contains("five minutes"),
        "{a}"
    );
    let r = client()
        .post(&hook)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Not JSON, no type, a form without a payload, another content type.
    for (ct, b, want) in [
        ("application/json", &b"{nope"[..], 400),
        ("application/json", br#"{"event_id":"x"}"#, 400),
        ("application/x-www-form-urlencoded", b"text=hi", 400),
        ("text/plain", b"hi", 415),
    ] {
        let (status, a) = post_signed(&hook, ct, b, SECRET, now(), None).await;
        assert_eq!(status, want, "{ct} {b:?}: {a}");
    }
    // 5 MB, signed.
    let huge = serde_json::to_vec(&event_callback(
        app_mention(
            GENERAL,
            ALICE,
            &"x".repeat(5 * 1024 * 1024),
            "1.000002",
            None,
        ),
        "Ev0HUGE",
    ))
    .unwrap();
    let (status, _) = post_signed(&hook, "application/json", &huge, SECRET, now(), None).await;
    assert_eq!(status, 413);
    // Nothing reached Slack, and the server is fine.
    assert!(
        fake.requests().iter().all(|r| r.method == "auth.test"),
        "{:?}",
        fake.requests()
            .iter()
            .map(Recorded::summary)
            .collect::<Vec<_>>()
    );
    let (status, a) = post_signed(&hook, "application/json", &body, SECRET, now(), None).await;
    assert_eq!(
        (status, a["outcome"].as_str()),
        (200, Some("accepted")),
        "{a}"
    );

    // Without a signing secret the channel refuses everything.
    drop(server);
    let server = serve(&dir, &fake.url(), None);
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);
    let (status, a) = post_signed(&hook, "application/json", &body, SECRET, now(), None).await;
    assert_eq!(status, 401, "{a}");
    assert!(
        a["message"]
            .as_str()
            .unwrap()
            .contains("SLACK_SIGNING_SECRET"),
        "{a}"
    );
}

const REPORT_PY: &str = r#"
import json, os, socket, sys

json.loads(sys.stdin.readline())
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["BDK_HOST_SOCKET"])
stream = conn.makefile("rwb")
ask = {"token": os.environ["BDK_HOST_TOKEN"], "id": 1, "op": "artifacts.tag",
       "args": {"kind": "report", "name": "report.txt", "content": "p50 12ms\np99 40ms\n"}}
stream.write(json.dumps(ask).encode() + b"\n")
stream.flush()
answer = json.loads(stream.readline())
print(json.dumps({"artifact": answer.get("result", {}).get("artifactId")}))
"#;

#[tokio::test]
async fn a_file_the_reply_names_is_uploaded_into_the_thread() {
    let fake = FakeSlack::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("reporter");
    let files = [
        (
            "agent/agent.toml",
            "name = \"reporter\"\nmodel = \"scripted\"\n",
        ),
        ("agent/instructions.md", "You write reports.\n"),
        ("agent/channels/slack.toml", "kind = \"slack\"\n"),
        (
            "agent/tools/report.toml",
            "description = \"Writes the latency report.\"\neffect = \"read\"\ncommand = [\"python3\", \"report.py\"]\n",
        ),
        ("agent/tools/report.py", REPORT_PY),
        (
            "agent/scripted.toml",
            "[[rules]]\nuser_contains = \"report\"\ntool_calls = [ { name = \"report\", input = {} } ]\n\n\
             [[rules]]\ntool_result = \"report\"\nreply = \"The numbers are in report.txt, and one more file stays private.\"\n\n\
             [[rules]]\nreply = \"ok\"\n",
        ),
    ];
    bdk_testkit::write_files(&dir, &files);
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/reporter/v1/channels/slack", server.base);
    let ts = fake.post_user_message(GENERAL, ALICE, "<@U0BOT> the latency report please", None);
    let (status, answer) = event(
        &hook,
        app_mention(
            GENERAL,
            ALICE,
            "<@U0BOT> the latency report please",
            &ts,
            None,
        ),
        "Ev0REPORT1",
    )
    .await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (200, Some("accepted")),
        "{answer}"
    );
    let seen = fake
        .wait_for("the upload", |rs| {
            rs.iter()
                .any(|r| r.method == "files.completeUploadExternal")
        })
        .await;
    let uploaded = fake.files();
    assert_eq!(uploaded.len(), 1, "{uploaded:#?}");
    let file = &uploaded[0];
    assert_eq!(file["length"], 18, "{file}");
    assert_eq!(file["shares"][0]["thread_ts"], ts.as_str(), "{file}");
    let complete = seen
        .iter()
        .find(|r| r.method == "files.completeUploadExternal")
        .unwrap();
    assert_eq!(complete.arg("channel_id"), Some(GENERAL));
    // The upload went to the upload URL without the token.
    let upload = seen
        .iter()
        .find(|r| r.method == bdk_testkit::slack::UPLOAD)
        .expect("the bytes were sent");
    assert_eq!(upload.header("authorization"), None, "{}", upload.summary());
}

#[tokio::test]
async fn a_token_slack_refuses_is_503_and_the_event_stays_for_slacks_retry() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = helper();
    let mention = app_mention(GENERAL, ALICE, "<@U0BOT> is checkout up?", "1.000009", None);
    {
        let server = serve_with_token(&dir, &fake.url(), Some(SECRET), "xoxb-revoked");
        let hook = format!("{}/slack-helper/v1/channels/slack", server.base);
        // The URL check needs no token.
        let body = serde_json::to_vec(&url_verification("abc")).unwrap();
        let (status, a) = post_signed(&hook, "application/json", &body, SECRET, now(), None).await;
        assert_eq!((status, a["challenge"].as_str()), (200, Some("abc")), "{a}");
        // An event cannot be classified without knowing the bot: 503, so
        // that Slack retries it.
        let (status, a) = event(&hook, mention.clone(), "Ev0RETRYME").await;
        assert_eq!(status, 503, "{a}");
        assert_eq!(a["error"], "upstream_unavailable", "{a}");
        assert!(
            a["message"].as_str().unwrap().contains("invalid_auth"),
            "{a}"
        );
    }
    let methods: Vec<String> = fake.requests().iter().map(|r| r.method.clone()).collect();
    assert!(methods.iter().all(|m| m == "auth.test"), "{methods:?}");
    // With the token fixed, Slack's retry of the same event runs: no claim
    // was taken for it.
    let server = serve(&dir, &fake.url(), Some(SECRET));
    let hook = format!("{}/slack-helper/v1/channels/slack", server.base);
    let body = serde_json::to_vec(&event_callback(mention, "Ev0RETRYME")).unwrap();
    let (status, a) = post_signed(&hook, "application/json", &body, SECRET, now(), Some(1)).await;
    assert_eq!(
        (status, a["outcome"].as_str()),
        (200, Some("accepted")),
        "{a}"
    );
}
