//! The event log of one session: `events.ndjson`, its in-memory writer state,
//! appends, ranged reads and live subscriptions.
//!
//! Each session in use has a [`Slot`]: a Tokio mutex around [`SlotState`].
//! The first operation that needs the log scans the file once
//! ([`ensure_loaded`]), cutting a torn tail and refusing a file whose indices
//! are not exactly `0..n`. From then on the slot knows the next index, the
//! committed byte length, sparse byte offsets for ranged reads, an append
//! handle (opened on first append) and, while anyone subscribes, a broadcast
//! sender for live fan-out. Every change to the file happens under the slot's
//! lock, and live subscribers are fed under the same lock, so live order is
//! file order.
//!
//! Slots are a cache: past [`MAX_RESIDENT_SLOTS`], the least recently used
//! slots that nobody holds (no operation, no subscriber) are dropped, and a
//! later use scans the file again. So memory follows the sessions in use, not
//! every session touched since start.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use bdk_events::{Envelope, SessionId, ndjson};
use chrono::{SubsecRound, Utc};
use futures::StreamExt;
use tokio::sync::{Mutex, OwnedMutexGuard, broadcast};

use super::journal::{Entry, Journal};
use super::paths::is_missing;
use super::task::blocking;
use crate::{EventStream, NewEvent, Result, StoreError};

/// One session's writer state behind its lock.
pub(crate) type Slot = Arc<Mutex<SlotState>>;
/// A locked slot; owned so it can move into a blocking task.
pub(crate) type SlotGuard = OwnedMutexGuard<SlotState>;
/// One committed batch as fanned out to subscribers.
type Batch = Arc<Vec<Envelope>>;

/// Byte offsets are remembered for every event whose index is a multiple of
/// this, so a ranged read seeks near its start instead of reading the file
/// from the beginning. Eight bytes per 256 events is negligible memory.
const CHECKPOINT_STRIDE: u64 = 256;
/// Batches buffered per session for live subscribers. A subscriber that falls
/// further behind is not lost: it re-reads the gap from the file.
const LIVE_CAPACITY: usize = 256;
/// A subscription's catch-up read of at most this many bytes runs on the
/// async task rather than in a blocking task.
const INLINE_READ: u64 = 64 << 10;
/// Append handles kept open at once. Past this, the least recently used idle
/// handles are closed (and reopened on their next append), so thousands of
/// idle sessions never exhaust the process's file descriptors.
const MAX_OPEN_LOGS: usize = 256;
/// Slots kept once idle. The map may grow to twice this before a sweep drops
/// the least recently used idle ones; a slot costs a few hundred bytes plus
/// its checkpoints, so this bounds the engine's idle memory well under a
/// megabyte.
pub(crate) const MAX_RESIDENT_SLOTS: usize = 256;

/// State shared by every slot of one store.
pub(crate) struct Slots {
    map: StdMutex<HashMap<String, Slot>>,
    open_logs: Arc<AtomicUsize>,
    tick: AtomicU64,
    /// The map size at which the next insert sweeps idle slots.
    sweep_at: AtomicUsize,
    /// Idle slots dropped since start.
    evicted: AtomicU64,
}

impl Default for Slots {
    fn default() -> Self {
        Self {
            map: StdMutex::default(),
            open_logs: Arc::default(),
            tick: AtomicU64::new(0),
            sweep_at: AtomicUsize::new(2 * MAX_RESIDENT_SLOTS),
            evicted: AtomicU64::new(0),
        }
    }
}

impl Slots {
    /// The slot of `id`, created empty on first touch.
    fn get(&self, id: &SessionId, dir: &Path) -> Slot {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get(id.as_str()) {
            return slot.clone();
        }
        if map.len() >= self.sweep_at.load(Ordering::Relaxed) {
            self.evict_idle(&mut map);
        }
        let slot = Arc::new(Mutex::new(SlotState::new(id.clone(), dir)));
        map.insert(id.as_str().to_owned(), slot.clone());
        slot
    }

