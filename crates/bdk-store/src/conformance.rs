//! The store conformance suite: the behaviour every [`Store`] engine must
//! show, written once against the port so the file-system engine and the
//! PostgreSQL engine are held to the same cases.
//!
//! An engine's tests implement [`Harness`] (how to get a fresh store and how
//! to reopen one, simulating a restart) and call [`run_all`] from a
//! multi-threaded Tokio runtime:
//!
//! ```no_run
//! # use bdk_store::conformance::{FsHarness, run_all};
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn conformance() {
//!     run_all(&FsHarness::default()).await;
//! }
//! ```
//!
//! Each case is also a public function (`case_*`) so a failing case can be
//! run alone while debugging. Failures are panics; [`run_all`] runs every case
//! even after a failure and then panics with the names of all failed cases.
//!
//! Engine-independent rules the cases pin down beyond the trait docs:
//! timestamps survive at millisecond precision; `update_session` keeps the
//! stored continuation token; key-value keys and namespaces are opaque text
//! (anything but empty or NUL), while file paths, session ids, call ids and
//! artifact ids are structured names whose traversal forms are refused with
//! [`StoreError::Invalid`]; `file_list` and `kv_list` match a plain string
//! prefix.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test suite: a failed expectation panics and names its case"
)]

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bdk_events::ids::new_http_token;
use bdk_events::{
    Envelope, Event, MessageAppended, SessionId, SessionMode, SessionWaiting, TurnId,
};
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};

use crate::{
    ArtifactFilter, ArtifactRecord, EventStream, FsStore, NewEvent, Result, SessionRecord, Store,
    StoreError, TokenSwap,
};

/// How an engine's tests hand stores to the suite.
pub trait Harness: Send + Sync {
    /// The engine under test.
    type S: Store;

    /// A store over new, empty backing state. For engines with a local state
    /// root, the root's parent directory should hold nothing else, so the
    /// suite can check that refused names wrote nothing beside the root.
    fn fresh(&self) -> impl Future<Output = Self::S> + Send;

    /// Drops `store` and opens the same backing state again, as a restarted
    /// process would.
    fn reopen(&self, store: Self::S) -> impl Future<Output = Self::S> + Send;
}

/// [`Harness`] for [`FsStore`]: every fresh store gets its own temp
/// directory (kept until the harness is dropped) with the state root at
/// `<temp>/state`.
#[derive(Default)]
pub struct FsHarness {
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

impl Harness for FsHarness {
    type S = FsStore;

    async fn fresh(&self) -> FsStore {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let store = FsStore::open(dir.path().join("state")).expect("open a fresh FsStore");
        self.dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(dir);
        store
    }

    async fn reopen(&self, store: FsStore) -> FsStore {
        let root = store.state_root();
        drop(store);
        FsStore::open(root).expect("reopen the FsStore")
    }
}

/// How long the suite waits for one streamed event before calling it a hang.
const DEADLINE: Duration = Duration::from_secs(20);

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// The name of every case, in the order [`run_all`] runs them.
        pub const CASES: &[&str] = &[$(stringify!($name)),*];

        /// Runs every case against stores from `h`, then fails listing every
        /// case that failed.
        pub async fn run_all<H: Harness>(h: &H) {
            let mut failed: Vec<String> = Vec::new();
            $(
                tracing::info!(case = stringify!($name), "store conformance case");
                if let Err(payload) = AssertUnwindSafe($name(h)).catch_unwind().await {
                    failed.push(format!("{}: {}", stringify!($name), panic_message(&*payload)));
                }
            )*
            assert!(
                failed.is_empty(),
                "{} of {} store conformance cases failed:\n{}",
                failed.len(),
                CASES.len(),
                failed.join("\n")
            );
        }
    };
}

cases!(
    case_session_crud,
    case_duplicate_create,
    case_list_order,
    case_update_keeps_token,
    case_unknown_session,
    case_indices_gapless,
    case_sessions_are_independent,
    case_concurrent_appends,
    case_batch_atomic,
    case_empty_batch,
    case_reopen_continues,
    case_read_bounds,
    case_subscribe_replay_then_live,
    case_subscribe_race,
    case_subscribe_from_middle,
    case_subscribe_past_end,
    case_subscribe_slow_reader,
    case_many_subscribers,
    case_subscribe_ends_on_delete,
    case_token_cas_race,
    case_token_stale,
    case_token_deferred,
    case_find_by_token,
    case_find_by_token_naming_another_session,
    case_kv,
    case_kv_keys_are_opaque,
    case_kv_put_if_absent,
    case_kv_put_if_absent_race,
    case_files,
    case_artifacts,
    case_hostile_names,
    case_local_dirs,
);

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked".to_owned()
    }
}

// ---------------------------------------------------------------- helpers

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

fn record_at(id: &SessionId, created_at: DateTime<Utc>) -> SessionRecord {
    SessionRecord {
        id: id.clone(),
        mode: SessionMode::Chat,
        channel: "http".to_owned(),
        principal: Some("alice".to_owned()),
        continuation_token: new_http_token(id),
        title: Some("a title".to_owned()),
        purpose: None,
        dry_run: false,
        as_of: None,
        created_at,
        updated_at: created_at,
        extra: json!({"channelState": {"thread": 7}}),
    }
}

async fn created(store: &impl Store) -> SessionRecord {
    let record = record_at(&SessionId::generate(), now());
    store
        .create_session(record.clone())
        .await
        .expect("create a session");
    record
}

fn delta(text: impl Into<String>) -> NewEvent {
    NewEvent::session(MessageAppended { delta: text.into() })
}

fn waiting() -> NewEvent {
    NewEvent::session(SessionWaiting {})
}

fn text(env: &Envelope) -> &str {
    match &env.event {
        Event::MessageAppended(d) => &d.delta,
        other => panic!("expected message.appended, got {}", other.kind()),
    }
}

fn indices(envs: &[Envelope]) -> Vec<u64> {
    envs.iter().map(|e| e.index).collect()
}

fn range(from: u64, to: u64) -> Vec<u64> {
    (from..to).collect()
}

async fn append_n(store: &impl Store, id: &SessionId, n: usize, tag: &str) {
    for i in 0..n {
        store
            .append(id, vec![delta(format!("{tag}{i}"))])
            .await
            .expect("append");
    }
}

/// Takes exactly `n` events, failing on an error item, an early end, or a
/// stall longer than [`DEADLINE`].
async fn take(stream: &mut EventStream, n: usize) -> Vec<Envelope> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(DEADLINE, stream.next()).await {
            Err(_) => panic!("stream stalled after {} of {n} events", out.len()),
            Ok(None) => panic!("stream ended after {} of {n} events", out.len()),
            Ok(Some(Err(e))) => panic!("stream failed after {} events: {e}", out.len()),
            Ok(Some(Ok(env))) => out.push(env),
        }
    }
    out
}

