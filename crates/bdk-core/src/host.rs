//! The session runtime ("host"): sessions, turns, admission, direct tool
//! calls, approvals, recovery.
//!
//! A [`Host`] serves one agent project over one [`Store`]. Callers (the CLI,
//! the HTTP layer, channels, the scheduler) go through it; none of them
//! touches the store's event streams directly except to read.
//!
//! Per session in use the host keeps a slot with the running turn (if any),
//! the follow-ups waiting to be coalesced, and the conversation so far; a
//! resting session's slot goes away and its conversation moves to a cache
//! bounded in bytes (`host/slots.rs`), so memory follows the running work, not
//! the history. Admission
//! (`send`, `stop`, session-bound write calls) is serialized per session by
//! an async lock, so two follow-ups never race into the same turn boundary.
//! Each turn runs in its own task, owned by the slot through its cancel
//! token; the host's shutdown token is the parent of every turn's token.
//!
//! Recovery: when a host is built over a store that holds a turn which never
//! ended (the process died), that turn is recorded `turn.failed` with status
//! `interrupted` and the session rests again, so it can continue.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_events::ids::{new_call_id, new_direct_call_id, new_http_token, new_id};
use bdk_events::{
    ActionApprovalRequested, ActionApprovalResolved, ActionRequest, ActionResult, ActionsCompleted,
    ActionsRequested, ArtifactTagged, DeliveryId, Envelope, Event, FailStatus, MessageReceived,
    SessionCompleted, SessionFailed, SessionId, SessionMode, SessionStarted, SessionWaiting,
    StepCompleted, TurnCompleted, TurnFailed, TurnId, TurnQueued, TurnStarted, Usage,
};
use bdk_store::coord::{Control, ControlKind, Coordination};
use bdk_store::{
    ArtifactRecord, EventStream, NewEvent, SessionRecord, Store, StoreError, TokenSwap,
};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::agent::{
    self, AgentSpec, ApprovalGate, DEFAULT_MAX_STEPS, DEFAULT_TOOL_TIMEOUT, Decision, Nudge,
    RecordError, Recorder, Steering, TASK_TOOL, ToolEntry, TurnEnd, TurnEnv, TurnInput,
};
use crate::clock::{Clock, SystemClock};
use crate::containment::{Containment, Sandbox};
use crate::endpoint::{Endpoint, EndpointGrant};
use crate::hooks::{Hook, HookBus, ManifestHook, Undelivered};
use crate::mcp::{ConnectionError, McpHub};
use crate::models::{BuiltinModels, ModelResolver, Unavailable};
use crate::project::Project;
use crate::reminders::{self, SessionReminders};
use crate::tool::{
    Effect, Execution, NewArtifact, SessionInfo, Tool, ToolContext, ToolOutput, ToolServices,
    ToolSource, ToolSpec,
};
use crate::tool::{builtin, subprocess};
use crate::workspace;
use bdk_models::context::{BudgetedModel, context_window};
use bdk_models::prices::PriceTable;
use bdk_models::replay::{Recording, RecordingModel, ReplayModel};
use bdk_models::{Message, Model, ModelError};

mod queued;
mod reminder;
mod slots;
pub use queued::QUEUE_NAMESPACE;
use queued::Queued;
pub use slots::{DEFAULT_SESSION_CACHE_BYTES, MemoryStats};
use slots::{SlotRef, SlotTable};

use bdk_models::{DEFAULT_MODEL, split_model};

/// Errors of the host API. The HTTP layer maps each kind to one status code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No such session.
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// The caller does not own the session.
    #[error("session {0} belongs to another principal")]
    Forbidden(String),
    /// The continuation token is not the session's current one.
    #[error("continuation token is stale; use the token returned by the last accepted send")]
    StaleToken,
    /// Task sessions take no follow-ups.
    #[error("session {0} is a task session and takes no follow-ups")]
    TaskSession(String),
    /// A write-effect direct call while a turn runs.
    #[error("session {0} is running a turn; write calls wait until it finishes")]
    SessionBusy(String),
    /// A turn of the session runs on another replica and did not end within
    /// the bounded wait of a follow-up or a stop.
    #[error(
        "session {session} is running a turn on replica {replica} that did not end within {waited_ms} ms; retry later"
    )]
    ReplicaBusy {
        /// The session.
        session: String,
        /// The replica that owns the turn.
        replica: String,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// No callable server tool by that name.
    #[error("unknown tool `{name}`; available tools: {}", available.join(", "))]
    UnknownTool {
        /// The requested name.
        name: String,
        /// The callable names.
        available: Vec<String>,
    },
    /// Agent-execution tools run in the workspace, not on the host.
    #[error(
        "tool `{0}` runs in the agent's workspace (execution = \"agent\") and cannot be called on the host"
    )]
    ToolNotCallable(String),
    /// The input failed the tool's schema.
    #[error("invalid input for `{name}`: {}", errors.join("; "))]
    InvalidToolInput {
        /// The tool.
        name: String,
        /// What is wrong.
        errors: Vec<String>,
    },
    /// The session workspace cannot be created for a write call.
    #[error("session workspace is unavailable: {0}")]
    WorkspaceUnavailable(String),
    /// A request value was refused (workspace path, empty message, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No pending approval with that call id.
    #[error("no pending approval for call {0}")]
    ApprovalNotFound(String),
    /// A built-in tool the agent does not expose to direct callers.
    #[error(
        "built-in tool `{0}` is not exposed for direct calls; list it in `[builtin_tools] direct` in agent.toml to expose it"
    )]
    ToolNotExposed(String),
    /// A `needs_approval` tool called directly without an approval.
    #[error("tool `{name}` needs approval: {how}")]
    ApprovalRequired {
        /// The tool.
        name: String,
        /// How to get it run.
        how: &'static str,
    },
    /// The session's stored data (its record or its event log) is damaged:
    /// a line of the log does not parse, indices do not follow each other,
    /// or the file changed under the store. Only that session is affected;
    /// an operator repairs or deletes it. The detail (file, line) is logged,
    /// not returned.
    #[error(
        "session {0} has damaged stored data and cannot be used until it is repaired or deleted; the server log names the file"
    )]
    SessionCorrupt(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl HostError {
    /// The stable error code (`{ok:false, error:"<code>"}` on the HTTP API,
    /// `error` in the CLI's JSON).
    pub fn code(&self) -> &'static str {
        match self {
            HostError::SessionNotFound(_) => "session_not_found",
            HostError::Forbidden(_) => "forbidden",
            HostError::StaleToken => "stale_continuation_token",
            HostError::TaskSession(_) => "task_session",
            HostError::SessionBusy(_) => "session_busy",
            HostError::ReplicaBusy { .. } => "session_busy",
            HostError::UnknownTool { .. } => "unknown_tool",
            HostError::ToolNotCallable(_) => "tool_not_callable",
            HostError::InvalidToolInput { .. } => "invalid_tool_input",
            HostError::WorkspaceUnavailable(_) => "workspace_unavailable",
            HostError::InvalidRequest(_) => "invalid_request",
            HostError::ApprovalNotFound(_) => "approval_not_found",
            HostError::ToolNotExposed(_) => "tool_not_exposed",
            HostError::ApprovalRequired { .. } => "approval_required",
            HostError::SessionCorrupt(_) => "session_corrupt",
            HostError::Store(StoreError::SessionNotFound(_)) => "session_not_found",
            HostError::Store(StoreError::Invalid { .. }) => "invalid_request",
            HostError::Store(_) => "internal",
        }
    }
}

/// Result alias of the host API.
pub type HostResult<T> = Result<T, HostError>;

/// Maps a store failure on one session's data: damage becomes
/// [`HostError::SessionCorrupt`] (its detail logged here, since it names
/// server paths), everything else passes through.
pub(crate) fn session_error(id: &SessionId) -> impl FnOnce(StoreError) -> HostError + '_ {
    move |e| match e {
        StoreError::Corrupt { path, message } => {
            tracing::warn!(session_id = %id, path = %path, error = %message, "a session's stored data is damaged");
            HostError::SessionCorrupt(id.to_string())
        }
        other => HostError::Store(other),
    }
}

/// Builds a [`Host`].
pub struct HostBuilder {
    project: Project,
    store: Arc<dyn Store>,
    tools: Vec<Arc<dyn Tool>>,
    hooks: Vec<Arc<dyn Hook>>,
    models: Arc<dyn ModelResolver>,
    recover: bool,
    record_to: Option<PathBuf>,
    mcp: Option<Arc<dyn McpHub>>,
    clock: Arc<dyn Clock>,
    reminder_timers: bool,
    coordination: Option<Arc<dyn Coordination>>,
    coordination_wait: Duration,
    sandbox: Option<Sandbox>,
    session_cache: u64,
}

impl HostBuilder {
    /// A builder for `project` over `store`.
    pub fn new(project: Project, store: Arc<dyn Store>) -> Self {
        Self {
            project,
            store,
            tools: Vec::new(),
            hooks: Vec::new(),
            models: Arc::new(BuiltinModels),
            recover: true,
            record_to: None,
            mcp: None,
            clock: Arc::new(SystemClock),
            reminder_timers: true,
            coordination: None,
            coordination_wait: crate::replica::DEFAULT_REMOTE_WAIT,
            sandbox: None,
            session_cache: DEFAULT_SESSION_CACHE_BYTES,
        }
    }

    /// Runs the agent's programs (command tools, `shell`, command hooks)
    /// contained by `sandbox` (see [`crate::containment`]), unless the
    /// agent turns it off. Without one they run uncontained, with the
    /// environment allowlist only, and the build logs a warning.
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// How many bytes of resting sessions' conversations the host keeps in
    /// memory (default [`DEFAULT_SESSION_CACHE_BYTES`]); least recently
    /// rested first out, rebuilt from the events on their next turn. `0`
    /// keeps none. Running turns hold their own conversation regardless.
    pub fn session_cache_bytes(mut self, bytes: u64) -> Self {
        self.session_cache = bytes;
        self
    }

    /// Replaces the clock (a [`crate::clock::ManualClock`] in tests): it is
    /// "now" for tools (unless a session pins `asOf`) and drives reminders;
    /// give the schedule cadence the same one to share it.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Turns automatic reminder firing on (default) or off; when off,
    /// reminders stay armed and fire only through [`Host::dispatch_reminder`].
    pub fn reminder_timers(mut self, on: bool) -> Self {
        self.reminder_timers = on;
        self
    }

    /// Runs this host as one replica of several sharing the store: turns take
    /// the session's lease in `coordination`, follow-ups and stops reach
    /// turns running on other replicas, and dead replicas' turns are
    /// recorded interrupted (see [`crate::replica`]). Without it the host
    /// assumes it is the store's only user.
    pub fn coordination(mut self, coordination: Arc<dyn Coordination>) -> Self {
        self.coordination = Some(coordination);
        self
    }

    /// How long a follow-up, stop or write call waits for a turn running on
    /// another replica to end before answering `session_busy` (default 30 s).
    pub fn coordination_wait(mut self, wait: Duration) -> Self {
        self.coordination_wait = wait;
        self
    }

    /// Attaches the agent's MCP connections: host code reaches them through
    /// [`ToolServices::mcp`] and the host endpoint, and the tools of
    /// advertising connections join the tool map as they are listed.
    pub fn mcp(mut self, hub: Arc<dyn McpHub>) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// Registers a Rust-native tool (it replaces a manifest or built-in tool of the same name).
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Registers a Rust hook.
    pub fn hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Replaces the model resolver.
    pub fn models(mut self, models: Arc<dyn ModelResolver>) -> Self {
        self.models = models;
        self
    }

