#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The shared session follower: a durable cursor that moves only past what
//! the follower acted on, survives a restart, stays put on an interrupted
//! event, and goes with its session.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bdk_core::follow::{self, Cursor, FollowStart, Handled, SessionFollower};
use bdk_core::host::FollowUp;
use bdk_events::Envelope;
use bdk_testkit::{AgentFolder, TestHost, session};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "test-follow";

/// What a recorder saw: (index, type) per event.
type Seen = Arc<Mutex<Vec<(u64, String)>>>;

/// Acts on `turn.completed` (counting them in its state), passes on the
/// rest, and is interrupted by the event at `interrupt_at`.
struct Recorder {
    seen: Seen,
    completed: u64,
    interrupt_at: Option<u64>,
}

#[async_trait]
impl SessionFollower for Recorder {
    fn restore(&mut self, saved: &Map<String, Value>) {
        self.completed = saved.get("completed").and_then(Value::as_u64).unwrap_or(0);
    }

    fn state(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("completed".into(), json!(self.completed));
        m
    }

    async fn on_event(&mut self, env: &Envelope, _cursor: &Cursor) -> Handled {
        if Some(env.index) == self.interrupt_at {
            return Handled::Interrupted;
        }
        self.seen
            .lock()
            .unwrap()
            .push((env.index, env.kind().to_owned()));
        if env.kind() == "turn.completed" {
            self.completed += 1;
            Handled::Acted
        } else {
            Handled::Passed
        }
    }
}

fn recorder(interrupt_at: Option<u64>) -> (Recorder, Seen) {
    let seen = Arc::default();
    let r = Recorder {
        seen: Arc::clone(&seen),
        completed: 0,
        interrupt_at,
    };
    (r, seen)
}

/// Runs a follower from `from` until it has seen `events` events, then
/// shuts it down (a chat session's stream stays open).
async fn follow_until(
    cursor: Cursor,
    from: u64,
    saved: Map<String, Value>,
    events: usize,
) -> Vec<(u64, String)> {
    let shutdown = CancellationToken::new();
    let (r, seen) = recorder(None);
    let task = tokio::spawn(follow::run(cursor, from, saved, shutdown.clone(), r));
    bdk_testkit::poll::until("the follower to read the session", || {
        let n = seen.lock().unwrap().len();
        std::future::ready(n >= events)
    })
    .await;
    shutdown.cancel();
    task.await.unwrap();
    seen.lock().unwrap().clone()
}

#[tokio::test]
async fn the_cursor_moves_past_what_was_acted_on_and_resumes_there() {
    let t = TestHost::start(&AgentFolder::new().rules("[[rules]]\nreply = \"ok\"\n")).await;
    let store = Arc::clone(t.host.store());
    let (started, _) = session::run(&t.host, "one").await;
    let id = started.session_id.clone();
    let key = format!("chan/{id}");
    let cursor = || Cursor::new(Arc::clone(&store), NAMESPACE, "test", "chan", &id);

    // No cursor yet: a new session starts at 0, and the start is recorded.
    let (from, saved) = cursor().start(FollowStart::New).await.unwrap();
    assert_eq!((from, saved.len()), (0, 0));
    assert_eq!(
        store.kv_get(NAMESPACE, &key).await.unwrap(),
        Some(json!({"next": 0}))
    );

    // The cursor ends just past the `turn.completed` the follower acted
    // on (not past the events it passed), with the follower's state.
    let events = session::settled_events(&t.host, &id).await;
    let first_done = events
        .iter()
        .find(|e| e.kind() == "turn.completed")
        .unwrap()
        .index;
    let seen = follow_until(cursor(), from, saved, events.len()).await;
    assert_eq!(seen.len(), events.len());
    let saved_after_one = json!({"next": first_done + 1, "completed": 1});
    assert_eq!(
        store.kv_get(NAMESPACE, &key).await.unwrap(),
        Some(saved_after_one.clone())
    );

    // The session goes on while nobody follows it.
    t.host
        .send(
            &id,
            FollowUp {
                message: "two".into(),
                ..FollowUp::default()
            },
        )
        .await
        .unwrap();
    let events = session::settled_events(&t.host, &id).await;
    let second_done = events
        .iter()
        .rev()
        .find(|e| e.kind() == "turn.completed")
        .unwrap()
        .index;

    // A restart resumes from the cursor with its state. An event cut short
    // by shutdown leaves the cursor before it.
    let (from, saved) = cursor().start(FollowStart::Resume).await.unwrap();
    assert_eq!(from, first_done + 1);
    assert_eq!(saved.get("completed"), Some(&json!(1)));
    let (r, seen) = recorder(Some(from));
    follow::run(cursor(), from, saved.clone(), CancellationToken::new(), r).await;
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(
        store.kv_get(NAMESPACE, &key).await.unwrap(),
        Some(saved_after_one)
    );

    // Followed again, it sees exactly what it had not acted on.
    let rest = events.len() - usize::try_from(from).unwrap();
    let seen = follow_until(cursor(), from, saved, rest).await;
    assert_eq!(seen.first().map(|s| s.0), Some(from));
    assert_eq!(
        store.kv_get(NAMESPACE, &key).await.unwrap(),
        Some(json!({"next": second_done + 1, "completed": 2}))
    );

    // Deleting a followed session ends its stream, and the cursor goes too.
    let (r, seen) = recorder(None);
    let task = tokio::spawn(follow::run(
        cursor(),
        0,
        Map::new(),
        CancellationToken::new(),
        r,
    ));
    bdk_testkit::poll::until("the follower to reach the live tail", || {
        let n = seen.lock().unwrap().len();
        std::future::ready(n == events.len())
    })
    .await;
    assert!(t.host.delete_session(&id, None).await.unwrap());
    tokio::time::timeout(std::time::Duration::from_secs(20), task)
        .await
        .expect("the follower ends with its session")
        .unwrap();
    assert_eq!(store.kv_get(NAMESPACE, &key).await.unwrap(), None);
}

#[tokio::test]
async fn a_session_is_followed_once_until_its_follower_ends() {
    let t = TestHost::start(&AgentFolder::new().rules("[[rules]]\nreply = \"ok\"\n")).await;
    let store = Arc::clone(t.host.store());
    let (started, _) = session::run(&t.host, "one").await;
    let id = started.session_id.clone();
    let cursor = || Cursor::new(Arc::clone(&store), NAMESPACE, "test", "chan", &id);
    let following = follow::Following::default();
    let shutdown = CancellationToken::new();

    let (first, seen) = recorder(None);
    assert!(
        following
            .spawn(cursor(), FollowStart::New, shutdown.clone(), first)
            .await
    );
    // Named again (a new message, a restart's resume): not followed twice.
    let (second, seen_twice) = recorder(None);
    assert!(
        !following
            .spawn(cursor(), FollowStart::New, shutdown.clone(), second)
            .await
    );
    assert!(following.contains(&id));
    let events = session::settled_events(&t.host, &id).await;
    bdk_testkit::poll::until("the follower to read the session", || {
        let n = seen.lock().unwrap().len();
        std::future::ready(n == events.len())
    })
    .await;
    assert!(seen_twice.lock().unwrap().is_empty());

    // Its end gives the session back, so it can be followed again.
    shutdown.cancel();
    bdk_testkit::poll::until("the follower to give its session back", || {
        std::future::ready(!following.contains(&id))
    })
    .await;
    let (again, _) = recorder(None);
    assert!(
        following
            .spawn(
                cursor(),
                FollowStart::Resume,
                CancellationToken::new(),
                again
            )
            .await
    );
}
