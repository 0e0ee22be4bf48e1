//! Tests of what is specific to [`FsStore`]: the on-disk layout, torn tails,
//! corruption, sessions deleted from outside, and restarts after a kill.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bdk_events::ids::new_http_token;
use bdk_events::{Envelope, MessageAppended, SessionId, SessionMode, SessionWaiting, ndjson};
use bdk_store::{ArtifactRecord, FsStore, NewEvent, SessionRecord, Store, StoreError};
use chrono::{SubsecRound, Utc};
use futures::StreamExt;
use serde_json::json;

fn record(id: &SessionId) -> SessionRecord {
    let now = Utc::now().trunc_subsecs(3);
    SessionRecord {
        id: id.clone(),
        mode: SessionMode::Chat,
        channel: "http".into(),
        principal: None,
        continuation_token: new_http_token(id),
        title: None,
        purpose: None,
        dry_run: false,
        as_of: None,
        created_at: now,
        updated_at: now,
        extra: serde_json::Value::Null,
    }
}

fn delta(i: usize) -> NewEvent {
    NewEvent::session(MessageAppended {
        delta: format!("d{i}"),
    })
}

fn waiting() -> NewEvent {
    NewEvent::session(SessionWaiting {})
}

/// The current continuation token of session `id`.
async fn token_of(store: &FsStore, id: &SessionId) -> String {
    store
        .get_session(id)
        .await
        .unwrap()
        .unwrap()
        .continuation_token
}

async fn new_session(store: &FsStore) -> SessionId {
    let id = SessionId::generate();
    store.create_session(record(&id)).await.unwrap();
    id
}

async fn append_n(store: &FsStore, id: &SessionId, n: usize) {
    for i in 0..n {
        store.append(id, vec![delta(i)]).await.unwrap();
    }
}

fn events_path(root: &Path, id: &SessionId) -> PathBuf {
    root.join("sessions")
        .join(id.as_str())
        .join("events.ndjson")
}

fn append_raw(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(bytes).unwrap();
}

fn indices(envs: &[Envelope]) -> Vec<u64> {
    envs.iter().map(|e| e.index).collect()
}

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("{what}: expected StoreError::Corrupt, got {other:?}"),
    }
}

fn assert_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::SessionNotFound(_)) => {}
        other => panic!("{what}: expected StoreError::SessionNotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn layout_matches_the_documented_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("state");
    let store = FsStore::open(&root).unwrap();
    for top in [
        "sessions",
        "traces",
        "tool-calls",
        "kv",
        "files",
        "artifacts",
        "tmp",
    ] {
        assert!(root.join(top).is_dir(), "{top}/ is created on open");
    }
    let id = new_session(&store).await;
    let session_dir = root.join("sessions").join(id.as_str());
    store.append(&id, vec![delta(0), waiting()]).await.unwrap();

    let record: SessionRecord =
        serde_json::from_slice(&fs::read(session_dir.join("session.json")).unwrap()).unwrap();
    assert_eq!(record.id, id);
    let scan = ndjson::scan(&fs::read(session_dir.join("events.ndjson")).unwrap()).unwrap();
    assert_eq!(indices(&scan.events), vec![0, 1]);
    assert!(!scan.is_torn());
    let names: Vec<String> = fs::read_dir(&session_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(
        names,
        ["events.ndjson", "session.json"],
        "no temp files left"
    );

    assert_eq!(store.state_root(), root);
    assert_eq!(store.workspace_dir(&id), session_dir.join("workspace"));
    assert_eq!(store.traces_dir(), root.join("traces"));
    assert_eq!(
        store.tool_call_dir("tool_get_weather_01").unwrap(),
        root.join("tool-calls").join("tool_get_weather_01")
    );

    store.kv_put("prefs", "theme", json!("dark")).await.unwrap();
    store.kv_put("prefs", "../Up", json!(1)).await.unwrap();
    assert_eq!(
        fs::read_to_string(root.join("kv/prefs/theme.json")).unwrap(),
        "\"dark\""
    );
    assert!(root.join("kv/prefs/%2E%2E%2F%55p.json").is_file());

    store
        .file_put("reports/q1.md", b"# Q1".to_vec())
        .await
        .unwrap();
    assert_eq!(fs::read(root.join("files/reports/q1.md")).unwrap(), b"# Q1");

    let art = ArtifactRecord {
        id: "art_layout".into(),
        session_id: Some(id.clone()),
        principal: None,
        kind: "report".into(),
        name: "r.md".into(),
        content_type: "text/markdown".into(),
        size: 2,
        metadata: serde_json::Value::Null,
        created_at: Utc::now().trunc_subsecs(3),
    };
    store
        .artifact_put(art.clone(), b"hi".to_vec())
        .await
        .unwrap();
    let stored: ArtifactRecord =
        serde_json::from_slice(&fs::read(root.join("artifacts/art_layout.json")).unwrap()).unwrap();
    assert_eq!(stored, art);
    assert_eq!(
        fs::read(root.join("artifacts/art_layout.bin")).unwrap(),
        b"hi"
    );
    assert_eq!(
        fs::read_dir(root.join("tmp")).unwrap().count(),
        0,
        "no temp files left"
    );
}

#[tokio::test]
async fn torn_tails_are_cut_on_reopen() {
    // `None` stands for a whole, valid event line whose newline never made
    // it to disk: still torn, because its append was never acknowledged.
    let tails: [(&str, Option<&[u8]>); 5] = [
        ("partial line", Some(b"{\"type\":\"message.appe")),
        ("zero fill", Some(&[0u8; 4096])),
        ("garbage line with newline", Some(b"}}not json{{\n")),
        ("complete event without its newline", None),
        ("partial line then zeros", Some(b"{\"type\":\0\0\0\0")),
    ];
    for (name, tail) in tails {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let id = new_session(&store).await;
        append_n(&store, &id, 4).await;
        store.append(&id, vec![waiting()]).await.unwrap();
        let before = store.read(&id, 0).await.unwrap();
        drop(store);

        let path = events_path(dir.path(), &id);
        match tail {
            Some(bytes) => append_raw(&path, bytes),
            None => {
                let mut unfinished = before[4].clone();
                unfinished.index = 5;
                append_raw(&path, unfinished.to_line().unwrap().as_bytes());
            }
        }

        let store = FsStore::open(dir.path()).unwrap();
        assert_eq!(
            store.read(&id, 0).await.unwrap(),
            before,
            "{name}: earlier events kept"
        );
        assert_eq!(store.next_index(&id).await.unwrap(), 5, "{name}");
        let next = store.append(&id, vec![delta(5)]).await.unwrap();
        assert_eq!(
            indices(&next),
            vec![5],
            "{name}: the next append gets the next index"
        );

        let scan = ndjson::scan(&fs::read(&path).unwrap()).unwrap();
        assert!(!scan.is_torn(), "{name}: the file scans clean afterwards");
        assert_eq!(indices(&scan.events), (0..6).collect::<Vec<_>>(), "{name}");
        drop(store);
        let store = FsStore::open(dir.path()).unwrap();
        assert_eq!(
            store.next_index(&id).await.unwrap(),
            6,
            "{name}: stable after another restart"
        );
    }
}

#[tokio::test]
async fn corruption_before_the_tail_is_an_error_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    append_n(&store, &id, 3).await;
    drop(store);

    let path = events_path(dir.path(), &id);
    let original = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    lines.insert(1, "this line is not an event");
    let damaged = lines.join("\n") + "\n";
    fs::write(&path, &damaged).unwrap();

    let store = FsStore::open(dir.path()).unwrap();
    assert_corrupt(store.read(&id, 0).await, "read");
    assert_corrupt(store.next_index(&id).await, "next_index");
    assert_corrupt(store.append(&id, vec![delta(9)]).await, "append");
    assert_corrupt(store.subscribe(&id, 0).await.map(|_| ()), "subscribe");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        damaged,
        "the file is not rewritten"
    );
    // The record itself is fine: the session is still listed.
    assert!(store.get_session(&id).await.unwrap().is_some());
}

