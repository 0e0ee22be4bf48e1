#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's MCP endpoints over real HTTP (`/v1/mcp`, `/v1/mcp/tools`):
//! JSON-RPC through the app's auth chain, the stateless transport's 405s,
//! ownership of sessions started with `ask`, malformed JSON-RPC answered
//! with JSON-RPC errors rather than server failures, and the skills as
//! prompts (with their attachments), the resources the agent folder
//! declares, sessions' events, artifacts and workspace files as resources
//! (with their ownership and confinement), and completion.

use crate::common;

use std::collections::BTreeMap;

use bdk_core::host::StartSession;
use bdk_http::{Auth, BearerToken, Config};
use bdk_store::ArtifactRecord;
use serde_json::{Value, json};

use common::{DEADLINE, Single, client, post, single, single_with};

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

// ---------------------------------------------------------------------------
// Prompts, resources and completion.

/// Two skills: `review` with a required and an optional argument (with
/// suggested values), `style` with none.
const SKILLS: &[(&str, &str)] = &[
    (
        "agent/skills/review.md",
        "---\ndescription: Use when a pull request needs a review.\narguments:\n  - name: pr\n    description: The pull request number.\n    required: true\n  - name: depth\n    values: [quick, thorough, Thoughtful]\n---\nReview pull request {{pr}} with a {{ depth }} pass.\n",
    ),
    (
        "agent/skills/style.md",
        "---\ndescription: Use when writing for people.\n---\nShort sentences. Keep {{braces}} as written.\n",
    ),
];

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The JSON-RPC error of an answer that must be one (never a 5xx).
fn rpc_error(status: u16, body: &Value) -> (i64, String) {
    assert!(status < 500, "{status}: {body}");
    assert!(body.get("result").is_none(), "{body}");
    let code = body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error: {body}"));
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    (code, message)
}

#[tokio::test]
async fn initialize_advertises_what_each_endpoint_implements() {
    let s = single_with(Config::default(), SKILLS).await;
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "test", "version": "0"}});
    let (_, body) = rpc(
        &s.http,
        &format!("{}/v1/mcp", s.base),
        None,
        request(1, "initialize", init.clone()),
    )
    .await;
    let caps = &body["result"]["capabilities"];
    assert!(caps["tools"].is_object(), "{body}");
    assert!(caps["prompts"].is_object(), "{body}");
    assert!(caps["completions"].is_object(), "{body}");
    assert!(caps["resources"].is_object(), "{body}");
    // Stateless: nothing to subscribe to, no list that announces changes.
    assert!(caps["resources"].get("subscribe").is_none(), "{body}");
    assert!(caps["resources"].get("listChanged").is_none(), "{body}");
    assert!(caps["prompts"].get("listChanged").is_none(), "{body}");

    // The tools endpoint is tools (and their log messages) only, and says
    // so when asked for more.
    let url = format!("{}/v1/mcp/tools", s.base);
    let (_, body) = rpc(&s.http, &url, None, request(1, "initialize", init)).await;
    let caps = body["result"]["capabilities"].as_object().unwrap();
    assert_eq!(
        caps.keys().collect::<Vec<_>>(),
        ["logging", "tools"],
        "{body}"
    );
    for (method, params) in [
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "style"})),
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        (
            "resources/read",
            json!({"uri": "bdk://sessions/ses_x/events"}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "review"},
                   "argument": {"name": "depth", "value": ""}}),
        ),
    ] {
        let (status, body) = rpc(&s.http, &url, None, request(2, method, params)).await;
        let (code, _) = rpc_error(status, &body);
        assert_eq!(code, -32601, "{method}: {body}");
    }
}

