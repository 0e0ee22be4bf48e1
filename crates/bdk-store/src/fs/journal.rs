//! The journal of the file engine: group commit across sessions.
//!
//! Every write the engine promises to keep (a boundary batch of events, a
//! session record created, updated or rotated, a session deleted) is first
//! described by one entry appended to the journal, `journal/<store>-<gen>.wal`.
//! One `fdatasync` of the journal then makes durable every entry written up
//! to that moment, whichever sessions they belong to: a writer that finds a
//! sync already running waits for the next one, which covers it and every
//! other writer that arrived meanwhile (the leader/follower scheme of
//! database write-ahead logs). The session files themselves are written
//! without syncing; they reach the disk with the kernel's writeback or the
//! next checkpoint.
//!
//! Entries say what the files must hold, not how to get there, so applying
//! one twice changes nothing: an append entry carries the session's events
//! from the last point already covered (by an earlier entry or a checkpoint)
//! up to and including the boundary batch, a record entry the whole record.
//! When a store opens, it replays the journals that no live process holds
//! (each process keeps an exclusive lock on its own) onto the session files,
//! `syncfs`es once, and removes them.
//!
//! A generation grows to [`ROTATE_AT`] bytes; the next entry then starts a
//! new one, and a background thread checkpoints the old one once every entry
//! in it is synced and applied: one `syncfs` makes every file written so far
//! durable, after which the old generation is deleted.
//!
//! Entry format: `len: u32 LE`, `crc32(body): u32 LE`, then the body:
//! `kind: u8`, `session id length: u8`, the id, for appends `first: u64 LE`
//! and `count: u64 LE`, then the payload (NDJSON lines or the record's JSON).
//! Replay stops at the first entry whose length or checksum is wrong: that
//! and everything after it was never synced, so never acknowledged.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bdk_events::ids::is_safe_segment;
use bdk_events::ndjson;

use super::paths::{is_missing, replace_unsynced, sync_dir};
use super::tokens;

/// A generation is closed for new entries once it holds this many bytes.
/// Replay reads at most a few of them; a checkpoint runs once per this much
/// journal.
pub(crate) const ROTATE_AT: u64 = 8 << 20;

/// A generation's file is extended by writing this many zero bytes at a
/// time, ahead of the entries. An entry then overwrites blocks that already
/// exist, so its `fdatasync` writes data only: no new size or block map to
/// record (on ext4 with a journal, no journal commit), once per this much
/// journal instead of on every sync.
const PREALLOCATE: u64 = 1 << 20;

const SUFFIX: &str = ".wal";
const HEADER: usize = 8;

const KIND_APPEND: u8 = 1;
const KIND_CREATE: u8 = 2;
const KIND_RECORD: u8 = 3;
const KIND_DELETE: u8 = 4;

/// One journal entry. Session ids are safe path segments (at most 128
/// bytes), checked by the store before anything is journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    /// Events `first..first + count` of a session's log are exactly `lines`.
    Append {
        session: &'a str,
        first: u64,
        count: u64,
        lines: &'a [u8],
    },
    /// A session was created with this `session.json` (and an empty log).
    Create { session: &'a str, record: &'a [u8] },
    /// A session's `session.json` is now this (an update or a rotation).
    Record { session: &'a str, record: &'a [u8] },
    /// A session was deleted.
    Delete { session: &'a str },
}

impl Entry<'_> {
    fn session(&self) -> &str {
        match self {
            Entry::Append { session, .. }
            | Entry::Create { session, .. }
            | Entry::Record { session, .. }
            | Entry::Delete { session } => session,
        }
    }

    /// The entry framed for the journal.
    fn encode(&self) -> io::Result<Vec<u8>> {
        let session = self.session().as_bytes();
        let id_len = u8::try_from(session.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "session id too long"))?;
        let (kind, payload) = match self {
            Entry::Append { lines, .. } => (KIND_APPEND, *lines),
            Entry::Create { record, .. } => (KIND_CREATE, *record),
            Entry::Record { record, .. } => (KIND_RECORD, *record),
            Entry::Delete { .. } => (KIND_DELETE, &[][..]),
        };
        let mut out = Vec::with_capacity(HEADER + 2 + session.len() + 16 + payload.len());
        out.extend_from_slice(&[0; HEADER]);
        out.push(kind);
        out.push(id_len);
        out.extend_from_slice(session);
        if let Entry::Append { first, count, .. } = self {
            out.extend_from_slice(&first.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        out.extend_from_slice(payload);
        let len = u32::try_from(out.len() - HEADER)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "journal entry too large"))?;
        let crc = crc32(&out[HEADER..]);
        out[..4].copy_from_slice(&len.to_le_bytes());
        out[4..HEADER].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }
}