/// Regression: a tool appended a line to the log of a session the store had
/// open; the store's next append landed after it, burying the foreign line in
/// the middle, and reads used offsets that no longer matched the file.
#[tokio::test]
async fn a_log_changed_from_outside_while_open_is_scanned_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();

    // A foreign trailing line is cut like a torn tail before the next append.
    let id = new_session(&store).await;
    append_n(&store, &id, 3).await;
    let path = events_path(dir.path(), &id);
    append_raw(&path, b"{\"not\": \"an event\"}\n");
    let recorded = store.append(&id, vec![delta(3)]).await.unwrap();
    assert_eq!(indices(&recorded), vec![3]);
    assert_eq!(
        indices(&store.read(&id, 0).await.unwrap()),
        vec![0, 1, 2, 3]
    );
    assert!(!fs::read_to_string(&path).unwrap().contains("not"));

    // A foreign line in the middle makes the session corrupt, for reads,
    // subscriptions and appends alike, and the file is left as it is.
    let other = new_session(&store).await;
    append_n(&store, &other, 3).await;
    let path = events_path(dir.path(), &other);
    let original = fs::read_to_string(&path).unwrap();
    let (first, rest) = original.split_once('\n').unwrap();
    let damaged = format!("{first}\nnot an event\n{rest}");
    fs::write(&path, &damaged).unwrap();
    assert_corrupt(store.read(&other, 0).await, "read");
    assert_corrupt(store.subscribe(&other, 0).await.map(|_| ()), "subscribe");
    assert_corrupt(store.append(&other, vec![delta(9)]).await, "append");
    assert_eq!(fs::read_to_string(&path).unwrap(), damaged);
    // The first session is untouched by the other's damage.
    assert_eq!(store.next_index(&id).await.unwrap(), 4);
}

#[tokio::test]
async fn indices_other_than_zero_to_n_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    append_n(&store, &id, 3).await;
    let events = store.read(&id, 0).await.unwrap();
    drop(store);

    // A repeated line: every line parses, but index 1 appears twice.
    let path = events_path(dir.path(), &id);
    let mut dup = events[1].to_line().unwrap();
    dup.push('\n');
    append_raw(&path, dup.as_bytes());
    let store = FsStore::open(dir.path()).unwrap();
    assert_corrupt(store.read(&id, 0).await, "duplicate index");
}

#[tokio::test]
async fn a_session_deleted_from_outside_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let keep = new_session(&store).await;
    let id = new_session(&store).await;
    append_n(&store, &id, 3).await;
    let mut stream = store.subscribe(&id, 0).await.unwrap();
    let session_dir = dir.path().join("sessions").join(id.as_str());

    fs::remove_dir_all(&session_dir).unwrap();

    assert_eq!(store.get_session(&id).await.unwrap(), None);
    let listed: Vec<SessionId> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, vec![keep.clone()]);
    assert_not_found(store.append(&id, vec![delta(3)]).await, "append");
    assert_not_found(store.append(&id, vec![waiting()]).await, "boundary append");
    assert_not_found(store.read(&id, 0).await, "read");
    assert_not_found(store.next_index(&id).await, "next_index");
    assert_not_found(store.subscribe(&id, 0).await.map(|_| ()), "subscribe");
    assert!(
        !session_dir.exists(),
        "an append must not resurrect the directory"
    );

    // The stream that was open ends once the store has noticed.
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
            Err(_) => panic!("the stream did not end"),
            Ok(None) => break,
            Ok(Some(item)) => seen.push(item.unwrap().index),
        }
    }
    assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());

    // The other session is untouched, and the id can be created again.
    store.append(&keep, vec![delta(0)]).await.unwrap();
    store.create_session(record(&id)).await.unwrap();
    assert_eq!(
        indices(&store.append(&id, vec![delta(0)]).await.unwrap()),
        vec![0]
    );
}

#[tokio::test]
async fn a_session_deleted_from_outside_while_its_log_is_open_is_not_written() {
    // The store keeps an append handle open; deleting the directory must not
    // let later appends succeed into the unlinked file.
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    append_n(&store, &id, 2).await;
    fs::remove_dir_all(dir.path().join("sessions").join(id.as_str())).unwrap();
    for _ in 0..3 {
        assert_not_found(store.append(&id, vec![delta(9)]).await, "append");
    }
}