#[tokio::test]
async fn skills_are_prompts_with_their_arguments() {
    let s = single_with(Config::default(), SKILLS).await;
    let url = format!("{}/v1/mcp", s.base);
    let (_, body) = rpc(&s.http, &url, None, request(1, "prompts/list", json!({}))).await;
    assert_eq!(
        body["result"]["prompts"],
        json!([
            {"name": "review", "description": "Use when a pull request needs a review.",
             "arguments": [
                 {"name": "pr", "description": "The pull request number.", "required": true},
                 {"name": "depth", "required": false}
             ]},
            {"name": "style", "description": "Use when writing for people."}
        ]),
        "{body}"
    );

    let get = |id, params| request(id, "prompts/get", params);
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        get(
            2,
            json!({"name": "review", "arguments": {"pr": "42", "depth": "quick"}}),
        ),
    )
    .await;
    let result = &body["result"];
    assert_eq!(
        result["description"], "Use when a pull request needs a review.",
        "{body}"
    );
    assert_eq!(
        result["messages"],
        json!([{"role": "user", "content": {"type": "text",
                 "text": "Review pull request 42 with a quick pass.\n"}}]),
        "{body}"
    );
    // An optional argument left out is empty; a prompt without arguments
    // is served as written.
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        get(3, json!({"name": "review", "arguments": {"pr": "7"}})),
    )
    .await;
    assert_eq!(
        body["result"]["messages"][0]["content"]["text"], "Review pull request 7 with a  pass.\n",
        "{body}"
    );
    let (_, body) = rpc(&s.http, &url, None, get(4, json!({"name": "style"}))).await;
    assert_eq!(
        body["result"]["messages"][0]["content"]["text"],
        "Short sentences. Keep {{braces}} as written.\n",
        "{body}"
    );

    for (params, message) in [
        (
            json!({"name": "review"}),
            "prompt `review` needs the argument `pr`",
        ),
        (
            json!({"name": "review", "arguments": {"depth": "quick"}}),
            "needs the argument `pr`",
        ),
        (
            json!({"name": "review", "arguments": {"pr": 42}}),
            "must be a string",
        ),
        (
            json!({"name": "review", "arguments": {"pr": "1", "extra": "x"}}),
            "has no argument `extra`",
        ),
        (json!({"name": "nope"}), "unknown prompt `nope`"),
    ] {
        let (status, body) = rpc(&s.http, &url, None, get(5, params.clone())).await;
        let (code, text) = rpc_error(status, &body);
        assert_eq!(code, -32602, "{params}: {body}");
        assert!(text.contains(message), "{params}: {text}");
    }
    // Hostile shapes are JSON-RPC errors too: invalid request, or, for
    // params rmcp cannot read, unknown method.
    for params in [
        json!({}),
        json!({"name": 7}),
        json!({"name": "review", "arguments": [1]}),
        json!("x"),
    ] {
        let (status, body) = rpc(&s.http, &url, None, get(6, params.clone())).await;
        let (code, _) = rpc_error(status, &body);
        assert!([-32600, -32601, -32602].contains(&code), "{params}: {body}");
    }
}

