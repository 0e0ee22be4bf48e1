//! Channel event delivery, the durable hook kind: chosen events of the
//! sessions a channel owns (its manifest's events map), delivered to a URL
//! (POSTed JSON) or a command (one JSON line on stdin).
//!
//! Unlike the [`super::HookBus`], which pushes each envelope as it is
//! recorded and keeps nothing, this kind reads the sessions' streams from
//! the store and keeps a cursor per session, so it survives restarts. The
//! channel surface that owns the sessions (`bdk-http`'s channels) says
//! which sessions to follow: a session it creates or continues, and at
//! startup the channel sessions that already exist ([`ChannelDelivery::resume`]).
//!
//! One task per followed session reads the session's stream (replay, then
//! live) and delivers matching events in order, each with bounded retries
//! and exponential backoff. Delivery happens after the event is recorded
//! and never feeds back into the session: a failing receiver costs a log
//! line, never a turn.
//!
//! A durable cursor per session (the store's key-value area, namespace
//! [`CURSOR_NAMESPACE`], key `<channel>/<sessionId>`) records the next
//! index to look at, so after a restart delivery resumes where it stopped
//! rather than replaying the whole history or skipping what happened while
//! the server was down (the cursor and the reading loop are
//! [`crate::follow`]'s, shared with the channel packs). Delivery is at least once: an event whose delivery
//! was interrupted by shutdown is delivered again after the restart.
//!
//! A task ends on shutdown, when the session is deleted (its stream ends),
//! or when a task session has ended (`session.completed` or
//! `session.failed`: nothing follows those).

use std::sync::Arc;
use std::time::Duration;

use std::path::PathBuf;

use bdk_events::{Envelope, SessionId};
use bdk_store::Store;
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::containment::{Containment, Program, ProgramEnd};
use crate::follow::{Cursor, Following, Handled, SessionFollower};
use crate::project::{ChannelEventTarget as Target, ChannelEvents as EventRule, ChannelManifest};

/// The key-value namespace of delivery cursors.
pub const CURSOR_NAMESPACE: &str = "channel-events";

/// How long one delivery attempt (a POST or a command) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a failing command's stderr a log line quotes.
const STDERR_QUOTE: usize = 500;

/// How much a command may write to stdout (it is read and thrown away).
const MAX_COMMAND_STDOUT: usize = 1024 * 1024;

/// Starts and tracks the per-session delivery tasks of an agent's
/// channels. Cheap to clone; clones share the set of followed sessions, so
/// a session is followed once however often it is named.
#[derive(Clone)]
pub struct ChannelDelivery {
    runs: Runs,
    shutdown: CancellationToken,
    following: Following,
}

/// What a delivery reads and runs with: the agent's store, how the host
/// runs programs, and the agent's `lib/` (commands may read it).
#[derive(Clone)]
struct Runs {
    store: Arc<dyn Store>,
    containment: Containment,
    lib_dir: Option<PathBuf>,
}

/// Where a session's delivery task starts reading: from its cursor, else
/// from the session's first event (a session this process just created)
/// or from the end of its stream (one found at startup: events recorded
/// before the channel had an events map are not delivered after the fact).
pub use crate::follow::FollowStart as DeliveryStart;

impl ChannelDelivery {
    /// Delivery over `store`, running commands through `containment` (with
    /// read access to `lib_dir`), until `shutdown`.
    pub fn new(
        store: Arc<dyn Store>,
        containment: Containment,
        lib_dir: Option<PathBuf>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            runs: Runs {
                store,
                containment,
                lib_dir,
            },
            shutdown,
            following: Following::default(),
        }
    }

    /// Follows a session of `channel` unless it is already followed or the
    /// channel delivers nothing. The start index is settled before this
    /// returns, so events recorded after it are never missed. Must be called
    /// inside a Tokio runtime.
    pub async fn follow(
        &self,
        channel: &Arc<ChannelManifest>,
        id: &SessionId,
        continuation_token: &str,
        start: DeliveryStart,
    ) {
        if channel.events.is_empty() || self.shutdown.is_cancelled() {
            return;
        }
        let task = Follower {
            runs: self.runs.clone(),
            shutdown: self.shutdown.clone(),
            channel: Arc::clone(channel),
            id: id.clone(),
            token: continuation_token.to_owned(),
        };
        let cursor = Cursor::new(
            Arc::clone(&self.runs.store),
            CURSOR_NAMESPACE,
            "channel delivery",
            &channel.name,
            id,
        );
        self.following
            .spawn(cursor, start, self.shutdown.clone(), task)
            .await;
    }

    /// Follows the existing sessions of `channels` created before `before`
    /// (later ones are followed by whoever creates them).
    pub async fn resume(&self, channels: &[Arc<ChannelManifest>], before: DateTime<Utc>) {
        let delivering: Vec<&Arc<ChannelManifest>> =
            channels.iter().filter(|c| !c.events.is_empty()).collect();
        if delivering.is_empty() {
            return;
        }
        let sessions = match self.runs.store.list_sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot list sessions; channel event delivery does not resume for existing sessions");
                return;
            }
        };
        for record in sessions {
            if record.created_at > before {
                continue;
            }
            if let Some(channel) = delivering.iter().find(|c| c.name == record.channel) {
                self.follow(
                    channel,
                    &record.id,
                    &record.continuation_token,
                    DeliveryStart::Resume,
                )
                .await;
            }
        }
    }
}

