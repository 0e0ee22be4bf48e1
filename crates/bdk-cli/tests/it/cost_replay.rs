#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk run --record`, the `replay/` model and `bdk cost` through the real
//! binary, on a private copy of the weather example.

use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

use crate::common;
use common::{run_json, weather};

const TURN1: &str = "What's the weather in Paris?";
const TURN2: &str = "Tell me about the climate history of Oslo";

fn bdk() -> Command {
    let mut c = Command::cargo_bin("bdk").unwrap();
    c.env_remove("BDK_STATE_ROOT");
    c
}

/// `bdk run` in `dir` with its state under `state`.
fn run(
    dir: &Path,
    state: &Path,
    message: &str,
    session: Option<&str>,
    record: Option<&Path>,
) -> (i32, Value) {
    let mut c = bdk();
    c.arg("run")
        .arg("--dir")
        .arg(dir)
        .arg("--state-root")
        .arg(state)
        .arg("-m")
        .arg(message);
    if let Some(s) = session {
        c.arg("--session").arg(s);
    }
    if let Some(r) = record {
        c.arg("--record").arg(r);
    }
    run_json(&mut c)
}

fn set_agent_toml(dir: &Path, f: impl FnOnce(String) -> String) {
    let path = dir.join("agent/agent.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, f(text)).unwrap();
}

fn with_model(text: String, model: &str) -> String {
    let re = regex_lite(&text);
    format!("{}model = \"{model}\"{}", &text[..re.0], &text[re.1..])
}

/// Byte range of the root `model = "..."` line's content.
fn regex_lite(text: &str) -> (usize, usize) {
    let start = text.find("\nmodel = \"").unwrap() + 1;
    let end = start + text[start..].find('\n').unwrap();
    (start, end)
}

/// The parts of a `run` summary that must not depend on the run: reply,
/// status, usage, model, tool calls (without durations), subagents.
fn essence(summary: &Value) -> Value {
    let mut calls = summary["toolCalls"].clone();
    for c in calls.as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("durationMs");
    }
    serde_json::json!({
        "ok": summary["ok"],
        "status": summary["status"],
        "reply": summary["reply"],
        "usage": summary["usage"],
        "model": summary["model"],
        "toolCalls": calls,
        "subagents": summary["subagents"],
    })
}