/// Polls once: with nothing appended since the last event taken, a stream
/// must have no further item ready (an item now would be a duplicate).
#[track_caller]
fn assert_nothing_ready(stream: &mut EventStream, when: &str) {
    if let Some(item) = stream.next().now_or_never() {
        panic!("{when}: the stream yielded {item:?} with nothing appended");
    }
}

/// Waits for the stream to end, returning the events it yielded first.
async fn drain_to_end(stream: &mut EventStream) -> Vec<Envelope> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, stream.next()).await {
            Err(_) => panic!("stream did not end (yielded {} events first)", out.len()),
            Ok(None) => return out,
            Ok(Some(Err(e))) => panic!("stream failed instead of ending: {e}"),
            Ok(Some(Ok(env))) => out.push(env),
        }
    }
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("{what}: expected StoreError::Invalid, got {other:?}"),
    }
}

#[track_caller]
fn assert_not_found<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::SessionNotFound(_)) => {}
        other => panic!("{what}: expected StoreError::SessionNotFound, got {other:?}"),
    }
}

fn listing(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| {
                e.expect("read a dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

// ---------------------------------------------------------------- sessions

/// Create, get, list, update and delete a session.
pub async fn case_session_crud<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let record = created(&store).await;
    assert_eq!(
        store.get_session(&record.id).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(store.list_sessions().await.unwrap(), vec![record.clone()]);

    let mut changed = record.clone();
    changed.title = Some("renamed".to_owned());
    changed.dry_run = true;
    changed.as_of = Some(now() - TimeDelta::days(1));
    changed.updated_at = now() + TimeDelta::seconds(1);
    store.update_session(changed.clone()).await.unwrap();
    assert_eq!(store.get_session(&record.id).await.unwrap(), Some(changed));

    store.append(&record.id, vec![delta("x")]).await.unwrap();
    assert!(store.delete_session(&record.id).await.unwrap());
    assert_eq!(store.get_session(&record.id).await.unwrap(), None);
    assert_eq!(store.list_sessions().await.unwrap(), vec![]);
    assert!(
        !store.delete_session(&record.id).await.unwrap(),
        "second delete"
    );
    assert_not_found(store.read(&record.id, 0).await, "read after delete");

    // The id can be used again and starts from index 0.
    store.create_session(record.clone()).await.unwrap();
    let envs = store
        .append(&record.id, vec![delta("again")])
        .await
        .unwrap();
    assert_eq!(indices(&envs), vec![0]);
}

/// Creating an existing id fails and leaves the stored record alone.
pub async fn case_duplicate_create<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let record = created(&store).await;
    let mut twin = record.clone();
    twin.title = Some("impostor".to_owned());
    match store.create_session(twin).await {
        Err(StoreError::SessionExists(_)) => {}
        other => panic!("expected SessionExists, got {other:?}"),
    }
    assert_eq!(store.get_session(&record.id).await.unwrap(), Some(record));
}

/// Sessions list oldest first, ties broken by id.
pub async fn case_list_order<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let t0 = now();
    let ids: Vec<SessionId> = (0..4).map(|_| SessionId::generate()).collect();
    // Created out of order; two share a timestamp.
    let plan = [(2, 20), (0, 0), (3, 10), (1, 10)];
    for (i, secs) in plan {
        let record = record_at(&ids[i], t0 + TimeDelta::seconds(secs));
        store.create_session(record).await.unwrap();
    }
    let listed: Vec<SessionId> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut tied = [ids[1].clone(), ids[3].clone()];
    tied.sort();
    let expected = vec![
        ids[0].clone(),
        tied[0].clone(),
        tied[1].clone(),
        ids[2].clone(),
    ];
    assert_eq!(listed, expected);
}

/// `update_session` cannot undo a token rotation: it keeps the stored token.
pub async fn case_update_keeps_token<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let before = created(&store).await;
    let rotated = new_http_token(&before.id);
    assert_eq!(
        store
            .rotate_token(&before.id, &before.continuation_token, &rotated)
            .await
            .unwrap(),
        TokenSwap::Rotated
    );
    // An update built from the record read before the rotation.
    let mut stale = before.clone();
    stale.title = Some("updated".to_owned());
    store.update_session(stale).await.unwrap();
    let now = store.get_session(&before.id).await.unwrap().unwrap();
    assert_eq!(now.title.as_deref(), Some("updated"));
    assert_eq!(now.continuation_token, rotated);
}

/// Every per-session operation on an unknown id reports it, and none of
/// them creates the session.
pub async fn case_unknown_session<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = SessionId::generate();
    assert_eq!(store.get_session(&id).await.unwrap(), None);
    assert_not_found(store.append(&id, vec![delta("x")]).await, "append");
    assert_not_found(store.append(&id, vec![waiting()]).await, "boundary append");
    assert_not_found(store.append(&id, vec![]).await, "empty append");
    assert_not_found(store.read(&id, 0).await, "read");
    assert_not_found(store.next_index(&id).await, "next_index");
    assert_not_found(store.subscribe(&id, 0).await.map(|_| ()), "subscribe");
    assert_not_found(store.rotate_token(&id, "a", "b").await, "rotate_token");
    assert_not_found(
        store
            .rotate_token_deferred(&id, &new_http_token(&id), &new_http_token(&id))
            .await,
        "rotate_token_deferred",
    );
    assert_not_found(
        store.update_session(record_at(&id, now())).await,
        "update_session",
    );
    assert!(!store.delete_session(&id).await.unwrap());
    assert_eq!(store.get_session(&id).await.unwrap(), None);
    assert_eq!(store.list_sessions().await.unwrap(), vec![]);
}

// ---------------------------------------------------------------- appends

/// Indices start at 0 and grow by one per event, singles and batches alike.
pub async fn case_indices_gapless<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    assert_eq!(store.next_index(&id).await.unwrap(), 0);
    let turn = TurnId::generate();
    let mut returned = Vec::new();
    for i in 0..10 {
        returned.extend(
            store
                .append(&id, vec![delta(format!("s{i}"))])
                .await
                .unwrap(),
        );
    }
    let batch: Vec<NewEvent> = (0..5)
        .map(|i| {
            NewEvent::turn(
                &turn,
                MessageAppended {
                    delta: format!("b{i}"),
                },
            )
        })
        .collect();
    returned.extend(store.append(&id, batch).await.unwrap());
    returned.extend(store.append(&id, vec![waiting()]).await.unwrap());
    assert_eq!(indices(&returned), range(0, 16));
    assert_eq!(store.next_index(&id).await.unwrap(), 16);

    let read = store.read(&id, 0).await.unwrap();
    assert_eq!(read, returned, "read returns what append returned");
    assert!(read.iter().all(|e| e.session_id == id));
    assert!(
        read[10..15]
            .iter()
            .all(|e| e.turn_id.as_ref() == Some(&turn))
    );
    assert!(read[..10].iter().all(|e| e.turn_id.is_none()));
    assert_eq!(read[15].kind(), "session.waiting");
}