/// The whole entries at the start of `bytes`, up to the first that is
/// incomplete or fails its checksum (a write that was never synced).
pub(crate) fn decode(bytes: &[u8]) -> (Vec<Entry<'_>>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some((entry, next)) = decode_one(bytes, pos) {
        out.push(entry);
        pos = next;
    }
    (out, pos)
}

fn decode_one(bytes: &[u8], pos: usize) -> Option<(Entry<'_>, usize)> {
    let header = bytes.get(pos..pos.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    let start = pos + HEADER;
    let body = bytes.get(start..start.checked_add(len)?)?;
    if len < 2 || crc32(body) != crc {
        return None;
    }
    let (kind, id_len) = (body[0], usize::from(body[1]));
    let session = std::str::from_utf8(body.get(2..2 + id_len)?).ok()?;
    let rest = &body[2 + id_len..];
    let entry = match kind {
        KIND_APPEND => {
            let first = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            let count = u64::from_le_bytes(rest.get(8..16)?.try_into().ok()?);
            Entry::Append {
                session,
                first,
                count,
                lines: &rest[16..],
            }
        }
        KIND_CREATE => Entry::Create {
            session,
            record: rest,
        },
        KIND_RECORD => Entry::Record {
            session,
            record: rest,
        },
        KIND_DELETE => Entry::Delete { session },
        _ => return None,
    };
    Some((entry, start + len))
}

/// CRC-32 (IEEE), table-driven.
fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut c = !0u32;
    for &b in bytes {
        c = TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// One generation's file.
struct Generation {
    number: u64,
    file: Arc<File>,
    path: PathBuf,
    /// The sequence numbers of the entries written to it:
    /// `first_seq..=last_seq` (empty when `last_seq < first_seq`).
    first_seq: u64,
    last_seq: u64,
}

impl Generation {
    fn has_entries(&self) -> bool {
        self.last_seq >= self.first_seq
    }
}

struct State {
    current: Generation,
    /// Bytes of entries written to the current generation.
    len: u64,
    /// Bytes of the current generation's file that exist (entries, then
    /// zeros written ahead of them).
    allocated: u64,
    /// Closed generations not yet checkpointed.
    retiring: Vec<Generation>,
    /// Sequence number of the last entry written, and of the last one a
    /// completed sync covers.
    written: u64,
    synced: u64,
    /// True while a leader syncs.
    syncing: bool,
    /// Set when a write could not be rolled back or a sync failed. After a
    /// failed `fsync` the kernel may have dropped the unwritten pages, so
    /// nothing written since the last good sync can be trusted: every later
    /// durable write fails until the process restarts and replays.
    failed: Option<String>,
    /// Per generation, the entries whose changes to the session files are
    /// still being made. A checkpoint waits for them.
    applying: BTreeMap<u64, usize>,
    checkpointing: bool,
    /// Syncs of the journal since open.
    syncs: u64,
}

/// The journal of one store. See the module documentation.
pub(crate) struct Journal {
    dir: PathBuf,
    /// `<unix ms at open>-<pid>-<stores opened before in this process>`:
    /// this store's generation files start so, and sort after those of
    /// stores that opened earlier.
    name: String,
    state: Mutex<State>,
    /// Signalled when a sync completes, an entry is applied, or a failure
    /// is recorded.
    changed: Condvar,
}

/// Held while the changes an entry describes are made to the session files.
/// A checkpoint of the entry's generation waits until it is dropped.
pub(crate) struct Applying {
    journal: Arc<Journal>,
    generation: u64,
}

impl Drop for Applying {
    fn drop(&mut self) {
        let mut st = self.journal.lock();
        if let Some(n) = st.applying.get_mut(&self.generation) {
            *n -= 1;
            if *n == 0 {
                st.applying.remove(&self.generation);
            }
        }
        self.journal.changed.notify_all();
    }
}

/// An entry written by [`Journal::write`]: its sequence number (for
/// [`Journal::wait`]) and the guard a checkpoint of its generation waits for.
pub(crate) struct Written {
    pub(crate) seq: u64,
    pub(crate) applying: Applying,
}

/// What a store's opening found in journals left by processes that are gone.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub(crate) files: usize,
    pub(crate) entries: usize,
}

impl Journal {
    /// Replays every journal in `dir` that no live process holds onto the
    /// sessions under `sessions`, makes the result durable, removes those
    /// journals, and starts this process's first generation.
    pub(crate) fn open(dir: &Path, sessions: &Path, tmp: &Path) -> io::Result<(Journal, Replayed)> {
        fs::create_dir_all(dir)?;
        let replayed = replay(dir, sessions, tmp)?;
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        // Several stores may open in one process (and one millisecond).
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let n = OPENED.fetch_add(1, Ordering::Relaxed);
        let name = format!("{millis:013}-{}-{n}", std::process::id());
        let current = create_generation(dir, &name, 1, 1)?;
        let journal = Journal {
            dir: dir.to_path_buf(),
            name,
            state: Mutex::new(State {
                current,
                len: 0,
                allocated: 0,
                retiring: Vec::new(),
                written: 0,
                synced: 0,
                syncing: false,
                failed: None,
                applying: BTreeMap::new(),
                checkpointing: false,
                syncs: 0,
            }),
            changed: Condvar::new(),
        };
        Ok((journal, replayed))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `entry` and returns once a sync covers it. Blocks: call from a
    /// blocking task. The returned guard must live until the entry's changes
    /// are made to the session files (for entries written before them).
    pub(crate) fn commit(self: &Arc<Self>, entry: &Entry<'_>) -> io::Result<Applying> {
        let written = self.write(entry)?;
        self.wait(written.seq)?;
        Ok(written.applying)
    }

    /// Writes `entry` without waiting for a sync: it becomes durable with the
    /// next sync, which any later [`Journal::commit`] (of any session) or a
    /// [`Journal::wait`] for its sequence number runs or joins. The returned
    /// guard must live until the entry's changes are made to the session
    /// files, which must not happen before the entry is synced.
    pub(crate) fn write(self: &Arc<Self>, entry: &Entry<'_>) -> io::Result<Written> {
        let bytes = entry.encode()?;
        let mut st = self.lock();
        failed(&st)?;
        if st.len > 0 && st.len + bytes.len() as u64 > ROTATE_AT {
            self.rotate(&mut st)?;
        }
        let end = st.len + bytes.len() as u64;
        if end > st.allocated {
            // Zeros ahead of the entries: replay stops at the first zero
            // length, exactly where the entries end.
            let to = end.max(st.allocated + PREALLOCATE);
            write_zeros(&st.current.file, st.allocated, to)?;
            st.allocated = to;
        }
        if let Err(e) = st.current.file.write_all_at(&bytes, st.len) {
            // Zero what part of the entry was written, so the next entry
            // does not land before garbage that a replay could misread.
            if write_zeros(&st.current.file, st.len, end).is_err() {
                st.failed = Some(format!(
                    "a journal write failed and could not be undone: {e}"
                ));
            }
            return Err(e);
        }
        st.len += bytes.len() as u64;
        st.written += 1;
        let seq = st.written;
        st.current.last_seq = seq;
        let generation = st.current.number;
        *st.applying.entry(generation).or_default() += 1;
        Ok(Written {
            seq,
            applying: Applying {
                journal: self.clone(),
                generation,
            },
        })
    }

    /// Keeps the journal for the next start to replay instead of removing
    /// it at close, and fails every later durable write: the session files
    /// are missing a change that only the journal holds.
    pub(crate) fn retain(&self, why: String) {
        let mut st = self.lock();
        if st.failed.is_none() {
            st.failed = Some(why);
        }
        self.changed.notify_all();
    }

    /// Whether a sync or an unrecoverable write failed: durable writes fail
    /// until the process restarts, and the journal stays for the replay.
    pub(crate) fn has_failed(&self) -> bool {
        self.lock().failed.is_some()
    }

    /// The sequence number of the last entry a completed sync covers.
    pub(crate) fn synced(&self) -> u64 {
        self.lock().synced
    }

    /// Returns once entry `seq` is synced, leading a sync when none runs.
    /// Blocks: call from a blocking task.
    pub(crate) fn wait(self: &Arc<Self>, seq: u64) -> io::Result<()> {
        let st = self.lock();
        let (_st, result) = self.wait_synced(st, seq);
        result
    }

    /// Waits until entry `seq` is synced, leading a sync when none runs.
    fn wait_synced<'a>(
        self: &'a Arc<Self>,
        mut st: MutexGuard<'a, State>,
        seq: u64,
    ) -> (MutexGuard<'a, State>, io::Result<()>) {
        loop {
            if let Err(e) = failed(&st) {
                return (st, Err(e));
            }
            if st.synced >= seq {
                return (st, Ok(()));
            }
            if st.syncing {
                st = self
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead: sync everything written so far, outside the lock, so
            // writers that arrive meanwhile queue up for the next sync.
            st.syncing = true;
            let target = st.written;
            let synced = st.synced;
            let mut files: Vec<Arc<File>> = st
                .retiring
                .iter()
                .filter(|g| g.has_entries() && g.last_seq > synced)
                .map(|g| g.file.clone())
                .collect();
            if st.current.has_entries() && st.current.last_seq > synced {
                files.push(st.current.file.clone());
            }
            drop(st);
            let result = files.iter().try_for_each(|f| f.sync_data());
            st = self.lock();
            st.syncing = false;
            st.syncs += 1;
            match result {
                Ok(()) => st.synced = st.synced.max(target),
                Err(e) => {
                    tracing::error!(error = %e, "the journal could not be synced; durable writes fail until the server restarts");
                    st.failed = Some(format!("the journal could not be synced: {e}"));
                }
            }
            self.changed.notify_all();
            self.maybe_checkpoint(&mut st);
        }
    }

    /// Closes the current generation and starts the next. Under the lock.
    fn rotate(self: &Arc<Self>, st: &mut State) -> io::Result<()> {
        let number = st.current.number + 1;
        let next = create_generation(&self.dir, &self.name, number, st.written + 1)?;
        let old = std::mem::replace(&mut st.current, next);
        st.len = 0;
        st.allocated = 0;
        if old.has_entries() {
            st.retiring.push(old);
            self.maybe_checkpoint(st);
        } else if let Err(e) = fs::remove_file(&old.path) {
            tracing::debug!(path = %old.path.display(), error = %e, "could not remove an empty journal generation");
        }
        Ok(())
    }

    /// Starts the checkpoint thread when a closed generation is fully synced
    /// and none runs.
    fn maybe_checkpoint(self: &Arc<Self>, st: &mut State) {
        let ready = st.retiring.iter().any(|g| g.last_seq <= st.synced);
        if !ready || st.checkpointing || st.failed.is_some() {
            return;
        }
        st.checkpointing = true;
        let journal = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bdk-journal-checkpoint".into())
            .spawn(move || journal.checkpoint());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start a journal checkpoint; will retry at the next rotation");
            st.checkpointing = false;
        }
    }

    /// Makes the session files durable for every closed, synced generation
    /// (one `syncfs`), then deletes those generations.
    fn checkpoint(self: Arc<Self>) {
        loop {
            let mut st = self.lock();
            let synced = st.synced;
            let ready: Vec<u64> = st
                .retiring
                .iter()
                .filter(|g| g.last_seq <= synced)
                .map(|g| g.number)
                .collect();
            if ready.is_empty() || st.failed.is_some() {
                st.checkpointing = false;
                return;
            }
            // Entries written before their changes (records, deletes) may
            // still be being applied; the syncfs must come after.
            while ready
                .iter()
                .any(|g| st.applying.get(g).is_some_and(|&n| n > 0))
            {
                st = self
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            drop(st);
            let result = syncfs(&self.dir);
            let mut st = self.lock();
            if let Err(e) = result {
                tracing::warn!(error = %e, "a journal checkpoint could not sync the file system; will retry at the next rotation");
                st.checkpointing = false;
                return;
            }
            let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut st.retiring)
                .into_iter()
                .partition(|g| ready.contains(&g.number));
            st.retiring = keep;
            drop(st);
            for generation in done {
                if let Err(e) = fs::remove_file(&generation.path) {
                    tracing::warn!(path = %generation.path.display(), error = %e, "could not remove a checkpointed journal generation (it is replayed harmlessly on the next start)");
                }
            }
        }
    }
}

impl Drop for Journal {
    /// A store closed in order checkpoints: one `syncfs`, then its journal
    /// goes, so the next start has nothing to replay. (A killed process
    /// leaves its journal, which the next start replays.)
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if st.failed.is_some() {
            return;
        }
        let written = st.current.has_entries() || !st.retiring.is_empty();
        if written && let Err(e) = syncfs(&self.dir) {
            tracing::warn!(error = %e, "could not sync the file system at close; the journal stays for the next start");
            return;
        }
        for generation in st.retiring.iter().chain([&st.current]) {
            if let Err(e) = fs::remove_file(&generation.path) {
                tracing::debug!(path = %generation.path.display(), error = %e, "could not remove a journal generation at close");
            }
        }
    }
}

