//! The agent folder as data: discovery turns a folder into a typed
//! [`Project`] plus [`Diagnostic`]s.
//!
//! This crate is what `bdk validate`, the eval loader and editor tooling
//! need, without the runtime: no async, no processes, no sockets. It owns
//! the spec types the folder declares ([`tool::ToolSpec`],
//! [`gate::GateSpec`], handlers, schedules, experiments, channels), the
//! built-in tools' specs ([`builtin`]) and the crontab grammar ([`cron`]).
//! The `schema` feature checks declared JSON Schemas (and exports
//! `schema::InputValidator` for the runtime); without it a schema is
//! taken as written.
//!
//! ```
//! use std::path::Path;
//!
//! // The example agent of this repository.
//! let found = bdk_project::discover(Path::new("../../examples/weather"));
//! for d in &found.diagnostics {
//!     eprintln!("{:?} {}: {} ({})", d.severity, d.file, d.message, d.fix);
//! }
//! assert!(!found.has_errors());
//!
//! let project = found.project.expect("a project");
//! let tools: Vec<&str> = project.tools.iter().map(|t| t.spec.name.as_str()).collect();
//! assert_eq!(tools, ["get_weather"]);
//! assert!(project.instructions.contains("weather"));
//! ```
//!
//! The filesystem is the interface. [`discover`] walks `agent/` (or its alias
//! `bot/`) and every discovery folder in it, parses each manifest, and reports
//! every problem it finds with a severity, the file, what is wrong and how to
//! fix it; it never stops at the first problem and never panics on bad input.
//! `lib/` is never discovered; a stray file in a discovery folder is a
//! diagnostic, not a silent skip.
//!
//! Discovery is synchronous and pure apart from reading files: it runs once at
//! startup, before any session exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::tool::ToolSpec;

pub mod builtin;
mod channel;
pub mod cron;
mod discover;
mod experiment;
pub mod gate;
pub mod github;
pub mod handler;
pub mod info;
#[cfg(feature = "schema")]
mod json_schema;
mod resource;
#[cfg(feature = "validate")]
pub mod schema;
pub mod slack;
pub mod tool;
pub use channel::{
    ChannelEventTarget, ChannelEvents, ChannelManifest, ChannelRoute, DEFAULT_EVENT_ATTEMPTS,
    DEFAULT_EVENT_BACKOFF, MAX_EVENT_ATTEMPTS, RouteAuth, RouteHandler, RouteMethod,
    default_token_env,
};
pub use discover::discover;
pub use experiment::{Arm, Experiment, ExperimentUnit, WEIGHT_TOTAL};
pub use github::{GithubAppId, GithubChannel, GithubCredentials, GithubReply, GithubTrigger};
pub use handler::{HandlerCommand, HandlerSpec};
pub use resource::{
    AgentResource, AgentResourceTemplate, AgentResources, MAX_RESOURCE_BYTES, MAX_URI_BYTES,
    RESERVED_SCHEME, TemplateError, UriTemplate, check_uri,
};
pub use slack::{SlackChannel, SlackWatch};

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The project cannot be served as it is; `serve` refuses to start.
    Error,
    /// Served, but probably not what the author meant.
    Warning,
}

/// One discovery problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The file or folder concerned, relative to the project root (`/`-separated).
    pub file: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

/// The result of [`discover`].
#[derive(Debug)]
pub struct Discovery {
    /// The project, when discovery got far enough to build one (it may
    /// still carry error diagnostics: check [`Discovery::has_errors`]).
    pub project: Option<Project>,
    /// Every problem found, in a stable order (file, then message).
    pub diagnostics: Vec<Diagnostic>,
}