    /// Records every model step of every session to `path` (JSON lines, see
    /// [`bdk_models::replay`]), appending to an existing recording.
    pub fn record_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.record_to = Some(path.into());
        self
    }

    /// Skips the recovery pass (for read-only inspection of a state root).
    pub fn without_recovery(mut self) -> Self {
        self.recover = false;
        self
    }

    /// Builds the host and recovers interrupted turns. Must run inside a Tokio runtime.
    pub async fn build(self) -> HostResult<Host> {
        let project = Arc::new(self.project);
        let config = &project.config;
        let tool_timeout = config
            .tool_timeout_ms
            .map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_millis);

        let containment = Containment::new(self.sandbox, config.sandbox.clone());
        if containment.sandbox().is_none() && project.has_programs() {
            tracing::warn!(
                agent = %project.name,
                "the agent's programs run without a sandbox: no launcher was given to the host (HostBuilder::sandbox)"
            );
        }
        let lib = project.lib_dir();
        let mut tools: BTreeMap<String, ToolEntry> = BTreeMap::new();
        let mut agent_tools = BTreeMap::new();
        let add = |tool: Arc<dyn Tool>, tools: &mut BTreeMap<String, ToolEntry>| {
            let name = tool.spec().name.clone();
            if tools.insert(name.clone(), ToolEntry::new(tool)).is_some() {
                tracing::debug!(tool = %name, "tool replaces an earlier one of the same name");
            }
        };
        let mut builtin_names: HashSet<String> = HashSet::new();
        let builtins = &config.builtin_tools;
        if builtins.workspace {
            for t in builtin::workspace_tools() {
                add(t, &mut tools);
            }
        }
        if builtins.shell {
            add(builtin::shell_tool(containment.clone()), &mut tools);
        }
        if builtins.artifacts {
            add(builtin::tag_artifact_tool(), &mut tools);
        }
        if builtins.reminders {
            for t in builtin::reminder_tools() {
                add(t, &mut tools);
            }
        }
        if !project.skills.is_empty() {
            add(builtin::load_skill_tool(), &mut tools);
        }
        builtin_names.extend(tools.keys().cloned());
        for manifest in &project.tools {
            match subprocess::from_manifest(manifest, tool_timeout, &containment, lib.as_deref()) {
                Some(tool) => {
                    builtin_names.remove(&manifest.spec.name);
                    add(tool, &mut tools);
                }
                None => {
                    agent_tools.insert(manifest.spec.name.clone(), manifest.spec.clone());
                }
            }
        }
        for tool in self.tools {
            builtin_names.remove(&tool.spec().name);
            add(tool, &mut tools);
        }
        let exposed: HashSet<String> = config.builtin_tools.direct.iter().cloned().collect();
        tools.remove(TASK_TOOL);
        let base_tools = tools;
        let (generation, tools) = merged_tools(&base_tools, self.mcp.as_deref());
        let tools = Arc::new(tools);

        let root_model = config
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        // `replay/<file>` models are loaded here, before the synchronous
        // resolver runs, so reading a recording never blocks the runtime.
        let mut replays: HashMap<String, Result<Arc<dyn Model>, String>> = HashMap::new();
        let named = project
            .subagents
            .iter()
            .filter_map(|s| s.config.model.as_ref());
        for m in std::iter::once(&root_model).chain(named) {
            let (provider, file) = split_model(m);
            if provider == "replay" && !replays.contains_key(m) {
                let replay = load_replay(&project, m, file).await;
                replays.insert(m.clone(), replay);
            }
        }
        let recording = match &self.record_to {
            Some(path) => Some(Recording::open(path).await.map_err(|e| {
                HostError::InvalidRequest(format!("cannot record model steps: {e}"))
            })?),
            None => None,
        };
        let mut model_cache: HashMap<String, Arc<dyn Model>> = HashMap::new();
        let mut model_for = |m: &str| -> Arc<dyn Model> {
            model_cache
                .entry(m.to_owned())
                .or_insert_with(|| {
                    let resolved = match replays.get(m) {
                        Some(replay) => replay.clone(),
                        None => self.models.resolve(m, &project).map_err(|e| match e {
                            // `Unavailable` answers with `ModelError::Config`
                            // again: keep only the inner text, so the turn
                            // failure does not repeat the prefix.
                            ModelError::Config(message) => message,
                            other => other.to_string(),
                        }),
                    };
                    let model: Arc<dyn Model> = match resolved {
                        Ok(model) => model,
                        Err(message) => Arc::new(Unavailable {
                            id: m.to_owned(),
                            message,
                        }),
                    };
                    match &recording {
                        Some(r) => Arc::new(RecordingModel::new(model, Arc::clone(r))),
                        None => model,
                    }
                })
                .clone()
        };
        // Every step's request is fitted to the model's context window (see
        // `bdk_models::context`); the window follows the id the model reports, so
        // a replay is budgeted like the model it recorded.
        let budgeted = |model: Arc<dyn Model>, configured: Option<u64>| -> Arc<dyn Model> {
            let window = context_window(model.id(), configured);
            Arc::new(BudgetedModel::new(model, window))
        };

        let catalog = skill_catalog(&project);
        let mut subagents = BTreeMap::new();
        for sub in &project.subagents {
            let model = sub
                .config
                .model
                .clone()
                .unwrap_or_else(|| root_model.clone());
            subagents.insert(
                sub.name.clone(),
                AgentSpec {
                    name: sub.name.clone(),
                    system: format!("{}{catalog}", sub.instructions.trim_end()),
                    // A subagent on the root's model also takes the root's
                    // `context_window`; one on its own model only its own.
                    model: budgeted(
                        model_for(&model),
                        sub.config.context_window.or(if sub.config.model.is_none() {
                            config.context_window
                        } else {
                            None
                        }),
                    ),
                    model_name: split_model(&model).1.to_owned(),
                    effort: sub.config.effort.clone().or_else(|| config.effort.clone()),
                    // A tool choice names the subagent's own tools, so it is
                    // never inherited; an output cap is.
                    tool_choice: sub.config.tool_choice.clone(),
                    max_output_tokens: sub.config.max_output_tokens.or(config.max_output_tokens),
                    max_steps: sub.config.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
                    tool_timeout,
                    tools: Arc::clone(&tools),
                    task: None,
                },
            );
        }
        let task = (!subagents.is_empty()).then(|| {
            let list: Vec<(String, String)> = project
                .subagents
                .iter()
                .map(|s| (s.name.clone(), s.description.clone()))
                .collect();
            (builtin::task_spec(&list), Arc::new(subagents))
        });
        let mut system = project.instructions.trim_end().to_owned();
        system.push_str(&catalog);
        if !agent_tools.is_empty() {
            system.push_str(
                "\n\n## Workspace scripts\n\nSome tools are scripts in your workspace; `AGENTS.md` there lists them and how to run them.",
            );
        }
        let root = AgentSpec {
            name: project.name.clone(),
            system,
            model: budgeted(model_for(&root_model), config.context_window),
            model_name: split_model(&root_model).1.to_owned(),
            effort: config.effort.clone(),
            tool_choice: config.tool_choice.clone(),
            max_output_tokens: config.max_output_tokens,
            max_steps: config.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
            tool_timeout,
            tools: Arc::clone(&tools),
            task,
        };

        let mut hooks = self.hooks;
        let state_root = self.store.state_root();
        for manifest in &project.hooks {
            hooks.push(Arc::new(ManifestHook::new(
                manifest,
                &state_root,
                containment.clone(),
                lib.as_deref(),
            )));
        }
        let turn_slots = config
            .max_running_turns
            .map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        let skills = project
            .skills
            .iter()
            .map(|s| (s.name.clone(), s.body.clone()))
            .collect();
        let endpoint = Endpoint::new(Arc::clone(&self.store));
        let reminders = Arc::new(reminders::Engine::new(Arc::clone(&self.store), self.clock));
        let prices = PriceTable::with_overrides(&config.prices);
        let hooks = HookBus::start(hooks, Some(Arc::clone(&self.store)));
        let inner = Arc::new(Inner {
            project,
            store: self.store,
            root,
            base_tools,
            tools: RwLock::new((generation, tools)),
            mcp: self.mcp,
            agent_tools,
            hooks,
            slots: SlotTable::new(self.session_cache),
            turn_slots,
            queued: AtomicU64::new(0),
            approvals: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            skills,
            endpoint,
            prices,
            recording,
            reminders,
            coordination: self.coordination,
            coordination_wait: self.coordination_wait,
            containment,
            builtins: builtin_names,
            exposed,
        });
        let host = Host { inner };
        let controls = host.join_cluster().await?;
        if self.recover {
            host.recover().await?;
        }
        if let (Some(coord), Some(controls)) = (host.coordination(), controls) {
            tokio::spawn(crate::replica::run(
                host.downgrade(),
                Arc::clone(coord),
                controls,
                host.inner.shutdown.child_token(),
            ));
        }
        host.rearm_reminders()
            .await
            .map_err(|e| HostError::InvalidRequest(format!("cannot load reminders: {e}")))?;
        if self.reminder_timers {
            let weak = host.downgrade();
            tokio::spawn(reminders::run_timer(
                move || weak.upgrade(),
                host.inner.shutdown.child_token(),
            ));
        }
        Ok(host)
    }
}

/// The base tools plus the advertised tools of `mcp`, with the MCP
/// generation they reflect. An MCP tool never replaces a tool the agent
/// defines itself: a collision is skipped with a warning naming both.
fn merged_tools(
    base: &BTreeMap<String, ToolEntry>,
    mcp: Option<&dyn McpHub>,
) -> (u64, BTreeMap<String, ToolEntry>) {
    let mut tools = base.clone();
    let Some(mcp) = mcp else {
        return (0, tools);
    };
    // Read the generation first: a change racing with the listing then
    // leaves a newer generation behind, and the next look rebuilds again.
    let generation = mcp.generation();
    for tool in mcp.advertised_tools() {
        let name = tool.spec().name.clone();
        if name == TASK_TOOL || tools.contains_key(&name) {
            tracing::warn!(
                tool = %name,
                "an advertised MCP tool collides with the agent's tool `{name}`; the MCP tool is skipped"
            );
            continue;
        }
        tools.insert(name, ToolEntry::new(tool));
    }
    (generation, tools)
}

/// Loads the recording of a `replay/<file>` model (`file` relative to the
/// agent folder). A failure becomes the model's turn failure, like any
/// other model that cannot be resolved.
async fn load_replay(project: &Project, model: &str, file: &str) -> Result<Arc<dyn Model>, String> {
    if file.is_empty() {
        return Err(format!(
            "model `{model}` names no recording; write it as `replay/<file>` with a path relative to {}",
            project.agent_dir.display()
        ));
    }
    let path = project.agent_dir.join(file);
    match ReplayModel::load(&path).await {
        Ok(replay) => Ok(Arc::new(replay)),
        Err(e) => {
            tracing::warn!(model, error = %e, "failed to load a replay recording");
            Err(format!("model `{model}` cannot load its recording: {e}"))
        }
    }
}

fn skill_catalog(project: &Project) -> String {
    if project.skills.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n\n## Skills\n\nLoad a skill with the `load_skill` tool when the task matches its description:\n",
    );
    for skill in &project.skills {
        s.push_str(&format!("- `{}`: {}\n", skill.name, skill.description));
    }
    s
}

const REASON_NONE: u8 = 0;
const REASON_STOP: u8 = 1;
const REASON_PREEMPT: u8 = 2;
const REASON_SHUTDOWN: u8 = 3;

struct Running {
    turn_id: TurnId,
    cancel: CancellationToken,
    reason: Arc<AtomicU8>,
    done: watch::Receiver<bool>,
}

#[derive(Default)]
struct SlotState {
    running: Option<Running>,
    /// Coalesced follow-ups waiting for the running turn (see [`queued`]).
    pending: Vec<Queued>,
    /// Records of follow-ups steered into the running turn, removed once
    /// its end is durable.
    delivered: Vec<String>,
    transcript: Option<Vec<Message>>,
    /// The running turn has ended and its end is being recorded: the turn is
    /// no longer "running" for direct calls, which wait for it to settle
    /// instead of answering `session_busy`.
    ending: bool,
}

struct Slot {
    admission: tokio::sync::Mutex<()>,
    state: Mutex<SlotState>,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock means a panic while holding it; the state is plain
        // data that stays consistent, so keep going rather than cascade.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct PendingApproval {
    session_id: SessionId,
    name: String,
    input: Value,
    requested_at: DateTime<Utc>,
    tx: oneshot::Sender<Decision>,
}