/// Each session has its own numbering.
pub async fn case_sessions_are_independent<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let a = created(&store).await.id;
    let b = created(&store).await.id;
    for i in 0..6 {
        let target = if i % 3 == 0 { &b } else { &a };
        store
            .append(target, vec![delta(format!("{i}"))])
            .await
            .unwrap();
    }
    assert_eq!(indices(&store.read(&a, 0).await.unwrap()), range(0, 4));
    assert_eq!(indices(&store.read(&b, 0).await.unwrap()), range(0, 2));
}

/// 16 tasks x 200 appends: indices 0..3199 exactly once each, in file order,
/// and every task's events in the order it appended them.
pub async fn case_concurrent_appends<H: Harness>(h: &H) {
    const TASKS: usize = 16;
    const EACH: usize = 200;
    let store = Arc::new(h.fresh().await);
    let id = created(&*store).await.id;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (store, id) = (store.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(EACH);
            for i in 0..EACH {
                let envs = store
                    .append(&id, vec![delta(format!("{t}:{i}"))])
                    .await
                    .unwrap();
                got.push(envs[0].index);
            }
            got
        }));
    }
    let mut returned = Vec::new();
    for task in tasks {
        let got = task.await.expect("appender task");
        assert!(got.windows(2).all(|w| w[0] < w[1]), "a task's indices grow");
        returned.extend(got);
    }
    returned.sort_unstable();
    let total = (TASKS * EACH) as u64;
    assert_eq!(
        returned,
        range(0, total),
        "every index returned exactly once"
    );

    let read = store.read(&id, 0).await.unwrap();
    assert_eq!(indices(&read), range(0, total));
    let mut next_of_task: HashMap<usize, usize> = HashMap::new();
    for env in &read {
        let (t, i) = text(env).split_once(':').unwrap();
        let (t, i): (usize, usize) = (t.parse().unwrap(), i.parse().unwrap());
        let next = next_of_task.entry(t).or_default();
        assert_eq!(i, *next, "task {t}'s events are in its order, each once");
        *next += 1;
    }
    assert_eq!(next_of_task.len(), TASKS);
    assert!(next_of_task.values().all(|&n| n == EACH));
}

/// Concurrent batches land whole and in order: no interleaving inside a batch.
pub async fn case_batch_atomic<H: Harness>(h: &H) {
    const TASKS: usize = 4;
    const BATCHES: usize = 25;
    const SIZE: usize = 8;
    let store = Arc::new(h.fresh().await);
    let id = created(&*store).await.id;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (store, id) = (store.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            for b in 0..BATCHES {
                let mut batch: Vec<NewEvent> =
                    (0..SIZE).map(|k| delta(format!("{t}:{b}:{k}"))).collect();
                // Every other batch ends at a boundary, which takes the
                // durable path of engines that have one.
                if b % 2 == 1 {
                    batch.push(waiting());
                }
                let len = batch.len();
                let envs = store.append(&id, batch).await.unwrap();
                assert_eq!(envs.len(), len);
                let first = envs[0].index;
                assert_eq!(indices(&envs), range(first, first + len as u64));
                for (k, env) in envs.iter().take(SIZE).enumerate() {
                    assert_eq!(text(env), format!("{t}:{b}:{k}"));
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("batch task");
    }
    let read = store.read(&id, 0).await.unwrap();
    let total = TASKS * BATCHES * SIZE + TASKS * (BATCHES / 2);
    assert_eq!(indices(&read), range(0, total as u64));
    let mut i = 0;
    while i < read.len() {
        let head = text(&read[i]).to_owned();
        let (t, rest) = head.split_once(':').unwrap();
        let (b, k) = rest.split_once(':').unwrap();
        assert_eq!(k, "0", "a batch starts at its first event");
        for k in 0..SIZE {
            assert_eq!(
                text(&read[i + k]),
                format!("{t}:{b}:{k}"),
                "batch is contiguous"
            );
        }
        i += SIZE;
        if b.parse::<usize>().unwrap() % 2 == 1 {
            assert_eq!(read[i].kind(), "session.waiting");
            i += 1;
        }
    }
}

/// An empty batch records nothing and returns nothing.
pub async fn case_empty_batch<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    store.append(&id, vec![delta("a")]).await.unwrap();
    assert_eq!(store.append(&id, vec![]).await.unwrap(), vec![]);
    assert_eq!(store.next_index(&id).await.unwrap(), 1);
    let envs = store.append(&id, vec![delta("b")]).await.unwrap();
    assert_eq!(indices(&envs), vec![1]);
}

/// After a restart, records, events and data are all there and numbering
/// continues where it stopped.
pub async fn case_reopen_continues<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let record = created(&store).await;
    let id = record.id.clone();
    append_n(&store, &id, 5, "pre").await;
    store.append(&id, vec![waiting()]).await.unwrap();
    append_n(&store, &id, 3, "post").await;
    let before = store.read(&id, 0).await.unwrap();
    store.kv_put("ns", "k", json!({"v": 1})).await.unwrap();
    store
        .file_put("notes/a.txt", b"hello".to_vec())
        .await
        .unwrap();
    let art = artifact("art_reopen", None, "report", None, now());
    store
        .artifact_put(art.clone(), b"body".to_vec())
        .await
        .unwrap();

    let store = h.reopen(store).await;
    assert_eq!(store.get_session(&id).await.unwrap(), Some(record));
    assert_eq!(store.next_index(&id).await.unwrap(), 9);
    assert_eq!(store.read(&id, 0).await.unwrap(), before);
    let envs = store.append(&id, vec![delta("after")]).await.unwrap();
    assert_eq!(indices(&envs), vec![9]);
    assert_eq!(
        store.kv_get("ns", "k").await.unwrap(),
        Some(json!({"v": 1}))
    );
    assert_eq!(
        store.file_get("notes/a.txt").await.unwrap(),
        Some(b"hello".to_vec())
    );
    assert_eq!(store.artifact_get("art_reopen").await.unwrap(), Some(art));

    // A second restart right after appends keeps them too.
    let store = h.reopen(store).await;
    assert_eq!(indices(&store.read(&id, 0).await.unwrap()), range(0, 10));
}

