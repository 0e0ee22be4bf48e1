//! Result gates: code that judges each turn's final reply before the turn
//! completes with it.
//!
//! A gate answers one of three verdicts ([`GateAnswer`]): *accept* (the
//! turn completes as usual, optionally reporting an action the gate took,
//! such as posting the reply somewhere), *reject* with feedback (the model
//! gets the feedback as a message and repairs its reply within the same
//! turn, up to [`GateSpec::max_attempts`] replies) or *fail* (the turn ends
//! `turn.failed` with the gate's message). A gate that breaks (crashes,
//! hangs past its timeout, answers something that is not a verdict) is a
//! [`GateError`], which the gate's [`OnError`] policy turns into a verdict;
//! a broken gate never kills the session.
//!
//! Two forms, one semantics: Rust code implements [`ResultGate`] and
//! registers it with `HostBuilder::gate`; an agent folder declares programs
//! in `agent/gates/<name>.toml`, which the host runs through
//! [`program::ProgramGate`], an implementation of the same trait. The turn
//! loop (`crate::agent`) runs an agent's gates in name order on every reply
//! the model offers as final and records each answer as a `gate.verdict`
//! event.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_events::{Envelope, Verdict};
use serde_json::Value;

use crate::tool::ToolContext;

pub mod program;

pub use bdk_project::gate::{
    DEFAULT_GATE_TIMEOUT, DEFAULT_MAX_ATTEMPTS, GateSpec, MAX_ATTEMPTS_LIMIT, OnError,
};

/// What a gate is asked about: one reply the model offered as final.
#[derive(Clone)]
pub struct GateRequest {
    /// The reply text.
    pub reply: String,
    /// Which final reply of the turn this is, from 1.
    pub attempt: u32,
    /// The gate's `max_attempts`: a reject at this attempt fails the turn.
    pub max_attempts: u32,
    /// The turn's events so far, oldest first (`message.received` on).
    pub events: Vec<Envelope>,
    /// The session's current continuation token, when it has one.
    pub continuation_token: Option<String>,
    /// The session, its workspace, "now", dry run, the host services and
    /// the cancellation of the check, as a tool call sees them. `call_id`
    /// is this check's own id (`gate_...`).
    pub ctx: ToolContext,
}

/// A gate's verdict on a reply.
#[derive(Clone, Debug, PartialEq)]
pub enum GateAnswer {
    /// The reply stands. `action` (free text or JSON, `null` for none) says
    /// what the gate did with it, for the record.
    Accept {
        /// What the gate did.
        action: Value,
    },
    /// The model must repair its reply; it is told `feedback`.
    Reject {
        /// What to repair.
        feedback: String,
    },
    /// The turn fails with `message`.
    Fail {
        /// Why.
        message: String,
    },
}

impl GateAnswer {
    /// An accept without an action.
    pub fn accept() -> Self {
        GateAnswer::Accept {
            action: Value::Null,
        }
    }

    /// Reads the JSON answer of the program protocol:
    /// `{"verdict":"accept","action":...}`, `{"verdict":"reject","feedback":"..."}`
    /// or `{"verdict":"fail","message":"..."}`.
    pub fn from_json(value: &Value) -> Result<Self, GateError> {
        let bad = |why: &str| GateError::BadAnswer(why.to_owned());
        let Some(obj) = value.as_object() else {
            return Err(bad("the answer is not a JSON object"));
        };
        let text = |key: &str| -> Result<String, GateError> {
            match obj.get(key) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                _ => Err(GateError::BadAnswer(format!(
                    "`{key}` must be a non-empty string"
                ))),
            }
        };
        match obj.get("verdict").and_then(Value::as_str) {
            Some("accept") => Ok(GateAnswer::Accept {
                action: obj.get("action").cloned().unwrap_or(Value::Null),
            }),
            Some("reject") => Ok(GateAnswer::Reject {
                feedback: text("feedback")?,
            }),
            Some("fail") => Ok(GateAnswer::Fail {
                message: text("message")?,
            }),
            Some(other) => Err(GateError::BadAnswer(format!(
                "unknown verdict `{other}` (expected accept, reject or fail)"
            ))),
            None => Err(bad("`verdict` is missing")),
        }
    }

    /// The verdict kind.
    pub fn verdict(&self) -> Verdict {
        match self {
            GateAnswer::Accept { .. } => Verdict::Accept,
            GateAnswer::Reject { .. } => Verdict::Reject,
            GateAnswer::Fail { .. } => Verdict::Fail,
        }
    }
}

