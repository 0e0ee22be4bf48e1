//! Hooks: observe-only subscribers to every session's events.
//!
//! A hook sees an event only after it is recorded. Delivery is decoupled from
//! the turn: the host pushes each recorded envelope into an unbounded queue
//! per hook and a task per hook delivers them in order, so a slow or failing
//! hook never blocks or fails a turn, and one slow hook never delays another.
//! Failures are logged with the hook's name and counted; they are never fatal.
//!
//! Every delivery carries the session's context ([`HookSession`]: id, mode,
//! channel, principal, purpose) beside the envelope. The bus reads it from
//! the store once per session and keeps a bounded cache of it.
//!
//! A short-lived process (a CLI command) drains the bus before it exits
//! ([`HookBus::drain`], through `Host::drain_hooks`), so its last events are
//! delivered rather than dropped with the runtime.
//!
//! Channel event delivery ([`ChannelDelivery`], `hooks/channel_events.rs`)
//! is the durable kind: it reads the channel sessions' streams from the
//! store behind a per-session cursor, so it resumes after a restart.
//!
//! Manifest hooks (`hooks/<name>.toml`) deliver to a command (one JSON line on
//! stdin), a URL (POSTed JSON) or a file (appended NDJSON): the envelope with
//! one more key, `session`. Rust embedders implement [`Hook`].

mod channel_events;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::{Envelope, SessionId, SessionMode};
use bdk_store::Store;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use crate::containment::{Containment, Program, ProgramEnd};
use crate::project::{HookEvents, HookManifest, HookTarget};

pub use channel_events::{CURSOR_NAMESPACE, ChannelDelivery, DeliveryStart};

/// How much stdout a command hook may write (it is read and thrown away);
/// more kills the command.
const HOOK_MAX_STDOUT: usize = 1024 * 1024;

/// How long a command or URL hook may take per event.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Sessions whose context the bus keeps; past this the cache starts over.
const SESSION_CACHE: usize = 1024;

/// The session an event belongs to, as a hook sees it. Fields other than
/// `id` are absent when the session's record could not be read (it was
/// deleted before the event reached the hook).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookSession {
    /// The session id.
    pub id: SessionId,
    /// `chat` or `task`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<SessionMode>,
    /// The channel that created it (`http`, `cli`, `eval`, a channel id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The owning principal, when the channel authenticates callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The purpose its creator gave (`eval` for eval sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
}

impl HookSession {
    /// A context that knows only the session id.
    pub fn bare(id: SessionId) -> Self {
        Self {
            id,
            mode: None,
            channel: None,
            principal: None,
            purpose: None,
        }
    }
}

/// An observe-only event subscriber.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// The hook's name, for logs.
    fn name(&self) -> &str;
    /// True when the hook wants events of this type.
    fn wants(&self, kind: &str) -> bool;
    /// Delivers one event. An error is logged, never propagated.
    async fn deliver(&self, event: &Envelope) -> Result<(), String>;
    /// Delivers one event with its session's context; this is what the bus
    /// calls. The default ignores the context and calls [`Hook::deliver`],
    /// so a hook that does not need it implements only that.
    async fn deliver_in(&self, event: &Envelope, session: &HookSession) -> Result<(), String> {
        let _ = session;
        self.deliver(event).await
    }
}

/// One delivery as manifest hooks write it: the envelope's JSON object with
/// a `session` key added after its own keys, on one line.
pub fn delivery_line(event: &Envelope, session: &HookSession) -> Result<String, String> {
    let line = event.to_line().map_err(|e| e.to_string())?;
    let context = serde_json::to_string(session).map_err(|e| e.to_string())?;
    // An envelope always serializes as one JSON object.
    let Some(open) = line.strip_suffix('}') else {
        return Err("an event did not serialize as a JSON object".to_owned());
    };
    Ok(format!("{open},\"session\":{context}}}"))
}