/// `read(from)` returns exactly the events at and after `from`.
pub async fn case_read_bounds<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    assert_eq!(store.read(&id, 0).await.unwrap(), vec![]);
    // Enough events to cross any internal stride an engine may keep.
    let batch: Vec<NewEvent> = (0..600).map(|i| delta(format!("{i}"))).collect();
    store.append(&id, batch).await.unwrap();
    for from in [0u64, 1, 255, 256, 257, 511, 512, 599] {
        let got = store.read(&id, from).await.unwrap();
        assert_eq!(indices(&got), range(from, 600), "read from {from}");
        assert_eq!(text(&got[0]), from.to_string());
    }
    assert_eq!(store.read(&id, 600).await.unwrap(), vec![]);
    assert_eq!(store.read(&id, 10_000).await.unwrap(), vec![]);
    assert_eq!(store.read(&id, u64::MAX).await.unwrap(), vec![]);
}

// ---------------------------------------------------------------- subscribe

/// Replay of recorded events, then live ones, then nothing else.
pub async fn case_subscribe_replay_then_live<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    append_n(&store, &id, 5, "old").await;
    let mut stream = store.subscribe(&id, 0).await.unwrap();
    append_n(&store, &id, 5, "new").await;
    store.append(&id, vec![waiting()]).await.unwrap();
    let got = take(&mut stream, 11).await;
    assert_eq!(got, store.read(&id, 0).await.unwrap());
}

/// The seam under fire: an appender runs while the subscription is opened.
/// Every round must see exactly `0..N` with no gap and no duplicate.
pub async fn case_subscribe_race<H: Harness>(h: &H) {
    const BEFORE: usize = 25;
    const DURING: usize = 200;
    let store = Arc::new(h.fresh().await);
    for round in 0..10usize {
        let id = created(&*store).await.id;
        append_n(&*store, &id, BEFORE, "before").await;
        let appender = {
            let (store, id) = (store.clone(), id.clone());
            tokio::spawn(async move {
                for i in 0..DURING {
                    let event = if i % 50 == 49 {
                        waiting()
                    } else {
                        delta(format!("{i}"))
                    };
                    store.append(&id, vec![event]).await.unwrap();
                    if i % 8 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        };
        // Vary where in the appender's run the subscription lands.
        for _ in 0..round * 3 {
            tokio::task::yield_now().await;
        }
        let from = if round % 2 == 0 { 0 } else { 10 };
        let mut stream = store.subscribe(&id, from).await.unwrap();
        let total = (BEFORE + DURING) as u64;
        let got = take(&mut stream, (total - from) as usize).await;
        assert_eq!(indices(&got), range(from, total), "round {round}");
        appender.await.expect("appender task");
        assert_nothing_ready(&mut stream, &format!("round {round}"));
        // Nothing extra is pending: the next event is the next index.
        store.append(&id, vec![delta("marker")]).await.unwrap();
        let next = take(&mut stream, 1).await;
        assert_eq!(
            next[0].index, total,
            "round {round}: no duplicate after the seam"
        );
    }
}

/// Subscribing from the middle skips what came before.
pub async fn case_subscribe_from_middle<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    append_n(&store, &id, 20, "").await;
    let mut stream = store.subscribe(&id, 10).await.unwrap();
    append_n(&store, &id, 10, "live").await;
    let got = take(&mut stream, 20).await;
    assert_eq!(indices(&got), range(10, 30));
}

/// Subscribing past the end waits for that index and skips the events
/// before it.
pub async fn case_subscribe_past_end<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    append_n(&store, &id, 3, "").await;
    let mut stream = store.subscribe(&id, 6).await.unwrap();
    append_n(&store, &id, 5, "").await;
    let got = take(&mut stream, 2).await;
    assert_eq!(indices(&got), vec![6, 7]);
}

/// A subscriber that does not poll while thousands of events are appended
/// still gets every one of them, in order, then keeps following.
pub async fn case_subscribe_slow_reader<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    let mut stream = store.subscribe(&id, 0).await.unwrap();
    append_n(&store, &id, 3000, "").await;
    let got = take(&mut stream, 3000).await;
    assert_eq!(indices(&got), range(0, 3000));
    assert_nothing_ready(&mut stream, "after catching up");
    store.append(&id, vec![delta("tail")]).await.unwrap();
    assert_eq!(take(&mut stream, 1).await[0].index, 3000);
}

/// Subscribers that join at different moments see the same sequence.
pub async fn case_many_subscribers<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    let mut early = store.subscribe(&id, 0).await.unwrap();
    append_n(&store, &id, 50, "a").await;
    let mut middle = store.subscribe(&id, 0).await.unwrap();
    for b in 0..5 {
        let batch: Vec<NewEvent> = (0..10).map(|i| delta(format!("b{b}-{i}"))).collect();
        store.append(&id, batch).await.unwrap();
    }
    let mut late = store.subscribe(&id, 0).await.unwrap();
    let recorded = store.read(&id, 0).await.unwrap();
    assert_eq!(recorded.len(), 100);
    assert_eq!(take(&mut early, 100).await, recorded);
    assert_eq!(take(&mut middle, 100).await, recorded);
    assert_eq!(take(&mut late, 100).await, recorded);
}

/// Deleting a session ends its subscriptions; new ones are refused.
pub async fn case_subscribe_ends_on_delete<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let id = created(&store).await.id;
    let mut live = store.subscribe(&id, 0).await.unwrap();
    append_n(&store, &id, 3, "").await;
    assert_eq!(indices(&take(&mut live, 3).await), range(0, 3));
    let mut unread = store.subscribe(&id, 0).await.unwrap();
    assert!(store.delete_session(&id).await.unwrap());
    assert_eq!(drain_to_end(&mut live).await, vec![]);
    let partial = drain_to_end(&mut unread).await;
    assert_eq!(indices(&partial), range(0, partial.len() as u64));
    assert_not_found(
        store.subscribe(&id, 0).await.map(|_| ()),
        "subscribe after delete",
    );
}

// ---------------------------------------------------------------- tokens