/// A session of alice's (bearer auth) with a finished turn, workspace
/// files, a symlink out of its workspace, and a text and a binary artifact.
async fn alice_session(s: &Single) -> String {
    let host = &s.agent.host;
    let started = host
        .start_session(StartSession {
            message: Some("hello".to_owned()),
            principal: Some("alice".to_owned()),
            title: Some("Alice's review".to_owned()),
            workspace_files: BTreeMap::from([
                (
                    "notes/today.md".to_owned(),
                    "# Today\nShip it.\n".to_owned(),
                ),
                ("a b.txt".to_owned(), "spaced\n".to_owned()),
            ]),
            ..StartSession::default()
        })
        .await
        .unwrap();
    bdk_testkit::session::wait_turn(host, &started).await;
    let id = started.session_id;
    let workspace = host.store().workspace_dir(&id);
    let secret = s.agent.dir.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    std::os::unix::fs::symlink(&secret, workspace.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(s.agent.dir.path(), workspace.join("up")).unwrap();
    for (artifact, name, content_type, bytes) in [
        (
            "art_text",
            "report.md",
            "text/markdown",
            b"# Report\n".to_vec(),
        ),
        (
            "art_png",
            "chart.png",
            "image/png",
            vec![0x89, 0x50, 0x4e, 0x47, 0x00, 0xff],
        ),
    ] {
        host.store()
            .artifact_put(
                ArtifactRecord {
                    id: artifact.to_owned(),
                    session_id: Some(id.clone()),
                    principal: Some("alice".to_owned()),
                    kind: "report".to_owned(),
                    name: name.to_owned(),
                    content_type: content_type.to_owned(),
                    size: bytes.len() as u64,
                    metadata: Value::Null,
                    created_at: chrono::Utc::now(),
                },
                bytes,
            )
            .await
            .unwrap();
    }
    id.to_string()
}

async fn read(s: &Single, bearer: &str, uri: &str) -> (u16, Value) {
    rpc(
        &s.http,
        &format!("{}/v1/mcp", s.base),
        Some(bearer),
        request(1, "resources/read", json!({ "uri": uri })),
    )
    .await
}

/// The one content item of a successful read.
async fn read_ok(s: &Single, bearer: &str, uri: &str) -> Value {
    let (status, body) = read(s, bearer, uri).await;
    assert_eq!(status, 200, "{uri}: {body}");
    let contents = body["result"]["contents"]
        .as_array()
        .unwrap_or_else(|| panic!("{uri}: {body}"));
    assert_eq!(contents.len(), 1, "{body}");
    assert_eq!(contents[0]["uri"], uri, "{body}");
    contents[0].clone()
}

/// Asserts `-32002` and returns the message.
async fn read_refused(s: &Single, bearer: &str, uri: &str) -> String {
    let (status, body) = read(s, bearer, uri).await;
    let (code, message) = rpc_error(status, &body);
    assert_eq!(code, -32002, "{uri}: {body}");
    assert!(message.starts_with("resource not found: "), "{message}");
    message
}

#[tokio::test]
async fn resources_serve_events_artifacts_and_workspace_files_to_their_owner() {
    let s = single_with(bearer(), SKILLS).await;
    let url = format!("{}/v1/mcp", s.base);
    let id = alice_session(&s).await;
    let base = format!("bdk://sessions/{id}");

    // Templates and the bounded list.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        request(1, "resources/templates/list", json!({})),
    )
    .await;
    let templates: Vec<&str> = body["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(
        templates,
        [
            "bdk://sessions/{sessionId}/events",
            "bdk://sessions/{sessionId}/artifacts/{artifactId}",
            "bdk://sessions/{sessionId}/workspace/{+path}",
        ],
        "{body}"
    );
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        request(2, "resources/list", json!({})),
    )
    .await;
    let listed = body["result"]["resources"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["uri"], format!("{base}/events"), "{body}");
    assert_eq!(listed[0]["mimeType"], "application/x-ndjson", "{body}");
    assert_eq!(listed[0]["title"], "Alice's review", "{body}");
    assert!(body["result"].get("nextCursor").is_none(), "{body}");
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("bob-secret"),
        request(3, "resources/list", json!({})),
    )
    .await;
    assert_eq!(body["result"]["resources"], json!([]), "{body}");

    // The events, as NDJSON.
    let events = read_ok(&s, "alice-secret", &format!("{base}/events")).await;
    assert_eq!(events["mimeType"], "application/x-ndjson", "{events}");
    let lines = common::parse_ndjson(events["text"].as_str().unwrap());
    assert_eq!(lines[0]["type"], "session.started", "{events}");
    assert!(
        lines.iter().all(|e| e["sessionId"] == id.as_str()),
        "{events}"
    );
    assert!(
        lines.iter().any(|e| e["type"] == "message.received"),
        "{events}"
    );

    // Artifacts: text as text, anything else as base64.
    let text = read_ok(&s, "alice-secret", &format!("{base}/artifacts/art_text")).await;
    assert_eq!(text["mimeType"], "text/markdown", "{text}");
    assert_eq!(text["text"], "# Report\n", "{text}");
    let png = read_ok(&s, "alice-secret", &format!("{base}/artifacts/art_png")).await;
    assert_eq!(png["mimeType"], "image/png", "{png}");
    assert_eq!(png["blob"], "iVBORwD/", "{png}");
    assert!(png.get("text").is_none(), "{png}");

    // Workspace files, percent-encoded as the template's reserved
    // expansion writes them.
    let file = read_ok(
        &s,
        "alice-secret",
        &format!("{base}/workspace/notes/today.md"),
    )
    .await;
    assert_eq!(file["text"], "# Today\nShip it.\n", "{file}");
    assert_eq!(file["mimeType"], "text/markdown", "{file}");
    let spaced = read_ok(&s, "alice-secret", &format!("{base}/workspace/a%20b.txt")).await;
    assert_eq!(spaced["text"], "spaced\n", "{spaced}");

    // Another principal gets what a missing session gets.
    let missing = "ses_00000000000000000000000000";
    for tail in ["events", "artifacts/art_text", "workspace/notes/today.md"] {
        let theirs = read_refused(&s, "bob-secret", &format!("{base}/{tail}")).await;
        let none = read_refused(
            &s,
            "bob-secret",
            &format!("bdk://sessions/{missing}/{tail}"),
        )
        .await;
        assert!(theirs.ends_with(": no such session"), "{theirs}");
        assert!(none.ends_with(": no such session"), "{none}");
    }
    // An artifact of another session, or none at all, is not found either.
    let message = read_refused(&s, "alice-secret", &format!("{base}/artifacts/art_nope")).await;
    assert!(
        message.ends_with("no such artifact in this session"),
        "{message}"
    );
}

