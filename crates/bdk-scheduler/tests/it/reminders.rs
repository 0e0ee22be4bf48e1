#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Reminders end to end on a manual clock: creation and its refusals,
//! firing into the conversation, repetition, cancellation, the handler form,
//! durability across a host rebuild over the same store, and the built-in
//! tools driven by a scripted turn.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bdk_core::host::{Host, StartSession};
use bdk_core::tool::ToolContext;
use bdk_core::tool::native::native_tool;
use bdk_core::{Project, discover};
use bdk_events::{Event, SessionId, SessionMode};
use bdk_scheduler::reminders::{
    HANDLER_LOST, HostReminders, NewReminder, Reminder, ReminderError, ReminderStatus, Reminders,
    SESSION_DELETED,
};
use bdk_scheduler::{Clock, ManualClock};
use bdk_store::{FsStore, Store};
use bdk_testkit::{PATIENCE, poll, session, wait};
use chrono::{DateTime, TimeDelta, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tempfile::TempDir;

const RULES: &str = r#"
[[rules]]
user_contains = "remind me"
tool_calls = [{ name = "reminders_create", input = { delay = "10m", prompt = "check the oven" } }]

[[rules]]
tool_result = "reminders_create"
reply = "scheduled {{ result.id }}"

[[rules]]
reply = "got: {{ user }}"
"#;

fn project() -> (TempDir, Project) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "agent/agent.toml",
            "model = \"scripted\"\n[builtin_tools]\nworkspace = false\nartifacts = false\nreminders = true\n",
        ),
        ("agent/instructions.md", "You are a test agent.\n"),
        ("agent/scripted.toml", RULES),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    (dir, d.project.unwrap())
}

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    #[allow(dead_code)]
    note: String,
}

/// A handler tool that asks for a follow-up turn.
fn handler_tool() -> Arc<dyn bdk_core::tool::Tool> {
    Arc::new(native_tool(
        "nudge",
        "reminder handler",
        |n: Note, _ctx: ToolContext| async move {
            Ok(json!({"action": "followup", "message": format!("handler says {}", n.note)}))
        },
    ))
}

async fn host_at(
    project: &Project,
    root: &Path,
    clock: &Arc<ManualClock>,
    with_handler: bool,
) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(root).unwrap());
    let mut b = Host::builder(project.clone(), store)
        .extension(Arc::new(Reminders::new()))
        .clock(Arc::clone(clock) as Arc<dyn Clock>);
    if with_handler {
        b = b.tool(handler_tool());
    }
    b.build().await.unwrap()
}

/// A host whose reminders fire only when dispatched (timers off).
async fn host_without_timers(project: &Project, root: &Path, clock: &Arc<ManualClock>) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(root).unwrap());
    Host::builder(project.clone(), store)
        .clock(Arc::clone(clock) as Arc<dyn Clock>)
        .extension(Arc::new(Reminders::new().timers(false)))
        .build()
        .await
        .unwrap()
}

async fn chat(host: &Host) -> SessionId {
    host.start_session(StartSession::default())
        .await
        .unwrap()
        .session_id
}

fn req(f: impl FnOnce(&mut NewReminder)) -> NewReminder {
    let mut r = NewReminder {
        prompt: Some("ping".into()),
        ..NewReminder::default()
    };
    f(&mut r);
    r
}

/// Waits for the next `message.received` at or after `from` and returns its text.
async fn next_message(host: &Host, session: &SessionId, from: u64) -> (u64, String) {
    let env = wait::wait_for_event_from(host.store().as_ref(), session, from, |e| {
        matches!(e.event, Event::MessageReceived(_))
    })
    .await;
    let Event::MessageReceived(m) = &env.event else {
        unreachable!("the predicate matched a message.received")
    };
    (env.index, m.message.clone())
}

/// Polls the reminder table until `pred` holds (the fire's bookkeeping is
/// written after the send, with no event of its own), bounded at 10 s.
async fn wait_reminder(host: &Host, id: &str, pred: impl Fn(&Reminder) -> bool) -> Reminder {
    poll::until_ok_within("the reminder to reach the state", PATIENCE, || {
        let r = host.reminder(id).unwrap();
        std::future::ready(if pred(&r) {
            Ok(r)
        } else {
            Err(format!("{r:?}"))
        })
    })
    .await
}

