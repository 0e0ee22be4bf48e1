//! The version of the agent a host serves: everything built from the
//! project (the root agent with its subagents, models and gates, the tool
//! map, skills, prices, A/B arms, containment), as one value the host can
//! swap ([`Host::reload`](super::Host::reload)) while sessions, streams,
//! approvals and running turns stay where they are. A turn takes the root
//! agent of the version current when it starts and keeps it to its end.
//!
//! The [`Recipe`] is what the builder was given besides the project (native
//! tools and gates, the model resolver, the sandbox launcher), kept so a
//! reload builds the new version from the same parts.
//!
//! A leaf: the host's state names it, and it names nothing of the host but
//! the arms' overrides.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

use bdk_models::prices::PriceTable;

use crate::agent::{AgentSpec, ToolEntry};
use crate::containment::{Containment, Sandbox};
use crate::gate::ResultGate;
use crate::models::ModelResolver;
use crate::project::Project;
use crate::tool::{Tool, ToolSpec};

use super::arms::ArmOverrides;

/// What the builder was given besides the project, for building a version.
pub(super) struct Recipe {
    /// Tools added with `HostBuilder::tool`.
    pub(super) tools: Vec<Arc<dyn Tool>>,
    /// Gates added with `HostBuilder::gate`.
    pub(super) gates: Vec<Arc<dyn ResultGate>>,
    /// Resolves `provider/model` names.
    pub(super) models: Arc<dyn ModelResolver>,
    /// The launcher that contains the agent's programs.
    pub(super) sandbox: Option<Sandbox>,
}

/// One version of the agent, built from one project.
pub(super) struct Loaded {
    /// 1 for the version the host was built with, one more per reload.
    pub(super) version: u64,
    pub(super) project: Arc<Project>,
    pub(super) root: AgentSpec,
    /// The tools known when the version was built (built-ins, manifests,
    /// native tools).
    pub(super) base_tools: BTreeMap<String, ToolEntry>,
    /// The current tool map (base tools plus advertised MCP tools) and the
    /// MCP generation it was built for; rebuilt when the generation moves.
    pub(super) tools: RwLock<(u64, Arc<BTreeMap<String, ToolEntry>>)>,
    /// Workspace-script tools: described to the model, run by the agent.
    pub(super) agent_tools: BTreeMap<String, ToolSpec>,
    pub(super) skills: BTreeMap<String, String>,
    /// Built-in prices with the project's `[prices]` overrides.
    pub(super) prices: PriceTable,
    /// How the agent's programs run.
    pub(super) containment: Containment,
    /// Names of the built-in tools in the tool map (a manifest or native
    /// tool of the same name replaces the built-in and is not one).
    pub(super) builtins: HashSet<String>,
    /// The built-ins `[builtin_tools] direct` exposes to remote callers.
    pub(super) exposed: HashSet<String>,
    /// What each declared A/B arm changes in the root agent.
    pub(super) arms: ArmOverrides,
    /// Where the instructions end in the root agent's system prompt (an
    /// arm's overlay goes there, before the catalogs).
    pub(super) instructions_len: usize,
}

/// The parts of a project a reload does not apply: they are wired into the
/// server around the host (routes, timers, connections, the hook bus), so
/// a change to them takes effect when the process starts again.
pub(super) fn needs_restart(old: &Project, new: &Project) -> Vec<&'static str> {
    let mut parts = Vec::new();
    if old.mcp_connections != new.mcp_connections {
        parts.push("MCP connections");
    }
    if old.channels != new.channels {
        parts.push("channels");
    }
    if old.hooks != new.hooks {
        parts.push("hooks");
    }
    if old.schedules != new.schedules {
        parts.push("schedules");
    }
    if old.config.max_running_turns != new.config.max_running_turns {
        parts.push("max_running_turns");
    }
    parts
}