/// Removing only `session.json` removes the session too. An ordinary
/// append checks just its open log handle (still linked, as long as the
/// store wrote it), so it may still land in the orphaned log; the next
/// boundary batch, and every other operation, check the record by path and
/// report the session gone, and nothing writes the record back.
#[tokio::test]
async fn a_session_whose_record_alone_is_removed_is_gone_by_its_next_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    append_n(&store, &id, 2).await;
    let record = dir
        .path()
        .join("sessions")
        .join(id.as_str())
        .join("session.json");
    fs::remove_file(&record).unwrap();
    // Whatever an ordinary append in between does, it is not durable and
    // does not bring the record back.
    let _ = store.append(&id, vec![delta(2)]).await;
    assert_not_found(store.append(&id, vec![waiting()]).await, "boundary append");
    assert_not_found(store.append(&id, vec![delta(3)]).await, "append");
    assert_eq!(store.get_session(&id).await.unwrap(), None);
    assert_not_found(store.read(&id, 0).await, "read");
    assert!(!record.exists());
}

#[tokio::test]
async fn records_that_cannot_be_read_are_skipped_in_listings() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let good = new_session(&store).await;
    let sessions = dir.path().join("sessions");

    // Garbage in a record, a record copied under another id, and a directory
    // without a record.
    let garbled = SessionId::generate();
    fs::create_dir_all(sessions.join(garbled.as_str())).unwrap();
    fs::write(
        sessions.join(garbled.as_str()).join("session.json"),
        b"{not json",
    )
    .unwrap();
    let copied = SessionId::generate();
    fs::create_dir_all(sessions.join(copied.as_str())).unwrap();
    fs::copy(
        sessions.join(good.as_str()).join("session.json"),
        sessions.join(copied.as_str()).join("session.json"),
    )
    .unwrap();
    let bare = SessionId::generate();
    fs::create_dir_all(sessions.join(bare.as_str()).join("workspace")).unwrap();
    fs::write(sessions.join("stray-file"), b"x").unwrap();

    let listed: Vec<SessionId> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, vec![good]);
    assert_corrupt(store.get_session(&garbled).await, "garbled record");
    assert_corrupt(
        store.get_session(&copied).await,
        "record of another session",
    );
    assert_eq!(store.get_session(&bare).await.unwrap(), None);
    // A directory without a record is not a session and can become one.
    store.create_session(record(&bare)).await.unwrap();
    assert!(store.get_session(&bare).await.unwrap().is_some());
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A rotation rewrites the record (the journal makes it durable) and drops
/// a token link an older version left beside it. No temp file stays behind,
/// and the last token counts, also after a restart.
#[tokio::test]
async fn rotations_leave_no_temp_files_and_the_last_token_counts() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    let session_dir = dir.path().join("sessions").join(id.as_str());
    let on_disk = || -> SessionRecord {
        serde_json::from_slice(&fs::read(session_dir.join("session.json")).unwrap()).unwrap()
    };
    let mut token = token_of(&store, &id).await;
    for i in 0..20 {
        let next = if i % 2 == 0 {
            new_http_token(&id)
        } else {
            format!("http:pinned-{i}")
        };
        assert_eq!(
            store.rotate_token(&id, &token, &next).await.unwrap(),
            bdk_store::TokenSwap::Rotated
        );
        token = next;
    }
    assert_eq!(entries(&session_dir), ["events.ndjson", "session.json"]);
    assert_eq!(on_disk().continuation_token, token);

    // A link left by an older version has the last word until a rotation
    // replaces it.
    let hex = "0123456789abcdef0123456789abcdef";
    std::os::unix::fs::symlink(format!("{hex}@1"), session_dir.join("token")).unwrap();
    assert_eq!(token_of(&store, &id).await, format!("http:{id}.{hex}"));
    token = format!("http:{id}.{hex}");
    let before = store.get_session(&id).await.unwrap().unwrap();
    let own = new_http_token(&id);
    store.rotate_token(&id, &token, &own).await.unwrap();
    assert_eq!(entries(&session_dir), ["events.ndjson", "session.json"]);
    assert_eq!(on_disk().continuation_token, own);
    let after = store.get_session(&id).await.unwrap().unwrap();
    assert_eq!(after.continuation_token, own);
    assert!(after.updated_at >= before.updated_at);
    assert_eq!(
        store
            .rotate_token(&id, &token, &new_http_token(&id))
            .await
            .unwrap(),
        bdk_store::TokenSwap::Stale
    );
    assert_eq!(entries(&dir.path().join("tmp")), Vec::<String>::new());

    // An update keeps the current token, and a restart reads it back.
    let mut update = after.clone();
    update.title = Some("renamed".into());
    update.continuation_token = "http:rolled-back".into();
    store.update_session(update).await.unwrap();
    drop(store);
    let store = FsStore::open(dir.path()).unwrap();
    let reopened = store.get_session(&id).await.unwrap().unwrap();
    assert_eq!(reopened.continuation_token, own);
    assert_eq!(reopened.title.as_deref(), Some("renamed"));
    assert_eq!(
        store.find_by_token(&own).await.unwrap().map(|r| r.id),
        Some(id)
    );
}

