//! Durable state for BDK: the [`Store`] port and its engines.
//!
//! The port covers sessions (records, the append-only event stream with
//! gapless indices, live subscription, continuation-token rotation), a
//! namespaced key-value store, a file store, and artifact records. Engines:
//!
//! - [`FsStore`]: the default, embedded engine. A documented directory layout
//!   under a state root, zero setup.
//! - `PgStore` (feature `postgres`): PostgreSQL through sqlx, for several
//!   `bdk serve` replicas sharing one database. It passes the same
//!   conformance suite (the `conformance` module, behind the feature of the
//!   same name).
//!
//! This crate knows the storage engines and nothing above them: it never
//! names the agent runtime, HTTP or models.

use std::path::PathBuf;

use async_trait::async_trait;
use bdk_events::{Envelope, Event, SessionId, SessionMode, TurnId};
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod coord;
mod fs;
#[cfg(feature = "schema")]
mod schema;
pub use coord::{Coordination, MemoryCluster, MemoryCoordination};
pub use fs::FsStore;

#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres")]
pub use pg::{PgCoordination, PgOptions, PgStore};

#[cfg(feature = "conformance")]
pub mod conformance;

/// Errors of the store port.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The session does not exist (or its directory was deleted).
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// A session with this id already exists.
    #[error("session {0} already exists")]
    SessionExists(String),
    /// A key, path or id from outside was refused (traversal, bad characters).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was refused (`key`, `path`, `artifact id`, ...).
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// Stored data could not be read back.
    #[error("stored data is corrupt in {path}: {message}")]
    Corrupt {
        /// The file or record.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An I/O error from the engine.
    #[error("storage i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// A record could not be encoded or decoded.
    #[error("failed to encode record: {0}")]
    Encode(#[from] serde_json::Error),
    /// The database engine failed: unreachable, a query or a migration
    /// refused. Only database-backed engines return it.
    #[error("database request failed: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Result alias of the store port.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The stored metadata of a session (`session.json` in [`FsStore`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session id.
    pub id: SessionId,
    /// `chat` or `task`.
    pub mode: SessionMode,
    /// The channel that created it (`http`, `cli`, a custom channel id).
    pub channel: String,
    /// The owning principal, if the channel authenticates callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The current continuation token.
    pub continuation_token: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Free-form purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Writes are stubbed.
    #[serde(default)]
    pub dry_run: bool,
    /// Pinned "now" for tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change of this record.
    pub updated_at: DateTime<Utc>,
    /// Engine-independent extra fields (channel state and the like).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub extra: Value,
}

/// An event to append: the store assigns `index` and `at`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// The turn it belongs to, if any.
    pub turn_id: Option<TurnId>,
    /// The event.
    pub event: Event,
}

impl NewEvent {
    /// An event outside any turn.
    pub fn session(event: impl Into<Event>) -> Self {
        Self {
            turn_id: None,
            event: event.into(),
        }
    }

    /// An event of a turn.
    pub fn turn(turn_id: &TurnId, event: impl Into<Event>) -> Self {
        Self {
            turn_id: Some(turn_id.clone()),
            event: event.into(),
        }
    }
}

/// Outcome of [`Store::rotate_token`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSwap {
    /// The expected token matched and was replaced.
    Rotated,
    /// The session's token is not the expected one (stale or forged).
    Stale,
}

/// A stream of recorded events.
pub type EventStream = BoxStream<'static, Result<Envelope>>;

/// An artifact record: a durable, tagged output of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRecord {
    /// The artifact id (`art_...`).
    pub id: String,
    /// The session that produced it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Owner principal (copied from the session for ownership checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Caller-chosen kind.
    pub kind: String,
    /// Display name (a file name, usually).
    pub name: String,
    /// MIME type of the content.
    pub content_type: String,
    /// Size of the content in bytes.
    pub size: u64,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
    /// When it was tagged.
    pub created_at: DateTime<Utc>,
}

/// Filter for [`Store::artifact_list`].
#[derive(Clone, Debug, Default)]
pub struct ArtifactFilter {
    /// Only this session's artifacts.
    pub session_id: Option<SessionId>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this principal's artifacts.
    pub principal: Option<String>,
    /// At most this many, newest first.
    pub limit: Option<usize>,
}

