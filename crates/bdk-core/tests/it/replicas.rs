#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several hosts over one shared store behave as replicas: in-process tests
//! with `MemoryCoordination`. Each host is one replica; a replica "dies" by
//! having its runtime torn down under it, the way a killed process vanishes.

use std::sync::Arc;
use std::time::Duration;

use bdk_core::Project;
use bdk_core::host::{DirectCall, FollowUp, Host, HostError, StartSession};
use bdk_core::tool::native::native_tool;
use bdk_core::tool::{Effect, ToolContext};
use bdk_events::{Envelope, Event, FailStatus, SessionId, TurnId};
use bdk_store::coord::Coordination;
use bdk_store::{FsStore, MemoryCluster, Store};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tempfile::TempDir;
use tokio::sync::{Notify, mpsc};

/// Generous bound for waiting on a condition; never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

const RULES: &str = r#"
[[rules]]
user_contains = "slow"
reply = "slow reply"
delay_ms = 600000

[[rules]]
user_contains = "brisk"
reply = "brisk: {{ user }}"
delay_ms = 150

[[rules]]
reply = "quick: {{ user }}"
"#;

fn project() -> (TempDir, Project) {
    let d = bdk_testkit::AgentFolder::new().rules(RULES).discover();
    (d.dir, d.project)
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

/// A write tool; when `gate` is given it signals entry and waits to be released.
fn note_tool(
    gate: Option<(mpsc::UnboundedSender<()>, Arc<Notify>)>,
) -> Arc<dyn bdk_core::tool::Tool> {
    Arc::new(
        native_tool(
            "note",
            "writes a note",
            move |n: Note, _ctx: ToolContext| {
                let gate = gate.clone();
                async move {
                    if let Some((entered, release)) = gate {
                        let _ = entered.send(());
                        release.notified().await;
                    }
                    Ok(json!({"noted": n.text}))
                }
            },
        )
        .effect(Effect::Write),
    )
}

struct Cluster {
    _dir: TempDir,
    project: Project,
    store: Arc<dyn Store>,
    cluster: MemoryCluster,
}

impl Cluster {
    fn new(cluster: MemoryCluster) -> Self {
        let (dir, project) = project();
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
        Self {
            _dir: dir,
            project,
            store,
            cluster,
        }
    }

    async fn replica(&self, name: &str) -> Host {
        self.replica_with(name, None).await
    }

    async fn replica_with(
        &self,
        name: &str,
        gate: Option<(mpsc::UnboundedSender<()>, Arc<Notify>)>,
    ) -> Host {
        let coord: Arc<dyn Coordination> = self.cluster.join(name);
        Host::builder(self.project.clone(), Arc::clone(&self.store))
            .coordination(coord)
            .tool(note_tool(gate))
            .build()
            .await
            .unwrap()
    }
}

fn slow_start() -> StartSession {
    StartSession {
        message: Some("be slow".into()),
        ..Default::default()
    }
}

fn follow_up(message: &str) -> FollowUp {
    FollowUp {
        message: message.into(),
        ..Default::default()
    }
}

/// How a turn ended, waited for with a bound.
async fn ended(host: &Host, id: &SessionId, turn: &TurnId) -> bdk_core::host::TurnResult {
    tokio::time::timeout(PATIENCE, host.wait_turn(id, turn))
        .await
        .expect("the turn never ended")
        .unwrap()
}

/// Waits until an event matching `pred` is recorded in the session.
async fn wait_for(store: &Arc<dyn Store>, id: &SessionId, pred: impl Fn(&Envelope) -> bool) {
    let mut stream = store.subscribe(id, 0).await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while let Some(e) = stream.next().await {
            if pred(&e.unwrap()) {
                return;
            }
        }
        panic!("the stream ended");
    })
    .await
    .expect("the event never came");
}

fn started(turn: &TurnId) -> impl Fn(&Envelope) -> bool + '_ {
    move |e| e.turn_id.as_ref() == Some(turn) && matches!(e.event, Event::TurnStarted(_))
}

