#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Schedules whose handler is written in Rust by the embedding program
//! (`handler = "name"`, `HostBuilder::handler`): the same request a handler
//! program reads, the same host services with the same reach, the same
//! failures and records.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bdk_core::discover;
use bdk_core::handler::{HandlerError, NativeHandler, NativeRequest};
use bdk_core::host::{Host, HostError, StartSession};
use bdk_core::tool::{SendMessage, SessionTarget};
use bdk_events::{Admission, SessionId, SessionMode};
use bdk_scheduler::{Dispatcher, ScheduleError, schedule_status};
use bdk_store::{FsStore, Store};
use serde_json::{Map, Value, json};
use tempfile::TempDir;

/// Sends a note into the session its request names, waits for the reply
/// and answers it, as a program would over the endpoint.
struct Relay {
    seen: Seen,
    /// A session of another principal it tries to read.
    other: Arc<Mutex<Option<SessionId>>>,
}

type Seen = Arc<Mutex<Vec<Map<String, Value>>>>;

#[async_trait]
impl NativeHandler for Relay {
    async fn handle(&self, req: NativeRequest) -> Result<Map<String, Value>, HandlerError> {
        self.seen.lock().unwrap().push(req.request.clone());
        let fail = |e: bdk_core::tool::ServiceError| HandlerError::Exited {
            program: "relay".into(),
            how: format!("failed: {}", e.code),
            stderr: e.message,
        };
        let sent = req
            .services
            .send(
                &req.ctx,
                SendMessage {
                    target: SessionTarget::Key {
                        channel: None,
                        key: "relay".into(),
                    },
                    message: "relay this".into(),
                    admission: Admission::Coalesce,
                    delivery_id: None,
                    mode: SessionMode::Chat,
                },
            )
            .await
            .map_err(fail)?;
        let waited = req
            .services
            .session_wait(
                &req.ctx,
                SessionTarget::Id(sent.session_id.clone()),
                std::time::Duration::from_secs(60),
            )
            .await
            .map_err(fail)?;
        // The schedule's principal reaches its own sessions, not others'.
        let other = self.other.lock().unwrap().clone();
        let other = match other {
            Some(id) => req
                .services
                .session_get(&req.ctx, SessionTarget::Id(id))
                .await
                .err()
                .map(|e| e.code),
            None => None,
        };
        let mut answer = Map::new();
        answer.insert("sessionIds".into(), json!([sent.session_id]));
        answer.insert("reply".into(), json!(waited.session.last_reply));
        answer.insert("other".into(), json!(other));
        Ok(answer)
    }
}

struct Slow;

#[async_trait]
impl NativeHandler for Slow {
    async fn handle(&self, _req: NativeRequest) -> Result<Map<String, Value>, HandlerError> {
        std::future::pending::<()>().await;
        Ok(Map::new())
    }
}

fn folder(schedules: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![
        (
            "agent/agent.toml".to_owned(),
            "model = \"scripted\"\n".to_owned(),
        ),
        (
            "agent/instructions.md".to_owned(),
            "You relay.\n".to_owned(),
        ),
        (
            "agent/scripted.toml".to_owned(),
            "[[rules]]\nreply = \"relayed: {{ user }}\"\n".to_owned(),
        ),
    ];
    for (name, body) in schedules {
        files.push((format!("agent/schedules/{name}.toml"), (*body).to_owned()));
    }
    bdk_testkit::write_files(dir.path(), &files);
    dir
}

type Built = (Host, Seen, Arc<Mutex<Option<SessionId>>>);

async fn build(dir: &TempDir, register: bool) -> Result<Built, HostError> {
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let seen: Seen = Arc::default();
    let other = Arc::new(Mutex::new(None));
    let mut builder = Host::builder(d.project.unwrap(), store);
    if register {
        let relay = Relay {
            seen: Arc::clone(&seen),
            other: Arc::clone(&other),
        };
        builder = builder
            .handler("relay", Arc::new(relay))
            .handler("slow", Arc::new(Slow));
    }
    Ok((builder.build().await?, seen, other))
}