#[tokio::test]
async fn bad_inputs_are_refused_clearly() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let cases = [
        req(|r| r.delay = Some("-5m".into())),
        req(|r| r.delay = Some("10y".into())),
        req(|r| r.delay = Some("0s".into())),
        req(|r| r.delay = Some("400d".into())),
        req(|r| r.every = Some("30s".into())),
        req(|r| r.cron = Some("0 0 31 2 *".into())),
        req(|r| r.cron = Some("0 25 * * *".into())),
        req(|r| r.at = Some("2026-11-30T11:00:00Z".into())),
        req(|r| r.at = Some("2026-12-30T11:00:00".into())),
    ];
    for c in cases {
        let e = host.create_reminder(&s, c.clone()).await.unwrap_err();
        assert!(matches!(e, ReminderError::InvalidSchedule(_)), "{c:?}: {e}");
    }
    let e = host
        .create_reminder(
            &s,
            req(|r| {
                r.delay = Some("1m".into());
                r.every = Some("1m".into());
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ReminderError::InvalidRequest(_)), "{e}");
    let e = host
        .create_reminder(&s, req(|r| r.handler = Some("nudge".into())))
        .await
        .unwrap_err();
    assert!(matches!(e, ReminderError::InvalidRequest(_)), "{e}");

    let task = host
        .start_session(StartSession {
            mode: SessionMode::Task,
            ..StartSession::default()
        })
        .await
        .unwrap()
        .session_id;
    let e = host
        .create_reminder(&task, req(|r| r.delay = Some("1m".into())))
        .await
        .unwrap_err();
    assert!(matches!(e, ReminderError::TaskSession(_)), "{e}");
    let e = host
        .create_reminder(&SessionId::generate(), req(|r| r.delay = Some("1m".into())))
        .await
        .unwrap_err();
    assert!(matches!(e, ReminderError::SessionNotFound(_)), "{e}");
    let e = host
        .create_reminder(
            &s,
            NewReminder {
                delay: Some("1m".into()),
                handler: Some("missing".into()),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ReminderError::UnknownHandler(_)), "{e}");
    assert!(host.list_reminders(None).is_empty());
}

#[tokio::test]
async fn next_fire_times_follow_the_schedule() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let at = |r: Reminder| r.next_fire_at.unwrap().to_rfc3339();
    let d = host
        .create_reminder(&s, req(|r| r.delay = Some("90s".into())))
        .await
        .unwrap();
    assert_eq!(at(d), "2026-11-30T12:01:30+00:00");
    let e = host
        .create_reminder(&s, req(|r| r.every = Some("2h".into())))
        .await
        .unwrap();
    assert_eq!(at(e), "2026-11-30T14:00:00+00:00");
    let c = host
        .create_reminder(&s, req(|r| r.cron = Some("30 9 * * MON".into())))
        .await
        .unwrap();
    assert_eq!(at(c), "2026-12-07T09:30:00+00:00");
    let a = host
        .create_reminder(&s, req(|r| r.at = Some("2026-12-01T10:00:00+02:00".into())))
        .await
        .unwrap();
    assert_eq!(at(a), "2026-12-01T08:00:00+00:00");
    assert_eq!(host.list_reminders(Some(&s)).len(), 4);
}

#[tokio::test]
async fn a_delay_fires_its_prompt_into_the_conversation_once() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(
            &s,
            NewReminder {
                delay: Some("10m".into()),
                prompt: Some("stand up".into()),
                until: Some("the user has stood up".into()),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap();
    clock.advance(TimeDelta::minutes(9));
    tokio::task::yield_now().await;
    assert_eq!(host.reminder(&r.id).unwrap().fire_count, 0);
    clock.advance(TimeDelta::minutes(1));
    let (_, text) = next_message(&host, &s, 0).await;
    assert!(text.starts_with("stand up"), "{text}");
    assert!(text.contains("the user has stood up"), "{text}");
    let done = wait_reminder(&host, &r.id, |r| r.fire_count == 1).await;
    assert_eq!(done.status, ReminderStatus::Completed);
    assert_eq!(done.next_fire_at, None);
    let result = session::settled_events(&host, &s)
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::TurnCompleted(_) => Some(()),
            _ => None,
        });
    assert!(result.is_some(), "the fire started a model turn");
}

