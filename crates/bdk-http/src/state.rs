//! The state the handlers of the app share: per agent ([`Agent`]) and for
//! the whole app ([`Shared`]), and the [`Mount`] an agent is served from.
//! Its fields name only leaves (the auth policy, the eval state, the log
//! buffer), so every handler module can read it without importing the
//! router that builds it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bdk_core::Diagnostic;
use bdk_core::host::Host;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::auth::policy::Policy;
#[cfg(feature = "evals")]
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
    /// Set when something reloads the agent as its folder changes (`bdk
    /// dev`): what it reports replaces `diagnostics` and is served as
    /// `reload` in `/v1/info` and `/v1/meta`.
    pub reload: Option<ReloadStatus>,
}

/// How the reloads of one agent went, shared between the watcher that
/// reloads it and the routes that report it.
#[derive(Clone, Debug)]
pub struct ReloadStatus(Arc<RwLock<Reload>>);

/// The last reload of an agent, as `/v1/info` serves it under `reload`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reload {
    /// The version being served ([`Host::version`]): 1 as started, one
    /// more per reload.
    pub version: u64,
    /// False when the folder's last change could not be loaded; the
    /// version above is still served.
    pub ok: bool,
    /// When the watcher last looked at a change.
    pub at: DateTime<Utc>,
    /// What stopped the last change from loading (validation errors), when
    /// `ok` is false.
    pub errors: Vec<Diagnostic>,
    /// Warnings of the version being served.
    #[serde(skip)]
    pub(crate) diagnostics: Vec<Diagnostic>,
    /// Parts of the folder that changed since the server started but apply
    /// only after a restart (`channels`, `hooks`, ...).
    pub needs_restart: Vec<String>,
}

impl ReloadStatus {
    /// The status of an agent as it started: `version` with `diagnostics`.
    pub fn new(version: u64, diagnostics: Vec<Diagnostic>) -> Self {
        Self(Arc::new(RwLock::new(Reload {
            version,
            ok: true,
            at: Utc::now(),
            errors: Vec::new(),
            diagnostics,
            needs_restart: Vec::new(),
        })))
    }

    /// A change loaded: `version` is served, with these warnings. Parts
    /// that need a restart accumulate until one.
    pub fn loaded(&self, version: u64, diagnostics: Vec<Diagnostic>, needs_restart: &[String]) {
        let mut r = self.0.write().unwrap_or_else(|p| p.into_inner());
        r.version = version;
        r.ok = true;
        r.at = Utc::now();
        r.errors.clear();
        r.diagnostics = diagnostics;
        for part in needs_restart {
            if !r.needs_restart.contains(part) {
                r.needs_restart.push(part.clone());
            }
        }
    }

    /// A change did not load: the served version stays, these are why.
    pub fn failed(&self, errors: Vec<Diagnostic>) {
        let mut r = self.0.write().unwrap_or_else(|p| p.into_inner());
        r.ok = false;
        r.at = Utc::now();
        r.errors = errors;
    }

    /// The status now.
    pub fn get(&self) -> Reload {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// State every request handler of one agent shares.
pub(crate) struct Agent {
    pub(crate) host: Host,
    pub(crate) slug: Option<String>,
    /// `/<slug>`, or empty in single mode.
    pub(crate) prefix: String,
    pub(crate) diagnostics: Vec<Diagnostic>,
    /// The reloads' status, when a watcher reloads the agent.
    pub(crate) reload: Option<ReloadStatus>,
    pub(crate) shared: Arc<Shared>,
    /// Fires this agent's schedules (dev route and cadence alike).
    #[cfg(feature = "scheduler")]
    pub(crate) schedules: bdk_scheduler::Dispatcher,
    /// The eval routes' state (run history, the active run).
    #[cfg(feature = "evals")]
    pub(crate) evals: Evals,
}

impl Agent {
    /// The diagnostics of the version served.
    pub(crate) fn diagnostics(&self) -> Vec<Diagnostic> {
        match &self.reload {
            Some(status) => status.get().diagnostics,
            None => self.diagnostics.clone(),
        }
    }
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
