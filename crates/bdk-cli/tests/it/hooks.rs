#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hooks under the short-lived commands of the real `bdk` binary.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

use crate::common;
use common::{give_to_programs, weather};

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `(sessionId, index)` of every event in `events` of `session`.
fn keys(events: &[Value], session: &str) -> BTreeSet<u64> {
    events
        .iter()
        .filter(|e| e["sessionId"] == session)
        .map(|e| e["index"].as_u64().unwrap())
        .collect()
}

/// Issue 15, item 1: `bdk run` exited while its hooks still had events
/// queued (6, 9 and 7 of 9 events in three runs), and `bdk evals` logged
/// `background task failed`. Every run now delivers every event to a file
/// hook and a command hook, each with the session's context.
#[test]
fn short_lived_commands_deliver_every_event_to_their_hooks() {
    let (_tmp, dir) = weather();
    let granted = dir.join("hook-output");
    std::fs::create_dir_all(&granted).unwrap();
    give_to_programs(&granted);
    let agent_toml = dir.join("agent/agent.toml");
    let mut config = std::fs::read_to_string(&agent_toml).unwrap();
    config.push_str(&format!(
        "\n[sandbox]\nwrite = [\"{}\"]\n",
        granted.display()
    ));
    std::fs::write(&agent_toml, config).unwrap();
    std::fs::write(
        dir.join("agent/hooks/everything.toml"),
        "events = \"*\"\nfile = \"everything.ndjson\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agent/hooks/copy.toml"),
        "events = \"*\"\ncommand = [\"sh\", \"copy.sh\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agent/hooks/copy.sh"),
        format!("cat >> '{}/events.ndjson'\n", granted.display()),
    )
    .unwrap();
    let state = dir.join(".bdk");
    let bdk = |args: &[&str]| {
        let out = Command::cargo_bin("bdk")
            .unwrap()
            .args(args)
            .arg("--dir")
            .arg(&dir)
            .env_remove("BDK_STATE_ROOT")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        for bad in [
            "hooks did not finish",
            "background task failed",
            "\" failed for",
        ] {
            assert!(!stderr.contains(bad), "{stderr}");
        }
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        )
    };

    let mut sessions = Vec::new();
    for _ in 0..3 {
        let (code, stdout, stderr) = bdk(&["run", "--message", "What's the weather in Paris?"]);
        assert_eq!(code, Some(0), "{stdout} {stderr}");
        let run: Value = serde_json::from_str(&stdout).unwrap();
        let session = run["sessionId"].as_str().unwrap().to_owned();
        let recorded = lines(&state.join("sessions").join(&session).join("events.ndjson"));
        assert!(recorded.len() > 5);
        let all: BTreeSet<u64> = (0..recorded.len() as u64).collect();
        // Checked right after the process exited: nothing arrives later.
        let file = lines(&state.join("everything.ndjson"));
        let command = lines(&granted.join("events.ndjson"));
        assert_eq!(keys(&file, &session), all, "file hook");
        assert_eq!(keys(&command, &session), all, "command hook");
        for e in file
            .iter()
            .chain(&command)
            .filter(|e| e["sessionId"] == session.as_str())
        {
            assert_eq!(
                e["session"],
                serde_json::json!({"id": session, "mode": "chat", "channel": "cli"}),
                "{e}"
            );
        }
        sessions.push(session);
    }

    // `bdk evals` drains too, after its host has shut down; its sessions
    // carry purpose `eval`.
    let (code, stdout, stderr) =
        bdk(&["evals", "--filter", "weather/current-conditions", "--json"]);
    assert_eq!(code, Some(0), "{stdout} {stderr}");
    let run: Value = serde_json::from_str(&stdout).unwrap();
    let session = run["cases"][0]["iterations"][0]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let recorded = lines(&state.join("sessions").join(&session).join("events.ndjson"));
    let all: BTreeSet<u64> = (0..recorded.len() as u64).collect();
    let file = lines(&state.join("everything.ndjson"));
    assert_eq!(keys(&file, &session), all);
    let first = file
        .iter()
        .find(|e| e["sessionId"] == session.as_str())
        .unwrap();
    assert_eq!(first["session"]["purpose"], "eval", "{first}");
    assert_eq!(first["session"]["channel"], "eval", "{first}");
}