impl Discovery {
    /// True when any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

/// `[builtin_tools]` of `agent.toml`: which built-in tools the model gets.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BuiltinTools {
    /// Workspace file tools (`read_file`, `write_file`, `list_files`, ...). Default on.
    pub workspace: bool,
    /// A shell tool in the workspace. Default off.
    pub shell: bool,
    /// Reminder tools ([`REMINDER_TOOLS`]). Default off. The host gets
    /// them from `bdk-scheduler`'s `Reminders` extension.
    pub reminders: bool,
    /// `tag_artifact`. Default on.
    pub artifacts: bool,
    /// Built-ins remote callers may call directly (`POST /v1/tools/:name`,
    /// MCP). Default none: built-ins are the model's.
    pub direct: Vec<String>,
}

/// The tools `[builtin_tools] reminders = true` turns on. Discovery knows
/// their names (for collisions, `direct` and `bdk info`); the tools
/// themselves come from `bdk-scheduler`'s `Reminders` host extension.
pub const REMINDER_TOOLS: &[&str] = &["reminders_create", "reminders_list", "reminders_cancel"];

impl Default for BuiltinTools {
    fn default() -> Self {
        Self {
            workspace: true,
            shell: false,
            reminders: false,
            artifacts: true,
            direct: Vec::new(),
        }
    }
}

/// Whether the programs an agent runs are sandboxed (the runtime's
/// `bdk_core::containment` applies it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Contained: Landlock, a PID namespace, no privileges (the default).
    #[default]
    On,
    /// Run as plain child processes. The environment allowlist still holds.
    Off,
}

/// `[sandbox]` of `agent.toml` (or its shorthand `sandbox = "off"`): what
/// the agent's programs (tools, `shell`, command hooks) may reach beyond the
/// defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SandboxConfig {
    /// On (default) or off for every program of the agent.
    pub mode: SandboxMode,
    /// Extra paths programs may read and execute (absolute; `~/` is the
    /// server's home; relative paths are against the project root).
    pub read: Vec<PathBuf>,
    /// Extra paths programs may read and write.
    pub write: Vec<PathBuf>,
    /// Extra paths no program may read, beyond the defaults.
    pub deny: Vec<PathBuf>,
    /// Variables of the server's environment passed to every program.
    pub env: Vec<String>,
    /// `user`: who programs run as when the server runs as root (`None`:
    /// an unused id, see `docs/security.md`).
    pub user: Option<SandboxUser>,
    /// The resource limits of each call (`memory`, `processes`,
    /// `cpu_seconds`, `file_size`).
    pub limits: ResourceLimits,
}

/// `[sandbox] user`: an account name, or numeric ids. Serialized as it is
/// written (`"name"`, `"uid:gid"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxUser {
    /// An account of `/etc/passwd` (its uid and primary gid).
    Name(String),
    /// `uid` or `"uid:gid"` (the gid defaults to the uid).
    Ids {
        /// The user id.
        uid: u32,
        /// The group id.
        gid: u32,
    },
}

impl Serialize for SandboxUser {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SandboxUser::Name(name) => serializer.serialize_str(name),
            SandboxUser::Ids { uid, gid } => serializer.collect_str(&format_args!("{uid}:{gid}")),
        }
    }
}

/// `[sandbox]` resource limits of one call; `None` is unlimited
/// (`"unlimited"` in `agent.toml`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    /// `memory`: bytes of memory of the call (default 1 GiB).
    pub memory: Option<u64>,
    /// `processes`: processes and threads of the call (default 512).
    pub processes: Option<u64>,
    /// `cpu_seconds`: CPU time of each process (default 600).
    pub cpu_seconds: Option<u64>,
    /// `file_size`: the largest file a program may write (default 1 GiB).
    pub file_size: Option<u64>,
}