/// The token link is the store's own: one of another shape (or pointing
/// anywhere) makes the session corrupt rather than being followed or
/// ignored; and a directory left by an interrupted delete does not lend its
/// old link to a new session of the same id.
#[tokio::test]
async fn a_foreign_token_link_is_corruption_and_a_leftover_one_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    let session_dir = dir.path().join("sessions").join(id.as_str());
    let link = session_dir.join("token");
    let hex = "0123456789abcdef0123456789abcdef";
    let targets: Vec<std::ffi::OsString> = [
        "/etc/passwd".to_owned(),
        "0123@x".to_owned(),
        "not-hex-at-all@1".to_owned(),
        "../../token".to_owned(),
        hex.to_owned(),
        format!("{hex}@"),
        format!("{hex}@soon"),
        format!("{}@1", hex.to_uppercase()),
    ]
    .into_iter()
    .map(Into::into)
    .chain([<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff@1").to_owned()])
    .collect();
    for target in &targets {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
        assert!(
            matches!(
                store.get_session(&id).await,
                Err(StoreError::Corrupt { .. })
            ),
            "{target:?}"
        );
    }
    // The store's own shape is read back.
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(format!("{hex}@1"), &link).unwrap();
    assert_eq!(
        store
            .get_session(&id)
            .await
            .unwrap()
            .unwrap()
            .continuation_token,
        format!("http:{id}.{hex}")
    );

    // A delete interrupted after the record went: the directory and the
    // token link (as an older version wrote them) stay. A new session with
    // that id gets its own token.
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(format!("{hex}@1"), &link).unwrap();
    drop(store);
    fs::remove_file(session_dir.join("session.json")).unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let fresh = record(&id);
    store.create_session(fresh.clone()).await.unwrap();
    assert_eq!(
        store
            .get_session(&id)
            .await
            .unwrap()
            .unwrap()
            .continuation_token,
        fresh.continuation_token
    );
    assert!(link.symlink_metadata().is_err(), "the old link is gone");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn idle_append_handles_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let mut ids = Vec::new();
    for i in 0..300 {
        let id = new_session(&store).await;
        store.append(&id, vec![delta(i)]).await.unwrap();
        ids.push(id);
    }
    let sessions = dir.path().join("sessions");
    let open = fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(&sessions))
        .count();
    assert!(open <= 257, "{open} log handles open for 300 sessions");
    // Sessions whose handle was closed still append in order.
    for id in &ids {
        let envs = store.append(id, vec![delta(1)]).await.unwrap();
        assert_eq!(indices(&envs), vec![1]);
    }
}

const CHILD_ROOT: &str = "BDK_STORE_TEST_CHILD_ROOT";
const CHILD_SESSION: &str = "BDK_STORE_TEST_CHILD_SESSION";

/// The writer half of [`killed_writer_loses_nothing_it_wrote`]: appends
/// without a boundary, a boundary batch, more appends, reports, then waits to
/// be killed. Run alone (no environment), it writes into its own temp dir and
/// checks what it wrote.
#[test]
#[ignore = "run as a child process by killed_writer_loses_nothing_it_wrote"]
fn child_writer() {
    let own = tempfile::tempdir().unwrap();
    let as_child = std::env::var_os(CHILD_ROOT).is_some();
    let root = std::env::var_os(CHILD_ROOT).map_or_else(|| own.path().to_path_buf(), PathBuf::from);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = FsStore::open(&root).unwrap();
        let id = match std::env::var(CHILD_SESSION) {
            Ok(id) => SessionId::parse(&id).unwrap(),
            Err(_) => new_session(&store).await,
        };
        append_n(&store, &id, 100).await;
        store
            .append(&id, vec![delta(100), waiting()])
            .await
            .unwrap();
        append_n(&store, &id, 50).await;
        let next = store.next_index(&id).await.unwrap();
        assert_eq!(next, 152);
        println!("ready {next}");
        std::io::stdout().flush().unwrap();
    });
    if as_child {
        // Hold the store's process alive until the parent kills it.
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).unwrap_or(0) > 0 {}
    }
}

/// The full name of this module's test `name`, as the test harness of this
/// binary knows it (`fs::name`).
fn test_name(name: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{name}")
}

/// Runs the ignored test `name` of this binary as a child process with
/// `env`, waits for its `ready ...` report, kills it with SIGKILL (no
/// destructor, no flush, no goodbye) and returns the report.
fn run_and_kill(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let name = test_name(name);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // The test harness prints its own text on the same line, so look for
    // the report anywhere in a line.
    let ready = BufReader::new(stdout)
        .lines()
        .map(|l| l.unwrap())
        .find_map(|l| {
            l.split_once("ready ")
                .map(|(_, rest)| rest.trim().to_owned())
        })
        .expect("the child reports what it wrote");
    child.kill().unwrap();
    child.wait().unwrap();
    ready
}

#[test]
fn killed_writer_loses_nothing_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let store = FsStore::open(dir.path()).unwrap();
        new_session(&store).await
    });

    let ready = run_and_kill(
        "child_writer",
        &[
            (CHILD_ROOT, dir.path().as_os_str()),
            (CHILD_SESSION, id.as_str().as_ref()),
        ],
    );
    assert_eq!(ready, "152");

    rt.block_on(async {
        let store = FsStore::open(dir.path()).unwrap();
        assert_eq!(store.next_index(&id).await.unwrap(), 152);
        let events = store.read(&id, 0).await.unwrap();
        assert_eq!(indices(&events), (0..152).collect::<Vec<_>>());
        assert_eq!(events[101].kind(), "session.waiting");
        let next = store.append(&id, vec![delta(152)]).await.unwrap();
        assert_eq!(indices(&next), vec![152]);
    });
}

/// Regression: every session touched since start kept its writer state (and,
/// once streamed, a preallocated fan-out buffer) until it was deleted, so
/// memory grew with history. Idle state is now dropped past a bound and
/// rebuilt from the file; sessions with subscribers keep theirs.
#[tokio::test]
async fn idle_sessions_state_is_bounded_and_rebuilt_on_use() {
    const SESSIONS: usize = 1_200;
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let followed = new_session(&store).await;
    let mut live = store.subscribe(&followed, 0).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let id = new_session(&store).await;
        store.append(&id, vec![delta(i)]).await.unwrap();
        // A reader that comes and goes leaves nothing behind.
        let mut sub = store.subscribe(&id, 0).await.unwrap();
        assert_eq!(sub.next().await.unwrap().unwrap().index, 0);
        drop(sub);
        ids.push(id);
    }
    let (resident, evicted) = store.resident_sessions();
    assert!(resident <= 512, "{resident} sessions resident");
    assert!(evicted >= (SESSIONS - 512) as u64, "{evicted} evicted");
    // Evicted sessions read back exactly and take appends at the right index.
    for (i, id) in ids.iter().enumerate().take(10) {
        let events = store.read(id, 0).await.unwrap();
        assert_eq!(indices(&events), vec![0], "session {i}");
        let next = store.append(id, vec![delta(1)]).await.unwrap();
        assert_eq!(indices(&next), vec![1]);
    }
    // The followed session kept its live fan-out through every sweep.
    store.append(&followed, vec![delta(0)]).await.unwrap();
    let env = tokio::time::timeout(Duration::from_secs(20), live.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(env.index, 0);
}

