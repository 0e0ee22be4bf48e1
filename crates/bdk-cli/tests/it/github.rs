#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The GitHub pack through the real `bdk serve`, on the PR reviewer example
//! (examples/pr-reviewer), against the fake GitHub API
//! (`bdk_testkit::github::FakeGithub`) and real webhook payloads from
//! `@octokit/webhooks-examples`, signed as GitHub signs them.

use std::path::{Path, PathBuf};

use bdk_testkit::github::{Failure, FakeGithub, Recorded};
use serde_json::Value;
use tempfile::TempDir;

use crate::common;
use common::{Server, client, copy_dir};

const SECRET: &str = "It's a Secret to Everybody";
const REPO: &str = "Codertocat/Hello-World";

/// Real payloads: the examples of `event` with `action` (any action when
/// `None`).
fn examples(event: &str, action: Option<&str>) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../target/github-fixtures/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; `.ci/test-deps` installs GitHub's webhook examples",
            path.display()
        )
    });
    let all: Vec<Value> = serde_json::from_str(&text).unwrap();
    let list = all
        .iter()
        .find(|e| e["name"] == event)
        .unwrap_or_else(|| panic!("no `{event}` examples"));
    list["examples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| action.is_none_or(|a| p["action"] == a))
        .cloned()
        .collect()
}

fn example(event: &str, action: &str) -> Value {
    examples(event, Some(action)).remove(0)
}

/// A private copy of the PR reviewer example.
fn reviewer() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pr-reviewer");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pr-reviewer"),
        &dir,
    );
    (tmp, dir)
}

fn serve(dir: &Path, api: &str, secret: Option<&str>, dev: bool) -> Server {
    let mut cmd = Server::command(&[dir]);
    cmd.env_remove("GITHUB_WEBHOOK_SECRET")
        .env("GITHUB_API_URL", api)
        .env("GITHUB_TOKEN", FakeGithub::TOKEN);
    if dev {
        cmd.arg("--dev");
    }
    if let Some(s) = secret {
        cmd.env("GITHUB_WEBHOOK_SECRET", s);
    }
    Server::spawn(cmd)
}

/// A fake GitHub that knows the example pull request, with one changed file.
async fn github() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_pull_from_payload(&example("pull_request", "opened"));
    fake.set_pull_files(
        REPO,
        2,
        vec![(
            "README.md".to_owned(),
            "modified".to_owned(),
            "@@ -1 +1 @@\n-# Hello-World\n+# Hello World".to_owned(),
        )],
    );
    fake
}

/// POSTs a delivery the way GitHub does: compact JSON, the event and
/// delivery headers, and the signature when a secret is given.
async fn deliver(
    url: &str,
    event: &str,
    id: &str,
    payload: &Value,
    secret: Option<&str>,
) -> (u16, Value) {
    let body = serde_json::to_vec(payload).unwrap();
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .header("user-agent", "GitHub-Hookshot/044aadd")
        .header("x-github-event", event)
        .header("x-github-delivery", id)
        .header("x-github-hook-id", "292430182");
    if let Some(s) = secret {
        req = req.header(
            "x-hub-signature-256",
            bdk_http::channels::sign(s.as_bytes(), &body),
        );
    }
    let r = req.body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// POSTs `body` signed with [`SECRET`], with the given content type and
/// event header (none when `None`).
async fn raw(
    url: &str,
    content_type: &str,
    event: Option<&str>,
    id: &str,
    body: &[u8],
) -> (u16, Value) {
    let mut req = client()
        .post(url)
        .header("content-type", content_type)
        .header(
            "x-hub-signature-256",
            bdk_http::channels::sign(SECRET.as_bytes(), body),
        )
        .header("x-github-delivery", id);
    if let Some(e) = event {
        req = req.header("x-github-event", e);
    }
    let r = req.body(body.to_vec()).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The requests that show progress and replies, as `METHOD path` with the
/// status state or the first line of the comment.
fn outward(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| {
            let what = r.body["state"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    r.body["body"].as_str().map(|b| {
                        b.lines()
                            .find(|l| !l.starts_with("<!--"))
                            .unwrap_or("")
                            .to_owned()
                    })
                })
                .unwrap_or_default();
            format!("{} {} {what}", r.method, r.path)
        })
        .collect()
}

