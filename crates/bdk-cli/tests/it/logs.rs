#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What request-controlled text can do to the logs of a real `bdk serve`:
//! nothing. Regression tests for issue 13 (7): a `/v1/mcp` request id with a
//! newline wrote a forged `ERROR` line to stderr, which `GET /v1/logs` then
//! served to other callers, and stderr carried ANSI colour into pipes.

use serde_json::{Value, json};

use crate::common;
use common::{Server, client, weather};

/// A JSON-RPC id that, logged as it is, starts a line of its own.
const FORGED_ID: &str = "a\n2026-01-01T00:00:00Z ERROR forged \u{1b}[31mred\u{1b}[0m";

/// Sends an MCP request that the server answers with a JSON-RPC error,
/// which rmcp logs as a warning naming the request id.
async fn send_forged_request(base: &str) {
    let c = client();
    let resp = c
        .post(format!("{base}/weather/v1/mcp"))
        .header("content-type", "application/json")
        .json(&json!({"jsonrpc": "2.0", "id": FORGED_ID, "method": "prompts/get", "params": {"name": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], FORGED_ID, "{body}");
    assert!(body["error"].is_object(), "{body}");
}

fn is_forged_line(line: &str) -> bool {
    line.trim_start()
        .starts_with("2026-01-01T00:00:00Z ERROR forged")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_id_cannot_forge_log_lines_in_the_ring_or_on_stderr() {
    let (_tmp, dir) = weather();
    let server = Server::start(&[], &[&dir]);
    send_forged_request(&server.base).await;

    // stderr (a pipe here): the warning is one line, with the id escaped,
    // and no colour codes at all.
    let stderr = server.wait_for_stderr(|s| s.contains("response error"));
    let warning = stderr
        .lines()
        .find(|l| l.contains("response error"))
        .unwrap();
    assert!(
        warning.contains(r"id=a\n2026-01-01T00:00:00Z ERROR forged \u{1b}[31mred\u{1b}[0m"),
        "{warning}"
    );
    assert!(!stderr.lines().any(is_forged_line), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI codes in piped stderr: {stderr:?}"
    );

    // The ring: one line for the warning, its message escaped the same way.
    let logs = common::get_json(
        &client(),
        &format!("{}/weather/v1/logs?after=0&limit=1000", server.base),
    )
    .await;
    let lines = logs["lines"].as_array().unwrap();
    let warnings: Vec<&str> = lines
        .iter()
        .filter(|l| l["level"] == "warn")
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert!(
        warnings.iter().any(|w| w.starts_with(
            r"response error id=a\n2026-01-01T00:00:00Z ERROR forged \u{1b}[31mred\u{1b}[0m error="
        )),
        "{warnings:?}"
    );
    for line in lines {
        let message = line["message"].as_str().unwrap();
        assert!(
            !message.contains('\n') && !message.contains('\u{1b}') && !is_forged_line(message),
            "{line}"
        );
        assert_ne!(line["level"], "error", "{line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn log_format_json_prints_one_valid_object_a_line() {
    let (_tmp, dir) = weather();
    let server = Server::start(&["--log-format", "json"], &[&dir]);
    send_forged_request(&server.base).await;
    let stderr = server.wait_for_stderr(|s| s.contains("response error"));
    let mut warning = None;
    for line in stderr.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line:?}"));
        for key in ["timestamp", "level", "target", "fields", "spans"] {
            assert!(v.get(key).is_some(), "no {key}: {line}");
        }
        if v["fields"]["message"] == "response error" {
            warning = Some(v);
        }
    }
    let warning = warning.unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["target"], "rmcp::service");
    // The exact id, recovered by any JSON reader; the raw line has no
    // control character.
    assert_eq!(warning["fields"]["id"], FORGED_ID);
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}
