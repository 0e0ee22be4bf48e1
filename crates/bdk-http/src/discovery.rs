//! Discovery routes of an agent (`/v1/info`, `/v1/meta`, `/v1/health`,
//! `/v1/logs`) and the host routes of a multi-agent app (`GET /`,
//! `GET /v1/agents`, `GET /v1/health`).

use std::sync::Arc;

use aide::axum::ApiRouter;
use aide::axum::routing::get_with;
use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::Html;
use bdk_api::paths;
use bdk_core::host::MemoryStats;
use bdk_core::project::info::{add_gates, add_tools, surface};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::{Describe, True, open};
use crate::auth::Caller;
use crate::auth::policy::PolicyName;
use crate::described;
use crate::error::{ApiError, ErrorCode};
use crate::extract::QueryParams;
use crate::logs::LogLine;
use crate::state::{Agent, Mount, Shared};

/// Lines one `/v1/logs` poll returns when the caller names no limit.
const DEFAULT_LOG_LIMIT: usize = 200;
/// The most lines one poll may ask for.
const MAX_LOG_LIMIT: usize = 1000;

/// The server is up.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "Health")]
pub(crate) struct Health {
    ok: True,
}

/// `GET /v1/health`: liveness, no auth.
pub(crate) async fn health() -> Json<Health> {
    Json(Health { ok: True })
}

/// What a browser client reads before its first call: the agent's name,
/// base path, auth policy and server settings.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    ok: True,
    /// The agent's name.
    agent: String,
    /// Null in single mode.
    slug: Option<String>,
    /// From `agent.toml`.
    description: Option<String>,
    /// The server runs with `--dev`.
    dev: bool,
    /// `/<slug>`, or empty in single mode.
    base_path: String,
    auth: PolicyName,
    /// The playground is mounted.
    playground: bool,
    /// The server's version.
    version: &'static str,
    /// Only while a watcher reloads the agent (`bdk dev`): the version
    /// served and whether the folder's last change loaded, so a client can
    /// notice a reload with this cheap call.
    #[serde(skip_serializing_if = "Option::is_none")]
    reload: Option<MetaReload>,
}

/// `reload` of `/v1/meta`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct MetaReload {
    /// The version served: 1 as started, one more per reload.
    version: u64,
    /// False when the folder's last change did not load.
    ok: bool,
}

/// `GET /v1/meta`: what a browser client needs before its first call, no auth.
pub(crate) async fn meta(State(agent): State<Arc<Agent>>) -> Json<Meta> {
    let project = agent.host.project();
    Json(Meta {
        ok: True,
        agent: project.name.clone(),
        slug: agent.slug.clone(),
        description: project.config.description.clone(),
        dev: agent.shared.dev,
        base_path: agent.prefix.clone(),
        auth: agent.shared.auth.name(),
        playground: agent.shared.playground,
        version: env!("CARGO_PKG_VERSION"),
        reload: agent.reload.as_ref().map(|status| {
            let r = status.get();
            MetaReload {
                version: r.version,
                ok: r.ok,
            }
        }),
    })
}

/// The agent's surface: the JSON `bdk info --json` prints (it has no `ok`
/// field), which the core builds.
#[derive(Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub(crate) struct Info(#[schemars(with = "described::Info")] Value);

/// `GET /v1/info`: the project surface, the same JSON as `bdk info --json`,
/// with the host's advertised MCP tools and native tools beside the
/// manifest tools.
pub(crate) async fn info(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Info> {
    let project = agent.host.project();
    let mut surface = surface(&project, &agent.diagnostics());
    add_tools(&mut surface, &project, &agent.host.tool_sources());
    add_gates(&mut surface, &agent.host.gates());
    surface["connectionErrors"] = json!(agent.host.connection_errors());
    if let Some(status) = &agent.reload {
        surface["reload"] = json!(status.get());
    }
    Json(Info(surface))
}

/// What the agent holds in memory for sessions.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "MemoryResponse")]
pub(crate) struct Memory {
    ok: True,
    #[serde(flatten)]
    stats: MemoryStats,
}

/// `GET /v1/memory`: what the agent's host holds in memory for sessions
/// (see [`bdk_core::host::MemoryStats`]).
pub(crate) async fn memory(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Memory> {
    Json(Memory {
        ok: True,
        stats: agent.host.memory(),
    })
}

/// Query of `/v1/logs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct LogsQuery {
    /// Only lines with a greater cursor.
    #[serde(default)]
    after: u64,
    /// At most this many lines (1-1000, default 200).
    #[schemars(range(min = 1, max = 1000), extend("default" = 200))]
    limit: Option<usize>,
}

/// Recent server log lines.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "LogsResponse")]
pub(crate) struct Logs {
    ok: True,
    lines: Vec<LogLine>,
    /// Pass it as `after` to poll for newer lines.
    next: u64,
}

/// `GET /v1/logs?after=N&limit=M`: recent server log lines and the next cursor.
pub(crate) async fn logs(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    QueryParams(query): QueryParams<LogsQuery>,
) -> Result<Json<Logs>, ApiError> {
    let limit = match query.limit {
        None => DEFAULT_LOG_LIMIT,
        Some(n) if (1..=MAX_LOG_LIMIT).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("limit must be between 1 and {MAX_LOG_LIMIT}"),
            ));
        }
    };
    let (lines, next) = agent.shared.logs.after(query.after, limit);
    Ok(Json(Logs {
        ok: True,
        lines,
        next,
    }))
}