/// 32 concurrent rotations from the same token: exactly one wins.
pub async fn case_token_cas_race<H: Harness>(h: &H) {
    let store = Arc::new(h.fresh().await);
    let record = created(&*store).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (store, id, expected) = (
            store.clone(),
            record.id.clone(),
            record.continuation_token.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let new = format!("http:rotated-{i}");
            let swap = store.rotate_token(&id, &expected, &new).await.unwrap();
            (swap, new)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (swap, new) = task.await.expect("rotation task");
        if swap == TokenSwap::Rotated {
            winners.push(new);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one rotation wins: {winners:?}");
    let stored = store.get_session(&record.id).await.unwrap().unwrap();
    assert_eq!(stored.continuation_token, winners[0]);
    assert_eq!(
        store
            .find_by_token(&winners[0])
            .await
            .unwrap()
            .map(|r| r.id),
        Some(record.id.clone())
    );
    assert_eq!(
        store
            .find_by_token(&record.continuation_token)
            .await
            .unwrap(),
        None
    );
}

/// A stale or forged token never rotates.
pub async fn case_token_stale<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let record = created(&store).await;
    let id = &record.id;
    assert_eq!(
        store
            .rotate_token(id, "http:forged", "http:x")
            .await
            .unwrap(),
        TokenSwap::Stale
    );
    assert_eq!(
        store
            .rotate_token(id, &record.continuation_token, "http:b")
            .await
            .unwrap(),
        TokenSwap::Rotated
    );
    assert_eq!(
        store
            .rotate_token(id, &record.continuation_token, "http:c")
            .await
            .unwrap(),
        TokenSwap::Stale
    );
    let stored = store.get_session(id).await.unwrap().unwrap();
    assert_eq!(stored.continuation_token, "http:b");
    assert_eq!(
        store.rotate_token(id, "http:b", "http:c").await.unwrap(),
        TokenSwap::Rotated
    );
}

/// A deferred rotation is the same compare-and-swap: every reader sees the
/// new token as soon as it returns, the session's next boundary append or
/// `commit_token` makes it durable, an update keeps it, a swap back undoes
/// it and a delete takes it along.
pub async fn case_token_deferred<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let [a, b, c, d] = [
        created(&store).await,
        created(&store).await,
        created(&store).await,
        created(&store).await,
    ];
    let next = |r: &SessionRecord| new_http_token(&r.id);
    let (a1, b1, c1, d1) = (next(&a), next(&b), next(&c), next(&d));
    let found = |token: String| {
        let store = &store;
        async move { store.find_by_token(&token).await.unwrap().map(|r| r.id) }
    };

    assert_eq!(
        store
            .rotate_token_deferred(&a.id, &next(&a), &a1)
            .await
            .unwrap(),
        TokenSwap::Stale
    );
    assert_eq!(
        store
            .rotate_token_deferred(&a.id, &a.continuation_token, &a1)
            .await
            .unwrap(),
        TokenSwap::Rotated
    );
    let stored = store.get_session(&a.id).await.unwrap().unwrap();
    assert_eq!(stored.continuation_token, a1);
    assert_eq!(found(a1.clone()).await, Some(a.id.clone()));
    assert_eq!(found(a.continuation_token.clone()).await, None);
    let listed = store.list_sessions().await.unwrap();
    let listed_a = listed.iter().find(|r| r.id == a.id).unwrap();
    assert_eq!(listed_a.continuation_token, a1);
    // The old token lost the swap, deferred or not.
    for stale in [
        store
            .rotate_token_deferred(&a.id, &a.continuation_token, &next(&a))
            .await,
        store
            .rotate_token(&a.id, &a.continuation_token, &next(&a))
            .await,
    ] {
        assert_eq!(stale.unwrap(), TokenSwap::Stale);
    }
    let mut renamed = stored.clone();
    renamed.title = Some("renamed".into());
    renamed.continuation_token = a.continuation_token.clone();
    store.update_session(renamed).await.unwrap();
    store.append(&a.id, vec![waiting()]).await.unwrap();

    store
        .rotate_token_deferred(&b.id, &b.continuation_token, &b1)
        .await
        .unwrap();
    store.commit_token(&b.id).await.unwrap();
    // Nothing pending: nothing to do.
    store.commit_token(&b.id).await.unwrap();

    store
        .rotate_token_deferred(&c.id, &c.continuation_token, &c1)
        .await
        .unwrap();
    assert_eq!(
        store
            .rotate_token(&c.id, &c1, &c.continuation_token)
            .await
            .unwrap(),
        TokenSwap::Rotated
    );

    store
        .rotate_token_deferred(&d.id, &d.continuation_token, &d1)
        .await
        .unwrap();
    assert!(store.delete_session(&d.id).await.unwrap());
    assert_eq!(found(d1.clone()).await, None);

    let store = h.reopen(store).await;
    let token = |id: SessionId| {
        let store = &store;
        async move {
            let record = store.get_session(&id).await.unwrap();
            record.map(|r| (r.continuation_token, r.title))
        }
    };
    assert_eq!(
        token(a.id.clone()).await,
        Some((a1.clone(), Some("renamed".into())))
    );
    assert_eq!(token(b.id.clone()).await, Some((b1, b.title.clone())));
    assert_eq!(
        token(c.id.clone()).await,
        Some((c.continuation_token.clone(), c.title.clone()))
    );
    assert_eq!(token(d.id.clone()).await, None);
    assert_eq!(
        store.find_by_token(&a1).await.unwrap().map(|r| r.id),
        Some(a.id.clone())
    );
}

/// Lookup by token follows rotations, deletes and restarts.
pub async fn case_find_by_token<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let a = created(&store).await;
    let b = created(&store).await;
    assert_eq!(
        store.find_by_token(&a.continuation_token).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(
        store.find_by_token(&b.continuation_token).await.unwrap(),
        Some(b.clone())
    );
    assert_eq!(store.find_by_token("http:nobody").await.unwrap(), None);

    let rotated = new_http_token(&a.id);
    store
        .rotate_token(&a.id, &a.continuation_token, &rotated)
        .await
        .unwrap();
    assert_eq!(
        store.find_by_token(&a.continuation_token).await.unwrap(),
        None
    );
    let found = store.find_by_token(&rotated).await.unwrap().unwrap();
    assert_eq!(found.id, a.id);
    assert_eq!(found.continuation_token, rotated);

    // A session created after the first lookup is found too.
    let c = created(&store).await;
    assert_eq!(
        store
            .find_by_token(&c.continuation_token)
            .await
            .unwrap()
            .map(|r| r.id),
        Some(c.id.clone())
    );

    assert!(store.delete_session(&b.id).await.unwrap());
    assert_eq!(
        store.find_by_token(&b.continuation_token).await.unwrap(),
        None
    );

    let store = h.reopen(store).await;
    assert_eq!(
        store.find_by_token(&rotated).await.unwrap().map(|r| r.id),
        Some(a.id.clone())
    );
    assert_eq!(
        store.find_by_token(&a.continuation_token).await.unwrap(),
        None
    );
    assert_eq!(
        store.find_by_token(&b.continuation_token).await.unwrap(),
        None
    );
}