#[test]
fn run_records_replay_reproduces_and_cost_reports() {
    let (tmp, dir) = weather();
    let state = tmp.path().join("state");
    let recording = dir.join("agent/recordings/weather.jsonl");

    // Record two turns, one `bdk run` each; the second appends.
    let (code, first) = run(&dir, &state, TURN1, None, Some(&recording));
    assert_eq!(code, 0, "{first:#}");
    assert_eq!(first["recording"]["steps"], 2, "{first:#}");
    assert_eq!(first["recording"]["recordedNow"], 2);
    assert_eq!(first["toolCalls"][0]["name"], "get_weather");
    let session = first["sessionId"].as_str().unwrap().to_owned();
    let (code, second) = run(&dir, &state, TURN2, Some(&session), Some(&recording));
    assert_eq!(code, 0, "{second:#}");
    assert_eq!(second["recording"]["steps"], 5, "{second:#}");
    assert_eq!(second["recording"]["recordedNow"], 3);

    // Replay both turns with `model = "replay/<file>"` over a fresh state
    // root: the same tool calls (ids included), replies and usage.
    set_agent_toml(&dir, |t| with_model(t, "replay/recordings/weather.jsonl"));
    let replay_state = tmp.path().join("replay-state");
    let (code, r1) = run(&dir, &replay_state, TURN1, None, None);
    assert_eq!(code, 0, "{r1:#}");
    assert_eq!(essence(&r1), essence(&first));
    assert_eq!(
        r1["toolCalls"][0]["callId"],
        first["toolCalls"][0]["callId"]
    );
    let replay_session = r1["sessionId"].as_str().unwrap().to_owned();
    let (code, r2) = run(&dir, &replay_state, TURN2, Some(&replay_session), None);
    assert_eq!(code, 0, "{r2:#}");
    assert_eq!(essence(&r2), essence(&second));

    // A conversation that goes another way fails loudly, naming the step.
    let (code, bad) = run(
        &dir,
        &tmp.path().join("bad-state"),
        "What's the weather in Rome?",
        None,
        None,
    );
    assert_eq!(code, 1, "{bad:#}");
    let error = bad["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("step 1 does not match the recording: `messages[0].text` differs"),
        "{bad:#}"
    );

    // `bdk cost`: one session of two turns on the free scripted model.
    let (code, cost) = run_json(
        bdk()
            .arg("cost")
            .arg("--dir")
            .arg(&dir)
            .arg("--state-root")
            .arg(&state)
            .arg("--json"),
    );
    assert_eq!(code, 0, "{cost:#}");
    assert_eq!(cost["totals"]["sessions"], 1);
    assert_eq!(cost["totals"]["turns"], 2);
    assert_eq!(cost["totals"]["estimatedCostUsd"], 0.0);
    let turns = cost["sessions"][0]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert!(
        turns
            .iter()
            .all(|t| t["model"] == "scripted/default" && t["estimatedCostUsd"] == 0.0)
    );
    let input: u64 = turns
        .iter()
        .map(|t| t["usage"]["inputTokens"].as_u64().unwrap())
        .sum();
    let output: u64 = turns
        .iter()
        .map(|t| t["usage"]["outputTokens"].as_u64().unwrap())
        .sum();
    assert!(input > 0 && output > 0, "{cost:#}");
    assert_eq!(cost["totals"]["usage"]["inputTokens"], input);
    assert_eq!(
        cost["sessions"][0]["totals"]["usage"]["outputTokens"],
        output
    );
    assert_eq!(cost["unpricedModels"], serde_json::json!([]));

    // Prices in agent.toml override the table (here: pricing the offline
    // model, through its wildcard key).
    set_agent_toml(&dir, |t| {
        format!("{t}\n[prices.\"scripted/*\"]\ninput = 1000.0\noutput = 2000\n")
    });
    let (code, priced) = run_json(
        bdk()
            .arg("cost")
            .arg("--dir")
            .arg(&dir)
            .arg("--state-root")
            .arg(&state)
            .arg("--session")
            .arg(&session)
            .arg("--json"),
    );
    assert_eq!(code, 0, "{priced:#}");
    let expected = input as f64 * 1000.0 / 1e6 + output as f64 * 2000.0 / 1e6;
    let got = priced["totals"]["estimatedCostUsd"].as_f64().unwrap();
    assert!((got - expected).abs() < 1e-9, "{got} != {expected}");

    // Human output: one line per turn, session and grand totals.
    let out = bdk()
        .arg("cost")
        .arg("--dir")
        .arg(&dir)
        .arg("--state-root")
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(&format!("{session} (2 turn(s))")), "{text}");
    assert_eq!(text.matches(" completed ").count(), 2, "{text}");
    assert!(text.contains("total: 1 session(s), 2 turn(s)"), "{text}");
    assert!(text.contains(&format!("${expected:.6}")), "{text}");
    assert!(
        text.contains("verify them before relying on the estimate"),
        "{text}"
    );
}

