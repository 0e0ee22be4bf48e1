//! [`FsStore`]: the embedded, zero-setup engine of the [`Store`] port.
//!
//! Everything lives under one state root in a documented layout:
//!
//! ```text
//! <state root>/
//!   sessions/<id>/session.json     the session record (written atomically)
//!   sessions/<id>/events.ndjson    the event log, one envelope per line
//!   sessions/<id>/token            the current token, once rotated onto one
//!                                  naming the session (a symlink)
//!   sessions/<id>/workspace/       the session workspace (made by the caller)
//!   traces/                        traces written by `bdk run`
//!   tool-calls/<callId>/           scratch directories of direct tool calls
//!   kv/<namespace>/<key>.json      key-value entries (names percent-encoded)
//!   files/<path>                   the file area
//!   artifacts/<id>.json, <id>.bin  artifact records and contents
//!   token-index/<token>.tok        continuation token -> session id (symlinks)
//!   journal/<store>-<gen>.wal      the journal: group commit (see `journal`)
//!   tmp/                           temp files of atomic writes
//! ```
//!
//! A session exists exactly when its `session.json` does: deleting the
//! directory from outside removes the session. The durability rules (what is
//! fsynced when, torn tails, the subscription seam) are described in
//! `docs/design/store-durability.md`. One process owns a state root: the
//! engine keeps per-session writer state in memory and does not coordinate
//! with other processes writing the same files (PostgreSQL is the engine for
//! several replicas). That state is a cache of what is on disk, bounded by
//! the sessions in use rather than by every session the root has ever had:
//! idle sessions' state is dropped and rebuilt from their files on next use,
//! and the token index is on disk.

mod blobs;
mod journal;
mod log;
pub(crate) mod paths;
mod task;
mod ticker;
mod tokens;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bdk_events::ids::http_token_session;
use bdk_events::{Envelope, SessionId};
use chrono::{DateTime, Utc};
use serde_json::Value;

use self::blobs::Areas;
use self::journal::{Applying, Entry, Journal};
use self::log::{SlotGuard, Slots};
use self::paths::{invalid, is_missing, replace_unsynced, safe_id};
use self::task::blocking;
use self::ticker::{Pass, Ticker};
use self::tokens::{MAX_TOKEN_LEN, TokenIndex, names_its_session};
use crate::{
    ArtifactFilter, ArtifactRecord, EventStream, NewEvent, Result, SessionRecord, Store,
    StoreError, TokenSwap,
};

/// Temp files older than this are leftovers of a crashed write and are
/// removed when a store opens. The margin keeps a second process that shares
/// the root (a `bdk run` next to a `bdk serve`) from losing an in-flight write.
const STALE_TEMP_AGE: Duration = Duration::from_secs(600);

/// How long a deferred rotation's record may stay in memory only, once a
/// sync made it durable, before a background thread writes it to
/// `session.json`. Rotations of one session within it cost one file write.
const RECORD_WRITE_BACK: Duration = Duration::from_secs(1);

/// The file-system store. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    sessions: PathBuf,
    traces: PathBuf,
    tool_calls: PathBuf,
    areas: Areas,
    slots: Slots,
    journal: Arc<Journal>,
    tokens: TokenIndex,
    /// Set once the token index is known to be complete.
    tokens_built: AtomicBool,
    /// Serializes the one-time scan that builds the token index of a state
    /// root written before it existed.
    token_build: tokio::sync::Mutex<()>,
    /// Deferred token rotations ([`Store::rotate_token_deferred`]) by
    /// session id: journaled, not yet in `session.json`. Readers of this
    /// store see these records instead of the files'. An entry goes once its
    /// record is written to the file, under the session's lock.
    pending: StdMutex<HashMap<String, Pending>>,
    /// Writes pending records back to their files a while after a sync made
    /// them durable (see [`Inner::write_back`]).
    write_back: Ticker,
}

/// A deferred rotation: the new record, its journal entry's sequence
/// number, and the guard that keeps a checkpoint from deleting the entry's
/// generation before the record reaches `session.json`.
struct Pending {
    record: SessionRecord,
    bytes: Vec<u8>,
    seq: u64,
    _applying: Applying,
}

