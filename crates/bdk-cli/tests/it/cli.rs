#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `bdk` binary against real projects on disk.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use bdk_testkit::{PATIENCE, poll};
use serde_json::Value;

use crate::common;
use common::{run_json, weather};

fn bdk() -> Command {
    let mut c = Command::cargo_bin("bdk").unwrap();
    c.env_remove("BDK_STATE_ROOT");
    c
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather")
}

fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn validate_accepts_the_example_and_reports_each_problem_of_a_broken_project() {
    let out = bdk().arg("validate").arg(example()).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 error(s), 0 warning(s)"));

    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::create_dir_all(agent.join("hooks")).unwrap();
    // Three problems: no instructions, a tool with an invalid schema, a hook
    // that names an unknown event.
    std::fs::write(
        agent.join("tools/bad.toml"),
        "description = \"x\"\ncommand = [\"true\"]\ninput_schema = { type = \"object\", properties = { a = { type = 5 } } }\n",
    )
    .unwrap();
    std::fs::write(
        agent.join("hooks/h.toml"),
        "events = [\"turn.exploded\"]\nfile = \"x.ndjson\"\n",
    )
    .unwrap();
    let out = bdk().arg("validate").arg(tmp.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("error:") || l.starts_with("warning:"))
        .collect();
    assert_eq!(problems.len(), 3, "{stdout}");
    assert!(
        problems.iter().any(|l| l.contains("instructions")),
        "{stdout}"
    );
    assert!(
        problems.iter().any(|l| l.contains("agent/tools/bad.toml")),
        "{stdout}"
    );
    assert!(
        problems
            .iter()
            .any(|l| l.starts_with("warning:") && l.contains("turn.exploded")),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("  fix: ").count(),
        3,
        "every diagnostic names a fix"
    );

    let (code, json) = run_json(bdk().args(["validate", "--json"]).arg(tmp.path()));
    assert_eq!(code, 2);
    assert_eq!(json["errors"], 2);
    assert_eq!(json["warnings"], 1);
}

#[test]
fn info_lists_the_surface() {
    let (code, json) = run_json(bdk().args(["info", "--json"]).arg(example()));
    assert_eq!(code, 0);
    assert_eq!(json["name"], "weather");
    assert_eq!(json["tools"][0]["name"], "get_weather");
    assert_eq!(json["tools"][0]["effect"], "read");
    assert_eq!(json["subagents"][0]["name"], "climate");
    assert!(
        json["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "forecast-style")
    );
    let out = bdk().arg("info").arg(example()).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("get_weather"));
}

/// What `bdk info --json` says about the weather example, as people read it,
/// kept as a reviewed snapshot (the example's location redacted): a change to
/// the example or to the report shows up as a diff to accept.
#[test]
fn info_json_of_the_weather_example_is_the_snapshot() {
    let dir = example();
    let (code, json) = run_json(bdk().args(["info", "--json"]).arg(&dir));
    assert_eq!(code, 0, "{json}");
    let canonical = dir.canonicalize().unwrap();
    insta::assert_json_snapshot!(
        "info_weather",
        bdk_testkit::snapshot::redacted(json, &[&canonical, &dir])
    );
}

#[test]
fn run_prints_a_trajectory_and_trajectory_reads_the_trace_back_identically() {
    let (_tmp, dir) = weather();
    let (code, run) = run_json(
        bdk()
            .args(["run", "--dir"])
            .arg(&dir)
            .args(["--message", "What's the weather in Paris?"]),
    );
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["ok"], true);
    assert_eq!(run["toolCalls"][0]["name"], "get_weather");
    assert_eq!(run["toolCalls"][0]["input"]["city"], "Paris");
    assert!(run["reply"].as_str().unwrap().contains("Paris"), "{run}");
    assert!(run["usage"]["inputTokens"].as_u64().unwrap() > 0);
    let trace = PathBuf::from(run["trace"].as_str().unwrap());
    assert!(trace.starts_with(dir.join(".bdk/traces")));
    let (code, again) = run_json(bdk().arg("trajectory").arg("--events").arg(&trace));
    assert_eq!(code, 0);
    assert_eq!(
        again, run,
        "trajectory must print the same shape and values as run"
    );

    // Continue the same session.
    let id = run["sessionId"].as_str().unwrap();
    let (code, second) = run_json(bdk().args(["run", "--dir"]).arg(&dir).args([
        "--session",
        id,
        "--message",
        "Tell me about the climate history of Oslo",
    ]));
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["sessionId"], id);
    assert_eq!(second["turns"], 2);
    assert_eq!(second["subagents"][0]["name"], "climate");

    // The session is listed and inspectable.
    let (code, list) = run_json(bdk().args(["sessions", "--json", "--dir"]).arg(&dir));
    assert_eq!(code, 0);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["status"], "waiting");
    let (code, one) = run_json(bdk().args(["session", id, "--dir"]).arg(&dir));
    assert_eq!(code, 0);
    assert_eq!(one["trajectory"]["turns"], 2);
    let raw = bdk()
        .args(["session", id, "--events", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&raw.stdout).lines().count();
    assert_eq!(lines as u64, one["events"].as_u64().unwrap());
}