#[tokio::test]
async fn workspace_reads_refuse_traversal_and_hostile_uris() {
    let s = single_with(bearer(), SKILLS).await;
    let id = alice_session(&s).await;
    let base = format!("bdk://sessions/{id}");
    for (tail, why) in [
        ("workspace/../session.json", "leads outside the workspace"),
        (
            "workspace/notes/../../session.json",
            "leads outside the workspace",
        ),
        (
            "workspace/%2e%2e/session.json",
            "leads outside the workspace",
        ),
        (
            "workspace/%2E%2E%2F%2E%2E%2Fsecret.txt",
            "leads outside the workspace",
        ),
        ("workspace//etc/passwd", "must be relative"),
        ("workspace/%2Fetc%2Fpasswd", "must be relative"),
        ("workspace/leak.txt", "leads outside the workspace"),
        ("workspace/up/secret.txt", "leads outside the workspace"),
        ("workspace/notes%00.md", "NUL"),
        ("workspace/..%5Csecret.txt", "separator"),
        ("workspace/notes", "no such file"),
        ("workspace/nope.txt", "no such file"),
        ("workspace/", "empty"),
        ("workspace/a?b", "query"),
        ("workspace/%ff", "UTF-8"),
        ("artifacts/../events", "not an artifact id"),
        ("artifacts/%2e%2e", "not an artifact id"),
        ("events/../artifacts/art_text", "a session offers"),
        ("nope", "a session offers"),
    ] {
        let message = read_refused(&s, "alice-secret", &format!("{base}/{tail}")).await;
        assert!(message.contains(why), "{tail}: {message}");
        assert!(!message.contains("top secret"), "{tail}: {message}");
    }
    for uri in [
        String::new(),
        "file:///etc/passwd".to_owned(),
        "bdk://sessions/../../etc/passwd".to_owned(),
        format!("bdk://sessions/{id}/workspace/{}", "a/".repeat(5000)),
        "bdk://sessions/\u{0}/events".to_owned(),
    ] {
        read_refused(&s, "alice-secret", &uri).await;
    }
    // Shapes that are not a read request at all.
    let url = format!("{}/v1/mcp", s.base);
    for params in [json!({}), json!({"uri": 7}), json!(null), json!([])] {
        let (status, body) = rpc(
            &s.http,
            &url,
            Some("alice-secret"),
            request(9, "resources/read", params.clone()),
        )
        .await;
        let (code, _) = rpc_error(status, &body);
        assert!([-32600, -32601, -32602].contains(&code), "{params}: {body}");
    }
    // A cursor this server never handed out is invalid params.
    for cursor in ["garbage", "../x", ""] {
        let (status, body) = rpc(
            &s.http,
            &url,
            Some("alice-secret"),
            request(10, "resources/list", json!({ "cursor": cursor })),
        )
        .await;
        let (code, message) = rpc_error(status, &body);
        assert_eq!(code, -32602, "{cursor}: {body}");
        assert!(message.contains("invalid cursor"), "{message}");
    }
}

#[tokio::test]
async fn resources_list_pages_through_sessions_newest_first() {
    let s = single_with(Config::default(), DECLARED).await;
    let mut ids = Vec::new();
    for _ in 0..53 {
        let started = s
            .agent
            .host
            .start_session(StartSession::default())
            .await
            .unwrap();
        ids.push(started.session_id.to_string());
    }
    ids.reverse();
    let url = format!("{}/v1/mcp", s.base);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let (_, body) = rpc(&s.http, &url, None, request(1, "resources/list", params)).await;
        let page = body["result"]["resources"].as_array().unwrap();
        // The agent's declared resources lead the first page only.
        assert!(page.len() <= 50 + 4, "{body}");
        seen.extend(page.iter().map(|r| {
            r["uri"]
                .as_str()
                .unwrap()
                .trim_start_matches("bdk://sessions/")
                .trim_end_matches("/events")
                .to_owned()
        }));
        match body["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let declared = [
        "docs://runbook",
        "test://logo",
        "test://big",
        "test://swapped",
    ];
    assert_eq!(seen[..4], declared);
    assert_eq!(seen[4..], ids);
}

