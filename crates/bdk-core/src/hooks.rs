//! Hooks: observe-only subscribers to every session's events.
//!
//! A hook sees an event only after it is recorded. Delivery is decoupled from
//! the turn: the host pushes each recorded envelope into an unbounded queue
//! per hook and a task per hook delivers them in order, so a slow or failing
//! hook never blocks or fails a turn, and one slow hook never delays another.
//! Failures are logged with the hook's name and counted; they are never fatal.
//!
//! Manifest hooks (`hooks/<name>.toml`) deliver to a command (one JSON line on
//! stdin), a URL (POSTed JSON) or a file (appended NDJSON). Rust embedders
//! implement [`Hook`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::Envelope;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::containment::{Containment, Program, ProgramEnd};
use crate::project::{HookEvents, HookManifest, HookTarget};

/// How much stdout a command hook may write (it is read and thrown away);
/// more kills the command.
const HOOK_MAX_STDOUT: usize = 1024 * 1024;

/// How long a command or URL hook may take per event.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// An observe-only event subscriber.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// The hook's name, for logs.
    fn name(&self) -> &str;
    /// True when the hook wants events of this type.
    fn wants(&self, kind: &str) -> bool;
    /// Delivers one event. An error is logged, never propagated.
    async fn deliver(&self, event: &Envelope) -> Result<(), String>;
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
        let mut line = event.to_line().map_err(|e| e.to_string())?;
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
                    ProgramEnd::SpawnFailed(e) => Err(format!("failed to start `{program}`: {e}")),
                    ProgramEnd::Failed(e) => Err(format!("`{program}` failed: {e}")),
                }
            }
            HookTarget::Url { url, headers } => {
                let client = crate::net::http_client().map_err(|e| e.to_string())?;
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
}

/// Fans recorded events out to hooks without ever blocking the caller.
pub struct HookBus {
    lanes: Vec<Lane>,
    failures: Arc<AtomicU64>,
}

impl HookBus {
    /// Starts one delivery task per hook. Must be called inside a Tokio
    /// runtime; the tasks end when the bus is dropped and their queues drain.
    pub fn start(hooks: Vec<Arc<dyn Hook>>) -> Self {
        let failures = Arc::new(AtomicU64::new(0));
        let lanes = hooks
            .into_iter()
            .map(|hook| {
                let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Envelope>>();
                let worker = Arc::clone(&hook);
                let failures = Arc::clone(&failures);
                tokio::spawn(async move {
                    while let Some(event) = rx.recv().await {
                        if let Err(error) = worker.deliver(&event).await {
                            failures.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                hook = worker.name(),
                                event = event.kind(),
                                session_id = %event.session_id,
                                %error,
                                "hook \"{}\" failed for {}", worker.name(), event.kind()
                            );
                        }
                    }
                });
                Lane { hook, tx }
            })
            .collect();
        Self { lanes, failures }
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
                    // A closed lane means its task ended with the runtime.
                    let _ = lane.tx.send(Arc::new(e.clone()));
                }
            }
        }
    }

    /// Deliveries that failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}