/// The delivery task of one session.
struct Follower {
    runs: Runs,
    shutdown: CancellationToken,
    channel: Arc<ChannelManifest>,
    id: SessionId,
    token: String,
}

#[async_trait::async_trait]
impl SessionFollower for Follower {
    async fn on_event(&mut self, env: &Envelope, _cursor: &Cursor) -> Handled {
        let rules: Vec<&EventRule> = self
            .channel
            .events
            .iter()
            .filter(|r| r.wants(env.kind()))
            .collect();
        if rules.is_empty() {
            return Handled::Passed;
        }
        let payload = self.payload(env);
        for rule in rules {
            if !self.deliver(rule, env, &payload).await {
                // Shutdown: the cursor stays before this event, so it is
                // delivered again after a restart.
                return Handled::Interrupted;
            }
        }
        Handled::Acted
    }
}

impl Follower {
    /// What a receiver gets: the channel's routing data and the event
    /// envelope exactly as the NDJSON stream carries it.
    fn payload(&self, env: &Envelope) -> Vec<u8> {
        let body = json!({
            "channel": self.channel.name,
            "sessionId": self.id,
            "continuationToken": self.token,
            "event": env,
        });
        let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Delivers with retries. Returns false only when shutdown interrupted
    /// it; a delivery that failed every attempt is logged and counts as done.
    async fn deliver(&self, rule: &EventRule, env: &Envelope, payload: &[u8]) -> bool {
        let mut wait = rule.backoff;
        for attempt in 1..=rule.attempts {
            let result = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return false,
                r = attempt_once(&self.runs, rule, &self.channel, payload) => r,
            };
            let error = match result {
                Ok(()) => return true,
                Err(e) => e,
            };
            if attempt == rule.attempts {
                tracing::warn!(
                    channel = %self.channel.name,
                    session_id = %self.id,
                    event = env.kind(),
                    index = env.index,
                    target = %rule.describe(),
                    attempts = rule.attempts,
                    %error,
                    "channel event delivery failed; giving up on this event"
                );
                return true;
            }
            tracing::debug!(
                channel = %self.channel.name,
                session_id = %self.id,
                event = env.kind(),
                target = %rule.describe(),
                attempt,
                %error,
                "channel event delivery failed; retrying"
            );
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return false,
                () = tokio::time::sleep(wait) => {}
            }
            wait = wait.saturating_mul(2);
        }
        true
    }
}

/// One attempt at one target.
async fn attempt_once(
    runs: &Runs,
    rule: &EventRule,
    channel: &ChannelManifest,
    payload: &[u8],
) -> Result<(), String> {
    match &rule.target {
        Target::Url { url, headers } => {
            let client = bdk_models::net::http_client().map_err(|e| e.to_string())?;
            let mut request = client
                .post(url)
                .timeout(ATTEMPT_TIMEOUT)
                .header("content-type", "application/json")
                .body(payload.to_vec());
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("the receiver answered {status}"))
            }
        }
        Target::Command { argv } => {
            let program = argv.first().cloned().unwrap_or_default();
            // The command runs like the agent's tools: a clean environment
            // and, when the host has one, the sandbox (it reads its folder
            // and the agent's lib/, writes only a temp dir of its own).
            let run = Program {
                argv: argv.clone(),
                cwd: channel.dir(),
                read: runs.lib_dir.iter().cloned().collect(),
                stdin: payload.to_vec(),
                env: Vec::new(),
                max_stdout: MAX_COMMAND_STDOUT,
                timeout: ATTEMPT_TIMEOUT,
            };
            let state_root = runs.store.state_root();
            let never = CancellationToken::new();
            match runs.containment.run(run, &state_root, &never).await {
                ProgramEnd::Exited { status, .. } if status.success() => Ok(()),
                ProgramEnd::Exited { status, stderr, .. } => {
                    let quoted: String = stderr.chars().take(STDERR_QUOTE).collect();
                    Err(format!("`{program}` exited with {status}: {quoted}"))
                }
                ProgramEnd::TimedOut => Err(format!(
                    "`{program}` timed out after {} s",
                    ATTEMPT_TIMEOUT.as_secs()
                )),
                ProgramEnd::OutputExceeded => Err(format!(
                    "`{program}` wrote more than {MAX_COMMAND_STDOUT} bytes to stdout (it is not read) and was stopped"
                )),
                ProgramEnd::SpawnFailed(e) => Err(format!("cannot start `{program}`: {e}")),
                ProgramEnd::Failed(e) => Err(format!("`{program}` failed: {e}")),
                ProgramEnd::Cancelled => Err(format!("`{program}` was cancelled")),
                ProgramEnd::LimitReached(limit) => Err(format!("`{program}` reached its {limit}")),
            }
        }
    }
}