fn failed(st: &State) -> io::Result<()> {
    match &st.failed {
        Some(message) => Err(io::Error::other(message.clone())),
        None => Ok(()),
    }
}

fn generation_path(dir: &Path, name: &str, number: u64) -> PathBuf {
    dir.join(format!("{name}-{number:08}{SUFFIX}"))
}

/// Creates a generation's file, takes its lock (so no other process
/// replays it while this one lives) and makes its name durable.
fn create_generation(
    dir: &Path,
    name: &str,
    number: u64,
    first_seq: u64,
) -> io::Result<Generation> {
    let path = generation_path(dir, name, number);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    file.try_lock().map_err(io::Error::from)?;
    sync_dir(dir)?;
    Ok(Generation {
        number,
        file: Arc::new(file),
        path,
        first_seq,
        last_seq: first_seq - 1,
    })
}

/// Writes zero bytes over `from..to` of `file`.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = from;
    while at < to {
        let n = usize::try_from(to - at).map_or(ZEROS.len(), |n| n.min(ZEROS.len()));
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn syncfs(dir: &Path) -> io::Result<()> {
    let dir = File::open(dir)?;
    rustix::fs::syncfs(&dir).map_err(io::Error::from)
}

/// Replays the journals in `dir` whose owners are gone, oldest first.
fn replay(dir: &Path, sessions: &Path, tmp: &Path) -> io::Result<Replayed> {
    let mut dead: Vec<(PathBuf, File)> = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(&SUFFIX[1..]) {
            continue;
        }
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(e),
        };
        match file.try_lock() {
            Ok(()) => dead.push((path, file)),
            // A live process's journal: its owner applies it.
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    dead.sort_by(|a, b| a.0.cmp(&b.0));
    let mut replayed = Replayed::default();
    for (path, _) in &dead {
        let bytes = fs::read(path)?;
        let (entries, valid) = decode(&bytes);
        // Past the entries: zeros written ahead of them, or an entry that
        // was never synced.
        if bytes[valid..].iter().any(|&b| b != 0) {
            tracing::debug!(path = %path.display(), ignored_bytes = bytes.len() - valid, "a journal ends in an entry that was never synced");
        }
        for entry in &entries {
            apply(sessions, tmp, entry)?;
        }
        replayed.files += 1;
        replayed.entries += entries.len();
    }
    if replayed.entries > 0 {
        tracing::info!(
            files = replayed.files,
            entries = replayed.entries,
            "replayed the journal of a process that stopped"
        );
        // What the entries describe may be in the page cache only (the
        // files are written without syncs, and replay skips what matches).
        syncfs(dir)?;
    }
    for (path, _) in &dead {
        if let Err(e) = fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a replayed journal");
        }
    }
    Ok(replayed)
}