impl ResourceLimits {
    /// What a call gets when `agent.toml` says nothing.
    pub const DEFAULT: ResourceLimits = ResourceLimits {
        memory: Some(1 << 30),
        processes: Some(512),
        cpu_seconds: Some(600),
        file_size: Some(1 << 30),
    };
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `agent.toml`; every key optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AgentConfig {
    /// Agent name (default: the project directory name).
    pub name: Option<String>,
    /// What the agent does (required for subagents).
    pub description: Option<String>,
    /// `provider/model`; `None` means the default model.
    pub model: Option<String>,
    /// Reasoning effort passed to the provider.
    pub effort: Option<String>,
    /// `tool_choice`: whether the first step of each turn must call a tool
    /// (later steps always leave it to the model).
    pub tool_choice: Option<bdk_models::ToolChoice>,
    /// `max_output_tokens`: a cap on each model step's output tokens.
    pub max_output_tokens: Option<u32>,
    /// Model steps per turn before the turn fails (default 25).
    pub max_steps: Option<u32>,
    /// Turns running at once across the agent; more get `turn.queued`.
    pub max_running_turns: Option<u32>,
    /// Default tool timeout in milliseconds (default 30000).
    pub tool_timeout_ms: Option<u64>,
    /// `[builtin_tools]`.
    pub builtin_tools: BuiltinTools,
    /// `[provider]`: where the agent's remote model is reached.
    pub provider: ProviderConfig,
    /// How long one model step may take, retries included (default 300000).
    pub step_timeout_ms: Option<u64>,
    /// The model's context window in tokens, overriding the built-in table
    /// (see `bdk_models::context`).
    pub context_window: Option<u64>,
    /// `[prices."provider/model"]`: prices added to or replacing the
    /// built-in table (see [`bdk_models::prices`]).
    pub prices: BTreeMap<String, bdk_models::prices::Price>,
    /// `[sandbox]`.
    pub sandbox: SandboxConfig,
}

/// `[provider]` of `agent.toml`: overrides of the model provider's preset.
pub use bdk_models::ProviderConfig;

/// How a manifest tool runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ToolRunner {
    /// A subprocess started in the tool's folder.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Environment variables set to these values.
        env: BTreeMap<String, String>,
        /// Variables of the server's environment passed through
        /// (`env = ["NAME", ...]`).
        pass_env: Vec<String>,
        /// `sandbox = "off"` runs this tool uncontained.
        sandbox: SandboxMode,
        /// Cap on stdout bytes (default 1 MiB).
        max_output_bytes: usize,
    },
    /// An HTTP endpoint POSTed the same JSON request.
    Url {
        /// The endpoint.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
    },
    /// An agent-execution script materialized into the workspace.
    Script {
        /// The script file in the agent folder.
        source: PathBuf,
        /// Its path inside the workspace (`.bdk/tools/<file>`).
        workspace_path: String,
    },
}

/// A tool manifest (`tools/<name>.toml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolManifest {
    /// The manifest file.
    pub path: PathBuf,
    /// The folder the tool runs in (the manifest's folder).
    pub dir: PathBuf,
    /// Name, description, schemas, effect, execution, approval, timeout.
    pub spec: ToolSpec,
    /// How it runs.
    pub runner: ToolRunner,
}

/// A result gate manifest (`gates/<name>.toml`): a program that judges each
/// turn's final reply (its runner is `bdk_core::gate`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateManifest {
    /// The manifest file.
    pub path: PathBuf,
    /// Name, description, attempts, timeout and `on_error`.
    pub spec: crate::gate::GateSpec,
    /// The program (`command`), its `env`, `sandbox`, `max_output_bytes`
    /// and timeout, run as handler programs run.
    pub command: HandlerCommand,
}

/// Which authoring form a skill uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkillForm {
    /// `skills/<name>.md`.
    Flat,
    /// `skills/<name>/SKILL.md` with sibling files.
    Packaged,
    /// `skills/<name>.toml`: `description`, `markdown` and inline `files`.
    Generated,
}

/// A skill.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skill {
    /// The skill name (file stem or folder name).
    pub name: String,
    /// The routing description the model sees in the catalog.
    pub description: String,
    /// The Markdown body (frontmatter removed).
    pub body: String,
    /// The authoring form.
    pub form: SkillForm,
    /// The source file.
    pub path: PathBuf,
    /// Sibling files: path relative to the skill folder -> content.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The arguments a client fills in when it asks for the skill as an MCP
    /// prompt (frontmatter `arguments`), in the order they are declared.
    pub arguments: Vec<SkillArgument>,
    /// Files of [`Skill::files`] that an MCP prompt of the skill carries
    /// after its text (frontmatter `attachments`), in the order declared.
    pub attachments: Vec<String>,
}