#[test]
fn cost_of_an_unpriced_model_is_null_and_named() {
    let (tmp, dir) = weather();
    let recording = dir.join("agent/recordings/rec.jsonl");
    let (code, first) = run(
        &dir,
        &tmp.path().join("rec-state"),
        TURN1,
        None,
        Some(&recording),
    );
    assert_eq!(code, 0, "{first:#}");
    // The same steps, as if an unpriced model had answered them: the replay
    // reports the recorded model, so its turns are priced as that model.
    let text = std::fs::read_to_string(&recording).unwrap();
    std::fs::write(
        &recording,
        text.replace(
            "\"model\":\"scripted/default\"",
            "\"model\":\"acme/secret-model\"",
        ),
    )
    .unwrap();
    set_agent_toml(&dir, |t| with_model(t, "replay/recordings/rec.jsonl"));
    let state = tmp.path().join("state");
    let (code, r) = run(&dir, &state, TURN1, None, None);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["model"], "acme/secret-model");

    let (code, cost) = run_json(
        bdk()
            .arg("cost")
            .arg("--dir")
            .arg(&dir)
            .arg("--state-root")
            .arg(&state)
            .arg("--json"),
    );
    assert_eq!(code, 0, "{cost:#}");
    assert!(
        cost["sessions"][0]["turns"][0]["estimatedCostUsd"].is_null(),
        "{cost:#}"
    );
    assert!(cost["totals"]["estimatedCostUsd"].is_null(), "{cost:#}");
    assert_eq!(
        cost["unpricedModels"],
        serde_json::json!(["acme/secret-model"])
    );
    assert!(cost["totals"]["usage"]["inputTokens"].as_u64().unwrap() > 0);

    let out = bdk()
        .arg("cost")
        .arg("--dir")
        .arg(&dir)
        .arg("--state-root")
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cost unknown"), "{text}");
    assert!(text.contains("no price for: acme/secret-model"), "{text}");

    // An unknown session is a clear error.
    let (code, missing) = run_json(
        bdk()
            .arg("cost")
            .arg("--dir")
            .arg(&dir)
            .arg("--state-root")
            .arg(&state)
            .arg("--session")
            .arg("ses_00000000000000000000000000")
            .arg("--json"),
    );
    assert_eq!(code, 1, "{missing:#}");
    assert_eq!(missing["error"], "session_not_found");
}

#[test]
fn price_overrides_are_validated() {
    let (_tmp, dir) = weather();
    set_agent_toml(&dir, |t| {
        format!(
            "{t}\n[prices.\"xai/grok-4.3\"]\ninput = -1\noutput = 2.0\ncache_reed = 0.1\n\n[prices.\"no-slash\"]\ninput = 1\noutput = 1\n\n[prices.\"acme/big\"]\ninput = 1\n"
        )
    });
    let (code, v) = run_json(bdk().arg("validate").arg(&dir).arg("--json"));
    assert_eq!(code, 2, "{v:#}");
    let messages: Vec<String> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}: {}",
                d["severity"].as_str().unwrap(),
                d["message"].as_str().unwrap()
            )
        })
        .collect();
    let has = |needle: &str| messages.iter().any(|m| m.contains(needle));
    assert!(
        has("error: `prices.\"xai/grok-4.3\".input` must be a non-negative number"),
        "{messages:#?}"
    );
    assert!(
        has("warning: unknown key `prices.\"xai/grok-4.3\".cache_reed`"),
        "{messages:#?}"
    );
    assert!(
        has("error: `[prices.\"no-slash\"]` must name a model"),
        "{messages:#?}"
    );
    assert!(
        has("error: `[prices.\"acme/big\"]` needs both `input` and `output`"),
        "{messages:#?}"
    );
}

#[test]
fn record_refuses_a_file_that_is_not_a_recording() {
    let (tmp, dir) = weather();
    let not_a_recording = dir.join("agent/instructions.md");
    let before = std::fs::read_to_string(&not_a_recording).unwrap();
    let out = bdk()
        .arg("run")
        .arg("--dir")
        .arg(&dir)
        .arg("--state-root")
        .arg(tmp.path().join("state"))
        .arg("-m")
        .arg(TURN1)
        .arg("--record")
        .arg(&not_a_recording)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--record: invalid request: cannot record model steps:")
            && stderr.contains("not a recording header"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&not_a_recording).unwrap(),
        before,
        "the file is left alone"
    );
}