#[tokio::test]
async fn completion_offers_argument_values_and_the_callers_sessions() {
    let s = single_with(bearer(), SKILLS).await;
    let url = format!("{}/v1/mcp", s.base);
    let id = alice_session(&s).await;
    let complete = |r: &Value, name: &str, value: &str| {
        request(
            1,
            "completion/complete",
            json!({"ref": r, "argument": {"name": name, "value": value}}),
        )
    };
    // With the session in the context: its artifacts and workspace paths.
    let with_session = |template: &str, name: &str, value: &str| {
        request(
            2,
            "completion/complete",
            json!({
                "ref": {"type": "ref/resource", "uri": template},
                "argument": {"name": name, "value": value},
                "context": {"arguments": {"sessionId": id}}
            }),
        )
    };
    let prompt = json!({"type": "ref/prompt", "name": "review"});
    let events = json!({"type": "ref/resource", "uri": "bdk://sessions/{sessionId}/events"});
    let artifacts = "bdk://sessions/{sessionId}/artifacts/{artifactId}";
    let files = "bdk://sessions/{sessionId}/workspace/{+path}";
    // (what is asked, who asks, the request, the values offered; `None` for
    // an invalid-params error).
    let cases = [
        // A prompt argument's declared values, by prefix, any case.
        (
            "prompt values",
            "alice-secret",
            complete(&prompt, "depth", "th"),
            Some(json!(["thorough", "Thoughtful"])),
        ),
        (
            "a free argument",
            "alice-secret",
            complete(&prompt, "pr", ""),
            Some(json!([])),
        ),
        (
            "an unknown argument",
            "alice-secret",
            complete(&prompt, "nope", ""),
            None,
        ),
        // Session ids: the caller's own, by prefix.
        (
            "own sessions",
            "alice-secret",
            complete(&events, "sessionId", "ses_"),
            Some(json!([id])),
        ),
        (
            "no match",
            "alice-secret",
            complete(&events, "sessionId", "zzz"),
            Some(json!([])),
        ),
        (
            "another's sessions",
            "bob-secret",
            complete(&events, "sessionId", ""),
            Some(json!([])),
        ),
        (
            "own artifacts",
            "alice-secret",
            with_session(artifacts, "artifactId", "art_t"),
            Some(json!(["art_text"])),
        ),
        (
            "another's artifacts",
            "bob-secret",
            with_session(artifacts, "artifactId", ""),
            Some(json!([])),
        ),
        (
            "workspace paths",
            "alice-secret",
            with_session(files, "path", "notes/"),
            Some(json!(["notes/today.md"])),
        ),
        (
            "paths that climb",
            "alice-secret",
            with_session(files, "path", "../"),
            Some(json!([])),
        ),
        (
            "an unknown template",
            "alice-secret",
            with_session("bdk://nope/{x}", "x", ""),
            None,
        ),
    ];
    for (what, secret, call, want) in cases {
        let (status, body) = rpc(&s.http, &url, Some(secret), call).await;
        match want {
            Some(values) => {
                assert_eq!(
                    body["result"]["completion"]["values"], values,
                    "{what}: {body}"
                );
            }
            None => assert_eq!(rpc_error(status, &body).0, -32602, "{what}: {body}"),
        }
    }

    // The totals of a complete answer.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("alice-secret"),
        complete(&prompt, "depth", "th"),
    )
    .await;
    assert_eq!(body["result"]["completion"]["total"], 2, "{body}");
    assert_eq!(body["result"]["completion"]["hasMore"], false, "{body}");
}

/// The JSON-RPC messages of an answer, plain JSON or an event stream.
fn messages(body: &Value) -> Vec<Value> {
    match body.get("raw").and_then(Value::as_str) {
        Some(stream) => stream
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect(),
        None => vec![body.clone()],
    }
}

