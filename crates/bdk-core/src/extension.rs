//! Host extensions: what a crate above the runtime adds to a host without
//! the runtime knowing it (built-in tools, host-endpoint operations, and
//! background work over the host's sessions), and the narrow [`Runtime`]
//! port through which it reaches the host.
//!
//! The runtime names no extension. `bdk-scheduler`'s reminders are one:
//! they add the `reminders_*` tools and the `reminders.*` endpoint
//! operations, arm a timer when the host starts, and disarm a session's
//! reminders when it is deleted. An embedder registers extensions with
//! `HostBuilder::extension` and finds one again with `Host::extension`.
//!
//! An extension must not hold the host strongly (the host owns its
//! extensions): it gets a [`RuntimeLink`] that yields the host only while
//! the host is alive.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::{SessionId, SessionMode, TurnId};
use bdk_store::{Store, StoreError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::host::error::HostResult;
use crate::project::Project;
use crate::tool::{Tool, ToolContext, ToolSpec};

/// What the host offers an extension: its store and clock, its tools, and
/// two ways into a session (wake it with a message, or call one of its tools
/// as the agent's own machinery).
#[async_trait]
pub trait Runtime: Send + Sync {
    /// The host's store.
    fn store(&self) -> Arc<dyn Store>;
    /// The host's clock ("now" for tools and timers).
    fn clock(&self) -> Arc<dyn Clock>;
    /// True when replicas share the store (a coordination is configured),
    /// so state other replicas write must be re-read rather than cached.
    fn shares_store(&self) -> bool;
    /// The tools the agent has.
    fn tools(&self) -> Vec<ToolSpec>;
    /// The mode of a session; `None` when there is no such session.
    async fn session_mode(&self, session: &SessionId) -> Result<Option<SessionMode>, StoreError>;
    /// Wakes a session with `message`, admitted as `coalesce` (merged into
    /// a follow-up that is waiting, else a new turn); the turn it started,
    /// if it started one.
    async fn wake(&self, session: &SessionId, message: String) -> HostResult<Option<TurnId>>;
    /// Calls one of the agent's tools bound to `session`, as the agent's
    /// own machinery (built-ins allowed, nobody to approve); whether the
    /// tool failed, and its result.
    async fn call_tool(
        &self,
        session: &SessionId,
        tool: &str,
        args: Value,
    ) -> HostResult<(bool, Value)>;
}

/// A way back to the host that does not keep it alive.
#[derive(Clone)]
pub struct RuntimeLink(Arc<dyn Fn() -> Option<Arc<dyn Runtime>> + Send + Sync>);

impl RuntimeLink {
    /// A link that yields what `get` yields.
    pub fn new(get: impl Fn() -> Option<Arc<dyn Runtime>> + Send + Sync + 'static) -> Self {
        Self(Arc::new(get))
    }

    /// The host, while it is alive.
    pub fn get(&self) -> Option<Arc<dyn Runtime>> {
        (self.0)()
    }
}

impl std::fmt::Debug for RuntimeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuntimeLink")
    }
}

/// One host-endpoint operation handed to the extension that declared it.
pub struct OperationCall<'a> {
    /// The operation, e.g. `reminders.create`.
    pub op: &'a str,
    /// Its arguments, as the caller sent them.
    pub args: Value,
    /// The context of the tool call the endpoint token belongs to (its
    /// session, principal and dry-run flag).
    pub ctx: &'a ToolContext,
}

/// Why an extension refused an operation; the endpoint answers each with
/// the error code in brackets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError {
    /// The arguments are wrong (`invalid_args`).
    #[error("{0}")]
    InvalidArgs(String),
    /// The operation needs a call bound to a session (`no_session`); the
    /// value names what needs it.
    #[error("`{0}` needs a call bound to a session; this call has none")]
    NoSession(String),
    /// The operation changes state and the call is a dry run (`dry_run`).
    #[error("`{0}` changes state and this call runs in a dry-run session")]
    DryRun(String),
    /// The service is not available to this call (`unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// The named session does not exist (`session_not_found`).
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// The named session is another principal's (`forbidden`).
    #[error("session {0} belongs to another principal")]
    Forbidden(String),
    /// The host's storage failed (`internal`); the caller sees a generic
    /// message and the log has this one.
    #[error("host storage failed: {0}")]
    Storage(StoreError),
}

/// Something a crate above the runtime adds to a host. Every method but
/// [`HostExtension::name`] and [`HostExtension::into_any`] has a default that
/// adds nothing.
#[async_trait]
pub trait HostExtension: Send + Sync + 'static {
    /// A short name for logs and errors.
    fn name(&self) -> &'static str;

    /// Itself as `Any`, so `Host::extension` can hand it back typed.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;

    /// The built-in tools it adds for `project`, asked once while the host
    /// is built. They count as built-ins: a manifest or native tool of the
    /// same name replaces one, and remote callers reach them only through
    /// `[builtin_tools] direct`.
    fn tools(&self, _project: &Project) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// The host-endpoint operations it answers (exact names).
    fn operations(&self) -> &'static [&'static str] {
        &[]
    }

    /// The key-value namespaces it keeps its own state in (exact names).
    /// The host endpoint refuses every `kv.*` operation on them with
    /// `reserved_namespace`, so no tool or handler reads or forges that
    /// state; the extension itself reaches them through the store.
    fn reserved_namespaces(&self) -> &'static [&'static str] {
        &[]
    }

    /// Answers one of [`HostExtension::operations`].
    async fn operation(&self, call: OperationCall<'_>) -> Result<Value, OperationError> {
        Err(OperationError::Unavailable(format!(
            "`{}` is not answered by {}",
            call.op,
            self.name()
        )))
    }

    /// Called once the host is built (after crash recovery), before the
    /// host is handed to its builder's caller. Tasks it spawns must end
    /// when `shutdown` (the host's shutdown token) fires. An error fails the
    /// build (say what could not start in a
    /// [`HostError::InvalidRequest`](crate::host::HostError::InvalidRequest)).
    async fn start(&self, _runtime: RuntimeLink, _shutdown: CancellationToken) -> HostResult<()> {
        Ok(())
    }

    /// Called after the host deleted `session`.
    async fn session_deleted(&self, _session: &SessionId) {}
}