struct Inner {
    project: Arc<Project>,
    store: Arc<dyn Store>,
    root: AgentSpec,
    /// The tools known at build time (built-ins, manifests, native tools).
    base_tools: BTreeMap<String, ToolEntry>,
    /// The current tool map (base tools plus advertised MCP tools) and the
    /// MCP generation it was built for; rebuilt when the generation moves.
    tools: RwLock<(u64, Arc<BTreeMap<String, ToolEntry>>)>,
    /// The agent's MCP connections, when it has any.
    mcp: Option<Arc<dyn McpHub>>,
    agent_tools: BTreeMap<String, ToolSpec>,
    hooks: HookBus,
    /// The slots of sessions in use and the transcripts of resting ones.
    slots: Arc<SlotTable>,
    turn_slots: Option<Arc<Semaphore>>,
    queued: AtomicU64,
    approvals: Mutex<HashMap<String, PendingApproval>>,
    shutdown: CancellationToken,
    skills: BTreeMap<String, String>,
    /// Built-in prices with the project's `[prices]` overrides.
    prices: PriceTable,
    /// Where model steps are recorded, when they are.
    recording: Option<Arc<Recording>>,
    /// The local socket for subprocess tools; started by the first grant.
    endpoint: Endpoint,
    /// Durable reminders and the clock of their timer.
    reminders: Arc<reminders::Engine>,
    /// Turn leases and controls shared with other replicas, when there are any.
    coordination: Option<Arc<dyn Coordination>>,
    /// How the agent's programs run.
    containment: Containment,
    /// Names of the built-in tools in the tool map (a manifest or native
    /// tool of the same name replaces the built-in and is not one).
    builtins: HashSet<String>,
    /// The built-ins `[builtin_tools] direct` exposes to remote callers.
    exposed: HashSet<String>,
    /// The bounded wait for a turn running on another replica.
    coordination_wait: Duration,
}

/// The session runtime for one agent. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

/// A handle that does not keep the host alive (held by the reminder timer,
/// so a host dropped without [`Host::shutdown`] still goes away).
#[derive(Clone)]
pub(crate) struct WeakHost(std::sync::Weak<Inner>);

impl WeakHost {
    pub(crate) fn upgrade(&self) -> Option<Host> {
        self.0.upgrade().map(|inner| Host { inner })
    }
}

/// Options for [`Host::start_session`].
#[derive(Clone, Debug, Default)]
pub struct StartSession {
    /// The first message; `None` creates an idle session.
    pub message: Option<String>,
    /// Chat (default) or task.
    pub mode: SessionMode,
    /// The creating channel (`http`, `cli`, ...). Empty means `http`.
    pub channel: String,
    /// The owning principal.
    pub principal: Option<String>,
    /// A continuation token chosen by the channel (`<channelId>:<key>`);
    /// `None` generates an opaque `http:` token.
    pub continuation_token: Option<String>,
    /// Display title.
    pub title: Option<String>,
    /// Free-form purpose.
    pub purpose: Option<String>,
    /// Stub writes.
    pub dry_run: bool,
    /// Pin "now".
    pub as_of: Option<DateTime<Utc>>,
    /// Files written into the workspace before the first turn.
    pub workspace_files: BTreeMap<String, String>,
    /// The delivery id of the first message (generated when absent).
    pub delivery_id: Option<String>,
}

/// What [`Host::start_session`] returns.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    /// The new session.
    pub session_id: SessionId,
    /// Its continuation token.
    pub continuation_token: String,
    /// The first turn, when a message was given.
    pub turn_id: Option<TurnId>,
    /// The first message's delivery id.
    pub delivery_id: Option<String>,
    /// The stream index of the turn's `message.received` (a good
    /// `startIndex` for following the turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

/// Options for [`Host::send`].
#[derive(Clone, Debug, Default)]
pub struct FollowUp {
    /// The message.
    pub message: String,
    /// The token the caller holds; when given it must be current (else
    /// [`HostError::StaleToken`]). It rotates on every accepted send.
    pub continuation_token: Option<String>,
    /// Preempt (default) or coalesce.
    pub admission: bdk_events::Admission,
    /// The caller's delivery id (generated when absent).
    pub delivery_id: Option<String>,
    /// The caller.
    pub principal: Option<String>,
    /// The caller may read every session (dev mode on loopback): it is told
    /// that a task session takes no follow-ups (409) before being told it
    /// does not own the session (403), since it can see the session anyway.
    pub sees_all: bool,
    /// Files written into the workspace before the turn.
    pub workspace_files: BTreeMap<String, String>,
}

/// What [`Host::send`] returns.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sent {
    /// The session.
    pub session_id: SessionId,
    /// The rotated continuation token.
    pub continuation_token: String,
    /// The send's delivery id.
    pub delivery_id: String,
    /// The turn the message started; `None` when it was queued behind a
    /// running turn (coalesce).
    pub turn_id: Option<TurnId>,
    /// The stream index of the turn's `message.received`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

/// Whether a direct call carries an approval, for [`Host::direct_refusal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Approval {
    /// It approves the call.
    Given,
    /// It does not.
    Missing,
    /// No call yet: a listing, where approval tools a caller could approve
    /// stay in.
    Listing,
}

/// Where a direct call comes from, which decides what it may reach.
///
/// | | manifest, native and MCP tools | built-ins | `needs_approval` tools |
/// | --- | --- | --- | --- |
/// | [`CallOrigin::Agent`] | yes | yes | only with [`DirectCall::approve`] |
/// | [`CallOrigin::Remote`] | yes | only those in `[builtin_tools] direct` | only with [`DirectCall::approve`] |
/// | [`CallOrigin::Mcp`] | yes | only those in `[builtin_tools] direct` | never |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallOrigin {
    /// A caller of the HTTP API (`POST /v1/tools/:name`), or any embedder
    /// that does not say otherwise.
    #[default]
    Remote,
    /// An MCP client (`/v1/mcp/tools`, `call_tool`, `bdk mcp`): it can never
    /// carry an approval.
    Mcp,
    /// The agent's own machinery and its operator: schedules, reminder
    /// handlers, `bdk call`.
    Agent,
}

/// A direct (model-less) tool call.
#[derive(Clone, Debug, Default)]
pub struct DirectCall {
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// Bind to this session.
    pub session_id: Option<SessionId>,
    /// Or to the session holding this continuation token.
    pub continuation_token: Option<String>,
    /// The caller.
    pub principal: Option<String>,
    /// Where the call comes from.
    pub origin: CallOrigin,
    /// The caller approves a `needs_approval` tool by making the call; the
    /// approval is recorded with its principal (as `action.approval_*`
    /// events when the call is bound to a session, in the log otherwise).
    /// Refused from [`CallOrigin::Mcp`].
    pub approve: bool,
}

/// The outcome envelope of a direct call.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectOutcome {
    /// The tool.
    pub tool_name: String,
    /// The call id (`tool_<name>_...`).
    pub call_id: String,
    /// True when the tool failed.
    pub is_error: bool,
    /// The tool's result.
    pub result: Value,
    /// Execution time.
    pub duration_ms: u64,
    /// True when a session-bound read fell back to a scratch workspace.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scratch_workspace: bool,
    /// The session the call was recorded in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Who approved the call, for a `needs_approval` tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// A call waiting for approval.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The validated input.
    pub input: Value,
    /// When it was parked.
    pub requested_at: DateTime<Utc>,
}

/// How a turn ended, read back from the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnResult {
    /// The turn.
    pub turn_id: TurnId,
    /// True for `turn.completed`.
    pub ok: bool,
    /// The reply (or the failure message).
    pub reply: String,
    /// Failure status, when it failed.
    pub status: Option<FailStatus>,
    /// Usage; `None` when not known.
    pub usage: Option<Usage>,
}

impl Host {
    /// A builder.
    pub fn builder(project: Project, store: Arc<dyn Store>) -> HostBuilder {
        HostBuilder::new(project, store)
    }

    pub(crate) fn downgrade(&self) -> WeakHost {
        WeakHost(Arc::downgrade(&self.inner))
    }

