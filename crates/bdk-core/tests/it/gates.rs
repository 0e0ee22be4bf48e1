#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Result gates in the host: a Rust gate registered with
//! `HostBuilder::gate` (what it is asked, how the model repairs, the
//! conversation rebuilt from the log), and a program gate stopped with its
//! turn.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bdk_core::gate::{GateAnswer, GateError, GateRequest, GateSpec, ResultGate};
use bdk_core::host::transcript_from_events;
use bdk_events::{Event, FailStatus, Verdict};
use bdk_models::Message;
use bdk_testkit::{AgentFolder, TestHost, poll, session};

const RULES: &str = r#"
[[rules]]
user_regex = "^The result gate `house-style` rejected your reply"
reply = "fixed"

[[rules]]
reply = "draft"
"#;

/// What the gate was asked, for the test to read.
#[derive(Clone, Debug)]
struct Seen {
    reply: String,
    attempt: u32,
    kinds: Vec<String>,
    token: Option<String>,
    session: Option<String>,
}

/// Rejects any reply but `fixed`.
struct HouseStyle {
    spec: GateSpec,
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[async_trait]
impl ResultGate for HouseStyle {
    fn spec(&self) -> &GateSpec {
        &self.spec
    }

    async fn check(&self, request: GateRequest) -> Result<GateAnswer, GateError> {
        self.seen.lock().unwrap().push(Seen {
            reply: request.reply.clone(),
            attempt: request.attempt,
            kinds: request.events.iter().map(|e| e.kind().to_owned()).collect(),
            token: request.continuation_token.clone(),
            session: request.ctx.session.id.as_ref().map(ToString::to_string),
        });
        Ok(if request.reply == "fixed" {
            GateAnswer::Accept {
                action: serde_json::json!("posted"),
            }
        } else {
            GateAnswer::Reject {
                feedback: "say fixed".into(),
            }
        })
    }
}

#[tokio::test]
async fn a_rust_gate_rejects_the_model_repairs_and_the_log_rebuilds_the_same_conversation() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let gate = HouseStyle {
        spec: GateSpec::new("house-style", "replies say fixed").max_attempts(2),
        seen: Arc::clone(&seen),
    };
    let t =
        TestHost::start_with(&AgentFolder::new().rules(RULES), |b| b.gate(Arc::new(gate))).await;
    assert_eq!(t.host.gates()[0].name, "house-style");
    let (started, result) = session::run(&t.host, "write it").await;
    assert!(result.ok, "{}", result.reply);
    assert_eq!(result.reply, "fixed");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].reply.as_str(), seen[0].attempt), ("draft", 1));
    assert_eq!((seen[1].reply.as_str(), seen[1].attempt), ("fixed", 2));
    // The turn's own events, from its prompt on; the second check also
    // sees the first verdict.
    assert_eq!(
        seen[0].kinds.first().map(String::as_str),
        Some("message.received")
    );
    assert!(!seen[0].kinds.iter().any(|k| k == "gate.verdict"));
    assert!(seen[1].kinds.iter().any(|k| k == "gate.verdict"));
    assert_eq!(
        seen[0].session.as_deref(),
        Some(started.session_id.as_str())
    );
    assert_eq!(
        seen[0].token.as_deref(),
        Some(started.continuation_token.as_str())
    );

    let events = session::settled_events(&t.host, &started.session_id).await;
    let verdicts: Vec<(Verdict, u32)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::GateVerdict(v) => Some((v.verdict, v.attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts, [(Verdict::Reject, 1), (Verdict::Accept, 2)]);
    assert!(bdk_events::sequence::violations(&events).is_empty());

    // What a restarted host would show the model: the draft, the gate's
    // feedback as a user message, the repair.
    let transcript = transcript_from_events(&events);
    let texts: Vec<(&str, &str)> = transcript
        .iter()
        .map(|m| match m {
            Message::User { text } => ("user", text.as_str()),
            Message::Assistant { text, .. } => ("assistant", text.as_str()),
            _ => ("other", ""),
        })
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], ("user", "write it"));
    assert_eq!(texts[1], ("assistant", "draft"));
    assert_eq!(texts[2].0, "user");
    assert!(
        texts[2].1.starts_with("The result gate `house-style` rejected your reply (attempt 1 of 2). Feedback: say fixed"),
        "{texts:?}"
    );
    assert_eq!(texts[3], ("assistant", "fixed"));
}

#[tokio::test]
async fn stopping_a_turn_stops_its_running_gate_program() {
    // The gate writes its pid where the test can read it, then hangs.
    let folder = AgentFolder::new()
        .rules("[[rules]]\nreply = \"draft\"\n")
        .file(
            "agent/gates/slow.toml",
            "command = [\"sh\", \"slow.sh\"]\ntimeout_secs = 600\n",
        )
        .file(
            "agent/gates/slow.sh",
            "echo $$ > \"$BDK_WORKSPACE_DIR/gate.pid\"\nexec sleep 600\n",
        );
    let t = TestHost::start(&folder).await;
    let started = session::start(&t.host, "hi").await;
    let pid_file = t
        .host
        .store()
        .workspace_dir(&started.session_id)
        .join("gate.pid");
    let pid: u32 = poll::until_some("the gate program to start", || {
        let pid_file = pid_file.clone();
        async move {
            let text = tokio::fs::read_to_string(&pid_file).await.ok()?;
            text.trim().parse().ok()
        }
    })
    .await;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    assert!(t.host.stop(&started.session_id, None).await.unwrap());
    let result = session::wait_turn(&t.host, &started).await;
    assert!(!result.ok);
    assert_eq!(result.status, Some(FailStatus::Cancelled));
    poll::until("the gate program to be gone", || async move {
        // A zombie is gone too: it no longer runs.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.split_whitespace().nth(2) == Some("Z"),
        }
    })
    .await;
    let events = session::settled_events(&t.host, &started.session_id).await;
    assert!(
        !events.iter().any(|e| e.kind() == "gate.verdict"),
        "a check cut off records no verdict"
    );
    assert!(bdk_events::sequence::violations(&events).is_empty());
}