/// The token index files under `root`.
fn token_entries(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "tok") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("token-index"), &mut out);
    out
}

/// Tokens the host issues name their session, so creating and rotating them
/// writes (and syncs) no index entry, and they are still found, also after a
/// restart. Any other token is indexed.
#[tokio::test]
async fn tokens_that_name_their_session_need_no_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    let first = token_of(&store, &id).await;
    let next = new_http_token(&id);
    store.rotate_token(&id, &first, &next).await.unwrap();
    assert_eq!(token_entries(dir.path()), Vec::<std::path::PathBuf>::new());

    // A channel token and an HTTP token naming another session are indexed.
    let mut channel = record(&SessionId::generate());
    channel.continuation_token = "slack:T1:C1:123.456".into();
    store.create_session(channel.clone()).await.unwrap();
    let mut pinned = record(&SessionId::generate());
    pinned.continuation_token = new_http_token(&id);
    store.create_session(pinned.clone()).await.unwrap();
    assert_eq!(token_entries(dir.path()).len(), 2);
    drop(store);

    let store = FsStore::open(dir.path()).unwrap();
    let find = |token: String| {
        let store = &store;
        async move { store.find_by_token(&token).await.unwrap().map(|r| r.id) }
    };
    assert_eq!(find(next.clone()).await, Some(id.clone()));
    assert_eq!(find(first).await, None);
    assert_eq!(find(channel.continuation_token).await, Some(channel.id));
    assert_eq!(
        find(pinned.continuation_token.clone()).await,
        Some(pinned.id.clone())
    );

    // Rotating the pinned token onto one naming its own session drops the
    // entry of the old one.
    let own = new_http_token(&pinned.id);
    store
        .rotate_token(&pinned.id, &pinned.continuation_token, &own)
        .await
        .unwrap();
    assert_eq!(token_entries(dir.path()).len(), 1);
    assert_eq!(find(own).await, Some(pinned.id));
    assert_eq!(find(pinned.continuation_token).await, None);
}

/// State roots written before the on-disk token index get it built on the
/// first lookup; a restart needs no scan and no memory per session.
#[tokio::test]
async fn the_token_index_is_built_once_for_an_old_root_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    // Tokens of the shape issued before tokens named their session, which
    // only the index can find.
    let legacy = |id: &SessionId| {
        let mut r = record(id);
        r.continuation_token = format!("http:{}", &id.as_str()[4..]);
        r
    };
    let (a, b) = (SessionId::generate(), SessionId::generate());
    store.create_session(legacy(&a)).await.unwrap();
    store.create_session(legacy(&b)).await.unwrap();
    let token_a = token_of(&store, &a).await;
    let old_b = token_of(&store, &b).await;
    let new_b = new_http_token(&b);
    assert_eq!(
        store.rotate_token(&b, &old_b, &new_b).await.unwrap(),
        bdk_store::TokenSwap::Rotated
    );
    drop(store);

    // A restart finds both by their current tokens and not by the old one.
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(store.find_by_token(&token_a).await.unwrap().unwrap().id, a);
    assert_eq!(store.find_by_token(&new_b).await.unwrap().unwrap().id, b);
    assert!(store.find_by_token(&old_b).await.unwrap().is_none());
    drop(store);

    // A root without the index (written by an older version) gets it built.
    fs::remove_dir_all(dir.path().join("token-index")).unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(store.find_by_token(&token_a).await.unwrap().unwrap().id, a);
    assert_eq!(store.find_by_token(&new_b).await.unwrap().unwrap().id, b);
    assert!(dir.path().join("token-index/.built").exists());
    // Tokens the index cannot hold are refused, and never found.
    let long = "x".repeat(2_000);
    assert!(store.find_by_token(&long).await.unwrap().is_none());
    let mut r = record(&SessionId::generate());
    r.continuation_token = long;
    assert!(matches!(
        store.create_session(r).await,
        Err(StoreError::Invalid { .. })
    ));
}

const CHILD_JOURNAL: &str = "BDK_STORE_TEST_CHILD_JOURNAL";

/// The bytes of a journal generation that hold entries: the file is written
/// ahead with zeros, and no entry ends in a zero byte.
fn entries_len(path: &Path) -> u64 {
    let bytes = fs::read(path).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    u64::try_from(end).unwrap()
}

/// The writer half of [`the_journal_restores_what_a_power_cut_may_lose`]:
/// creates, appends, updates, rotates and deletes, reports the ids and the
/// last token, then waits to be killed. Run alone, it uses its own temp dir.
#[test]
#[ignore = "run as a child process by the_journal_restores_what_a_power_cut_may_lose"]
fn child_journal_writer() {
    let own = tempfile::tempdir().unwrap();
    let as_child = std::env::var_os(CHILD_JOURNAL).is_some();
    let root =
        std::env::var_os(CHILD_JOURNAL).map_or_else(|| own.path().to_path_buf(), PathBuf::from);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = FsStore::open(&root).unwrap();
        let a = new_session(&store).await;
        append_n(&store, &a, 3).await;
        store.append(&a, vec![delta(3), waiting()]).await.unwrap();
        append_n(&store, &a, 2).await;
        let mut update = store.get_session(&a).await.unwrap().unwrap();
        update.title = Some("renamed".into());
        store.update_session(update).await.unwrap();
        let token = new_http_token(&a);
        store
            .rotate_token(&a, &token_of(&store, &a).await, &token)
            .await
            .unwrap();
        // B's follow-up: a deferred rotation, made durable by the sync of
        // the boundary batch that follows it.
        let b = new_session(&store).await;
        let b_token = new_http_token(&b);
        store
            .rotate_token_deferred(&b, &token_of(&store, &b).await, &b_token)
            .await
            .unwrap();
        store.append(&b, vec![waiting()]).await.unwrap();
        let c = new_session(&store).await;
        assert!(store.delete_session(&c).await.unwrap());
        // D's deferred rotation is never followed by a write: only the
        // journal holds it, and no sync has covered it.
        let d = new_session(&store).await;
        let journal = fs::read_dir(root.join("journal"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let synced = entries_len(&journal);
        let d_token = token_of(&store, &d).await;
        store
            .rotate_token_deferred(&d, &d_token, &new_http_token(&d))
            .await
            .unwrap();
        assert_ne!(token_of(&store, &d).await, d_token);
        println!("ready {a} {b} {c} {token} {b_token} {d} {d_token} {synced}");
        std::io::stdout().flush().unwrap();
    });
    if as_child {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).unwrap_or(0) > 0 {}
    }
}