/// An argument of a skill served as an MCP prompt. The body names it as
/// `{{name}}`; the MCP server substitutes the value a client gives. The
/// model's `load_skill` reads the body as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkillArgument {
    /// The argument name: 1-64 letters, digits, `_` or `-`.
    pub name: String,
    /// What the argument means, shown by MCP clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A prompt request without this argument is refused.
    pub required: bool,
    /// Suggested values, offered by completion; other values are accepted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A subagent (`subagents/<name>/`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Subagent {
    /// The folder name.
    pub name: String,
    /// The routing description (required).
    pub description: String,
    /// Its config; `model` `None` inherits the parent's.
    pub config: AgentConfig,
    /// Its composed instructions.
    pub instructions: String,
    /// Its folder.
    pub dir: PathBuf,
}

/// How an MCP connection is reached.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum McpTransport {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
        /// Working directory (relative to the manifest's folder).
        cwd: Option<PathBuf>,
    },
    /// A remote streamable-HTTP server.
    Http {
        /// Endpoint URL.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
        /// Name of the environment variable holding a bearer token.
        bearer_token_env: Option<String>,
        /// `[oauth]`: the server wants an OAuth access token, obtained once
        /// with `bdk mcp login <name>` and kept under the state root.
        oauth: Option<McpOAuth>,
    },
}

/// `[oauth]` of an HTTP MCP connection (the MCP authorization flow:
/// protected-resource metadata, authorization-server discovery, PKCE,
/// refresh).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct McpOAuth {
    /// A client id registered with the authorization server; without one,
    /// `bdk mcp login` registers a client dynamically.
    pub client_id: Option<String>,
    /// Scopes to ask for; none asks for the server's defaults.
    pub scopes: Vec<String>,
}

/// An MCP connection manifest (`mcp-connections/<name>.toml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpConnection {
    /// The connection name (file stem).
    pub name: String,
    /// The manifest.
    pub path: PathBuf,
    /// Transport.
    pub transport: McpTransport,
    /// Expose the server's tools to the model by name.
    pub advertise_tools: bool,
    /// Per-call timeout.
    pub timeout_ms: Option<u64>,
}

/// Which events a hook receives.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HookEvents {
    /// Every event (`"*"`).
    All,
    /// These event types.
    Only(Vec<String>),
}

impl HookEvents {
    /// True when the hook wants events of this type.
    pub fn matches(&self, kind: &str) -> bool {
        match self {
            HookEvents::All => true,
            HookEvents::Only(kinds) => kinds.iter().any(|k| k == kind),
        }
    }
}

/// Where a hook delivers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum HookTarget {
    /// A command that receives the event as one JSON line on stdin.
    Command {
        /// Program and arguments (run in the hooks folder).
        argv: Vec<String>,
    },
    /// A URL POSTed the event as JSON.
    Url {
        /// The endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
    },
    /// A file the event is appended to as NDJSON (relative paths resolve
    /// against the state root).
    File {
        /// The file.
        path: PathBuf,
    },
}

/// A hook manifest (`hooks/<name>.toml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookManifest {
    /// The hook name (file stem).
    pub name: String,
    /// The manifest.
    pub path: PathBuf,
    /// The events it observes.
    pub events: HookEvents,
    /// Where it delivers.
    pub target: HookTarget,
}

/// What a schedule does when it fires.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ScheduleAction {
    /// Start a task session with this prompt (`schedules/<name>.md`).
    Prompt {
        /// The Markdown body.
        prompt: String,
    },
    /// Hand off into a channel (`schedules/<name>.toml` with `channel`).
    Handoff {
        /// The channel id.
        channel: String,
        /// The message sent through it.
        message: String,
        /// The continuation key, when the hand-off continues a conversation.
        continuation_key: Option<String>,
    },
    /// Call a server tool directly, without a model turn (`schedules/<name>.toml`
    /// with `tool`).
    Tool {
        /// The tool name.
        tool: String,
        /// Its input (`[input]` in the file; `{}` when absent).
        input: Value,
    },
    /// Run a handler (`schedules/<name>.toml` with `handler`).
    Handler {
        /// The program, or the native handler.
        handler: HandlerSpec,
    },
}

