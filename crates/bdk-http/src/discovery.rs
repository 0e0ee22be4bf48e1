//! Discovery routes of an agent (`/v1/info`, `/v1/meta`, `/v1/health`,
//! `/v1/logs`) and the host routes of a multi-agent app (`GET /`,
//! `GET /v1/agents`, `GET /v1/health`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Html;
use axum::routing::get;
use axum::{Json, Router};
use bdk_core::project::info::{add_tools, surface};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::QueryParams;
use crate::{Agent, Mount, Shared};

/// Lines one `/v1/logs` poll returns when the caller names no limit.
const DEFAULT_LOG_LIMIT: usize = 200;
/// The most lines one poll may ask for.
const MAX_LOG_LIMIT: usize = 1000;

/// `GET /v1/health`: liveness, no auth.
pub(crate) async fn health() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// `GET /v1/meta`: what a browser client needs before its first call, no auth.
pub(crate) async fn meta(State(agent): State<Arc<Agent>>) -> Json<Value> {
    let project = agent.host.project();
    Json(json!({
        "ok": true,
        "agent": project.name,
        "slug": agent.slug,
        "description": project.config.description,
        "dev": agent.shared.dev,
        "basePath": agent.prefix,
        "auth": agent.shared.auth.name(),
        "playground": agent.shared.playground,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// `GET /v1/info`: the project surface, the same JSON as `bdk info --json`,
/// with the host's advertised MCP tools and native tools beside the
/// manifest tools.
pub(crate) async fn info(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Value> {
    let project = agent.host.project();
    let mut surface = surface(project, &agent.diagnostics);
    add_tools(&mut surface, project, &agent.host.tool_sources());
    surface["connectionErrors"] = json!(agent.host.connection_errors());
    Json(surface)
}

/// `GET /v1/memory`: what the agent's host holds in memory for sessions
/// (see [`bdk_core::host::MemoryStats`]).
pub(crate) async fn memory(State(agent): State<Arc<Agent>>, _caller: Caller) -> Json<Value> {
    let mut out = json!({"ok": true});
    if let (Value::Object(out), Ok(Value::Object(stats))) =
        (&mut out, serde_json::to_value(agent.host.memory()))
    {
        out.extend(stats);
    }
    Json(out)
}

/// Query of `/v1/logs`.
#[derive(Debug, Deserialize)]
pub(crate) struct LogsQuery {
    #[serde(default)]
    after: u64,
    limit: Option<usize>,
}

/// `GET /v1/logs?after=N&limit=M`: recent server log lines and the next cursor.
pub(crate) async fn logs(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    QueryParams(query): QueryParams<LogsQuery>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({"ok": true, "lines": lines, "next": next})))
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

    fn json(&self, playground: bool) -> Value {
        let mut v = json!({
            "slug": self.slug,
            "name": self.name,
            "description": self.description,
            "model": self.model,
            "basePath": format!("/{}", self.slug),
        });
        if playground {
            v["playgroundPath"] = json!(format!("/{}/playground", self.slug));
        }
        v
    }
}

struct HostIndex {
    agents: Vec<IndexEntry>,
    shared: Arc<Shared>,
}

/// The root routes of a multi-agent app. None of them runs auth: they only
/// say which agents exist.
pub(crate) fn host_routes(agents: Vec<IndexEntry>, shared: Arc<Shared>) -> Router {
    let state = Arc::new(HostIndex { agents, shared });
    Router::new()
        .route("/", get(index_html))
        .route("/v1/agents", get(agents_json))
        .route("/v1/health", get(health))
        .with_state(state)
}

async fn agents_json(State(index): State<Arc<HostIndex>>) -> Json<Value> {
    let agents: Vec<Value> = index
        .agents
        .iter()
        .map(|a| a.json(index.shared.playground))
        .collect();
    Json(json!({"ok": true, "agents": agents}))
}

async fn index_html(State(index): State<Arc<HostIndex>>) -> Html<String> {
    let mut items = String::new();
    for a in &index.agents {
        let slug = escape(&a.slug);
        let mut links = format!("<a href=\"/{slug}/v1/info\">info</a>");
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
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>BDK agents</title></head>\n<body>\n<h1>Agents</h1>\n<ul>\n{items}</ul>\n<p><a href=\"/v1/agents\">JSON index</a>{docs}</p>\n</body></html>\n"
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
