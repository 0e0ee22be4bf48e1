#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk serve` as a real process on an ephemeral port, spoken to over HTTP.

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::{Value, json};

use crate::common;
use common::{Server, client, post, read_until, wait_for, weather};

#[tokio::test(flavor = "multi_thread")]
async fn a_session_over_http_streams_its_turn() {
    let (_tmp, dir) = weather();
    let server = Server::start(&[], &[&dir]);
    let c = client();
    let health = c
        .get(format!("{}/v1/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let (status, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({"message": "What's the weather in Paris?"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap();
    assert!(
        started["continuationToken"]
            .as_str()
            .unwrap()
            .starts_with("http:")
    );
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (events, _) = read_until(resp, |e| e["type"] == "session.waiting").await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["index"], i as u64);
    }
    let completed = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap();
    assert!(
        completed["data"]["reply"]
            .as_str()
            .unwrap()
            .contains("Paris")
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "action.result" && e["data"]["name"] == "get_weather")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_in_the_middle_of_a_stream_loses_nothing() {
    let (_tmp, dir) = weather();
    let mut server = Server::start(&[], &[&dir]);
    let c = client();
    let (_, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({"message": "Please be slow"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let resp = c
        .get(format!("{}/weather/v1/session/{id}/stream", server.base))
        .send()
        .await
        .unwrap();
    let reader = tokio::spawn(read_until(resp, |_| false));
    // Wait until the slow turn is running, then stop the server.
    wait_for(
        &c,
        &format!("{}/weather/v1/session/{id}/events", server.base),
        |e| e["type"] == "step.started",
    )
    .await;
    let code = server.terminate();
    assert_eq!(
        code,
        0,
        "graceful shutdown exits 0; stderr:\n{}",
        server.stderr.lock().unwrap()
    );
    let (seen, ended) = reader.await.unwrap();
    assert!(ended, "the stream ends when the server stops");
    let last = seen.last().unwrap()["index"].as_u64().unwrap();
    assert!(
        seen.iter()
            .any(|e| e["type"] == "turn.failed" && e["data"]["status"] == "interrupted"),
        "{seen:?}"
    );

    // Same state root, new process: resume right after the last seen index.
    let server = Server::start(&[], &[&dir]);
    let (status, sent) = post(
        &c,
        &format!("{}/weather/v1/session/{id}", server.base),
        json!({"message": "What's the weather in Oslo?", "continuationToken": started["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex={}",
            server.base,
            last + 1
        ))
        .send()
        .await
        .unwrap();
    let (rest, _) = read_until(resp, |e| {
        e["type"] == "session.waiting" && e["turnId"].is_null()
    })
    .await;
    assert_eq!(
        rest[0]["index"].as_u64().unwrap(),
        last + 1,
        "no gap and no duplicate at the seam"
    );
    for w in rest.windows(2) {
        assert_eq!(
            w[1]["index"].as_u64().unwrap(),
            w[0]["index"].as_u64().unwrap() + 1
        );
    }
    assert!(rest.iter().any(|e| e["type"] == "turn.completed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_invalid_projects_and_bad_flags() {
    let broken = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(broken.path().join("agent")).unwrap();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .arg("serve")
        .arg(broken.path())
        .args(["--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("instructions"));
    let (_tmp, dir) = weather();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .arg("serve")
        .arg(&dir)
        .arg(&dir)
        .args(["--port", "0", "--mode", "single"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_default_port_falls_back_to_the_next_free_one_and_single_mode_serves_v1() {
    let (_tmp, dir) = weather();
    // The default port, held here (or by whoever already holds it): busy
    // either way. An explicit `--port` does not fall back (conventions.rs).
    let taken = std::net::TcpListener::bind("127.0.0.1:3000");
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.arg("serve")
        .arg(&dir)
        .args(["--mode", "single"])
        .env_remove("BDK_STATE_ROOT");
    let server = Server::spawn(cmd);
    assert_ne!(server.base, "http://127.0.0.1:3000");
    let c = client();
    let (status, body) = post(
        &c,
        &format!("{}/v1/session", server.base),
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Give the stderr reader a moment to see the fallback note it printed first.
    server.wait_for_stderr(|text| text.contains("port 3000 is busy"));
    drop(taken);
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_tokens_make_principals_own_their_sessions() {
    let (_tmp, dir) = weather();
    let server = Server::start(
        &[
            "--bearer-token",
            "alice=alice-secret-1",
            "--bearer-token",
            "bob=bob-secret-22",
        ],
        &[&dir],
    );
    let c = client();
    let url = format!("{}/weather/v1/session", server.base);
    let r = c
        .post(&url)
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(&url)
        .bearer_auth("alice-secret-1")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let id = body["sessionId"].as_str().unwrap();
    let r = c
        .get(format!("{}/weather/v1/session/{id}/events", server.base))
        .bearer_auth("bob-secret-22")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = c
        .get(format!(
            "{}/weather/v1/session/{id}/events?format=json",
            server.base
        ))
        .bearer_auth("alice-secret-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Runs one session to rest over HTTP; returns `(id, token)`.
async fn session_at_rest(c: &reqwest::Client, agent: &str, message: &str) -> (String, String) {
    let (status, started) = post(c, &format!("{agent}/session"), json!({"message": message})).await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let resp = c
        .get(format!("{agent}/session/{id}/stream?startIndex=0"))
        .send()
        .await
        .unwrap();
    read_until(resp, |e| e["type"] == "session.waiting").await;
    let token = started["continuationToken"].as_str().unwrap().to_owned();
    (id, token)
}

async fn get_status(c: &reqwest::Client, url: &str) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Regression: a line appended to a session's `events.ndjson` from outside
/// (a tool did it) made that session answer 500. A damaged log now answers
/// `409 session_corrupt` on that session's routes, a foreign trailing line is
/// cut like a torn tail, and other sessions, the listing and a restart are
/// unaffected; the CLI reports the damaged session cleanly.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_events_file_harms_only_its_session() {
    let (_tmp, dir) = weather();
    let mut server = Server::start(&[], &[&dir]);
    let c = client();
    let agent = format!("{}/weather/v1", server.base);
    let (damaged, damaged_token) =
        session_at_rest(&c, &agent, "What's the weather in Paris?").await;
    let (healthy, healthy_token) = session_at_rest(&c, &agent, "What's the weather in Oslo?").await;
    let log_of = |id: &str| dir.join(".bdk/sessions").join(id).join("events.ndjson");

    // A line that does not parse, in the middle of a log the server has open.
    let text = std::fs::read_to_string(log_of(&damaged)).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    std::fs::write(log_of(&damaged), format!("{first}\nnot an event\n{rest}")).unwrap();
    // A foreign line at the end of the other session's log.
    let mut tail = std::fs::OpenOptions::new()
        .append(true)
        .open(log_of(&healthy))
        .unwrap();
    std::io::Write::write_all(&mut tail, b"{\"garbage\": true}\n").unwrap();
    drop(tail);

    let check_damaged = |server_base: String| {
        let c = c.clone();
        let damaged = damaged.clone();
        let damaged_token = damaged_token.clone();
        async move {
            let agent = format!("{server_base}/weather/v1");
            for path in ["events", "events?format=json", "stream", "cost"] {
                let (status, body) =
                    get_status(&c, &format!("{agent}/session/{damaged}/{path}")).await;
                assert_eq!(status, 409, "{path}: {body}");
                assert_eq!(body["error"], "session_corrupt", "{path}: {body}");
                assert!(
                    !body["message"].as_str().unwrap().contains(".bdk"),
                    "no server paths in answers: {body}"
                );
            }
            let (status, body) = post(
                &c,
                &format!("{agent}/session/{damaged}"),
                json!({"message": "still there?", "continuationToken": damaged_token}),
            )
            .await;
            assert_eq!(status, 409, "{body}");
            assert_eq!(body["error"], "session_corrupt");
            let (status, listed) = get_status(&c, &format!("{agent}/sessions")).await;
            assert_eq!(status, 200, "{listed}");
            let sessions = listed["sessions"].as_array().unwrap();
            assert_eq!(sessions.len(), 2, "{listed}");
            let row = sessions
                .iter()
                .find(|s| s["sessionId"] == *damaged)
                .unwrap();
            assert_eq!(
                row["continuationToken"], *damaged_token,
                "a refused follow-up keeps the token"
            );
        }
    };
    check_damaged(server.base.clone()).await;

    // The other session goes on: its foreign trailing line is cut before the
    // next append, and its stream stays gapless.
    let (status, sent) = post(
        &c,
        &format!("{agent}/session/{healthy}"),
        json!({"message": "What's the weather in Rome?", "continuationToken": healthy_token}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let resp = c
        .get(format!("{agent}/session/{healthy}/stream?startIndex=0"))
        .send()
        .await
        .unwrap();
    let (events, _) = read_until(resp, |e| {
        e["type"] == "turn.completed" && e["turnId"] == sent["turnId"]
    })
    .await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["index"], i as u64, "gapless");
    }
    assert!(
        !std::fs::read_to_string(log_of(&healthy))
            .unwrap()
            .contains("garbage")
    );

    // A restart over the damaged session starts and keeps it contained.
    assert_eq!(server.terminate(), 0, "{}", server.stderr.lock().unwrap());
    let server = Server::start(&[], &[&dir]);
    check_damaged(server.base.clone()).await;
    let (status, body) = get_status(
        &c,
        &format!(
            "{}/weather/v1/session/{healthy}/events?format=json",
            server.base
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    drop(server);

    // The CLI lists it as corrupt, with the reason, and shows it as an error.
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["sessions", "--json", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["sessionId"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row(&damaged)["status"], "corrupt", "{rows}");
    assert!(
        row(&damaged)["problem"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{rows}"
    );
    assert_eq!(row(&healthy)["status"], "waiting", "{rows}");
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["session", &damaged, "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["error"], "session_corrupt", "{shown}");
}

/// Polls `GET /v1/memory` until no session is in use.
async fn memory_at_rest(c: &reqwest::Client, agent: &str) -> Value {
    bdk_testkit::poll::until_some("no session in use", || async {
        let (status, m) = get_status(c, &format!("{agent}/memory")).await;
        assert_eq!(status, 200, "{m}");
        (m["activeSessions"] == 0).then_some(m)
    })
    .await
}

/// Regression: 200 sessions started with a 1 MB message took the server from
/// 25 MB to 253 MB and it never came down, because every session kept its
/// slot and conversation in memory. Resting sessions now hold no slot and
/// their conversations stay within `--session-cache`, as `GET /v1/memory`
/// reports (RSS itself is measured by `cargo xtask bench`).
#[tokio::test(flavor = "multi_thread")]
async fn resting_sessions_stay_within_the_session_cache() {
    const BUDGET: u64 = 32 * 1024;
    const SESSIONS: usize = 12;
    let (_tmp, dir) = weather();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["serve", "--port", "0", "--session-cache", "lots"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("64MiB"));

    let server = Server::start(&["--session-cache", "32KiB"], &[&dir]);
    let c = client();
    let agent = format!("{}/weather/v1", server.base);
    let big = "x".repeat(8_000);
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        ids.push(
            session_at_rest(&c, &agent, &format!("hello {i} {big}"))
                .await
                .0,
        );
    }
    let m = memory_at_rest(&c, &agent).await;
    assert_eq!(m["transcriptBudgetBytes"], BUDGET, "{m}");
    assert!(
        m["cachedTranscriptBytes"].as_u64().unwrap() <= BUDGET,
        "{m}"
    );
    let cached = m["cachedTranscripts"].as_u64().unwrap();
    assert!((1..SESSIONS as u64).contains(&cached), "{m}");
    assert_eq!(
        m["evictedTranscripts"].as_u64().unwrap() + cached,
        SESSIONS as u64,
        "{m}"
    );
    // A session whose conversation was dropped goes on as before.
    let (status, sent) = post(
        &c,
        &format!("{agent}/session/{}", ids[0]),
        json!({"message": "and now?"}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let resp = c
        .get(format!("{agent}/session/{}/stream?startIndex=0", ids[0]))
        .send()
        .await
        .unwrap();
    read_until(resp, |e| {
        e["type"] == "turn.completed" && e["turnId"] == sent["turnId"]
    })
    .await;
    // Deleting sessions gives their memory back.
    for id in &ids {
        let r = c
            .delete(format!("{agent}/session/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let m = memory_at_rest(&c, &agent).await;
    assert_eq!(m["cachedTranscripts"], 0, "{m}");
    assert_eq!(m["cachedTranscriptBytes"], 0, "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_work_survives_kill_nine_on_the_file_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("queue");
    common::queue_agent(&dir);
    common::acknowledged_work_survives_kill_nine(&[], &dir, "queue").await;
}

/// A shutdown keeps the same promise: the waiting turn and the queued
/// follow-ups are not failed, they run on the next start.
#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_work_survives_a_graceful_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("queue");
    common::queue_agent(&dir);
    common::acknowledged_work_survives(&[], &dir, "queue", common::Stop::Terminate).await;
}

/// `bdk serve` runs with glibc's mmap threshold pinned (so memory freed by
/// big requests goes back to the system), and leaves an operator's own
/// `GLIBC_TUNABLES` alone.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[tokio::test(flavor = "multi_thread")]
async fn serve_pins_the_malloc_threshold_unless_the_operator_chose() {
    let (_tmp, dir) = weather();
    let environ = |server: &Server| {
        let raw = std::fs::read(format!("/proc/{}/environ", server.child.id())).unwrap();
        raw.split(|b| *b == 0)
            .map(|kv| String::from_utf8_lossy(kv).into_owned())
            .find_map(|kv| kv.strip_prefix("GLIBC_TUNABLES=").map(str::to_owned))
    };
    let server = Server::start(&[], &[&dir]);
    assert_eq!(
        environ(&server).as_deref(),
        Some("glibc.malloc.mmap_threshold=131072")
    );
    drop(server);
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.arg("serve")
        .arg(&dir)
        .args(["--port", "0"])
        .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN");
    let server = Server::spawn(cmd);
    assert_eq!(
        environ(&server).as_deref(),
        Some("glibc.malloc.arena_max=2")
    );
}

/// The CLI next to a running server on the same project: `run`, `call` and
/// `evals` go through the server's API (the lock file names its URL) and
/// say so on stderr; a bearer server takes the token from BDK_TOKEN; after
/// the server stops they run locally again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_commands_go_through_the_server_that_holds_the_state_root() {
    let (_tmp, dir) = weather();
    let mut server = Server::start(&["--bearer-token", "ops=ops-secret-1"], &[&dir]);
    let d = dir.to_str().unwrap();
    let bdk = || {
        let mut c = Command::cargo_bin("bdk").unwrap();
        c.env_remove("BDK_STATE_ROOT").env_remove("BDK_TOKEN");
        c
    };
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(".bdk/.lock")).unwrap()).unwrap();
    assert_eq!(lock["url"], format!("{}/weather", server.base));

    // Without the token the server refuses, and the error says what to set.
    let out = bdk()
        .args([
            "run",
            "--dir",
            d,
            "--message",
            "What's the weather in Paris?",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("BDK_TOKEN"), "{stderr}");

    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args([
            "run",
            "--dir",
            d,
            "--message",
            "What's the weather in Paris?",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("going through its API"), "{stderr}");
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        run["reply"],
        "It is 12°C and sunny in Paris (simulated data)."
    );
    let id = run["sessionId"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(run["trace"].as_str().unwrap()).is_file());
    // The session is the server's: it lists it, owned by the token's principal.
    let c = client();
    let listed: Value = c
        .get(format!("{}/weather/v1/sessions", server.base))
        .bearer_auth("ops-secret-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listed.to_string().contains(&id), "{listed}");

    // A follow-up into the same session, through the server.
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args([
            "run",
            "--dir",
            d,
            "--session",
            &id,
            "--message",
            "And in Oslo?",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["sessionId"], id);

    // A direct call is a remote caller's: manifest tools run, built-ins
    // nobody exposed are refused as over HTTP.
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args([
            "call",
            "--dir",
            d,
            "get_weather",
            "--input",
            r#"{"city":"Rome"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let call: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(call["result"]["city"], "Rome");
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args([
            "call",
            "--dir",
            d,
            "read_file",
            "--input",
            r#"{"path":"x"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refused["error"], "tool_not_exposed");
    // Invalid input is still a usage error.
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args([
            "call",
            "--dir",
            d,
            "get_weather",
            "--input",
            r#"{"town":1}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // --record needs this process to take the turns.
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args(["run", "--dir", d, "--message", "hi", "--record"])
        .arg(dir.join("rec.jsonl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--record"));

    // Evals run against the server.
    let out = bdk()
        .env("BDK_TOKEN", "ops-secret-1")
        .args(["evals", "--dir", d, "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("going through its API"), "{stderr}");

    // Once the server is gone the same commands run here.
    assert_eq!(server.terminate(), 0);
    let out = bdk()
        .args([
            "call",
            "--dir",
            d,
            "get_weather",
            "--input",
            r#"{"city":"Rome"}"#,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("going through"), "{stderr}");
}