    /// Drops the least recently used idle slots until at most
    /// [`MAX_RESIDENT_SLOTS`] remain. A slot is idle when the map holds the
    /// only reference: every operation, waiter and subscription holds one of
    /// its own, and references are only taken from the map under its lock,
    /// so none can appear while this runs.
    fn evict_idle(&self, map: &mut HashMap<String, Slot>) {
        let mut idle: Vec<(u64, String, SlotGuard)> = map
            .iter()
            .filter(|(_, slot)| Arc::strong_count(slot) == 1)
            .filter_map(|(key, slot)| {
                let guard = slot.clone().try_lock_owned().ok()?;
                Some((guard.touched, key.clone(), guard))
            })
            .collect();
        idle.sort_unstable_by_key(|(touched, _, _)| *touched);
        let excess = map.len().saturating_sub(MAX_RESIDENT_SLOTS);
        for (_, key, mut guard) in idle.into_iter().take(excess) {
            guard.retired = true;
            guard.tx = None;
            guard.log = None;
            map.remove(&key);
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        // Slots in use are not dropped: wait for the map to double again
        // rather than sweep on every insert while they stay busy.
        self.sweep_at.store(
            (2 * map.len()).max(2 * MAX_RESIDENT_SLOTS),
            Ordering::Relaxed,
        );
    }

    /// Slots held in memory right now, and idle slots dropped since start.
    pub(crate) fn resident(&self) -> (usize, u64) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        (map.len(), self.evicted.load(Ordering::Relaxed))
    }

    /// Locks the live slot of `id`. A slot retired while we waited for it is
    /// skipped, so every caller ends up on the one slot the map holds.
    pub(crate) async fn lock(&self, id: &SessionId, dir: &Path) -> SlotGuard {
        loop {
            let mut guard = self.get(id, dir).lock_owned().await;
            if !guard.retired {
                guard.touched = self.tick.fetch_add(1, Ordering::Relaxed);
                return guard;
            }
        }
    }

    /// Retires a slot: ends its subscriptions, closes its handle, forgets its
    /// state and removes it from the map. Called when the session is gone.
    pub(crate) fn retire(&self, guard: &mut SlotGuard) {
        guard.retired = true;
        guard.tx = None;
        guard.log = None;
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map
            .get(guard.id.as_str())
            .is_some_and(|s| Arc::ptr_eq(s, OwnedMutexGuard::mutex(guard)))
        {
            map.remove(guard.id.as_str());
        }
    }

    /// Closes the least recently used half of the idle append handles. Slots
    /// that are busy (locked) are skipped, including the caller's own.
    fn close_idle_logs(&self) {
        let slots: Vec<Slot> = {
            let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.values().cloned().collect()
        };
        let mut idle: Vec<_> = slots
            .iter()
            .filter_map(|slot| slot.try_lock().ok())
            .filter(|g| g.log.as_ref().is_some_and(|l| l.file.is_some()))
            .collect();
        idle.sort_by_key(|g| g.log.as_ref().map_or(0, |l| l.last_used));
        let close = idle.len().div_ceil(2);
        for guard in idle.iter_mut().take(close) {
            if let Some(log) = guard.log.as_mut() {
                log.file = None;
            }
        }
    }
}

/// The in-memory state of one session's log.
pub(crate) struct SlotState {
    pub(crate) id: SessionId,
    pub(crate) dir: PathBuf,
    pub(crate) record_path: PathBuf,
    pub(crate) events_path: PathBuf,
    /// Set once the session is gone (or its slot was dropped as idle); a
    /// waiter that then gets the lock must look the slot up again.
    pub(crate) retired: bool,
    /// When the slot was last locked, on the store's tick: the order in
    /// which idle slots are dropped.
    touched: u64,
    /// The scanned log; `None` until first needed, or after a failed write
    /// whose rollback also failed (the next use rescans and cuts the tail).
    pub(crate) log: Option<Log>,
    /// Live fan-out, present only while someone subscribes: a broadcast
    /// channel preallocates its buffer, which idle sessions should not pay.
    pub(crate) tx: Option<broadcast::Sender<Batch>>,
}

