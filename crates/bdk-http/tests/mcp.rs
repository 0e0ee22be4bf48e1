#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's MCP endpoints over real HTTP (`/v1/mcp`, `/v1/mcp/tools`):
//! JSON-RPC through the app's auth chain, the stateless transport's 405s,
//! ownership of sessions started with `ask`, and malformed JSON-RPC
//! answered with JSON-RPC errors rather than server failures.

mod common;

use bdk_http::{Auth, BearerToken, Config};
use serde_json::{Value, json};

use common::{DEADLINE, client, post, single};

/// Posts one JSON-RPC request and returns the status and the JSON body.
async fn rpc(http: &reqwest::Client, url: &str, bearer: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let resp = tokio::time::timeout(DEADLINE, req.send())
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text }));
    (status, body)
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

fn list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn tool_names(body: &Value) -> Vec<String> {
    body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {body}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn bearer() -> Config {
    Config {
        auth: Auth::Bearer(vec![
            BearerToken {
                principal: "alice".to_owned(),
                token: "alice-secret".to_owned(),
            },
            BearerToken {
                principal: "bob".to_owned(),
                token: "bob-secret".to_owned(),
            },
        ]),
        ..Config::default()
    }
}

/// The text of a tool result's first content block.
fn text(body: &Value) -> String {
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {body}"))
        .to_owned()
}

fn is_error(body: &Value) -> bool {
    body["result"]["isError"] == json!(true)
}

#[tokio::test]
async fn get_and_delete_answer_405_on_both_endpoints() {
    let s = single(Config::default()).await;
    for path in ["/v1/mcp", "/v1/mcp/tools"] {
        let url = format!("{}{path}", s.base);
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let resp = s
                .http
                .request(method.clone(), &url)
                .header("accept", "text/event-stream")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.headers()["allow"], "POST", "{method} {path}");
            common::expect_error(resp, 405, "method_not_allowed").await;
        }
    }
}

#[tokio::test]
async fn bearer_auth_guards_both_endpoints() {
    let s = single(bearer()).await;
    for path in ["/v1/mcp", "/v1/mcp/tools"] {
        let url = format!("{}{path}", s.base);
        let resp = post(&s.http, &url, &list(1)).await;
        common::expect_error(resp, 401, "unauthorized").await;
        let resp = s
            .http
            .post(&url)
            .bearer_auth("wrong")
            .json(&list(1))
            .send()
            .await
            .unwrap();
        common::expect_error(resp, 401, "unauthorized").await;
        let (status, body) = rpc(&s.http, &url, Some("alice-secret"), list(1)).await;
        assert_eq!(status, 200, "{body}");
        assert!(!tool_names(&body).is_empty(), "{body}");
    }
}

#[tokio::test]
async fn ask_and_check_are_owned_by_the_caller() {
    let s = single(bearer()).await;
    let url = format!("{}/v1/mcp", s.base);
    let (status, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        call(
            1,
            "ask",
            json!({"message": "What is the weather in Paris?"}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(!is_error(&body), "{body}");
    let answer = &body["result"]["structuredContent"];
    assert_eq!(answer["status"], "completed", "{body}");
    assert!(
        answer["reply"].as_str().unwrap().contains("Paris"),
        "{body}"
    );
    let session = answer["sessionId"].as_str().unwrap().to_owned();
    let token = answer["continuationToken"].as_str().unwrap().to_owned();

    // The owner reads the session: its reply and the tool call behind it.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        call(2, "check", json!({"sessionId": session})),
    )
    .await;
    assert!(!is_error(&body), "{body}");
    let state = &body["result"]["structuredContent"];
    assert_eq!(state["status"], "completed", "{body}");
    assert!(state["reply"].as_str().unwrap().contains("Paris"), "{body}");
    assert_eq!(state["toolCalls"][0]["name"], "lookup", "{body}");

    // Another principal can neither read nor continue it.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("bob-secret"),
        call(3, "check", json!({"sessionId": session})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("forbidden:"), "{body}");
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("bob-secret"),
        call(
            4,
            "ask",
            json!({"message": "hello", "sessionId": session, "continuationToken": token}),
        ),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("forbidden:"), "{body}");

    // The owner continues it with the token it holds.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        call(
            5,
            "ask",
            json!({"message": "thanks", "sessionId": session, "continuationToken": token}),
        ),
    )
    .await;
    assert!(!is_error(&body), "{body}");
    let answer = &body["result"]["structuredContent"];
    assert_eq!(answer["sessionId"], session.as_str(), "{body}");
    assert_eq!(answer["reply"], "echo: thanks", "{body}");
    assert_ne!(answer["continuationToken"], token.as_str(), "{body}");

    // A stale token is refused with the host's code.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        call(
            6,
            "ask",
            json!({"message": "again", "sessionId": session, "continuationToken": token}),
        ),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(
        text(&body).starts_with("stale_continuation_token:"),
        "{body}"
    );
}

