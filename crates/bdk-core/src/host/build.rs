//! Assembling a host ([`HostBuilder`]: tools, models, hooks, containment,
//! extensions, recovery and the replica task) and taking it down
//! (`Host::shutdown`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bdk_store::Store;
use bdk_store::coord::Coordination;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentSpec, DEFAULT_MAX_STEPS, DEFAULT_TOOL_TIMEOUT, TASK_TOOL, ToolEntry};
use crate::clock::{Clock, SystemClock};
use crate::containment::{Containment, Sandbox};
use crate::endpoint::Endpoint;
use crate::extension::HostExtension;
use crate::gate::ResultGate;
use crate::gate::program::ProgramGate;
use crate::handler::NativeHandler;
use crate::hooks::{CURSOR_NAMESPACE, Hook, HookBus, ManifestHook};
use crate::mcp::McpHub;
use crate::models::{BuiltinModels, ModelResolver};
use crate::project::Project;
use crate::tool::Tool;
use crate::tool::{builtin, subprocess};
use bdk_models::context::{BudgetedModel, context_window};
use bdk_models::prices::PriceTable;
use bdk_models::replay::{Recording, RecordingModel, ReplayModel};
use bdk_models::resolve::Misconfigured;
use bdk_models::{Model, ModelError};

use super::error::{HostError, HostResult};
use super::keyed::KEY_CLAIMS_NAMESPACE;
use super::loaded::{Loaded, Recipe, needs_restart};
use super::queued::QUEUE_NAMESPACE;
use super::slots::{DEFAULT_SESSION_CACHE_BYTES, REASON_SHUTDOWN, SlotTable, wait_done};
use super::types::Reloaded;
use super::{Host, Inner};
use bdk_models::{DEFAULT_MODEL, split_model};

/// The key-value namespaces the runtime keeps its own state in: conversation
/// key claims, channel event delivery cursors and queued follow-ups. The
/// host endpoint refuses them to tools and handlers (`reserved_namespace`),
/// with those extensions declare
/// ([`HostExtension::reserved_namespaces`]) and those given to
/// [`HostBuilder::reserve_namespace`].
pub const CORE_NAMESPACES: &[&str] = &[KEY_CLAIMS_NAMESPACE, CURSOR_NAMESPACE, QUEUE_NAMESPACE];

/// Builds a [`Host`].
pub struct HostBuilder {
    pub(super) project: Project,
    pub(super) store: Arc<dyn Store>,
    pub(super) tools: Vec<Arc<dyn Tool>>,
    pub(super) gates: Vec<Arc<dyn ResultGate>>,
    pub(super) hooks: Vec<Arc<dyn Hook>>,
    pub(super) models: Arc<dyn ModelResolver>,
    pub(super) recover: bool,
    pub(super) record_to: Option<PathBuf>,
    pub(super) mcp: Option<Arc<dyn McpHub>>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) extensions: Vec<Arc<dyn HostExtension>>,
    pub(super) coordination: Option<Arc<dyn Coordination>>,
    pub(super) coordination_wait: Duration,
    pub(super) sandbox: Option<Sandbox>,
    pub(super) session_cache: u64,
    pub(super) handlers: BTreeMap<String, Arc<dyn NativeHandler>>,
    pub(super) reserved: BTreeSet<String>,
}

impl HostBuilder {
    /// The project the host will serve (for extensions built from it).
    pub fn project(&self) -> &Project {
        &self.project
    }

    /// A builder for `project` over `store`.
    pub fn new(project: Project, store: Arc<dyn Store>) -> Self {
        Self {
            project,
            store,
            tools: Vec::new(),
            gates: Vec::new(),
            hooks: Vec::new(),
            models: Arc::new(BuiltinModels),
            recover: true,
            record_to: None,
            mcp: None,
            clock: Arc::new(SystemClock),
            extensions: Vec::new(),
            coordination: None,
            coordination_wait: crate::replica::DEFAULT_REMOTE_WAIT,
            sandbox: None,
            session_cache: DEFAULT_SESSION_CACHE_BYTES,
            handlers: BTreeMap::new(),
            reserved: BTreeSet::new(),
        }
    }

