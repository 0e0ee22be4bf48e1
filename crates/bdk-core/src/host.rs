//! The session runtime ("host"): sessions, turns, admission, direct tool
//! calls, approvals, recovery.
//!
//! A [`Host`] serves one agent project over one [`Store`]. Callers (the CLI,
//! the HTTP layer, channels, the scheduler) go through it; none of them
//! touches the store's event streams directly except to read.
//!
//! Per session in use the host keeps a slot with the running turn (if any),
//! the follow-ups waiting to be coalesced, and the conversation so far; a
//! resting session's slot goes away and its conversation moves to a cache
//! bounded in bytes (`host/slots.rs`), so memory follows the running work, not
//! the history. Admission
//! (`send`, `stop`, session-bound write calls) is serialized per session by
//! an async lock, so two follow-ups never race into the same turn boundary.
//! Each turn runs in its own task, owned by the slot through its cancel
//! token; the host's shutdown token is the parent of every turn's token.
//!
//! Recovery: when a host is built over a store that holds a turn which never
//! ended (the process died), that turn is recorded `turn.failed` with status
//! `interrupted` and the session rests again, so it can continue.
//!
//! This file holds the [`Host`] handle and its shared state; each concern is
//! a file of its own, most of them an `impl Host` block: `error.rs`
//! ([`HostError`]), `types.rs` (the options and outcomes of the API),
//! `build.rs` ([`HostBuilder`], shutdown), `access.rs` (parts, tool
//! listings, session reads), `admission.rs` (start, send, stop, delete,
//! waits), `queued.rs` (durable coalesced follow-ups), `driver.rs` (the turn
//! task), `direct.rs` (direct tool calls), `approvals.rs`, `recovery.rs`,
//! `transcript.rs` (the model conversation), `services.rs` (the
//! `ToolServices` a call sees), `handlers.rs` (running handler programs), `runtime.rs` (the host side of the
//! [`Runtime`](crate::extension::Runtime) port that
//! extensions reach the host through, see [`crate::extension`]),
//! `slots.rs` (slots and the conversation cache), `loaded.rs` (the version
//! of the agent built from the project, which `Host::reload` swaps),
//! `arms.rs` (the A/B arms' overrides and the draw of a new session) and
//! `ab.rs` (a session's arms applied to its turns, and the report). They
//! form a DAG: the state here names only `slots.rs`, `loaded.rs` and
//! `arms.rs` below it, and no file imports one that imports it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bdk_events::SessionId;
use bdk_store::Store;
use bdk_store::coord::Coordination;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::Decision;
use crate::clock::Clock;
use crate::endpoint::Endpoint;
use crate::extension::HostExtension;
use crate::hooks::HookBus;
use crate::mcp::McpHub;
use bdk_models::replay::Recording;

mod ab;
mod access;
mod admission;
mod approvals;
mod arms;
mod build;
mod direct;
mod driver;
pub(crate) mod error;
mod handlers;
mod keyed;
mod loaded;
mod queued;
mod recovery;
mod runtime;
mod services;
mod slots;
mod transcript;
mod types;

pub use crate::tool::services::MAX_KEY_BYTES;
pub use build::{CORE_NAMESPACES, HostBuilder};
pub use direct::fresh_call_id;
pub(crate) use error::session_error;
pub use error::{HostError, HostResult};
pub use keyed::{CLAIM_PATIENCE, KEY_CLAIMS_NAMESPACE, KeySession};
pub use queued::QUEUE_NAMESPACE;
pub use services::SCHEDULE_CHANNEL;
pub use slots::{DEFAULT_SESSION_CACHE_BYTES, MemoryStats};
pub use transcript::{repair_transcript, transcript_from_events};
pub use types::{
    ApprovalView, CallOrigin, DirectCall, DirectOutcome, FollowUp, Reloaded, Sent, StartSession,
    Started, TurnResult,
};

use loaded::{Loaded, Recipe};
use slots::SlotTable;

struct PendingApproval {
    session_id: SessionId,
    name: String,
    input: Value,
    requested_at: DateTime<Utc>,
    tx: oneshot::Sender<Decision>,
}

struct Inner {
    store: Arc<dyn Store>,
    /// The version of the agent new turns take; swapped by [`Host::reload`].
    loaded: RwLock<Arc<Loaded>>,
    /// What a reload builds the next version from.
    recipe: Recipe,
    /// The agent's MCP connections, when it has any.
    mcp: Option<Arc<dyn McpHub>>,
    hooks: HookBus,
    /// The slots of sessions in use and the transcripts of resting ones.
    slots: Arc<SlotTable>,
    turn_slots: Option<Arc<Semaphore>>,
    queued: AtomicU64,
    approvals: Mutex<HashMap<String, PendingApproval>>,
    shutdown: CancellationToken,
    /// Where model steps are recorded, when they are.
    recording: Option<Arc<Recording>>,
    /// The local socket for subprocess tools; started by the first grant.
    endpoint: Endpoint,
    /// "Now" for tools and extensions' timers.
    clock: Arc<dyn Clock>,
    /// What crates above the runtime added (reminders, ...), in the order
    /// they were added.
    extensions: Vec<Arc<dyn HostExtension>>,
    /// Native handlers by name (`HostBuilder::handler`).
    handlers: BTreeMap<String, Arc<dyn crate::handler::NativeHandler>>,
    /// Turn leases and controls shared with other replicas, when there are any.
    coordination: Option<Arc<dyn Coordination>>,
    /// The bounded wait for a turn running on another replica.
    coordination_wait: Duration,
    /// The specs of the Rust result gates given to the builder (the root
    /// agent's gates also hold the agent's `gates/` programs).
    native_gates: Vec<crate::gate::GateSpec>,
    /// The trees the host's tools write (workspaces, tool-call dirs): every
    /// file operation the host does in them goes through here, bounded per
    /// tree.
    trees: crate::workspace::trees::Trees,
}

impl Inner {
    /// The current version of the agent.
    fn loaded(&self) -> Arc<Loaded> {
        Arc::clone(&self.loaded.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The session runtime for one agent. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

/// A handle that does not keep the host alive (held by the replica task and
/// by extensions, so a host dropped without [`Host::shutdown`] still goes
/// away).
#[derive(Clone)]
pub(crate) struct WeakHost(std::sync::Weak<Inner>);

impl WeakHost {
    pub(crate) fn upgrade(&self) -> Option<Host> {
        self.0.upgrade().map(|inner| Host { inner })
    }
}