    /// The host's clock: "now" for tools and reminders.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(self.inner.reminders.clock())
    }

    pub(crate) fn reminder_engine(&self) -> Arc<reminders::Engine> {
        Arc::clone(&self.inner.reminders)
    }

    /// The coordination shared with other replicas, when there are any.
    pub(crate) fn coordination(&self) -> Option<&Arc<dyn Coordination>> {
        self.inner.coordination.as_ref()
    }

    /// The bounded wait for a turn running on another replica.
    pub(crate) fn coordination_wait(&self) -> Duration {
        self.inner.coordination_wait
    }

    /// Applies a control from another replica to the local turn it names;
    /// a control for a turn that no longer runs here is ignored.
    pub(crate) fn apply_control(&self, control: &Control) {
        self.inner.slots.with(&control.session_id, |slot| {
            let mut state = slot.state();
            let Some(running) = state.running.as_ref() else {
                return;
            };
            if running.turn_id != control.turn_id {
                return;
            }
            let reason = match control.kind {
                ControlKind::Stop => REASON_STOP,
                ControlKind::Preempt => REASON_PREEMPT,
            };
            running.reason.store(reason, Ordering::SeqCst);
            running.cancel.cancel();
            if control.kind == ControlKind::Stop {
                let keys: Vec<String> = state.pending.drain(..).filter_map(|q| q.key).collect();
                if !keys.is_empty() {
                    let host = self.clone();
                    tokio::spawn(async move { host.forget_queued(keys).await });
                }
            }
        });
    }

    /// How the agent's programs run: channels and handlers run theirs
    /// through it too (see [`crate::containment`]).
    pub fn containment(&self) -> &Containment {
        &self.inner.containment
    }

    /// The project served.
    pub fn project(&self) -> &Project {
        &self.inner.project
    }

    /// The agent's MCP connections (`host.mcp`), when it has any.
    pub fn mcp(&self) -> Option<&Arc<dyn McpHub>> {
        self.inner.mcp.as_ref()
    }

    /// MCP connections that failed to start or to list their tools.
    pub fn connection_errors(&self) -> Vec<ConnectionError> {
        self.inner
            .mcp
            .as_ref()
            .map(|m| m.connection_errors())
            .unwrap_or_default()
    }

    /// The current tool map, rebuilt first when the MCP catalog changed
    /// since the last look (a listing finished or a server sent
    /// `tools/list_changed`).
    fn current_tools(&self) -> Arc<BTreeMap<String, ToolEntry>> {
        let inner = &self.inner;
        {
            let current = inner.tools.read().unwrap_or_else(|p| p.into_inner());
            match &inner.mcp {
                Some(mcp) if mcp.generation() != current.0 => {}
                _ => return Arc::clone(&current.1),
            }
        }
        let (generation, tools) = merged_tools(&inner.base_tools, inner.mcp.as_deref());
        let tools = Arc::new(tools);
        let mut current = inner.tools.write().unwrap_or_else(|p| p.into_inner());
        *current = (generation, Arc::clone(&tools));
        tools
    }

    /// The root agent with the current tool map (subagents included), so a
    /// turn sees MCP tools listed after the host was built.
    fn current_root(&self) -> AgentSpec {
        let tools = self.current_tools();
        let root = &self.inner.root;
        if Arc::ptr_eq(&root.tools, &tools) {
            return root.clone();
        }
        let task = root.task.as_ref().map(|(spec, subs)| {
            let subs = subs
                .iter()
                .map(|(name, sub)| {
                    let mut sub = sub.clone();
                    sub.tools = Arc::clone(&tools);
                    (name.clone(), sub)
                })
                .collect();
            (spec.clone(), Arc::new(subs))
        });
        AgentSpec {
            tools,
            task,
            ..root.clone()
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Specs of the tools callable on the host, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.current_tools()
            .values()
            .map(|e| e.tool.spec().clone())
            .collect()
    }

    /// Specs of the tools a caller from `origin` may call directly, sorted
    /// by name (see [`CallOrigin`]).
    pub fn direct_tools(&self, origin: CallOrigin) -> Vec<ToolSpec> {
        self.direct_tool_sources(origin)
            .into_iter()
            .map(|(spec, _)| spec)
            .collect()
    }

    /// Like [`Host::direct_tools`], each with where it comes from.
    pub fn direct_tool_sources(&self, origin: CallOrigin) -> Vec<(ToolSpec, ToolSource)> {
        self.current_tools()
            .iter()
            .filter(|(name, e)| {
                self.direct_refusal(name, e.tool.spec(), origin, Approval::Listing)
                    .is_none()
            })
            .map(|(_, e)| (e.tool.spec().clone(), e.tool.source()))
            .collect()
    }

    /// Every tool callable on the host (built-ins, manifests, native tools,
    /// advertised MCP tools listed by now), each with where it comes from,
    /// sorted by name.
    pub fn tool_sources(&self) -> Vec<(ToolSpec, ToolSource)> {
        self.current_tools()
            .values()
            .map(|e| (e.tool.spec().clone(), e.tool.source()))
            .collect()
    }

    /// Why a caller from `origin` may not call `name` directly; `None`
    /// when it may.
    fn direct_refusal(
        &self,
        name: &str,
        spec: &ToolSpec,
        origin: CallOrigin,
        approval: Approval,
    ) -> Option<HostError> {
        let remote = origin != CallOrigin::Agent;
        if remote && self.inner.builtins.contains(name) && !self.inner.exposed.contains(name) {
            return Some(HostError::ToolNotExposed(name.to_owned()));
        }
        if spec.needs_approval {
            if origin == CallOrigin::Mcp {
                return Some(HostError::ApprovalRequired {
                    name: name.to_owned(),
                    how: "MCP callers cannot approve it; call it over the HTTP API with \"approve\": true, or let the model call it in a session where a person approves it",
                });
            }
            if approval == Approval::Missing {
                return Some(HostError::ApprovalRequired {
                    name: name.to_owned(),
                    how: "send \"approve\": true with the call to approve it yourself (recorded with your principal), or let the model call it in a session where a person approves it",
                });
            }
        }
        None
    }

    /// Specs of agent-execution tools (workspace scripts).
    pub fn agent_tools(&self) -> Vec<ToolSpec> {
        self.inner.agent_tools.values().cloned().collect()
    }

    /// The root agent's system prompt.
    pub fn system_prompt(&self) -> &str {
        &self.inner.root.system
    }

    /// The root agent's model id.
    pub fn model_id(&self) -> &str {
        self.inner.root.model.id()
    }

    /// Prices for cost estimates: the built-in table with the project's
    /// `[prices]` overrides.
    pub fn prices(&self) -> &PriceTable {
        &self.inner.prices
    }

    /// The recording model steps go to, when the host was built with
    /// [`HostBuilder::record_to`].
    pub fn recording(&self) -> Option<&Arc<Recording>> {
        self.inner.recording.as_ref()
    }

    /// Failed hook deliveries since start.
    pub fn hook_failures(&self) -> u64 {
        self.inner.hooks.failures()
    }

    /// Waits until the hooks have handled every event recorded so far, at
    /// most `timeout`. A process that is about to exit calls it last (after
    /// [`Host::shutdown`] when it shuts down), so its final events reach
    /// the hooks instead of dying with the runtime.
    pub async fn drain_hooks(&self, timeout: Duration) -> Result<(), Undelivered> {
        self.inner.hooks.drain(timeout).await
    }

    /// A hold on the slot of `id`, created on first use.
    fn slot(&self, id: &SessionId) -> SlotRef {
        self.inner.slots.get(id)
    }

    /// What this host holds in memory for sessions: slots of sessions in
    /// use, cached conversations of resting ones, and the store's own
    /// per-session state.
    pub fn memory(&self) -> MemoryStats {
        let (active, cached, bytes, budget, evicted) = self.inner.slots.stats();
        let (store_resident, store_evicted) = self.inner.store.resident_sessions();
        MemoryStats {
            active_sessions: active,
            cached_transcripts: cached,
            cached_transcript_bytes: bytes,
            transcript_budget_bytes: budget,
            evicted_transcripts: evicted,
            store_resident_sessions: store_resident,
            store_evicted_sessions: store_evicted,
        }
    }

    pub(crate) async fn record(
        &self,
        id: &SessionId,
        turn: Option<&TurnId>,
        events: Vec<Event>,
    ) -> HostResult<Vec<Envelope>> {
        let batch = events
            .into_iter()
            .map(|event| NewEvent {
                turn_id: turn.cloned(),
                event,
            })
            .collect();
        self.record_batch(id, batch).await
    }

    /// Appends events (recorded before anyone sees them), then hands them to hooks.
    async fn record_batch(
        &self,
        id: &SessionId,
        batch: Vec<NewEvent>,
    ) -> HostResult<Vec<Envelope>> {
        let recorded = self
            .inner
            .store
            .append(id, batch)
            .await
            .map_err(session_error(id))?;
        self.inner.hooks.publish(&recorded);
        Ok(recorded)
    }

    /// Reads a session, checking ownership. `principal = None` is a trusted
    /// local caller that may see every session.
    pub async fn session(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<SessionRecord> {
        let record = self
            .inner
            .store
            .get_session(id)
            .await
            .map_err(session_error(id))?
            .ok_or_else(|| HostError::SessionNotFound(id.to_string()))?;
        check_owner(&record, principal)?;
        Ok(record)
    }

    /// Sessions visible to `principal` (all of them for `None`), oldest first.
    pub async fn list_sessions(&self, principal: Option<&str>) -> HostResult<Vec<SessionRecord>> {
        let all = self.inner.store.list_sessions().await?;
        Ok(all
            .into_iter()
            .filter(|r| check_owner(r, principal).is_ok())
            .collect())
    }

    /// Recorded events from `from`.
    pub async fn events(
        &self,
        id: &SessionId,
        from: u64,
        principal: Option<&str>,
    ) -> HostResult<Vec<Envelope>> {
        self.session(id, principal).await?;
        self.inner
            .store
            .read(id, from)
            .await
            .map_err(session_error(id))
    }

    /// Replay from `from`, then follow live.
    pub async fn subscribe(
        &self,
        id: &SessionId,
        from: u64,
        principal: Option<&str>,
    ) -> HostResult<EventStream> {
        self.session(id, principal).await?;
        self.inner
            .store
            .subscribe(id, from)
            .await
            .map_err(session_error(id))
    }

    /// True when a turn is running in the session.
    pub fn is_busy(&self, id: &SessionId) -> bool {
        self.inner
            .slots
            .with(id, |slot| slot.state().running.is_some())
            .unwrap_or(false)
    }

    /// Creates a session, prepares its workspace and, with a message, starts
    /// its first turn (which runs in the background).
    pub async fn start_session(&self, opts: StartSession) -> HostResult<Started> {
        if let Some(m) = &opts.message
            && m.trim().is_empty()
        {
            return Err(HostError::InvalidRequest(
                "message must not be empty".into(),
            ));
        }
        validate_workspace_files(&opts.workspace_files)?;
        let id = SessionId::generate();
        let now = Utc::now();
        let channel = if opts.channel.is_empty() {
            "http".to_owned()
        } else {
            opts.channel.clone()
        };
        let token = opts
            .continuation_token
            .clone()
            .unwrap_or_else(new_http_token);
        let record = SessionRecord {
            id: id.clone(),
            mode: opts.mode,
            channel: channel.clone(),
            principal: opts.principal.clone(),
            continuation_token: token.clone(),
            title: opts.title.clone(),
            purpose: opts.purpose.clone(),
            dry_run: opts.dry_run,
            as_of: opts.as_of,
            created_at: now,
            updated_at: now,
            extra: Value::Null,
        };
        self.inner.store.create_session(record.clone()).await?;
        let workspace = self.inner.store.workspace_dir(&id);
        if let Err(e) = workspace::materialize(&workspace, &self.inner.project).await {
            tracing::warn!(session_id = %id, error = %e, "failed to prepare the session workspace");
        }
        if let Err(e) = workspace::write_files(&workspace, &opts.workspace_files).await {
            return Err(HostError::InvalidRequest(e.to_string()));
        }
        self.record(
            &id,
            None,
            vec![
                SessionStarted {
                    mode: opts.mode,
                    channel,
                    principal: opts.principal.clone(),
                    title: opts.title.clone(),
                    purpose: opts.purpose.clone(),
                    dry_run: opts.dry_run,
                    as_of: opts.as_of,
                    agent: Some(self.inner.project.name.clone()),
                }
                .into(),
            ],
        )
        .await?;
        let Some(message) = opts.message else {
            self.record(&id, None, vec![SessionWaiting {}.into()])
                .await?;
            return Ok(Started {
                session_id: id,
                continuation_token: token,
                turn_id: None,
                delivery_id: None,
                index: None,
            });
        };
        let delivery = opts
            .delivery_id
            .unwrap_or_else(|| DeliveryId::generate().to_string());
        let slot = self.slot(&id);
        let _admission = slot.admission.lock().await;
        slot.state().transcript = Some(Vec::new());
        let (turn_id, index) = self
            .begin_turn(
                &record,
                &slot,
                vec![Nudge {
                    message,
                    delivery_id: Some(delivery.clone()),
                }],
            )
            .await?;
        Ok(Started {
            session_id: id,
            continuation_token: token,
            turn_id: Some(turn_id),
            delivery_id: Some(delivery),
            index: Some(index),
        })
    }

    /// Sends a follow-up. Idle session: starts a turn. Busy session: preempt
    /// interrupts the running turn, waits for it to settle and starts a new
    /// one; coalesce queues the message to be steered into the running turn
    /// at its next tool boundary, or drained into one follow-up turn.
    pub async fn send(&self, id: &SessionId, opts: FollowUp) -> HostResult<Sent> {
        if opts.message.trim().is_empty() {
            return Err(HostError::InvalidRequest(
                "message must not be empty".into(),
            ));
        }
        validate_workspace_files(&opts.workspace_files)?;
        // The order of the refusals: a session the caller cannot see is 404
        // or 403 before anything else; one it can see but that takes no
        // follow-ups is 409 (the real reason) before 403 for a session it
        // may read but not drive.
        let read_scope = if opts.sees_all {
            None
        } else {
            opts.principal.as_deref()
        };
        let record = self.session(id, read_scope).await?;
        if record.mode == SessionMode::Task {
            return Err(HostError::TaskSession(id.to_string()));
        }
        check_owner(&record, opts.principal.as_deref())?;
        if opts
            .continuation_token
            .as_deref()
            .is_some_and(|t| t != record.continuation_token)
        {
            return Err(HostError::StaleToken);
        }
        let slot = self.slot(id);
        // Everything from the token check to the turn's start happens under
        // the admission lock, so sends of this process are accepted one at a
        // time: a tokenless send never loses a race to another one here, and
        // of two sends holding the same token the second sees it stale.
        let _admission = slot.admission.lock().await;
        let record = self.session(id, opts.principal.as_deref()).await?;
        if opts
            .continuation_token
            .as_deref()
            .is_some_and(|t| t != record.continuation_token)
        {
            return Err(HostError::StaleToken);
        }
        // Bad input is refused before anything is accepted: the token only
        // rotates for a send that will run.
        let workspace = self.inner.store.workspace_dir(id);
        workspace::check_files(&workspace, &opts.workspace_files)
            .map_err(|e| HostError::InvalidRequest(e.to_string()))?;
        // Opaque HTTP tokens rotate on every accepted send, as a
        // compare-and-swap so that of two racing sends with one token exactly
        // one wins (also across replicas). Channel tokens (`<channel>:<key>`)
        // name a conversation and stay as they are.
        let new_token = if record.continuation_token.starts_with("http:") {
            let expected = opts
                .continuation_token
                .clone()
                .unwrap_or_else(|| record.continuation_token.clone());
            let new = new_http_token();
            match self.inner.store.rotate_token(id, &expected, &new).await? {
                TokenSwap::Rotated => new,
                TokenSwap::Stale if opts.continuation_token.is_some() => {
                    return Err(HostError::StaleToken);
                }
                // A caller without a token held nothing that went stale: a
                // send on another replica was accepted in between.
                TokenSwap::Stale => return Err(HostError::SessionBusy(id.to_string())),
            }
        } else {
            record.continuation_token.clone()
        };
        // From here on a failure means nothing was accepted, so the caller's
        // token stays good for a retry.
        let unrotate = || async {
            if new_token != record.continuation_token
                && let Err(e) = self
                    .inner
                    .store
                    .rotate_token(id, &new_token, &record.continuation_token)
                    .await
            {
                tracing::warn!(session_id = %id, error = %e, "cannot restore the continuation token of a refused send");
            }
        };
        if let Err(e) = workspace::write_files(&workspace, &opts.workspace_files).await {
            unrotate().await;
            return Err(HostError::InvalidRequest(e.to_string()));
        }
        let delivery = opts
            .delivery_id
            .clone()
            .unwrap_or_else(|| DeliveryId::generate().to_string());
        let nudge = Nudge {
            message: opts.message,
            delivery_id: Some(delivery.clone()),
        };
        let running = slot.state().running.is_some();
        if opts.admission == bdk_events::Admission::Coalesce && running {
            // Recorded before the answer, so an acknowledged message survives
            // a crash: recovery delivers it.
            let key = match self.queue_durably(id, &nudge).await {
                Ok(key) => key,
                Err(e) => {
                    unrotate().await;
                    return Err(e);
                }
            };
            let queued = {
                let mut state = slot.state();
                let running = state.running.is_some();
                if running {
                    state.pending.push(Queued {
                        nudge: nudge.clone(),
                        key: Some(key.clone()),
                    });
                }
                running
            };
            if queued {
                return Ok(Sent {
                    session_id: id.clone(),
                    continuation_token: new_token,
                    delivery_id: delivery,
                    turn_id: None,
                    index: None,
                });
            }
            // The turn ended while the record was written: this send starts
            // the next turn itself and answers only once its message is
            // recorded, so the record is not needed.
            self.forget_queued(vec![key]).await;
        }
        // Preempt: interrupt whatever runs (a drained follow-up may start
        // as the first one settles) until the session is idle.
        loop {
            let wait = slot.state().running.as_ref().map(|running| {
                running.reason.store(REASON_PREEMPT, Ordering::SeqCst);
                running.cancel.cancel();
                running.done.clone()
            });
            match wait {
                Some(done) => wait_done(done).await,
                None => break,
            }
        }
        let (turn_id, index) = match self.begin_turn(&record, &slot, vec![nudge]).await {
            Ok(started) => started,
            Err(e) => {
                // The turn did not start (another replica's turn did not end
                // in time, the log cannot be written): nothing was accepted.
                unrotate().await;
                return Err(e);
            }
        };
        Ok(Sent {
            session_id: id.clone(),
            continuation_token: new_token,
            delivery_id: delivery,
            turn_id: Some(turn_id),
            index: Some(index),
        })
    }

    /// Interrupts the running turn (recorded `turn.failed`, status
    /// `cancelled`) and drops queued follow-ups. Returns true when a turn was
    /// running. Waits until the turn has settled.
    pub async fn stop(&self, id: &SessionId, principal: Option<&str>) -> HostResult<bool> {
        self.session(id, principal).await?;
        let slot = self.slot(id);
        let _admission = slot.admission.lock().await;
        let (wait, dropped) = {
            let mut state = slot.state();
            let dropped: Vec<String> = state.pending.drain(..).filter_map(|q| q.key).collect();
            let wait = state.running.as_ref().map(|running| {
                running.reason.store(REASON_STOP, Ordering::SeqCst);
                running.cancel.cancel();
                running.done.clone()
            });
            (wait, dropped)
        };
        self.forget_queued(dropped).await;
        match wait {
            Some(done) => {
                wait_done(done).await;
                Ok(true)
            }
            // With replicas the turn may run elsewhere: ask its owner.
            None => self.stop_remote(id).await,
        }
    }

    /// Deletes a session owned by `principal`: stops its running turn,
    /// removes it from the store (record, events, workspace) and disarms its
    /// reminders with [`reminders::SESSION_DELETED`]. `Ok(false)` when there
    /// is no such session.
    pub async fn delete_session(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<bool> {
        match self.stop(id, principal).await {
            Ok(_) => {}
            Err(HostError::SessionNotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        let slot = self.slot(id);
        let _admission = slot.admission.lock().await;
        // A turn admitted between the stop and this lock is not ours to kill.
        if slot.state().running.is_some() {
            return Err(HostError::SessionBusy(id.to_string()));
        }
        let deleted = self.inner.store.delete_session(id).await?;
        self.inner.slots.forget(id);
        self.drop_stored_queue(id).await;
        if let Err(e) = self.disarm_session_reminders(id).await {
            // The fire-time check disarms them later if this fails.
            tracing::warn!(session_id = %id, error = %e, "cannot disarm the reminders of a deleted session");
        }
        Ok(deleted)
    }

    /// Waits until the given turn has ended and reads how.
    pub async fn wait_turn(&self, id: &SessionId, turn_id: &TurnId) -> HostResult<TurnResult> {
        self.wait_turn_from(id, turn_id, 0).await
    }

    /// Like [`Host::wait_turn`], reading the stream from `from` (the turn's
    /// `index` from [`Started`] or [`Sent`]) instead of from the start.
    pub async fn wait_turn_from(
        &self,
        id: &SessionId,
        turn_id: &TurnId,
        from: u64,
    ) -> HostResult<TurnResult> {
        let mut stream = self
            .inner
            .store
            .subscribe(id, from)
            .await
            .map_err(session_error(id))?;
        while let Some(item) = stream.next().await {
            let env = item.map_err(session_error(id))?;
            if env.turn_id.as_ref() != Some(turn_id) {
                continue;
            }
            match env.event {
                Event::TurnCompleted(c) => {
                    return Ok(TurnResult {
                        turn_id: turn_id.clone(),
                        ok: true,
                        reply: c.reply,
                        status: None,
                        usage: c.usage,
                    });
                }
                Event::TurnFailed(f) => {
                    return Ok(TurnResult {
                        turn_id: turn_id.clone(),
                        ok: false,
                        reply: f.message,
                        status: Some(f.status),
                        usage: f.usage,
                    });
                }
                _ => {}
            }
        }
        Err(HostError::SessionNotFound(id.to_string()))
    }

    /// Waits until the session has no running turn and nothing queued.
    pub async fn wait_idle(&self, id: &SessionId) {
        loop {
            let running = self.inner.slots.with(id, |slot| {
                slot.state().running.as_ref().map(|r| r.done.clone())
            });
            match running.flatten() {
                Some(done) => wait_done(done).await,
                None => return,
            }
        }
    }

    /// Records `message.received` for `messages` and starts the turn task.
    /// The caller holds the session's admission lock.
    async fn begin_turn(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        messages: Vec<Nudge>,
    ) -> HostResult<(TurnId, u64)> {
        let turn_id = TurnId::generate();
        // With replicas, the turn first takes the session's lease (waiting
        // out a turn of another replica).
        self.lease_turn(&record.id, &turn_id).await?;
        if self.coordination().is_some() {
            // Other replicas may have run turns since this one cached the
            // conversation: rebuild it from the store.
            slot.state().transcript = None;
        }
        let received = received_event(&messages);
        let recorded = match self
            .record(&record.id, Some(&turn_id), vec![received.into()])
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.release_lease(&record.id, &turn_id).await;
                return Err(e);
            }
        };
        let index = recorded.first().map_or(0, |e| e.index);
        self.spawn_turn(record, slot, &turn_id, messages);
        Ok((turn_id, index))
    }

    /// Marks `turn_id` running in the slot and starts its task.
    fn spawn_turn(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        turn_id: &TurnId,
        messages: Vec<Nudge>,
    ) {
        let cancel = self.inner.shutdown.child_token();
        let reason = Arc::new(AtomicU8::new(REASON_NONE));
        let (done_tx, done_rx) = watch::channel(false);
        slot.state().running = Some(Running {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            reason: Arc::clone(&reason),
            done: done_rx,
        });
        let host = self.clone();
        let record = record.clone();
        let slot = slot.clone();
        let first = turn_id.clone();
        tokio::spawn(async move {
            host.drive(record, slot, first, messages, cancel, reason, done_tx)
                .await;
        });
    }

    /// Runs again a turn that a crash (or a shutdown) caught before it
    /// started: its `message.received` (and maybe `turn.queued`) is
    /// recorded, nothing else. It keeps its turn id and continues its own
    /// events, with `queued` follow-ups waiting behind it. With replicas the
    /// caller holds the session's lease for `turn_id`.
    pub(crate) fn resume_turn(
        &self,
        record: &SessionRecord,
        turn_id: &TurnId,
        prompt: String,
        queued: Vec<Queued>,
    ) {
        tracing::info!(session_id = %record.id, turn_id = %turn_id, "running a turn that was accepted but had not started when the host stopped");
        let slot = self.slot(&record.id);
        slot.state().pending = queued;
        let messages = vec![Nudge {
            message: prompt,
            delivery_id: None,
        }];
        self.spawn_turn(record, &slot, turn_id, messages);
    }

    /// Delivers follow-ups found queued in the store (a crash or a shutdown
    /// left them) as one new turn, or behind the running one.
    pub(crate) async fn deliver_queued(
        &self,
        record: &SessionRecord,
        queued: Vec<Queued>,
    ) -> HostResult<()> {
        if queued.is_empty() {
            return Ok(());
        }
        tracing::info!(session_id = %record.id, count = queued.len(), "delivering follow-ups that were queued when the host stopped");
        let slot = self.slot(&record.id);
        let _admission = slot.admission.lock().await;
        {
            let mut state = slot.state();
            if state.running.is_some() {
                state.pending.extend(queued);
                return Ok(());
            }
        }
        let (messages, keys): (Vec<Nudge>, Vec<String>) = queued
            .into_iter()
            .map(|q| (q.nudge, q.key))
            .fold((Vec::new(), Vec::new()), |(mut m, mut k), (n, key)| {
                m.push(n);
                k.extend(key);
                (m, k)
            });
        self.begin_turn(record, &slot, messages).await?;
        self.forget_queued(keys).await;
        Ok(())
    }

    /// Runs turns back to back until nothing is queued, then rests the session.
    #[expect(
        clippy::too_many_arguments,
        reason = "the turn task's whole state, moved in once"
    )]
    async fn drive(
        &self,
        record: SessionRecord,
        slot: SlotRef,
        mut turn_id: TurnId,
        mut messages: Vec<Nudge>,
        mut cancel: CancellationToken,
        mut reason: Arc<AtomicU8>,
        mut done_tx: watch::Sender<bool>,
    ) {
        let chat = record.mode == SessionMode::Chat;
        loop {
            let Outcome {
                result: end,
                end: end_event,
                deferred,
            } = self
                .run_one(&record, &slot, &turn_id, &messages, &cancel, &reason)
                .await;
            if deferred {
                // A queued turn the host shut down under: it stays as
                // recorded (accepted, not started) for the next start to run,
                // like the follow-ups behind it.
                slot.state().running = None;
                self.release_lease(&record.id, &turn_id).await;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            // Follow-ups queued meanwhile drain into one more turn, with no
            // rest state in between; not while the host shuts down, when
            // they stay queued (and recorded) for the next start.
            let draining = chat && !self.inner.shutdown.is_cancelled();
            let mut next = draining.then(|| take_pending(&slot)).flatten();
            // The records of follow-ups steered into this turn, to remove
            // once its end is durable (which makes their nudges durable).
            let mut steered = Vec::new();
            if next.is_some() {
                if let Some(end_event) = end_event.clone()
                    && let Err(e) = self.record_batch(&record.id, vec![end_event]).await
                {
                    tracing::error!(session_id = %record.id, error = %e, "failed to record the end of a turn");
                }
                steered = std::mem::take(&mut slot.state().delivered);
            }
            if next.is_none() {
                let rest: Event = match (chat, &end) {
                    (true, _) => SessionWaiting {}.into(),
                    (false, Ok(reply)) => SessionCompleted {
                        reply: Some(reply.clone()),
                    }
                    .into(),
                    (false, Err(message)) => SessionFailed {
                        message: message.clone(),
                    }
                    .into(),
                };
                slot.state().ending = true;
                let mut batch: Vec<NewEvent> = end_event.into_iter().collect();
                batch.push(NewEvent::session(rest));
                if let Err(e) = self.record_batch(&record.id, batch).await {
                    tracing::error!(session_id = %record.id, error = %e, "failed to record the end of a turn and the session's rest state");
                }
                // Re-check under the lock: a follow-up may have been queued
                // while the rest state was being recorded.
                // Taken under the same lock that ends the turn, so nudges of
                // a turn started right after are not among them.
                let mut state = slot.state();
                state.ending = false;
                steered = std::mem::take(&mut state.delivered);
                if draining && !state.pending.is_empty() {
                    next = Some(std::mem::take(&mut state.pending));
                } else {
                    state.running = None;
                }
            }
            self.forget_queued(steered).await;
            let Some(drained) = next else {
                self.release_lease(&record.id, &turn_id).await;
                // The hold goes before waiters wake: a session that rests is
                // released (its conversation cached) by the time they look.
                drop(slot);
                let _ = done_tx.send(true);
                return;
            };
            let drained_keys: Vec<String> = drained.iter().filter_map(|q| q.key.clone()).collect();
            messages = drained.into_iter().map(|q| q.nudge).collect();
            let (t, c, r, d) = self.next_running(&slot);
            (turn_id, cancel, reason) = (t, c, r);
            let _ = done_tx.send(true);
            done_tx = d;
            if !self.move_lease(&record.id, &turn_id).await {
                slot.state().running = None;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            let received = received_event(&messages).into();
            if let Err(e) = self
                .record(&record.id, Some(&turn_id), vec![received])
                .await
            {
                tracing::error!(session_id = %record.id, error = %e, "failed to record a drained follow-up");
                slot.state().running = None;
                self.release_lease(&record.id, &turn_id).await;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            // Their `message.received` is durable: the records can go.
            self.forget_queued(drained_keys).await;
        }
    }

    /// Replaces the slot's running turn with a fresh one (same task).
    fn next_running(
        &self,
        slot: &Slot,
    ) -> (
        TurnId,
        CancellationToken,
        Arc<AtomicU8>,
        watch::Sender<bool>,
    ) {
        let turn_id = TurnId::generate();
        let cancel = self.inner.shutdown.child_token();
        let reason = Arc::new(AtomicU8::new(REASON_NONE));
        let (tx, rx) = watch::channel(false);
        slot.state().running = Some(Running {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            reason: Arc::clone(&reason),
            done: rx,
        });
        (turn_id, cancel, reason, tx)
    }

    /// Runs one turn from `turn.queued`/`turn.started` to its end event.
    /// Returns the reply or the failure message.
    async fn run_one(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        turn_id: &TurnId,
        messages: &[Nudge],
        cancel: &CancellationToken,
        reason: &AtomicU8,
    ) -> Outcome {
        let started = Instant::now();
        let id = &record.id;
        let fail = |message: String, status: FailStatus, usage: Option<Usage>| -> Event {
            TurnFailed {
                message,
                status,
                usage,
            }
            .into()
        };
        let cancelled_event = |usage: Option<Usage>| -> (Event, String) {
            let (status, message) = match reason.load(Ordering::SeqCst) {
                REASON_STOP => (FailStatus::Cancelled, "turn cancelled by stop"),
                REASON_SHUTDOWN => (
                    FailStatus::Interrupted,
                    "turn interrupted: the host is shutting down",
                ),
                _ => (
                    FailStatus::Interrupted,
                    "turn interrupted by a newer message",
                ),
            };
            (fail(message.to_owned(), status, usage), message.to_owned())
        };

        // A slot under max_running_turns, queueing visibly when none is free.
        let _permit = match &self.inner.turn_slots {
            None => None,
            Some(sem) => match Arc::clone(sem).try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let position = self.inner.queued.fetch_add(1, Ordering::SeqCst) + 1;
                    let queued = self
                        .record(id, Some(turn_id), vec![TurnQueued { position }.into()])
                        .await;
                    // A cancel wins over a slot freed by the same cancel (a
                    // shutdown ends the running turns, which frees slots).
                    let permit = tokio::select! {
                        biased;
                        _ = cancel.cancelled() => None,
                        p = Arc::clone(sem).acquire_owned() => p.ok(),
                    }
                    .filter(|_| !cancel.is_cancelled());
                    self.inner.queued.fetch_sub(1, Ordering::SeqCst);
                    if let Err(e) = queued {
                        return Outcome::recorded(Err(e.to_string()));
                    }
                    match permit {
                        Some(p) => Some(p),
                        // Shut down before it started: nothing of it ran, so
                        // the next start runs it rather than fail it.
                        None if self.inner.shutdown.is_cancelled() => {
                            return Outcome {
                                result: Err("deferred by a shutdown".into()),
                                end: None,
                                deferred: true,
                            };
                        }
                        None => {
                            let (event, message) = cancelled_event(Some(Usage::default()));
                            let _ = self.record(id, Some(turn_id), vec![event]).await;
                            return Outcome::recorded(Err(message));
                        }
                    }
                }
            },
        };

        if self.inner.shutdown.is_cancelled() {
            // Shut down before it started: kept for the next start, as above.
            return Outcome {
                result: Err("deferred by a shutdown".into()),
                end: None,
                deferred: true,
            };
        }
        let model = self.inner.root.model.id().to_owned();
        if let Err(e) = self
            .record(
                id,
                Some(turn_id),
                vec![
                    TurnStarted {
                        model: Some(model.clone()),
                    }
                    .into(),
                ],
            )
            .await
        {
            return Outcome::recorded(Err(e.to_string()));
        }
        let transcript = match self.transcript(slot, id, turn_id).await {
            Ok(t) => t,
            Err(e) => {
                let message = format!("failed to rebuild the conversation: {e}");
                let _ = self
                    .record(
                        id,
                        Some(turn_id),
                        vec![fail(message.clone(), FailStatus::Failed, None)],
                    )
                    .await;
                return Outcome::recorded(Err(message));
            }
        };
        // The model sees the turn's prompt exactly as `message.received`
        // records it: coalesced sends joined into one user message.
        let mut history = transcript;
        let prompt = vec![Message::User {
            text: received_event(messages).message,
        }];
        history.extend(prompt.iter().cloned());

        let env = TurnEnv {
            session: SessionInfo {
                id: Some(id.clone()),
                channel: record.channel.clone(),
                mode: record.mode,
                principal: record.principal.clone(),
            },
            workspace_dir: self.inner.store.workspace_dir(id),
            state_root: self.inner.store.state_root(),
            dry_run: record.dry_run,
            as_of: record.as_of,
            clock: self.clock(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: Some(id.clone()),
                principal: record.principal.clone(),
            })),
        };
        let recorder = TurnRecorder {
            host: self.clone(),
            session_id: id.clone(),
            turn_id: turn_id.clone(),
        };
        let steering = SlotSteering { slot: slot.clone() };
        let gate = Gate {
            host: self.clone(),
            session_id: id.clone(),
        };
        let root = self.current_root();
        // The turn's span: steps and tool calls nest under it (see `agent`).
        let turn_span = tracing::info_span!(
            target: agent::TRACE_TARGET,
            "bdk.turn",
            otel.name = %format_args!("invoke_agent {}", root.name),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %root.name,
            gen_ai.conversation.id = %id,
            gen_ai.provider.name = agent::provider_name(&model),
            gen_ai.request.model = %root.model_name,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            bdk.turn.id = %turn_id,
            bdk.turn.status = tracing::field::Empty,
            bdk.turn.steps = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let outcome = agent::run_turn(TurnInput {
            spec: &root,
            history,
            env: &env,
            recorder: &recorder,
            steering: (record.mode == SessionMode::Chat).then_some(&steering as &dyn Steering),
            approvals: &gate,
            cancel: cancel.clone(),
            verbose: true,
        })
        .instrument(turn_span.clone())
        .await;

        {
            let mut state = slot.state();
            if let Some(t) = state.transcript.as_mut() {
                t.extend(prompt);
                t.extend(outcome.added.iter().cloned());
                repair_transcript(t);
            }
        }
        let usage = outcome.usage;
        let (event, result) = match outcome.end {
            TurnEnd::Completed => (
                TurnCompleted {
                    reply: outcome.reply.clone(),
                    usage,
                    model,
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    steps: outcome.steps,
                }
                .into(),
                Ok(outcome.reply),
            ),
            TurnEnd::Failed(message) => (
                fail(message.clone(), FailStatus::Failed, usage),
                Err(message),
            ),
            TurnEnd::Cancelled => {
                let (event, message) = cancelled_event(usage);
                (event, Err(message))
            }
        };
        let status = match &event {
            Event::TurnFailed(f) => match f.status {
                FailStatus::Failed => "failed",
                FailStatus::Cancelled => "cancelled",
                FailStatus::Interrupted => "interrupted",
            },
            _ => "completed",
        };
        turn_span.record("bdk.turn.status", status);
        turn_span.record("bdk.turn.steps", i64::from(outcome.steps));
        if let Some(usage) = &usage {
            turn_span.record(
                "gen_ai.usage.input_tokens",
                agent::as_i64(usage.input_tokens),
            );
            turn_span.record(
                "gen_ai.usage.output_tokens",
                agent::as_i64(usage.output_tokens),
            );
        }
        if matches!(status, "failed" | "interrupted") {
            turn_span.record("error.type", status);
            turn_span.record("otel.status_code", "ERROR");
        }
        drop(turn_span);
        // The end event is recorded by the caller, together with the
        // session's rest state when nothing is queued: one durable write
        // (one fsync) for both.
        Outcome {
            result,
            end: Some(NewEvent::turn(turn_id, event)),
            deferred: false,
        }
    }

    /// The conversation before the next turn: cached, or rebuilt from the
    /// durable stream after a restart.
    async fn transcript(
        &self,
        slot: &Slot,
        id: &SessionId,
        current: &TurnId,
    ) -> HostResult<Vec<Message>> {
        if let Some(t) = slot.state().transcript.clone() {
            return Ok(t);
        }
        let mut events = self
            .inner
            .store
            .read(id, 0)
            .await
            .map_err(session_error(id))?;
        // The running turn's own prompt is added by the caller.
        events.retain(|e| e.turn_id.as_ref() != Some(current));
        let mut t = transcript_from_events(&events);
        repair_transcript(&mut t);
        slot.state().transcript = Some(t.clone());
        Ok(t)
    }

    /// Calls a server tool without a model turn.
    pub async fn call_tool(&self, call: DirectCall) -> HostResult<DirectOutcome> {
        let tools = self.current_tools();
        let Some(entry) = tools.get(&call.name).cloned() else {
            if let Some(spec) = self.inner.agent_tools.get(&call.name)
                && spec.execution == Execution::Agent
            {
                return Err(HostError::ToolNotCallable(call.name));
            }
            return Err(HostError::UnknownTool {
                name: call.name,
                available: self
                    .direct_tools(call.origin)
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
            });
        };
        let approval = if call.approve {
            Approval::Given
        } else {
            Approval::Missing
        };
        if let Some(refusal) =
            self.direct_refusal(&call.name, entry.tool.spec(), call.origin, approval)
        {
            return Err(refusal);
        }
        if let Some(validator) = &entry.validator
            && let Err(errors) = validator.validate(&call.input)
        {
            return Err(HostError::InvalidToolInput {
                name: call.name,
                errors,
            });
        }
        // The span starts once the tool is known, so a caller's made-up
        // names never become span or metric attributes.
        let span = tracing::info_span!(
            target: agent::TRACE_TARGET,
            "bdk.tool_call",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = tracing::field::Empty,
            gen_ai.tool.type = "function",
            gen_ai.conversation.id = call.session_id.as_ref().map(tracing::field::display),
            bdk.tool.direct = true,
            bdk.tool.status = tracing::field::Empty,
            bdk.tool.refusal = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let outcome = self.call_known(entry, call).instrument(span.clone()).await;
        match &outcome {
            Ok(done) => {
                span.record("gen_ai.tool.call.id", done.call_id.as_str());
                if done.is_error {
                    span.record("bdk.tool.status", "error");
                    span.record("error.type", "tool_error");
                    span.record("otel.status_code", "ERROR");
                } else {
                    span.record("bdk.tool.status", "ok");
                }
            }
            // Refused before the tool ran (busy, forbidden, no such
            // session): the caller's problem, not a tool error.
            Err(e) => {
                span.record("bdk.tool.status", "refused");
                span.record("bdk.tool.refusal", e.code());
            }
        }
        outcome
    }

    /// [`Host::call_tool`] once the tool is resolved and its input valid.
    async fn call_known(&self, entry: ToolEntry, call: DirectCall) -> HostResult<DirectOutcome> {
        let spec = entry.tool.spec().clone();
        let call_id = new_direct_call_id(&call.name);
        let mut record = None;
        if let Some(id) = &call.session_id {
            record = Some(self.session(id, call.principal.as_deref()).await?);
        } else if let Some(token) = &call.continuation_token
            && let Some(r) = self.inner.store.find_by_token(token).await?
        {
            check_owner(&r, call.principal.as_deref())?;
            record = Some(r);
        }
        let Some(record) = record else {
            return self.call_unbound(&entry, call, call_id).await;
        };
        let id = record.id.clone();
        let slot = self.slot(&id);
        let turn_id = TurnId::generate();
        // Writes take the admission lock, so no turn starts under them; reads
        // run alongside whatever is running.
        let _admission = match spec.effect {
            Effect::Write => {
                let guard = slot.admission.lock().await;
                // A turn whose end is already being recorded settles in a
                // moment: wait for it rather than refuse a caller who has
                // just seen turn.completed or session.waiting.
                loop {
                    let settling = {
                        let state = slot.state();
                        match &state.running {
                            None => None,
                            Some(r) if state.ending => Some(r.done.clone()),
                            Some(_) => return Err(HostError::SessionBusy(id.to_string())),
                        }
                    };
                    match settling {
                        Some(done) => wait_done(done).await,
                        None => break,
                    }
                }
                // With replicas, the call also holds the session's lease, so
                // no other replica starts a turn under it.
                let lease = self.lease_call(&id, &turn_id).await?;
                Some((guard, lease))
            }
            Effect::Read => None,
        };
        let workspace = self.inner.store.workspace_dir(&id);
        let mut scratch = None;
        if let Err(e) = workspace::materialize(&workspace, &self.inner.project).await {
            match spec.effect {
                Effect::Write => return Err(HostError::WorkspaceUnavailable(e.to_string())),
                Effect::Read => {
                    let dir = self.inner.store.tool_call_dir(&call_id)?;
                    tokio::fs::create_dir_all(&dir)
                        .await
                        .map_err(|e| HostError::WorkspaceUnavailable(e.to_string()))?;
                    scratch = Some(dir);
                }
            }
        }
        let approved_by = approver(&spec, &call);
        let mut requested: Vec<Event> = vec![
            ActionsRequested {
                step: 0,
                actions: vec![ActionRequest {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                }],
            }
            .into(),
        ];
        // The caller approved by calling: the record says who, the same
        // way a parked call's decision reads.
        if let Some(by) = &approved_by {
            requested.push(
                ActionApprovalRequested {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                }
                .into(),
            );
            requested.push(
                ActionApprovalResolved {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    approved: true,
                    by: Some(by.clone()),
                    reason: Some("approved by the direct caller".to_owned()),
                }
                .into(),
            );
        }
        self.record(&id, Some(&turn_id), requested).await?;
        let ctx = ToolContext {
            call_id: call_id.clone(),
            session: SessionInfo {
                id: Some(id.clone()),
                channel: record.channel.clone(),
                mode: record.mode,
                principal: record.principal.clone(),
            },
            workspace_dir: scratch.clone().unwrap_or(workspace),
            state_root: self.inner.store.state_root(),
            now: record.as_of.unwrap_or_else(|| self.clock().now()),
            as_of_pinned: record.as_of.is_some(),
            dry_run: record.dry_run,
            approved_by: approved_by.clone(),
            cancel: self.inner.shutdown.child_token(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: Some(id.clone()),
                principal: record.principal.clone(),
            })),
        };
        let started = Instant::now();
        let (out, stubbed) = if record.dry_run && spec.effect == Effect::Write {
            (
                ToolOutput::ok(
                    json!({"dryRun": true, "message": format!("`{}` changes state, so this dry run did not execute it", call.name)}),
                ),
                true,
            )
        } else {
            (
                agent::call_with_timeout(
                    &entry.tool,
                    call.input.clone(),
                    ctx,
                    spec.timeout(self.inner.root.tool_timeout),
                )
                .await,
                false,
            )
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let scratch_workspace = scratch.is_some();
        if let Some(dir) = scratch {
            let _ = tokio::fs::remove_dir_all(dir).await;
        }
        self.record(
            &id,
            Some(&turn_id),
            vec![
                ActionResult {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    is_error: out.is_error,
                    output: out.content.clone(),
                    duration_ms,
                    stubbed,
                }
                .into(),
                ActionsCompleted {
                    step: 0,
                    call_ids: vec![call_id.clone()],
                }
                .into(),
            ],
        )
        .await?;
        Ok(DirectOutcome {
            tool_name: call.name,
            call_id,
            is_error: out.is_error,
            result: out.content,
            duration_ms,
            scratch_workspace,
            session_id: Some(id),
            approved_by,
        })
    }

    async fn call_unbound(
        &self,
        entry: &ToolEntry,
        call: DirectCall,
        call_id: String,
    ) -> HostResult<DirectOutcome> {
        let dir = self.inner.store.tool_call_dir(&call_id)?;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| HostError::WorkspaceUnavailable(e.to_string()))?;
        let (channel, principal) = match call
            .continuation_token
            .as_deref()
            .and_then(|t| t.split_once(':'))
        {
            Some((channel, key)) => (
                channel.to_owned(),
                call.principal.clone().or_else(|| Some(key.to_owned())),
            ),
            None => ("direct".to_owned(), call.principal.clone()),
        };
        let approved_by = approver(entry.tool.spec(), &call);
        if let Some(by) = &approved_by {
            // No session to record it in: the log keeps the approval.
            tracing::info!(tool = %call.name, call_id = %call_id, approved_by = %by, "direct call of an approval tool approved by its caller");
        }
        let ctx = ToolContext {
            call_id: call_id.clone(),
            session: SessionInfo {
                id: None,
                channel,
                mode: SessionMode::Chat,
                principal: principal.clone(),
            },
            workspace_dir: dir.clone(),
            state_root: self.inner.store.state_root(),
            now: self.clock().now(),
            as_of_pinned: false,
            dry_run: false,
            approved_by: approved_by.clone(),
            cancel: self.inner.shutdown.child_token(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: None,
                principal,
            })),
        };
        let timeout = entry.tool.spec().timeout(self.inner.root.tool_timeout);
        let started = Instant::now();
        let out = agent::call_with_timeout(&entry.tool, call.input, ctx, timeout).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
            tracing::warn!(call_id = %call_id, error = %e, "failed to remove a scratch workspace");
        }
        Ok(DirectOutcome {
            tool_name: call.name,
            call_id,
            is_error: out.is_error,
            result: out.content,
            duration_ms,
            scratch_workspace: false,
            session_id: None,
            approved_by,
        })
    }

    /// Calls parked for approval in a session.
    pub async fn approvals(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<Vec<ApprovalView>> {
        self.session(id, principal).await?;
        let approvals = self
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ApprovalView> = approvals
            .iter()
            .filter(|(_, p)| &p.session_id == id)
            .map(|(call_id, p)| ApprovalView {
                call_id: call_id.clone(),
                name: p.name.clone(),
                input: p.input.clone(),
                requested_at: p.requested_at,
            })
            .collect();
        out.sort_by(|a, b| {
            a.requested_at
                .cmp(&b.requested_at)
                .then(a.call_id.cmp(&b.call_id))
        });
        Ok(out)
    }

    /// Approves or denies a parked call.
    pub async fn resolve_approval(
        &self,
        id: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<String>,
        principal: Option<&str>,
    ) -> HostResult<()> {
        self.session(id, principal).await?;
        let pending = {
            let mut approvals = self
                .inner
                .approvals
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match approvals.get(call_id) {
                Some(p) if &p.session_id == id => approvals.remove(call_id),
                _ => None,
            }
        };
        let Some(pending) = pending else {
            return Err(HostError::ApprovalNotFound(call_id.to_owned()));
        };
        pending
            .tx
            .send(Decision {
                approved,
                by: principal
                    .map(str::to_owned)
                    .or_else(|| Some("local".to_owned())),
                reason,
            })
            .map_err(|_| HostError::ApprovalNotFound(call_id.to_owned()))
    }

    /// Interrupts every running turn (recorded `interrupted`) and waits for
    /// them to settle, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        let waits: Vec<watch::Receiver<bool>> = self.inner.slots.each(|slot| {
            let state = slot.state();
            state.running.as_ref().map(|r| {
                r.reason.store(REASON_SHUTDOWN, Ordering::SeqCst);
                r.done.clone()
            })
        });
        self.inner.shutdown.cancel();
        let all = futures::future::join_all(waits.into_iter().map(wait_done));
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("some turns did not settle within the shutdown grace period");
        }
        self.leave_cluster().await;
        self.inner.endpoint.close();
        if let Some(mcp) = &self.inner.mcp {
            mcp.shutdown().await;
        }
    }

    /// Records `turn.failed` (interrupted) for turns that never ended, so
    /// their sessions can continue. A session that cannot be recovered (its
    /// log is damaged, an append fails) is logged and left as it is: one bad
    /// session never keeps the host from starting.
    async fn recover(&self) -> HostResult<()> {
        for record in self.inner.store.list_sessions().await? {
            if let Err(e) = self.recover_session(&record).await {
                tracing::warn!(session_id = %record.id, error = %e, "cannot recover a session; leaving it as it is");
            }
        }
        Ok(())
    }

    /// [`Host::recover`] for one session.
    async fn recover_session(&self, record: &SessionRecord) -> HostResult<()> {
        let events = self
            .inner
            .store
            .read(&record.id, 0)
            .await
            .map_err(session_error(&record.id))?;
        if self.coordination().is_some() {
            // Another replica may be running it: only a session whose lease
            // is free is touched.
            return self.recover_shared(record, &events).await;
        }
        self.settle_session(
            record,
            &events,
            "turn interrupted: the host stopped while it was running",
            "task interrupted by a restart",
        )
        .await
    }

    /// Settles what a host that stopped (crashed, shut down, or a replica
    /// that died) left of a session, by what it had acknowledged:
    ///
    /// - an open turn that never started (accepted, maybe `turn.queued`
    ///   under `max_running_turns`) runs now, under its own turn id;
    /// - an open turn that started is recorded `turn.failed` (interrupted)
    ///   with the session's rest state, since running it again could repeat
    ///   its tools' effects;
    /// - coalesced follow-ups still queued in the store are delivered:
    ///   behind the resumed turn, or as the next turn.
    ///
    /// With replicas the caller holds the session's lease for the open turn
    /// (a resumed turn keeps it; otherwise it is released here).
    pub(crate) async fn settle_session(
        &self,
        record: &SessionRecord,
        events: &[Envelope],
        interrupted: &str,
        task_interrupted: &str,
    ) -> HostResult<()> {
        let queued = self.stored_queue(&record.id, events).await?;
        if let Some(open) = open_turn_state(events) {
            if !open.started {
                self.resume_turn(record, &open.id, open.prompt, queued);
                return Ok(());
            }
            tracing::warn!(session_id = %record.id, turn_id = %open.id, "recording a turn interrupted by a stop of its host");
            let rest: Event = match record.mode {
                SessionMode::Chat => SessionWaiting {}.into(),
                SessionMode::Task => SessionFailed {
                    message: task_interrupted.to_owned(),
                }
                .into(),
            };
            let failed: Event = TurnFailed {
                message: interrupted.to_owned(),
                status: FailStatus::Interrupted,
                usage: None,
            }
            .into();
            // What the stopped host left open (a batch, a step) is closed
            // before the turn's end, as a turn ending in a live host does.
            let mut end = closing_events(events, &open.id);
            end.push(failed);
            let result = async {
                self.record(&record.id, Some(&open.id), end).await?;
                self.record(&record.id, None, vec![rest]).await
            }
            .await;
            self.release_lease(&record.id, &open.id).await;
            result?;
        }
        if record.mode == SessionMode::Chat {
            self.deliver_queued(record, queued).await?;
        }
        Ok(())
    }
}