    /// Registers a native handler under `name`: a schedule or channel route
    /// that says `handler = "<name>"` runs it, with the same request and
    /// answer a handler program has (see [`crate::handler`]). The build
    /// fails when the agent names a native handler nobody registered.
    pub fn handler(mut self, name: impl Into<String>, handler: Arc<dyn NativeHandler>) -> Self {
        self.handlers.insert(name.into(), handler);
        self
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
    /// "now" for tools (unless a session pins `asOf`) and for extensions'
    /// timers (reminders); give the schedule cadence the same one to share it.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Adds an extension (see [`crate::extension`]): its built-in tools
    /// join the tool map, its operations the host endpoint, and it is
    /// started once the host is built. `bdk-scheduler`'s reminders are one.
    pub fn extension(mut self, extension: Arc<dyn HostExtension>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Reserves the key-value namespace `namespace` for the server: the host
    /// endpoint refuses every `kv.*` operation on it to tools and handlers
    /// (`reserved_namespace`), as it does [`CORE_NAMESPACES`] and the
    /// namespaces extensions declare. For parts of a server that keep state
    /// in the host's store without being an extension (the schedule
    /// cadence, eval history); reserve them on every host over that store,
    /// including hosts that do not run those parts, since a tool of one
    /// could otherwise plant state another reads.
    pub fn reserve_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.reserved.insert(namespace.into());
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
    /// [`ToolServices::mcp`](crate::tool::ToolServices::mcp) and the host endpoint, and the tools of
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

    /// Registers a Rust result gate (see [`crate::gate`]): it judges every
    /// final reply of the root agent's turns, with the agent's `gates/`
    /// programs, all in name order. It replaces a `gates/` manifest of the
    /// same name.
    pub fn gate(mut self, gate: Arc<dyn ResultGate>) -> Self {
        self.gates.push(gate);
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
        check_handlers(&project, &self.handlers)?;
        let recording = match &self.record_to {
            Some(path) => Some(Recording::open(path).await.map_err(|e| {
                HostError::InvalidRequest(format!("cannot record model steps: {e}"))
            })?),
            None => None,
        };
        let recipe = Recipe {
            tools: self.tools,
            gates: self.gates,
            models: self.models,
            sandbox: self.sandbox,
        };
        let loaded = load(
            Arc::clone(&project),
            &recipe,
            &self.extensions,
            self.mcp.as_deref(),
            recording.as_ref(),
            1,
        )
        .await;
        let config = &project.config;
        let mut hooks = self.hooks;
        let state_root = self.store.state_root();
        let lib = project.lib_dir();
        for manifest in &project.hooks {
            hooks.push(Arc::new(ManifestHook::new(
                manifest,
                &state_root,
                loaded.containment.clone(),
                lib.as_deref(),
            )));
        }
        let turn_slots = config
            .max_running_turns
            .map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        let reserved = reserved_namespaces(self.reserved, &self.extensions);
        // When the server is root its programs run as an unprivileged user
        // of their own, which must own what they write: the workspaces and
        // tool-call dirs (created and handed over through `trees`) and the
        // host socket.
        let owner = loaded.containment.owner();
        let endpoint = Endpoint::new(Arc::clone(&self.store), self.extensions.clone(), reserved)
            .for_user(owner);
        let hooks = HookBus::start(hooks, Some(Arc::clone(&self.store)));
        let native_gates = recipe.gates.iter().map(|g| g.spec().clone()).collect();
        let inner = Arc::new(Inner {
            store: self.store,
            loaded: RwLock::new(Arc::new(loaded)),
            recipe,
            mcp: self.mcp,
            hooks,
            slots: SlotTable::new(self.session_cache),
            turn_slots,
            queued: AtomicU64::new(0),
            approvals: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            endpoint,
            recording,
            clock: self.clock,
            extensions: self.extensions,
            handlers: self.handlers,
            coordination: self.coordination,
            coordination_wait: self.coordination_wait,
            native_gates,
            trees: crate::workspace::trees::Trees::new()
                .with_owner(owner.map(|ids| crate::workspace::Owner::new(ids.uid, ids.gid))),
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
        for extension in &host.inner.extensions {
            extension
                .start(host.runtime_link(), host.inner.shutdown.child_token())
                .await?;
        }
        Ok(host)
    }
}

/// The namespaces the endpoint refuses: the runtime's own, the
/// extensions', and those the builder was given.
fn reserved_namespaces(
    mut reserved: BTreeSet<String>,
    extensions: &[Arc<dyn HostExtension>],
) -> BTreeSet<String> {
    let declared = extensions.iter().flat_map(|e| e.reserved_namespaces());
    reserved.extend(
        CORE_NAMESPACES
            .iter()
            .chain(declared)
            .map(|&n| n.to_owned()),
    );
    reserved
}

/// Fails when the agent names a native handler the program did not
/// register.
pub(super) fn check_handlers(
    project: &Project,
    handlers: &BTreeMap<String, Arc<dyn NativeHandler>>,
) -> HostResult<()> {
    match crate::handler::native_names(project)
        .into_iter()
        .find(|(_, name)| !handlers.contains_key(name))
    {
        Some((place, name)) => Err(HostError::InvalidRequest(format!(
            "{place} runs native handler `{name}`, which this program did not register (HostBuilder::handler); `bdk serve` has no native handlers, so give it a program: `handler = [\"python3\", \"run.py\"]`"
        ))),
        None => Ok(()),
    }
}

/// Builds version `version` of the agent from `project`: its tools,
/// models, subagents, gates and arms.
pub(super) async fn load(
    project: Arc<Project>,
    recipe: &Recipe,
    extensions: &[Arc<dyn HostExtension>],
    mcp: Option<&dyn McpHub>,
    recording: Option<&Arc<Recording>>,
    version: u64,
) -> Loaded {
    let config = &project.config;
    let tool_timeout = config
        .tool_timeout_ms
        .map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_millis);

    let containment = Containment::new(recipe.sandbox.clone(), config.sandbox.clone());
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
    for extension in extensions {
        for t in extension.tools(&project) {
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
    for tool in &recipe.tools {
        let tool = Arc::clone(tool);
        builtin_names.remove(&tool.spec().name);
        add(tool, &mut tools);
    }
    let exposed: HashSet<String> = config.builtin_tools.direct.iter().cloned().collect();
    tools.remove(TASK_TOOL);
    let base_tools = tools;
    let (generation, tools) = merged_tools(&base_tools, mcp);
    let tools = Arc::new(tools);

    let root_model = config
        .model
        .clone()
        .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    // `replay/<file>` models are loaded here, before the synchronous
    // resolver runs, so reading a recording never blocks the runtime.
    let mut replays: HashMap<String, Result<Arc<dyn Model>, String>> = HashMap::new();
    // The names are collected (not a chain of closures over the
    // project) because the loop awaits: a closure adapter held across
    // the await would make the build future fail the `Send` check.
    let mut named: Vec<String> = project
        .subagents
        .iter()
        .filter_map(|s| s.config.model.clone())
        .collect();
    for e in &project.experiments {
        named.extend(e.arms.iter().filter_map(|a| a.model.clone()));
    }
    for m in std::iter::once(&root_model).chain(named.iter()) {
        let (provider, file) = split_model(m);
        if provider == "replay" && !replays.contains_key(m) {
            let replay = load_replay(&project, m, file).await;
            replays.insert(m.clone(), replay);
        }
    }
    let mut model_cache: HashMap<String, Arc<dyn Model>> = HashMap::new();
    let mut model_for = |m: &str| -> Arc<dyn Model> {
        model_cache
            .entry(m.to_owned())
            .or_insert_with(|| {
                let resolved = match replays.get(m) {
                    Some(replay) => replay.clone(),
                    None => recipe.models.resolve(m, &project).map_err(|e| match e {
                        // `Misconfigured` answers with `ModelError::Config`
                        // again: keep only the inner text, so the turn
                        // failure does not repeat the prefix.
                        ModelError::Config(message) => message,
                        other => other.to_string(),
                    }),
                };
                let model: Arc<dyn Model> = match resolved {
                    Ok(model) => model,
                    Err(message) => Arc::new(Misconfigured::new(m, message)),
                };
                match recording {
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
                gates: Arc::from(Vec::new()),
                definitions_cache: Default::default(),
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
    let instructions_len = system.len();
    system.push_str(&catalog);
    if !agent_tools.is_empty() {
        system.push_str(
            "\n\n## Workspace scripts\n\nSome tools are scripts in your workspace; `AGENTS.md` there lists them and how to run them.",
        );
    }
    let mut gates: BTreeMap<String, Arc<dyn ResultGate>> = BTreeMap::new();
    for manifest in &project.gates {
        let gate = ProgramGate::new(manifest, &containment, lib.as_deref());
        gates.insert(manifest.spec.name.clone(), Arc::new(gate));
    }
    for gate in &recipe.gates {
        gates.insert(gate.spec().name.clone(), Arc::clone(gate));
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
        gates: gates.into_values().collect(),
        definitions_cache: Default::default(),
    };

    // An arm on another model takes that model's own window.
    let arms = super::arms::prepare(&project, |m| budgeted(model_for(m), None));

    let skills = project
        .skills
        .iter()
        .map(|s| (s.name.clone(), s.body.clone()))
        .collect();
    let prices = PriceTable::with_overrides(&config.prices);
    Loaded {
        version,
        project,
        root,
        base_tools,
        tools: RwLock::new((generation, tools)),
        agent_tools,
        skills,
        prices,
        containment,
        builtins: builtin_names,
        exposed,
        arms,
        instructions_len,
    }
}

/// The base tools plus the advertised tools of `mcp`, with the MCP
/// generation they reflect. An MCP tool never replaces a tool the agent
/// defines itself: a collision is skipped with a warning naming both.
pub(super) fn merged_tools(
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
pub(super) async fn load_replay(
    project: &Project,
    model: &str,
    file: &str,
) -> Result<Arc<dyn Model>, String> {
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

pub(super) fn skill_catalog(project: &Project) -> String {
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

impl Host {
    /// A builder.
    pub fn builder(project: Project, store: Arc<dyn Store>) -> HostBuilder {
        HostBuilder::new(project, store)
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

    /// Serves the agent as `project` now describes it (the same folder,
    /// discovered again): turns that start from now on take the new
    /// version, while running turns finish on the one they started with.
    /// Sessions, their event streams, parked approvals and queued
    /// follow-ups are untouched. What is wired around the host (MCP
    /// connections, channels, hooks, schedules, `max_running_turns`) keeps
    /// its old form until the process starts again; the outcome names the
    /// parts of that kind that changed.
    pub async fn reload(&self, project: Project) -> HostResult<Reloaded> {
        let old = self.inner.loaded();
        if project.root != old.project.root {
            return Err(HostError::InvalidRequest(format!(
                "a reload reads the same project again; {} is not {}",
                project.root.display(),
                old.project.root.display()
            )));
        }
        check_handlers(&project, &self.inner.handlers)?;
        let needs_restart = needs_restart(&old.project, &project);
        drop(old);
        let mut loaded = load(
            Arc::new(project),
            &self.inner.recipe,
            &self.inner.extensions,
            self.inner.mcp.as_deref(),
            self.inner.recording.as_ref(),
            0,
        )
        .await;
        let version = {
            let mut current = self.inner.loaded.write().unwrap_or_else(|p| p.into_inner());
            loaded.version = current.version + 1;
            let version = loaded.version;
            *current = Arc::new(loaded);
            version
        };
        tracing::info!(version, "agent reloaded");
        Ok(Reloaded {
            version,
            needs_restart: needs_restart.into_iter().map(str::to_owned).collect(),
        })
    }

    /// The version of the agent new turns take: 1 as built, one more per
    /// [`Host::reload`].
    pub fn version(&self) -> u64 {
        self.inner.loaded().version
    }
}
