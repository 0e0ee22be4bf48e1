#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `Host::reload`: a new version of the agent for the turns that start
//! after it, while a running turn finishes on the version it started with,
//! sessions and their streams stay, and the parts wired around the host are
//! named for a restart.

use bdk_core::host::{FollowUp, HostError};
use bdk_events::Event;
use bdk_testkit::folder::write_files;
use bdk_testkit::{AgentFolder, TestHost, session};
use futures::StreamExt;

fn rules(reply: &str, delay_ms: u64) -> String {
    format!(
        r#"
[[rules]]
user_contains = "slow"
reply = "{reply} (slow)"
delay_ms = {delay_ms}

[[rules]]
reply = "{reply}"
"#
    )
}

fn rediscover(dir: &std::path::Path) -> bdk_core::Project {
    let discovery = bdk_core::discover(dir);
    assert!(
        discovery
            .diagnostics
            .iter()
            .all(|d| d.severity != bdk_core::Severity::Error),
        "{:?}",
        discovery.diagnostics
    );
    discovery.project.unwrap()
}

#[tokio::test]
async fn the_next_turn_takes_the_new_version_and_a_running_turn_keeps_its_own() {
    let folder = AgentFolder::new()
        .instructions("Version one.\n")
        .rules(&rules("one", 1500));
    let t = TestHost::start(&folder).await;
    let host = &t.host;
    assert_eq!(host.version(), 1);
    assert!(host.system_prompt().starts_with("Version one."));

    let (started, result) = session::run(host, "hello").await;
    assert_eq!(result.reply, "one");
    let id = started.session_id.clone();

    // A stream opened before the reload stays connected across it.
    let mut stream = host.subscribe(&id, 0, None).await.unwrap();

    // A slow turn starts on version one ...
    let sent = host
        .send(
            &id,
            FollowUp {
                message: "slow one".into(),
                ..FollowUp::default()
            },
        )
        .await
        .unwrap();
    let slow_turn = sent.turn_id.unwrap();
    // The turn takes its version when it starts (before `turn.started`).
    let mut replies = Vec::new();
    loop {
        let envelope = stream.next().await.unwrap().unwrap();
        match &envelope.event {
            Event::TurnCompleted(done) => replies.push(done.reply.clone()),
            Event::TurnStarted(_) if envelope.turn_id.as_ref() == Some(&slow_turn) => break,
            _ => {}
        }
    }

    // ... and the folder changes while it runs.
    write_files(
        t.dir.path(),
        &[
            ("agent/instructions.md", "Version two.\n"),
            ("agent/scripted.toml", rules("two", 0).as_str()),
        ],
    );
    let reloaded = host.reload(rediscover(t.dir.path())).await.unwrap();
    assert_eq!(reloaded.version, 2);
    assert!(reloaded.needs_restart.is_empty(), "{reloaded:?}");
    assert_eq!(host.version(), 2);
    assert!(host.system_prompt().starts_with("Version two."));

    let slow = host.wait_turn(&id, &slow_turn).await.unwrap();
    assert_eq!(
        slow.reply, "one (slow)",
        "the running turn keeps its version"
    );

    // The next turn of the same session takes version two.
    host.wait_idle(&id).await;
    let sent = host
        .send(
            &id,
            FollowUp {
                message: "again".into(),
                ..FollowUp::default()
            },
        )
        .await
        .unwrap();
    let next = host.wait_turn(&id, &sent.turn_id.unwrap()).await.unwrap();
    assert_eq!(next.reply, "two");

    // The stream saw every turn end.
    while replies.len() < 3 {
        let envelope = stream.next().await.unwrap().unwrap();
        if let Event::TurnCompleted(done) = &envelope.event {
            replies.push(done.reply.clone());
        }
    }
    assert_eq!(replies, ["one", "one (slow)", "two"]);

    // A new session takes version two as well.
    let (_, fresh) = session::run(host, "hi").await;
    assert_eq!(fresh.reply, "two");
}

#[tokio::test]
async fn a_reload_names_what_needs_a_restart_and_refuses_another_folder() {
    let folder = AgentFolder::new().rules("[[rules]]\nreply = \"hi\"\n");
    let t = TestHost::start(&folder).await;
    write_files(
        t.dir.path(),
        &[(
            "agent/hooks/audit.toml",
            "events = [\"turn.completed\"]\nfile = \"audit.ndjson\"\n",
        )],
    );
    let reloaded = t.host.reload(rediscover(t.dir.path())).await.unwrap();
    assert_eq!(reloaded.needs_restart, ["hooks"]);

    let other = AgentFolder::new()
        .rules("[[rules]]\nreply = \"hi\"\n")
        .write();
    let project = rediscover(other.path());
    match t.host.reload(project).await {
        Err(HostError::InvalidRequest(message)) => {
            assert!(message.contains("same project"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(t.host.version(), 2);
}
