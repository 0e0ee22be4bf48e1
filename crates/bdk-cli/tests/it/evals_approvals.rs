#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Eval cases that approve or deny a `needs_approval` call, in process and
//! against `bdk serve`.

use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

use crate::common;

const RULES: &str = r#"
[[rules]]
user_contains = "deploy"
tool_calls = [{ name = "deploy", input = { target = "prod" } }]

[[rules]]
tool_result = "deploy"
reply = "deploy said: {{ result_text }}"

[[rules]]
reply = "ok"
"#;

const DEPLOY_TOML: &str = r#"
description = "Deploys (asks a person first)."
effect = "write"
needs_approval = true
command = ["sh", "deploy.sh"]

[input_schema]
type = "object"
required = ["target"]
properties = { target = { type = "string" } }
"#;

const CASES: &str = r#"
[[cases]]
name = "approved"
[[cases.steps]]
send = "deploy please"
expect = [{ assert = "require_input_request", tool = "deploy" }, { assert = "not_event", type = "turn.completed" }]
[[cases.steps]]
approve = "deploy"
expect_ok = true
expect = [
  { assert = "called_tool", name = "deploy", status = "completed", output = { deployed = "prod" } },
  { assert = "event", type = "action.approval_resolved", data = { approved = true } },
]

[[cases]]
name = "denied"
[[cases.steps]]
send = "deploy please"
expect = [{ assert = "require_input_request", tool = "deploy" }]
[[cases.steps]]
deny = "deploy"
reason = "not on a Friday"
expect_ok = true
expect = [
  { assert = "called_tool", name = "deploy", status = "failed" },
  { assert = "check", value = "reply", expect = { "$contains" = "not on a Friday" } },
]

[[cases]]
name = "left-waiting"
[[cases.steps]]
send = "deploy please"
expect = [{ assert = "require_input_request", tool = "deploy" }]
"#;

fn project(dir: &Path) {
    bdk_testkit::write_files(
        dir,
        &[
            ("agent/agent.toml", "model = \"scripted\"\n"),
            ("agent/instructions.md", "You deploy things.\n"),
            ("agent/scripted.toml", RULES),
            ("agent/tools/deploy.toml", DEPLOY_TOML),
            (
                "agent/tools/deploy.sh",
                "cat > /dev/null\necho '{\"deployed\": \"prod\"}'\n",
            ),
            (
                "evals/evals.toml",
                "max_concurrency = 2\ntimeout_ms = 60000\n",
            ),
            ("evals/deploy.eval.toml", CASES),
        ],
    );
}

fn evals(dir: &Path, extra: &[&str]) -> Value {
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["evals", "--json", "--dir"])
        .arg(dir)
        .args(extra)
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap()
}

fn check(run: &Value) {
    assert_eq!(run["summary"]["passed"], 3, "{run:#}");
    for case in run["cases"].as_array().unwrap() {
        assert_eq!(case["status"], "passed", "{case:#}");
    }
}

/// Issue 15, item 2: a step that made the agent call a `needs_approval` tool
/// ended "stopped: timed out after 5000 ms". The case now sees the parked
/// request, approves or denies it, and checks what followed; a case that
/// leaves the call waiting passes its own checks and leaves nothing
/// running. File form, in process.
#[test]
fn eval_files_approve_and_deny_parked_calls_in_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deployer");
    project(&dir);
    check(&evals(&dir, &[]));
}

/// The same cases against a running server (`--url`).
#[test]
fn eval_files_approve_and_deny_parked_calls_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deployer");
    project(&dir);
    let server = common::Server::start(&[], &[&dir]);
    let url = format!("{}/deployer", server.base);
    check(&evals(&dir, &["--url", &url]));
}