impl FsStore {
    /// Opens (creating if needed) the state root and its top-level folders.
    ///
    /// This is a plain function: it runs once at startup, before any request.
    /// It makes a handful of `mkdir` calls and replays the journals of
    /// stores whose processes stopped without closing them (see
    /// `docs/design/store-durability.md`), which costs one `syncfs` when
    /// there was anything to replay.
    pub fn open(state_root: impl Into<PathBuf>) -> Result<FsStore> {
        let root = std::path::absolute(state_root.into())?;
        for dir in ["sessions", "tmp"] {
            fs::create_dir_all(root.join(dir))?;
        }
        let (journal, _) = Journal::open(
            &root.join("journal"),
            &root.join("sessions"),
            &root.join("tmp"),
        )?;
        let inner = Inner {
            journal: Arc::new(journal),
            sessions: root.join("sessions"),
            traces: root.join("traces"),
            tool_calls: root.join("tool-calls"),
            areas: Areas {
                kv: root.join("kv"),
                files: root.join("files"),
                artifacts: root.join("artifacts"),
                tmp: root.join("tmp"),
            },
            tokens: TokenIndex {
                dir: root.join("token-index"),
                tmp: root.join("tmp"),
            },
            root,
            slots: Slots::default(),
            tokens_built: AtomicBool::new(false),
            token_build: tokio::sync::Mutex::new(()),
            pending: StdMutex::default(),
            write_back: Ticker::new("bdk-store-records", RECORD_WRITE_BACK),
        };
        for dir in [
            &inner.root,
            &inner.sessions,
            &inner.traces,
            &inner.tool_calls,
            &inner.areas.kv,
            &inner.areas.files,
            &inner.areas.artifacts,
            &inner.areas.tmp,
            &inner.tokens.dir,
        ] {
            fs::create_dir_all(dir)?;
        }
        sweep_stale_temps(&inner.areas.tmp);
        Ok(FsStore {
            inner: Arc::new(inner),
        })
    }