/// A hook from a `hooks/<name>.toml` manifest.
pub struct ManifestHook {
    name: String,
    events: HookEvents,
    target: HookTarget,
    dir: PathBuf,
    state_root: PathBuf,
    file_lock: tokio::sync::Mutex<()>,
    containment: Containment,
    /// The agent's shared code folder, readable by its commands.
    lib: Option<PathBuf>,
}

impl ManifestHook {
    /// Builds a hook; relative file targets resolve against `state_root`,
    /// commands run in the manifest's folder under `containment` (reading
    /// their folder and `lib`, writing a temp dir of their own).
    pub fn new(
        manifest: &HookManifest,
        state_root: &Path,
        containment: Containment,
        lib: Option<&Path>,
    ) -> Self {
        Self {
            name: manifest.name.clone(),
            events: manifest.events.clone(),
            target: manifest.target.clone(),
            dir: manifest
                .path
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            state_root: state_root.to_path_buf(),
            file_lock: tokio::sync::Mutex::new(()),
            containment,
            lib: lib.map(Path::to_path_buf),
        }
    }
}

#[async_trait]
impl Hook for ManifestHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants(&self, kind: &str) -> bool {
        self.events.matches(kind)
    }

    async fn deliver(&self, event: &Envelope) -> Result<(), String> {
        self.deliver_in(event, &HookSession::bare(event.session_id.clone()))
            .await
    }

    async fn deliver_in(&self, event: &Envelope, session: &HookSession) -> Result<(), String> {
        let mut line = delivery_line(event, session)?;
        line.push('\n');
        match &self.target {
            HookTarget::File { path } => {
                let path = if path.is_absolute() {
                    path.clone()
                } else {
                    self.state_root.join(path)
                };
                let _guard = self.file_lock.lock().await;
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|e| format!("failed to create {}: {e}", parent.display()))?;
                }
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .await
                    .map_err(|e| format!("failed to open {}: {e}", path.display()))?;
                file.write_all(line.as_bytes())
                    .await
                    .map_err(|e| format!("failed to write {}: {e}", path.display()))
            }
            HookTarget::Command { argv } => {
                let program = argv.first().cloned().unwrap_or_default();
                let run = Program {
                    argv: argv.clone(),
                    cwd: self.dir.clone(),
                    read: self.lib.iter().cloned().collect(),
                    stdin: line.into_bytes(),
                    env: Vec::new(),
                    max_stdout: HOOK_MAX_STDOUT,
                    timeout: HOOK_TIMEOUT,
                };
                let never = tokio_util::sync::CancellationToken::new();
                match self.containment.run(run, &self.state_root, &never).await {
                    ProgramEnd::Exited { status, .. } if status.success() => Ok(()),
                    ProgramEnd::Exited { status, stderr, .. } => {
                        Err(format!("`{program}` exited with {status}: {stderr}"))
                    }
                    ProgramEnd::OutputExceeded => Err(format!(
                        "`{program}` wrote more than {HOOK_MAX_STDOUT} bytes to stdout (hooks' output is not read) and was stopped"
                    )),
                    ProgramEnd::TimedOut => {
                        Err(format!("timed out after {} s", HOOK_TIMEOUT.as_secs()))
                    }
                    ProgramEnd::Cancelled => Err("cancelled".to_owned()),
                    ProgramEnd::LimitReached(limit) => {
                        Err(format!("`{program}` reached its {limit}"))
                    }
                    ProgramEnd::SpawnFailed(e) => Err(format!("failed to start `{program}`: {e}")),
                    ProgramEnd::Failed(e) => Err(format!("`{program}` failed: {e}")),
                }
            }
            HookTarget::Url { url, headers } => {
                let client = bdk_models::net::http_client().map_err(|e| e.to_string())?;
                let mut req = client
                    .post(url)
                    .timeout(HOOK_TIMEOUT)
                    .header("content-type", "application/json")
                    .body(line.trim_end().to_owned());
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| format!("POST {url} failed: {e}"))?;
                if resp.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("POST {url} answered {}", resp.status()))
                }
            }
        }
    }
}