#[tokio::test]
async fn every_keeps_firing_until_cancelled() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(&s, req(|r| r.every = Some("1m".into())))
        .await
        .unwrap();
    let mut from = 0;
    for n in 1..=3u64 {
        clock.advance(TimeDelta::minutes(1));
        let (index, text) = next_message(&host, &s, from).await;
        assert_eq!(text, "ping");
        from = index + 1;
        let now = wait_reminder(&host, &r.id, |r| r.fire_count == n).await;
        assert_eq!(
            now.next_fire_at,
            Some(start() + TimeDelta::minutes(n as i64 + 1))
        );
        host.wait_idle(&s).await;
    }
    let cancelled = host.cancel_reminder(&r.id, Some(&s)).await.unwrap();
    assert_eq!(cancelled.status, ReminderStatus::Cancelled);
    assert!(matches!(
        host.cancel_reminder(&r.id, None).await,
        Err(ReminderError::NotArmed(_))
    ));
    // Cancelled reminders are refused by a manual fire too.
    assert!(host.dispatch_reminder(&r.id).await.is_err());
    // Another session cannot cancel it.
    let other = chat(&host).await;
    let r2 = host
        .create_reminder(&s, req(|r| r.every = Some("1m".into())))
        .await
        .unwrap();
    assert!(matches!(
        host.cancel_reminder(&r2.id, Some(&other)).await,
        Err(ReminderError::NotFound(_))
    ));
}

#[tokio::test]
async fn handler_followup_starts_a_turn() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, true).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(
            &s,
            NewReminder {
                cron: Some("0 * * * *".into()),
                handler: Some("nudge".into()),
                args: Some(json!({"note": "hello"})),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap();
    let out = host.dispatch_reminder(&r.id).await.unwrap();
    assert_eq!(out.result, "delivered");
    assert!(out.turn_id.is_some());
    // A manual fire keeps the recurring schedule where it was.
    assert_eq!(out.reminder.next_fire_at, r.next_fire_at);
    assert_eq!(out.reminder.fire_count, 1);
    let (_, text) = next_message(&host, &s, 0).await;
    assert_eq!(text, "handler says hello");
}

#[tokio::test]
async fn reminders_survive_a_rebuild_and_lost_handlers_are_disarmed() {
    let (dir, p) = project();
    let root = dir.path().join("state");
    let clock = Arc::new(ManualClock::new(start()));
    let (s, prompt_id, handler_id, next) = {
        let host = host_at(&p, &root, &clock, true).await;
        let s = chat(&host).await;
        let a = host
            .create_reminder(&s, req(|r| r.every = Some("5m".into())))
            .await
            .unwrap();
        let b = host
            .create_reminder(
                &s,
                NewReminder {
                    delay: Some("1h".into()),
                    handler: Some("nudge".into()),
                    args: Some(json!({"note": "x"})),
                    ..NewReminder::default()
                },
            )
            .await
            .unwrap();
        host.shutdown(Duration::from_secs(5)).await;
        (s, a.id, b.id, a.next_fire_at)
    };
    let host = host_at(&p, &root, &clock, false).await;
    let kept = host.reminder(&prompt_id).unwrap();
    assert_eq!(kept.status, ReminderStatus::Armed);
    assert_eq!(kept.next_fire_at, next);
    let lost = host.reminder(&handler_id).unwrap();
    assert_eq!(lost.status, ReminderStatus::Disarmed);
    assert_eq!(lost.reason.as_deref(), Some(HANDLER_LOST));
    // The re-armed reminder fires on the rebuilt host's timer.
    clock.advance(TimeDelta::minutes(5));
    let (_, text) = next_message(&host, &s, 0).await;
    assert_eq!(text, "ping");
    // The disarmed state is durable too.
    let store = FsStore::open(&root).unwrap();
    let stored = store
        .kv_get("reminders", &handler_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored["status"], "disarmed");
    assert_eq!(stored["reason"], HANDLER_LOST);
}

#[tokio::test]
async fn timers_can_be_switched_off() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_without_timers(&p, &dir.path().join("state"), &clock).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(&s, req(|r| r.delay = Some("1m".into())))
        .await
        .unwrap();
    clock.advance(TimeDelta::hours(1));
    tokio::task::yield_now().await;
    assert_eq!(host.reminder(&r.id).unwrap().fire_count, 0);
    let out = host.dispatch_reminder(&r.id).await.unwrap();
    assert_eq!(out.reminder.status, ReminderStatus::Completed);
    let (_, text) = next_message(&host, &s, 0).await;
    assert_eq!(text, "ping");
    assert!(matches!(
        host.dispatch_reminder("rem_unknown").await,
        Err(ReminderError::NotFound(_))
    ));
}