/// Indices are gapless, and no turn's `message.received` lands while
/// another turn is open: two turns never ran at once.
fn assert_one_turn_at_a_time(events: &[Envelope]) {
    let mut open: Option<&TurnId> = None;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.index, i as u64, "index gap at {i}");
        match &e.event {
            Event::MessageReceived(_) => {
                assert!(
                    open.is_none(),
                    "two turns at once at index {i}: {events:#?}"
                );
                open = e.turn_id.as_ref();
            }
            Event::TurnCompleted(_) | Event::TurnFailed(_) => {
                assert_eq!(
                    open,
                    e.turn_id.as_ref(),
                    "end of a turn that was not open at {i}"
                );
                open = None;
            }
            _ => {}
        }
    }
}

/// The cluster announces no release: poll its lease table.
async fn wait_lease_free(cluster: &MemoryCluster, id: &SessionId) {
    bdk_testkit::poll::until("the lease to be released", || async {
        cluster.lease(id).is_none()
    })
    .await;
}

#[tokio::test]
async fn a_follow_up_on_b_preempts_the_turn_running_on_a() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let b = c.replica("b").await;
    let s = a.start_session(slow_start()).await.unwrap();
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;
    assert_eq!(c.cluster.lease(&s.session_id).unwrap().0, "a");

    let sent = b
        .send(
            &s.session_id,
            FollowUp {
                continuation_token: Some(s.continuation_token.clone()),
                ..follow_up("hello again")
            },
        )
        .await
        .unwrap();
    let r1 = ended(&b, &s.session_id, &first).await;
    assert_eq!(r1.status, Some(FailStatus::Interrupted));
    assert_eq!(r1.reply, "turn interrupted by a newer message");
    let second = sent.turn_id.unwrap();
    let r2 = ended(&a, &s.session_id, &second).await;
    assert_eq!(r2.reply, "quick: hello again");
    wait_lease_free(&c.cluster, &s.session_id).await;
    let events = b.events(&s.session_id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert_one_turn_at_a_time(&events);
    assert!(matches!(
        events.last().unwrap().event,
        Event::SessionWaiting(_)
    ));
    // The rotated token is shared: the old one is stale on either replica.
    let stale = a
        .send(
            &s.session_id,
            FollowUp {
                continuation_token: Some(s.continuation_token.clone()),
                ..follow_up("x")
            },
        )
        .await;
    assert!(matches!(stale, Err(HostError::StaleToken)), "{stale:?}");
}

#[tokio::test]
async fn stop_on_b_stops_the_turn_on_a_and_the_session_continues() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let b = c.replica("b").await;
    let s = a.start_session(slow_start()).await.unwrap();
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;

    assert!(b.stop(&s.session_id, None).await.unwrap());
    let r = ended(&b, &s.session_id, &first).await;
    assert_eq!(r.status, Some(FailStatus::Cancelled));
    // Nothing runs any more: a second stop finds nothing on either replica.
    assert!(!b.stop(&s.session_id, None).await.unwrap());
    assert!(!a.stop(&s.session_id, None).await.unwrap());

    let sent = b
        .send(&s.session_id, follow_up("still there?"))
        .await
        .unwrap();
    let r2 = ended(&b, &s.session_id, sent.turn_id.as_ref().unwrap()).await;
    assert_eq!(r2.reply, "quick: still there?");
    tokio::time::timeout(PATIENCE, b.wait_idle(&s.session_id))
        .await
        .unwrap();
    let events = a.events(&s.session_id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert_one_turn_at_a_time(&events);
}