/// A tool that reports progress and a log line through the host endpoint,
/// then answers with text, an image and an embedded resource.
const SHOT_PY: &str = r#"
import json, os, socket, sys
json.loads(sys.stdin.readline())
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["BDK_HOST_SOCKET"])
stream = conn.makefile("rwb")
def call(op, **args):
    stream.write((json.dumps({"token": os.environ["BDK_HOST_TOKEN"], "id": 1, "op": op, "args": args}) + "\n").encode())
    stream.flush()
    assert json.loads(stream.readline())["ok"]
call("report.progress", progress=1, total=2, message="rendering")
call("report.log", level="notice", message="rendered")
call("report.progress", progress=2, total=2)
print(json.dumps({"content": [
    {"type": "text", "text": "Rendered:"},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "resource", "resource": {"uri": "shot://1", "mimeType": "text/plain", "text": "alt text"}},
], "structuredContent": {"width": 1}}))
"#;

const SHOT_TOML: &str = r#"
description = "Renders a shot."
effect = "read"
command = ["python3", "shot.py"]

[input_schema]
type = "object"
"#;

#[tokio::test]
async fn rich_results_and_tool_reports_pass_through_both_endpoints() {
    let s = single_with(
        Config::default(),
        &[
            ("agent/tools/shot.toml", SHOT_TOML),
            ("agent/tools/shot.py", SHOT_PY),
        ],
    )
    .await;
    let tools = format!("{}/v1/mcp/tools", s.base);
    // With a progress token: progress and the log line arrive first, on an
    // event stream, then the answer with the tool's blocks unchanged.
    let mut request = call(1, "shot", json!({}));
    request["params"]["_meta"] = json!({"progressToken": "p1"});
    let (status, body) = rpc(&s.http, &tools, None, request).await;
    assert_eq!(status, 200, "{body}");
    let got = messages(&body);
    let methods: Vec<&str> = got
        .iter()
        .map(|m| m["method"].as_str().unwrap_or("answer"))
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/progress",
            "notifications/message",
            "notifications/progress",
            "answer"
        ],
        "{got:#?}"
    );
    assert_eq!(
        got[0]["params"],
        json!({"progressToken": "p1", "progress": 1.0, "total": 2.0, "message": "rendering"})
    );
    assert_eq!(got[1]["params"]["level"], "notice");
    assert_eq!(got[1]["params"]["data"], "rendered");
    assert_eq!(got[1]["params"]["logger"], "bdk.tool.shot");
    let result = &got[3]["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": "Rendered:"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "shot://1", "mimeType": "text/plain", "text": "alt text"}},
        ])
    );
    assert_eq!(result["structuredContent"], json!({"width": 1}));

    // Without a token: no progress, but the tool's log line still comes.
    let (_, body) = rpc(&s.http, &tools, None, call(2, "shot", json!({}))).await;
    let got = messages(&body);
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[0]["method"], "notifications/message");
    assert_eq!(got[1]["result"]["content"][1]["type"], "image");

    // `call_tool` on the agent endpoint: the blocks as content, the
    // outcome (with them) as structured content.
    let agent = format!("{}/v1/mcp", s.base);
    let (_, body) = rpc(
        &s.http,
        &agent,
        None,
        call(3, "call_tool", json!({"name": "shot"})),
    )
    .await;
    let got = messages(&body);
    let result = &got.last().unwrap()["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][1]["mimeType"], "image/png", "{result}");
    let outcome = &result["structuredContent"];
    assert_eq!(outcome["toolName"], "shot");
    assert_eq!(outcome["result"], json!({"width": 1}));
    assert_eq!(outcome["content"][2]["resource"]["uri"], "shot://1");
}

// ---------------------------------------------------------------------------
// The resources the agent folder declares, and skill attachments.