#[tokio::test]
async fn builtin_tools_create_list_and_cancel_in_the_calling_session() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let names: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    for n in ["reminders_create", "reminders_list", "reminders_cancel"] {
        assert!(names.contains(&n.to_owned()), "{names:?}");
    }
    let started = host
        .start_session(StartSession {
            message: Some("please remind me about the oven".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let s = started.session_id;
    let result = host
        .wait_turn(&s, started.turn_id.as_ref().unwrap())
        .await
        .unwrap();
    assert!(result.ok, "{result:?}");
    let listed = host.list_reminders(Some(&s));
    assert_eq!(listed.len(), 1);
    assert_eq!(result.reply, format!("scheduled {}", listed[0].id));
    assert_eq!(listed[0].prompt.as_deref(), Some("check the oven"));
    assert_eq!(
        listed[0].next_fire_at,
        Some(start() + TimeDelta::minutes(10))
    );

    // list and cancel through direct calls bound to the session.
    let call = |name: &str, input| bdk_core::host::DirectCall {
        origin: bdk_core::host::CallOrigin::Agent,
        name: name.into(),
        input,
        session_id: Some(s.clone()),
        ..Default::default()
    };
    let out = host
        .call_tool(call("reminders_list", json!({})))
        .await
        .unwrap();
    assert!(!out.is_error);
    assert_eq!(out.result["reminders"][0]["id"], json!(listed[0].id));
    let out = host
        .call_tool(call("reminders_cancel", json!({"id": listed[0].id})))
        .await
        .unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    assert_eq!(out.result["status"], "cancelled");
    // Without a session the tools explain what they need.
    let out = host
        .call_tool(bdk_core::host::DirectCall {
            origin: bdk_core::host::CallOrigin::Agent,
            name: "reminders_list".into(),
            input: json!({}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(out.is_error);
}

/// Regression: a reminder whose session was deleted kept firing, and every
/// fire only added another delivery failure to `lastError`.
#[tokio::test]
async fn a_reminder_on_a_deleted_session_is_disarmed_instead_of_firing() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(&s, req(|r| r.every = Some("5m".into())))
        .await
        .unwrap();
    // Deleted behind the host's back, straight from the store.
    assert!(host.store().delete_session(&s).await.unwrap());
    clock.advance(TimeDelta::minutes(5));
    let r = wait_reminder(&host, &r.id, |r| r.status != ReminderStatus::Armed).await;
    assert_eq!(r.status, ReminderStatus::Disarmed);
    assert_eq!(r.reason.as_deref(), Some(SESSION_DELETED));
    assert_eq!(r.fire_count, 0, "{r:?}");
    assert_eq!(r.last_error, None);
    assert_eq!(r.next_fire_at, None);
    let stored = host
        .store()
        .kv_get("reminders", &r.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored["status"], "disarmed");
    assert_eq!(stored["reason"], SESSION_DELETED);
    // Later cadence points fire nothing more.
    clock.advance(TimeDelta::minutes(30));
    tokio::task::yield_now().await;
    assert_eq!(host.reminder(&r.id).unwrap(), r);
}

#[tokio::test]
async fn dispatching_a_reminder_of_a_deleted_session_disarms_it() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_without_timers(&p, &dir.path().join("state"), &clock).await;
    let s = chat(&host).await;
    let r = host
        .create_reminder(&s, req(|r| r.delay = Some("1h".into())))
        .await
        .unwrap();
    host.store().delete_session(&s).await.unwrap();
    let out = host.dispatch_reminder(&r.id).await.unwrap();
    assert_eq!(out.result, "disarmed");
    assert_eq!(out.turn_id, None);
    assert_eq!(out.reminder.status, ReminderStatus::Disarmed);
    assert_eq!(out.reminder.reason.as_deref(), Some(SESSION_DELETED));
    // Disarmed is final: a second dispatch is refused, not re-delivered.
    assert!(matches!(
        host.dispatch_reminder(&r.id).await,
        Err(ReminderError::NotArmed(_))
    ));
}

#[tokio::test]
async fn deleting_a_session_through_the_host_disarms_its_reminders() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let other = chat(&host).await;
    let mine = host
        .create_reminder(&s, req(|r| r.cron = Some("0 * * * *".into())))
        .await
        .unwrap();
    let done = host
        .create_reminder(&s, req(|r| r.delay = Some("1h".into())))
        .await
        .unwrap();
    host.cancel_reminder(&done.id, None).await.unwrap();
    let theirs = host
        .create_reminder(&other, req(|r| r.delay = Some("1h".into())))
        .await
        .unwrap();

    // Another principal may not delete it.
    let started = host
        .start_session(StartSession {
            principal: Some("alice".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    assert!(
        host.delete_session(&started.session_id, Some("mallory"))
            .await
            .is_err()
    );
    assert!(host.session(&started.session_id, None).await.is_ok());

    assert!(host.delete_session(&s, None).await.unwrap());
    assert!(host.session(&s, None).await.is_err());
    let mine = host.reminder(&mine.id).unwrap();
    assert_eq!(mine.status, ReminderStatus::Disarmed);
    assert_eq!(mine.reason.as_deref(), Some(SESSION_DELETED));
    // A cancelled reminder keeps its own ending; another session's stays armed.
    assert_eq!(
        host.reminder(&done.id).unwrap().status,
        ReminderStatus::Cancelled
    );
    assert_eq!(
        host.reminder(&theirs.id).unwrap().status,
        ReminderStatus::Armed
    );
    // Deleting again finds nothing.
    assert!(!host.delete_session(&s, None).await.unwrap());
}

#[tokio::test]
async fn a_restart_disarms_reminders_whose_session_is_gone() {
    let (dir, p) = project();
    let root = dir.path().join("state");
    let clock = Arc::new(ManualClock::new(start()));
    let (gone, kept) = {
        let host = host_at(&p, &root, &clock, false).await;
        let s = chat(&host).await;
        let t = chat(&host).await;
        let gone = host
            .create_reminder(&s, req(|r| r.delay = Some("1h".into())))
            .await
            .unwrap();
        let kept = host
            .create_reminder(&t, req(|r| r.delay = Some("1h".into())))
            .await
            .unwrap();
        host.shutdown(Duration::from_secs(5)).await;
        host.store().delete_session(&s).await.unwrap();
        (gone, kept)
    };
    let host = host_at(&p, &root, &clock, false).await;
    let gone = host.reminder(&gone.id).unwrap();
    assert_eq!(gone.status, ReminderStatus::Disarmed);
    assert_eq!(gone.reason.as_deref(), Some(SESSION_DELETED));
    assert_eq!(
        host.reminder(&kept.id).unwrap().status,
        ReminderStatus::Armed
    );
}

/// Two hosts over one store stand in for replicas: both have the reminder
/// armed and both timers wake at each due time, yet each fire is delivered
/// once, because a scheduled fire claims its due time in the store first.
#[tokio::test]
async fn hosts_sharing_a_store_deliver_each_due_time_once() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let build = || {
        Host::builder(p.clone(), Arc::clone(&store))
            .extension(Arc::new(Reminders::new()))
            .clock(Arc::clone(&clock) as Arc<dyn Clock>)
            .build()
    };
    let a = build().await.unwrap();
    let s = chat(&a).await;
    let r = a
        .create_reminder(&s, req(|r| r.every = Some("1m".into())))
        .await
        .unwrap();
    // B loads the reminder from the store when it starts.
    let b = build().await.unwrap();
    assert_eq!(b.reminder(&r.id).unwrap().status, ReminderStatus::Armed);
    for n in 1..=3i64 {
        let due = start() + TimeDelta::minutes(n);
        clock.advance(TimeDelta::minutes(1));
        // Both copies move past the due time: the winner by firing, the
        // loser by taking the claim's verdict.
        wait_reminder(&a, &r.id, |r| r.next_fire_at.is_some_and(|t| t > due)).await;
        wait_reminder(&b, &r.id, |r| r.next_fire_at.is_some_and(|t| t > due)).await;
        a.wait_idle(&s).await;
        b.wait_idle(&s).await;
        let pings = store
            .read(&s, 0)
            .await
            .unwrap()
            .iter()
            .filter(|e| matches!(&e.event, Event::MessageReceived(m) if m.message == "ping"))
            .count();
        assert_eq!(pings, n as usize, "fire {n} delivered {pings} pings in all");
    }
    // Only the latest claim is kept.
    let claims = store
        .kv_list(
            bdk_scheduler::reminders::CLAIMS_NAMESPACE,
            &format!("{}@", r.id),
        )
        .await
        .unwrap();
    assert_eq!(claims.len(), 1, "{claims:?}");
}

/// Replicas (hosts joined through a coordination cluster) act on the stored
/// reminder, not on a stale copy: one cancels a reminder another created,
/// the creator's timer then skips it, and a reminder outlives the replica
/// that created it once the others have resynced.
#[tokio::test]
async fn replicas_act_on_the_stored_reminder() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let cluster = bdk_store::MemoryCluster::new(Duration::from_secs(15));
    let build = |name: &str| {
        Host::builder(p.clone(), Arc::clone(&store))
            .extension(Arc::new(Reminders::new()))
            .clock(Arc::clone(&clock) as Arc<dyn Clock>)
            .coordination(cluster.join(name))
            .build()
    };
    let a = build("a").await.unwrap();
    let b = build("b").await.unwrap();
    let s = chat(&a).await;
    let ping = a
        .create_reminder(&s, req(|r| r.every = Some("1m".into())))
        .await
        .unwrap();
    let pong = a
        .create_reminder(
            &s,
            req(|r| {
                r.every = Some("1m".into());
                r.prompt = Some("pong".into());
            }),
        )
        .await
        .unwrap();
    // B has never loaded either, yet can cancel one: it reads the store.
    assert!(b.reminder(&ping.id).is_none());
    let cancelled = b.cancel_reminder(&pong.id, None).await.unwrap();
    assert_eq!(cancelled.status, ReminderStatus::Cancelled);
    assert_eq!(b.resync_reminders().await.unwrap(), 1);
    assert_eq!(b.reminder(&ping.id).unwrap().status, ReminderStatus::Armed);

    let count = |text: &'static str| {
        let store = Arc::clone(&store);
        let s = s.clone();
        async move {
            store
                .read(&s, 0)
                .await
                .unwrap()
                .iter()
                .filter(|e| matches!(&e.event, Event::MessageReceived(m) if m.message == text))
                .count()
        }
    };
    let due = start() + TimeDelta::minutes(1);
    clock.advance(TimeDelta::minutes(1));
    // A's copy of the cancelled reminder fires, finds it cancelled in the
    // store and takes that record instead of delivering.
    wait_reminder(&a, &pong.id, |r| r.status == ReminderStatus::Cancelled).await;
    wait_reminder(&a, &ping.id, |r| r.next_fire_at.is_some_and(|t| t > due)).await;
    wait_reminder(&b, &ping.id, |r| r.next_fire_at.is_some_and(|t| t > due)).await;
    a.wait_idle(&s).await;
    b.wait_idle(&s).await;
    assert_eq!(count("ping").await, 1);
    assert_eq!(count("pong").await, 0);

    // The creator goes away; B keeps the reminder firing.
    a.shutdown(Duration::from_secs(5)).await;
    drop(a);
    let after = store.next_index(&s).await.unwrap();
    clock.advance(TimeDelta::minutes(1));
    let (_, text) = next_message(&b, &s, after).await;
    assert_eq!(text, "ping");
    wait_reminder(&b, &ping.id, |r| {
        r.next_fire_at
            .is_some_and(|t| t > due + TimeDelta::minutes(1))
    })
    .await;
    b.wait_idle(&s).await;
    assert_eq!(count("ping").await, 2);
}

/// A stored record that does not read back is skipped by a resync, which
/// still arms the readable ones.
#[tokio::test]
async fn a_resync_skips_unreadable_records() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let host = host_at(&p, &dir.path().join("state"), &clock, false).await;
    let s = chat(&host).await;
    let store = host.store();
    store
        .kv_put(
            bdk_scheduler::reminders::KV_NAMESPACE,
            "rem_garbage",
            json!({"not": "a reminder"}),
        )
        .await
        .unwrap();
    let mut stored = host
        .create_reminder(&s, req(|r| r.every = Some("1m".into())))
        .await
        .unwrap();
    // Written by "another host": present in the store, unknown here.
    stored.id = "rem_from_elsewhere".into();
    store
        .kv_put(
            bdk_scheduler::reminders::KV_NAMESPACE,
            &stored.id,
            serde_json::to_value(&stored).unwrap(),
        )
        .await
        .unwrap();
    assert!(host.reminder("rem_from_elsewhere").is_none());
    assert_eq!(host.resync_reminders().await.unwrap(), 1);
    assert_eq!(
        host.reminder("rem_from_elsewhere").unwrap().status,
        ReminderStatus::Armed
    );
    assert!(host.reminder("rem_garbage").is_none());
}

/// Regression: a reminder's handler is called with no one to approve it, so
/// an approval tool as handler would have run unapproved when it fired.
#[tokio::test]
async fn an_approval_tool_cannot_be_a_reminder_handler() {
    let (dir, p) = project();
    let clock = Arc::new(ManualClock::new(start()));
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let guarded = native_tool(
        "guarded",
        "needs a person",
        |_n: Note, _ctx: ToolContext| async move { Ok(json!("ran")) },
    )
    .needs_approval(true);
    let host = Host::builder(p.clone(), store)
        .extension(Arc::new(Reminders::new()))
        .clock(Arc::clone(&clock) as Arc<dyn Clock>)
        .tool(Arc::new(guarded))
        .build()
        .await
        .unwrap();
    let s = chat(&host).await;
    let e = host
        .create_reminder(
            &s,
            NewReminder {
                delay: Some("1m".into()),
                handler: Some("guarded".into()),
                args: Some(json!({"note": "x"})),
                ..NewReminder::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, ReminderError::InvalidRequest(ref m) if m.contains("needs approval")),
        "{e}"
    );
    assert!(host.list_reminders(None).is_empty());
}

/// A native Rust tool reaches its session's reminders through
/// `Reminders::for_call`; a call bound to no session gets none.
#[tokio::test]
async fn native_tools_reach_the_reminders_of_their_session() {
    let (dir, p) = project();
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let later = native_tool(
        "later",
        "sets a reminder in the calling session",
        |n: Note, ctx: ToolContext| async move {
            let Some(reminders) = Reminders::for_call(&ctx) else {
                return Ok(json!("no session"));
            };
            let r = reminders
                .create(NewReminder {
                    delay: Some("1h".into()),
                    prompt: Some(n.note.clone()),
                    ..NewReminder::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            Ok(
                json!({"id": r.id, "listed": reminders.list().await.map_err(|e| e.to_string())?.len()}),
            )
        },
    );
    let host = Host::builder(p, store)
        .extension(Arc::new(Reminders::new().timers(false)))
        .tool(Arc::new(later))
        .build()
        .await
        .unwrap();
    let s = chat(&host).await;
    let call = |session: Option<SessionId>| bdk_core::host::DirectCall {
        name: "later".into(),
        input: json!({"note": "water the plants"}),
        session_id: session,
        ..Default::default()
    };
    let out = host.call_tool(call(Some(s.clone()))).await.unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    assert_eq!(out.result["listed"], json!(1));
    let id = out.result["id"].as_str().unwrap();
    let r = host.reminder(id).unwrap();
    assert_eq!(r.session_id, s);
    assert_eq!(r.prompt.as_deref(), Some("water the plants"));

    let out = host.call_tool(call(None)).await.unwrap();
    assert_eq!(out.result, json!("no session"));
}

/// A host built without the extension has no reminder tools, even when the
/// agent turns them on, and its reminder API says why it refuses.
#[tokio::test]
async fn a_host_without_the_extension_has_no_reminders() {
    let (dir, p) = project();
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(p, store).build().await.unwrap();
    assert!(
        !host
            .tools()
            .iter()
            .any(|t| t.name.starts_with("reminders_")),
        "{:?}",
        host.tools()
    );
    assert!(Reminders::of(&host).is_none());
    let s = chat(&host).await;
    let e = host.create_reminder(&s, req(|_| {})).await.unwrap_err();
    assert!(matches!(e, ReminderError::Detached), "{e:?}");
    assert!(host.list_reminders(None).is_empty());
}

/// The reminder tools the extension adds are the ones discovery knows by
/// name (for collisions, `direct` and `bdk info`).
#[tokio::test]
async fn the_extension_adds_exactly_the_tools_discovery_names() {
    let (dir, p) = project();
    let host = host_at(
        &p,
        &dir.path().join("state"),
        &Arc::new(ManualClock::new(start())),
        false,
    )
    .await;
    let mut added: Vec<String> = host
        .tools()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with("reminders"))
        .collect();
    added.sort();
    let mut named: Vec<String> = bdk_core::project::REMINDER_TOOLS
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    named.sort();
    assert_eq!(added, named);
}