#[tokio::test]
async fn ask_returns_running_when_the_wait_ends_first() {
    let s = single(Config::default()).await;
    let url = format!("{}/v1/mcp", s.base);
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(1, "ask", json!({"message": "a slow one", "waitMs": 0})),
    )
    .await;
    let answer = &body["result"]["structuredContent"];
    assert_eq!(answer["status"], "running", "{body}");
    assert!(answer.get("reply").is_none(), "{body}");
    let session = answer["sessionId"].as_str().unwrap();
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(2, "check", json!({"sessionId": session})),
    )
    .await;
    assert_eq!(
        body["result"]["structuredContent"]["status"], "running",
        "{body}"
    );
}

#[tokio::test]
async fn call_tool_passes_through_to_server_tools() {
    let s = single(Config::default()).await;
    let url = format!("{}/v1/mcp", s.base);
    let (_, body) = rpc(&s.http, &url, None, list(1)).await;
    assert_eq!(tool_names(&body), ["ask", "check", "call_tool"], "{body}");
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(
            2,
            "call_tool",
            json!({"name": "lookup", "input": {"city": "Oslo"}}),
        ),
    )
    .await;
    assert!(!is_error(&body), "{body}");
    let outcome = &body["result"]["structuredContent"];
    assert_eq!(outcome["toolName"], "lookup", "{body}");
    assert_eq!(
        outcome["result"],
        json!({"city": "Oslo", "temp": 21}),
        "{body}"
    );
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(3, "call_tool", json!({"name": "nope", "input": {}})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("unknown_tool:"), "{body}");
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(
            4,
            "call_tool",
            json!({"name": "lookup", "input": {"town": 1}}),
        ),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("invalid_tool_input:"), "{body}");
}

#[tokio::test]
async fn tools_endpoint_serves_each_server_tool_with_its_schemas() {
    let s = single(Config::default()).await;
    let url = format!("{}/v1/mcp/tools", s.base);
    let (_, body) = rpc(&s.http, &url, None, list(1)).await;
    let tools = body["result"]["tools"].as_array().unwrap();
    let names = tool_names(&body);
    // The agent's own tools, the built-ins it exposes (read_file,
    // tag_artifact), and no approval tool: an MCP caller cannot approve.
    assert_eq!(
        names,
        ["lookup", "note", "read_file", "tag_artifact"],
        "{body}"
    );
    assert!(!names.contains(&"lint".to_owned()), "agent tools stay out");
    let lookup = tools.iter().find(|t| t["name"] == "lookup").unwrap();
    assert_eq!(lookup["annotations"]["readOnlyHint"], true, "{lookup}");
    assert_eq!(
        lookup["inputSchema"]["properties"]["city"]["type"], "string",
        "{lookup}"
    );
    let note = tools.iter().find(|t| t["name"] == "note").unwrap();
    assert_eq!(note["annotations"]["readOnlyHint"], false, "{note}");

    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(2, "lookup", json!({"city": "Rome"})),
    )
    .await;
    assert!(!is_error(&body), "{body}");
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"city": "Rome", "temp": 21}),
        "{body}"
    );
    let text_result: Value = serde_json::from_str(&text(&body)).unwrap();
    assert_eq!(text_result["city"], "Rome", "{body}");

    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(3, "note", json!({"text": "boom"})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).contains("failed on purpose"), "{body}");

    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(4, "ask", json!({"message": "hi"})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("unknown_tool:"), "{body}");

    // A built-in nobody exposed and an approval tool are refused by name,
    // even when the caller knows them.
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(5, "write_file", json!({"path": "x", "content": "y"})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("tool_not_exposed:"), "{body}");
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        call(6, "deploy", json!({"target": "prod"})),
    )
    .await;
    assert!(is_error(&body), "{body}");
    assert!(text(&body).starts_with("approval_required:"), "{body}");
    assert!(text(&body).contains("MCP callers cannot approve"), "{body}");
}

#[tokio::test]
async fn malformed_json_rpc_gets_json_rpc_errors() {
    let s = single(Config::default()).await;
    let http = client();
    for path in ["/v1/mcp", "/v1/mcp/tools"] {
        let url = format!("{}{path}", s.base);
        for (raw, code) in [
            ("{nope", -32700),
            ("", -32700),
            (r#"{"hello": "world"}"#, -32600),
            (r#"{"jsonrpc": "2.0", "id": 1}"#, -32600),
        ] {
            let resp = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(raw)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            assert_eq!(status, 400, "{raw}: {body}");
            assert_eq!(body["jsonrpc"], "2.0", "{raw}: {body}");
            assert_eq!(body["id"], Value::Null, "{raw}: {body}");
            assert_eq!(body["error"]["code"], code, "{raw}: {body}");
        }
        // An unknown method is a JSON-RPC error too, never a server failure.
        let (status, body) = rpc(
            &http,
            &url,
            None,
            json!({"jsonrpc": "2.0", "id": 9, "method": "no/such/method"}),
        )
        .await;
        assert!(status < 500, "{status}: {body}");
        assert!(body["error"]["code"].is_i64(), "{body}");
    }
}