/// A schedule (`schedules/<name>.md` or `.toml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    /// The schedule name (path under `schedules/` without extension).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// 5-field UTC cron expression.
    pub cron: String,
    /// What it does.
    pub action: ScheduleAction,
}

/// A file seeded into every session workspace (`sandbox/workspace/**`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SandboxFile {
    /// Path inside the workspace (`/`-separated).
    pub workspace_path: String,
    /// The source file.
    pub source: PathBuf,
}

/// A discovered agent project.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Project {
    /// The project directory (the one holding `agent/`).
    pub root: PathBuf,
    /// `agent/` or `bot/`.
    pub agent_dir: PathBuf,
    /// The agent's name (`agent.toml` `name`, else the project directory name).
    pub name: String,
    /// `agent.toml`.
    pub config: AgentConfig,
    /// The composed system instructions.
    pub instructions: String,
    /// The files the instructions came from, in composition order.
    pub instruction_files: Vec<PathBuf>,
    /// Manifest tools, sorted by name.
    pub tools: Vec<ToolManifest>,
    /// Skills, sorted by name.
    pub skills: Vec<Skill>,
    /// Subagents, sorted by name.
    pub subagents: Vec<Subagent>,
    /// MCP connections, sorted by name.
    pub mcp_connections: Vec<McpConnection>,
    /// Custom channels, sorted by name.
    pub channels: Vec<ChannelManifest>,
    /// Hooks, sorted by name.
    pub hooks: Vec<HookManifest>,
    /// Schedules, sorted by name.
    pub schedules: Vec<Schedule>,
    /// Result gates, sorted by name (the order they run in).
    pub gates: Vec<GateManifest>,
    /// Sandbox seed files, sorted by path.
    pub sandbox_files: Vec<SandboxFile>,
    /// Scripted-model rules files: name -> file (`default` is `agent/scripted.toml`,
    /// others are `agent/scripted/<name>.toml`).
    pub scripted_rules: BTreeMap<String, PathBuf>,
    /// `evals/`, when present.
    pub evals_dir: Option<PathBuf>,
    /// A/B experiments (`experiments/<name>.toml`), sorted by name.
    pub experiments: Vec<Experiment>,
    /// Resources and resource templates the agent publishes to MCP
    /// callers (`resources.toml`).
    pub resources: AgentResources,
}

impl Project {
    /// The agent's shared code folder (`agent/lib/`), when it exists:
    /// never discovered, readable by every program the agent runs.
    pub fn lib_dir(&self) -> Option<PathBuf> {
        let lib = self.agent_dir.join("lib");
        lib.is_dir().then_some(lib)
    }

    /// True when the agent runs programs of its own: command tools, the
    /// `shell` built-in, command hooks or gates.
    pub fn has_programs(&self) -> bool {
        self.config.builtin_tools.shell
            || self
                .tools
                .iter()
                .any(|t| matches!(t.runner, ToolRunner::Command { .. }))
            || self
                .hooks
                .iter()
                .any(|h| matches!(h.target, HookTarget::Command { .. }))
            || !self.gates.is_empty()
    }

    /// The experiment named `name`.
    pub fn experiment(&self, name: &str) -> Option<&Experiment> {
        self.experiments.iter().find(|e| e.name == name)
    }

    /// A path relative to the project root, `/`-separated, for messages.
    pub fn rel(&self, path: &Path) -> String {
        rel_path(&self.root, path)
    }
}

/// `path` relative to `root`, `/`-separated (or `path` itself when outside).
pub fn rel_path(root: &Path, path: &Path) -> String {
    let p = path.strip_prefix(root).unwrap_or(path);
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