/// Who approved a direct call of a `needs_approval` tool: its caller, when
/// it approved by calling (`local` for a caller without a principal).
fn approver(spec: &ToolSpec, call: &DirectCall) -> Option<String> {
    (spec.needs_approval && call.approve)
        .then(|| call.principal.clone().unwrap_or_else(|| "local".to_owned()))
}

/// A turn that started and never ended, as the log shows it.
pub(crate) struct OpenTurn {
    pub(crate) id: TurnId,
    /// `turn.started` is recorded: the turn may have done things.
    pub(crate) started: bool,
    /// Its prompt, as its `message.received` recorded it.
    pub(crate) prompt: String,
}

/// The open turn of `events`, if any.
pub(crate) fn open_turn_state(events: &[Envelope]) -> Option<OpenTurn> {
    let id = crate::replica::open_turn(events)?;
    let mut started = false;
    let mut prompt = String::new();
    for env in events.iter().filter(|e| e.turn_id.as_ref() == Some(&id)) {
        match &env.event {
            Event::MessageReceived(m) => prompt.clone_from(&m.message),
            Event::TurnStarted(_) => started = true,
            _ => {}
        }
    }
    Some(OpenTurn {
        id,
        started,
        prompt,
    })
}

/// The events that close what turn `turn` of `events` left open: an error
/// `action.result` for each requested call without one and the batch's
/// `actions.completed`, then `step.completed` for each open step.
fn closing_events(events: &[Envelope], turn: &TurnId) -> Vec<Event> {
    let mut steps: Vec<u32> = Vec::new();
    let mut batches: Vec<(u32, Vec<ActionRequest>)> = Vec::new();
    let mut results: HashSet<&str> = HashSet::new();
    for env in events.iter().filter(|e| e.turn_id.as_ref() == Some(turn)) {
        match &env.event {
            Event::StepStarted(s) => steps.push(s.step),
            Event::StepCompleted(s) => steps.retain(|x| *x != s.step),
            Event::ActionsRequested(a) => batches.push((a.step, a.actions.clone())),
            Event::ActionsCompleted(a) => batches.retain(|(step, _)| *step != a.step),
            Event::ActionResult(r) => {
                results.insert(r.call_id.as_str());
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (step, actions) in batches {
        for action in &actions {
            if !results.contains(action.call_id.as_str()) {
                out.push(
                    ActionResult {
                        call_id: action.call_id.clone(),
                        name: action.name.clone(),
                        is_error: true,
                        output: Value::String(
                            "not run: the host stopped before this call finished".to_owned(),
                        ),
                        duration_ms: 0,
                        stubbed: false,
                    }
                    .into(),
                );
            }
        }
        out.push(
            ActionsCompleted {
                step,
                call_ids: actions.into_iter().map(|a| a.call_id).collect(),
            }
            .into(),
        );
    }
    for step in steps {
        out.push(
            StepCompleted {
                step,
                duration_ms: 0,
                finish_reason: None,
                usage: None,
            }
            .into(),
        );
    }
    out
}

async fn wait_done(mut done: watch::Receiver<bool>) {
    // An error means the turn task is gone, which also means it settled.
    let _ = done.wait_for(|d| *d).await;
}

/// How [`Host::run_one`] ended: the result, and the end event when it is
/// still to be recorded.
struct Outcome {
    result: Result<String, String>,
    end: Option<NewEvent>,
    /// The turn never started and stays open for the next start (see
    /// [`Host::resume_turn`]).
    deferred: bool,
}

impl Outcome {
    /// An outcome whose end event was already recorded.
    fn recorded(result: Result<String, String>) -> Self {
        Self {
            result,
            end: None,
            deferred: false,
        }
    }
}

fn take_pending(slot: &Slot) -> Option<Vec<Queued>> {
    let mut state = slot.state();
    (!state.pending.is_empty()).then(|| std::mem::take(&mut state.pending))
}

fn received_event(messages: &[Nudge]) -> MessageReceived {
    MessageReceived {
        message: messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        delivery_ids: messages
            .iter()
            .filter_map(|m| m.delivery_id.clone())
            .collect(),
    }
}

fn check_owner(record: &SessionRecord, principal: Option<&str>) -> HostResult<()> {
    match (principal, &record.principal) {
        (None, _) | (_, None) => Ok(()),
        (Some(p), Some(owner)) if p == owner => Ok(()),
        _ => Err(HostError::Forbidden(record.id.to_string())),
    }
}

fn validate_workspace_files(files: &BTreeMap<String, String>) -> HostResult<()> {
    // Resolve against a fixed root only to check the shape; symlink checks
    // happen again when the files are written into the real workspace.
    let probe = PathBuf::from("/nonexistent-bdk-workspace-probe");
    for path in files.keys() {
        workspace::resolve(&probe, path).map_err(|e| HostError::InvalidRequest(e.to_string()))?;
    }
    Ok(())
}

/// Rebuilds the model conversation from a session's events: prompts,
/// nudges, assistant steps and tool results of every model turn (direct tool
/// calls are not part of the conversation).
pub fn transcript_from_events(events: &[Envelope]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut model_turns: HashSet<&TurnId> = HashSet::new();
    let mut text = String::new();
    let mut step_flushed = true;
    for env in events {
        let in_model_turn = env
            .turn_id
            .as_ref()
            .is_some_and(|t| model_turns.contains(t));
        match &env.event {
            Event::MessageReceived(m) => {
                if let Some(t) = &env.turn_id {
                    model_turns.insert(t);
                }
                out.push(Message::User {
                    text: m.message.clone(),
                });
            }
            Event::NudgeDelivered(n) => out.push(Message::User {
                text: n.message.clone(),
            }),
            Event::StepStarted(_) if in_model_turn => {
                text.clear();
                step_flushed = false;
            }
            Event::MessageCompleted(m) if in_model_turn => text = m.text.clone(),
            Event::ActionsRequested(a) if in_model_turn => {
                out.push(Message::Assistant {
                    text: std::mem::take(&mut text),
                    tool_calls: a
                        .actions
                        .iter()
                        .map(|r| bdk_models::ToolCall {
                            id: r.call_id.clone(),
                            name: r.name.clone(),
                            input: r.input.clone(),
                        })
                        .collect(),
                });
                step_flushed = true;
            }
            Event::ActionResult(r) if in_model_turn => out.push(Message::Tool {
                call_id: r.call_id.clone(),
                name: r.name.clone(),
                content: match &r.output {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                is_error: r.is_error,
            }),
            Event::StepCompleted(_) | Event::TurnCompleted(_) | Event::TurnFailed(_)
                if in_model_turn =>
            {
                if !step_flushed && !text.is_empty() {
                    out.push(Message::Assistant {
                        text: std::mem::take(&mut text),
                        tool_calls: Vec::new(),
                    });
                }
                step_flushed = true;
            }
            _ => {}
        }
    }
    out
}

/// Gives every tool call an answer: calls cut off by an interruption get an
/// error result, so the conversation stays valid for every provider.
pub fn repair_transcript(messages: &mut Vec<Message>) {
    let mut answered: HashSet<String> = HashSet::new();
    for m in messages.iter() {
        if let Message::Tool { call_id, .. } = m {
            answered.insert(call_id.clone());
        }
    }
    let mut i = 0;
    while i < messages.len() {
        if let Message::Assistant { tool_calls, .. } = &messages[i] {
            let missing: Vec<Message> = tool_calls
                .iter()
                .filter(|c| !answered.contains(&c.id))
                .map(|c| Message::Tool {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    content: "call interrupted before it returned".into(),
                    is_error: true,
                })
                .collect();
            // Answers sit right after the assistant step and its own answers.
            let mut at = i + 1;
            while at < messages.len() && matches!(messages[at], Message::Tool { .. }) {
                at += 1;
            }
            let n = missing.len();
            for (k, m) in missing.into_iter().enumerate() {
                messages.insert(at + k, m);
            }
            i = at + n;
        } else {
            i += 1;
        }
    }
}

struct TurnRecorder {
    host: Host,
    session_id: SessionId,
    turn_id: TurnId,
}

#[async_trait]
impl Recorder for TurnRecorder {
    async fn record(&self, event: Event) -> Result<(), RecordError> {
        self.host
            .record(&self.session_id, Some(&self.turn_id), vec![event])
            .await
            .map(|_| ())
            .map_err(|e| RecordError(e.to_string()))
    }
}

struct SlotSteering {
    slot: SlotRef,
}

impl Steering for SlotSteering {
    fn take(&self) -> Vec<Nudge> {
        let mut state = self.slot.state();
        let taken = std::mem::take(&mut state.pending);
        let mut nudges = Vec::with_capacity(taken.len());
        for queued in taken {
            state.delivered.extend(queued.key);
            nudges.push(queued.nudge);
        }
        nudges
    }
}

struct Gate {
    host: Host,
    session_id: SessionId,
}

impl ApprovalGate for Gate {
    fn park(&self, call_id: &str, name: &str, input: &Value) -> oneshot::Receiver<Decision> {
        let (tx, rx) = oneshot::channel();
        let mut approvals = self
            .host
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        approvals.insert(
            call_id.to_owned(),
            PendingApproval {
                session_id: self.session_id.clone(),
                name: name.to_owned(),
                input: input.clone(),
                requested_at: Utc::now(),
                tx,
            },
        );
        rx
    }

    fn unpark(&self, call_id: &str) {
        let mut approvals = self
            .host
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        approvals.remove(call_id);
    }
}

#[derive(Clone)]
struct Services {
    host: Host,
    /// `None` for a direct call not bound to a session.
    session_id: Option<SessionId>,
    principal: Option<String>,
}

#[async_trait]
impl ToolServices for Services {
    fn skill(&self, name: &str) -> Option<String> {
        self.host.inner.skills.get(name).cloned()
    }

    fn mcp(&self) -> Option<Arc<dyn McpHub>> {
        self.host.inner.mcp.clone()
    }

    fn reminders(&self) -> Option<Arc<dyn SessionReminders>> {
        let session = self.session_id.clone()?;
        Some(Arc::new(reminders::Scoped {
            host: self.host.clone(),
            session,
        }))
    }

    async fn tag_artifact(
        &self,
        _ctx: &ToolContext,
        artifact: NewArtifact,
    ) -> Result<String, String> {
        let Some(session_id) = &self.session_id else {
            return Err("artifacts need a call bound to a session".to_owned());
        };
        let NewArtifact {
            kind,
            name,
            path,
            content,
            content_type,
            metadata,
        } = artifact;
        let id = new_id("art");
        let record = ArtifactRecord {
            id: id.clone(),
            session_id: Some(session_id.clone()),
            principal: self.principal.clone(),
            kind: kind.clone(),
            name,
            content_type,
            size: content.len() as u64,
            metadata: metadata.clone(),
            created_at: Utc::now(),
        };
        self.host
            .inner
            .store
            .artifact_put(record, content)
            .await
            .map_err(|e| e.to_string())?;
        let turn = self
            .host
            .inner
            .slots
            .with(session_id, |slot| {
                slot.state().running.as_ref().map(|r| r.turn_id.clone())
            })
            .flatten();
        self.host
            .record(
                session_id,
                turn.as_ref(),
                vec![
                    ArtifactTagged {
                        artifact_id: id.clone(),
                        kind,
                        path,
                        metadata,
                    }
                    .into(),
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(id)
    }

    async fn endpoint(&self, ctx: &ToolContext) -> Option<EndpointGrant> {
        match self
            .host
            .inner
            .endpoint
            .grant(ctx, Arc::new(self.clone()))
            .await
        {
            Ok(grant) => Some(grant),
            Err(e) => {
                tracing::warn!(call_id = %ctx.call_id, error = %e, "host endpoint unavailable; the tool runs without it");
                None
            }
        }
    }
}

/// The id a model call gets when a provider supplies none.
pub fn fresh_call_id() -> String {
    new_call_id()
}