struct Lane {
    hook: Arc<dyn Hook>,
    tx: mpsc::UnboundedSender<Arc<Envelope>>,
    /// Events queued for this hook and not yet delivered (or failed).
    queued: Arc<AtomicU64>,
}

/// Session contexts by id, read from the store on first use.
struct Sessions {
    store: Option<Arc<dyn Store>>,
    cache: Mutex<HashMap<SessionId, Arc<HookSession>>>,
}

impl Sessions {
    async fn get(&self, id: &SessionId) -> Arc<HookSession> {
        if let Some(found) = self.lock().get(id) {
            return Arc::clone(found);
        }
        let Some(store) = &self.store else {
            return Arc::new(HookSession::bare(id.clone()));
        };
        let session = match store.get_session(id).await {
            Ok(Some(r)) => HookSession {
                id: id.clone(),
                mode: Some(r.mode),
                channel: Some(r.channel),
                principal: r.principal,
                purpose: r.purpose,
            },
            // Deleted already (or unreadable): the hook still gets the
            // event with what is known. Not cached, so a later event of a
            // session read too early is not stuck with the bare form.
            Ok(None) => return Arc::new(HookSession::bare(id.clone())),
            Err(e) => {
                tracing::debug!(session_id = %id, error = %e, "cannot read a session for its hooks");
                return Arc::new(HookSession::bare(id.clone()));
            }
        };
        let session = Arc::new(session);
        let mut cache = self.lock();
        if cache.len() >= SESSION_CACHE {
            cache.clear();
        }
        cache.insert(id.clone(), Arc::clone(&session));
        session
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<HookSession>>> {
        // Plain data: a panic while holding it leaves nothing half-done.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Events still on their way when [`HookBus::drain`] gave up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{events} event(s) not delivered to hook(s) {}", hooks.join(", "))]
pub struct Undelivered {
    /// Events queued or in delivery.
    pub events: u64,
    /// The hooks they were for, by name.
    pub hooks: Vec<String>,
}

/// Fans recorded events out to hooks without ever blocking the caller.
pub struct HookBus {
    lanes: Vec<Lane>,
    failures: Arc<AtomicU64>,
    /// Events queued on every lane and not yet handled.
    pending: Arc<watch::Sender<u64>>,
}

impl HookBus {
    /// Starts one delivery task per hook. Must be called inside a Tokio
    /// runtime; the tasks end when the bus is dropped and their queues drain.
    /// Session contexts are read from `store` (bare ids without one).
    pub fn start(hooks: Vec<Arc<dyn Hook>>, store: Option<Arc<dyn Store>>) -> Self {
        let failures = Arc::new(AtomicU64::new(0));
        let pending = Arc::new(watch::Sender::new(0u64));
        let sessions = Arc::new(Sessions {
            store,
            cache: Mutex::new(HashMap::new()),
        });
        let lanes = hooks
            .into_iter()
            .map(|hook| {
                let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Envelope>>();
                let worker = Arc::clone(&hook);
                let failures = Arc::clone(&failures);
                let queued = Arc::new(AtomicU64::new(0));
                let lane_queued = Arc::clone(&queued);
                let pending = Arc::clone(&pending);
                let sessions = Arc::clone(&sessions);
                tokio::spawn(async move {
                    while let Some(event) = rx.recv().await {
                        let session = sessions.get(&event.session_id).await;
                        if let Err(error) = worker.deliver_in(&event, &session).await {
                            failures.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                hook = worker.name(),
                                event = event.kind(),
                                session_id = %event.session_id,
                                %error,
                                "hook \"{}\" failed for {}", worker.name(), event.kind()
                            );
                        }
                        lane_queued.fetch_sub(1, Ordering::SeqCst);
                        pending.send_modify(|n| *n = n.saturating_sub(1));
                    }
                });
                Lane { hook, tx, queued }
            })
            .collect();
        Self {
            lanes,
            failures,
            pending,
        }
    }

    /// True when no hook is registered.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Queues recorded events for every hook that wants them.
    pub fn publish(&self, events: &[Envelope]) {
        for lane in &self.lanes {
            for e in events {
                if lane.hook.wants(e.kind()) {
                    lane.queued.fetch_add(1, Ordering::SeqCst);
                    self.pending.send_modify(|n| *n += 1);
                    // A closed lane means its task ended with the runtime.
                    if lane.tx.send(Arc::new(e.clone())).is_err() {
                        lane.queued.fetch_sub(1, Ordering::SeqCst);
                        self.pending.send_modify(|n| *n = n.saturating_sub(1));
                    }
                }
            }
        }
    }

    /// Waits until every event published so far (and any published while
    /// waiting) has been handled by its hooks, delivered or failed, at most
    /// `timeout`. On timeout, says what is still on its way.
    pub async fn drain(&self, timeout: Duration) -> Result<(), Undelivered> {
        let mut rx = self.pending.subscribe();
        if tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok()
        {
            return Ok(());
        }
        let mut events = 0;
        let mut hooks = Vec::new();
        for lane in &self.lanes {
            let n = lane.queued.load(Ordering::SeqCst);
            if n > 0 {
                events += n;
                hooks.push(lane.hook.name().to_owned());
            }
        }
        if events == 0 {
            // Handled between the timeout and the count.
            return Ok(());
        }
        Err(Undelivered { events, hooks })
    }

    /// Deliveries that failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::{Event, SessionWaiting};
    use chrono::Utc;

    fn event(n: u64) -> Envelope {
        Envelope {
            index: n,
            session_id: SessionId::from_string("ses_h"),
            turn_id: None,
            at: Utc::now(),
            event: Event::SessionWaiting(SessionWaiting {}),
        }
    }

    struct Stuck;

    #[async_trait]
    impl Hook for Stuck {
        fn name(&self) -> &str {
            "stuck"
        }
        fn wants(&self, _kind: &str) -> bool {
            true
        }
        async fn deliver(&self, _event: &Envelope) -> Result<(), String> {
            std::future::pending().await
        }
    }

    struct Count(Arc<AtomicU64>);

    #[async_trait]
    impl Hook for Count {
        fn name(&self) -> &str {
            "count"
        }
        fn wants(&self, _kind: &str) -> bool {
            true
        }
        async fn deliver(&self, _event: &Envelope) -> Result<(), String> {
            tokio::task::yield_now().await;
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test]
    async fn drain_waits_for_every_queued_event() {
        let seen = Arc::new(AtomicU64::new(0));
        let bus = HookBus::start(vec![Arc::new(Count(Arc::clone(&seen)))], None);
        let events: Vec<Envelope> = (0..50).map(event).collect();
        bus.publish(&events);
        bus.drain(Duration::from_secs(60)).await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 50);
    }

    #[tokio::test]
    async fn drain_gives_up_at_its_bound_and_names_the_hook() {
        let bus = HookBus::start(vec![Arc::new(Stuck)], None);
        bus.publish(&[event(0), event(1)]);
        let late = bus.drain(Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(
            late,
            Undelivered {
                events: 2,
                hooks: vec!["stuck".to_owned()]
            }
        );
    }

    #[test]
    fn a_delivery_is_the_envelope_plus_its_session() {
        let line = delivery_line(
            &event(3),
            &HookSession {
                id: SessionId::from_string("ses_h"),
                mode: Some(SessionMode::Chat),
                channel: Some("cli".into()),
                principal: None,
                purpose: Some("eval".into()),
            },
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "session.waiting");
        assert_eq!(v["index"], 3);
        assert_eq!(
            v["session"],
            serde_json::json!({"id": "ses_h", "mode": "chat", "channel": "cli", "purpose": "eval"})
        );
        // Still a valid envelope for readers that ignore the extra key.
        let back: Envelope = serde_json::from_str(&line).unwrap();
        assert_eq!((back.index, back.kind()), (3, "session.waiting"));
    }
}
