//! What a result gate is, as `agent/gates/<name>.toml` and the host builder
//! declare it: [`GateSpec`] and its [`OnError`] policy. Running a gate is
//! the runtime's business (`bdk_core::gate`).

use std::time::Duration;

use serde::Serialize;

/// Replies a turn may offer when a gate sets no `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The most replies a gate may let a turn offer.
pub const MAX_ATTEMPTS_LIMIT: u32 = 10;
/// How long a gate may take when it sets no `timeout_secs`.
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a broken gate (crashed, timed out, garbled answer) means for the turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// The turn fails, naming what broke (the default: a gate guards
    /// something, so a gate that cannot answer lets nothing through).
    #[default]
    Fail,
    /// The reply is accepted as if the gate had not run; the error is still
    /// recorded on the verdict.
    Accept,
}

/// What a gate is: its name and the rules the turn loop applies around it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateSpec {
    /// The name (a manifest's file stem); gates run in name order.
    pub name: String,
    /// What it checks, for people.
    pub description: String,
    /// How many replies a turn may offer before this gate's reject fails
    /// the turn (1..=[`MAX_ATTEMPTS_LIMIT`]).
    pub max_attempts: u32,
    /// How long one check may take; past it the check is a
    /// timeout error of the runtime.
    #[serde(rename = "timeoutMs", serialize_with = "as_millis")]
    pub timeout: Duration,
    /// What a broken check means.
    pub on_error: OnError,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl GateSpec {
    /// A spec with the defaults: [`DEFAULT_MAX_ATTEMPTS`],
    /// [`DEFAULT_GATE_TIMEOUT`], [`OnError::Fail`].
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: DEFAULT_GATE_TIMEOUT,
            on_error: OnError::Fail,
        }
    }

    /// Sets `max_attempts` (clamped to 1..=[`MAX_ATTEMPTS_LIMIT`]).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.clamp(1, MAX_ATTEMPTS_LIMIT);
        self
    }

    /// Sets the timeout of one check.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the `on_error` policy.
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.on_error = policy;
        self
    }
}
