#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! MCP connections against real peers: the official reference server
//! (`@modelcontextprotocol/server-everything`, installed by `.ci/run` into
//! `target/mcp-peers`) over stdio and streamable HTTP, and a small
//! misbehaving stdio server written here (hangs, crashes, malformed
//! JSON-RPC, oversized results, `tools/list_changed`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdk_core::host::{DirectCall, Host, StartSession};
use bdk_core::mcp::McpHub;
use bdk_core::tool::Effect;
use bdk_core::{Project, discover};
use bdk_mcp::client::McpConnections;
use bdk_store::FsStore;
use bdk_testkit::poll;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The reference server's entry point, or a failure naming the install.
fn everything() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let peers = std::env::var_os("BDK_MCP_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/mcp-peers"));
    let entry = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "the MCP reference server is missing at {}; install it with \
         `npm install --prefix target/mcp-peers @modelcontextprotocol/server-everything` \
         (which .ci/run does)",
        entry.display()
    );
    entry.canonicalize().unwrap()
}

const MISBEHAVING: &str = r#"
import json, os, sys

extra = False

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

def text(mid, value):
    return {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": value}]}}

def tools():
    names = ["ok", "hang", "crash", "garbage", "huge", "grow"]
    listed = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in names]
    if extra:
        listed.append({"name": "extra", "description": "added later", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": True}})
    return listed

for line in sys.stdin:
    message = json.loads(line)
    mid = message.get("id")
    method = message.get("method")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "misbehaving", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools()}})
    elif method == "tools/call":
        name = message["params"]["name"]
        if name == "ok":
            send(text(mid, "fine, pid %d" % os.getpid()))
        elif name == "hang":
            pass
        elif name == "crash":
            os._exit(3)
        elif name == "garbage":
            sys.stdout.write("{\"jsonrpc\": \"2.0\", \"id\": " + json.dumps(mid) + ", \"result\": [broken\n")
            sys.stdout.flush()
        elif name == "huge":
            send(text(mid, "x" * (5 * 1024 * 1024)))
        elif name == "grow":
            extra = True
            send(text(mid, "grown"))
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif name == "extra":
            send(text(mid, "extra here"))
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}})
"#;

/// A subprocess tool that runs requests against the host endpoint, the way
/// tool programs reach `host.mcp`.
const CLIENT_PY: &str = r#"
import json, os, socket, sys

request = json.loads(sys.stdin.readline())
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["BDK_HOST_SOCKET"])
stream = conn.makefile("rwb")
answers = []
for n, step in enumerate(request["input"]["requests"]):
    message = {"token": os.environ["BDK_HOST_TOKEN"], "id": n, "op": step["op"], "args": step.get("args", {})}
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()
    answers.append(json.loads(stream.readline()))
print(json.dumps(answers))
"#;

const CLIENT_TOML: &str = r#"
description = "Runs requests against the host endpoint."
command = ["python3", "client.py"]

[input_schema]
type = "object"
required = ["requests"]
properties = { requests = { type = "array" } }
"#;

const RULES: &str = r#"
[[rules]]
user_contains = "echo"
tool_calls = [{ name = "echo", input = { message = "from the model" } }]

[[rules]]
tool_result = "echo"
reply = "The server said: {{ result }}"

[[rules]]
reply = "ok"
"#;

/// Writes an agent with the given connection manifests and discovers it.
fn project(dir: &TempDir, connections: &[(&str, String)]) -> Project {
    let mut files = vec![
        (
            "agent/agent.toml".to_owned(),
            "model = \"scripted\"\n[builtin_tools]\nworkspace = false\nartifacts = false\n"
                .to_owned(),
        ),
        (
            "agent/instructions.md".to_owned(),
            "You relay.\n".to_owned(),
        ),
        ("agent/scripted.toml".to_owned(), RULES.to_owned()),
        ("servers/misbehaving.py".to_owned(), MISBEHAVING.to_owned()),
        ("agent/tools/client.toml".to_owned(), CLIENT_TOML.to_owned()),
        ("agent/tools/client.py".to_owned(), CLIENT_PY.to_owned()),
    ];
    for (name, body) in connections {
        files.push((format!("agent/mcp-connections/{name}.toml"), body.clone()));
    }
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    d.project.unwrap()
}

fn stdio_everything(advertise: bool) -> String {
    format!(
        "command = \"node\"\nargs = [{:?}, \"stdio\"]\nadvertise_tools = {advertise}\n",
        everything().display().to_string()
    )
}

fn misbehaving(timeout_ms: u64) -> String {
    // `cwd` is relative to the manifest's folder.
    format!(
        "command = \"python3\"\nargs = [\"misbehaving.py\"]\ncwd = \"../../servers\"\nadvertise_tools = true\ntimeout_ms = {timeout_ms}\n"
    )
}

