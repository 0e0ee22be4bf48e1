//! The host's per-session memory: the slots of sessions in use and the
//! transcript cache of resting ones.
//!
//! A session has a [`Slot`] only while something uses it: a running or
//! queued turn, a follow-up being admitted, a stop, a direct call. Every user
//! holds a [`SlotRef`]; the last one to let go of a resting session's slot
//! removes it from the table and hands its transcript to the cache. The
//! cache keeps resting sessions' conversations within a byte budget, least
//! recently rested first out; a session whose transcript was dropped
//! rebuilds it from its events on its next turn. So what the host holds
//! follows the running work, and the history costs at most the budget.
//!
//! The slot itself ([`Slot`], its [`SlotState`] and the [`Running`] turn)
//! is defined here too, so the host's state and every concern that locks a
//! slot name this file and nothing above it.

use std::collections::{BTreeMap, HashMap};
use std::mem::size_of;
use std::ops::Deref;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex, MutexGuard};

use bdk_events::{SessionId, TurnId};
use bdk_models::{Message, ToolCall};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::agent::Nudge;

/// The default budget of the transcript cache, per host: enough for a few
/// hundred ordinary conversations, small enough that resting sessions never
/// dominate the process.
pub const DEFAULT_SESSION_CACHE_BYTES: u64 = 4 * 1024 * 1024;

/// What the host holds in memory per session, for operators and tests
/// ([`super::Host::memory`], `GET /v1/memory`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// Sessions with a slot: in use right now (a turn running or queued, a
    /// send, stop or direct call in progress).
    pub active_sessions: usize,
    /// Resting sessions whose conversation is cached.
    pub cached_transcripts: usize,
    /// The estimated heap size of those conversations.
    pub cached_transcript_bytes: u64,
    /// The cache's budget (`bdk serve --session-cache`); 0 caches nothing.
    pub transcript_budget_bytes: u64,
    /// Conversations dropped from the cache (or never cached, being larger
    /// than the budget) since start; they are rebuilt from the events.
    pub evicted_transcripts: u64,
    /// Sessions the store holds in-memory state for (see
    /// [`bdk_store::Store::resident_sessions`]).
    pub store_resident_sessions: usize,
    /// Idle sessions whose store state was dropped since start.
    pub store_evicted_sessions: u64,
}

/// The slots of sessions in use, and the transcript cache.
pub(super) struct SlotTable {
    slots: Mutex<HashMap<SessionId, Arc<Slot>>>,
    cache: Mutex<TranscriptCache>,
}

/// A hold on a session's slot. Cloning takes another hold; the last hold
/// dropped on a resting session releases the slot.
pub(super) struct SlotRef {
    table: Arc<SlotTable>,
    id: SessionId,
    slot: Arc<Slot>,
}

impl Deref for SlotRef {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl Clone for SlotRef {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            id: self.id.clone(),
            slot: Arc::clone(&self.slot),
        }
    }
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        self.table.release(&self.id, &self.slot);
    }
}

/// True when nothing of the session is in flight: no turn, nothing queued,
/// no end being recorded.
fn is_resting(state: &SlotState) -> bool {
    state.running.is_none() && state.pending.is_empty() && !state.ending
}