/// What the writer knows about `events.ndjson`.
pub(crate) struct Log {
    pub(crate) next_index: u64,
    /// Bytes of committed events; the file is never longer except during a
    /// write under the lock.
    len: u64,
    /// `checkpoints[k]` is the byte offset of event `k * CHECKPOINT_STRIDE`.
    checkpoints: Vec<u64>,
    file: Option<CountedFile>,
    last_used: u64,
    /// The events before this index (bytes before `journaled_len`) are
    /// durable: covered by a journal entry or synced. The next boundary
    /// batch journals everything after it.
    journaled_index: u64,
    journaled_len: u64,
}

impl Log {
    /// An empty log (a session just created).
    pub(crate) fn empty() -> Self {
        Self {
            next_index: 0,
            len: 0,
            checkpoints: Vec::new(),
            file: None,
            last_used: 0,
            journaled_index: 0,
            journaled_len: 0,
        }
    }
}

/// An append handle that keeps the store's open-handle count.
struct CountedFile {
    file: File,
    count: Arc<AtomicUsize>,
}

impl Drop for CountedFile {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SlotState {
    fn new(id: SessionId, dir: &Path) -> Self {
        Self {
            record_path: dir.join("session.json"),
            events_path: dir.join("events.ndjson"),
            dir: dir.to_path_buf(),
            id,
            retired: false,
            touched: 0,
            log: None,
            tx: None,
        }
    }

    /// Forgets everything about a previous incarnation of this session id:
    /// ends its subscriptions and starts an empty log.
    pub(crate) fn reset_empty(&mut self) {
        self.tx = None;
        self.log = Some(Log::empty());
    }

    /// A plan to read events `from..` as committed right now.
    fn plan(&self, from: u64) -> Option<ReadPlan> {
        let log = self.log.as_ref()?;
        if from >= log.next_index {
            return None;
        }
        let k = usize::try_from(from / CHECKPOINT_STRIDE).unwrap_or(usize::MAX);
        let (offset, first_index) = match log.checkpoints.get(k) {
            Some(&offset) => (offset, k as u64 * CHECKPOINT_STRIDE),
            None => (0, 0),
        };
        Some(ReadPlan {
            path: self.events_path.clone(),
            offset,
            first_index,
            end: log.len,
            end_index: log.next_index,
        })
    }

