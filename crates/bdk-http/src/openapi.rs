//! The OpenAPI 3.1 description of the whole HTTP surface, served at
//! `GET /v1/openapi.json`, generated from the routes the app serves.
//!
//! The document is written nowhere: [`aide`] collects it from the same
//! routers the app mounts (the `routes` module, the playground, the host and
//! docs routes). Each handler's types describe its operation: request and
//! response bodies derive `schemars::JsonSchema`, extractors add their
//! parameters and the error codes they can answer with, and the route
//! table adds the prose and the host call's codes. Error answers are built
//! here from [`ErrorCode`]: one response per status, listing the codes (and
//! their meanings) the operation can give, with the `Error` schema.
//! Payloads other crates own are described in `described`.
//!
//! Why aide and not utoipa: aide documents an axum route where it is
//! registered (`api_route`), so the document cannot list a path or method
//! the router does not serve, and it takes schemas from `schemars`, which
//! the workspace already uses for native tool schemas. utoipa (6.x, with
//! utoipa-axum 0.3 on axum 0.8) has its own `ToSchema` derive and describes
//! paths in `#[utoipa::path]` attributes beside the handler, a second
//! spelling of each path. aide's release on schemars 1.x is 0.16, still a
//! pre-release, so it is pinned exactly in the workspace manifest.
//!
//! The document describes one agent's routes relative to its base path
//! (`/<slug>`, or nothing in single mode), plus the host routes. Where each
//! path is served is said by the `x-bdk-mount` extension of its path item:
//! `agent` (under every agent's base path), `host` (at the server root in
//! the multi-agent layout) and `server` (at the server root in every
//! layout). Paths not served under the agent base carry a path-level
//! `servers` entry of `/`. The copies served by the app add a top-level
//! `servers` entry pointing at the agent (or, at the root of a multi-agent
//! server, a `{slug}` variable listing the agents). Channel routes depend
//! on the agent's manifests, so they are described generically
//! (`/v1/channels/{channel}` and `/v1/channels/{channel}/{path}`).
//!
//! The document holds nothing about any particular agent, so it is served
//! without auth, like `/docs`.

pub(crate) mod served;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, LazyLock};

use aide::axum::ApiRouter;
use aide::generate::in_context;
use aide::openapi::OpenApi;
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::api::{ERRORS, OPEN, schema_of};
use crate::error::{ErrorBody, ErrorCode};
#[cfg(feature = "playground")]
use crate::playground;
use crate::state::Agent;
use crate::{channels, discovery, docs, routes};
use served::{HOST, host_api};

/// Where a group of routes is served.
const AGENT: &str = "agent";
const SERVER: &str = "server";

/// The HTTP methods of a path item.
const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The generic document, built once.
static DOCUMENT: LazyLock<Value> = LazyLock::new(|| build().0);

/// The OpenAPI 3.1 document of the HTTP surface, without a top-level
/// `servers` entry (the served copies add one for where they are served).
pub fn document() -> Value {
    DOCUMENT.clone()
}

/// The host route of a multi-agent app serving `slugs`:
/// `GET /v1/openapi.json` at the root.
pub(crate) fn host_routes(slugs: Vec<String>) -> axum::Router {
    served::host_routes(document(), slugs)
}

/// Builds the document, with the problems aide reported while collecting
/// it (duplicate parameters or bodies, conflicting responses): none is
/// expected, and a test holds that.
pub(crate) fn build() -> (Value, Vec<String>) {
    let problems = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&problems);
    aide::generate::on_error(move |e| sink.borrow_mut().push(e.to_string()));
    in_context(|ctx| {
        ctx.schema = SchemaGenerator::new(SchemaSettings::draft2020_12().with(|s| {
            s.definitions_path = "#/components/schemas/".into();
        }));
    });
    // Error answers refer to it; no handler names it.
    schema_of::<ErrorBody<'static>>();

    // Every router is built before any is finished: finishing one takes
    // every schema collected so far and resets the generator.
    let agent = ApiRouter::<Arc<Agent>>::new()
        .merge(routes::protected_routes())
        .merge(routes::open_routes());
    #[cfg(feature = "playground")]
    let agent = agent.merge(playground::routes());
    let agent = agent.merge(channels::documented());
    let host_index = discovery::host_api();
    let host_openapi = host_api();
    let server = docs::routes().merge(crate::github::documented());

    let mut groups: Vec<(&str, OpenApi)> = Vec::new();
    let mut api = OpenApi::default();
    let _ = agent.finish_api(&mut api);
    groups.push((AGENT, api));
    let mut api = OpenApi::default();
    let _ = host_index.finish_api(&mut api);
    groups.push((HOST, api));
    let mut api = OpenApi::default();
    let _ = host_openapi.finish_api(&mut api);
    groups.push((HOST, api));
    let mut api = OpenApi::default();
    let _ = server.finish_api(&mut api);
    groups.push((SERVER, api));

    let mut problems = problems.take();
    let doc = assemble(groups, &mut problems);
    (doc, problems)
}

