#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Record and replay end to end: the weather example runs two turns on the
//! scripted model (a tool call, then a delegation to the climate subagent)
//! with every model step recorded; the same conversation is then replayed
//! with `model = "replay/<file>"` over a fresh state root, and the two event
//! streams must be identical.
//!
//! Normalized before comparing, and nothing else: the envelope's `at`
//! (timestamps), `sessionId` and `turnId` (generated per run), and every
//! `durationMs` (wall-clock). Delivery ids are passed in by the test, so
//! they need no normalizing; tool call ids come from the recording, so they
//! must match exactly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdk_core::host::{FollowUp, Host, StartSession, TurnResult};
use bdk_core::{Project, discover};
use bdk_events::{Envelope, SessionId};
use bdk_models::replay::{FORMAT_NAME, FORMAT_VERSION, parse_recording};
use bdk_store::{FsStore, Store};
use serde_json::Value;
use tempfile::TempDir;

const TURNS: [&str; 2] = [
    "What's the weather in Paris?",
    "Tell me about the climate history of Oslo",
];
const RECORDING: &str = "recordings/weather.jsonl";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".bdk" || name == "__pycache__" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A private copy of the weather example.
fn weather() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("weather");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather"),
        &dir,
    );
    (tmp, dir)
}

fn load(dir: &Path) -> Project {
    let d = discover(dir);
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    d.project.unwrap()
}

/// Points the example's root agent at `model`.
fn set_model(dir: &Path, model: &str) {
    let path = dir.join("agent/agent.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = regex::Regex::new(r#"(?m)^model = ".*"$"#).unwrap();
    assert!(line.is_match(&text), "{text}");
    let text = line.replace(&text, format!("model = \"{model}\"").as_str());
    std::fs::write(&path, text.as_ref()).unwrap();
}

async fn host(project: Project, root: &Path, record: Option<PathBuf>) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(root).unwrap());
    let mut b = Host::builder(project, store);
    if let Some(path) = record {
        b = b.record_to(path);
    }
    b.build().await.unwrap()
}

/// Runs `messages` as consecutive turns of one chat session, with fixed
/// delivery ids, and returns the session and each turn's result.
async fn converse(host: &Host, messages: &[&str]) -> (SessionId, Vec<TurnResult>) {
    let started = host
        .start_session(StartSession {
            message: Some(messages[0].to_owned()),
            channel: "test".into(),
            delivery_id: Some("dlv_test_1".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let id = started.session_id;
    let mut results = vec![
        host.wait_turn(&id, &started.turn_id.unwrap())
            .await
            .unwrap(),
    ];
    for (i, m) in messages.iter().enumerate().skip(1) {
        let sent = host
            .send(
                &id,
                FollowUp {
                    message: (*m).to_owned(),
                    delivery_id: Some(format!("dlv_test_{}", i + 1)),
                    ..FollowUp::default()
                },
            )
            .await
            .unwrap();
        results.push(host.wait_turn(&id, &sent.turn_id.unwrap()).await.unwrap());
    }
    host.wait_idle(&id).await;
    (id, results)
}

fn zero_durations(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k == "durationMs" {
                    *child = Value::from(0);
                } else {
                    zero_durations(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(zero_durations),
        _ => {}
    }
}

/// The stream with the normalized fields (module doc) blanked.
fn normalized(events: &[Envelope]) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap();
            let map = v.as_object_mut().unwrap();
            map.remove("at");
            map.remove("sessionId");
            if map.contains_key("turnId") {
                map.insert("turnId".into(), Value::from("<turn>"));
            }
            zero_durations(&mut v);
            v
        })
        .collect()
}

/// Also renames tool call ids to their order of appearance, for comparing
/// runs whose ids were generated independently.
fn without_call_ids(events: &[Value]) -> Vec<Value> {
    let mut text = serde_json::to_string(events).unwrap();
    let re = regex::Regex::new(r"call_[A-Za-z0-9_-]+").unwrap();
    let mut seen: Vec<String> = Vec::new();
    for m in re.find_iter(&text.clone()) {
        if !seen.iter().any(|s| s == m.as_str()) {
            seen.push(m.as_str().to_owned());
        }
    }
    for (i, id) in seen.iter().enumerate() {
        text = text.replace(id, &format!("<call {i}>"));
    }
    serde_json::from_str(&text).unwrap()
}

fn assert_same(a: &[Value], b: &[Value]) {
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        assert_eq!(x, y, "event {i} differs");
    }
    assert_eq!(a.len(), b.len(), "stream lengths differ");
}