#[test]
fn run_and_call_reject_bad_arguments_with_exit_code_2() {
    let (_tmp, dir) = weather();
    for as_of in ["yesterday", "2026-01-15T09:00:00"] {
        let out = bdk()
            .args(["run", "--dir"])
            .arg(&dir)
            .args(["--message", "hi", "--as-of", as_of])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{as_of}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));
    }
    let out = bdk()
        .args(["run", "--dir"])
        .arg(&dir)
        .args(["--message", "hi", "--session", "../../etc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bdk()
        .args(["call", "get_weather", "--dir"])
        .arg(&dir)
        .args(["--input", "{not json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let (code, json) = run_json(bdk().args(["call", "nope", "--dir"]).arg(&dir));
    assert_eq!(code, 1);
    assert_eq!(json["error"], "unknown_tool");
    let (code, json) = run_json(
        bdk()
            .args(["call", "get_weather", "--dir"])
            .arg(&dir)
            .args(["--input", r#"{"city":"Paris"}"#]),
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["ok"], true);
    assert_eq!(json["toolName"], "get_weather");
    assert_eq!(json["isError"], false);
    assert!(
        json["callId"]
            .as_str()
            .unwrap()
            .starts_with("tool_get_weather_")
    );
    // A session that does not exist.
    let (code, json) = run_json(
        bdk()
            .args(["call", "get_weather", "--dir"])
            .arg(&dir)
            .args([
                "--input",
                r#"{"city":"Paris"}"#,
                "--session",
                "ses_01m8px1kfzex9azj4pwsf3g2e5",
            ]),
    );
    assert_eq!(code, 1);
    assert_eq!(json["error"], "session_not_found");
    // A project with errors does not run.
    let broken = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(broken.path().join("agent")).unwrap();
    let out = bdk()
        .args(["run", "--dir"])
        .arg(broken.path())
        .args(["--message", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn trajectory_tolerates_a_torn_tail_and_refuses_corruption() {
    let (_tmp, dir) = weather();
    let (_, run) = run_json(
        bdk()
            .args(["run", "--dir"])
            .arg(&dir)
            .args(["--message", "What's the weather in Rome?"]),
    );
    let trace = PathBuf::from(run["trace"].as_str().unwrap());
    let mut bytes = std::fs::read(&trace).unwrap();
    let torn = trace.with_file_name("torn.ndjson");
    let mut torn_bytes = bytes.clone();
    torn_bytes.extend_from_slice(b"{\"type\":\"turn.sta");
    std::fs::write(&torn, torn_bytes).unwrap();
    let out = bdk()
        .arg("trajectory")
        .arg("--events")
        .arg(&torn)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unfinished line"));
    let corrupt = trace.with_file_name("corrupt.ndjson");
    bytes.splice(0..0, b"garbage\n".iter().copied());
    std::fs::write(&corrupt, bytes).unwrap();
    let out = bdk()
        .arg("trajectory")
        .arg("--events")
        .arg(&corrupt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

/// Waits (polling: another process writes the file) until `path` holds an
/// event of `kind`.
fn wait_for_event(path: &Path, kind: &str) {
    let line = format!("\"type\":\"{kind}\"");
    poll::blocking_until(&format!("{kind} in {}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|text| text.lines().any(|l| l.contains(&line)))
    });
}

#[test]
fn kill_dash_nine_mid_turn_then_reopen_keeps_indices_gapless_and_fails_the_turn() {
    let (_tmp, dir) = weather();
    let mut child = bdk()
        .args(["run", "--dir"])
        .arg(&dir)
        .args(["--message", "Please be slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sessions = dir.join(".bdk/sessions");
    let events = poll::blocking_until_some("a session", PATIENCE, || {
        let entry = std::fs::read_dir(&sessions).ok()?.next()?;
        Some(entry.unwrap().path().join("events.ndjson"))
    });
    wait_for_event(&events, "step.started");

    // While the slow turn holds the state root, a second writer is refused.
    let out = bdk()
        .args(["call", "get_weather", "--dir"])
        .arg(&dir)
        .args(["--input", r#"{"city":"Oslo"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another bdk process"));

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let id = events
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    // Reopening the state root records the interrupted turn; the session goes on.
    let (code, run) = run_json(bdk().args(["run", "--dir"]).arg(&dir).args([
        "--session",
        &id,
        "--message",
        "What's the weather in Paris?",
    ]));
    assert_eq!(code, 0, "{run}");
    let all = read_events(&events);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e["index"], i as u64, "gapless");
    }
    let failed: Vec<&Value> = all.iter().filter(|e| e["type"] == "turn.failed").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["data"]["status"], "interrupted");
    assert_eq!(
        all.iter().filter(|e| e["type"] == "turn.completed").count(),
        1
    );
}

#[test]
fn init_scaffolds_a_project_that_validates_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-agent");
    let out = bdk().arg("init").arg(&dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bdk().arg("validate").arg(&dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (code, run) = run_json(
        bdk()
            .args(["run", "--dir"])
            .arg(&dir)
            .args(["--message", "What's the weather in Lima?"]),
    );
    assert_eq!(code, 0, "{run}");
    // A second init into the now non-empty directory is a usage error
    // (exit 2) that writes nothing.
    let before = std::fs::read_dir(&dir).unwrap().count();
    let out = bdk().arg("init").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), before);
}

/// A reader that closes the pipe early (`bdk sessions | head -2`) ends the
/// command quietly with the exit code it would have had: no panic, no
/// "Broken pipe" on stderr.
#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent-project");
    assert_eq!(
        bdk().arg("init").arg(&dir).status().unwrap().code(),
        Some(0)
    );
    let d = dir.to_str().unwrap();
    let (_, run) = run_json(bdk().args(["run", "--dir", d, "--message", "Weather in Paris?"]));
    let session = run["sessionId"].as_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["validate", d], 0),
        (vec!["validate", "--json", d], 0),
        (vec!["info", d], 0),
        (vec!["info", "--json", d], 0),
        (vec!["sessions", "--dir", d], 0),
        (vec!["session", "--dir", d, &session], 0),
        (vec!["run", "--dir", d, "--message", "Weather in Oslo?"], 0),
        (
            vec![
                "call",
                "--dir",
                d,
                "get_weather",
                "--input",
                r#"{"city":"Rome"}"#,
            ],
            0,
        ),
        (vec!["cost", "--dir", d], 0),
        (vec!["validate", "/nonexistent/bdk-project"], 2),
    ];
    for (args, expected) in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = bdk()
            .args(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(expected), "bdk {args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "bdk {args:?}: {stderr}"
        );
    }
}

/// A tool gets the environment allowlist and what its manifest names, never
/// the rest of the server's environment: not the store URL (database
/// credentials), not the bearer token, not a variable nobody declared.
#[test]
fn tools_get_only_the_environment_they_declare() {
    let (_tmp, dir) = weather();
    let tools = dir.join("agent/tools");
    std::fs::write(
        tools.join("env_probe.py"),
        "import json, os, sys\nsys.stdin.readline()\n\
         names = ['BDK_STORE', 'BDK_BEARER_TOKEN', 'BDK_PROBE_VAR', 'BDK_DECLARED', 'PATH']\n\
         print(json.dumps({n: os.environ.get(n) for n in names}))\n",
    )
    .unwrap();
    std::fs::write(
        tools.join("env_probe.toml"),
        "description = \"Reports environment variables.\"\n\
         effect = \"read\"\ncommand = [\"python3\", \"env_probe.py\"]\n\
         env = [\"BDK_DECLARED\"]\n\
         [input_schema]\ntype = \"object\"\n",
    )
    .unwrap();
    let (code, json) = run_json(
        bdk()
            .args(["call", "env_probe", "--dir"])
            .arg(&dir)
            .args(["--input", "{}"])
            .env("BDK_STORE", "postgres://bdk:secret@db.internal/bdk")
            .env("BDK_BEARER_TOKEN", "server-secret-token")
            .env("BDK_PROBE_VAR", "undeclared")
            .env("BDK_DECLARED", "declared"),
    );
    assert_eq!(code, 0, "{json}");
    let result = &json["result"];
    assert_eq!(result["BDK_DECLARED"], "declared", "{json}");
    assert!(result["PATH"].is_string(), "{json}");
    for hidden in ["BDK_STORE", "BDK_BEARER_TOKEN", "BDK_PROBE_VAR"] {
        assert!(result[hidden].is_null(), "{hidden} leaked: {json}");
    }
}

#[test]
fn info_json_describes_channel_routes_and_tool_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "You answer.\n"),
        ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
        (
            "agent/tools/lookup.toml",
            "title = \"Look up\"\ndescription = \"Looks things up.\"\neffect = \"read\"\ncommand = [\"true\"]\n[input_schema]\ntype = \"object\"\n",
        ),
        (
            "agent/channels/inbox.toml",
            "description = \"Mail in.\"\n[[routes]]\nmethod = \"POST\"\npath = \"/\"\ndescription = \"A new message.\"\nmessage = \"{{ body.text }}\"\n[routes.body_schema]\ntype = \"object\"\nrequired = [\"text\"]\nproperties = { text = { type = \"string\" } }\n\n[[routes]]\nmethod = \"GET\"\npath = \"/status\"\nmode = \"task\"\nmessage = \"status\"\n",
        ),
    ];
    bdk_testkit::write_files(tmp.path(), &files);
    let (code, info) = run_json(bdk().args(["info", "--json"]).arg(tmp.path()));
    assert_eq!(code, 0, "{info}");
    let tool = &info["tools"][0];
    assert_eq!(tool["name"], "lookup", "{info}");
    assert_eq!(tool["title"], "Look up", "{info}");
    assert_eq!(tool["source"], "manifest", "{info}");
    let channel = &info["channels"][0];
    assert_eq!(channel["description"], "Mail in.", "{info}");
    assert_eq!(
        channel["routes"],
        serde_json::json!([
            {
                "method": "POST",
                "path": "/",
                "fullPath": "/v1/channels/inbox",
                "description": "A new message.",
                "mode": "chat",
                "bodySchema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
                "querySchema": null,
            },
            {
                "method": "GET",
                "path": "/status",
                "fullPath": "/v1/channels/inbox/status",
                "description": null,
                "mode": "task",
                "bodySchema": null,
                "querySchema": null,
            },
        ]),
        "{info}"
    );
    // The text listing (on a terminal) keeps its one line per channel.
    let text = common::on_a_terminal(&["info", tmp.path().to_str().unwrap()], tmp.path());
    assert!(text.contains("inbox POST /, GET /status"), "{text}");
}

/// Issue 43, item 4: every namespace the server keeps state in is refused
/// to a tool of a host `bdk` builds, also those of parts the agent does not
/// run (the weather example has no GitHub or Slack channel), since every
/// host of an agent shares its store; docs/tools.md lists each of them.
#[test]
fn the_servers_namespaces_are_refused_to_tools_of_every_host() {
    let (_tmp, dir) = weather();
    let tools = dir.join("agent/tools");
    std::fs::write(tools.join("client.py"), bdk_testkit::endpoint::CLIENT_PY).unwrap();
    std::fs::write(
        tools.join("client.toml"),
        bdk_testkit::endpoint::CLIENT_TOML,
    )
    .unwrap();
    let reserved: Vec<&str> = bdk_core::host::CORE_NAMESPACES
        .iter()
        .chain(bdk_scheduler::reminders::NAMESPACES)
        .chain(&[bdk_scheduler::status::CLAIMS_NAMESPACE])
        .chain(bdk_github::NAMESPACES)
        .chain(bdk_slack::NAMESPACES)
        .chain(&[bdk_evals::history::RUNS_NAMESPACE])
        .copied()
        .collect();
    let requests: Vec<Value> = reserved
        .iter()
        .chain(&["lookups"])
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .collect();
    let (code, json) = run_json(
        bdk()
            .args(["call", "client", "--dir"])
            .arg(&dir)
            .arg("--input")
            .arg(serde_json::json!({ "requests": requests }).to_string()),
    );
    assert_eq!(code, 0, "{json}");
    let answers = json["result"]["answers"].as_array().unwrap();
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/tools.md"))
            .unwrap();
    for (n, namespace) in reserved.iter().enumerate() {
        bdk_testkit::endpoint::assert_reserved(&answers[n * 4..n * 4 + 4], namespace);
        assert!(
            docs.contains(&format!("| `{namespace}`"))
                || docs.contains(&format!(", `{namespace}`")),
            "docs/tools.md does not list `{namespace}`"
        );
    }
    for answer in &answers[reserved.len() * 4..] {
        assert_eq!(answer["ok"], true, "{answer}");
    }
}