#[tokio::test]
async fn a_native_handler_gets_the_programs_request_and_services() {
    let dir = folder(&[
        ("relay", "cron = \"0 * * * *\"\nhandler = \"relay\"\n"),
        (
            "slow",
            "cron = \"0 * * * *\"\nhandler = \"slow\"\ntimeout_secs = 1\n",
        ),
    ]);
    let (host, seen, other) = build(&dir, true).await.unwrap();
    let alice = host
        .start_session(StartSession {
            principal: Some("alice".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .session_id;
    *other.lock().unwrap() = Some(alice);
    let dispatcher = Dispatcher::new(host.clone());
    let done = dispatcher.dispatch_schedule("relay").await.unwrap();
    assert_eq!(done.session_ids.len(), 1);
    let handler = done.handler.unwrap();
    assert_eq!(handler.answer["reply"], "relayed: relay this");
    // Another principal's session stays out of reach.
    assert_eq!(handler.answer["other"], "forbidden");
    let request = seen.lock().unwrap()[0].clone();
    assert_eq!(request["kind"], "schedule");
    assert_eq!(request["schedule"], "relay");
    assert_eq!(request["trigger"], "manual");
    assert_eq!(request["context"]["principal"], "schedule:relay");
    assert_eq!(request["context"]["channel"], "schedule");
    // The session it started is keyed on the schedule channel and owned by
    // the schedule.
    let record = host.session(&done.session_ids[0], None).await.unwrap();
    assert_eq!(record.continuation_token, "schedule:relay");
    assert_eq!(record.principal.as_deref(), Some("schedule:relay"));

    // A second fire continues the same conversation.
    let again = dispatcher.dispatch_schedule("relay").await.unwrap();
    assert_eq!(again.session_ids, done.session_ids);

    // A native handler is held to its timeout like a program.
    let e = dispatcher.dispatch_schedule("slow").await.unwrap_err();
    let ScheduleError::Handler { source, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(source.code(), "handler_timeout");
    let status = schedule_status(host.store(), &host.project().schedules, host.clock().now())
        .await
        .unwrap();
    let slow = status.iter().find(|s| s.name == "slow").unwrap();
    let last = slow.last_run.as_ref().unwrap();
    assert!(!last.ok);
    assert_eq!(last.error_code.as_deref(), Some("handler_timeout"));
    assert_eq!(last.failures, 1);
}

#[tokio::test]
async fn a_native_handler_nobody_registered_refuses_the_build() {
    let dir = folder(&[("relay", "cron = \"0 * * * *\"\nhandler = \"relay\"\n")]);
    let Err(e) = build(&dir, false).await else {
        panic!("the build must fail");
    };
    let message = e.to_string();
    assert!(
        message.contains(
            "schedule `relay` runs native handler `relay`, which this program did not register"
        ),
        "{message}"
    );
}

/// Echoes what it was given and tries to send into the session it is
/// bound to.
struct Bound;

#[async_trait]
impl NativeHandler for Bound {
    async fn handle(&self, req: NativeRequest) -> Result<Map<String, Value>, HandlerError> {
        let own = req.ctx.session.id.clone().unwrap();
        let refused = req
            .services
            .send(
                &req.ctx,
                SendMessage {
                    target: SessionTarget::Id(own),
                    message: "to myself".into(),
                    admission: Admission::Coalesce,
                    delivery_id: None,
                    mode: SessionMode::Chat,
                },
            )
            .await
            .unwrap_err();
        let mut answer = req.request;
        answer.insert("refused".into(), json!(refused.code));
        Ok(answer)
    }
}

#[tokio::test]
async fn a_handler_bound_to_a_session_carries_it() {
    let dir = folder(&[]);
    let d = discover(dir.path());
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(d.project.unwrap(), store)
        .handler("bound", Arc::new(Bound))
        .build()
        .await
        .unwrap();
    let session = host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let answer = host
        .run_handler(
            &bdk_core::project::HandlerSpec::Native {
                name: "bound".into(),
                timeout: std::time::Duration::from_secs(30),
            },
            bdk_core::handler::HandlerCall {
                kind: "gate",
                request: Map::new(),
                principal: None,
                channel: "http".into(),
                session: Some(session.clone()),
                cancel: tokio_util::sync::CancellationToken::new(),
            },
        )
        .await
        .unwrap();
    assert_eq!(answer["kind"], "gate");
    assert_eq!(answer["context"]["sessionId"], json!(session.as_str()));
    assert_eq!(answer["refused"], "invalid_args");
}