    /// Writes every deferred session record to its `session.json` now,
    /// waiting for the journal sync that makes each durable (running one if
    /// none runs), instead of within a second of that sync. A record is
    /// current for this store's readers either way; this matters only to
    /// something reading the files themselves, such as a backup.
    pub async fn write_back(&self) -> Result<()> {
        let ids: Vec<String> = self.inner.pending().keys().cloned().collect();
        for id in ids {
            let Some(id) = SessionId::parse(&id) else {
                continue;
            };
            match self.lock_existing(&id).await {
                Ok(guard) => {
                    let inner = self.inner.clone();
                    blocking(move || inner.settle(guard.id.as_str(), &guard.dir)).await?;
                }
                Err(StoreError::SessionNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn session_dir(&self, id: &SessionId) -> Result<PathBuf> {
        Ok(self
            .inner
            .sessions
            .join(safe_id("session id", id.as_str())?))
    }

    /// Locks a session's slot after checking that `session.json` exists. A
    /// session found missing has its slot retired, which ends its live
    /// subscriptions.
    async fn lock_existing(&self, id: &SessionId) -> Result<SlotGuard> {
        let dir = self.session_dir(id)?;
        let mut guard = self.inner.slots.lock(id, &dir).await;
        // One `stat` per operation is how a session deleted from outside
        // (`rm -rf sessions/<id>`) is noticed, including on every append
        // batch. It is a short bounded syscall, run inline rather than paying
        // a blocking-task hop on the append hot path.
        match fs::metadata(&guard.record_path) {
            Ok(_) => Ok(guard),
            Err(e) if is_missing(&e) => {
                self.inner.slots.retire(&mut guard);
                self.inner.forget_pending(id.as_str());
                Err(StoreError::SessionNotFound(id.to_string()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`Self::lock_existing`], with the event log scanned.
    async fn lock_log(&self, id: &SessionId) -> Result<SlotGuard> {
        log::ensure_loaded(self.lock_existing(id).await?).await
    }

    /// [`Self::lock_log`] for an ordinary (non-boundary) append: when the
    /// session's append handle is open, still linked and as long as the
    /// store wrote it, that one `fstat` stands for the two checks by path.
    /// An outside `rm -rf` of the session, or a file renamed over its log,
    /// is still seen at once (the handle's file is unlinked); removing only
    /// `session.json` is seen by the next boundary batch or other
    /// operation, which check by path. Events appended in between go to a
    /// log that no longer belongs to a session and were never promised
    /// durable.
    async fn lock_for_append(&self, id: &SessionId) -> Result<SlotGuard> {
        let dir = self.session_dir(id)?;
        let guard = self.inner.slots.lock(id, &dir).await;
        if log::handle_intact(&guard) {
            return Ok(guard);
        }
        drop(guard);
        self.lock_log(id).await
    }

    /// Makes sure the token index holds every stored session's token,
    /// building it from the records the first time a state root written
    /// before the index existed is searched.
    async fn ensure_token_index(&self) -> Result<()> {
        if self.inner.tokens_built.load(Ordering::Acquire) {
            return Ok(());
        }
        let _building = self.inner.token_build.lock().await;
        let inner = self.inner.clone();
        blocking(move || {
            if !inner.tokens.is_built() {
                tracing::info!(root = %inner.root.display(), "building the continuation-token index of this state root (once)");
                let records = read_all_records(&inner.sessions)?
                    .into_iter()
                    .map(|r| (r.continuation_token, r.id.to_string()))
                    .collect::<Vec<_>>();
                inner.tokens.build(&records)?;
            }
            inner.tokens_built.store(true, Ordering::Release);
            Ok(())
        })
        .await
    }
}

impl Drop for Inner {
    /// Writes out the deferred rotations still pending, so that closing the
    /// journal (which removes it) loses none that a sync made durable. One
    /// that cannot be written keeps the journal for the next start.
    fn drop(&mut self) {
        let pending: Vec<String> = self.pending().keys().cloned().collect();
        for id in pending {
            let dir = self.sessions.join(&id);
            // A session removed from outside has no record to write.
            if !dir.join("session.json").exists() {
                continue;
            }
            if let Err(e) = self.settle(&id, &dir) {
                tracing::warn!(session_id = %id, error = %e, "could not write a rotated session record at close; the journal stays for the next start");
                self.journal.retain(format!(
                    "the record of session {id} could not be written: {e}"
                ));
            }
        }
    }
}

/// Refuses a token the index cannot hold.
fn check_token(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(invalid("continuation token", "empty"));
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(invalid(
            "continuation token",
            format!("longer than {MAX_TOKEN_LEN} bytes"),
        ));
    }
    Ok(())
}

/// Removes temp files left by writes that never finished.
fn sweep_stale_temps(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_TEMP_AGE);
        if old && let Err(e) = fs::remove_file(entry.path()) {
            tracing::debug!(path = %entry.path().display(), error = %e, "could not remove a stale temp file");
        }
    }
}

/// Reads one `session.json`; `None` when absent. A record naming another
/// session than its directory is corrupt (a copied directory, usually).
fn read_record(path: &Path, id: &str) -> Result<Option<SessionRecord>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.display().to_string(),
        message,
    };
    let mut record: SessionRecord =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if record.id.as_str() != id {
        return Err(corrupt(format!(
            "the record names session {} but lives in the directory of {id}",
            record.id
        )));
    }
    // A token rotated onto one naming the session is kept in a link beside
    // the record (see `tokens::read_current`), which then has the last word.
    if let Some(dir) = path.parent()
        && let Some((token, millis)) =
            tokens::read_current(dir, id).map_err(|e| StoreError::Corrupt {
                path: tokens::current_path(dir).display().to_string(),
                message: e.to_string(),
            })?
    {
        record.continuation_token = token;
        if let Some(at) = DateTime::from_timestamp_millis(millis) {
            record.updated_at = record.updated_at.max(at);
        }
    }
    Ok(Some(record))
}

impl Inner {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn has_pending(&self, id: &str) -> bool {
        self.pending().contains_key(id)
    }

    /// Has the background thread write pending records back within
    /// [`RECORD_WRITE_BACK`]; false when it cannot run (the caller then
    /// writes the record itself).
    fn schedule_write_back(this: &Arc<Self>) -> bool {
        let weak = Arc::downgrade(this);
        this.write_back.schedule(move || match weak.upgrade() {
            Some(inner) => inner.write_back(),
            None => Pass::Gone,
        })
    }

    /// One pass of the background write-back: every pending record whose
    /// journal entry is synced goes to its `session.json`, under its
    /// session's lock like any record write. A session whose record is gone
    /// (removed from outside) has its pending record dropped, as any
    /// operation on it would. Records not synced yet, or that could not be
    /// written, wait for the next pass.
    fn write_back(&self) -> Pass {
        // After a failed sync nothing more is written: the journal stays,
        // and the next start replays these records.
        if self.journal.has_failed() {
            return Pass::Done;
        }
        let synced = self.journal.synced();
        let (ready, waiting): (Vec<String>, usize) = {
            let pending = self.pending();
            let ready: Vec<String> = pending
                .iter()
                .filter(|(_, p)| p.seq <= synced)
                .map(|(id, _)| id.clone())
                .collect();
            let waiting = pending.len() - ready.len();
            (ready, waiting)
        };
        let mut left = waiting > 0;
        for id in ready {
            let Some(session) = SessionId::parse(&id) else {
                self.forget_pending(&id);
                continue;
            };
            let dir = self.sessions.join(&id);
            // A plain thread, so it may block on the session's (async)
            // lock; holders never wait for this thread.
            let mut guard = futures::executor::block_on(self.slots.lock(&session, &dir));
            match fs::metadata(&guard.record_path) {
                Ok(_) => {
                    if let Err(e) = self.settle(&id, &dir) {
                        tracing::warn!(session_id = %id, error = %e, "could not write a rotated session record; it stays pending and is tried again");
                        left = true;
                    }
                }
                Err(e) if is_missing(&e) => {
                    self.slots.retire(&mut guard);
                    self.forget_pending(&id);
                }
                Err(e) => {
                    tracing::warn!(session_id = %id, error = %e, "could not check a session record before writing it back; tried again");
                    left = true;
                }
            }
        }
        if left { Pass::More } else { Pass::Done }
    }

    /// The record of a deferred rotation of `id`, if one is pending.
    fn pending_record(&self, id: &str) -> Option<SessionRecord> {
        self.pending().get(id).map(|p| p.record.clone())
    }

    /// Drops the deferred rotation of `id` (the session is gone, or a later
    /// journal entry already replaced it).
    fn forget_pending(&self, id: &str) {
        self.pending().remove(id);
    }

    /// A session's record as this store's readers must see it: a deferred
    /// rotation's record in place of the file's. The pending map is read
    /// before the file: a rotation applied in between has already written
    /// the file, so the reader never sees an older record than at the
    /// moment it looked.
    fn current_record(&self, path: &Path, id: &str) -> Result<Option<SessionRecord>> {
        let pending = self.pending_record(id);
        Ok(read_record(path, id)?.map(|on_disk| pending.unwrap_or(on_disk)))
    }

    /// Makes the deferred rotation of the session in `dir` durable (waits
    /// for, or runs, the journal sync that covers its entry) and writes its
    /// record to `session.json`. Nothing to do without one. Blocks; the
    /// caller holds the session's lock. On failure the rotation stays
    /// pending (readers still see it; a synced entry is replayed at the
    /// next start) and the next settle tries again.
    fn settle(&self, id: &str, dir: &Path) -> Result<()> {
        let Some((seq, bytes)) = self.pending().get(id).map(|p| (p.seq, p.bytes.clone())) else {
            return Ok(());
        };
        self.journal.wait(seq)?;
        replace_unsynced(&self.areas.tmp, &dir.join("session.json"), &bytes)?;
        tokens::remove_current(dir)?;
        // Under the session's lock nobody else changed the entry meanwhile.
        self.forget_pending(id);
        Ok(())
    }

    /// Journals a session's new record, then writes it (atomically, without
    /// a sync: the journal is what makes it durable) and drops any token
    /// link beside it, which would name an older token. `previous` is what
    /// to journal back if the files cannot be written, so that a restart
    /// does not bring back a change the caller was told failed.
    fn replace_record(
        &self,
        dir: &Path,
        record: &SessionRecord,
        previous: &SessionRecord,
    ) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(record)?;
        let session = record.id.as_str();
        let applying = self.journal.commit(&Entry::Record {
            session,
            record: &bytes,
        })?;
        let written = replace_unsynced(&self.areas.tmp, &dir.join("session.json"), &bytes)
            .and_then(|()| tokens::remove_current(dir).map(drop));
        drop(applying);
        if let Err(e) = written {
            if let Ok(old) = serde_json::to_vec_pretty(previous)
                && let Err(undo) = self.journal.commit(&Entry::Record {
                    session,
                    record: &old,
                })
            {
                tracing::warn!(session_id = %session, error = %undo, "could not journal the undo of a failed record write");
            }
            return Err(e.into());
        }
        Ok(())
    }
}

/// Every readable session record, in no particular order. Directories
/// without a record are not sessions; unreadable records are logged and
/// skipped so one bad file cannot hide every other session.
fn read_all_records(sessions: &Path) -> Result<Vec<SessionRecord>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(sessions)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !entry.file_type()?.is_dir() || !bdk_events::ids::is_safe_segment(&name) {
            continue;
        }
        match read_record(&entry.path().join("session.json"), &name) {
            Ok(Some(record)) => out.push(record),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(session_id = %name, error = %e, "skipping an unreadable session record");
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl Store for FsStore {
    async fn create_session(&self, record: SessionRecord) -> Result<()> {
        let id = record.id.clone();
        let dir = self.session_dir(&id)?;
        check_token(&record.continuation_token)?;
        let mut guard = self.inner.slots.lock(&id, &dir).await;
        let inner = self.inner.clone();
        blocking(move || {
            if fs::metadata(&guard.record_path).is_ok() {
                return Err(StoreError::SessionExists(id.to_string()));
            }
            // The token's index entry before the session, so a session never
            // exists without it.
            inner.tokens.link(&record.continuation_token, id.as_str())?;
            // The journal entry is the commit point: once it is synced, a
            // restart makes the directory, the empty log and the record
            // even if the writes below never reach the disk.
            let bytes = serde_json::to_vec_pretty(&record)?;
            let applying = inner.journal.commit(&Entry::Create {
                session: id.as_str(),
                record: &bytes,
            })?;
            // The log first and the record last: the record is what makes
            // the directory a session for a reader.
            let written = (|| {
                fs::create_dir_all(&dir)?;
                fs::File::create(&guard.events_path)?;
                // A directory left by a delete that a crash interrupted may
                // still hold the old session's token link.
                tokens::remove_current(&dir)?;
                replace_unsynced(&inner.areas.tmp, &guard.record_path, &bytes)
            })();
            drop(applying);
            if let Err(e) = written {
                // Undo, so a restart does not create what the caller was
                // told failed.
                if let Err(undo) = inner.journal.commit(&Entry::Delete {
                    session: id.as_str(),
                }) {
                    tracing::warn!(session_id = %id, error = %undo, "could not journal the undo of a failed create");
                }
                let _ = fs::remove_dir_all(&dir);
                return Err(e.into());
            }
            guard.reset_empty();
            Ok(())
        })
        .await
    }

    async fn get_session(&self, id: &SessionId) -> Result<Option<SessionRecord>> {
        let dir = self.session_dir(id)?;
        let id = id.to_string();
        // Inline, like the `stat` of every append: a record is a small file
        // read from the page cache in practice, and a blocking-task hop
        // costs more than the read (it is on every request's path).
        self.inner.current_record(&dir.join("session.json"), &id)
    }

    /// Replaces the record but keeps the stored continuation token: tokens
    /// change only through [`Store::rotate_token`], so an update built from a
    /// record read before a rotation cannot roll the rotation back.
    async fn update_session(&self, mut record: SessionRecord) -> Result<()> {
        let guard = self.lock_existing(&record.id).await?;
        let inner = self.inner.clone();
        blocking(move || {
            inner.settle(guard.id.as_str(), &guard.dir)?;
            let Some(current) = read_record(&guard.record_path, guard.id.as_str())? else {
                return Err(StoreError::SessionNotFound(guard.id.to_string()));
            };
            record
                .continuation_token
                .clone_from(&current.continuation_token);
            inner.replace_record(&guard.dir, &record, &current)
        })
        .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        let inner = self.inner.clone();
        let mut records = blocking(move || {
            // Deferred rotations first, then the files: see `current_record`.
            let mut pending: HashMap<String, SessionRecord> = inner
                .pending()
                .iter()
                .map(|(id, p)| (id.clone(), p.record.clone()))
                .collect();
            let mut records = read_all_records(&inner.sessions)?;
            for record in &mut records {
                if let Some(newer) = pending.remove(record.id.as_str()) {
                    *record = newer;
                }
            }
            Ok(records)
        })
        .await?;
        records.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(records)
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool> {
        let dir = self.session_dir(id)?;
        let mut guard = self.inner.slots.lock(id, &dir).await;
        let inner = self.inner.clone();
        blocking(move || {
            if fs::metadata(&guard.record_path).is_err() {
                inner.slots.retire(&mut guard);
                return Ok(false);
            }
            let token = inner
                .current_record(&guard.record_path, guard.id.as_str())
                .ok()
                .flatten()
                .map(|r| r.continuation_token);
            // Journaled first: once synced, a restart finishes the delete.
            let applying = inner.journal.commit(&Entry::Delete {
                session: guard.id.as_str(),
            })?;
            // The record goes first: from that moment the session no longer
            // exists, even if removing the rest is interrupted.
            fs::remove_file(&guard.record_path)?;
            // The delete's entry is synced after any deferred rotation's.
            inner.forget_pending(guard.id.as_str());
            match fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if is_missing(&e) => {}
                Err(e) => return Err(e.into()),
            }
            drop(applying);
            // Retiring drops the live sender, which ends every subscription.
            inner.slots.retire(&mut guard);
            if let Some(token) = token
                && let Err(e) = inner.tokens.unlink(&token, guard.id.as_str())
            {
                // A leftover entry is a stale hint that lookups ignore.
                tracing::debug!(session_id = %guard.id, error = %e, "could not remove a deleted session's token entry");
            }
            Ok(true)
        })
        .await
    }

    async fn find_by_token(&self, token: &str) -> Result<Option<SessionRecord>> {
        // A token that names a session is looked for there first: the ones
        // the host issues have no index entry (see `tokens`). One naming a
        // session that does not hold it may still be pinned on another, so
        // a miss falls through to the index.
        if let Some(named) = http_token_session(token) {
            match self.get_session(&named).await {
                Ok(Some(record)) if record.continuation_token == token => return Ok(Some(record)),
                Ok(_) | Err(StoreError::Invalid { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.ensure_token_index().await?;
        let inner = self.inner.clone();
        let key = token.to_owned();
        let Some(id) = blocking(move || Ok(inner.tokens.lookup(&key)?)).await? else {
            return Ok(None);
        };
        let Some(id) = SessionId::parse(&id) else {
            return Ok(None);
        };
        // The index is a hint; the record is the truth. A stale entry is
        // left alone: removing it could race with a new session taking the
        // same (channel) token, and the next link of that token replaces it.
        let record = match self.get_session(&id).await {
            Ok(record) => record,
            Err(StoreError::Invalid { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(record.filter(|r| r.continuation_token == token))
    }

    async fn rotate_token(&self, id: &SessionId, expected: &str, new: &str) -> Result<TokenSwap> {
        check_token(new)?;
        let guard = self.lock_existing(id).await?;
        let inner = self.inner.clone();
        let (expected, new) = (expected.to_owned(), new.to_owned());
        blocking(move || {
            inner.settle(guard.id.as_str(), &guard.dir)?;
            let Some(current) = read_record(&guard.record_path, guard.id.as_str())? else {
                return Err(StoreError::SessionNotFound(guard.id.to_string()));
            };
            if current.continuation_token != expected {
                return Ok(TokenSwap::Stale);
            }
            let mut record = current.clone();
            record.continuation_token.clone_from(&new);
            record.updated_at = Utc::now();
            // As on create: the new token's entry (if it needs one) is
            // durable before the token becomes current; the old one goes
            // after.
            inner.tokens.link(&new, guard.id.as_str())?;
            inner.replace_record(&guard.dir, &record, &current)?;
            if let Err(e) = inner.tokens.unlink(&expected, guard.id.as_str()) {
                tracing::debug!(session_id = %guard.id, error = %e, "could not remove a rotated token's entry");
            }
            Ok(TokenSwap::Rotated)
        })
        .await
    }

    /// Journals the new record without waiting for a sync and keeps it in
    /// memory; the session's next boundary append (whose sync covers the
    /// entry), or any other write of its record, writes it to
    /// `session.json`. Only for a swap between tokens that name the session
    /// (no index entries to change); any other swap is a plain
    /// [`Store::rotate_token`].
    async fn rotate_token_deferred(
        &self,
        id: &SessionId,
        expected: &str,
        new: &str,
    ) -> Result<TokenSwap> {
        let session = id.as_str();
        if !(names_its_session(new, session) && names_its_session(expected, session)) {
            return self.rotate_token(id, expected, new).await;
        }
        check_token(new)?;
        // Inline: a small read from the page cache and one `write(2)` to the
        // journal, no sync, so shorter than a blocking-task hop.
        let guard = self.lock_existing(id).await?;
        let inner = &self.inner;
        let Some(current) = inner.current_record(&guard.record_path, guard.id.as_str())? else {
            return Err(StoreError::SessionNotFound(guard.id.to_string()));
        };
        if current.continuation_token != expected {
            return Ok(TokenSwap::Stale);
        }
        let mut record = current;
        new.clone_into(&mut record.continuation_token);
        record.updated_at = Utc::now();
        let bytes = serde_json::to_vec_pretty(&record)?;
        let written = inner.journal.write(&Entry::Record {
            session: guard.id.as_str(),
            record: &bytes,
        })?;
        inner.pending().insert(
            guard.id.to_string(),
            Pending {
                record,
                bytes,
                seq: written.seq,
                _applying: written.applying,
            },
        );
        Ok(TokenSwap::Rotated)
    }

    async fn commit_token(&self, id: &SessionId) -> Result<()> {
        if !self.inner.pending().contains_key(id.as_str()) {
            return Ok(());
        }
        let guard = self.lock_existing(id).await?;
        let inner = self.inner.clone();
        blocking(move || inner.settle(guard.id.as_str(), &guard.dir)).await
    }

    async fn append(&self, id: &SessionId, events: Vec<NewEvent>) -> Result<Vec<Envelope>> {
        if events.is_empty() {
            self.lock_existing(id).await?;
            return Ok(Vec::new());
        }
        if events.iter().any(|e| e.event.is_boundary()) {
            let mut guard = self.lock_log(id).await?;
            // A boundary batch is fsynced before it is acknowledged or fanned
            // out. The whole commit runs in a blocking task that owns the
            // lock, so the runtime never waits on the disk and a cancelled
            // caller cannot interrupt the commit between write and fan-out.
            let inner = self.inner.clone();
            blocking(move || {
                let appended = log::append(&mut guard, &inner.slots, events, Some(&inner.journal))?;
                // The batch's sync covered a deferred rotation journaled
                // before it: the rotation is durable, so its record may
                // reach the file, which the background write-back does
                // within a second (off this request's path, and once for
                // every rotation of the session meanwhile). Without that
                // thread it is written here. A failure leaves it pending
                // (still what readers see, replayed after a crash) and does
                // not undo the append, which is durable.
                if inner.has_pending(guard.id.as_str())
                    && !Inner::schedule_write_back(&inner)
                    && let Err(e) = inner.settle(guard.id.as_str(), &guard.dir)
                {
                    tracing::warn!(session_id = %guard.id, error = %e, "could not write a rotated session record; it stays pending");
                }
                Ok(appended)
            })
            .await
        } else {
            // Ordinary batches are written inline: one `write(2)` of an
            // in-memory buffer into the page cache, short and bounded. A
            // blocking-task hop per append would cost more than the write
            // itself and cap throughput well below the 100k events/s target.
            let mut guard = self.lock_for_append(id).await?;
            log::append(&mut guard, &self.inner.slots, events, None)
        }
    }

    async fn read(&self, id: &SessionId, from: u64) -> Result<Vec<Envelope>> {
        let guard = self.lock_log(id).await?;
        log::read(guard, from).await
    }

    async fn next_index(&self, id: &SessionId) -> Result<u64> {
        let guard = self.lock_log(id).await?;
        Ok(guard.log.as_ref().map_or(0, |l| l.next_index))
    }

    async fn subscribe(&self, id: &SessionId, from: u64) -> Result<EventStream> {
        let guard = self.lock_log(id).await?;
        Ok(log::subscribe(guard, from))
    }

    /// `sessions/<id>/workspace`. An id that is not a safe path segment
    /// (never produced by [`SessionId::generate`] or [`SessionId::parse`])
    /// maps to a directory under `tmp/` that belongs to no session, so it can
    /// never point outside the state root.
    fn workspace_dir(&self, id: &SessionId) -> PathBuf {
        match self.session_dir(id) {
            Ok(dir) => dir.join("workspace"),
            Err(_) => paths::chunked_path(
                &self.inner.areas.tmp.join("invalid-sessions"),
                &paths::encode(id.as_str()),
                "",
            )
            .join("workspace"),
        }
    }

    fn tool_call_dir(&self, call_id: &str) -> Result<PathBuf> {
        Ok(self.inner.tool_calls.join(safe_id("call id", call_id)?))
    }

    fn traces_dir(&self) -> PathBuf {
        self.inner.traces.clone()
    }

    fn state_root(&self) -> PathBuf {
        self.inner.root.clone()
    }

    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Value>> {
        let (inner, ns, key) = (self.inner.clone(), namespace.to_owned(), key.to_owned());
        blocking(move || inner.areas.kv_get(&ns, &key)).await
    }

    async fn kv_put(&self, namespace: &str, key: &str, value: Value) -> Result<()> {
        let (inner, ns, key) = (self.inner.clone(), namespace.to_owned(), key.to_owned());
        blocking(move || inner.areas.kv_put(&ns, &key, &value)).await
    }

    /// Atomic through `link(2)`, so it holds even against another process
    /// sharing the state root (a `bdk run` beside a `bdk serve`).
    async fn kv_put_if_absent(&self, namespace: &str, key: &str, value: Value) -> Result<bool> {
        let (inner, ns, key) = (self.inner.clone(), namespace.to_owned(), key.to_owned());
        blocking(move || inner.areas.kv_put_if_absent(&ns, &key, &value)).await
    }

    async fn kv_delete(&self, namespace: &str, key: &str) -> Result<bool> {
        let (inner, ns, key) = (self.inner.clone(), namespace.to_owned(), key.to_owned());
        blocking(move || inner.areas.kv_delete(&ns, &key)).await
    }

    async fn kv_list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>> {
        let (inner, ns, prefix) = (self.inner.clone(), namespace.to_owned(), prefix.to_owned());
        blocking(move || inner.areas.kv_list(&ns, &prefix)).await
    }

    async fn file_put(&self, path: &str, bytes: Vec<u8>) -> Result<()> {
        let (inner, path) = (self.inner.clone(), path.to_owned());
        blocking(move || inner.areas.file_put(&path, &bytes)).await
    }

    async fn file_get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let (inner, path) = (self.inner.clone(), path.to_owned());
        blocking(move || inner.areas.file_get(&path)).await
    }

    async fn file_delete(&self, path: &str) -> Result<bool> {
        let (inner, path) = (self.inner.clone(), path.to_owned());
        blocking(move || inner.areas.file_delete(&path)).await
    }

    async fn file_list(&self, prefix: &str) -> Result<Vec<String>> {
        let (inner, prefix) = (self.inner.clone(), prefix.to_owned());
        blocking(move || inner.areas.file_list(&prefix)).await
    }

    async fn artifact_put(&self, record: ArtifactRecord, content: Vec<u8>) -> Result<()> {
        let inner = self.inner.clone();
        blocking(move || inner.areas.artifact_put(&record, &content)).await
    }

    async fn artifact_get(&self, id: &str) -> Result<Option<ArtifactRecord>> {
        let (inner, id) = (self.inner.clone(), id.to_owned());
        blocking(move || inner.areas.artifact_get(&id)).await
    }

    async fn artifact_content(&self, id: &str) -> Result<Option<Vec<u8>>> {
        let (inner, id) = (self.inner.clone(), id.to_owned());
        blocking(move || inner.areas.artifact_content(&id)).await
    }

    async fn artifact_list(&self, filter: &ArtifactFilter) -> Result<Vec<ArtifactRecord>> {
        let (inner, filter) = (self.inner.clone(), filter.clone());
        blocking(move || inner.areas.artifact_list(&filter)).await
    }

    /// Slots of sessions in use plus at most a few hundred recent ones.
    fn resident_sessions(&self) -> (usize, u64) {
        self.inner.slots.resident()
    }
}