/// The storage port. Every engine passes the conformance suite.
///
/// Invariants every engine keeps:
/// - `append` assigns indices `0, 1, 2, ...` per session with no gap and no
///   repeat, across restarts and concurrent callers;
/// - an event is recorded before any subscriber sees it;
/// - `subscribe(from)` yields every event with `index >= from` exactly once,
///   in order: the recorded ones, then live ones, with no gap or duplicate at
///   the seam; the stream ends when the session is deleted;
/// - events whose [`Event::is_boundary`] is true are durable (fsynced, or
///   committed) before `append` returns.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Records a new session. Fails with [`StoreError::SessionExists`] when the id is taken.
    async fn create_session(&self, record: SessionRecord) -> Result<()>;
    /// Reads a session record; `None` when absent.
    async fn get_session(&self, id: &SessionId) -> Result<Option<SessionRecord>>;
    /// Replaces a session record (same id). Token changes go through [`Store::rotate_token`].
    async fn update_session(&self, record: SessionRecord) -> Result<()>;
    /// Every session, oldest first.
    async fn list_sessions(&self) -> Result<Vec<SessionRecord>>;
    /// Removes a session and everything under it. Returns false when it did not exist.
    async fn delete_session(&self, id: &SessionId) -> Result<bool>;
    /// Finds a session by its current continuation token.
    async fn find_by_token(&self, token: &str) -> Result<Option<SessionRecord>>;
    /// Replaces the token if it is still `expected` (compare-and-swap).
    async fn rotate_token(&self, id: &SessionId, expected: &str, new: &str) -> Result<TokenSwap>;
    /// [`Store::rotate_token`] for a caller whose next write to the session
    /// is durable anyway (a follow-up's `message.received`): the swap is
    /// decided, and seen by every reader of this store, before this returns,
    /// but may become durable only with the session's next boundary append,
    /// its next record write, rotation or delete, or
    /// [`Store::commit_token`]. A crash before then may lose the swap
    /// (`expected` is then current again). So a caller must not hand `new`
    /// to anyone before one of those has returned; one that gives up
    /// instead swaps back with [`Store::rotate_token`]. An engine without a
    /// cheaper way keeps this default, a durable rotation.
    async fn rotate_token_deferred(
        &self,
        id: &SessionId,
        expected: &str,
        new: &str,
    ) -> Result<TokenSwap> {
        self.rotate_token(id, expected, new).await
    }
    /// Makes a deferred rotation of the session's token
    /// ([`Store::rotate_token_deferred`]) durable now; nothing to do when
    /// none is pending.
    async fn commit_token(&self, id: &SessionId) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// Appends events atomically in order; returns them with their indices.
    async fn append(&self, id: &SessionId, events: Vec<NewEvent>) -> Result<Vec<Envelope>>;
    /// Recorded events with `index >= from`.
    async fn read(&self, id: &SessionId, from: u64) -> Result<Vec<Envelope>>;
    /// The index the next append will get (the number of recorded events).
    async fn next_index(&self, id: &SessionId) -> Result<u64>;
    /// Replay from `from`, then follow live appends.
    async fn subscribe(&self, id: &SessionId, from: u64) -> Result<EventStream>;

    /// A session's local workspace directory (created on demand by the caller).
    fn workspace_dir(&self, id: &SessionId) -> PathBuf;
    /// A scratch directory for a direct tool call (`tool-calls/<callId>`).
    fn tool_call_dir(&self, call_id: &str) -> Result<PathBuf>;
    /// Where `bdk run` writes traces (`traces/`).
    fn traces_dir(&self) -> PathBuf;
    /// The state root shared by every session of the agent.
    fn state_root(&self) -> PathBuf;

    /// Reads a value from the key-value store.
    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Value>>;
    /// Writes a value.
    async fn kv_put(&self, namespace: &str, key: &str, value: Value) -> Result<()>;
    /// Writes a value only if the key holds none; true when this call wrote
    /// it. Atomic across every caller of the same backing state (threads,
    /// processes, replicas): of concurrent callers on one key, exactly one
    /// gets true. Durable claims (a schedule's fire) are built on it.
    async fn kv_put_if_absent(&self, namespace: &str, key: &str, value: Value) -> Result<bool>;
    /// Deletes a value; true when it existed.
    async fn kv_delete(&self, namespace: &str, key: &str) -> Result<bool>;
    /// Keys of a namespace that start with `prefix`, sorted.
    async fn kv_list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>>;

    /// Writes a file under the store's file area (`path` is relative, `/`-separated).
    async fn file_put(&self, path: &str, bytes: Vec<u8>) -> Result<()>;
    /// Reads a file; `None` when absent.
    async fn file_get(&self, path: &str) -> Result<Option<Vec<u8>>>;
    /// Deletes a file; true when it existed.
    async fn file_delete(&self, path: &str) -> Result<bool>;
    /// Paths under `prefix`, sorted.
    async fn file_list(&self, prefix: &str) -> Result<Vec<String>>;

    /// Records an artifact with its content.
    async fn artifact_put(&self, record: ArtifactRecord, content: Vec<u8>) -> Result<()>;
    /// Reads an artifact record.
    async fn artifact_get(&self, id: &str) -> Result<Option<ArtifactRecord>>;
    /// Reads an artifact's content.
    async fn artifact_content(&self, id: &str) -> Result<Option<Vec<u8>>>;
    /// Lists artifacts, newest first.
    async fn artifact_list(&self, filter: &ArtifactFilter) -> Result<Vec<ArtifactRecord>>;

    /// How many sessions the engine holds in-memory state for right now, and
    /// how many idle ones it has dropped since it opened: a gauge for
    /// operators and tests of bounded memory. An engine keeps such state only
    /// for sessions in use plus a bounded number of recent ones; one that
    /// keeps none answers `(0, 0)`.
    fn resident_sessions(&self) -> (usize, u64) {
        (0, 0)
    }
}
