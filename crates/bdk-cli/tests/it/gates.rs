#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Result gates through the real `bdk` binary: the gated example (a reject
//! and a repair, a fail), gates that reject forever, hang, crash, print
//! non-JSON or flood stdout, and `bdk validate` on bad gate manifests.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use bdk_events::Envelope;
use serde_json::Value;
use tempfile::TempDir;

use crate::common;
use common::{copy_dir, run_json};

fn bdk() -> Command {
    let mut c = Command::cargo_bin("bdk").unwrap();
    c.env_remove("BDK_STATE_ROOT");
    c
}

/// A private copy of `examples/gated`.
fn gated() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gated");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gated"),
        &dir,
    );
    (tmp, dir)
}

fn run(dir: &Path, message: &str) -> (i32, Value) {
    run_json(
        bdk()
            .args(["run", "--dir"])
            .arg(dir)
            .args(["--message", message]),
    )
}

/// The events of the trace `bdk run` wrote, typed, after checking the
/// log's structural rules.
fn trace(run: &Value) -> Vec<Envelope> {
    let path = PathBuf::from(run["trace"].as_str().unwrap());
    let events: Vec<Envelope> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    events
}

fn kinds(events: &[Envelope]) -> Vec<&str> {
    events.iter().map(Envelope::kind).collect()
}

#[test]
fn the_gate_rejects_the_draft_once_and_accepts_the_repaired_reply() {
    let (_tmp, dir) = gated();
    let out = bdk().arg("validate").arg(&dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let (code, run) = run(&dir, "Write the release notes for 1.2");
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["ok"], true, "{run}");
    assert!(
        run["reply"]
            .as_str()
            .unwrap()
            .ends_with("-- the release bot"),
        "{run}"
    );
    let gates = run["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{run}");
    assert_eq!(gates[0]["gate"], "signed");
    assert_eq!(gates[0]["verdict"], "reject");
    assert_eq!(gates[0]["attempt"], 1);
    assert_eq!(gates[0]["maxAttempts"], 2);
    assert!(gates[0]["feedback"].as_str().unwrap().contains("signature"));
    assert_eq!(gates[1]["verdict"], "accept");
    assert_eq!(gates[1]["attempt"], 2);
    // The action the program reported, computed from the request it read.
    assert_eq!(gates[1]["action"]["checked"], "signature");
    assert_eq!(gates[1]["action"]["attempt"], 2);

    // The stream: the draft's step, its reject, the repair's step, its
    // accept, then the turn's end.
    let events = trace(&run);
    let ks = kinds(&events);
    let turn: Vec<&str> = ks
        .iter()
        .copied()
        .skip_while(|k| *k != "turn.started")
        .filter(|k| {
            matches!(
                *k,
                "step.started" | "step.completed" | "gate.verdict" | "turn.completed"
            )
        })
        .collect();
    assert_eq!(
        turn,
        [
            "step.started",
            "step.completed",
            "gate.verdict",
            "step.started",
            "step.completed",
            "gate.verdict",
            "turn.completed"
        ],
        "{ks:?}"
    );
    // The model saw the feedback: the repair answered it.
    let replies: Vec<&Envelope> = events
        .iter()
        .filter(|e| e.kind() == "message.completed")
        .collect();
    assert_eq!(replies.len(), 2);

    // A second turn in a new process rebuilds the conversation from the
    // log (the feedback included) and is judged afresh from attempt 1.
    let id = run["sessionId"].as_str().unwrap();
    let (code, second) = run_json(bdk().args(["run", "--dir"]).arg(&dir).args([
        "--session",
        id,
        "--message",
        "And the release notes for 1.2 again",
    ]));
    assert_eq!(code, 0, "{second}");
    let gates = second["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 4, "{second}");
    assert_eq!(gates[2]["attempt"], 1);
    assert_eq!(gates[3]["verdict"], "accept");
}

#[test]
fn the_gate_fails_the_turn_and_the_session_stays_usable() {
    let (_tmp, dir) = gated();
    let (code, run) = run(&dir, "Release notes including the secret feature");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["ok"], false);
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("result gate `signed` failed the turn") && error.contains("unreleased"),
        "{run}"
    );
    let gates = run["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 1);
    assert_eq!(gates[0]["verdict"], "fail");
    let events = trace(&run);
    let ks = kinds(&events);
    let at = ks.iter().position(|k| *k == "gate.verdict").unwrap();
    assert_eq!(ks[at + 1], "turn.failed", "{ks:?}");
    assert_eq!(ks.last(), Some(&"session.waiting"));

    // The session takes the next message.
    let id = run["sessionId"].as_str().unwrap();
    let (code, next) = run_json(bdk().args(["run", "--dir"]).arg(&dir).args([
        "--session",
        id,
        "--message",
        "Write the release notes for 1.2",
    ]));
    assert_eq!(code, 0, "{next}");
    assert_eq!(next["ok"], true);
}