/// One agent in the host index.
#[derive(Clone, Debug)]
pub(crate) struct IndexEntry {
    slug: String,
    name: String,
    description: Option<String>,
    model: Option<String>,
}

impl IndexEntry {
    pub(crate) fn new(mount: &Mount, slug: &str) -> Self {
        let project = mount.host.project();
        Self {
            slug: slug.to_owned(),
            name: project.name.clone(),
            description: project.config.description.clone(),
            model: project.config.model.clone(),
        }
    }

    fn view(&self, playground: bool) -> AgentEntry {
        AgentEntry {
            slug: self.slug.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            model: self.model.clone(),
            base_path: format!("/{}", self.slug),
            playground_path: playground.then(|| format!("/{}/playground", self.slug)),
        }
    }
}

/// One agent of the server.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentEntry {
    slug: String,
    name: String,
    /// From `agent.toml`.
    description: Option<String>,
    /// From `agent.toml`.
    model: Option<String>,
    /// `/<slug>`.
    base_path: String,
    /// When the playground is mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    playground_path: Option<String>,
}

/// The agents this server hosts.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "AgentsResponse")]
pub(crate) struct Agents {
    ok: True,
    agents: Vec<AgentEntry>,
}

/// The state of the host routes.
pub(crate) struct HostIndex {
    agents: Vec<IndexEntry>,
    shared: Arc<Shared>,
}

/// The root routes of a multi-agent app, described. None of them runs
/// auth: they only say which agents exist.
pub(crate) fn host_api() -> ApiRouter<Arc<HostIndex>> {
    let routes = ApiRouter::new()
        .api_route(
            "/",
            get_with(index_html, |op| {
                op.doc(
                    "getIndex",
                    "host",
                    "The agents, as a web page",
                    "An HTML list of the agents this server hosts (multi-agent layout only).",
                )
            }),
        )
        .api_route(
            paths::AGENTS,
            get_with(agents_json, |op| {
                op.doc(
                    "listAgents",
                    "host",
                    "The agents, as JSON",
                    "The agents this server hosts (multi-agent layout only).",
                )
            }),
        )
        .api_route(paths::HEALTH, get_with(health, health_doc));
    open(routes)
}

/// The root routes of a multi-agent app, serving `agents`.
pub(crate) fn host_routes(agents: Vec<IndexEntry>, shared: Arc<Shared>) -> axum::Router {
    let state = Arc::new(HostIndex { agents, shared });
    axum::Router::from(host_api()).with_state(state)
}

async fn agents_json(State(index): State<Arc<HostIndex>>) -> Json<Agents> {
    let agents = index
        .agents
        .iter()
        .map(|a| a.view(index.shared.playground))
        .collect();
    Json(Agents { ok: True, agents })
}

async fn index_html(State(index): State<Arc<HostIndex>>) -> Html<String> {
    let mut items = String::new();
    for a in &index.agents {
        let slug = escape(&a.slug);
        let mut links = format!("<a href=\"/{slug}{}\">info</a>", paths::INFO);
        if index.shared.playground {
            links.push_str(&format!(" · <a href=\"/{slug}/playground\">playground</a>"));
        }
        items.push_str(&format!(
            "<li><strong>{}</strong> <code>/{slug}</code> — {}<br>{links}</li>\n",
            escape(&a.name),
            escape(a.description.as_deref().unwrap_or("")),
        ));
    }
    if items.is_empty() {
        items.push_str("<li>No agents are mounted.</li>\n");
    }
    let docs = if index.shared.docs {
        " · <a href=\"/docs/\">documentation</a>"
    } else {
        ""
    };
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>BDK agents</title></head>\n<body>\n<h1>Agents</h1>\n<ul>\n{items}</ul>\n<p><a href=\"{}\">JSON index</a>{docs}</p>\n</body></html>\n",
        paths::AGENTS
    ))
}

/// Escapes text for HTML element content and quoted attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `GET /v1/health`, under each agent and at the host root.
pub(crate) fn health_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.doc(
        "getHealth",
        "discovery",
        "Liveness",
        "Answers as long as the server runs. Served under each agent and at the root of a multi-agent server.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
