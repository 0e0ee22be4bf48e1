#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The context budget through the host: model requests are fitted to the
//! configured window (observed through a recording of every step), while
//! the durable session keeps the whole conversation, also after a restart.

use std::path::Path;
use std::sync::Arc;

use bdk_core::host::{FollowUp, Host, StartSession};
use bdk_core::tool::ToolContext;
use bdk_core::tool::native::native_tool;
use bdk_core::{Project, discover};
use bdk_events::{Event, SessionId};
use bdk_models::Message;
use bdk_models::context::{budget_for, estimate_tokens, omitted_notice};
use bdk_models::replay::{RecordedStep, parse_recording};
use bdk_store::{FsStore, Store};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tempfile::TempDir;

const WINDOW: u64 = 4_000;

const RULES: &str = r#"
[[rules]]
user_contains = "fetch"
tool_calls = [{ name = "fetch", input = {} }]

[[rules]]
tool_result = "fetch"
reply = "Fetched."

[[rules]]
reply = "Noted."
"#;

fn project(dir: &TempDir, extra_config: &str) -> Project {
    let files = [
        (
            "agent/agent.toml",
            format!(
                "model = \"scripted\"\ncontext_window = {WINDOW}\n{extra_config}\n[builtin_tools]\nworkspace = false\nartifacts = false\n"
            ),
        ),
        ("agent/instructions.md", "You keep notes.\n".to_owned()),
        ("agent/scripted.toml", RULES.to_owned()),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    d.project.unwrap()
}

#[derive(Deserialize, JsonSchema)]
struct NoInput {}

async fn host(project: Project, root: &Path, recording: &Path) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(root).unwrap());
    let fetch = native_tool(
        "fetch",
        "returns a very large document",
        |_: NoInput, _ctx: ToolContext| async move { Ok(json!("D".repeat(60_000))) },
    );
    Host::builder(project, store)
        .tool(Arc::new(fetch))
        .record_to(recording)
        .build()
        .await
        .unwrap()
}

async fn turn(host: &Host, id: Option<&SessionId>, message: String) -> SessionId {
    match id {
        None => {
            let s = host
                .start_session(StartSession {
                    message: Some(message),
                    ..StartSession::default()
                })
                .await
                .unwrap();
            let r = host
                .wait_turn(&s.session_id, &s.turn_id.unwrap())
                .await
                .unwrap();
            assert!(r.ok, "{r:?}");
            host.wait_idle(&s.session_id).await;
            s.session_id
        }
        Some(id) => {
            let s = host
                .send(
                    id,
                    FollowUp {
                        message,
                        ..FollowUp::default()
                    },
                )
                .await
                .unwrap();
            let r = host.wait_turn(id, &s.turn_id.unwrap()).await.unwrap();
            assert!(r.ok, "{r:?}");
            host.wait_idle(id).await;
            id.clone()
        }
    }
}

fn steps(path: &Path) -> Vec<RecordedStep> {
    parse_recording(&std::fs::read_to_string(path).unwrap(), path)
        .unwrap()
        .steps
}

fn size(step: &RecordedStep) -> u64 {
    estimate_tokens(
        &step.request.system,
        &step.request.tools,
        &step.request.messages,
    )
}

/// A long note of about 750 tokens: three fit the budget, four do not.
fn note(i: usize) -> String {
    format!("note {i}: {}", "lorem ipsum ".repeat(250))
}