/// Why a gate gave no verdict. Its [`OnError`] policy decides what that
/// means for the turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// It ran past its timeout and was stopped.
    #[error("timed out after {0} ms")]
    TimedOut(u64),
    /// It ended without answering (a program's non-zero exit or signal,
    /// with the end of its stderr).
    #[error("crashed: {0}")]
    Crashed(String),
    /// It answered something that is not a verdict.
    #[error("answered something that is not a verdict: {0}")]
    BadAnswer(String),
    /// It wrote more than its output cap.
    #[error("printed more than {0} bytes")]
    OutputExceeded(usize),
    /// It could not be run at all (a program that does not start).
    #[error("could not run: {0}")]
    Unavailable(String),
    /// The turn was cancelled while it ran.
    #[error("cancelled")]
    Cancelled,
}

/// A result gate. Implementations must end promptly when `ctx.cancel` of
/// the request fires, and never panic: a failure is a [`GateError`].
#[async_trait]
pub trait ResultGate: Send + Sync + 'static {
    /// The gate's name and rules.
    fn spec(&self) -> &GateSpec;

    /// Judges one reply.
    async fn check(&self, request: GateRequest) -> Result<GateAnswer, GateError>;
}

/// Runs one check with the gate's timeout (a safety net a little past it,
/// so a program gate reports its own timeout first) and the turn's
/// cancellation. Returns the answer and how long the check took.
pub async fn run_check(
    gate: &dyn ResultGate,
    request: GateRequest,
) -> (Result<GateAnswer, GateError>, Duration) {
    let started = Instant::now();
    let cancel = request.ctx.cancel.clone();
    let timeout = gate.spec().timeout;
    let safety = timeout + Duration::from_millis(500);
    let answer = tokio::select! {
        answer = gate.check(request) => answer,
        () = tokio::time::sleep(safety) => {
            cancel.cancel();
            Err(GateError::TimedOut(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)))
        }
        () = cancel.cancelled() => Err(GateError::Cancelled),
    };
    (answer, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_read_the_three_verdicts_and_refuse_the_rest() {
        assert_eq!(
            GateAnswer::from_json(&json!({"verdict": "accept", "action": {"posted": true}})),
            Ok(GateAnswer::Accept {
                action: json!({"posted": true})
            })
        );
        assert_eq!(
            GateAnswer::from_json(&json!({"verdict": "accept"})),
            Ok(GateAnswer::accept())
        );
        assert_eq!(
            GateAnswer::from_json(&json!({"verdict": "reject", "feedback": "sign it"})),
            Ok(GateAnswer::Reject {
                feedback: "sign it".into()
            })
        );
        assert_eq!(
            GateAnswer::from_json(&json!({"verdict": "fail", "message": "no"})),
            Ok(GateAnswer::Fail {
                message: "no".into()
            })
        );
        for bad in [
            json!([]),
            json!({}),
            json!({"verdict": "maybe"}),
            json!({"verdict": "reject"}),
            json!({"verdict": "reject", "feedback": " "}),
            json!({"verdict": "fail", "message": 3}),
        ] {
            assert!(
                matches!(GateAnswer::from_json(&bad), Err(GateError::BadAnswer(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn max_attempts_stays_in_range() {
        assert_eq!(GateSpec::new("g", "").max_attempts(0).max_attempts, 1);
        assert_eq!(GateSpec::new("g", "").max_attempts(99).max_attempts, 10);
        assert_eq!(GateSpec::new("g", "").max_attempts, DEFAULT_MAX_ATTEMPTS);
    }
}
