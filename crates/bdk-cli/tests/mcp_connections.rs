#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `bdk` binary with MCP connections: a broken connection is listed
//! under `connectionErrors` by `bdk info --json`, and the working one's
//! advertised tools are still callable with `bdk call`.

use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::{Value, json};
use tempfile::TempDir;

/// A minimal MCP server on stdio with one read-only tool, `shout`.
const SERVER_PY: &str = r#"
import json, sys

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
    for (path, content) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
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