/// A power cut can lose whatever was only in the page cache, and the
/// session files are written without syncs: only the journal is synced.
/// After a kill -9, this test takes away from the files what a power cut
/// could (an event log's acknowledged tail, a record rewritten empty, a
/// whole session directory, a delete), and the next open puts every
/// acknowledged change back from the journal.
#[test]
fn the_journal_restores_what_a_power_cut_may_lose() {
    let dir = tempfile::tempdir().unwrap();
    let ready = run_and_kill(
        "child_journal_writer",
        &[(CHILD_JOURNAL, dir.path().as_os_str())],
    );
    let words: Vec<&str> = ready.split(' ').collect();
    let [a, b, c, token, b_token, d, d_token, synced] = words[..] else {
        panic!("unexpected report {ready:?}")
    };
    let (a, b, c, d) = (
        SessionId::parse(a).unwrap(),
        SessionId::parse(b).unwrap(),
        SessionId::parse(c).unwrap(),
        SessionId::parse(d).unwrap(),
    );
    let sessions = dir.path().join("sessions");
    let journals: Vec<PathBuf> = fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(journals.len(), 1);

    // D's rotation is only in the journal, after what the child saw synced,
    // so the power cut takes it. On a loaded machine the child's background
    // write-back may still have put it in `session.json` before the kill
    // (a journal sync can cover the entry first); that write is not synced
    // either, and a power cut can lose it too, so the file is put back as
    // it was before the rotation.
    let d_path = sessions.join(d.as_str()).join("session.json");
    let mut d_on_disk =
        serde_json::from_slice::<SessionRecord>(&fs::read(&d_path).unwrap()).unwrap();
    if d_on_disk.continuation_token != d_token {
        d_on_disk.continuation_token = d_token.to_owned();
        fs::write(&d_path, serde_json::to_vec_pretty(&d_on_disk).unwrap()).unwrap();
    }
    // The journal's file is written ahead with zeros, which is also what a
    // power cut leaves of an entry that never reached the disk.
    let synced: u64 = synced.parse().unwrap();
    let written = entries_len(&journals[0]);
    assert!(written > synced);
    let journal = OpenOptions::new().write(true).open(&journals[0]).unwrap();
    journal
        .write_all_at(&vec![0; usize::try_from(written - synced).unwrap()], synced)
        .unwrap();

    // A's log keeps only its first two events, its record is empty.
    let log = fs::read(events_path(dir.path(), &a)).unwrap();
    let two: usize = log
        .split_inclusive(|&b| b == b'\n')
        .take(2)
        .map(<[u8]>::len)
        .sum();
    fs::write(events_path(dir.path(), &a), &log[..two]).unwrap();
    fs::write(sessions.join(a.as_str()).join("session.json"), b"").unwrap();
    // B never reached the disk at all.
    fs::remove_dir_all(sessions.join(b.as_str())).unwrap();
    // C's delete did not either.
    fs::create_dir_all(sessions.join(c.as_str())).unwrap();
    fs::write(
        sessions.join(c.as_str()).join("session.json"),
        serde_json::to_vec(&record(&c)).unwrap(),
    )
    .unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = FsStore::open(dir.path()).unwrap();
        // Up to and including the boundary batch; the two deltas after it
        // were never acknowledged as durable and are gone.
        let events = store.read(&a, 0).await.unwrap();
        assert_eq!(indices(&events), (0..5).collect::<Vec<_>>());
        assert_eq!(events[4].kind(), "session.waiting");
        let record_a = store.get_session(&a).await.unwrap().unwrap();
        assert_eq!(record_a.title.as_deref(), Some("renamed"));
        assert_eq!(record_a.continuation_token, token);
        assert_eq!(
            store.find_by_token(token).await.unwrap().map(|r| r.id),
            Some(a.clone())
        );
        let events = store.read(&b, 0).await.unwrap();
        assert_eq!(indices(&events), vec![0]);
        assert_eq!(token_of(&store, &b).await, b_token);
        assert_eq!(token_of(&store, &d).await, d_token);
        assert!(store.get_session(&c).await.unwrap().is_none());
        assert!(!sessions.join(c.as_str()).exists());
        // The replayed journal is gone; only this store's own is there.
        assert_eq!(fs::read_dir(dir.path().join("journal")).unwrap().count(), 1);
        let next = store.append(&a, vec![waiting()]).await.unwrap();
        assert_eq!(indices(&next), vec![5]);
    });
}