/// An HTTP token names the session it was made for, but a caller may pin
/// one on another session: it belongs to whichever session holds it, through
/// rotations, deletes and restarts.
pub async fn case_find_by_token_naming_another_session<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let a = created(&store).await;
    let mut b = record_at(&SessionId::generate(), now());
    b.continuation_token = new_http_token(&a.id);
    store.create_session(b.clone()).await.unwrap();
    let found = |token: String| {
        let store = &store;
        async move { store.find_by_token(&token).await.unwrap().map(|r| r.id) }
    };
    assert_eq!(
        found(b.continuation_token.clone()).await,
        Some(b.id.clone())
    );
    assert_eq!(
        found(a.continuation_token.clone()).await,
        Some(a.id.clone())
    );

    // A token naming a session that never existed finds nothing.
    assert_eq!(found(new_http_token(&SessionId::generate())).await, None);

    // A rotates onto another token naming A; B's pinned token stays B's.
    let a_next = new_http_token(&a.id);
    assert_eq!(
        store
            .rotate_token(&a.id, &a.continuation_token, &a_next)
            .await
            .unwrap(),
        TokenSwap::Rotated
    );
    assert_eq!(found(a_next.clone()).await, Some(a.id.clone()));
    assert_eq!(
        found(b.continuation_token.clone()).await,
        Some(b.id.clone())
    );

    // With A gone, B is still found by the token that names A.
    assert!(store.delete_session(&a.id).await.unwrap());
    assert_eq!(found(a_next.clone()).await, None);
    assert_eq!(
        found(b.continuation_token.clone()).await,
        Some(b.id.clone())
    );

    // B moves onto a token naming B itself; the pinned one no longer finds it.
    let b_next = new_http_token(&b.id);
    assert_eq!(
        store
            .rotate_token(&b.id, &b.continuation_token, &b_next)
            .await
            .unwrap(),
        TokenSwap::Rotated
    );
    let store = h.reopen(store).await;
    let found = |token: String| {
        let store = &store;
        async move { store.find_by_token(&token).await.unwrap().map(|r| r.id) }
    };
    assert_eq!(found(b_next).await, Some(b.id.clone()));
    assert_eq!(found(b.continuation_token.clone()).await, None);
}

// ---------------------------------------------------------------- kv

/// Key-value basics: put, get, overwrite, delete, list by prefix, namespaces.
pub async fn case_kv<H: Harness>(h: &H) {
    let store = h.fresh().await;
    assert_eq!(store.kv_get("ns", "missing").await.unwrap(), None);
    assert_eq!(store.kv_list("ns", "").await.unwrap(), Vec::<String>::new());
    let values = [
        ("user:1", json!({"name": "ada"})),
        ("user:2", json!([1, 2, 3])),
        ("team:x", json!("text")),
        ("flag", json!(true)),
        ("nothing", Value::Null),
        ("n", json!(12.5)),
    ];
    for (key, value) in &values {
        store.kv_put("ns", key, value.clone()).await.unwrap();
    }
    for (key, value) in &values {
        assert_eq!(
            store.kv_get("ns", key).await.unwrap().as_ref(),
            Some(value),
            "{key}"
        );
    }
    store
        .kv_put("ns", "user:1", json!({"name": "grace"}))
        .await
        .unwrap();
    assert_eq!(
        store.kv_get("ns", "user:1").await.unwrap(),
        Some(json!({"name": "grace"}))
    );
    assert_eq!(
        store.kv_get("other", "user:1").await.unwrap(),
        None,
        "namespaces"
    );
    store.kv_put("other", "user:9", json!(9)).await.unwrap();

    assert_eq!(
        store.kv_list("ns", "user:").await.unwrap(),
        vec!["user:1", "user:2"]
    );
    assert_eq!(
        store.kv_list("ns", "").await.unwrap(),
        vec!["flag", "n", "nothing", "team:x", "user:1", "user:2"]
    );
    assert_eq!(store.kv_list("other", "").await.unwrap(), vec!["user:9"]);
    assert_eq!(
        store.kv_list("ns", "zzz").await.unwrap(),
        Vec::<String>::new()
    );

    assert!(store.kv_delete("ns", "user:2").await.unwrap());
    assert!(!store.kv_delete("ns", "user:2").await.unwrap());
    assert_eq!(store.kv_get("ns", "user:2").await.unwrap(), None);
    assert_eq!(store.kv_list("ns", "user:").await.unwrap(), vec!["user:1"]);
}

/// Keys are opaque text: slashes, dots, case, percent signs, non-ASCII and
/// long keys all round-trip, stay distinct, and stay inside the store.
pub async fn case_kv_keys_are_opaque<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let root = store.state_root();
    let parent = root.parent().map(Path::to_path_buf).unwrap_or_default();
    let (parent_before, root_before) = (listing(&parent), listing(&root));
    let long = "k".repeat(1000);
    let keys = [
        "../x",
        "/etc/passwd",
        "a/../../b",
        "a/b/c",
        "A",
        "a",
        "%41",
        ".",
        "..",
        "ünï ✓",
        "with space",
        long.as_str(),
    ];
    for (i, key) in keys.iter().enumerate() {
        store.kv_put("odd ns/../", key, json!(i)).await.unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            store.kv_get("odd ns/../", key).await.unwrap(),
            Some(json!(i)),
            "{key:?}"
        );
    }
    let mut sorted: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    sorted.sort();
    assert_eq!(store.kv_list("odd ns/../", "").await.unwrap(), sorted);
    assert_eq!(
        store.kv_list("odd ns/../", "a/").await.unwrap(),
        vec!["a/../../b", "a/b/c"]
    );
    assert!(store.kv_delete("odd ns/../", &long).await.unwrap());
    assert_eq!(store.kv_get("odd ns/../", &long).await.unwrap(), None);
    assert_eq!(
        listing(&parent),
        parent_before,
        "nothing written beside the root"
    );
    assert_eq!(
        listing(&root),
        root_before,
        "no new top-level entry in the root"
    );

    assert_invalid(store.kv_put("ns", "", json!(1)).await, "empty key");
    assert_invalid(store.kv_put("", "k", json!(1)).await, "empty namespace");
    assert_invalid(store.kv_put("ns", "a\0b", json!(1)).await, "NUL in key");
    assert_invalid(store.kv_get("n\0s", "k").await, "NUL in namespace");
}

