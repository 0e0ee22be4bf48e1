//! What an eval talks to: the agent in this process (`HostTarget`, feature
//! `host`) or a running `bdk serve` over HTTP (`HttpTarget`, feature
//! `http`). Both mark every session they open with purpose `eval`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bdk_events::{Envelope, SessionId, TurnId};

#[cfg(feature = "host")]
mod host;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "host")]
pub use host::HostTarget;
#[cfg(feature = "http")]
pub use http::HttpTarget;

/// The purpose every eval session carries.
pub const EVAL_PURPOSE: &str = "eval";

/// A failure talking to the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TargetError(pub String);

/// A session opened by a target, with the token its follow-ups need.
#[derive(Clone, Debug)]
pub struct Opened {
    /// The session.
    pub session_id: SessionId,
    /// The current continuation token.
    pub token: String,
    /// The turn the message started.
    pub turn_id: TurnId,
}

/// Where a turn stands when a wait for it returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The turn ended (completed or failed).
    Ended,
    /// The turn waits for a decision on a `needs_approval` call (its
    /// `action.approval_requested` is recorded).
    Parked,
}

/// True when `env` ends `turn` or parks it on an approval.
#[cfg(any(feature = "host", feature = "http"))]
pub(crate) fn settles(env_turn: Option<&str>, kind: &str, turn: &TurnId) -> Option<Settled> {
    if env_turn != Some(turn.as_str()) {
        return None;
    }
    match kind {
        "turn.completed" | "turn.failed" => Some(Settled::Ended),
        "action.approval_requested" => Some(Settled::Parked),
        _ => None,
    }
}

/// Where eval turns run.
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// Opens a session with a first message (purpose `eval`).
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError>;
    /// Like [`Target::start`], with the session pinned to A/B arms
    /// (experiment -> arm). The default can pin none and refuses any.
    async fn start_pinned(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
        arms: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        if !arms.is_empty() {
            return Err(TargetError(
                "this eval target cannot pin A/B arms; run the evals in process (`bdk evals` without --url)".into(),
            ));
        }
        self.start(title, message, files).await
    }
    /// Sends a follow-up into an open session.
    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError>;
    /// Waits until the turn ended (completed or failed).
    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError>;
    /// Every recorded event of the session.
    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError>;
    /// Stops the running turn (on timeout or cancellation); best effort.
    async fn stop(&self, session: &SessionId);
    /// Waits until `turn` ends or, looking at events from index `from` on,
    /// parks a call for approval. The default knows no approvals and waits
    /// for the end.
    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        let _ = from;
        self.wait_turn(session, turn).await.map(|()| Settled::Ended)
    }
    /// Approves or denies the parked call `call_id`.
    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        let _ = (session, call_id, approved, reason);
        Err(TargetError(
            "this eval target cannot resolve approvals".to_owned(),
        ))
    }
}

#[cfg(any(feature = "host", feature = "http"))]
pub(crate) fn host_err(e: impl std::fmt::Display) -> TargetError {
    TargetError(e.to_string())
}