/// `resources.toml` with four fixed resources and two templates over the
/// command tools `item` (text holding the id, or a tool error for `boom`)
/// and `strict` (digits only, by its schema); a packaged skill with an
/// image and a text attachment.
const DECLARED: &[(&str, &str)] = &[
    (
        "agent/resources.toml",
        r#"
[[resources]]
uri = "docs://runbook"
name = "runbook"
title = "On-call runbook"
mime_type = "text/markdown"
file = "resources/runbook.md"

[[resources]]
uri = "test://logo"
name = "logo"
file = "resources/logo.png"

[[resources]]
uri = "test://big"
name = "big"
file = "resources/big.txt"

[[resources]]
uri = "test://swapped"
name = "swapped"
file = "resources/swapped.txt"

[[templates]]
uri_template = "test://items/{id}/data"
name = "item"
mime_type = "application/json"
tool = "item"

[[templates]]
uri_template = "test://strict/{id}"
name = "strict"
tool = "strict"
"#,
    ),
    ("agent/resources/runbook.md", "# Runbook\nPage the owner.\n"),
    // Replaced by binary bytes once the agent runs: files are read per request.
    ("agent/resources/logo.png", "placeholder"),
    ("agent/resources/big.txt", "small for now"),
    ("agent/resources/swapped.txt", "replaced by a symlink"),
    (
        "agent/tools/item.toml",
        "description = \"An item by id.\"\neffect = \"read\"\ncommand = [\"python3\", \"item.py\"]\n[input_schema]\ntype = \"object\"\nrequired = [\"id\"]\nproperties.id = { type = \"string\" }\n",
    ),
    (
        "agent/tools/item.py",
        "import json, sys\nid = json.loads(sys.stdin.readline())['input']['id']\nif id == 'boom':\n    print(json.dumps({'content': 'no item boom', 'isError': True}))\nelse:\n    print(json.dumps({'id': id, 'data': 'Data for ID: ' + id}))\n",
    ),
    (
        "agent/tools/strict.toml",
        "description = \"Digits only.\"\neffect = \"read\"\ncommand = [\"python3\", \"strict.py\"]\n[input_schema]\ntype = \"object\"\nproperties.id = { type = \"string\", pattern = \"^[0-9]+$\" }\n",
    ),
    ("agent/tools/strict.py", "print('strict ok')\n"),
    (
        "agent/skills/explain/SKILL.md",
        "---\ndescription: Use when a diagram needs explaining.\nattachments: [diagram.png, notes.md]\n---\nExplain the diagram.\n",
    ),
    ("agent/skills/explain/diagram.png", "PNG"),
    ("agent/skills/explain/notes.md", "1. Read the legend.\n"),
];

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00];

#[tokio::test]
async fn declared_resources_are_listed_and_read_by_every_caller() {
    let s = single_with(bearer(), DECLARED).await;
    let url = format!("{}/v1/mcp", s.base);
    let agent = s.agent.dir.path().join("agent");
    std::fs::write(agent.join("resources/logo.png"), PNG).unwrap();
    // Both agent-level: readable by bob, who owns no session.
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("bob-secret"),
        request(1, "resources/list", json!({})),
    )
    .await;
    assert_eq!(
        body["result"]["resources"][0],
        json!({"uri": "docs://runbook", "name": "runbook", "title": "On-call runbook",
               "mimeType": "text/markdown"}),
        "{body}"
    );
    assert_eq!(body["result"]["resources"].as_array().unwrap().len(), 4);
    let (_, body) = rpc(
        &s.http,
        &url,
        Some("bob-secret"),
        request(2, "resources/templates/list", json!({})),
    )
    .await;
    let templates: Vec<&str> = body["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(
        templates,
        [
            "test://items/{id}/data",
            "test://strict/{id}",
            "bdk://sessions/{sessionId}/events",
            "bdk://sessions/{sessionId}/artifacts/{artifactId}",
            "bdk://sessions/{sessionId}/workspace/{+path}",
        ],
        "{body}"
    );

    let runbook = read_ok(&s, "bob-secret", "docs://runbook").await;
    assert_eq!(runbook["mimeType"], "text/markdown");
    assert_eq!(runbook["text"], "# Runbook\nPage the owner.\n");
    // Read per request, as a blob by its (guessed) media type.
    let logo = read_ok(&s, "alice-secret", "test://logo").await;
    assert_eq!(logo["mimeType"], "image/png");
    assert_eq!(logo["blob"], "iVBORw0KGgoA", "{logo}");
    assert!(logo.get("text").is_none());
    // A template calls its tool, as the caller, with the URI's variables.
    let item = read_ok(&s, "bob-secret", "test://items/123/data").await;
    assert_eq!(item["mimeType"], "application/json");
    let data: Value = serde_json::from_str(item["text"].as_str().unwrap()).unwrap();
    assert_eq!(data, json!({"id": "123", "data": "Data for ID: 123"}));
    let spaced = read_ok(&s, "bob-secret", "test://items/a%20b/data").await;
    assert!(spaced["text"].as_str().unwrap().contains("a b"), "{spaced}");
    let strict = read_ok(&s, "bob-secret", "test://strict/42").await;
    assert_eq!(
        (strict["mimeType"].as_str(), strict["text"].as_str()),
        (Some("text/plain"), Some("strict ok"))
    );
}