impl SlotTable {
    pub(super) fn new(budget: u64) -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(HashMap::new()),
            cache: Mutex::new(TranscriptCache::new(budget)),
        })
    }

    // Lock order: the slot map, then a slot's state, then the cache. A
    // poisoned lock means a panic while holding it; the data is plain and
    // stays consistent, so keep going rather than cascade.
    fn slots(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cache(&self) -> MutexGuard<'_, TranscriptCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot of `id`, created on first use with the cached transcript.
    pub(super) fn get(self: &Arc<Self>, id: &SessionId) -> SlotRef {
        let mut slots = self.slots();
        let slot = match slots.get(id) {
            Some(slot) => Arc::clone(slot),
            None => {
                let slot = Arc::new(Slot {
                    admission: tokio::sync::Mutex::new(()),
                    state: Mutex::new(SlotState {
                        transcript: self.cache().take(id),
                        ..SlotState::default()
                    }),
                });
                slots.insert(id.clone(), Arc::clone(&slot));
                slot
            }
        };
        SlotRef {
            table: Arc::clone(self),
            id: id.clone(),
            slot,
        }
    }

    /// Runs `f` on the slot of `id` if the session has one, without making one.
    pub(super) fn with<R>(&self, id: &SessionId, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        self.slots().get(id).map(|slot| f(slot))
    }

    /// Runs `f` on every slot.
    pub(super) fn each<R>(&self, mut f: impl FnMut(&Slot) -> Option<R>) -> Vec<R> {
        self.slots().values().filter_map(|slot| f(slot)).collect()
    }

    /// Forgets a deleted session: its slot and its cached transcript.
    pub(super) fn forget(&self, id: &SessionId) {
        let mut slots = self.slots();
        slots.remove(id);
        self.cache().remove(id);
    }

    /// Called as a hold goes. Every other hold, and every waiter on the
    /// slot's admission lock, owns a reference too, and references are only
    /// taken from the map under its lock or from a hold: two references (the
    /// map's and this one) mean this is the last hold. A resting session's
    /// slot then leaves the map, and its transcript goes to the cache under
    /// the same lock, so a new slot for the session always finds the latest
    /// one.
    fn release(&self, id: &SessionId, slot: &Arc<Slot>) {
        let mut slots = self.slots();
        if Arc::strong_count(slot) != 2 || !slots.get(id).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            return;
        }
        let transcript = {
            let mut state = slot.state();
            if !is_resting(&state) {
                return;
            }
            state.transcript.take()
        };
        slots.remove(id);
        if let Some(transcript) = transcript {
            self.cache().put(id.clone(), transcript);
        }
    }

    pub(super) fn stats(&self) -> (usize, usize, u64, u64, u64) {
        let active = self.slots().len();
        let cache = self.cache();
        (
            active,
            cache.entries.len(),
            cache.bytes,
            cache.budget,
            cache.evicted,
        )
    }
}

/// Resting sessions' conversations, least recently cached first out, within
/// a byte budget.
struct TranscriptCache {
    budget: u64,
    bytes: u64,
    evicted: u64,
    tick: u64,
    entries: HashMap<SessionId, Cached>,
    /// Entries by the tick they were cached at.
    order: BTreeMap<u64, SessionId>,
}

struct Cached {
    transcript: Vec<Message>,
    bytes: u64,
    tick: u64,
}

impl TranscriptCache {
    fn new(budget: u64) -> Self {
        Self {
            budget,
            bytes: 0,
            evicted: 0,
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn take(&mut self, id: &SessionId) -> Option<Vec<Message>> {
        let cached = self.entries.remove(id)?;
        self.order.remove(&cached.tick);
        self.bytes -= cached.bytes;
        Some(cached.transcript)
    }

    fn remove(&mut self, id: &SessionId) {
        self.take(id);
    }

    fn put(&mut self, id: SessionId, mut transcript: Vec<Message>) {
        self.remove(&id);
        transcript.shrink_to_fit();
        let bytes = transcript_bytes(&transcript);
        if bytes > self.budget {
            self.evicted += 1;
            return;
        }
        self.tick += 1;
        self.order.insert(self.tick, id.clone());
        self.entries.insert(
            id,
            Cached {
                transcript,
                bytes,
                tick: self.tick,
            },
        );
        self.bytes += bytes;
        while self.bytes > self.budget {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.bytes -= gone.bytes;
                self.evicted += 1;
            }
        }
    }
}

/// An estimate of the heap a transcript holds: the message array and every
/// string and JSON value it owns.
pub(super) fn transcript_bytes(transcript: &[Message]) -> u64 {
    let owned: usize = transcript
        .iter()
        .map(|m| match m {
            Message::User { text } => text.capacity(),
            Message::Assistant { text, tool_calls } => {
                text.capacity()
                    + tool_calls.capacity() * size_of::<ToolCall>()
                    + tool_calls
                        .iter()
                        .map(|c| c.id.capacity() + c.name.capacity() + value_bytes(&c.input))
                        .sum::<usize>()
            }
            Message::Tool {
                call_id,
                name,
                content,
                images,
                ..
            } => {
                call_id.capacity()
                    + name.capacity()
                    + content.capacity()
                    + images
                        .iter()
                        .map(|i| i.media_type.capacity() + i.data.capacity())
                        .sum::<usize>()
            }
        })
        .sum();
    (std::mem::size_of_val(transcript) + owned) as u64
}

fn value_bytes(value: &Value) -> usize {
    match value {
        Value::String(s) => s.capacity(),
        Value::Array(items) => items
            .iter()
            .map(|v| size_of::<Value>() + value_bytes(v))
            .sum(),
        // A map entry: its key, its value and the map's own bookkeeping.
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| k.capacity() + size_of::<Value>() + 32 + value_bytes(v))
            .sum(),
        _ => 0,
    }
}

