//! The state the handlers of the app share: per agent ([`Agent`]) and for
//! the whole app ([`Shared`]), and the [`Mount`] an agent is served from.
//! Its fields name only leaves (the auth policy, the eval state, the log
//! buffer), so every handler module can read it without importing the
//! router that builds it.

use std::sync::Arc;
use std::time::Duration;

use bdk_core::Diagnostic;
use bdk_core::host::Host;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::auth::policy::Policy;
use crate::evals::state::Evals;
use crate::logs::LogBuffer;

/// One agent served by the app.
#[derive(Clone)]
pub struct Mount {
    /// URL slug; `None` in `--mode single` (routes at `/v1/*`).
    pub slug: Option<String>,
    /// The agent's session runtime.
    pub host: Host,
    /// Discovery diagnostics (warnings), served in `/v1/info`.
    pub diagnostics: Vec<Diagnostic>,
}

/// State every request handler of one agent shares.
pub(crate) struct Agent {
    pub(crate) host: Host,
    pub(crate) slug: Option<String>,
    /// `/<slug>`, or empty in single mode.
    pub(crate) prefix: String,
    pub(crate) diagnostics: Vec<Diagnostic>,
    pub(crate) shared: Arc<Shared>,
    /// Fires this agent's schedules (dev route and cadence alike).
    pub(crate) schedules: bdk_scheduler::Dispatcher,
    /// The eval routes' state (run history, the active run).
    pub(crate) evals: Evals,
}

/// App-wide settings, derived once from [`Config`].
pub(crate) struct Shared {
    pub(crate) auth: Policy,
    pub(crate) dev: bool,
    pub(crate) playground: bool,
    pub(crate) docs: bool,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) logs: LogBuffer,
    pub(crate) shutdown: CancellationToken,
    /// The generic OpenAPI document (`openapi::document`, built on first
    /// use), which `GET /v1/openapi.json` serves with the agent's server.
    pub(crate) openapi: fn() -> Value,
}