fn is_reply(r: &Recorded, number: u64) -> bool {
    r.method == "POST"
        && r.path == format!("/repos/{REPO}/issues/{number}/comments")
        && r.body["body"]
            .as_str()
            .is_some_and(|b| b.contains("<!-- bdk:github reply"))
}

async fn events(base: &str, session: &str) -> Vec<Value> {
    let url = format!("{base}/pr-reviewer/v1/session/{session}/events");
    common::wait_for(&client(), &url, |e| e["type"] == "session.waiting").await
}

#[tokio::test]
async fn a_pull_request_gets_a_status_a_banner_and_a_review_comment() {
    let fake = github().await;
    let (_tmp, dir) = reviewer();
    let server = serve(&dir, &fake.url(), Some(SECRET), false);
    let hook = format!("{}/pr-reviewer/v1/channels/github", server.base);
    let opened = example("pull_request", "opened");
    let sha = opened["pull_request"]["head"]["sha"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, answer) =
        deliver(&hook, "pull_request", "dlv-opened-1", &opened, Some(SECRET)).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["outcome"], "accepted");
    assert_eq!(answer["created"], true);
    assert_eq!(answer["continuationToken"], format!("github:{REPO}#2"));
    let session = answer["sessionId"].as_str().unwrap().to_owned();

    let seen = fake
        .wait_for("the review comment", |rs| rs.iter().any(|r| is_reply(r, 2)))
        .await;
    let out = outward(&seen);
    let statuses = format!("POST /repos/{REPO}/statuses/{sha}");
    let comments = format!("POST /repos/{REPO}/issues/2/comments");
    assert!(
        out[0].starts_with(&format!("{statuses} pending")),
        "{out:#?}"
    );
    assert!(out[1].starts_with(&format!("{comments} ⏳")), "{out:#?}");
    let n = out.len();
    assert!(
        out[n - 3].starts_with(&format!("PATCH /repos/{REPO}/issues/comments/")),
        "{out:#?}"
    );
    assert!(out[n - 3].contains("✅"), "{out:#?}");
    assert!(
        out[n - 2].starts_with(&format!("{statuses} success")),
        "{out:#?}"
    );
    assert!(
        out[n - 1].starts_with(&format!("{comments} Review of")),
        "{out:#?}"
    );
    // One banner, edited in place, and the reply: two comments in all.
    let posted = fake.comments(REPO, 2);
    assert_eq!(posted.len(), 2, "{posted:#?}");
    assert!(posted[0]["body"].as_str().unwrap().contains("✅"));
    assert!(posted[1]["body"].as_str().unwrap().contains("README.md"));
    // The agent read the pull request with the channel's token.
    let read = seen
        .iter()
        .find(|r| r.method == "GET" && r.path == format!("/repos/{REPO}/pulls/2/files"))
        .expect("the tool read the changed files");
    assert_eq!(
        read.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {}", FakeGithub::TOKEN).as_str())
    );
    // The status links to the session's events.
    let pending = &fake.statuses(REPO, &sha)[0];
    assert!(
        pending["target_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/pr-reviewer/v1/session/{session}/events")),
        "{pending}"
    );
    // The posted reply is recorded in the session.
    let evs = events(&server.base, &session).await;
    let outbound: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "channel.outbound")
        .collect();
    assert_eq!(outbound.len(), 1, "{outbound:#?}");
    assert_eq!(outbound[0]["data"]["action"], "reply");
    assert_eq!(outbound[0]["data"]["ok"], true);

    // The same delivery again runs nothing.
    let before = fake.requests().len();
    let (status, again) =
        deliver(&hook, "pull_request", "dlv-opened-1", &opened, Some(SECRET)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outcome"], "duplicate");
    assert_eq!(again["sessionId"], session.as_str());
    let evs = events(&server.base, &session).await;
    assert_eq!(
        evs.iter()
            .filter(|e| e["type"] == "message.received")
            .count(),
        1
    );
    assert_eq!(fake.requests().len(), before);

    // A bad or missing signature gets 401 and runs nothing.
    let (status, refused) = deliver(&hook, "pull_request", "dlv-bad", &opened, Some("wrong")).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"], "unauthorized");
    let (status, _) = deliver(&hook, "pull_request", "dlv-unsigned", &opened, None).await;
    assert_eq!(status, 401);

    // A push to the same pull request wakes the same session.
    let sync = example("pull_request", "synchronize");
    let (status, answer) = deliver(&hook, "pull_request", "dlv-sync-1", &sync, Some(SECRET)).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["sessionId"], session.as_str());
    assert_eq!(answer["created"], false);
    fake.wait_for("the second review", |rs| {
        rs.iter().filter(|r| is_reply(r, 2)).count() == 2
    })
    .await;
    // Still one banner.
    assert_eq!(fake.comments(REPO, 2).len(), 3);
}

