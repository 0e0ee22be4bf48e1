#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `bdk` binary with MCP connections: a broken connection is listed
//! under `connectionErrors` by `bdk info --json`, and the working one's
//! advertised tools are still callable with `bdk call`.

use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use bdk_testkit::poll;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common;

/// A minimal MCP server on stdio with one read-only tool, `shout`.
const SERVER_PY: &str = r#"
import json, sys

sys.stderr.write("shouter 0.1: listening on stdio (a banner)\n")
sys.stderr.flush()

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    message = json.loads(line)
    mid = message.get("id")
    method = message.get("method")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "shouter", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "shout", "description": "upper-cases",
              "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
              "annotations": {"readOnlyHint": True}}]}})
    elif method == "tools/call":
        text = message["params"]["arguments"]["text"]
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text.upper()}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}})
"#;

fn project() -> TempDir {
    let dir = TempDir::new().unwrap();
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "You shout.\n"),
        ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
        ("servers/shouter.py", SERVER_PY),
        (
            "agent/mcp-connections/shouter.toml",
            "command = \"python3\"\nargs = [\"shouter.py\"]\ncwd = \"../../servers\"\nadvertise_tools = true\ntimeout_ms = 10000\n",
        ),
        (
            "agent/mcp-connections/broken.toml",
            "command = \"bdk-no-such-mcp-server\"\nadvertise_tools = true\n",
        ),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    dir
}

fn run_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .env_remove("BDK_STATE_ROOT")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), value)
}

#[test]
fn info_reports_a_broken_connection_and_the_rest_still_works() {
    let dir = project();
    let (code, info) = run_json(dir.path(), &["info", "--json"]);
    assert_eq!(code, 0, "{info}");
    let errors = info["connectionErrors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{info}");
    assert_eq!(errors[0]["name"], "broken");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("bdk-no-such-mcp-server"),
        "{info}"
    );

    let (code, out) = run_json(
        dir.path(),
        &["call", "shout", "--input", r#"{"text":"hello"}"#],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["isError"], false, "{out}");
    assert_eq!(out["result"], json!("HELLO"));
}

#[test]
fn a_stdio_servers_stderr_goes_to_the_debug_log_not_to_bdks_stderr() {
    let dir = project();
    let call = |log: &str| {
        Command::cargo_bin("bdk")
            .unwrap()
            .env_remove("BDK_STATE_ROOT")
            .env("BDK_LOG", log)
            .args([
                "call",
                "shout",
                "--input",
                r#"{"text":"hi"}"#,
                "--json",
                "--dir",
            ])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let quiet = call("info");
    assert!(quiet.status.success());
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains("a banner"), "{stderr}");

    let debug = call("bdk_mcp=debug");
    assert!(debug.status.success());
    let stderr = String::from_utf8_lossy(&debug.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("a banner"))
        .unwrap_or_else(|| panic!("no banner in the debug log:\n{stderr}"));
    assert!(line.contains("MCP server stderr"), "{line}");
    assert!(line.contains("shouter"), "{line}");
}

/// The MCP reference server's entry point (installed by `.ci/test-deps`
/// into `target/mcp-peers`, or under `BDK_MCP_PEERS`), or a failure naming
/// the install.
fn everything() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let peers = std::env::var_os("BDK_MCP_PEERS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target/mcp-peers"));
    let entry = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "the MCP reference server is missing at {}; run .ci/test-deps \
         (or `npm install --prefix target/mcp-peers @modelcontextprotocol/server-everything`)",
        entry.display()
    );
    entry.canonicalize().unwrap()
}

/// An agent with no tool of its own: every tool comes from the reference
/// server through one advertised connection.
fn mcp_only_project() -> TempDir {
    let dir = TempDir::new().unwrap();
    let connection = format!(
        "command = \"node\"\nargs = [{:?}, \"stdio\"]\nadvertise_tools = true\n",
        everything().display().to_string()
    );
    let files = [
        (
            "agent/agent.toml",
            "model = \"scripted\"\n[builtin_tools]\nworkspace = false\nartifacts = false\n",
        ),
        ("agent/instructions.md", "You relay.\n"),
        ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
        ("agent/mcp-connections/everything.toml", connection.as_str()),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    dir
}

/// Checks a tools listing of the MCP-only agent: the reference server's
/// tools, each marked with its connection.
fn assert_mcp_tools(tools: &Value, context: &Value) {
    let tools = tools.as_array().unwrap();
    assert!(tools.len() > 3, "{context}");
    for tool in tools {
        assert_eq!(tool["source"], "mcp:everything", "{tool}");
    }
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    // The server's own title for the tool.
    assert_eq!(echo["title"], "Echo Tool", "{echo}");
    assert_eq!(echo["effect"], "read", "{echo}");
    assert_eq!(echo["execution"], "server", "{echo}");
    assert_eq!(
        echo["inputSchema"]["properties"]["message"]["type"], "string",
        "{echo}"
    );
}

#[test]
fn info_lists_advertised_mcp_tools_with_their_source() {
    let dir = mcp_only_project();
    let (code, info) = run_json(dir.path(), &["info", "--json"]);
    assert_eq!(code, 0, "{info}");
    assert_eq!(info["connectionErrors"], json!([]), "{info}");
    assert_mcp_tools(&info["tools"], &info);

    // The text form, as a terminal shows it.
    let text = common::on_a_terminal(&["info", "--dir", dir.path().to_str().unwrap()], dir.path());
    let count = info["tools"].as_array().unwrap().len();
    assert!(text.contains(&format!("tools ({count}):")), "{text}");
    assert!(
        text.lines().any(|l| l
            .trim_start()
            .starts_with("echo [read, server, mcp:everything]")),
        "{text}"
    );
}

#[test]
fn info_says_on_stderr_when_a_connection_does_not_list() {
    let dir = project();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .env_remove("BDK_STATE_ROOT")
        .args(["info", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("MCP connection `broken` did not list its tools"),
        "{stderr}"
    );
    let stdout =
        common::on_a_terminal(&["info", "--dir", dir.path().to_str().unwrap()], dir.path());
    // The working connection's tool is listed, with its source.
    assert!(
        stdout.contains("shout [read, server, mcp:shouter] upper-cases"),
        "{stdout}"
    );
    assert!(stdout.contains("broken (failed: "), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_lists_advertised_mcp_tools_in_info_and_tools() {
    let dir = mcp_only_project();
    let server = common::Server::start(&["--mode", "single"], &[dir.path()]);
    let c = common::client();
    // `bdk serve` lists advertised tools in the background: poll until the
    // listing has landed.
    let info = poll::until_ok_within(
        "the advertised tools in /v1/info",
        std::time::Duration::from_secs(120),
        || async {
            let info = common::get_json(&c, &format!("{}/v1/info", server.base)).await;
            if info["tools"].as_array().is_some_and(|t| !t.is_empty()) {
                Ok(info)
            } else {
                Err(info)
            }
        },
    )
    .await;
    assert_mcp_tools(&info["tools"], &info);

    let tools = common::get_json(&c, &format!("{}/v1/tools", server.base)).await;
    assert_mcp_tools(&tools["tools"], &tools);
    assert_eq!(
        tools["tools"].as_array().unwrap().len(),
        info["tools"].as_array().unwrap().len(),
        "{tools}\n{info}"
    );
}