/// A follow-up waiting in a slot, with the key of its durable record (none
/// for messages that were never acknowledged as queued).
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub(crate) nudge: Nudge,
    pub(crate) key: Option<String>,
}

pub(super) const REASON_NONE: u8 = 0;
pub(super) const REASON_STOP: u8 = 1;
pub(super) const REASON_PREEMPT: u8 = 2;
pub(super) const REASON_SHUTDOWN: u8 = 3;

pub(super) struct Running {
    pub(super) turn_id: TurnId,
    pub(super) cancel: CancellationToken,
    pub(super) reason: Arc<AtomicU8>,
    pub(super) done: watch::Receiver<bool>,
}

#[derive(Default)]
pub(super) struct SlotState {
    pub(super) running: Option<Running>,
    /// Coalesced follow-ups waiting for the running turn (see [`queued`]).
    pub(super) pending: Vec<Queued>,
    /// Records of follow-ups steered into the running turn, removed once
    /// its end is durable.
    pub(super) delivered: Vec<String>,
    pub(super) transcript: Option<Vec<Message>>,
    /// The A/B arms the session was enrolled in, once read from its log.
    pub(super) arms: Option<Arc<Vec<bdk_events::AbAssigned>>>,
    /// The running turn has ended and its end is being recorded: the turn is
    /// no longer "running" for direct calls, which wait for it to settle
    /// instead of answering `session_busy`.
    pub(super) ending: bool,
}

pub(super) struct Slot {
    pub(super) admission: tokio::sync::Mutex<()>,
    pub(super) state: Mutex<SlotState>,
}

impl Slot {
    pub(super) fn state(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock means a panic while holding it; the state is plain
        // data that stays consistent, so keep going rather than cascade.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) async fn wait_done(mut done: watch::Receiver<bool>) {
    // An error means the turn task is gone, which also means it settled.
    let _ = done.wait_for(|d| *d).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn said(text: &str) -> Vec<Message> {
        vec![Message::User {
            text: text.to_owned(),
        }]
    }

    #[test]
    fn the_cache_keeps_the_most_recent_within_its_budget() {
        let one = transcript_bytes(&said(&"x".repeat(1000)));
        let mut cache = TranscriptCache::new(one * 3);
        let ids: Vec<SessionId> = (0..5).map(|_| SessionId::generate()).collect();
        for id in &ids {
            cache.put(id.clone(), said(&"x".repeat(1000)));
        }
        assert_eq!(cache.entries.len(), 3);
        assert_eq!(cache.evicted, 2);
        assert!(cache.bytes <= cache.budget);
        assert!(cache.take(&ids[0]).is_none(), "the oldest went first");
        assert!(cache.take(&ids[4]).is_some());
        assert_eq!(cache.entries.len(), 2);
        // Larger than the whole budget: never cached.
        cache.put(SessionId::generate(), said(&"y".repeat(10_000)));
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(cache.evicted, 3);
        // A zero budget caches nothing.
        let mut none = TranscriptCache::new(0);
        none.put(SessionId::generate(), said("hi"));
        assert!(none.entries.is_empty());
    }
}