#[tokio::test]
async fn a_write_call_on_b_during_a_turn_on_a_is_busy() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let b = c.replica("b").await;
    let s = a.start_session(slow_start()).await.unwrap();
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;

    let call = || DirectCall {
        origin: bdk_core::host::CallOrigin::Agent,
        name: "note".into(),
        input: json!({"text": "hi"}),
        session_id: Some(s.session_id.clone()),
        ..Default::default()
    };
    let busy = b.call_tool(call()).await;
    assert!(matches!(busy, Err(HostError::SessionBusy(_))), "{busy:?}");
    assert_eq!(busy.unwrap_err().code(), "session_busy");
    // Reads run beside a turn anywhere.
    let read = b
        .call_tool(DirectCall {
            origin: bdk_core::host::CallOrigin::Agent,
            name: "list_files".into(),
            input: json!({}),
            session_id: Some(s.session_id.clone()),
            ..Default::default()
        })
        .await;
    assert!(read.is_ok(), "{read:?}");

    a.stop(&s.session_id, None).await.unwrap();
    let done = b.call_tool(call()).await.unwrap();
    assert!(!done.is_error);
    assert_eq!(done.result, json!({"noted": "hi"}));
    wait_lease_free(&c.cluster, &s.session_id).await;
}

#[tokio::test]
async fn a_turn_waits_for_a_write_call_running_on_another_replica() {
    let c = Cluster::new(MemoryCluster::default());
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let a = c
        .replica_with("a", Some((entered_tx, Arc::clone(&release))))
        .await;
    let b = c.replica("b").await;
    let s = b.start_session(StartSession::default()).await.unwrap();
    let id = s.session_id.clone();
    let call = tokio::spawn({
        let a = a.clone();
        let id = id.clone();
        async move {
            a.call_tool(DirectCall {
                origin: bdk_core::host::CallOrigin::Agent,
                name: "note".into(),
                input: json!({"text": "first"}),
                session_id: Some(id),
                ..Default::default()
            })
            .await
        }
    });
    entered.recv().await.unwrap();
    // A follow-up on B now waits for A's write call instead of starting a
    // turn under it.
    let send = tokio::spawn({
        let b = b.clone();
        let id = id.clone();
        async move { b.send(&id, follow_up("after the note")).await }
    });
    wait_for(&c.store, &id, |e| {
        matches!(e.event, Event::ActionsRequested(_))
    })
    .await;
    release.notify_one();
    call.await.unwrap().unwrap();
    let sent = send.await.unwrap().unwrap();
    let r = ended(&b, &id, sent.turn_id.as_ref().unwrap()).await;
    assert_eq!(r.reply, "quick: after the note");
    let events = b.events(&id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    let result_at = events
        .iter()
        .position(|e| matches!(e.event, Event::ActionsCompleted(_)))
        .unwrap();
    let received_at = events
        .iter()
        .position(|e| matches!(e.event, Event::MessageReceived(_)))
        .unwrap();
    assert!(
        result_at < received_at,
        "the turn started under the write call"
    );
}

/// Builds replica `name` on its own runtime, so the test can make it vanish
/// mid-turn like a killed process.
async fn doomed_replica(c: &Cluster, name: &str) -> (tokio::runtime::Runtime, Host) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let coord: Arc<dyn Coordination> = c.cluster.join(name);
    let builder = Host::builder(c.project.clone(), Arc::clone(&c.store)).coordination(coord);
    let host = rt.spawn(builder.build()).await.unwrap().unwrap();
    (rt, host)
}