/// `kv_put_if_absent` writes only into an empty key, reports whether it
/// wrote, and never changes an existing value.
pub async fn case_kv_put_if_absent<H: Harness>(h: &H) {
    let store = h.fresh().await;
    assert!(
        store
            .kv_put_if_absent("claims", "job@1", json!({"by": "a"}))
            .await
            .unwrap(),
        "first claim writes"
    );
    assert!(
        !store
            .kv_put_if_absent("claims", "job@1", json!({"by": "b"}))
            .await
            .unwrap(),
        "second claim is refused"
    );
    assert_eq!(
        store.kv_get("claims", "job@1").await.unwrap(),
        Some(json!({"by": "a"})),
        "the refused claim changed nothing"
    );
    // A key written by `kv_put` counts as present too.
    store.kv_put("claims", "job@2", json!(2)).await.unwrap();
    assert!(
        !store
            .kv_put_if_absent("claims", "job@2", json!("x"))
            .await
            .unwrap()
    );
    assert_eq!(
        store.kv_get("claims", "job@2").await.unwrap(),
        Some(json!(2))
    );
    // The same key in another namespace is another key; odd keys are opaque.
    assert!(
        store
            .kv_put_if_absent("other", "job@1", Value::Null)
            .await
            .unwrap()
    );
    assert!(
        store
            .kv_put_if_absent("claims", "../../x/ünï", json!(1))
            .await
            .unwrap()
    );
    assert_eq!(
        store.kv_list("claims", "").await.unwrap(),
        vec!["../../x/ünï", "job@1", "job@2"]
    );
    // Deleted, the key can be claimed again; the claim survives a restart.
    assert!(store.kv_delete("claims", "job@1").await.unwrap());
    assert!(
        store
            .kv_put_if_absent("claims", "job@1", json!({"by": "c"}))
            .await
            .unwrap()
    );
    let store = h.reopen(store).await;
    assert!(
        !store
            .kv_put_if_absent("claims", "job@1", json!({"by": "d"}))
            .await
            .unwrap()
    );
    assert_eq!(
        store.kv_get("claims", "job@1").await.unwrap(),
        Some(json!({"by": "c"}))
    );
    assert_invalid(
        store.kv_put_if_absent("claims", "", json!(1)).await,
        "empty key",
    );
    assert_invalid(
        store.kv_put_if_absent("", "k", json!(1)).await,
        "empty namespace",
    );
    assert_invalid(
        store.kv_put_if_absent("claims", "a\0b", json!(1)).await,
        "NUL in key",
    );
}