    /// Subscribes to live batches: the receiver carries every batch committed
    /// after this call. Taken under the same lock as the replay plan, which is
    /// what makes the replay/live seam exact.
    fn live(&mut self) -> broadcast::Receiver<Batch> {
        self.tx
            .get_or_insert_with(|| broadcast::channel(LIVE_CAPACITY).0)
            .subscribe()
    }
}

/// Scans `events.ndjson` once per process (per slot incarnation): a torn tail
/// is cut and logged, a corrupt line before the tail or indices other than
/// exactly `0..n` are [`StoreError::Corrupt`]. Runs in a blocking task with
/// the lock moved in, so a cancelled caller cannot leave a half-loaded slot.
///
/// A scanned log is checked against the file first: only this lock changes
/// it, so a length other than the committed one means something else wrote
/// to it (a tool, an editor). The log is then scanned again by the rules of
/// a restart (a trailing line that does not parse is cut like a torn tail,
/// damage before it makes the session corrupt), so nothing is ever appended
/// after bytes the store did not write and no read trusts stale offsets. A
/// failed scan leaves no state, so every later use reports the damage again.
/// The check is one `stat`: a short bounded syscall, run inline.
pub(crate) async fn ensure_loaded(mut guard: SlotGuard) -> Result<SlotGuard> {
    if let Some(log) = &guard.log {
        let on_disk = match fs::metadata(&guard.events_path) {
            Ok(meta) => meta.len(),
            // A missing file is the session's own business (deleted from
            // outside, or never written): the operations report it.
            Err(e) if is_missing(&e) => log.len,
            Err(e) => return Err(e.into()),
        };
        if on_disk == log.len {
            return Ok(guard);
        }
        tracing::warn!(
            session_id = %guard.id,
            path = %guard.events_path.display(),
            committed_bytes = log.len,
            file_bytes = on_disk,
            "the event log was changed outside the store; scanning it again"
        );
        guard.log = None;
    }
    blocking(move || {
        let log = load(&guard.id, &guard.events_path)?;
        guard.log = Some(log);
        Ok(guard)
    })
    .await
}

fn corrupt(path: &Path, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// Whatever the log holds when it is scanned is synced, so the next journal
/// entry can start after it: the events after the last boundary may be
/// only in the page cache (left by a killed process, by this one before it
/// dropped the slot, or by another writer), and no entry carries them.
fn load(id: &SessionId, path: &Path) -> Result<Log> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        // A session whose log file is missing simply has no events yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) if is_missing(&e) => return Err(StoreError::SessionNotFound(id.to_string())),
        Err(e) => return Err(e.into()),
    };
    let scan = ndjson::scan(&bytes).map_err(|e| corrupt(path, e.to_string()))?;
    for (i, env) in scan.events.iter().enumerate() {
        if env.index != i as u64 {
            return Err(corrupt(
                path,
                format!("event {} has index {}, expected {i}", i + 1, env.index),
            ));
        }
    }
    if scan.is_torn() {
        tracing::warn!(
            session_id = %id,
            path = %path.display(),
            valid_bytes = scan.valid_len,
            torn_bytes = scan.torn_bytes,
            "cutting a torn tail from the event log (an append interrupted by a crash)"
        );
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(scan.valid_len)?;
        file.sync_data()?;
    } else if !bytes.is_empty() {
        File::open(path)?.sync_data()?;
    }
    let valid = usize::try_from(scan.valid_len).unwrap_or(bytes.len());
    Ok(Log {
        next_index: scan.events.len() as u64,
        len: scan.valid_len,
        checkpoints: checkpoints(&bytes[..valid]),
        file: None,
        last_used: 0,
        journaled_index: scan.events.len() as u64,
        journaled_len: scan.valid_len,
    })
}

/// True for a line `ndjson::scan` skips.
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Byte offsets of every `CHECKPOINT_STRIDE`-th event of a clean log.
fn checkpoints(bytes: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut count = 0u64;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if !is_blank(line) {
            if count.is_multiple_of(CHECKPOINT_STRIDE) {
                out.push(pos as u64);
            }
            count += 1;
        }
        pos += line.len();
    }
    out
}

/// A byte range of the log and the indices it holds.
struct ReadPlan {
    path: PathBuf,
    offset: u64,
    first_index: u64,
    end: u64,
    end_index: u64,
}

/// Reads the committed events `from..plan.end_index` (blocking).
fn read_plan(id: &SessionId, plan: &ReadPlan, from: u64) -> Result<Vec<Envelope>> {
    let from = from.max(plan.first_index);
    if from >= plan.end_index {
        return Ok(Vec::new());
    }
    let mut file = File::open(&plan.path).map_err(|e| not_found_as_session(id, e))?;
    file.seek(SeekFrom::Start(plan.offset))?;
    let want = usize::try_from(plan.end - plan.offset)
        .map_err(|_| corrupt(&plan.path, "log range does not fit in memory"))?;
    let mut bytes = Vec::with_capacity(want);
    file.take(plan.end - plan.offset).read_to_end(&mut bytes)?;
    if bytes.len() != want {
        return Err(corrupt(
            &plan.path,
            "the file is shorter than its committed events (truncated from outside?)",
        ));
    }
    // Skip whole lines up to `from` without parsing them.
    let mut pos = 0usize;
    let mut index = plan.first_index;
    while index < from {
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            return Err(corrupt(&plan.path, "committed events are missing"));
        };
        if !is_blank(&bytes[pos..pos + nl]) {
            index += 1;
        }
        pos += nl + 1;
    }
    let scan = ndjson::scan(&bytes[pos..]).map_err(|e| corrupt(&plan.path, e.to_string()))?;
    if scan.is_torn() {
        return Err(corrupt(&plan.path, "a committed event is incomplete"));
    }
    for (i, env) in scan.events.iter().enumerate() {
        if env.index != from + i as u64 {
            return Err(corrupt(
                &plan.path,
                format!(
                    "found index {} where {} was expected",
                    env.index,
                    from + i as u64
                ),
            ));
        }
    }
    if scan.events.len() as u64 != plan.end_index - from {
        return Err(corrupt(&plan.path, "committed events are missing"));
    }
    Ok(scan.events)
}