/// Merges the groups' paths and schemas into one document and turns the
/// routes' markers into OpenAPI.
fn assemble(groups: Vec<(&str, OpenApi)>, problems: &mut Vec<String>) -> Value {
    let mut paths: BTreeMap<String, (Value, Vec<&str>)> = BTreeMap::new();
    let mut schemas = Map::new();
    for (mount, api) in groups {
        let api = match serde_json::to_value(&api) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("the {mount} routes do not serialize: {e}"));
                continue;
            }
        };
        if let Some(s) = api["components"]["schemas"].as_object() {
            schemas.extend(s.clone());
        }
        for (path, item) in api["paths"].as_object().into_iter().flatten() {
            // `{*rest}` is the router's spelling of a parameter that spans
            // segments; OpenAPI has only `{rest}`.
            let path = path.replace("{*", "{");
            let entry = paths
                .entry(path)
                .or_insert_with(|| (item.clone(), Vec::new()));
            if !entry.1.contains(&mount) {
                entry.1.push(mount);
            }
        }
    }

    let mut out = Map::new();
    for (path, (mut item, mounts)) in paths {
        if let Some(item) = item.as_object_mut() {
            item.insert("x-bdk-mount".into(), json!(mounts));
            if !mounts.contains(&AGENT) {
                item.insert(
                    "servers".into(),
                    json!([{"url": "/", "description": "the server root"}]),
                );
            }
            for method in METHODS {
                if let Some(op) = item.get_mut(*method).and_then(Value::as_object_mut) {
                    finish_operation(&format!("{method} {path}"), op, problems);
                }
            }
        }
        out.insert(path, item);
    }

    let mut doc = json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "BDK HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Durable agent sessions, NDJSON event streams, direct tool calls and discovery, as served by `bdk serve`.",
            "description": INFO_DESCRIPTION,
            "license": {"name": env!("CARGO_PKG_LICENSE"), "identifier": env!("CARGO_PKG_LICENSE")},
        },
        "tags": TAGS
            .iter()
            .map(|(name, description)| json!({"name": name, "description": description}))
            .collect::<Vec<_>>(),
        "security": [{"bearerAuth": []}, {}],
        "paths": out,
        "components": {
            "securitySchemes": security_schemes(),
            "schemas": schemas,
        },
    });
    unwrap_descriptions(&mut doc);
    doc
}

/// Joins the lines of every paragraph of every `description`: doc comments
/// wrap at 80 columns, which means nothing to a reader of the document.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" => {
                        *text = text
                            .split("\n\n")
                            .map(|paragraph| paragraph.replace('\n', " "))
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    _ => unwrap_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// Turns an operation's markers into OpenAPI: its error codes into one
/// response per status (every operation can answer `500 internal`), the
/// open marker into an empty security requirement.
fn finish_operation(at: &str, op: &mut Map<String, Value>, problems: &mut Vec<String>) {
    let mut codes: Vec<ErrorCode> = match op.remove(ERRORS) {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|c| c.as_str().and_then(ErrorCode::from_wire))
            .collect(),
        _ => Vec::new(),
    };
    codes.push(ErrorCode::Internal);
    if op.remove(OPEN).is_some() {
        op.insert("security".into(), json!([]));
    }
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in ErrorCode::ALL {
        if codes.contains(code) {
            by_status
                .entry(code.status().as_u16())
                .or_default()
                .push(*code);
        }
    }
    let responses = op
        .entry("responses")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(responses) = responses else {
        problems.push(format!("{at}: responses is not an object"));
        return;
    };
    for (status, codes) in by_status {
        let status = status.to_string();
        if responses.contains_key(&status) {
            problems.push(format!(
                "{at}: {status} is both an answer and an error status"
            ));
            continue;
        }
        responses.insert(status, error_response(&codes));
    }
}