#[tokio::test]
async fn pings_mentions_bots_and_hostile_deliveries() {
    let fake = github().await;
    let (_tmp, dir) = reviewer();
    let server = serve(&dir, &fake.url(), Some(SECRET), false);
    let hook = format!("{}/pr-reviewer/v1/channels/github", server.base);

    let ping = examples("ping", None).remove(0);
    let (status, pong) = deliver(&hook, "ping", "dlv-ping", &ping, Some(SECRET)).await;
    assert_eq!(status, 200, "{pong}");
    assert_eq!(pong["outcome"], "pong");

    // A comment that does not mention the bot, and one the pack wrote.
    let mut comment = example("issue_comment", "created");
    let (status, a) = deliver(&hook, "issue_comment", "dlv-c1", &comment, Some(SECRET)).await;
    assert_eq!(
        (status, a["outcome"].as_str()),
        (202, Some("ignored")),
        "{a}"
    );
    assert!(a["reason"].as_str().unwrap().contains("mention"), "{a}");
    comment["comment"]["body"] = "@pr-reviewer-bot done <!-- bdk:github reply turn_1 -->".into();
    let (_, a) = deliver(&hook, "issue_comment", "dlv-c2", &comment, Some(SECRET)).await;
    assert_eq!(a["outcome"], "ignored", "{a}");
    // The bot itself as the sender.
    comment["comment"]["body"] = "@pr-reviewer-bot again".into();
    comment["sender"]["login"] = "pr-reviewer-bot".into();
    let (_, a) = deliver(&hook, "issue_comment", "dlv-c3", &comment, Some(SECRET)).await;
    assert_eq!(a["outcome"], "ignored", "{a}");
    assert!(a["reason"].as_str().unwrap().contains("bot itself"), "{a}");
    // Events nobody asked for.
    let closed = example("pull_request", "closed");
    let (_, a) = deliver(&hook, "pull_request", "dlv-closed", &closed, Some(SECRET)).await;
    assert_eq!(a["outcome"], "ignored", "{a}");

    // A mention on an issue: its own session, a reply, and no status.
    comment["sender"]["login"] = "Codertocat".into();
    let (status, a) = deliver(&hook, "issue_comment", "dlv-c4", &comment, Some(SECRET)).await;
    assert_eq!(status, 202, "{a}");
    assert_eq!(a["continuationToken"], format!("github:{REPO}#1"));
    let seen = fake
        .wait_for("the answer on the issue", |rs| {
            rs.iter().any(|r| is_reply(r, 1))
        })
        .await;
    assert!(
        !seen.iter().any(|r| r.path.contains("/statuses/")),
        "{:#?}",
        outward(&seen)
    );
    let reply = seen.iter().rfind(|r| is_reply(r, 1)).unwrap();
    assert!(
        reply.body["body"]
            .as_str()
            .unwrap()
            .starts_with("Thanks @Codertocat"),
        "{:?}",
        reply.body
    );

    // Hostile input: headers missing, not JSON, a form body, 5 MB.
    let body = br#"{"zen":"x"}"#;
    let (status, _) = raw(&hook, "application/json", None, "d", body).await;
    assert_eq!(status, 400, "no X-GitHub-Event");
    let (status, answer) = raw(
        &hook,
        "application/json",
        Some("pull_request"),
        "d2",
        b"{not json",
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"], "invalid_json");
    let form = b"payload=%7B%7D";
    let (status, _) = raw(
        &hook,
        "application/x-www-form-urlencoded",
        Some("ping"),
        "d3",
        form,
    )
    .await;
    assert_eq!(status, 415);
    let mut huge = example("pull_request", "opened");
    huge["pull_request"]["body"] = "x".repeat(5 * 1024 * 1024).into();
    let (status, a) = deliver(&hook, "pull_request", "dlv-huge", &huge, Some(SECRET)).await;
    assert_eq!(status, 413, "{a}");
    // The server is fine.
    let (status, _) = deliver(&hook, "ping", "dlv-ping-2", &ping, Some(SECRET)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_failing_github_api_shows_in_the_session_and_the_turn_completes() {
    let fake = github().await;
    // The statuses are rate limited once (honoured, then they pass), the
    // banner is refused, and an unknown repository's calls are 404s.
    fake.fail_next(Failure {
        method: Some("POST"),
        path_contains: "/statuses/".to_owned(),
        status: 429,
        headers: vec![("retry-after".to_owned(), "1".to_owned())],
        body: serde_json::json!({"message": "You have exceeded a secondary rate limit."}),
        times: 1,
    });
    fake.fail_next(Failure {
        method: Some("POST"),
        path_contains: "/issues/2/comments".to_owned(),
        status: 403,
        headers: vec![],
        body: serde_json::json!({"message": "Resource not accessible by integration"}),
        times: 1,
    });
    let (_tmp, dir) = reviewer();
    let server = serve(&dir, &fake.url(), Some(SECRET), false);
    let hook = format!("{}/pr-reviewer/v1/channels/github", server.base);
    let opened = example("pull_request", "opened");
    let sha = opened["pull_request"]["head"]["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, a) = deliver(&hook, "pull_request", "dlv-f1", &opened, Some(SECRET)).await;
    assert_eq!(status, 202, "{a}");
    let session = a["sessionId"].as_str().unwrap().to_owned();
    fake.wait_for("the reply", |rs| rs.iter().any(|r| is_reply(r, 2)))
        .await;
    let states: Vec<String> = fake
        .statuses(REPO, &sha)
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["pending", "success"]);
    let evs = events(&server.base, &session).await;
    let failed: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "channel.outbound" && e["data"]["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0]["data"]["action"], "banner");
    assert_eq!(failed[0]["data"]["code"], "github_forbidden");
    assert!(evs.iter().any(|e| e["type"] == "turn.completed"));

    // A repository the API does not know: every call is a 404, recorded,
    // and the turn still ends.
    let mut stranger = opened.clone();
    stranger["repository"]["full_name"] = "nobody/nothing".into();
    let (status, a) = deliver(&hook, "pull_request", "dlv-f2", &stranger, Some(SECRET)).await;
    assert_eq!(status, 202, "{a}");
    // The calls are recorded as they answer, which may be after the turn
    // has ended (the turn does not wait for them): wait for the refusal.
    let url = format!(
        "{}/pr-reviewer/v1/session/{}/events",
        server.base,
        a["sessionId"].as_str().unwrap()
    );
    let evs = common::wait_for(&client(), &url, |e| {
        e["type"] == "channel.outbound" && e["data"]["code"] == "github_not_found"
    })
    .await;
    let evs = if evs.iter().any(|e| e["type"] == "turn.completed") {
        evs
    } else {
        events(&server.base, a["sessionId"].as_str().unwrap()).await
    };
    assert!(evs.iter().any(|e| e["type"] == "turn.completed"));
    let codes: Vec<&str> = evs
        .iter()
        .filter(|e| e["type"] == "channel.outbound")
        .filter_map(|e| e["data"]["code"].as_str())
        .collect();
    assert!(codes.contains(&"github_not_found"), "{codes:?}");
}

#[tokio::test]
async fn unsigned_deliveries_need_dev_and_the_fan_out_reaches_every_channel() {
    let fake = github().await;
    let (_tmp, dir) = reviewer();
    let opened = example("pull_request", "opened");
    {
        let server = serve(&dir, &fake.url(), None, false);
        let hook = format!("{}/pr-reviewer/v1/channels/github", server.base);
        let (status, a) = deliver(&hook, "pull_request", "dlv-u1", &opened, None).await;
        assert_eq!(status, 401, "{a}");
        assert!(
            a["message"]
                .as_str()
                .unwrap()
                .contains("GITHUB_WEBHOOK_SECRET"),
            "{a}"
        );
    }
    let server = serve(&dir, &fake.url(), None, true);
    let fan_out = format!("{}/v1/webhooks/github", server.base);
    let (status, a) = deliver(&fan_out, "pull_request", "dlv-u2", &opened, None).await;
    assert_eq!(status, 202, "{a}");
    assert_eq!(a["deliveries"][0]["agent"], "pr-reviewer");
    assert_eq!(a["deliveries"][0]["outcome"], "accepted");
    fake.wait_for("the reply", |rs| rs.iter().any(|r| is_reply(r, 2)))
        .await;
}

/// `bdk github replay <args>` run as the real binary with a clean GitHub
/// environment plus `env`: its exit code, its stdout parsed as JSON
/// (`Null` when it is not), and its whole output for messages.
async fn replay(args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"));
    cmd.args(["github", "replay"]).args(args);
    for name in [
        "GITHUB_WEBHOOK_SECRET",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_API_URL",
    ] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    let out = tokio::time::timeout(bdk_testkit::PATIENCE, cmd.output())
        .await
        .expect("bdk github replay ends")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        format!("{stdout}{stderr}"),
    )
}

#[tokio::test]
async fn replay_drives_the_same_path_as_a_delivery_from_github() {
    let fake = github().await;
    let (_tmp, dir) = reviewer();
    let server = serve(&dir, &fake.url(), Some(SECRET), false);
    let saved = dir.join("deliveries/pull_request.opened.json");
    let saved = saved.to_str().unwrap();
    let signed = [("GITHUB_WEBHOOK_SECRET", SECRET)];

    // The example's saved delivery, through the loopback fan-out.
    let args = [
        saved,
        "--url",
        &server.base,
        "--delivery-id",
        "dlv-replay-1",
        "--json",
    ];
    let (code, answer, out) = replay(&args, &signed).await;
    assert_eq!(code, 0, "{out}");
    let first = &answer["deliveries"][0];
    assert_eq!(first["agent"], "pr-reviewer", "{answer}");
    assert_eq!(first["outcome"], "accepted", "{answer}");
    assert_eq!(first["created"], true, "{answer}");
    let session = first["sessionId"].as_str().unwrap().to_owned();
    fake.wait_for("the review comment", |rs| rs.iter().any(|r| is_reply(r, 2)))
        .await;
    let sha = example("pull_request", "opened")["pull_request"]["head"]["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let states: Vec<String> = fake
        .statuses(REPO, &sha)
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["pending", "success"]);

    // The same delivery id again runs nothing.
    let before = fake.requests().len();
    let (code, answer, out) = replay(&args, &signed).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(answer["deliveries"][0]["outcome"], "duplicate", "{answer}");
    assert_eq!(fake.requests().len(), before);

    // A pull request URL: fetched from the API with the token and sent to
    // the channel's own route as a push; it wakes the same session.
    let api = fake.url();
    let channel = "/pr-reviewer/v1/channels/github";
    let (code, answer, out) = replay(
        &[
            &format!("https://github.com/{REPO}/pull/2"),
            "--url",
            &server.base,
            "--path",
            channel,
            "--action",
            "synchronize",
            "--api-url",
            &api,
            "--json",
        ],
        &[
            ("GITHUB_WEBHOOK_SECRET", SECRET),
            ("GITHUB_TOKEN", FakeGithub::TOKEN),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    assert_eq!(answer["sessionId"], session.as_str(), "{answer}");
    assert_eq!(answer["created"], false, "{answer}");
    fake.wait_for("the second review", |rs| {
        rs.iter().filter(|r| is_reply(r, 2)).count() == 2
    })
    .await;

    // The wrong secret: the server's 401, exit 1; no secret at all against
    // a server that is not --dev: refused the same way.
    let (code, _, out) = replay(
        &[saved, "--url", &server.base, "--path", channel],
        &[("GITHUB_WEBHOOK_SECRET", "wrong")],
    )
    .await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("401"), "{out}");
    let (code, _, out) = replay(&[saved, "--url", &server.base, "--path", channel], &[]).await;
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        fake.comments(REPO, 2).len(),
        3,
        "one banner and two replies"
    );
}
