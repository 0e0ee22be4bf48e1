//! The program form of a result gate: `gates/<name>.toml` names a command
//! that runs in `gates/` like a command tool runs in `tools/`.
//!
//! The protocol: one JSON request line on stdin
//!
//! ```json
//! {"gate": "signed", "reply": "...", "attempt": 1, "maxAttempts": 3,
//!  "events": [/* the turn's envelopes so far */],
//!  "session": {"id": "ses_...", "channel": "http", "mode": "chat",
//!              "principal": "...", "continuationToken": "http:...", "dryRun": false},
//!  "now": "2026-01-15T09:00:00.000Z"}
//! ```
//!
//! and one JSON object on stdout: `{"verdict":"accept"}` (optionally with
//! `"action"`), `{"verdict":"reject","feedback":"..."}` or
//! `{"verdict":"fail","message":"..."}`. A non-zero exit, a signal, a
//! timeout, more than `max_output_bytes` on stdout or anything but one such
//! object is a [`GateError`].
//!
//! It runs through the host's one runner of author programs
//! ([`crate::handler`]), so exactly as a handler or a command tool does
//! (environment allowlist plus the gate's `env`, Landlock, its own PID
//! namespace, a temp dir of its own), with the session workspace writable
//! as for the session's tools and `BDK_HOST_SOCKET` / `BDK_HOST_TOKEN` for
//! the host endpoint, bound to the session and its principal; in a dry-run
//! session the endpoint refuses writes, as it does for tools.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::SecondsFormat;
use serde_json::{Value, json};

use super::{GateAnswer, GateError, GateRequest, GateSpec, ResultGate};
use crate::containment::Containment;
use crate::handler::{self, HandlerError, Run};
use crate::tool::subprocess::context_env;
use bdk_project::{GateManifest, HandlerCommand};

/// A gate run as a program in the agent's `gates/` folder.
///
/// Deliberately not `Debug`: its manifest `env` may carry secrets.
pub struct ProgramGate {
    spec: GateSpec,
    command: HandlerCommand,
    containment: Containment,
    lib: Option<PathBuf>,
}

impl ProgramGate {
    /// The gate of a manifest, run under `containment`; `lib` is the
    /// agent's shared code folder, readable by every program.
    pub fn new(m: &GateManifest, containment: &Containment, lib: Option<&Path>) -> Self {
        Self {
            spec: m.spec.clone(),
            command: m.command.clone(),
            containment: containment.clone(),
            lib: lib.map(Path::to_path_buf),
        }
    }
}

/// The JSON request a gate program reads on stdin.
pub fn request_json(gate: &str, request: &GateRequest) -> Value {
    let ctx = &request.ctx;
    json!({
        "gate": gate,
        "reply": request.reply,
        "attempt": request.attempt,
        "maxAttempts": request.max_attempts,
        "events": request.events,
        "session": {
            "id": ctx.session.id.as_ref().map(|id| id.as_str()),
            "channel": ctx.session.channel,
            "mode": ctx.session.mode,
            "principal": ctx.session.principal,
            "continuationToken": request.continuation_token,
            "dryRun": ctx.dry_run,
        },
        "now": ctx.now.to_rfc3339_opts(SecondsFormat::Millis, true),
    })
}

#[async_trait]
impl ResultGate for ProgramGate {
    fn spec(&self) -> &GateSpec {
        &self.spec
    }

    async fn check(&self, request: GateRequest) -> Result<GateAnswer, GateError> {
        let ctx = &request.ctx;
        let stdin = request_json(&self.spec.name, &request)
            .to_string()
            .into_bytes();
        // The session's facts, as a tool of the session gets them.
        let mut command = self.command.clone();
        command.env.extend(context_env(ctx));
        // Held until the process tree is gone, so the token dies with the
        // last process that could use it.
        let grant = match &ctx.services {
            Some(services) => services.endpoint(ctx).await,
            None => None,
        };
        let answer = handler::run(Run {
            command: &command,
            containment: &self.containment,
            lib: self.lib.clone(),
            state_root: &ctx.state_root,
            write: vec![ctx.workspace_dir.clone()],
            call_id: &ctx.call_id,
            stdin,
            grant: grant.as_ref(),
            cancel: &ctx.cancel,
        })
        .await;
        drop(grant);
        match answer {
            Ok(map) => GateAnswer::from_json(&Value::Object(map)),
            Err(e) => Err(gate_error(e)),
        }
    }
}

/// What a handler failure means for a gate.
fn gate_error(e: HandlerError) -> GateError {
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match e {
        HandlerError::Exited { how, stderr, .. } if stderr.is_empty() => GateError::Crashed(how),
        HandlerError::Exited { how, stderr, .. } => GateError::Crashed(format!("{how}: {stderr}")),
        HandlerError::TimedOut { timeout, .. } => GateError::TimedOut(millis(timeout)),
        HandlerError::OutputExceeded { limit, .. } => GateError::OutputExceeded(limit),
        HandlerError::BadAnswer { found, .. } => {
            GateError::BadAnswer(format!("stdout is not one JSON object: {found}"))
        }
        HandlerError::Cancelled { .. } => GateError::Cancelled,
        HandlerError::LimitReached { limit, .. } => {
            GateError::Crashed(format!("reached its {limit} and was stopped"))
        }
        other => GateError::Unavailable(other.to_string()),
    }
}