#[test]
fn dry_run_sessions_run_their_gates_and_tell_them() {
    let (_tmp, dir) = gated();
    let (code, run) = run_json(
        bdk()
            .args(["run", "--dry-run", "--dir"])
            .arg(&dir)
            .args(["--message", "Write the release notes for 1.2"]),
    );
    assert_eq!(code, 0, "{run}");
    let gates = run["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{run}");
    assert_eq!(gates[0]["action"], Value::Null);
    assert_eq!(gates[1]["action"]["dryRun"], true, "{run}");
}

/// An agent whose scripted model always answers "draft", judged by one gate
/// `g` with this manifest body (the command is added) running `script`
/// (Python, in gates/g.py).
fn agent_with_gate(manifest: &str, script: &str) -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent-with-gate");
    let agent = dir.join("agent");
    std::fs::create_dir_all(agent.join("gates")).unwrap();
    std::fs::write(agent.join("agent.toml"), "model = \"scripted\"\n").unwrap();
    std::fs::write(agent.join("instructions.md"), "Answer briefly.\n").unwrap();
    std::fs::write(
        agent.join("scripted.toml"),
        "[[rules]]\nreply = \"draft\"\nusage = { input_tokens = 10, output_tokens = 2 }\n",
    )
    .unwrap();
    std::fs::write(
        agent.join("gates/g.toml"),
        format!("command = [\"python3\", \"g.py\"]\n{manifest}"),
    )
    .unwrap();
    std::fs::write(agent.join("gates/g.py"), script).unwrap();
    (tmp, dir)
}

const READ_REQUEST: &str = "import json, sys\nrequest = json.loads(sys.stdin.readline())\n";

#[test]
fn a_gate_that_rejects_forever_fails_the_turn_after_max_attempts() {
    let (_tmp, dir) = agent_with_gate(
        "max_attempts = 3\n",
        &format!(
            "{READ_REQUEST}print(json.dumps({{'verdict': 'reject', 'feedback': 'try again (' + str(request['attempt']) + ')'}}))\n"
        ),
    );
    let (code, run) = run(&dir, "hi");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("rejected the reply on attempt 3 of 3") && error.contains("try again (3)"),
        "{run}"
    );
    let attempts: Vec<u64> = run["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            assert_eq!(g["verdict"], "reject");
            g["attempt"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    let events = trace(&run);
    let steps = events.iter().filter(|e| e.kind() == "step.started").count();
    assert_eq!(steps, 3, "one step per attempt");
}

/// Runs `hi` against a gate that breaks and checks the verdict records the
/// error and the turn fails with it (the default `on_error`).
fn check_broken(manifest: &str, script: &str, error_has: &str) -> Value {
    let (_tmp, dir) = agent_with_gate(manifest, script);
    let (code, run) = run(&dir, "hi");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["status"], "failed", "{run}");
    let gates = run["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 1, "{run}");
    assert_eq!(gates[0]["verdict"], "fail", "{run}");
    let error = gates[0]["error"].as_str().unwrap();
    assert!(error.contains(error_has), "{error_has}: {run}");
    let message = run["error"].as_str().unwrap();
    assert!(
        message.contains("result gate `g` failed the turn") && message.contains(error_has),
        "{run}"
    );
    trace(&run);
    // The session rests and takes the next message.
    let id = run["sessionId"].as_str().unwrap();
    let (_, list) = run_json(bdk().args(["sessions", "--json", "--dir"]).arg(&dir));
    assert_eq!(list[0]["sessionId"], id, "{list}");
    assert_eq!(list[0]["status"], "waiting", "{list}");
    run
}

#[test]
fn a_gate_that_crashes_fails_the_turn_with_its_stderr() {
    check_broken(
        "",
        "import sys\nsys.stderr.write('gate blew up\\n')\nsys.exit(3)\n",
        "exited with status 3: gate blew up",
    );
}

#[test]
fn a_gate_that_prints_non_json_fails_the_turn() {
    check_broken(
        "",
        &format!("{READ_REQUEST}print('looks fine to me')\n"),
        "not one JSON object",
    );
    check_broken(
        "",
        &format!("{READ_REQUEST}print(json.dumps({{'verdict': 'maybe'}}))\n"),
        "unknown verdict `maybe`",
    );
}

#[test]
fn a_gate_that_floods_stdout_is_stopped() {
    check_broken(
        "",
        "import sys\nchunk = 'x' * 65536\nwhile True:\n    sys.stdout.write(chunk)\n",
        "printed more than 1048576 bytes",
    );
}

#[test]
fn a_gate_that_hangs_is_stopped_at_its_timeout() {
    check_broken(
        "timeout_secs = 1\n",
        "import time\ntime.sleep(600)\n",
        "timed out after 1000 ms",
    );
}

#[test]
fn on_error_accept_lets_the_reply_through_and_records_the_error() {
    let (_tmp, dir) = agent_with_gate("on_error = \"accept\"\n", "import sys\nsys.exit(1)\n");
    let (code, run) = run(&dir, "hi");
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["reply"], "draft");
    let gate = &run["gates"][0];
    assert_eq!(gate["verdict"], "accept", "{run}");
    assert!(
        gate["error"]
            .as_str()
            .unwrap()
            .contains("exited with status 1"),
        "{run}"
    );
}

