//! What a call may ask of the host beyond its own inputs: send a message
//! into a session, read a session, wait for it to rest, call another tool.
//! The types here are shared by [`ToolServices`](super::ToolServices) (Rust
//! tools and handlers) and the host endpoint (programs in any language), so
//! both answer with one semantics.
//!
//! Who may reach which session: a caller acts as a principal (a tool as its
//! session's owner, a schedule handler as `schedule:<name>`, a route handler
//! as the route's authenticated caller). It reaches the sessions that
//! principal owns and the sessions nobody owns. A caller without a principal
//! (a tool of an unowned session, a route handler behind HMAC) reaches only
//! sessions nobody owns: here no principal means anonymous, never trusted.

use std::time::Duration;

use bdk_events::{Admission, SessionId, SessionMode, TurnId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest conversation key, in bytes (a channel's `continuation_key`,
/// a `send` by key).
pub const MAX_KEY_BYTES: usize = 512;

/// The longest `session.wait` may wait (10 minutes).
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// How long `session.wait` waits when the caller names no timeout.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Which session a call means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionTarget {
    /// This session.
    Id(SessionId),
    /// The conversation `key` of `channel` (token `<channel>:<key>`); the
    /// channel defaults to the caller's own.
    Key {
        /// The channel; `None` is the caller's channel.
        channel: Option<String>,
        /// The conversation key.
        key: String,
    },
}

/// A message into a session ([`super::ToolServices::send`]).
#[derive(Clone, Debug)]
pub struct SendMessage {
    /// Where it goes. A key without a session starts one.
    pub target: SessionTarget,
    /// The message.
    pub message: String,
    /// What happens when the session is busy.
    pub admission: Admission,
    /// The caller's delivery id; generated when absent.
    pub delivery_id: Option<String>,
    /// The mode of a session a key starts (chat by default).
    pub mode: SessionMode,
}

/// What a send did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendOutcome {
    /// The session that got the message.
    pub session_id: SessionId,
    /// Its continuation token.
    pub continuation_token: String,
    /// The message's delivery id.
    pub delivery_id: String,
    /// The turn it started; `None` when it was queued behind a running turn.
    pub turn_id: Option<TurnId>,
    /// True when this send started the session.
    pub created: bool,
}

/// A session as a caller sees it: where it rests and how its last turn
/// ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The session.
    pub id: SessionId,
    /// `new`, `running`, `waiting`, `completed` or `failed`.
    pub status: String,
    /// Chat or task.
    pub mode: SessionMode,
    /// The channel that created it.
    pub channel: String,
    /// Its owner, if any.
    pub principal: Option<String>,
    /// Its continuation token.
    pub continuation_token: String,
    /// How many turns ended in it.
    pub turns: u64,
    /// The last turn that ended.
    pub last_turn: Option<TurnView>,
    /// The reply of the last turn that completed (`null` when none did).
    pub last_reply: Option<String>,
}

/// How one turn ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnView {
    /// The turn.
    pub turn_id: Option<TurnId>,
    /// True when it completed.
    pub ok: bool,
    /// `completed`, `failed`, `cancelled` or `interrupted`.
    pub status: String,
    /// Its reply, or its failure message.
    pub text: String,
}

/// What `session.wait` found.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waited {
    /// The session as it was when the wait ended.
    #[serde(flatten)]
    pub session: SessionView,
    /// True when the wait ran out before the session came to rest.
    pub timed_out: bool,
}

/// A tool called for a caller ([`super::ToolServices::call_tool`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCalled {
    /// The tool.
    pub tool_name: String,
    /// The call's id.
    pub call_id: String,
    /// True when the tool answered an error.
    pub is_error: bool,
    /// Its result.
    pub result: Value,
    /// How long it ran.
    pub duration_ms: u64,
    /// The session it was recorded in, when bound to one.
    pub session_id: Option<SessionId>,
}

/// Why a service refused or failed. `code` is the host endpoint's error
/// code for it (`invalid_args`, `session_not_found`, `forbidden`,
/// `task_session`, `session_busy`, `unknown_tool`, `invalid_tool_input`,
/// `approval_required`, `dry_run`, `unavailable`, `internal`, ...).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    /// The error code.
    pub code: &'static str,
    /// What went wrong, for the caller.
    pub message: String,
}

impl ServiceError {
    /// An error with `code`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `invalid_args`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_args", message)
    }

    /// `unavailable`: the caller offers no such service.
    pub fn unavailable(what: &str) -> Self {
        Self::new(
            "unavailable",
            format!("`{what}` is not available to this call"),
        )
    }
}