/// An error answer restricted to `codes` (all of one status).
fn error_response(codes: &[ErrorCode]) -> Value {
    let description = codes
        .iter()
        .map(|c| format!("`{}`: {}", c.as_str(), c.meaning()))
        .collect::<Vec<_>>()
        .join("; ");
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    let mut response = json!({
        "description": description,
        "content": {"application/json": {"schema": {
            "allOf": [
                {"$ref": "#/components/schemas/Error"},
                {"properties": {"error": {"enum": names}}},
            ],
        }}},
    });
    if codes.contains(&ErrorCode::Unauthorized) {
        response["headers"] = json!({
            "WWW-Authenticate": {
                "description": "Always `Bearer`.",
                "schema": {"type": "string", "const": "Bearer"},
            },
        });
    }
    response
}

/// The tags operations are grouped by, in order.
const TAGS: &[(&str, &str)] = &[
    (
        "sessions",
        "Start sessions, send follow-ups, follow and dump their events, stop turns, list sessions, read their cost.",
    ),
    ("approvals", "Decide tool calls that wait for a person."),
    (
        "tools",
        "The tool catalog and direct tool calls with no model turn.",
    ),
    ("discovery", "What the agent is and what the server runs."),
    ("artifacts", "Durable outputs that sessions tagged."),
    (
        "mcp",
        "The agent as an MCP server over stateless streamable HTTP: JSON-RPC messages in POST bodies.",
    ),
    (
        "channels",
        "Routes an agent declares in `agent/channels/<name>.toml`.",
    ),
    ("host", "Routes of the server as a whole."),
    (
        "dev",
        "Development helpers, served only under `bdk serve --dev`; without it they answer `404 not_found`.",
    ),
    (
        "evals",
        "The project's evals: list the cases, run them in the background, poll and cancel runs. Served with or without `--dev`.",
    ),
    ("docs", "The user documentation, rendered as HTML."),
    (
        "playground",
        "The web playground: a page and its static files, served under every agent unless `--no-playground`.",
    ),
];

const INFO_DESCRIPTION: &str = "\
Every agent served by `bdk serve` answers the same JSON-over-HTTP interface. \
The paths below are relative to an agent's base path: `/<slug>` when several \
agents share a server (the default), nothing with `--mode single`. The \
`x-bdk-mount` extension of each path says where it is served: `agent` under \
every agent's base path, `host` at the server root of a multi-agent server, \
`server` at the server root in either layout (the `/docs` pages, unless \
`--no-docs`).\n\n\
Errors always have the body `{\"ok\": false, \"error\": \"<code>\", \"message\": \"...\"}` \
(see the `Error` and `ErrorCode` schemas); `error` is stable, `message` is for \
people. A path no route matches answers `404 not_found`, a known path with \
another method `405 method_not_allowed`.\n\n\
Request bodies are JSON (`application/json`, any `application/*+json`, any \
charset). A request with no body and no content type counts as `{}`. Unknown \
fields are ignored, and responses may gain fields: ignore the ones you do not \
know.\n\n\
Auth: by default only clients connecting directly from a loopback address are \
admitted (requests carrying proxy headers or a non-loopback `Host` are refused); \
`--bearer-token` requires `Authorization: Bearer <token>`; `--allow-anonymous` \
admits everyone. Routes whose `security` is empty never require auth. The \
principal that starts a session owns it; other principals get `403 forbidden`.\n\n\
Streams: `GET /v1/session/{sessionId}/stream` answers `application/x-ndjson`, one \
event envelope (the `Envelope` schema) per line, and stays open; blank lines \
are keep-alives.";

fn security_schemes() -> Value {
    json!({
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "Required when the server runs with `--bearer-token`: each configured token authenticates its own principal. The default policy (loopback clients only) and `--allow-anonymous` need no credentials, which is why every protected operation also lists the empty requirement.",
        },
        "channelBearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A channel route with `auth = \"bearer\"`: the token is read from the environment variable the route names in `token_env`.",
        },
        "channelSignature": {
            "type": "apiKey",
            "in": "header",
            "name": "X-Hub-Signature-256",
            "description": "A channel route with `auth = \"hmac\"`: `sha256=<hex HMAC-SHA256 of the raw body>` under the secret in `secret_env`. The header is the one the route names in `signature_header`; `X-Hub-Signature-256` is GitHub's.",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_describe_themselves_without_problems() {
        let (_, problems) = build();
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn codes_are_unique() {
        let mut names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