#[test]
fn validate_reports_each_bad_gate_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(agent.join("gates")).unwrap();
    std::fs::write(agent.join("instructions.md"), "Hi.\n").unwrap();
    let gates = agent.join("gates");
    std::fs::write(gates.join("no_command.toml"), "description = \"x\"\n").unwrap();
    std::fs::write(
        gates.join("too_many.toml"),
        "command = [\"true\"]\nmax_attempts = 11\n",
    )
    .unwrap();
    std::fs::write(
        gates.join("bad_policy.toml"),
        "command = [\"true\"]\non_error = \"ignore\"\n",
    )
    .unwrap();
    std::fs::write(
        gates.join("zero_timeout.toml"),
        "command = [\"true\"]\ntimeout_secs = 0\n",
    )
    .unwrap();
    std::fs::write(
        gates.join("typo.toml"),
        "command = [\"true\"]\nmax_attempt = 2\n",
    )
    .unwrap();
    std::fs::write(gates.join("notes.txt"), "stray").unwrap();
    std::fs::write(
        gates.join("ok.toml"),
        "command = [\"python3\", \"ok.py\"]\n",
    )
    .unwrap();
    std::fs::write(gates.join("ok.py"), "print('{}')\n").unwrap();

    let (code, json) = run_json(bdk().args(["validate", "--json"]).arg(tmp.path()));
    assert_eq!(code, 2, "{json}");
    let diags = json["diagnostics"].as_array().unwrap();
    let find = |file: &str, text: &str| -> &Value {
        diags
            .iter()
            .find(|d| {
                d["file"].as_str().is_some_and(|f| f.ends_with(file))
                    && d["message"].as_str().unwrap().contains(text)
            })
            .unwrap_or_else(|| panic!("no diagnostic for {file} with {text}: {json}"))
    };
    assert_eq!(
        find("no_command.toml", "missing `command`")["severity"],
        "error"
    );
    assert_eq!(
        find("too_many.toml", "`max_attempts` must be 1 to 10")["severity"],
        "error"
    );
    assert_eq!(
        find("bad_policy.toml", "`on_error` must be")["severity"],
        "error"
    );
    assert_eq!(
        find("zero_timeout.toml", "`timeout_secs` must be greater than 0")["severity"],
        "error"
    );
    assert_eq!(
        find("typo.toml", "unknown key `max_attempt`")["severity"],
        "warning"
    );
    assert_eq!(
        find("notes.txt", "stray entry in gates/")["severity"],
        "warning"
    );
    assert!(
        !diags
            .iter()
            .any(|d| d["file"].as_str().is_some_and(|f| f.contains("gates/ok"))),
        "{json}"
    );
    assert_eq!(json["errors"], 4, "{json}");
    assert_eq!(json["warnings"], 2, "{json}");

    // `bdk info` lists the valid gate with its defaults.
    let (code, info) = run_json(bdk().args(["info", "--json"]).arg(tmp.path()));
    assert_eq!(code, 0, "{info}");
    // A manifest with only warnings (`typo`) is still a gate.
    let listed = info["gates"].as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ok", "typo"], "{info}");
    assert_eq!(listed[0]["name"], "ok");
    assert_eq!(listed[0]["maxAttempts"], 3);
    assert_eq!(listed[0]["timeoutMs"], 30000);
    assert_eq!(listed[0]["onError"], "fail");
    assert_eq!(listed[0]["file"], "agent/gates/ok.toml");
}