async fn host(project: Project, dir: &TempDir, hub: Arc<McpConnections>) -> Host {
    let store = FsStore::open(dir.path().join(".bdk")).unwrap();
    Host::builder(project, Arc::new(store))
        .mcp(hub)
        .build()
        .await
        .unwrap()
}

fn text(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected text, got {v}"))
}

#[tokio::test]
async fn the_reference_server_over_stdio_lists_calls_and_is_advertised() {
    let dir = TempDir::new().unwrap();
    let p = project(
        &dir,
        &[
            ("everything", stdio_everything(true)),
            ("quiet", stdio_everything(false)),
        ],
    );
    let hub = McpConnections::start(&p);
    hub.ready().await;
    assert_eq!(hub.names(), vec!["everything", "quiet"]);
    assert!(
        hub.connection_errors().is_empty(),
        "{:?}",
        hub.connection_errors()
    );

    let tools = hub.list_tools("everything").await.unwrap();
    let by_name = |n: &str| tools.iter().find(|t| t.name == n).unwrap().clone();
    let echo = by_name("echo");
    assert_eq!(echo.effect, Effect::Read);
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    assert_eq!(by_name("get-sum").effect, Effect::Read);
    assert_eq!(by_name("toggle-simulated-logging").effect, Effect::Write);

    let out = hub
        .call_tool("everything", "echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(text(&out.content), "Echo: hi");
    let sum = hub
        .call_tool("everything", "get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert!(text(&sum.content).contains('5'), "{sum:?}");
    // A rich result keeps the server's blocks unchanged; the text the
    // model sees names the image instead of carrying its base64.
    let image = hub
        .call_tool("everything", "get-tiny-image", json!({}))
        .await
        .unwrap();
    assert!(!image.is_error, "{image:?}");
    let kinds: Vec<&str> = image
        .blocks
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "image", "text"]);
    assert_eq!(image.blocks[1]["mimeType"], "image/png");
    assert!(image.blocks[1]["data"].as_str().unwrap().len() > 1000);
    let seen = text(&image.content);
    assert!(
        seen.starts_with("Here's the image you requested:\n[image: image/png, "),
        "{seen}"
    );
    assert!(seen.len() < 200, "{seen}");
    // The non-advertising connection starts lazily, on this first use.
    let quiet = hub.list_tools("quiet").await.unwrap();
    assert!(quiet.iter().any(|t| t.name == "echo"));
    assert!(hub.call_tool("nope", "echo", json!({})).await.is_err());

    // Advertised tools reach direct calls and the model; the quiet
    // connection's tools are not advertised twice (no collision warning path).
    let host = host(p, &dir, Arc::clone(&hub)).await;
    assert!(host.tools().iter().any(|t| t.name == "get-sum"));
    let direct = host
        .call_tool(DirectCall {
            name: "echo".into(),
            input: json!({"message": "direct"}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!direct.is_error);
    assert_eq!(direct.result, json!("Echo: direct"));

    let s = host
        .start_session(StartSession {
            message: Some("please echo".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let r = host
        .wait_turn(&s.session_id, &s.turn_id.unwrap())
        .await
        .unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.reply, "The server said: Echo: from the model");
    host.shutdown(Duration::from_secs(5)).await;
}

/// A free loopback port, released for the server to take.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_reference_server_over_streamable_http() {
    let port = free_port();
    let mut server = tokio::process::Command::new("node")
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // No readiness event exists for a foreign process: poll its port with
    // a bounded deadline.
    poll::until("the HTTP server to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;

    let dir = TempDir::new().unwrap();
    // Cargo sets CARGO_PKG_NAME for the test process, so it serves as a
    // bearer token variable without changing the environment.
    let manifest = |var: &str| {
        format!(
            "url = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Client = \"bdk\" }}\nbearer_token_env = \"{var}\"\nadvertise_tools = true\n"
        )
    };
    let p = project(
        &dir,
        &[
            ("remote", manifest("CARGO_PKG_NAME")),
            ("unset", manifest("BDK_TEST_NO_SUCH_TOKEN_VARIABLE")),
        ],
    );
    let hub = McpConnections::start(&p);
    hub.ready().await;
    let errors = hub.connection_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].name, "unset");
    assert!(
        errors[0]
            .message
            .contains("BDK_TEST_NO_SUCH_TOKEN_VARIABLE"),
        "{errors:?}"
    );
    let tools = hub.list_tools("remote").await.unwrap();
    assert!(tools.iter().any(|t| t.name == "get-sum"));
    let sum = hub
        .call_tool("remote", "get-sum", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert!(!sum.is_error, "{sum:?}");
    assert!(text(&sum.content).contains("42"), "{sum:?}");

    let host = host(p, &dir, Arc::clone(&hub)).await;
    let direct = host
        .call_tool(DirectCall {
            name: "echo".into(),
            input: json!({"message": "over http"}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(direct.result, json!("Echo: over http"));
    host.shutdown(Duration::from_secs(5)).await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_misbehaving_server_gives_tool_errors_and_recovers() {
    let dir = TempDir::new().unwrap();
    let p = project(&dir, &[("bad", misbehaving(1_500))]);
    let hub = McpConnections::start(&p);
    hub.ready().await;
    assert!(
        hub.connection_errors().is_empty(),
        "{:?}",
        hub.connection_errors()
    );
    let call = |tool: &'static str| {
        let hub = Arc::clone(&hub);
        async move { hub.call_tool("bad", tool, json!({})).await.unwrap() }
    };

    let first = call("ok").await;
    assert!(!first.is_error, "{first:?}");

    let started = Instant::now();
    let hung = call("hang").await;
    assert!(hung.is_error);
    assert!(
        text(&hung.content).contains("did not answer within 1500 ms"),
        "{hung:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        !call("ok").await.is_error,
        "a hang leaves the connection usable"
    );

    let crashed = call("crash").await;
    assert!(crashed.is_error, "{crashed:?}");
    let after = call("ok").await;
    assert!(!after.is_error, "the next call reconnects: {after:?}");
    assert_ne!(after.content, first.content, "a new server process answers");

    let garbage = call("garbage").await;
    // rmcp drops a line that is not JSON-RPC, so the call ends at the
    // timeout with an error; the connection itself stays usable.
    assert!(garbage.is_error, "{garbage:?}");
    assert!(
        text(&garbage.content).contains("did not answer"),
        "{garbage:?}"
    );
    assert!(!call("ok").await.is_error);

    let huge = call("huge").await;
    assert!(huge.is_error, "{huge:?}");
    assert!(text(&huge.content).contains("byte limit"), "{huge:?}");

    // `tools/list_changed` refreshes the advertised catalog.
    let host = host(p, &dir, Arc::clone(&hub)).await;
    assert!(!host.tools().iter().any(|t| t.name == "extra"));
    let generation = hub.generation();
    assert!(!call("grow").await.is_error);
    // The relisting runs in the background after the notification; poll
    // the catalog with a bounded deadline.
    poll::until("the catalog to refresh", || {
        std::future::ready(host.tools().iter().any(|t| t.name == "extra"))
    })
    .await;
    assert!(hub.generation() > generation);
    let extra = host
        .tools()
        .into_iter()
        .find(|t| t.name == "extra")
        .unwrap();
    assert_eq!(extra.effect, Effect::Read);
    let direct = host
        .call_tool(DirectCall {
            name: "extra".into(),
            input: json!({}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(direct.result, json!("extra here"));
    host.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_broken_connection_is_reported_while_the_rest_works() {
    let dir = TempDir::new().unwrap();
    let p = project(
        &dir,
        &[
            (
                "broken",
                "command = \"bdk-no-such-mcp-server\"\nadvertise_tools = true\n".to_owned(),
            ),
            ("bad", misbehaving(5_000)),
        ],
    );
    let hub = McpConnections::start(&p);
    hub.ready().await;
    let errors = hub.connection_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].name, "broken");
    assert!(
        errors[0].message.contains("bdk-no-such-mcp-server"),
        "{errors:?}"
    );

    let host = host(p, &dir, Arc::clone(&hub)).await;
    assert_eq!(host.connection_errors(), errors);
    let ok = host
        .call_tool(DirectCall {
            name: "ok".into(),
            input: json!({}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!ok.is_error, "{ok:?}");
    let broken = hub
        .call_tool("broken", "anything", json!({}))
        .await
        .unwrap();
    assert!(broken.is_error);

    // Subprocess tools reach the same connections through the host endpoint.
    let through = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: json!({"requests": [
                {"op": "mcp.names"},
                {"op": "mcp.list_tools", "args": {"connection": "bad"}},
                {"op": "mcp.call_tool", "args": {"connection": "bad", "tool": "ok", "args": {}}},
                {"op": "mcp.list_tools", "args": {"connection": "broken"}},
                {"op": "mcp.call_tool", "args": {"connection": "nope", "tool": "ok"}},
            ]}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!through.is_error, "{through:?}");
    let answers: Vec<Value> = match &through.result {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => serde_json::from_value(other.clone()).unwrap(),
    };
    assert_eq!(answers[0]["result"]["names"], json!(["bad", "broken"]));
    let listed = answers[1]["result"]["tools"].as_array().unwrap();
    assert!(listed.iter().any(|t| t["name"] == "hang"), "{answers:?}");
    assert_eq!(answers[2]["result"]["isError"], json!(false), "{answers:?}");
    assert!(text(&answers[2]["result"]["content"]).starts_with("fine"));
    assert_eq!(answers[3]["ok"], json!(false), "{answers:?}");
    assert!(
        text(&answers[3]["message"]).contains("broken"),
        "{answers:?}"
    );
    assert_eq!(answers[4]["ok"], json!(false), "{answers:?}");
    assert!(text(&answers[4]["message"]).contains("unknown MCP connection `nope`"));
    host.shutdown(Duration::from_secs(5)).await;
}