/// The arguments of `send` on the wire.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SendArgs {
    pub session_id: Option<String>,
    pub channel: Option<String>,
    pub key: Option<String>,
    pub message: String,
    #[serde(default)]
    pub admission: Option<Admission>,
    pub delivery_id: Option<String>,
    #[serde(default)]
    pub mode: Option<SessionMode>,
}

/// The arguments of `session.get` and `session.wait` on the wire.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionArgs {
    pub session_id: Option<String>,
    pub channel: Option<String>,
    pub key: Option<String>,
    /// `session.wait` only.
    pub timeout_ms: Option<u64>,
}

/// The arguments of `tools.call` on the wire.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolCallArgs {
    pub tool: String,
    #[serde(default)]
    pub input: Option<Value>,
    pub session_id: Option<String>,
}

/// The session a wire call names: exactly one of `sessionId` or `key`
/// (with an optional `channel`).
pub fn target(
    session_id: Option<String>,
    channel: Option<String>,
    key: Option<String>,
) -> Result<SessionTarget, ServiceError> {
    match (session_id, key) {
        (Some(id), None) if channel.is_none() => {
            if id.trim().is_empty() {
                return Err(ServiceError::invalid("sessionId must not be empty"));
            }
            Ok(SessionTarget::Id(SessionId::from_string(&id)))
        }
        (Some(_), None) => Err(ServiceError::invalid(
            "`channel` goes with `key`, not with `sessionId`",
        )),
        (None, Some(key)) => {
            if key.trim().is_empty() || key.len() > MAX_KEY_BYTES {
                return Err(ServiceError::invalid(format!(
                    "key must be 1 to {MAX_KEY_BYTES} bytes and not blank"
                )));
            }
            if channel.as_deref().is_some_and(|c| c.trim().is_empty()) {
                return Err(ServiceError::invalid("channel must not be empty"));
            }
            Ok(SessionTarget::Key { channel, key })
        }
        (Some(_), Some(_)) => Err(ServiceError::invalid("give `sessionId` or `key`, not both")),
        (None, None) => Err(ServiceError::invalid(
            "name the session: `sessionId`, or `key` (with an optional `channel`)",
        )),
    }
}

impl SendArgs {
    pub fn into_message(self) -> Result<SendMessage, ServiceError> {
        if self.message.trim().is_empty() {
            return Err(ServiceError::invalid("message must not be empty"));
        }
        Ok(SendMessage {
            target: target(self.session_id, self.channel, self.key)?,
            message: self.message,
            admission: self.admission.unwrap_or(Admission::Coalesce),
            delivery_id: self.delivery_id.filter(|d| !d.trim().is_empty()),
            mode: self.mode.unwrap_or_default(),
        })
    }
}

impl SessionArgs {
    /// The target and, for `session.wait`, the bounded wait.
    pub fn into_parts(self) -> Result<(SessionTarget, Duration), ServiceError> {
        let wait = match self.timeout_ms {
            None => DEFAULT_WAIT,
            Some(ms) => Duration::from_millis(ms).min(MAX_WAIT),
        };
        Ok((target(self.session_id, self.channel, self.key)?, wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_named_once() {
        assert!(matches!(
            target(Some("ses_1".into()), None, None),
            Ok(SessionTarget::Id(_))
        ));
        assert!(matches!(
            target(None, Some("inbox".into()), Some("k".into())),
            Ok(SessionTarget::Key {
                channel: Some(_),
                ..
            })
        ));
        for (id, channel, key) in [
            (None, None, None),
            (Some("ses_1"), None, Some("k")),
            (Some("ses_1"), Some("inbox"), None),
            (None, None, Some(" ")),
            (None, Some(""), Some("k")),
            (Some(" "), None, None),
        ] {
            let e = target(
                id.map(str::to_owned),
                channel.map(str::to_owned),
                key.map(str::to_owned),
            )
            .expect_err("refused");
            assert_eq!(e.code, "invalid_args");
        }
        assert!(target(None, None, Some("k".repeat(513))).is_err());
    }

    #[test]
    fn sends_coalesce_unless_told() {
        let args: SendArgs =
            serde_json::from_value(serde_json::json!({"key": "k", "message": "hi"})).unwrap();
        let send = args.into_message().unwrap();
        assert_eq!(send.admission, Admission::Coalesce);
        assert_eq!(send.mode, SessionMode::Chat);
        let args: SendArgs =
            serde_json::from_value(serde_json::json!({"key": "k", "message": "  "})).unwrap();
        assert!(args.into_message().is_err());
    }

    #[test]
    fn waits_are_bounded() {
        let args: SessionArgs = serde_json::from_value(
            serde_json::json!({"sessionId": "ses_1", "timeoutMs": 99_999_999u64}),
        )
        .unwrap();
        assert_eq!(args.into_parts().unwrap().1, MAX_WAIT);
    }
}