#[tokio::test]
async fn declared_resources_refuse_hostile_uris_and_oversized_files() {
    let s = single_with(bearer(), DECLARED).await;
    let agent = s.agent.dir.path().join("agent");
    // After validation: the file grows past the limit, and one is swapped
    // for a symlink that leads out of the agent folder.
    std::fs::File::create(agent.join("resources/big.txt"))
        .unwrap()
        .set_len(17 * 1024 * 1024)
        .unwrap();
    let secret = s.agent.dir.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    std::fs::remove_file(agent.join("resources/swapped.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, agent.join("resources/swapped.txt")).unwrap();

    for (uri, why) in [
        // Exact URIs only: nothing is resolved against a declared one.
        (
            "docs://runbook/../../secret.txt",
            "declares no such resource",
        ),
        ("docs://runbook/", "declares no such resource"),
        ("DOCS://runbook", "declares no such resource"),
        // A variable takes one segment, and its decoded value may not
        // climb or hold a separator.
        ("test://items/a/b/data", "declares no such resource"),
        ("test://items/a%2Fb/data", "`id` may not hold `/`"),
        (
            "test://items/..%2F..%2Fsecret/data",
            "`id` may not hold `/`",
        ),
        ("test://items/%2e%2e/data", "`id` may not be `.` or `..`"),
        ("test://items/%0a/data", "control characters"),
        ("test://items//data", "declares no such resource"),
        // What the tool refuses or fails on names nothing.
        ("test://strict/abc", "the template's tool refused the input"),
        (
            "test://items/boom/data",
            "answered with an error: no item boom",
        ),
        ("test://swapped", "the path leads outside the agent folder"),
    ] {
        let message = read_refused(&s, "bob-secret", uri).await;
        assert!(message.contains(why), "{uri}: {message}");
        assert!(!message.contains("top secret"), "{message}");
    }
    let (status, body) = read(&s, "bob-secret", "test://big").await;
    let (code, message) = rpc_error(status, &body);
    assert_eq!(code, -32602, "{body}");
    assert!(message.contains("larger than the 16 MiB"), "{message}");

    // Completion knows the declared templates' variables, and offers
    // nothing for them: their values are the tool's to know.
    let url = format!("{}/v1/mcp", s.base);
    let complete = |name: &str| {
        request(
            3,
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "test://items/{id}/data"},
                   "argument": {"name": name, "value": "1"}}),
        )
    };
    let (_, body) = rpc(&s.http, &url, Some("bob-secret"), complete("id")).await;
    assert_eq!(body["result"]["completion"]["values"], json!([]), "{body}");
    let (status, body) = rpc(&s.http, &url, Some("bob-secret"), complete("nope")).await;
    let (code, message) = rpc_error(status, &body);
    assert_eq!(code, -32602, "{body}");
    assert!(
        message.contains("has no argument `nope` (it takes id)"),
        "{message}"
    );
}

#[tokio::test]
async fn skill_attachments_follow_the_prompt_text() {
    let s = single_with(Config::default(), DECLARED).await;
    let url = format!("{}/v1/mcp", s.base);
    let (_, body) = rpc(
        &s.http,
        &url,
        None,
        request(1, "prompts/get", json!({"name": "explain"})),
    )
    .await;
    assert_eq!(
        body["result"]["messages"],
        json!([
            {"role": "user", "content": {"type": "text", "text": "Explain the diagram.\n"}},
            {"role": "user", "content": {"type": "image", "data": "UE5H", "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "resource", "resource": {
                "uri": "bdk://skills/explain/notes.md", "mimeType": "text/markdown",
                "text": "1. Read the legend.\n"}}},
        ]),
        "{body}"
    );
}