/// Makes the session files hold what `entry` says, if they do not already.
pub(crate) fn apply(sessions: &Path, tmp: &Path, entry: &Entry<'_>) -> io::Result<()> {
    let id = entry.session();
    if !is_safe_segment(id) {
        tracing::warn!(session_id = %id, "a journal entry names an unsafe session id; skipped");
        return Ok(());
    }
    let dir = sessions.join(id);
    let record_path = dir.join("session.json");
    match entry {
        Entry::Create { record, .. } => {
            fs::create_dir_all(&dir)?;
            OpenOptions::new()
                .append(true)
                .create(true)
                .open(dir.join("events.ndjson"))?;
            write_record_if_changed(tmp, &dir, &record_path, record)
        }
        Entry::Record { record, .. } => {
            if fs::metadata(&record_path).is_err() {
                // Gone since (deleted from outside): never brought back.
                return Ok(());
            }
            write_record_if_changed(tmp, &dir, &record_path, record)
        }
        Entry::Delete { .. } => {
            match fs::remove_file(&record_path) {
                Ok(()) => {}
                Err(e) if is_missing(&e) => {}
                Err(e) => return Err(e),
            }
            match fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if is_missing(&e) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Entry::Append {
            first,
            count,
            lines,
            ..
        } => {
            if fs::metadata(&record_path).is_err() {
                return Ok(());
            }
            apply_append(&dir.join("events.ndjson"), id, *first, *count, lines)
        }
    }
}

fn write_record_if_changed(
    tmp: &Path,
    dir: &Path,
    record_path: &Path,
    record: &[u8],
) -> io::Result<()> {
    let same = fs::read(record_path).is_ok_and(|on_disk| on_disk == record);
    // The entry names the current token: a link left beside the record
    // would name an older one.
    tokens::remove_current(dir)?;
    if same {
        return Ok(());
    }
    replace_unsynced(tmp, record_path, record)
}

/// Makes events `first..first + count` of the log at `path` exactly `lines`:
/// nothing when they already are, else the log is cut at event `first` and
/// `lines` written there. A log with fewer than `first` events cannot take
/// them (a gap): that is logged and the log left alone.
fn apply_append(path: &Path, id: &str, first: u64, count: u64, lines: &[u8]) -> io::Result<()> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let scan = match ndjson::scan(&bytes) {
        Ok(scan) => scan,
        Err(e) => {
            tracing::warn!(session_id = %id, error = %e, "a journaled append found its log damaged; left for the store to report");
            return Ok(());
        }
    };
    let valid = usize::try_from(scan.valid_len).unwrap_or(bytes.len());
    let mut offset = None;
    let mut index = 0u64;
    let mut pos = 0usize;
    for line in bytes[..valid].split_inclusive(|&b| b == b'\n') {
        if !line.iter().all(u8::is_ascii_whitespace) {
            if index == first {
                offset = Some(pos);
            }
            index += 1;
        }
        pos += line.len();
    }
    let have = index;
    let offset = match offset {
        Some(offset) => offset,
        None if have == first => valid,
        None => {
            tracing::warn!(session_id = %id, events = have, entry_first = first, "a journaled append does not follow its log (events are missing before it); left alone");
            return Ok(());
        }
    };
    if have >= first + count && bytes.get(offset..offset + lines.len()) == Some(lines) {
        return Ok(());
    }
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(offset as u64)?;
    std::os::unix::fs::FileExt::write_all_at(&file, lines, offset as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(root: &Path) -> (Arc<Journal>, Replayed) {
        for dir in ["sessions", "tmp"] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        let (journal, replayed) = Journal::open(
            &root.join("journal"),
            &root.join("sessions"),
            &root.join("tmp"),
        )
        .unwrap();
        (Arc::new(journal), replayed)
    }

    fn wal_files(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(root.join("journal"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn entries_round_trip_and_a_damaged_tail_ends_the_journal() {
        let entries = [
            Entry::Append {
                session: "s1",
                first: 7,
                count: 2,
                lines: b"{\"a\":1}\n{\"b\":2}\n",
            },
            Entry::Create {
                session: "s2",
                record: b"{}",
            },
            Entry::Record {
                session: "s2",
                record: b"{\"x\":1}",
            },
            Entry::Delete { session: "s1" },
        ];
        let mut bytes = Vec::new();
        for entry in &entries {
            bytes.extend(entry.encode().unwrap());
        }
        let (decoded, valid) = decode(&bytes);
        assert_eq!(decoded, entries);
        assert_eq!(valid, bytes.len());
        // Every cut inside the last entry, and every flipped byte in it,
        // ends the journal just before it.
        let last = entries[3].encode().unwrap().len();
        let before = bytes.len() - last;
        for cut in before + 1..bytes.len() {
            let (decoded, valid) = decode(&bytes[..cut]);
            assert_eq!((decoded.len(), valid), (3, before), "cut at {cut}");
        }
        for at in before..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert_eq!(decode(&damaged).0.len(), 3, "flip at {at}");
        }
        // Zeros (a preallocated or torn block) are no entry.
        assert!(decode(&[0; 64]).0.is_empty());
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    /// A generation's file is written ahead with zeros, a chunk at a time:
    /// entries overwrite them, an entry larger than a chunk extends the
    /// file past it, and a replay of the file finds exactly the entries.
    #[test]
    fn entries_overwrite_zeros_written_ahead_and_replay_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (journal, _) = open(root);
        let path = journal.lock().current.path.clone();
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        fs::create_dir_all(root.join("sessions/a")).unwrap();
        fs::write(root.join("sessions/a/session.json"), b"{}").unwrap();
        let record = |v: usize| format!("{{\"v\":{v}}}").into_bytes();
        let commit = |record: &[u8]| {
            drop(
                journal
                    .commit(&Entry::Record {
                        session: "a",
                        record,
                    })
                    .unwrap(),
            );
        };
        commit(&record(1));
        let ahead = fs::metadata(&path).unwrap().len();
        assert_eq!(ahead, PREALLOCATE);
        // An entry bigger than a chunk: the file grows to hold it.
        let mut big = record(2);
        big.splice(1..1, std::iter::repeat_n(b' ', 2 * PREALLOCATE as usize));
        commit(&big);
        let len = journal.lock().len;
        assert!(len > 2 * PREALLOCATE);
        assert!(fs::metadata(&path).unwrap().len() >= len);
        commit(&record(3));
        let bytes = fs::read(&path).unwrap();
        let (entries, valid) = decode(&bytes);
        assert_eq!(entries.len(), 3);
        assert_eq!(valid as u64, journal.lock().len);
        assert!(bytes[valid..].iter().all(|&b| b == 0));
        // Left by a process that is gone (here: copied where this one's
        // lock does not reach), it replays to the last record.
        let copy = root.join("journal/0000000000000-0-0-00000001.wal");
        fs::copy(&path, &copy).unwrap();
        let (_second, replayed) = open(root);
        assert_eq!(replayed.entries, 3);
        assert_eq!(
            fs::read(root.join("sessions/a/session.json")).unwrap(),
            record(3)
        );
        drop(journal);
    }

    /// Writers that arrive while a sync runs share the next one: here 16
    /// entries from 16 threads cost exactly one sync.
    #[test]
    fn writers_waiting_on_a_sync_share_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = open(dir.path());
        // Stand in for a sync that is running.
        journal.lock().syncing = true;
        let writers: Vec<_> = (0..16)
            .map(|i| {
                let journal = journal.clone();
                std::thread::spawn(move || {
                    let id = format!("s{i}");
                    let applying = journal.commit(&Entry::Delete { session: &id }).unwrap();
                    drop(applying);
                })
            })
            .collect();
        // Writers do not signal a write; look until all 16 are in.
        let mut st = journal.lock();
        while st.written < 16 {
            drop(st);
            std::thread::sleep(std::time::Duration::from_millis(1));
            st = journal.lock();
        }
        assert_eq!(st.synced, 0, "nothing is acknowledged before a sync");
        st.syncing = false;
        journal.changed.notify_all();
        drop(st);
        for writer in writers {
            writer.join().unwrap();
        }
        let st = journal.lock();
        assert_eq!((st.written, st.synced, st.syncs), (16, 16, 1));
        assert!(st.applying.is_empty());
    }

    /// Past `ROTATE_AT` a new generation starts; the old one is
    /// checkpointed and removed once synced and applied, and not before.
    #[test]
    fn full_generations_are_checkpointed_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = open(dir.path());
        let big = vec![b'x'; usize::try_from(ROTATE_AT / 3).unwrap()];
        let entry = Entry::Record {
            session: "s",
            record: &big,
        };
        // Held: the change of this entry is still being made.
        let held = journal.commit(&entry).unwrap();
        for _ in 0..3 {
            drop(journal.commit(&entry).unwrap());
        }
        assert_eq!(wal_files(dir.path()).len(), 2, "the first generation waits");
        drop(held);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while wal_files(dir.path()).len() > 1 {
            assert!(std::time::Instant::now() < deadline, "no checkpoint");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(wal_files(dir.path())[0].ends_with("-00000002.wal"));
        // Closing checkpoints the rest.
        drop(journal);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !wal_files(dir.path()).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "journal left at close"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// A journal whose owner is gone is replayed onto the session files; a
    /// live owner's is left alone; entries naming unsafe ids touch nothing.
    #[test]
    fn replay_applies_dead_journals_only_and_stays_inside_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (live, _) = open(root);
        drop(
            live.commit(&Entry::Create {
                session: "held",
                record: b"{}",
            })
            .unwrap(),
        );

        let mut bytes = Vec::new();
        for entry in [
            Entry::Create {
                session: "a",
                record: b"{\"v\":1}",
            },
            Entry::Append {
                session: "a",
                first: 0,
                count: 2,
                lines: b"{\"i\":0}\n{\"i\":1}\n",
            },
            Entry::Record {
                session: "a",
                record: b"{\"v\":2}",
            },
            Entry::Create {
                session: "gone",
                record: b"{}",
            },
            Entry::Delete { session: "gone" },
            Entry::Create {
                session: "..",
                record: b"{}",
            },
            Entry::Delete { session: "." },
            Entry::Record {
                session: "never-created",
                record: b"{}",
            },
        ] {
            bytes.extend(entry.encode().unwrap());
        }
        bytes.extend([0x13; 5]);
        fs::write(root.join("journal/0000000000001-1-00000001.wal"), &bytes).unwrap();

        let (second, replayed) = open(root);
        assert_eq!(
            replayed,
            Replayed {
                files: 1,
                entries: 8
            }
        );
        let sessions = root.join("sessions");
        assert_eq!(
            fs::read(sessions.join("a/session.json")).unwrap(),
            b"{\"v\":2}"
        );
        assert_eq!(
            fs::read(sessions.join("a/events.ndjson")).unwrap(),
            b"{\"i\":0}\n{\"i\":1}\n"
        );
        assert!(!sessions.join("gone").exists());
        assert!(!sessions.join("never-created").exists());
        assert!(
            !sessions.join("held").exists(),
            "a live journal is not replayed"
        );
        let mut top: Vec<_> = fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        top.sort();
        assert_eq!(top, ["journal", "sessions", "tmp"]);
        // The dead journal is gone; the two live ones stay.
        assert_eq!(wal_files(root).len(), 2);
        drop((live, second));
    }
}