/// 32 concurrent claims of one key: exactly one wins, and the stored value
/// is the winner's.
pub async fn case_kv_put_if_absent_race<H: Harness>(h: &H) {
    let store = Arc::new(h.fresh().await);
    for round in 0..5 {
        let key = format!("nightly@{round}");
        let mut tasks = Vec::new();
        for i in 0..32 {
            let (store, key) = (store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let won = store
                    .kv_put_if_absent("schedules", &key, json!({"claimant": i}))
                    .await
                    .unwrap();
                (won, i)
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            let (won, i) = task.await.expect("claim task");
            if won {
                winners.push(i);
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one claim wins: {winners:?}"
        );
        assert_eq!(
            store.kv_get("schedules", &key).await.unwrap(),
            Some(json!({"claimant": winners[0]})),
            "round {round}: the winner's value is stored"
        );
    }
}

// ---------------------------------------------------------------- files

/// The file area: nested paths, binary content, overwrite, delete, list.
pub async fn case_files<H: Harness>(h: &H) {
    let store = h.fresh().await;
    assert_eq!(store.file_get("nope.txt").await.unwrap(), None);
    assert_eq!(store.file_list("").await.unwrap(), Vec::<String>::new());
    let files: [(&str, &[u8]); 5] = [
        ("a.txt", b"alpha"),
        ("dir/b.txt", b"beta"),
        ("dir/sub/c.bin", &[0, 1, 2, 255, 0]),
        ("dir2/d", b""),
        ("..x/y", b"dots in a name are fine"),
    ];
    for (path, bytes) in files {
        store.file_put(path, bytes.to_vec()).await.unwrap();
    }
    for (path, bytes) in files {
        assert_eq!(
            store.file_get(path).await.unwrap().as_deref(),
            Some(bytes),
            "{path}"
        );
    }
    store.file_put("a.txt", b"alpha 2".to_vec()).await.unwrap();
    assert_eq!(
        store.file_get("a.txt").await.unwrap(),
        Some(b"alpha 2".to_vec())
    );

    assert_eq!(
        store.file_list("").await.unwrap(),
        vec!["..x/y", "a.txt", "dir/b.txt", "dir/sub/c.bin", "dir2/d"]
    );
    assert_eq!(
        store.file_list("dir/").await.unwrap(),
        vec!["dir/b.txt", "dir/sub/c.bin"]
    );
    assert_eq!(
        store.file_list("dir").await.unwrap(),
        vec!["dir/b.txt", "dir/sub/c.bin", "dir2/d"]
    );
    assert_eq!(
        store.file_list("dir/sub/c").await.unwrap(),
        vec!["dir/sub/c.bin"]
    );
    assert_eq!(
        store.file_list("missing/").await.unwrap(),
        Vec::<String>::new()
    );

    assert!(store.file_delete("dir/sub/c.bin").await.unwrap());
    assert!(!store.file_delete("dir/sub/c.bin").await.unwrap());
    assert_eq!(store.file_get("dir/sub/c.bin").await.unwrap(), None);
    assert_eq!(store.file_list("dir/").await.unwrap(), vec!["dir/b.txt"]);
    assert!(!store.file_delete("never/was").await.unwrap());
}

// ---------------------------------------------------------------- artifacts

fn artifact(
    id: &str,
    session: Option<&SessionId>,
    kind: &str,
    principal: Option<&str>,
    created_at: DateTime<Utc>,
) -> ArtifactRecord {
    ArtifactRecord {
        id: id.to_owned(),
        session_id: session.cloned(),
        principal: principal.map(str::to_owned),
        kind: kind.to_owned(),
        name: format!("{id}.md"),
        content_type: "text/markdown".to_owned(),
        size: 4,
        metadata: json!({"source": id}),
        created_at,
    }
}

/// Artifact records and contents; listing filters and orders newest first.
pub async fn case_artifacts<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let (s1, s2) = (SessionId::generate(), SessionId::generate());
    let t0 = now();
    let all = [
        artifact("art_1", Some(&s1), "report", Some("alice"), t0),
        artifact(
            "art_2",
            Some(&s1),
            "chart",
            Some("alice"),
            t0 + TimeDelta::seconds(1),
        ),
        artifact(
            "art_3",
            Some(&s2),
            "report",
            Some("bob"),
            t0 + TimeDelta::seconds(2),
        ),
        artifact("art_4", None, "report", None, t0 + TimeDelta::seconds(3)),
    ];
    for record in &all {
        let content = format!("body of {}", record.id).into_bytes();
        store.artifact_put(record.clone(), content).await.unwrap();
    }
    assert_eq!(
        store.artifact_get("art_2").await.unwrap().as_ref(),
        Some(&all[1])
    );
    assert_eq!(
        store.artifact_content("art_3").await.unwrap(),
        Some(b"body of art_3".to_vec())
    );
    assert_eq!(store.artifact_get("art_none").await.unwrap(), None);
    assert_eq!(store.artifact_content("art_none").await.unwrap(), None);

    let ids = |records: Vec<ArtifactRecord>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let list = |filter: ArtifactFilter| {
        let store = &store;
        async move { ids(store.artifact_list(&filter).await.unwrap()) }
    };
    assert_eq!(
        list(ArtifactFilter::default()).await,
        ["art_4", "art_3", "art_2", "art_1"]
    );
    assert_eq!(
        list(ArtifactFilter {
            session_id: Some(s1.clone()),
            ..Default::default()
        })
        .await,
        ["art_2", "art_1"]
    );
    assert_eq!(
        list(ArtifactFilter {
            kind: Some("report".into()),
            ..Default::default()
        })
        .await,
        ["art_4", "art_3", "art_1"]
    );
    assert_eq!(
        list(ArtifactFilter {
            principal: Some("bob".into()),
            ..Default::default()
        })
        .await,
        ["art_3"]
    );
    assert_eq!(
        list(ArtifactFilter {
            limit: Some(2),
            ..Default::default()
        })
        .await,
        ["art_4", "art_3"]
    );
    assert_eq!(
        list(ArtifactFilter {
            session_id: Some(s1.clone()),
            kind: Some("report".into()),
            principal: Some("alice".into()),
            limit: Some(5),
        })
        .await,
        ["art_1"]
    );

    // Putting the same id again replaces record and content.
    let mut again = all[0].clone();
    again.name = "renamed.md".to_owned();
    store
        .artifact_put(again.clone(), b"v2".to_vec())
        .await
        .unwrap();
    assert_eq!(store.artifact_get("art_1").await.unwrap(), Some(again));
    assert_eq!(
        store.artifact_content("art_1").await.unwrap(),
        Some(b"v2".to_vec())
    );
}

// ---------------------------------------------------------------- hostile names

/// Traversal and malformed names are refused with `Invalid`, and nothing is
/// written beside the state root or at an absolute path.
pub async fn case_hostile_names<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let root = store.state_root();
    let parent = root.parent().map(Path::to_path_buf).unwrap_or_default();
    let outside = parent.join("outside.txt");
    let outside_str = outside.to_string_lossy().into_owned();
    let (parent_before, root_before) = (listing(&parent), listing(&root));

    let paths = [
        "../x",
        "../../x",
        outside_str.as_str(),
        "/etc/passwd",
        "a/../../b",
        "a/..",
        "..",
        ".",
        "./a",
        "a/./b",
        "",
        "a//b",
        "a/",
        "a\\..\\b",
        "a\0b",
    ];
    for path in paths {
        // Never write or delete at /etc/passwd itself, even if a broken
        // engine would let it through: only read it.
        if path != "/etc/passwd" {
            assert_invalid(
                store.file_put(path, b"x".to_vec()).await,
                &format!("file_put {path:?}"),
            );
            assert_invalid(
                store.file_delete(path).await,
                &format!("file_delete {path:?}"),
            );
        }
        assert_invalid(store.file_get(path).await, &format!("file_get {path:?}"));
    }
    for prefix in ["../", "/etc/", "a/../../", "a\0"] {
        assert_invalid(
            store.file_list(prefix).await,
            &format!("file_list {prefix:?}"),
        );
    }

    // Reading a system file by absolute name must fail too; writes and
    // deletes only ever aim at the private directory beside the root.
    assert_invalid(
        store.artifact_get("/etc/passwd").await,
        "artifact_get /etc/passwd",
    );
    assert_invalid(
        store
            .get_session(&SessionId::from_string("/etc/passwd"))
            .await,
        "get_session /etc/passwd",
    );
    let ids = [
        "../x",
        "a/b",
        "",
        "..",
        ".",
        "a\0",
        "a\\b",
        outside_str.as_str(),
    ];
    for id in ids {
        let record = artifact(id, None, "report", None, now());
        assert_invalid(
            store.artifact_put(record, b"x".to_vec()).await,
            &format!("artifact_put {id:?}"),
        );
        assert_invalid(
            store.artifact_get(id).await,
            &format!("artifact_get {id:?}"),
        );
        assert_invalid(
            store.artifact_content(id).await,
            &format!("artifact_content {id:?}"),
        );
        assert_invalid(store.tool_call_dir(id), &format!("tool_call_dir {id:?}"));

        let sid = SessionId::from_string(id);
        let what = |op: &str| format!("{op} for session id {id:?}");
        assert_invalid(
            store.create_session(record_at(&sid, now())).await,
            &what("create"),
        );
        assert_invalid(store.get_session(&sid).await, &what("get"));
        assert_invalid(store.append(&sid, vec![delta("x")]).await, &what("append"));
        assert_invalid(store.read(&sid, 0).await, &what("read"));
        assert_invalid(
            store.subscribe(&sid, 0).await.map(|_| ()),
            &what("subscribe"),
        );
        assert_invalid(store.delete_session(&sid).await, &what("delete"));
        assert_invalid(
            store.rotate_token(&sid, "a", "b").await,
            &what("rotate_token"),
        );
        assert!(
            store.workspace_dir(&sid).starts_with(&root),
            "workspace_dir of {id:?} stays inside the root"
        );
    }

    assert!(!outside.exists(), "nothing written at an absolute path");
    assert_eq!(
        listing(&parent),
        parent_before,
        "nothing written beside the root"
    );
    assert_eq!(
        listing(&root),
        root_before,
        "no new top-level entry in the root"
    );
    assert_eq!(store.list_sessions().await.unwrap(), vec![]);
}

/// Local directories live under the state root and differ per session.
pub async fn case_local_dirs<H: Harness>(h: &H) {
    let store = h.fresh().await;
    let root: PathBuf = store.state_root();
    let (a, b) = (SessionId::generate(), SessionId::generate());
    let (wa, wb) = (store.workspace_dir(&a), store.workspace_dir(&b));
    assert!(wa.starts_with(&root) && wb.starts_with(&root));
    assert_ne!(wa, wb);
    let call = store.tool_call_dir("call_123").unwrap();
    assert!(call.starts_with(&root));
    assert!(call.ends_with("call_123"));
    assert!(store.traces_dir().starts_with(&root));
}