#[tokio::test]
async fn long_conversations_are_trimmed_per_request_and_kept_in_full_in_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let recording = dir.path().join("steps.jsonl");
    let budget = budget_for(WINDOW);

    let h = host(project(&dir, ""), &state, &recording).await;
    let mut id = turn(&h, None, note(0)).await;
    for i in 1..5 {
        id = turn(&h, Some(&id), note(i)).await;
    }
    h.shutdown(std::time::Duration::from_secs(5)).await;
    drop(h);

    let recorded = steps(&recording);
    assert_eq!(recorded.len(), 5);
    // The first request fits as it is; later ones would not, so older
    // turns are replaced by the notice and the latest note is always there.
    assert_eq!(recorded[0].request.messages.len(), 1);
    for (i, s) in recorded.iter().enumerate() {
        assert!(size(s) <= budget, "step {}: {} > {budget}", i + 1, size(s));
        let last = s.request.messages.last().unwrap();
        assert_eq!(last, &Message::User { text: note(i) }, "step {}", i + 1);
    }
    let Message::User { text } = &recorded[4].request.messages[0] else {
        panic!("{:?}", recorded[4].request.messages[0]);
    };
    let omitted: usize = (1..5).find(|n| *text == omitted_notice(*n)).unwrap();
    assert_eq!(omitted, 2, "notes 2, 3 and 4 fit");
    // Turns are dropped whole: notice, then (note, reply) pairs, then the
    // latest note.
    assert_eq!(
        recorded[4].request.messages.len(),
        1 + (4 - omitted) * 2 + 1
    );

    // The session keeps everything, and a restarted host continues from
    // the durable stream with the same policy.
    let h = host(project(&dir, ""), &state, &recording).await;
    let events = h.events(&id, 0, None).await.unwrap();
    let received = events
        .iter()
        .filter(|e| matches!(e.event, Event::MessageReceived(_)))
        .count();
    assert_eq!(received, 5);
    turn(&h, Some(&id), note(5)).await;
    h.shutdown(std::time::Duration::from_secs(5)).await;
    let recorded = steps(&recording);
    assert_eq!(recorded.len(), 6);
    let after = &recorded[5];
    assert!(size(after) <= budget);
    assert!(
        matches!(&after.request.messages[0], Message::User { text } if text.contains("earlier turns omitted"))
    );
    assert_eq!(
        after.request.messages.last().unwrap(),
        &Message::User { text: note(5) }
    );
}

#[tokio::test]
async fn an_oversized_tool_result_in_the_current_turn_is_truncated_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let recording = dir.path().join("steps.jsonl");
    let h = host(project(&dir, ""), &state, &recording).await;
    let id = turn(&h, None, "please fetch the document".into()).await;
    let events = h.events(&id, 0, None).await.unwrap();
    h.shutdown(std::time::Duration::from_secs(5)).await;

    // The session records the full result...
    let full = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ActionResult(r) => Some(r.output.as_str().unwrap().len()),
            _ => None,
        })
        .unwrap();
    assert_eq!(full, 60_000);
    // ...while the model saw it cut to fit, with a marker saying so.
    let recorded = steps(&recording);
    assert_eq!(recorded.len(), 2);
    let second = &recorded[1].request.messages;
    assert_eq!(
        second.len(),
        3,
        "user, call, result: the current turn is kept"
    );
    let Message::Tool { content, .. } = &second[2] else {
        panic!("{second:?}");
    };
    assert!(content.starts_with("DDDD"));
    assert!(content.len() < 60_000);
    assert!(
        content.ends_with("of 60000 characters omitted to fit the context window]"),
        "{}",
        &content[content.len() - 100..]
    );
    assert!(size(&recorded[1]) <= budget_for(WINDOW));
}

#[test]
fn context_window_must_be_a_positive_integer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agent")).unwrap();
    std::fs::write(dir.path().join("agent/instructions.md"), "x\n").unwrap();
    for (value, ok) in [
        ("128000", true),
        ("0", false),
        ("\"big\"", false),
        ("-5", false),
    ] {
        std::fs::write(
            dir.path().join("agent/agent.toml"),
            format!("context_window = {value}\n"),
        )
        .unwrap();
        let d = discover(dir.path());
        assert_eq!(!d.has_errors(), ok, "{value}: {:#?}", d.diagnostics);
        if ok {
            assert_eq!(d.project.unwrap().config.context_window, Some(128_000));
        } else {
            assert!(
                d.diagnostics
                    .iter()
                    .any(|x| x.message.contains("context_window")),
                "{:#?}",
                d.diagnostics
            );
        }
    }
}