fn not_found_as_session(id: &SessionId, e: io::Error) -> StoreError {
    if is_missing(&e) {
        StoreError::SessionNotFound(id.to_string())
    } else {
        e.into()
    }
}

/// Reads committed events from `from` on; the lock is held only to take the plan.
pub(crate) async fn read(guard: SlotGuard, from: u64) -> Result<Vec<Envelope>> {
    let id = guard.id.clone();
    let plan = guard.plan(from);
    drop(guard);
    match plan {
        None => Ok(Vec::new()),
        Some(plan) => blocking(move || read_plan(&id, &plan, from)).await,
    }
}

/// Encodes a batch with its indices and the line offsets that become checkpoints.
fn encode_batch(
    id: &SessionId,
    first_index: u64,
    events: Vec<NewEvent>,
) -> Result<(Vec<Envelope>, Vec<u8>, Vec<u64>)> {
    // The wire format keeps milliseconds; truncating here makes the envelopes
    // returned and fanned out equal to the ones read back from the file.
    let at = Utc::now().trunc_subsecs(3);
    let mut buf = Vec::with_capacity(events.len() * 192);
    let mut marks = Vec::new();
    let mut envs = Vec::with_capacity(events.len());
    for (i, new) in events.into_iter().enumerate() {
        let env = Envelope {
            index: first_index + i as u64,
            session_id: id.clone(),
            turn_id: new.turn_id,
            at,
            event: new.event,
        };
        if env.index.is_multiple_of(CHECKPOINT_STRIDE) {
            marks.push(buf.len() as u64);
        }
        ndjson::encode_into(&env, &mut buf)?;
        envs.push(env);
    }
    Ok((envs, buf, marks))
}

/// Appends one batch under the held lock: indices, one `write_all`, then,
/// with a `journal` (a boundary batch), one journal entry carrying every
/// event not yet journaled up to the end of this batch, synced before this
/// returns; then live fan-out. On a failed write or journal commit the file
/// is cut back to its committed length so no reader ever sees a partial
/// batch.
///
/// This is a plain synchronous function on purpose: called inline for
/// ordinary batches it holds no await point between the write and the
/// fan-out, so a cancelled caller cannot leave written-but-unpublished events.
pub(crate) fn commit(
    state: &mut SlotState,
    slots: &Slots,
    events: Vec<NewEvent>,
    journal: Option<&Arc<Journal>>,
) -> Result<Vec<Envelope>> {
    let tick = slots.tick.fetch_add(1, Ordering::Relaxed);
    let SlotState {
        id,
        events_path,
        log: log_slot,
        tx,
        ..
    } = state;
    let Some(log) = log_slot.as_mut() else {
        return Err(corrupt(events_path, "log used before it was scanned"));
    };
    open_handle(log, id, events_path, slots)?;
    let (envs, buf, marks) = encode_batch(id, log.next_index, events)?;
    log.last_used = tick;
    let count = envs.len() as u64;
    let written = match log.file.as_mut() {
        Some(handle) => handle.file.write_all(&buf),
        None => Err(io::Error::other("append handle closed")),
    }
    .and_then(|()| match (journal, log.file.as_ref()) {
        (Some(journal), Some(handle)) => journal_tail(journal, &handle.file, id, log, &buf, count),
        _ => Ok(()),
    });
    if let Err(e) = written {
        let rolled_back = log
            .file
            .as_ref()
            .is_some_and(|h| h.file.set_len(log.len).is_ok());
        if !rolled_back {
            // The file may hold part of the batch: rescan before the next use.
            *log_slot = None;
        }
        return Err(not_found_as_session(id, e));
    }
    for mark in marks {
        log.checkpoints.push(log.len + mark);
    }
    log.len += buf.len() as u64;
    log.next_index += count;
    if journal.is_some() {
        log.journaled_len = log.len;
        log.journaled_index = log.next_index;
    }
    if let Some(sender) = tx {
        if sender.receiver_count() == 0 {
            *tx = None;
        } else {
            // A send only fails without receivers, which was just ruled out
            // under the lock subscribers need to join.
            let _ = sender.send(Arc::new(envs.clone()));
        }
    }
    Ok(envs)
}