/// A deferred rotation is in no file but the journal until a sync covers
/// it: `session.json` keeps the old token through ordinary appends, and is
/// rewritten once the next boundary batch is synced (by the background
/// write-back, or at once by `write_back`) or by `commit_token`.
#[tokio::test]
async fn a_deferred_rotation_reaches_the_record_only_after_its_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let on_disk = |id: &SessionId| {
        let path = dir
            .path()
            .join("sessions")
            .join(id.as_str())
            .join("session.json");
        serde_json::from_slice::<SessionRecord>(&fs::read(path).unwrap())
            .unwrap()
            .continuation_token
    };
    for settle_by_append in [true, false] {
        let id = new_session(&store).await;
        let old = token_of(&store, &id).await;
        let new = new_http_token(&id);
        store.rotate_token_deferred(&id, &old, &new).await.unwrap();
        assert_eq!(token_of(&store, &id).await, new);
        store.append(&id, vec![delta(0)]).await.unwrap();
        assert_eq!(on_disk(&id), old);
        if settle_by_append {
            store.append(&id, vec![waiting()]).await.unwrap();
            store.write_back().await.unwrap();
        } else {
            store.commit_token(&id).await.unwrap();
        }
        assert_eq!(on_disk(&id), new);
    }
    // `write_back` before any sync covers the entry runs one: the record is
    // never on disk ahead of its entry.
    let id = new_session(&store).await;
    let old = token_of(&store, &id).await;
    let new = new_http_token(&id);
    store.rotate_token_deferred(&id, &old, &new).await.unwrap();
    store.write_back().await.unwrap();
    assert_eq!(on_disk(&id), new);
    // A swap that is not between tokens naming the session (a pinned
    // channel token) is an ordinary durable rotation.
    let id = new_session(&store).await;
    let old = token_of(&store, &id).await;
    store
        .rotate_token_deferred(&id, &old, "slack:C1:T1")
        .await
        .unwrap();
    assert_eq!(on_disk(&id), "slack:C1:T1");
    assert_eq!(
        store
            .find_by_token("slack:C1:T1")
            .await
            .unwrap()
            .map(|r| r.id),
        Some(id)
    );

    // Closed in order with a rotation still pending: the store writes it
    // out, and leaves no journal behind.
    let id = new_session(&store).await;
    let old = token_of(&store, &id).await;
    let new = new_http_token(&id);
    store.rotate_token_deferred(&id, &old, &new).await.unwrap();
    assert_eq!(on_disk(&id), old);
    // One whose session was removed from outside meanwhile has nothing to
    // write: the close neither brings the session back nor keeps the
    // journal for a replay.
    let gone = new_session(&store).await;
    let gone_old = token_of(&store, &gone).await;
    store
        .rotate_token_deferred(&gone, &gone_old, &new_http_token(&gone))
        .await
        .unwrap();
    let gone_dir = dir.path().join("sessions").join(gone.as_str());
    fs::remove_dir_all(&gone_dir).unwrap();
    drop(store);
    assert_eq!(on_disk(&id), new);
    assert!(!gone_dir.exists());
    assert_eq!(fs::read_dir(dir.path().join("journal")).unwrap().count(), 0);
}

/// Nothing has to ask for a synced rotation's record: a background thread
/// writes it to `session.json` within about a second of the sync, and the
/// store keeps no pending record after that.
#[tokio::test]
async fn a_synced_rotation_reaches_its_file_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    let path = dir
        .path()
        .join("sessions")
        .join(id.as_str())
        .join("session.json");
    let on_disk = || {
        serde_json::from_slice::<SessionRecord>(&fs::read(&path).unwrap())
            .unwrap()
            .continuation_token
    };
    // Several follow-ups in a row: each rotation is current for readers at
    // once; the file catches up with the last one.
    let mut token = token_of(&store, &id).await;
    for _ in 0..3 {
        let new = new_http_token(&id);
        store
            .rotate_token_deferred(&id, &token, &new)
            .await
            .unwrap();
        store.append(&id, vec![waiting()]).await.unwrap();
        assert_eq!(token_of(&store, &id).await, new);
        token = new;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while on_disk() != token {
        assert!(
            std::time::Instant::now() < deadline,
            "the rotated record never reached session.json"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Written back in order: a later read of the file is no older.
    assert_eq!(token_of(&store, &id).await, token);
    drop(store);
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(token_of(&store, &id).await, token);
}

/// A store closed in order leaves no journal behind: nothing to replay.
#[tokio::test]
async fn a_store_closed_in_order_leaves_no_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let id = new_session(&store).await;
    store.append(&id, vec![waiting()]).await.unwrap();
    assert_eq!(fs::read_dir(dir.path().join("journal")).unwrap().count(), 1);
    drop(store);
    assert_eq!(fs::read_dir(dir.path().join("journal")).unwrap().count(), 0);
}

// Real write failures. A file-size limit (`RLIMIT_FSIZE`) makes the kernel
// refuse every write that reaches past an offset (`EFBIG`), whatever the
// file: that fails the journal's and the records' writes at a chosen point
// without any seam in the store. The limit is per process, so each case runs
// as a child process (this test binary again), started through `sh` with
// `SIGXFSZ` ignored, since the limit's signal would otherwise kill it.

const CHILD_FAULT: &str = "BDK_STORE_TEST_CHILD_FAULT";

/// Runs the ignored test `name` as a child that may lower its file-size
/// limit, and fails if it fails.
fn run_limited(name: &str) {
    let out = Command::new("sh")
        .args(["-c", "trap '' XFSZ; exec \"$0\" \"$@\""])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(name), "--ignored", "--nocapture"])
        .env(CHILD_FAULT, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `case` on a new state root in a child started by [`run_limited`].
/// Run alone, the ignored test hands itself to such a child instead.
fn in_limited_child<F: std::future::Future<Output = ()>>(
    name: &str,
    case: impl FnOnce(PathBuf) -> F,
) {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .unwrap();
    if std::env::var_os(CHILD_FAULT).is_none() {
        run_limited(name);
        return;
    }
    // A child must not start another: if `sh` did not ignore the signal,
    // fail here. SIGXFSZ is signal 25 on Linux.
    assert!(
        ignored & (1 << 24) != 0,
        "SIGXFSZ is not ignored in the child, so the file-size limit would kill it"
    );
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(case(dir.path().to_path_buf()));
}

/// Lets this process write files up to `bytes` long (`None`: no limit).
fn limit_file_size(bytes: Option<u64>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Fsize).maximum;
    setrlimit(
        Resource::Fsize,
        Rlimit {
            current: bytes.or(hard),
            maximum: hard,
        },
    )
    .unwrap();
}