async fn start_on(rt: &tokio::runtime::Runtime, host: &Host) -> bdk_core::host::Started {
    let h = host.clone();
    rt.spawn(async move { h.start_session(slow_start()).await })
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_dead_replicas_turn_is_recorded_interrupted_by_a_live_one() {
    // Live replicas heartbeat and look for dead ones every 20 ms; nobody
    // lapses by accident within the hour-long time-to-live.
    let c = Cluster::new(MemoryCluster::with_interval(
        Duration::from_secs(3600),
        Duration::from_millis(20),
    ));
    let (rt_a, a) = doomed_replica(&c, "a").await;
    let b = c.replica("b").await;
    let s = start_on(&rt_a, &a).await;
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;

    // A vanishes mid-turn: its tasks are gone and it stops heartbeating.
    rt_a.shutdown_background();
    c.cluster.expire("a");

    let r = ended(&b, &s.session_id, &first).await;
    assert_eq!(r.status, Some(FailStatus::Interrupted));
    assert_eq!(
        r.reply,
        "turn interrupted: the replica running it stopped responding"
    );
    wait_for(&c.store, &s.session_id, |e| {
        matches!(e.event, Event::SessionWaiting(_)) && e.index > 0
    })
    .await;
    let sent = b
        .send(&s.session_id, follow_up("are you back?"))
        .await
        .unwrap();
    let r2 = ended(&b, &s.session_id, sent.turn_id.as_ref().unwrap()).await;
    assert_eq!(r2.reply, "quick: are you back?");
    tokio::time::timeout(PATIENCE, b.wait_idle(&s.session_id))
        .await
        .unwrap();
    let events = b.events(&s.session_id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert_one_turn_at_a_time(&events);
    let interrupted = events
        .iter()
        .filter(|e| matches!(&e.event, Event::TurnFailed(f) if f.status == FailStatus::Interrupted))
        .count();
    assert_eq!(interrupted, 1, "exactly one replica recorded the dead turn");
    drop(a);
}

#[tokio::test]
async fn a_follow_up_takes_over_a_dead_replicas_turn_at_once() {
    // The background claim never comes round within the test: the follow-up
    // itself finds the dead lease and takes it over.
    let hour = Duration::from_secs(3600);
    let c = Cluster::new(MemoryCluster::with_interval(hour, hour));
    let (rt_a, a) = doomed_replica(&c, "a").await;
    let b = c.replica("b").await;
    let s = start_on(&rt_a, &a).await;
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;
    rt_a.shutdown_background();
    c.cluster.expire("a");

    let sent = b.send(&s.session_id, follow_up("anyone?")).await.unwrap();
    let r1 = ended(&b, &s.session_id, &first).await;
    assert_eq!(r1.status, Some(FailStatus::Interrupted));
    let r2 = ended(&b, &s.session_id, sent.turn_id.as_ref().unwrap()).await;
    assert_eq!(r2.reply, "quick: anyone?");
    tokio::time::timeout(PATIENCE, b.wait_idle(&s.session_id))
        .await
        .unwrap();
    assert_one_turn_at_a_time(&b.events(&s.session_id, 0, None).await.unwrap());
    drop(a);
}

#[tokio::test]
async fn a_starting_replica_leaves_a_live_replicas_turn_alone() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let s = a.start_session(slow_start()).await.unwrap();
    let first = s.turn_id.clone().unwrap();
    wait_for(&c.store, &s.session_id, started(&first)).await;

    // A new replica's startup recovery sees the open turn but A runs it.
    let late = c.replica("late").await;
    let events = late.events(&s.session_id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, Event::TurnFailed(_))),
        "recovery interrupted a live turn: {events:#?}"
    );
    assert_eq!(c.cluster.lease(&s.session_id).unwrap().0, "a");
    assert!(late.stop(&s.session_id, None).await.unwrap());
    let r = ended(&late, &s.session_id, &first).await;
    assert_eq!(r.status, Some(FailStatus::Cancelled));
}