/// Journals the events of `log` not yet journaled plus the batch `buf` just
/// written after them, and waits for the sync that covers the entry. The
/// earlier events are read back from the file (the page cache, in practice).
fn journal_tail(
    journal: &Arc<Journal>,
    file: &File,
    id: &SessionId,
    log: &Log,
    buf: &[u8],
    count: u64,
) -> io::Result<()> {
    let tail = usize::try_from(log.len - log.journaled_len)
        .map_err(|_| io::Error::other("unjournaled tail too large"))?;
    let mut lines = vec![0; tail];
    file.read_exact_at(&mut lines, log.journaled_len)?;
    lines.extend_from_slice(buf);
    let entry = Entry::Append {
        session: id.as_str(),
        first: log.journaled_index,
        count: log.next_index + count - log.journaled_index,
        lines: &lines,
    };
    // The events are in the file already: nothing is left to apply.
    journal.commit(&entry).map(drop)
}

/// Whether the session's open append handle shows its log exactly as
/// committed: still linked (an outside `rm -rf` of the directory unlinks
/// it) and as long as this store wrote it. One `fstat`, no path to walk:
/// the check of an ordinary append. False without a scanned log or an open
/// handle, and on any doubt; the caller then checks by path.
pub(crate) fn handle_intact(state: &SlotState) -> bool {
    let Some(log) = &state.log else {
        return false;
    };
    let Some(handle) = &log.file else {
        return false;
    };
    handle
        .file
        .metadata()
        .is_ok_and(|m| m.nlink() > 0 && m.len() == log.len)
}

/// Opens the append handle of `log` if it has none.
fn open_handle(log: &mut Log, id: &SessionId, events_path: &Path, slots: &Slots) -> Result<()> {
    if log.file.is_some() {
        return Ok(());
    }
    // `create` makes the file only: a deleted session directory is never
    // recreated here, the open fails and the append reports the session as
    // not found.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(events_path)
        .map_err(|e| not_found_as_session(id, e))?;
    let open = slots.open_logs.fetch_add(1, Ordering::Relaxed) + 1;
    log.file = Some(CountedFile {
        file,
        count: slots.open_logs.clone(),
    });
    if open > MAX_OPEN_LOGS {
        slots.close_idle_logs();
    }
    Ok(())
}

/// Opens a subscription: the live receiver and the replay plan are taken
/// under the same lock, then the lock is released before any disk read.
pub(crate) fn subscribe(mut guard: SlotGuard, from: u64) -> EventStream {
    let slot = OwnedMutexGuard::mutex(&guard).clone();
    let id = guard.id.clone();
    let rx = guard.live();
    let plan = guard.plan(from);
    drop(guard);
    let sub = Subscription {
        slot,
        id,
        rx,
        expected: from,
        pending: VecDeque::new(),
        plan,
        held: None,
        refilled_for: None,
        done: false,
    };
    futures::stream::unfold(sub, Subscription::next).boxed()
}

/// The state of one subscription stream.
struct Subscription {
    slot: Slot,
    id: SessionId,
    rx: broadcast::Receiver<Batch>,
    /// The index of the next event to yield.
    expected: u64,
    pending: VecDeque<Envelope>,
    /// Recorded events still to read from the file.
    plan: Option<ReadPlan>,
    /// A live batch that arrived past a gap, kept until the gap is read.
    held: Option<Batch>,
    /// The `expected` index a gap refill was last attempted for; a second gap
    /// at the same place means the file lacks events it should have.
    refilled_for: Option<u64>,
    done: bool,
}