#[tokio::test]
async fn a_recorded_session_replays_to_an_identical_event_stream() {
    let (tmp, dir) = weather();
    let recording = dir.join("agent").join(RECORDING);

    // Record.
    let recorder = host(
        load(&dir),
        &tmp.path().join("state-rec"),
        Some(recording.clone()),
    )
    .await;
    let (rec_id, rec_results) = converse(&recorder, &TURNS).await;
    assert!(rec_results.iter().all(|r| r.ok), "{rec_results:#?}");
    assert!(rec_results[0].reply.contains("in Paris (simulated data)"));
    assert!(
        rec_results[1]
            .reply
            .starts_with("From the climate subagent:")
    );
    let recorded_events = recorder.store().read(&rec_id, 0).await.unwrap();
    assert!(recorded_events.len() > 30, "{}", recorded_events.len());
    assert_eq!(recorder.recording().unwrap().steps().await, 5);
    recorder.shutdown(std::time::Duration::from_secs(5)).await;
    drop(recorder);

    // The file: a versioned header, then one line per step (two steps for
    // the weather turn; root, subagent and root again for the climate one).
    let text = std::fs::read_to_string(&recording).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["version"], FORMAT_VERSION);
    assert_eq!(first["format"], FORMAT_NAME);
    let parsed = parse_recording(&text, &recording).unwrap();
    assert_eq!(parsed.steps.len(), 5);
    assert_eq!(
        parsed.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert!(parsed.steps.iter().all(|s| s.model == "scripted/default"));
    let step1: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(step1["request"]["messages"][0]["text"], TURNS[0]);
    assert!(
        step1["request"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "get_weather")
    );
    let kinds: Vec<&str> = step1["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "tool_call", "usage", "stop"]);
    let call_id = step1["events"][1]["id"].as_str().unwrap();
    assert!(
        recorded_events
            .iter()
            .any(|e| e.to_line().unwrap().contains(call_id)),
        "the recorded call id is the one the session used"
    );

    // Replay over a fresh state root.
    set_model(&dir, &format!("replay/{RECORDING}"));
    let replayer = host(load(&dir), &tmp.path().join("state-replay"), None).await;
    assert_eq!(
        replayer.model_id(),
        "scripted/default",
        "a replay reports the recorded model"
    );
    let (rep_id, rep_results) = converse(&replayer, &TURNS).await;
    assert!(rep_results.iter().all(|r| r.ok), "{rep_results:#?}");
    let replayed_events = replayer.store().read(&rep_id, 0).await.unwrap();
    assert_ne!(rec_id, rep_id);
    assert_same(&normalized(&recorded_events), &normalized(&replayed_events));
    assert_eq!(
        rec_results
            .iter()
            .map(|r| (&r.reply, r.usage))
            .collect::<Vec<_>>(),
        rep_results
            .iter()
            .map(|r| (&r.reply, r.usage))
            .collect::<Vec<_>>()
    );

    // One more turn goes past the end of the recording: a loud failure.
    let sent = replayer
        .send(
            &rep_id,
            FollowUp {
                message: "What's the weather in Rome?".into(),
                ..FollowUp::default()
            },
        )
        .await
        .unwrap();
    let past = replayer
        .wait_turn(&rep_id, &sent.turn_id.unwrap())
        .await
        .unwrap();
    assert!(!past.ok);
    assert!(
        past.reply
            .contains("step 6 was requested, but the recording holds only 5 step(s)"),
        "{}",
        past.reply
    );
    replayer.shutdown(std::time::Duration::from_secs(5)).await;

    // Recording changes nothing: the same conversation on the plain
    // scripted model gives the same stream (its call ids are fresh, so
    // they are compared by order of appearance).
    set_model(&dir, "scripted");
    let plain = host(load(&dir), &tmp.path().join("state-plain"), None).await;
    let (plain_id, _) = converse(&plain, &TURNS).await;
    let plain_events = plain.store().read(&plain_id, 0).await.unwrap();
    assert_same(
        &without_call_ids(&normalized(&recorded_events)),
        &without_call_ids(&normalized(&plain_events)),
    );
    plain.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_replay_that_diverges_from_the_recording_fails_the_turn_naming_step_and_field() {
    let (tmp, dir) = weather();
    let recording = dir.join("agent").join(RECORDING);
    let recorder = host(load(&dir), &tmp.path().join("state-rec"), Some(recording)).await;
    let (_, results) = converse(&recorder, &TURNS).await;
    assert!(results.iter().all(|r| r.ok));
    recorder.shutdown(std::time::Duration::from_secs(5)).await;
    drop(recorder);

    set_model(&dir, &format!("replay/{RECORDING}"));
    let replayer = host(load(&dir), &tmp.path().join("state-replay"), None).await;
    // The first turn matches; the second asks something else.
    let (_, results) = converse(&replayer, &[TURNS[0], "What's the weather in Rome?"]).await;
    assert!(results[0].ok, "{:?}", results[0]);
    assert!(!results[1].ok);
    assert_eq!(
        results[1].reply,
        format!(
            "model request failed: replay of {}: step 3 does not match the recording: `messages[4].text` differs: recorded \"{}\", got \"What's the weather in Rome?\"",
            dir.join("agent").join(RECORDING).display(),
            TURNS[1]
        )
    );
    replayer.shutdown(std::time::Duration::from_secs(5)).await;

    // A missing recording is a clear turn failure too, not a startup error.
    set_model(&dir, "replay/recordings/missing.jsonl");
    let missing = host(load(&dir), &tmp.path().join("state-missing"), None).await;
    let (_, results) = converse(&missing, &[TURNS[0]]).await;
    assert!(!results[0].ok);
    assert!(
        results[0].reply.contains("cannot load its recording")
            && results[0].reply.contains("missing.jsonl"),
        "{}",
        results[0].reply
    );
    missing.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn recording_appends_to_an_existing_file_across_hosts() {
    let (tmp, dir) = weather();
    let recording = dir.join("agent").join(RECORDING);
    let state = tmp.path().join("state");
    // Two processes' worth of hosts over one state root, as with two
    // `bdk run --session` calls: the second continues the session and the
    // recording.
    let first = host(load(&dir), &state, Some(recording.clone())).await;
    let (id, results) = converse(&first, &TURNS[..1]).await;
    assert!(results[0].ok);
    first.shutdown(std::time::Duration::from_secs(5)).await;
    drop(first);
    let second = host(load(&dir), &state, Some(recording.clone())).await;
    assert_eq!(second.recording().unwrap().steps().await, 2);
    let sent = second
        .send(
            &id,
            FollowUp {
                message: TURNS[1].into(),
                ..FollowUp::default()
            },
        )
        .await
        .unwrap();
    assert!(
        second
            .wait_turn(&id, &sent.turn_id.unwrap())
            .await
            .unwrap()
            .ok
    );
    second.wait_idle(&id).await;
    second.shutdown(std::time::Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&recording).unwrap();
    let parsed = parse_recording(&text, &recording).unwrap();
    assert_eq!(parsed.steps.len(), 5);
    assert_eq!(
        text.lines().filter(|l| l.contains("\"format\"")).count(),
        1,
        "one header"
    );
    // Step 3 was asked with the whole conversation, rebuilt from the store
    // by the second host.
    assert_eq!(parsed.steps[2].request.messages.len(), 5);
}