#[tokio::test]
async fn racing_follow_ups_on_two_replicas_never_run_two_turns_at_once() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let b = c.replica("b").await;
    // A channel token does not rotate, so both racing sends are accepted.
    let s = a
        .start_session(StartSession {
            continuation_token: Some("test:race".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let id = s.session_id.clone();
    for round in 0..4 {
        let send = |h: &Host, who: &str| {
            let h = h.clone();
            let id = id.clone();
            let message = format!("brisk {who} {round}");
            tokio::spawn(async move { h.send(&id, follow_up(&message)).await })
        };
        let (ra, rb) = tokio::join!(send(&a, "a"), send(&b, "b"));
        let (sa, sb) = (ra.unwrap().unwrap(), rb.unwrap().unwrap());
        for (h, sent) in [(&a, &sa), (&b, &sb)] {
            ended(h, &id, sent.turn_id.as_ref().unwrap()).await;
        }
    }
    wait_lease_free(&c.cluster, &id).await;
    let events = a.events(&id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert_one_turn_at_a_time(&events);
    let received = events
        .iter()
        .filter(|e| matches!(e.event, Event::MessageReceived(_)))
        .count();
    assert_eq!(received, 8, "every follow-up got its turn");
    assert!(matches!(
        events.last().unwrap().event,
        Event::SessionWaiting(_)
    ));
}

#[tokio::test]
async fn a_follow_up_gives_up_with_session_busy_when_the_owner_never_answers() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    // B waits at most 200 ms for another replica's turn.
    let coord: Arc<dyn Coordination> = c.cluster.join("b");
    let b = Host::builder(c.project.clone(), Arc::clone(&c.store))
        .coordination(coord)
        .coordination_wait(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let s = a.start_session(StartSession::default()).await.unwrap();
    // A holds the lease for a write call that never ends while B follows up:
    // B's preempt reaches no turn, so it waits out its bound.
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let a2 = Host::builder(c.project.clone(), Arc::clone(&c.store))
        .coordination(c.cluster.join("a2") as Arc<dyn Coordination>)
        .tool(note_tool(Some((entered_tx, Arc::clone(&release)))))
        .build()
        .await
        .unwrap();
    let call = tokio::spawn({
        let a2 = a2.clone();
        let id = s.session_id.clone();
        async move {
            a2.call_tool(DirectCall {
                origin: bdk_core::host::CallOrigin::Agent,
                name: "note".into(),
                input: json!({"text": "held"}),
                session_id: Some(id),
                ..Default::default()
            })
            .await
        }
    });
    entered.recv().await.unwrap();
    let with_token = || FollowUp {
        continuation_token: Some(s.continuation_token.clone()),
        ..follow_up("let me in")
    };
    let busy = b.send(&s.session_id, with_token()).await;
    match &busy {
        Err(e @ HostError::ReplicaBusy { replica, .. }) => {
            assert_eq!(replica, "a2");
            assert_eq!(e.code(), "session_busy");
        }
        other => panic!("expected a busy answer, got {other:?}"),
    }
    release.notify_one();
    call.await.unwrap().unwrap();
    // Nothing was accepted, so the same token works for the retry.
    let sent = b.send(&s.session_id, with_token()).await.unwrap();
    let r = ended(&b, &s.session_id, sent.turn_id.as_ref().unwrap()).await;
    assert_eq!(r.reply, "quick: let me in");
    drop(a);
}

/// Regression: tokenless follow-ups racing on two replicas lost the token's
/// compare-and-swap and answered `stale_continuation_token` although they
/// held no token. The loser of a race now answers `session_busy`; a winner's
/// turn runs.
#[tokio::test]
async fn tokenless_follow_ups_racing_on_two_replicas_are_never_stale() {
    let c = Cluster::new(MemoryCluster::default());
    let a = c.replica("a").await;
    let b = c.replica("b").await;
    let id = a
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let mut accepted = 0;
    for round in 0..6 {
        let send = |h: &Host, who: &str| {
            let h = h.clone();
            let id = id.clone();
            let message = format!("brisk {who} {round}");
            tokio::spawn(async move { h.send(&id, follow_up(&message)).await })
        };
        let (ra, rb) = tokio::join!(send(&a, "a"), send(&b, "b"));
        for (h, result) in [(&a, ra.unwrap()), (&b, rb.unwrap())] {
            match result {
                Ok(sent) => {
                    accepted += 1;
                    ended(h, &id, sent.turn_id.as_ref().unwrap()).await;
                }
                Err(e) => assert_eq!(e.code(), "session_busy", "{e}"),
            }
        }
    }
    assert!(accepted >= 6, "at least one send of each round is accepted");
    wait_lease_free(&c.cluster, &id).await;
    let events = a.events(&id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    assert_one_turn_at_a_time(&events);
    let received = events
        .iter()
        .filter(|e| matches!(e.event, Event::MessageReceived(_)))
        .count();
    assert_eq!(received, accepted, "every accepted follow-up got its turn");
}
