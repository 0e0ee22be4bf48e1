//! What host operations fail with ([`HostError`], [`HostResult`]), and the
//! ownership check that many of them share.

use bdk_events::SessionId;
use bdk_store::{SessionRecord, StoreError};

/// Errors of the host API. The HTTP layer maps each kind to one status code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No such session.
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// The caller does not own the session.
    #[error("session {0} belongs to another principal")]
    Forbidden(String),
    /// The continuation token is not the session's current one.
    #[error("continuation token is stale; use the token returned by the last accepted send")]
    StaleToken,
    /// Task sessions take no follow-ups.
    #[error("session {0} is a task session and takes no follow-ups")]
    TaskSession(String),
    /// A write-effect direct call while a turn runs.
    #[error("session {0} is running a turn; write calls wait until it finishes")]
    SessionBusy(String),
    /// A turn of the session runs on another replica and did not end within
    /// the bounded wait of a follow-up or a stop.
    #[error(
        "session {session} is running a turn on replica {replica} that did not end within {waited_ms} ms; retry later"
    )]
    ReplicaBusy {
        /// The session.
        session: String,
        /// The replica that owns the turn.
        replica: String,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// No callable server tool by that name.
    #[error("unknown tool `{name}`; available tools: {}", available.join(", "))]
    UnknownTool {
        /// The requested name.
        name: String,
        /// The callable names.
        available: Vec<String>,
    },
    /// Agent-execution tools run in the workspace, not on the host.
    #[error(
        "tool `{0}` runs in the agent's workspace (execution = \"agent\") and cannot be called on the host"
    )]
    ToolNotCallable(String),
    /// The input failed the tool's schema.
    #[error("invalid input for `{name}`: {}", errors.join("; "))]
    InvalidToolInput {
        /// The tool.
        name: String,
        /// What is wrong.
        errors: Vec<String>,
    },
    /// The session workspace cannot be created for a write call.
    #[error("session workspace is unavailable: {0}")]
    WorkspaceUnavailable(String),
    /// A request value was refused (workspace path, empty message, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No pending approval with that call id.
    #[error("no pending approval for call {0}")]
    ApprovalNotFound(String),
    /// A built-in tool the agent does not expose to direct callers.
    #[error(
        "built-in tool `{0}` is not exposed for direct calls; list it in `[builtin_tools] direct` in agent.toml to expose it"
    )]
    ToolNotExposed(String),
    /// A `needs_approval` tool called directly without an approval.
    #[error("tool `{name}` needs approval: {how}")]
    ApprovalRequired {
        /// The tool.
        name: String,
        /// How to get it run.
        how: &'static str,
    },
    /// The session's stored data (its record or its event log) is damaged:
    /// a line of the log does not parse, indices do not follow each other,
    /// or the file changed under the store. Only that session is affected;
    /// an operator repairs or deletes it. The detail (file, line) is logged,
    /// not returned.
    #[error(
        "session {0} has damaged stored data and cannot be used until it is repaired or deleted; the server log names the file"
    )]
    SessionCorrupt(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl HostError {
    /// The stable error code (`{ok:false, error:"<code>"}` on the HTTP API,
    /// `error` in the CLI's JSON).
    pub fn code(&self) -> &'static str {
        match self {
            HostError::SessionNotFound(_) => "session_not_found",
            HostError::Forbidden(_) => "forbidden",
            HostError::StaleToken => "stale_continuation_token",
            HostError::TaskSession(_) => "task_session",
            HostError::SessionBusy(_) => "session_busy",
            HostError::ReplicaBusy { .. } => "session_busy",
            HostError::UnknownTool { .. } => "unknown_tool",
            HostError::ToolNotCallable(_) => "tool_not_callable",
            HostError::InvalidToolInput { .. } => "invalid_tool_input",
            HostError::WorkspaceUnavailable(_) => "workspace_unavailable",
            HostError::InvalidRequest(_) => "invalid_request",
            HostError::ApprovalNotFound(_) => "approval_not_found",
            HostError::ToolNotExposed(_) => "tool_not_exposed",
            HostError::ApprovalRequired { .. } => "approval_required",
            HostError::SessionCorrupt(_) => "session_corrupt",
            HostError::Store(StoreError::SessionNotFound(_)) => "session_not_found",
            HostError::Store(StoreError::Invalid { .. }) => "invalid_request",
            HostError::Store(_) => "internal",
        }
    }
}

/// Result alias of the host API.
pub type HostResult<T> = Result<T, HostError>;

/// Maps a store failure on one session's data: damage becomes
/// [`HostError::SessionCorrupt`] (its detail logged here, since it names
/// server paths), everything else passes through.
pub(crate) fn session_error(id: &SessionId) -> impl FnOnce(StoreError) -> HostError + '_ {
    move |e| match e {
        StoreError::Corrupt { path, message } => {
            tracing::warn!(session_id = %id, path = %path, error = %message, "a session's stored data is damaged");
            HostError::SessionCorrupt(id.to_string())
        }
        other => HostError::Store(other),
    }
}

pub(super) fn check_owner(record: &SessionRecord, principal: Option<&str>) -> HostResult<()> {
    match (principal, &record.principal) {
        (None, _) | (_, None) => Ok(()),
        (Some(p), Some(owner)) if p == owner => Ok(()),
        _ => Err(HostError::Forbidden(record.id.to_string())),
    }
}