/// The store's one journal file.
fn only_journal(root: &Path) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(root.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

/// What the journal alone restores: a copy of it is replayed into an empty
/// state root, and the events of `id` there are returned.
async fn replayed_alone(journal: &Path, id: &SessionId) -> Vec<Envelope> {
    let fresh = tempfile::tempdir().unwrap();
    fs::create_dir(fresh.path().join("journal")).unwrap();
    fs::copy(
        journal,
        fresh
            .path()
            .join("journal")
            .join(journal.file_name().unwrap()),
    )
    .unwrap();
    let store = FsStore::open(fresh.path()).unwrap();
    store.read(id, 0).await.unwrap()
}

/// A journal entry that cannot be written, nor its torn start undone, fails
/// its batch (whose events leave the log) and every durable write after it,
/// until the store is opened again; the journal is kept, and everything
/// acknowledged before is still there after the reopen.
#[test]
fn a_journal_write_that_cannot_be_undone_stops_durable_writes_until_a_reopen() {
    run_limited("child_journal_write_fails");
}

#[test]
#[ignore = "run as a child process by a_journal_write_that_cannot_be_undone_stops_durable_writes_until_a_reopen"]
fn child_journal_write_fails() {
    in_limited_child("child_journal_write_fails", |root| async move {
        let root = root.as_path();
        let store = FsStore::open(root).unwrap();
        let id = new_session(&store).await;
        store.append(&id, vec![delta(0), waiting()]).await.unwrap();
        let journal = only_journal(root);
        // The next entry's first 16 bytes can be written, the rest not, and
        // the undo (zeros over the entry) fails past the limit just the same.
        limit_file_size(Some(entries_len(&journal) + 16));
        let refused = store.append(&id, vec![delta(1), waiting()]).await;
        limit_file_size(None);
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(indices(&store.read(&id, 0).await.unwrap()), [0, 1]);

        let later = store.append(&id, vec![waiting()]).await.unwrap_err();
        assert!(later.to_string().contains("could not be undone"), "{later}");
        let other = store
            .create_session(record(&SessionId::generate()))
            .await
            .unwrap_err();
        assert!(other.to_string().contains("could not be undone"), "{other}");
        assert_eq!(indices(&replayed_alone(&journal, &id).await), [0, 1]);

        drop(store);
        assert!(journal.exists(), "a failed store keeps its journal");
        let store = FsStore::open(root).unwrap();
        assert_eq!(indices(&store.read(&id, 0).await.unwrap()), [0, 1]);
        let next = store.append(&id, vec![waiting()]).await.unwrap();
        assert_eq!(indices(&next), [2]);
    });
}

/// When the zeros written ahead of the journal's entries cannot be extended,
/// the batch that needed them fails alone: the store goes on once the disk
/// takes writes again, and the journal replays exactly the acknowledged
/// batches, the part-written zeros past them included.
#[test]
fn a_journal_that_cannot_grow_fails_the_batch_that_needed_it_and_goes_on() {
    run_limited("child_journal_cannot_grow");
}

#[test]
#[ignore = "run as a child process by a_journal_that_cannot_grow_fails_the_batch_that_needed_it_and_goes_on"]
fn child_journal_cannot_grow() {
    in_limited_child("child_journal_cannot_grow", |root| async move {
        let root = root.as_path();
        let store = FsStore::open(root).unwrap();
        // A large record fills most of the journal's first MiB, so the
        // entries reach its end long before the event log reaches the limit.
        let id = SessionId::generate();
        let mut big = record(&id);
        big.extra = json!({ "pad": "x".repeat(960_000) });
        store.create_session(big).await.unwrap();
        let journal = only_journal(root);
        let allocated = fs::metadata(&journal).unwrap().len();
        assert_eq!(allocated, 1 << 20);
        limit_file_size(Some(allocated + 4096));
        let mut acknowledged = 0;
        let refused = loop {
            let batch = vec![
                NewEvent::session(MessageAppended {
                    delta: "y".repeat(20_000),
                }),
                waiting(),
            ];
            match store.append(&id, batch).await {
                Ok(_) => acknowledged += 2,
                Err(e) => break e,
            }
            assert!(acknowledged < 20, "the journal never had to grow");
        };
        assert!(acknowledged >= 2, "{refused}");
        assert_eq!(fs::metadata(&journal).unwrap().len(), allocated + 4096);
        limit_file_size(None);
        let expected: Vec<u64> = (0..acknowledged).collect();
        assert_eq!(indices(&store.read(&id, 0).await.unwrap()), expected);

        let next = store.append(&id, vec![waiting()]).await.unwrap();
        assert_eq!(indices(&next), [acknowledged]);
        let expected: Vec<u64> = (0..=acknowledged).collect();
        assert_eq!(indices(&replayed_alone(&journal, &id).await), expected);
    });
}

/// A synced rotation whose record cannot be written stays pending: readers
/// keep the new token, the file the old one, no temp file is left, and the
/// next write-back writes it.
#[test]
fn a_rotated_record_that_cannot_be_written_is_written_back_later() {
    run_limited("child_record_write_back_fails");
}

#[test]
#[ignore = "run as a child process by a_rotated_record_that_cannot_be_written_is_written_back_later"]
fn child_record_write_back_fails() {
    in_limited_child("child_record_write_back_fails", |root| async move {
        let root = root.as_path();
        let on_disk = |id: &SessionId| {
            let path = root.join("sessions").join(id.as_str()).join("session.json");
            serde_json::from_slice::<SessionRecord>(&fs::read(path).unwrap())
                .unwrap()
                .continuation_token
        };
        let store = FsStore::open(root).unwrap();
        let id = new_session(&store).await;
        let old = token_of(&store, &id).await;
        let new = new_http_token(&id);
        store.rotate_token_deferred(&id, &old, &new).await.unwrap();
        // The write-back syncs the entry (a sync writes nothing past the
        // limit), then cannot write the record's temp file.
        limit_file_size(Some(64));
        let refused = store.write_back().await;
        limit_file_size(None);
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(token_of(&store, &id).await, new);
        assert_eq!(on_disk(&id), old);
        assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);

        store.write_back().await.unwrap();
        assert_eq!(on_disk(&id), new);
        drop(store);
        assert_eq!(fs::read_dir(root.join("journal")).unwrap().count(), 0);
    });
}
