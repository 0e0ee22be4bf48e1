#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A/B arms on the host: what a session's arm changes in each turn (the
//! instruction overlay, the model, the effort), that the recorded arm rules
//! every later turn of the session (a pin, an edited experiment, a host
//! rebuilt over the same store), and the sequence of the start.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bdk_core::Project;
use bdk_core::host::{Host, StartSession};
use bdk_core::models::ModelResolver;
use bdk_events::{AbUnit, Event, Usage};
use bdk_models::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, StopReason};
use bdk_testkit::session::settled_events;
use bdk_testkit::{AgentFolder, host_over};
use tokio_util::sync::CancellationToken;

/// Answers every step with what it was asked: its id, the effort and the
/// system prompt.
struct Mirror(String);

#[async_trait]
impl Model for Mirror {
    fn id(&self) -> &str {
        &self.0
    }

    async fn step(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let text = format!(
            "model={} effort={} system={}",
            self.0,
            request.effort.as_deref().unwrap_or("-"),
            request.system
        );
        let events = vec![
            Ok(ModelEvent::TextDelta(text)),
            Ok(ModelEvent::Usage(Usage::default())),
            Ok(ModelEvent::Stop(StopReason::Stop)),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }
}

struct Mirrors;

impl ModelResolver for Mirrors {
    fn resolve(&self, model: &str, _project: &Project) -> Result<Arc<dyn Model>, ModelError> {
        Ok(Arc::new(Mirror(model.to_owned())))
    }
}

const TONE: &str = r#"
[[arms]]
name = "control"
weight = 0

[[arms]]
name = "terse"
weight = 100
instructions = "terse.md"
model = "openai/small"
effort = "low"
"#;

fn folder(tone: &str) -> AgentFolder {
    AgentFolder::new()
        .agent_toml("model = \"openai/big\"\neffort = \"high\"\n")
        .instructions("Be helpful.")
        .file("agent/experiments/tone.toml", tone)
        .file("agent/experiments/terse.md", "Answer in five words.\n")
}

async fn host(project: Project, state: &std::path::Path) -> Host {
    host_over(project, state, |b| b.models(Arc::new(Mirrors))).await
}

fn reply(events: &[bdk_events::Envelope]) -> String {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::TurnCompleted(c) => Some(c.reply.clone()),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn an_arm_overrides_every_turn_of_its_session_until_the_end() {
    let found = folder(TONE).discover();
    assert!(found.diagnostics.is_empty(), "{:?}", found.diagnostics);
    let state = found.dir.path().join("state");
    let h = host(found.project.clone(), &state).await;

    let started = h
        .start_session(StartSession {
            message: Some("hi".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let id = started.session_id.clone();
    let events = settled_events(&h, &id).await;
    let kinds: Vec<&str> = events.iter().take(3).map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        ["session.started", "ab.assigned", "message.received"]
    );
    let Event::AbAssigned(a) = &events[1].event else {
        unreachable!()
    };
    assert_eq!((a.arm.as_str(), a.unit), ("terse", Some(AbUnit::Session)));
    assert_eq!(a.unit_key.as_deref(), Some(id.as_str()));
    assert!(events[1].turn_id.is_none());
    // The overlay follows the instructions; the arm's model and effort ran.
    assert_eq!(
        reply(&events),
        "model=openai/small effort=low system=Be helpful.\n\nAnswer in five words."
    );
    let Some(Event::TurnStarted(t)) = events
        .iter()
        .map(|e| &e.event)
        .find(|e| matches!(e, Event::TurnStarted(_)))
    else {
        unreachable!()
    };
    assert_eq!(t.model.as_deref(), Some("openai/small"));
    assert!(bdk_events::sequence::violations(&events).is_empty());

    // A pinned arm is recorded as such and overrides nothing for control.
    let pinned = h
        .start_session(StartSession {
            message: Some("hi".into()),
            arms: BTreeMap::from([("tone".to_owned(), "control".to_owned())]),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let events = settled_events(&h, &pinned.session_id).await;
    let Event::AbAssigned(a) = &events[1].event else {
        unreachable!()
    };
    assert_eq!((a.arm.as_str(), a.unit), ("control", Some(AbUnit::Pinned)));
    assert_eq!(
        reply(&events),
        "model=openai/big effort=high system=Be helpful."
    );

    // A pin naming an unknown arm refuses the start; nothing is stored.
    let before = h.list_sessions(None).await.unwrap().len();
    let err = h
        .start_session(StartSession {
            message: Some("hi".into()),
            arms: BTreeMap::from([("tone".to_owned(), "loud".to_owned())]),
            ..StartSession::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no arm `loud`"), "{err}");
    assert_eq!(h.list_sessions(None).await.unwrap().len(), before);
    h.shutdown(std::time::Duration::from_secs(5)).await;
    drop(h);

    // The experiment now sends everyone to control, with another overlay;
    // a host over the same store keeps the session in `terse` and applies
    // what `terse` now says.
    let edited = TONE.replace("weight = 0", "weight = 100").replacen(
        "weight = 100\ninstructions",
        "weight = 0\ninstructions",
        1,
    );
    std::fs::write(found.dir.path().join("agent/experiments/tone.toml"), edited).unwrap();
    std::fs::write(
        found.dir.path().join("agent/experiments/terse.md"),
        "Answer in three words.",
    )
    .unwrap();
    let project = bdk_core::discover(found.dir.path()).project.unwrap();
    assert_eq!(project.experiments[0].arms[0].weight, 100);
    let h = host(project, &state).await;
    let sent = h
        .send(
            &id,
            bdk_core::host::FollowUp {
                message: "again".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    h.wait_turn(&id, sent.turn_id.as_ref().unwrap())
        .await
        .unwrap();
    let events = settled_events(&h, &id).await;
    assert_eq!(
        reply(&events),
        "model=openai/small effort=low system=Be helpful.\n\nAnswer in three words."
    );
    assert_eq!(
        events.iter().filter(|e| e.kind() == "ab.assigned").count(),
        1
    );
    // New sessions follow the new weights.
    let fresh = h.start_session(StartSession::default()).await.unwrap();
    let events = settled_events(&h, &fresh.session_id).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["session.started", "ab.assigned", "session.waiting"]);
    let Event::AbAssigned(a) = &events[1].event else {
        unreachable!()
    };
    assert_eq!(a.arm, "control");

    // The report: terse has the first session (two turns), control the
    // fresh one; the pinned session is listed, not counted.
    let report = h.abs(None, 10).await.unwrap();
    let tone = &report.experiments[0];
    let sessions: Vec<(&str, u64, u64)> = tone
        .arms
        .iter()
        .map(|a| (a.name.as_str(), a.totals.sessions, a.totals.turns))
        .collect();
    assert_eq!(sessions, [("control", 1, 0), ("terse", 1, 2)]);
    assert_eq!(tone.pinned_sessions, 1);
    assert_eq!(tone.sessions.len(), 3);
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_disabled_experiment_enrolls_no_one_and_channel_keys_share_an_arm() {
    let found = folder(&format!("enabled = false\n{TONE}")).discover();
    let h = host(found.project.clone(), &found.dir.path().join("state")).await;
    let s = h.start_session(StartSession::default()).await.unwrap();
    let events = settled_events(&h, &s.session_id).await;
    assert!(events.iter().all(|e| e.kind() != "ab.assigned"));
    h.shutdown(std::time::Duration::from_secs(5)).await;

    let split = "unit = \"channel_key\"\n[[arms]]\nname = \"a\"\nweight = 50\n[[arms]]\nname = \"b\"\nweight = 50\n";
    let found = AgentFolder::new()
        .agent_toml("model = \"openai/big\"\n")
        .file("agent/experiments/split.toml", split)
        .discover();
    assert!(found.diagnostics.is_empty(), "{:?}", found.diagnostics);
    let h = host(found.project.clone(), &found.dir.path().join("state")).await;
    let mut arms = BTreeMap::new();
    for key in 0..20 {
        for _ in 0..2 {
            let s = h
                .start_session(StartSession {
                    channel: "slack".into(),
                    continuation_token: Some(format!("slack:T{key}")),
                    ..StartSession::default()
                })
                .await
                .unwrap();
            let events = settled_events(&h, &s.session_id).await;
            let Event::AbAssigned(a) = &events[1].event else {
                unreachable!()
            };
            assert_eq!(a.unit, Some(AbUnit::ChannelKey));
            let first = arms.entry(key).or_insert_with(|| a.arm.clone());
            assert_eq!(first, &a.arm, "every session of one key shares its arm");
        }
    }
    assert!(arms.values().any(|a| a == "a") && arms.values().any(|a| a == "b"));
    h.shutdown(std::time::Duration::from_secs(5)).await;
}