impl Drop for Subscription {
    /// The last subscriber to leave drops the live sender: its buffer is
    /// preallocated, and a session nobody follows should not pay for it
    /// until its next append happens to notice.
    fn drop(&mut self) {
        match self.slot.try_lock() {
            // This subscription's own receiver is still alive here.
            Ok(mut state) => {
                if state.tx.as_ref().is_some_and(|tx| tx.receiver_count() <= 1) {
                    state.tx = None;
                }
            }
            // Someone holds the lock; look again once it is free (and this
            // receiver is gone).
            Err(_) => {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let slot = self.slot.clone();
                    rt.spawn(async move {
                        let mut state = slot.lock().await;
                        if state.tx.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
                            state.tx = None;
                        }
                    });
                }
            }
        }
    }
}

impl Subscription {
    async fn next(mut self) -> Option<(Result<Envelope>, Self)> {
        loop {
            if let Some(env) = self.pending.pop_front() {
                self.expected = env.index + 1;
                return Some((Ok(env), self));
            }
            if self.done {
                return None;
            }
            if let Some(plan) = self.plan.take() {
                let id = self.id.clone();
                let from = self.expected;
                // A short range (the usual catch-up of a client that
                // subscribes just after its send) is read inline: from the
                // page cache, that is cheaper than a blocking-task hop.
                let read = if plan.end - plan.offset <= INLINE_READ {
                    read_plan(&id, &plan, from)
                } else {
                    blocking(move || read_plan(&id, &plan, from)).await
                };
                match read {
                    Ok(events) => self.pending.extend(events),
                    // The session was deleted under us: the stream just ends.
                    Err(StoreError::SessionNotFound(_)) => self.done = true,
                    Err(e) => {
                        self.done = true;
                        return Some((Err(e), self));
                    }
                }
                continue;
            }
            let step = match self.held.take() {
                Some(batch) => self.take(batch).await,
                None => match self.rx.recv().await {
                    Ok(batch) => self.take(batch).await,
                    // Fell behind the live buffer: read what was missed from
                    // the file, then skip the buffered batches it covers.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.refill().await,
                    // The sender is dropped only when the session is gone.
                    Err(broadcast::error::RecvError::Closed) => {
                        self.done = true;
                        Ok(())
                    }
                },
            };
            if let Err(e) = step {
                self.done = true;
                return Some((Err(e), self));
            }
        }
    }

    /// Queues the unseen part of a live batch, or plans a file read when the
    /// batch starts past the next expected index.
    async fn take(&mut self, batch: Batch) -> Result<()> {
        let Some(first) = batch.first().map(|e| e.index) else {
            return Ok(());
        };
        if first > self.expected {
            if self.refilled_for == Some(self.expected) {
                return Err(StoreError::Corrupt {
                    path: format!("session {}", self.id),
                    message: format!(
                        "live event {first} arrived but event {} is not recorded",
                        self.expected
                    ),
                });
            }
            self.refilled_for = Some(self.expected);
            self.held = Some(batch);
            return self.refill().await;
        }
        let skip = usize::try_from(self.expected - first).unwrap_or(usize::MAX);
        self.pending.extend(batch.iter().skip(skip).cloned());
        Ok(())
    }

    /// Plans a read of everything committed from `expected` on; ends the
    /// stream when the slot is gone.
    async fn refill(&mut self) -> Result<()> {
        let guard = self.slot.clone().lock_owned().await;
        if guard.retired {
            self.done = true;
            return Ok(());
        }
        self.plan = ensure_loaded(guard).await?.plan(self.expected);
        Ok(())
    }
}

/// [`commit`], retiring the slot when the append finds the session's
/// directory gone (deleted from outside between the existence check and the
/// open of the log).
pub(crate) fn append(
    guard: &mut SlotGuard,
    slots: &Slots,
    events: Vec<NewEvent>,
    journal: Option<&Arc<Journal>>,
) -> Result<Vec<Envelope>> {
    let result = commit(guard, slots, events, journal);
    if matches!(result, Err(StoreError::SessionNotFound(_))) {
        slots.retire(guard);
    }
    result
}
