#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk dev`: the real binary serving an agent folder while the test edits
//! it. The agent's model is an OpenAI-compatible server in the test that
//! answers with the first line of the system prompt it was sent, so every
//! reply says which instructions the turn ran on.

use crate::common;

use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use axum::Json;
use axum::response::IntoResponse;
use bdk_testkit::poll;
use common::{Server, client, get_json, post, read_until, wait_for};
use serde_json::{Value, json};

/// An OpenAI-compatible chat server whose streamed reply is
/// `[<first line of the system prompt>]`; returns its base URL.
async fn instructions_echo() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|Json(request): Json<Value>| async move {
            let system = request["messages"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["role"] == "system"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or("(no system prompt)");
            let first = system.lines().next().unwrap_or_default();
            let chunk = |delta: Value, finish: Value| {
                json!({
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "local",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                })
            };
            let body = format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                chunk(
                    json!({"role": "assistant", "content": format!("[{first}]")}),
                    Value::Null
                ),
                chunk(json!({}), json!("stop")),
            );
            ([("content-type", "text/event-stream")], body).into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn agent_toml(model_url: &str) -> String {
    format!("model = \"openai-compatible/local\"\n\n[provider]\nbase_url = \"{model_url}/v1\"\n")
}

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn dev(dir: &Path) -> Server {
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.arg("dev")
        .arg(dir)
        .args(["--port", "0"])
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_MODEL_BASE_URL")
        .env_remove("BDK_MODEL_API_KEY");
    Server::spawn(cmd)
}

/// Waits until `/v1/meta` reports `reload` as `expected` ({version, ok}).
async fn reload_reaches(c: &reqwest::Client, agent: &str, expected: Value) {
    poll::until_ok_within("the reload", poll::PATIENCE, || async {
        let meta = get_json(c, &format!("{agent}/v1/meta")).await;
        if meta["reload"] == expected {
            Ok(())
        } else {
            Err(format!("meta: {meta}"))
        }
    })
    .await;
}

/// Sends `message` into `session` and returns the reply of the turn it
/// started, read from the session's events.
async fn follow_up(c: &reqwest::Client, agent: &str, session: &str, message: &str) -> String {
    let (status, sent) = post(
        c,
        &format!("{agent}/v1/session/{session}"),
        json!({"message": message}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let turn = sent["turnId"].as_str().unwrap().to_owned();
    let events = wait_for(c, &format!("{agent}/v1/session/{session}/events"), |e| {
        e["turnId"] == turn.as_str() && e["type"] == "turn.completed"
    })
    .await;
    reply_of(&events, &turn)
}

fn reply_of(events: &[Value], turn: &str) -> String {
    events
        .iter()
        .find(|e| e["turnId"] == turn && e["type"] == "turn.completed")
        .and_then(|e| e["data"]["reply"].as_str())
        .unwrap_or_else(|| panic!("no reply for {turn}: {events:#?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_reach_the_next_turn_and_a_broken_folder_keeps_the_last_good_agent() {
    let model = instructions_echo().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("desk");
    write(&dir, "agent/agent.toml", &agent_toml(&model));
    write(&dir, "agent/instructions.md", "Version one.\n");
    let server = dev(&dir);
    let agent = format!("{}/desk", server.base);
    let c = client();
    server.wait_for_stderr(|e| e.contains("watching"));
    reload_reaches(&c, &agent, json!({"version": 1, "ok": true})).await;

    // A session on version one.
    let (status, started) =
        post(&c, &format!("{agent}/v1/session"), json!({"message": "hi"})).await;
    assert_eq!(status, 200, "{started}");
    let session = started["sessionId"].as_str().unwrap().to_owned();
    let turn = started["turnId"].as_str().unwrap().to_owned();
    let events = wait_for(&c, &format!("{agent}/v1/session/{session}/events"), |e| {
        e["turnId"] == turn.as_str() && e["type"] == "turn.completed"
    })
    .await;
    assert_eq!(reply_of(&events, &turn), "[Version one.]");

    // A stream opened now stays open across the reload.
    let stream = c
        .get(format!(
            "{agent}/v1/session/{session}/stream?startIndex={}",
            events.len()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);

    // Edit the instructions: the next turn of the same session takes them.
    write(&dir, "agent/instructions.md", "Version two.\n");
    reload_reaches(&c, &agent, json!({"version": 2, "ok": true})).await;
    let stderr = server.wait_for_stderr(|e| e.contains("reloaded `desk` (version 2)"));
    assert!(stderr.contains("agent/instructions.md changed"), "{stderr}");
    let (status, sent) = post(
        &c,
        &format!("{agent}/v1/session/{session}"),
        json!({"message": "again"}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let (seen, ended) = read_until(stream, |e| e["type"] == "turn.completed").await;
    assert!(!ended, "the stream ended across the reload: {seen:#?}");
    let done = seen.last().unwrap();
    assert_eq!(done["turnId"], sent["turnId"]);
    assert_eq!(done["data"]["reply"], "[Version two.]");

    // Break the manifest: the diagnostics show up in the terminal, in
    // /v1/info and /v1/meta, and version two keeps serving.
    write(&dir, "agent/agent.toml", "model = 5\n");
    reload_reaches(&c, &agent, json!({"version": 2, "ok": false})).await;
    let stderr = server.wait_for_stderr(|e| e.contains("does not load"));
    assert!(
        stderr.contains("agent/agent.toml: `model` must be a string"),
        "{stderr}"
    );
    assert!(stderr.contains("still serving version 2"), "{stderr}");
    let info = get_json(&c, &format!("{agent}/v1/info")).await;
    assert_eq!(info["reload"]["ok"], false, "{info}");
    assert_eq!(info["reload"]["version"], 2);
    assert_eq!(
        info["reload"]["errors"][0]["file"], "agent/agent.toml",
        "{info}"
    );
    assert_eq!(info["reload"]["errors"][0]["severity"], "error");
    assert_eq!(
        info["model"], "openai-compatible/local",
        "info shows the served version"
    );
    assert_eq!(
        follow_up(&c, &agent, &session, "still there?").await,
        "[Version two.]"
    );

    // Fixed, with new instructions: version three.
    write(&dir, "agent/instructions.md", "Version three.\n");
    write(&dir, "agent/agent.toml", &agent_toml(&model));
    reload_reaches(&c, &agent, json!({"version": 3, "ok": true})).await;
    let info = get_json(&c, &format!("{agent}/v1/info")).await;
    assert_eq!(info["reload"]["errors"], json!([]), "{info}");
    assert_eq!(
        follow_up(&c, &agent, &session, "and now?").await,
        "[Version three.]"
    );

    // A part wired around the host (a hook) is named for a restart.
    write(
        &dir,
        "agent/hooks/audit.toml",
        "events = [\"turn.completed\"]\nfile = \"audit.ndjson\"\n",
    );
    reload_reaches(&c, &agent, json!({"version": 4, "ok": true})).await;
    let info = get_json(&c, &format!("{agent}/v1/info")).await;
    assert_eq!(info["reload"]["needsRestart"], json!(["hooks"]), "{info}");
    let stderr = server.wait_for_stderr(|e| e.contains("restart bdk dev"));
    assert!(stderr.contains("note: hooks changed"), "{stderr}");

    // The sessions list still has the one session, on the same port.
    let sessions = get_json(&c, &format!("{agent}/v1/sessions")).await;
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(1),
        "{sessions}"
    );
}

#[test]
fn dev_refuses_a_folder_that_does_not_load_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    write(&dir, "agent/agent.toml", "model = 5\n");
    write(&dir, "agent/instructions.md", "x\n");
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .arg("dev")
        .arg(&dir)
        .args(["--port", "0"])
        .env_remove("BDK_STATE_ROOT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`model` must be a string"), "{stderr}");
}
