#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Handler programs through the real `bdk serve --dev`, on the handlers
//! example (examples/handlers): a channel route whose handler maps each
//! request to a customer's conversation and answers its own body, a
//! schedule whose handler calls a tool, wakes those conversations and waits
//! for their replies, and handlers that misbehave in every way a program
//! can (hang, crash, garbage, flood) without a 500 or a dead server.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common;
use common::{Server, client, copy_dir, get_json, post};

const TOKEN: &str = "desk-token";

/// A private copy of the handlers example.
fn desk() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("desk");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/handlers"),
        &dir,
    );
    (tmp, dir)
}

fn serve(dir: &Path) -> Server {
    let mut cmd = Server::command(&[dir]);
    cmd.arg("--dev").env("BDK_CHANNEL_SUPPORT_TOKEN", TOKEN);
    Server::spawn(cmd)
}

/// POSTs a ticket; the status, the headers and the body.
async fn ticket(
    c: &reqwest::Client,
    base: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = c
        .post(format!("{base}/desk/v1/channels/support/tickets"))
        .bearer_auth(TOKEN)
        .header("x-request-id", "req-7")
        .header("x-secret", "not for the handler")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap())
}

/// Waits until the session rests, then returns its events.
async fn settled(c: &reqwest::Client, base: &str, id: &str) -> Vec<Value> {
    let resp = c
        .get(format!("{base}/desk/v1/session/{id}/stream?startIndex=0"))
        .send()
        .await
        .unwrap();
    let (_, _) = common::read_until(resp, |e| e["type"] == "session.waiting").await;
    let r = c
        .get(format!("{base}/desk/v1/session/{id}/events"))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn replies(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "turn.completed")
        .map(|e| e["data"]["reply"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_channel_handler_maps_requests_to_conversations_and_answers_its_own_body() {
    let (_tmp, dir) = desk();
    let server = serve(&dir);
    let c = client();

    let (status, headers, body) = ticket(
        &c,
        &server.base,
        json!({"customer": "acme", "text": "printer on fire"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body,
        json!({"ticket": 1, "customer": "acme", "conversation": "support:acme", "requestId": "req-7"})
    );
    assert_eq!(headers["x-ticket-number"], "1");
    let acme = headers["bdk-session-id"].to_str().unwrap().to_owned();
    assert!(headers.contains_key("bdk-delivery-id"), "{headers:?}");
    let events = settled(&c, &server.base, &acme).await;
    assert_eq!(
        replies(&events),
        ["Logged ticket #1 for acme: printer on fire"]
    );

    // The same customer lands in the same conversation, another one not.
    let (status, headers, body) = ticket(
        &c,
        &server.base,
        json!({"customer": "acme", "text": "still on fire"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["ticket"], 2);
    assert_eq!(headers["bdk-session-id"].to_str().unwrap(), acme);
    let (_, headers, _) = ticket(
        &c,
        &server.base,
        json!({"customer": "globex", "text": "hello"}),
    )
    .await;
    assert_ne!(headers["bdk-session-id"].to_str().unwrap(), acme);

    // The channel's checks run before the handler: nothing reaches it.
    let (status, _, body) = ticket(&c, &server.base, json!({"customer": "ACME!"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_body");
    let r = c
        .post(format!("{}/desk/v1/channels/support/tickets", server.base))
        .bearer_auth("wrong")
        .json(&json!({"customer": "acme", "text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let counters = settled(&c, &server.base, &acme).await;
    assert_eq!(replies(&counters).len(), 2, "{counters:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_handler_wakes_an_existing_session_and_waits_for_its_reply() {
    let (_tmp, dir) = desk();
    let server = serve(&dir);
    let c = client();
    let (_, headers, _) = ticket(
        &c,
        &server.base,
        json!({"customer": "acme", "text": "printer on fire"}),
    )
    .await;
    let acme = headers["bdk-session-id"].to_str().unwrap().to_owned();
    settled(&c, &server.base, &acme).await;

    let (status, fired) = post(
        &c,
        &format!("{}/desk/v1/dev/schedules/digest", server.base),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{fired}");
    assert_eq!(fired["sessionIds"], json!([acme]));
    let answer = &fired["handler"]["answer"];
    let digest = "Digest: 1 open ticket(s) in this conversation, all acknowledged.";
    assert_eq!(answer["replies"]["acme"], digest, "{fired}");
    // It set a reminder in that conversation, by session id.
    let reminder = answer["reminders"]["acme"].as_str().unwrap();
    let listed = get_json(&c, &format!("{}/desk/v1/dev/reminders", server.base)).await;
    let found = listed["reminders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == reminder)
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(found["sessionId"], acme.as_str());
    assert_eq!(found["prompt"], "Follow up on the open tickets.");

    // The handler woke the existing conversation, and waited for the turn
    // it started: the reply it reported is that turn's.
    let events = settled(&c, &server.base, &acme).await;
    assert_eq!(
        replies(&events),
        ["Logged ticket #1 for acme: printer on fire", digest]
    );
    let woke = events
        .iter()
        .filter(|e| e["type"] == "message.received")
        .nth(1)
        .unwrap();
    assert_eq!(woke["data"]["message"], "Daily digest: 1 open tickets.");

    // The run is on record where the dev route shows schedules.
    let listed = get_json(&c, &format!("{}/desk/v1/dev/schedules", server.base)).await;
    let digest_status = &listed["schedules"][0];
    assert_eq!(digest_status["kind"], "handler");
    assert_eq!(digest_status["lastRun"]["ok"], true);
    assert_eq!(digest_status["lastRun"]["failures"], 0);
    assert_eq!(digest_status["lastRun"]["sessionIds"], json!([acme]));
    assert_eq!(
        digest_status["lastRun"]["handler"]["answer"]["replies"]["acme"],
        digest
    );
}

/// Handlers that hang, crash, print garbage, flood stdout or answer a
/// status they may not: the caller gets `424 handler_failed` without the
/// handler's stderr, the schedule's record counts the failures, and the
/// server keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn misbehaving_handlers_fail_cleanly() {
    let (_tmp, dir) = desk();
    let channels = dir.join("agent/channels");
    let routes = [
        ("hang", "import time; time.sleep(60)", "timeout_secs = 1\n"),
        (
            "crash",
            "import sys; sys.stderr.write('SECRET-IN-STDERR'); sys.exit(3)",
            "",
        ),
        ("garbage", "print('not json at all')", ""),
        ("flood", "print('x' * 100000)", "max_output_bytes = 1024\n"),
        ("array", "print('[1, 2]')", ""),
        ("status", "print('{\"status\": 503}')", ""),
        (
            "header",
            "print('{\"headers\": {\"content-length\": \"1\"}}')",
            "",
        ),
        ("shape", "print('{\"body\": 1, \"bodyy\": 2}')", ""),
        ("hog", "b = b'x' * (512 << 20)", ""),
    ];
    // Handlers run under the agent's limits like its tools.
    let agent_toml = dir.join("agent/agent.toml");
    let mut config = std::fs::read_to_string(&agent_toml).unwrap();
    config.push_str("\n[sandbox]\nmemory = \"64 MiB\"\n");
    std::fs::write(&agent_toml, config).unwrap();
    let mut manifest =
        String::from("auth = \"bearer\"\ntoken_env = \"BDK_CHANNEL_SUPPORT_TOKEN\"\n");
    for (name, code, extra) in routes {
        // Prefixed: a script named like a standard module (`array.py`)
        // would shadow it for every Python program in the folder.
        std::fs::write(channels.join(format!("bad_{name}.py")), code).unwrap();
        manifest.push_str(&format!(
            "\n[[routes]]\nmethod = \"POST\"\npath = \"/{name}\"\nhandler = [\"python3\", \"bad_{name}.py\"]\n{extra}"
        ));
    }
    std::fs::write(channels.join("bad.toml"), manifest).unwrap();
    let schedules = dir.join("agent/schedules");
    std::fs::write(schedules.join("broken.py"), "import sys; sys.exit(2)").unwrap();
    std::fs::write(
        schedules.join("broken.toml"),
        "cron = \"0 0 * * *\"\nhandler = [\"python3\", \"broken.py\"]\n",
    )
    .unwrap();
    std::fs::write(
        schedules.join("refuses.py"),
        "print('{\"ok\": false, \"error\": \"upstream is down\"}')",
    )
    .unwrap();
    std::fs::write(
        schedules.join("refuses.toml"),
        "cron = \"0 0 * * *\"\nhandler = [\"python3\", \"refuses.py\"]\n",
    )
    .unwrap();

    let server = serve(&dir);
    let c = client();
    for (name, _, _) in routes {
        let r = c
            .post(format!("{}/desk/v1/channels/bad/{name}", server.base))
            .bearer_auth(TOKEN)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 424, "{name}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "handler_failed", "{name}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(!message.contains("SECRET"), "{name}: {message}");
    }
    // The server logs each failure before it answers, but the test reads
    // its stderr on another thread: wait for the lines to arrive.
    let codes = [
        "handler_timeout",
        "handler_exited",
        "handler_bad_answer",
        "handler_output_exceeded",
        "handler_limit_reached",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stderr = loop {
        let stderr = server.stderr.lock().unwrap().clone();
        if codes.iter().all(|code| stderr.contains(code)) || std::time::Instant::now() > deadline {
            break stderr;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for code in codes {
        assert!(stderr.contains(code), "{code} is not in the log:\n{stderr}");
    }

    for (name, code) in [
        ("broken", "handler_exited"),
        ("refuses", "handler_reported_failure"),
    ] {
        for _ in 0..2 {
            let (status, body) = post(
                &c,
                &format!("{}/desk/v1/dev/schedules/{name}", server.base),
                json!({}),
            )
            .await;
            assert_eq!(status, 424, "{name}: {body}");
            assert_eq!(body["error"], "handler_failed");
        }
        let listed = get_json(&c, &format!("{}/desk/v1/dev/schedules", server.base)).await;
        let record = listed["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone();
        assert_eq!(record["lastRun"]["ok"], false, "{record}");
        assert_eq!(record["lastRun"]["errorCode"], code, "{record}");
        assert_eq!(record["lastRun"]["failures"], 2, "{record}");
        assert!(
            record["lastRun"]["lastFailure"]["at"].is_string(),
            "{record}"
        );
    }
    let listed = get_json(&c, &format!("{}/desk/v1/dev/schedules", server.base)).await;
    let refuses = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "refuses")
        .unwrap()
        .clone();
    assert!(
        refuses["lastRun"]["error"]
            .as_str()
            .unwrap()
            .contains("upstream is down"),
        "{refuses}"
    );

    // Still serving: a good request goes through.
    let (status, _, body) =
        ticket(&c, &server.base, json!({"customer": "acme", "text": "ok"})).await;
    assert_eq!(status, 201, "{body}\n{}", server.stderr.lock().unwrap());
}

#[test]
fn the_example_validates_clean() {
    let (_tmp, dir) = desk();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["validate"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("0 error(s), 0 warning(s)"), "{stdout}");
}
