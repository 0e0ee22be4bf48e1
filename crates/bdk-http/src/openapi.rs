//! The OpenAPI 3.1 description of the whole HTTP surface, served at
//! `GET /v1/openapi.json`.
//!
//! The document is built by hand here, as a `serde_json::Value`, rather than
//! derived from the handlers: the handlers answer with `json!` values, so
//! there is nothing typed to derive from, and a hand-written description
//! reads better. What keeps it honest is `tests/openapi.rs`: it scans this
//! crate's source for every registered route and method and checks the
//! document lists exactly those, serves the app and checks that every
//! documented operation reaches a handler and answers with a documented
//! status and a body that matches the documented schema, and checks the
//! error-code enum against the codes the source can produce.
//!
//! The document describes one agent's routes relative to its base path
//! (`/<slug>`, or nothing in single mode), plus the host routes. Where each
//! path is served is said by the `x-bdk-mount` extension of its path item:
//! `agent` (under every agent's base path), `host` (at the server root in
//! the multi-agent layout) and `server` (at the server root in every
//! layout). Paths not served under the agent base carry a path-level
//! `servers` entry of `/`. The copies served by the app add a top-level
//! `servers` entry pointing at the agent (or, at the root of a multi-agent
//! server, a `{slug}` variable listing the agents).
//!
//! The document holds nothing about any particular agent (channels are
//! described generically), so it is served without auth, like `/docs`.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Map, Value, json};

use crate::Agent;
use crate::error::ErrorCode as Code;

/// The generic document, built once.
static DOCUMENT: LazyLock<Value> = LazyLock::new(build);

/// The OpenAPI 3.1 document of the HTTP surface, without a top-level
/// `servers` entry (the served copies add one for where they are served).
pub fn document() -> Value {
    DOCUMENT.clone()
}

/// `GET /v1/openapi.json` under an agent's base path: the document, with
/// the agent's base path as its server.
pub(crate) async fn agent_document(State(agent): State<Arc<Agent>>) -> Json<Value> {
    let url = if agent.prefix.is_empty() {
        "/".to_owned()
    } else {
        agent.prefix.clone()
    };
    let mut server = json!({ "url": url });
    if let Some(slug) = &agent.slug {
        server["description"] = json!(format!("the agent `{slug}`"));
    }
    let mut doc = with_servers(json!([server]));
    if agent.slug.is_none() {
        // Single mode serves no host routes (the agent sits at the root):
        // describe exactly the routes this layout answers.
        if let Some(paths) = doc["paths"].as_object_mut() {
            paths.retain(|_, item| item["x-bdk-mount"] != json!(HOST));
        }
    }
    Json(doc)
}

/// The host route of a multi-agent app: `GET /v1/openapi.json` at the root,
/// whose server names the agent with a `{slug}` variable.
pub(crate) fn host_routes(slugs: Vec<String>) -> Router {
    let servers = match slugs.first() {
        Some(first) => json!([{
            "url": "/{slug}",
            "description": "one of the agents this server hosts",
            "variables": {"slug": {"default": first, "enum": slugs}},
        }]),
        None => json!([{ "url": "/" }]),
    };
    let body = Arc::new(with_servers(servers));
    Router::new().route(
        "/v1/openapi.json",
        get(move || {
            let body = Arc::clone(&body);
            async move { Json(Value::clone(&body)) }
        }),
    )
}

fn with_servers(servers: Value) -> Value {
    let mut doc = document();
    doc["servers"] = servers;
    doc
}

fn schema(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn nullable(kind: &str, description: &str) -> Value {
    json!({ "type": [kind, "null"], "description": description })
}

fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// Builds one operation object.
struct Op {
    op: Map<String, Value>,
    parameters: Vec<Value>,
    responses: BTreeMap<String, Value>,
    codes: Vec<Code>,
}

impl Op {
    fn new(id: &str, tag: &str, summary: &str, description: &str) -> Self {
        let mut op = Map::new();
        op.insert("operationId".into(), json!(id));
        op.insert("tags".into(), json!([tag]));
        op.insert("summary".into(), json!(summary));
        op.insert("description".into(), json!(description));
        Op {
            op,
            parameters: Vec::new(),
            responses: BTreeMap::new(),
            codes: Vec::new(),
        }
    }

    fn param(mut self, parameter: Value) -> Self {
        self.parameters.push(parameter);
        self
    }

    /// A JSON request body of the named schema.
    fn body(mut self, name: &str, required: bool, description: &str, example: Value) -> Self {
        self.op.insert(
            "requestBody".into(),
            json!({
                "required": required,
                "description": description,
                "content": {"application/json": {"schema": schema(name), "example": example}},
            }),
        );
        self
    }

    fn response(mut self, status: &str, response: Value) -> Self {
        self.responses.insert(status.to_owned(), response);
        self
    }

    /// A JSON success answer of the named schema.
    fn json(self, status: &str, description: &str, name: &str) -> Self {
        self.response(
            status,
            json!({
                "description": description,
                "content": {"application/json": {"schema": schema(name)}},
            }),
        )
    }

    fn errors(mut self, codes: &[Code]) -> Self {
        self.codes.extend_from_slice(codes);
        self
    }

    /// The errors of every route behind the auth chain.
    fn protected(self) -> Self {
        self.errors(&[Code::Unauthorized])
    }

    /// The errors of every route that reads a JSON body.
    fn json_body_errors(self) -> Self {
        self.errors(&[
            Code::InvalidJson,
            Code::InvalidRequest,
            Code::RequestTimeout,
            Code::PayloadTooLarge,
            Code::UnsupportedMediaType,
        ])
    }

    /// The route runs no auth.
    fn open(mut self) -> Self {
        self.op.insert("security".into(), json!([]));
        self
    }

    fn build(mut self) -> Value {
        if !self.codes.contains(&Code::Internal) {
            self.codes.push(Code::Internal);
        }
        let mut by_status: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
        for code in Code::ALL {
            if self.codes.contains(code) {
                by_status
                    .entry(code.status().as_u16())
                    .or_default()
                    .push(*code);
            }
        }
        for (status, codes) in by_status {
            self.responses
                .insert(status.to_string(), error_response(&codes));
        }
        if !self.parameters.is_empty() {
            self.op
                .insert("parameters".into(), Value::Array(self.parameters));
        }
        self.op.insert(
            "responses".into(),
            Value::Object(self.responses.into_iter().collect()),
        );
        Value::Object(self.op)
    }
}

/// An error answer restricted to `codes` (all of one status).
fn error_response(codes: &[Code]) -> Value {
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
                schema("Error"),
                {"properties": {"error": {"enum": names}}},
            ],
        }}},
    });
    if codes.contains(&Code::Unauthorized) {
        response["headers"] = json!({
            "WWW-Authenticate": {
                "description": "Always `Bearer`.",
                "schema": {"type": "string", "const": "Bearer"},
            },
        });
    }
    response
}

fn path_param(name: &str, value: Value, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": description,
        "schema": value,
    })
}

fn query_param(name: &str, value: Value, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "required": false,
        "description": description,
        "schema": value,
    })
}

fn session_id_param() -> Value {
    path_param(
        "sessionId",
        schema("SessionId"),
        "The session. A malformed id is `404 invalid_session_id`.",
    )
}

/// One path of the surface: where it is served and its operations.
struct PathItem {
    path: &'static str,
    mount: &'static [&'static str],
    operations: Vec<(&'static str, Value)>,
}

const AGENT: &[&str] = &["agent"];
const AGENT_AND_HOST: &[&str] = &["agent", "host"];
const HOST: &[&str] = &["host"];
const SERVER: &[&str] = &["server"];

/// The methods a channel route may declare.
const CHANNEL_METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

fn build() -> Value {
    let mut paths = Map::new();
    for item in path_items() {
        let mut entry = Map::new();
        entry.insert("x-bdk-mount".into(), json!(item.mount));
        if !item.mount.contains(&"agent") {
            entry.insert(
                "servers".into(),
                json!([{"url": "/", "description": "the server root"}]),
            );
        }
        for (method, operation) in item.operations {
            entry.insert(method.to_owned(), operation);
        }
        paths.insert(item.path.to_owned(), Value::Object(entry));
    }
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "BDK HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Durable agent sessions, NDJSON event streams, direct tool calls and discovery, as served by `bdk serve`.",
            "description": INFO_DESCRIPTION,
            "license": {"name": env!("CARGO_PKG_LICENSE"), "identifier": env!("CARGO_PKG_LICENSE")},
        },
        "tags": [
            {"name": "sessions", "description": "Start sessions, send follow-ups, follow and dump their events, stop turns, list sessions, read their cost."},
            {"name": "approvals", "description": "Decide tool calls that wait for a person."},
            {"name": "tools", "description": "The tool catalog and direct tool calls with no model turn."},
            {"name": "discovery", "description": "What the agent is and what the server runs."},
            {"name": "artifacts", "description": "Durable outputs that sessions tagged."},
            {"name": "mcp", "description": "The agent as an MCP server over stateless streamable HTTP: JSON-RPC messages in POST bodies."},
            {"name": "channels", "description": "Routes an agent declares in `agent/channels/<name>.toml`."},
            {"name": "host", "description": "Routes of the server as a whole."},
            {"name": "dev", "description": "Development helpers, served only under `bdk serve --dev`; without it they answer `404 not_found`."},
            {"name": "evals", "description": "The project's evals: list the cases, run them in the background, poll and cancel runs. Served with or without `--dev`."},
            {"name": "docs", "description": "The user documentation, rendered as HTML."},
            {"name": "playground", "description": "The web playground: a page and its static files, served under every agent unless `--no-playground`."},
        ],
        "security": [{"bearerAuth": []}, {}],
        "paths": paths,
        "components": {
            "securitySchemes": security_schemes(),
            "schemas": schemas(),
        },
    })
}

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

fn path_items() -> Vec<PathItem> {
    let mut items = session_items();
    items.extend(tool_items());
    items.extend(discovery_items());
    items.extend(artifact_items());
    items.extend(mcp_items());
    items.extend(channel_items());
    items.extend(dev_items());
    items.extend(eval_items());
    items.extend(playground_items());
    items.extend(host_items());
    items
}

fn playground_items() -> Vec<PathItem> {
    let headers = || {
        json!({
            "ETag": {"schema": {"type": "string"}, "description": "A strong validator; send it back in `If-None-Match` to get `304`."},
            "Content-Security-Policy": {"schema": {"type": "string"}, "description": "Scripts, styles and fetches from this origin only."},
        })
    };
    vec![
        PathItem {
            path: "/playground",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getPlayground",
                    "playground",
                    "The web playground",
                    "The playground's page for this agent. It holds no agent data, so it runs no auth; the app calls the routes of this API with the token typed into its navbar. A `sessionId` query opens that session. Absent with `--no-playground`.",
                )
                .open()
                .response(
                    "200",
                    json!({
                        "description": "The page.",
                        "headers": headers(),
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }),
                )
                .response("304", json!({"description": "The copy named by `If-None-Match` is current."}))
                .build(),
            )],
        },
        PathItem {
            path: "/playground/assets/{file}",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getPlaygroundAsset",
                    "playground",
                    "One file of the web playground",
                    "A script, style sheet or icon of the playground, embedded in the binary. Any other name is `404 not_found`. Absent with `--no-playground`.",
                )
                .open()
                .param(path_param(
                    "file",
                    json!({"type": "string"}),
                    "The file name, for example `app.js`.",
                ))
                .response(
                    "200",
                    json!({
                        "description": "The file, as `text/javascript`, `text/css` or `image/svg+xml`.",
                        "headers": headers(),
                        "content": {"*/*": {"schema": {"type": "string"}}},
                    }),
                )
                .response("304", json!({"description": "The copy named by `If-None-Match` is current."}))
                .errors(&[Code::NotFound])
                .build(),
            )],
        },
    ]
}

fn dev_items() -> Vec<PathItem> {
    let id = || {
        path_param(
            "id",
            json!({"type": "string"}),
            "The reminder id (`rem_...`).",
        )
    };
    vec![
        PathItem {
            path: "/v1/dev/reminders",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listReminders",
                    "dev",
                    "List reminders",
                    "Every reminder of the agent, oldest first, in any state (armed, completed, cancelled, disarmed), with its fire count and next fire time. Only under `--dev`; otherwise `404 not_found`.",
                )
                .json("200", "The reminders.", "ReminderList")
                .errors(&[Code::NotFound])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/dev/reminders/{id}",
            mount: AGENT,
            operations: vec![(
                "post",
                Op::new(
                    "fireReminder",
                    "dev",
                    "Fire a reminder now",
                    "Fires an armed reminder once through the same delivery path as its timer: the prompt is sent into its conversation as a coalescing follow-up, or its handler tool is called. A recurring reminder keeps its next scheduled fire; a one-shot completes. Only under `--dev`; otherwise, and for an unknown id, `404 not_found`; a reminder that is no longer armed is `400 invalid_request`.",
                )
                .param(id())
                .json("200", "The reminder after the fire.", "ReminderFired")
                .errors(&[Code::NotFound, Code::InvalidRequest])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/dev/schedules",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listSchedules",
                    "dev",
                    "List schedules",
                    "Every discovered schedule with its next fire time, the latest scheduled minute that fired, how its last run ended (sessions, or the tool call of a tool schedule) and the fires skipped under the catch-up policy. Read from the agent's state, so a production run's history over the same state root shows too. Only under `--dev`; otherwise `404 not_found`.",
                )
                .json("200", "The schedules.", "ScheduleList")
                .errors(&[Code::NotFound])
                .protected()
                .build(),
            )],
        },
        PathItem {
        path: "/v1/dev/schedules/{id}",
        mount: AGENT,
        operations: vec![(
            "post",
            Op::new(
                "dispatchSchedule",
                "dev",
                "Fire a schedule now",
                "Fires the schedule once, through the same path as a fire on its cadence: a Markdown schedule starts a task session (channel `schedule`, principal `schedule:<name>`), a TOML schedule hands its message to its channel or calls its tool (the answer then carries `toolCall`, error results included). No claim is recorded, so the cadence is unaffected. Only under `--dev`; otherwise, and for an unknown schedule, `404 not_found`.",
            )
            .param(path_param(
                "id",
                json!({"type": "string"}),
                "The schedule name (its path under `agent/schedules/` without the extension).",
            ))
            .json("200", "The sessions the fire started or continued.", "ScheduleDispatched")
            .errors(&[
                Code::NotFound,
                Code::InvalidRequest,
                Code::WorkspaceUnavailable,
                Code::UnknownTool,
                Code::InvalidToolInput,
            ])
            .protected()
            .build(),
        )],
    },
    ]
}

fn eval_items() -> Vec<PathItem> {
    let id = || path_param("id", json!({"type": "string"}), "The run id (`evr_...`).");
    vec![
        PathItem {
            path: "/v1/dev/evals",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listEvals",
                    "evals",
                    "List eval cases",
                    "The cases discovered under `evals/` (read on every request) and the eval config. A project without `evals/` answers an empty list; files with problems answer the cases that loaded (none when there are errors) and `diagnostics`.",
                )
                .json("200", "The cases and config.", "EvalList")
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/dev/evals/runs",
            mount: AGENT,
            operations: vec![
                (
                    "get",
                    Op::new(
                        "listEvalRuns",
                        "evals",
                        "List eval runs",
                        "Recent runs, newest first, at most `maxPlaygroundRuns`; `activeRunId` names the run in progress.",
                    )
                    .json("200", "The runs.", "EvalRunList")
                    .protected()
                    .build(),
                ),
                (
                    "post",
                    Op::new(
                        "startEvalRun",
                        "evals",
                        "Start an eval run",
                        "Starts a run in the background and answers at once with its first snapshot; poll `GET /v1/dev/evals/runs/{id}`. Entries of `filterIds` (case ids, or id prefixes ending at a `/`) and of `tags` are alternatives; when both are given a case must match one of each. Every session the run opens has purpose `eval` and belongs to the caller. `404 no_matching_evals` when nothing matches, `409 eval_run_active` while another run is running, `400 invalid_evals` when the eval files have errors.",
                    )
                    .body(
                        "EvalRunRequest",
                        false,
                        "The selection; an empty body runs every case.",
                        json!({"filterIds": ["weather/current-conditions"], "tags": ["smoke"], "timeoutMs": 60000}),
                    )
                    .json("202", "The run started.", "EvalRunStarted")
                    .errors(&[Code::InvalidEvals, Code::NoMatchingEvals, Code::EvalRunActive])
                    .json_body_errors()
                    .protected()
                    .build(),
                ),
            ],
        },
        PathItem {
            path: "/v1/dev/evals/runs/{id}",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getEvalRun",
                    "evals",
                    "Get an eval run",
                    "The run's snapshot: `running` with case progress, then `completed` (every case ran; see `summary` for failures), `failed` (the run itself broke; see `error`) or `cancelled`.",
                )
                .param(id())
                .json("200", "The run.", "EvalRunView")
                .errors(&[Code::EvalRunNotFound])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/dev/evals/runs/{id}/cancel",
            mount: AGENT,
            operations: vec![(
                "post",
                Op::new(
                    "cancelEvalRun",
                    "evals",
                    "Cancel an eval run",
                    "Cancels the active run: running turns are stopped and unfinished cases end `cancelled`. Answers with the run once it settled (after a short wait it may still say `running`; poll then). `404 eval_run_not_found` for an unknown id, `409 eval_run_finished` when the run already ended.",
                )
                .param(id())
                .json("200", "The run after cancelling.", "EvalRunView")
                .errors(&[Code::EvalRunNotFound, Code::EvalRunFinished])
                .protected()
                .build(),
            )],
        },
    ]
}

fn session_items() -> Vec<PathItem> {
    vec![
        PathItem {
            path: "/v1/session",
            mount: AGENT,
            operations: vec![(
                "post",
                Op::new(
                    "startSession",
                    "sessions",
                    "Start a session",
                    "Creates a chat session on the `http` channel, owned by the caller. With a `message` the first turn starts in the background and the answer comes as soon as the message is accepted; without one the session is created idle and waits for a follow-up.",
                )
                .body(
                    "StartSessionRequest",
                    false,
                    "Every field is optional; an empty body counts as `{}`.",
                    json!({"message": "What is the weather in Paris?"}),
                )
                .json("200", "The session was created.", "StartSessionResponse")
                .json_body_errors()
                .errors(&[Code::InvalidAsOf])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}",
            mount: AGENT,
            operations: vec![
                (
                "post",
                Op::new(
                    "sendMessage",
                    "sessions",
                    "Send a follow-up message",
                    "Sends a message to a chat session. Every accepted follow-up replaces the continuation token (a refused one leaves it as it was); of two sends racing with the same token exactly one is accepted and the others answer `409 stale_continuation_token`. Sends without a token are admitted one at a time; one that loses a race to another replica answers `409 session_busy`.",
                )
                .param(session_id_param())
                .body(
                    "FollowUpRequest",
                    true,
                    "The message and, optionally, the current continuation token.",
                    json!({"message": "And in Tokyo?", "continuationToken": "http:…"}),
                )
                .json("200", "The message was accepted.", "FollowUpResponse")
                .json_body_errors()
                .errors(&[
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                    Code::StaleContinuationToken,
                    Code::TaskSession,
                    Code::SessionBusy,
                ])
                .protected()
                .build(),
                ),
                (
                    "delete",
                    Op::new(
                        "deleteSession",
                        "sessions",
                        "Delete a session",
                        "Removes the session: its record, its events and its workspace; its reminders are disarmed and its open streams end. A running turn is stopped first (recorded `turn.failed`, status `cancelled`, which open streams still receive) and queued coalesced messages are dropped. Only the owner may delete a session; a damaged session can be deleted too. `409 session_busy` when a turn another replica runs does not end in time, or a new turn was admitted while the delete waited.",
                    )
                    .param(session_id_param())
                    .json("200", "The session was deleted.", "DeleteSessionResponse")
                    .errors(&[
                        Code::Forbidden,
                        Code::SessionNotFound,
                        Code::InvalidSessionId,
                        Code::SessionBusy,
                    ])
                    .protected()
                    .build(),
                ),
            ],
        },
        PathItem {
            path: "/v1/session/{sessionId}/stream",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "streamEvents",
                    "sessions",
                    "Follow a session's events",
                    "Replays the session's events from `startIndex`, then sends new ones as they are recorded. The connection stays open until the client closes it, the session is deleted or the server shuts down. To resume after a disconnect, pass the last index received plus one.",
                )
                .param(session_id_param())
                .param(query_param(
                    "startIndex",
                    json!({"type": "integer", "minimum": 0, "default": 0}),
                    "The first event index to send; an index past the end waits for that event.",
                ))
                .response(
                    "200",
                    json!({
                        "description": "An NDJSON stream: one `Envelope` per line. While nothing happens an empty line is written every 15 seconds; skip blank lines.",
                        "headers": {
                            "Cache-Control": {"schema": {"type": "string", "const": "no-cache"}},
                            "X-Accel-Buffering": {
                                "description": "Asks reverse proxies not to buffer the stream.",
                                "schema": {"type": "string", "const": "no"},
                            },
                        },
                        "content": {"application/x-ndjson": {"schema": schema("Envelope")}},
                    }),
                )
                .errors(&[
                    Code::InvalidRequest,
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}/events",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listEvents",
                    "sessions",
                    "Dump a session's recorded events",
                    "The events recorded so far, without following: NDJSON by default, one JSON document with `format=json`.",
                )
                .param(session_id_param())
                .param(query_param(
                    "format",
                    json!({"type": "string", "enum": ["ndjson", "json"], "default": "ndjson"}),
                    "`ndjson` (one `Envelope` per line) or `json` (an `EventsResponse`).",
                ))
                .response(
                    "200",
                    json!({
                        "description": "The recorded events.",
                        "content": {
                            "application/x-ndjson": {"schema": schema("Envelope")},
                            "application/json": {"schema": schema("EventsResponse")},
                        },
                    }),
                )
                .errors(&[
                    Code::InvalidRequest,
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}/stop",
            mount: AGENT,
            operations: vec![(
                "post",
                Op::new(
                    "stopTurn",
                    "sessions",
                    "Stop the running turn",
                    "Interrupts the running turn without sending anything: it ends with `turn.failed`, status `cancelled`, and queued coalesced messages are dropped. The session stays a chat session. Answers once the turn has settled. Any request body is ignored.",
                )
                .param(session_id_param())
                .json("200", "`stopped` is false when no turn was running.", "StopResponse")
                .errors(&[
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                    Code::SessionBusy,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}/cost",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getCost",
                    "sessions",
                    "Token usage and estimated cost",
                    "One entry per ended turn (from `turn.completed` and `turn.failed`) and the totals. `estimatedCostUsd` is null for a model without a known price, and the total is null when any turn's is.",
                )
                .param(session_id_param())
                .json("200", "The session's usage.", "CostResponse")
                .errors(&[
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}/approvals",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listApprovals",
                    "approvals",
                    "Calls waiting for a decision",
                    "Calls of tools declared with `needs_approval` that are parked until someone approves or denies them.",
                )
                .param(session_id_param())
                .json("200", "The parked calls.", "ApprovalsResponse")
                .errors(&[
                    Code::Forbidden,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/session/{sessionId}/approvals/{callId}",
            mount: AGENT,
            operations: vec![(
                "post",
                Op::new(
                    "resolveApproval",
                    "approvals",
                    "Approve or deny a parked call",
                    "Records the decision and the approver's principal on `action.approval_resolved`; a denied call reaches the model as an error result.",
                )
                .param(session_id_param())
                .param(path_param(
                    "callId",
                    json!({"type": "string"}),
                    "The parked call, as listed by the approvals route.",
                ))
                .body(
                    "ApprovalDecision",
                    true,
                    "The decision.",
                    json!({"decision": "approve"}),
                )
                .json("200", "The decision was recorded.", "OkResponse")
                .json_body_errors()
                .errors(&[
                    Code::Forbidden,
                    Code::NotFound,
                    Code::SessionNotFound,
                    Code::SessionCorrupt,
                    Code::InvalidSessionId,
                    Code::ApprovalNotFound,
                ])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/sessions",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listSessions",
                    "sessions",
                    "List sessions",
                    "The caller's sessions, newest first (every session for a caller that sees everything: loopback callers under `--dev`, and everyone under `--allow-anonymous`). `continuationToken` is only included on sessions the caller owns.",
                )
                .json("200", "The sessions.", "SessionsResponse")
                .protected()
                .build(),
            )],
        },
    ]
}

fn tool_items() -> Vec<PathItem> {
    let name = || {
        path_param(
            "name",
            json!({"type": "string"}),
            "The tool's name, as in the catalog.",
        )
    };
    vec![
        PathItem {
            path: "/v1/tools",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listTools",
                    "tools",
                    "The tool catalog",
                    "The server tools: manifest tools with a `command` or a `url`, native tools and the enabled built-ins; everything that can be called directly or bound to a session.",
                )
                .json("200", "The tools.", "ToolsResponse")
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/tools/{name}",
            mount: AGENT,
            operations: vec![
                (
                    "get",
                    Op::new(
                        "getTool",
                        "tools",
                        "Describe one tool",
                        "One server tool or agent-execution tool.",
                    )
                    .param(name())
                    .json("200", "The tool.", "ToolResponse")
                    .errors(&[Code::UnknownTool, Code::NotFound])
                    .protected()
                    .build(),
                ),
                (
                    "post",
                    Op::new(
                        "callTool",
                        "tools",
                        "Call a tool directly",
                        "Runs a server tool with no model involved, after validating the input against the tool's schema. Bind the call to a session with `sessionId` or `continuationToken` (not both) to run it in that session's workspace and record it on its stream; otherwise it runs in a temporary workspace. A tool that fails is still a 200, with `isError: true`.",
                    )
                    .param(name())
                    .body(
                        "ToolCallRequest",
                        false,
                        "The input and, optionally, the session to bind to.",
                        json!({"input": {"city": "Paris"}}),
                    )
                    .json("200", "The tool ran.", "ToolCallResponse")
                    .json_body_errors()
                    .errors(&[
                        Code::InvalidToolInput,
                        Code::ToolNotCallable,
                        Code::InvalidContinuationToken,
                        Code::Forbidden,
                        Code::ToolNotExposed,
                        Code::ApprovalRequired,
                        Code::UnknownTool,
                        Code::SessionNotFound,
                        Code::SessionCorrupt,
                        Code::NotFound,
                        Code::SessionBusy,
                        Code::WorkspaceUnavailable,
                    ])
                    .protected()
                    .build(),
                ),
            ],
        },
    ]
}

fn discovery_items() -> Vec<PathItem> {
    vec![
        PathItem {
            path: "/v1/info",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getInfo",
                    "discovery",
                    "The agent's surface",
                    "Model, tools with their schemas, skills, subagents, MCP connections, channels, hooks, schedules, sandbox files and discovery diagnostics: the same JSON `bdk info --json` prints (it has no `ok` field).",
                )
                .json("200", "The agent's surface.", "Info")
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/meta",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getMeta",
                    "discovery",
                    "What a client needs first",
                    "The agent's name, base path, auth policy and server settings: what a browser client reads before its first call.",
                )
                .open()
                .json("200", "The agent's meta data.", "Meta")
                .build(),
            )],
        },
        PathItem {
            path: "/v1/health",
            mount: AGENT_AND_HOST,
            operations: vec![(
                "get",
                Op::new(
                    "getHealth",
                    "discovery",
                    "Liveness",
                    "Answers as long as the server runs. Served under each agent and at the root of a multi-agent server.",
                )
                .open()
                .json("200", "The server is up.", "Health")
                .build(),
            )],
        },
        PathItem {
            path: "/v1/openapi.json",
            mount: AGENT_AND_HOST,
            operations: vec![(
                "get",
                Op::new(
                    "getOpenApi",
                    "discovery",
                    "This document",
                    "The OpenAPI description of the HTTP surface. Under an agent its `servers` entry is the agent's base path; at the root of a multi-agent server it is `/{slug}` with the agents as the variable's values.",
                )
                .open()
                .json("200", "The OpenAPI 3.1 document.", "OpenApiDocument")
                .build(),
            )],
        },
        PathItem {
            path: "/v1/logs",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getLogs",
                    "discovery",
                    "Recent server log lines",
                    "Lines with a cursor above `after`, oldest first. Poll again with `after` set to `next`. The server keeps the most recent lines only.",
                )
                .param(query_param(
                    "after",
                    json!({"type": "integer", "minimum": 0, "default": 0}),
                    "Only lines with a greater cursor.",
                ))
                .param(query_param(
                    "limit",
                    json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 200}),
                    "At most this many lines.",
                ))
                .json("200", "The lines.", "LogsResponse")
                .errors(&[Code::InvalidRequest])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/memory",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getMemory",
                    "discovery",
                    "What the agent holds in memory for sessions",
                    "Gauges of the agent's per-session memory: sessions in use (a turn running or queued, a request in progress), the cached conversations of resting sessions within their budget (`bdk serve --session-cache`), and the store's per-session state. Resting sessions cost at most the budget; dropped conversations are rebuilt from the events on the next turn.",
                )
                .json("200", "The gauges.", "MemoryResponse")
                .protected()
                .build(),
            )],
        },
    ]
}

fn artifact_items() -> Vec<PathItem> {
    vec![
        PathItem {
            path: "/v1/artifacts",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "listArtifacts",
                    "artifacts",
                    "List artifacts",
                    "The artifacts the caller may see (its own, or all of them for a caller that sees every session), newest first.",
                )
                .param(query_param(
                    "kind",
                    json!({"type": "string"}),
                    "Only artifacts of this kind.",
                ))
                .param(query_param(
                    "sessionId",
                    json!({"type": "string"}),
                    "Only artifacts of this session.",
                ))
                .param(query_param(
                    "limit",
                    json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
                    "At most this many artifacts.",
                ))
                .json("200", "The artifacts.", "ArtifactsResponse")
                .errors(&[Code::InvalidRequest])
                .protected()
                .build(),
            )],
        },
        PathItem {
            path: "/v1/artifacts/{id}/content",
            mount: AGENT,
            operations: vec![(
                "get",
                Op::new(
                    "getArtifactContent",
                    "artifacts",
                    "Download an artifact",
                    "The bytes, as an attachment with the recorded content type and headers that keep a browser from running them as a page of this server. An unknown id, a malformed one and another principal's artifact all answer `404 not_found`.",
                )
                .param(path_param(
                    "id",
                    json!({"type": "string"}),
                    "The artifact id (`art_…`).",
                ))
                .response(
                    "200",
                    json!({
                        "description": "The artifact's bytes, with its recorded content type.",
                        "headers": {
                            "Content-Disposition": {"schema": {"type": "string"}, "description": "`attachment` with a sanitized file name."},
                            "X-Content-Type-Options": {"schema": {"type": "string", "const": "nosniff"}},
                            "Content-Security-Policy": {"schema": {"type": "string"}, "description": "A sandboxing policy."},
                        },
                        "content": {"*/*": {"schema": {}}},
                    }),
                )
                .errors(&[Code::NotFound])
                .protected()
                .build(),
            )],
        },
    ]
}

fn channel_operation(method: &str, with_path: bool) -> Value {
    let upper = method.to_ascii_uppercase();
    let suffix = if with_path { "Route" } else { "Root" };
    let mut op = Op::new(
        &format!("{method}Channel{suffix}"),
        "channels",
        &format!("A channel route declared with `method = \"{upper}\"`"),
        "Turns the request into a message for a session: authenticate (the server's policy, the route's own bearer token, or an HMAC signature of the raw body), validate the body and query against the route's schemas, render the message, continuation key and delivery id from the route's templates, then continue the session whose token is `<channel>:<key>` or start one. The turn runs in the background. Only the methods and paths the agent's channel manifests declare exist; the others answer `404 not_found` or `405 method_not_allowed`.",
    )
    .param(path_param(
        "channel",
        json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]*$"}),
        "The channel: the file name of `agent/channels/<channel>.toml`.",
    ));
    if with_path {
        op = op.param(path_param(
            "path",
            json!({"type": "string"}),
            "The route's `path` from the manifest, without its leading `/`. It may span several segments (`task/{id}`), despite the single-segment template.",
        ));
    }
    if method != "get" && method != "delete" {
        op.op.insert(
            "requestBody".into(),
            json!({
                "required": false,
                "description": "Any JSON value, checked against the route's `body_schema` when it has one. An empty body reads as `null`.",
                "content": {"application/json": {"schema": {}}},
            }),
        );
    }
    op.op.insert(
        "security".into(),
        json!([{"bearerAuth": []}, {"channelBearer": []}, {"channelSignature": []}, {}]),
    );
    op.json("202", "The message was accepted.", "ChannelAccepted")
        .errors(&[
            Code::InvalidJson,
            Code::InvalidBody,
            Code::InvalidQuery,
            Code::InvalidRequest,
            Code::Unauthorized,
            Code::Forbidden,
            Code::NotFound,
            Code::SessionNotFound,
            Code::SessionCorrupt,
            Code::MethodNotAllowed,
            Code::TaskSession,
            Code::RequestTimeout,
            Code::PayloadTooLarge,
            Code::UnsupportedMediaType,
        ])
        .build()
}

fn channel_items() -> Vec<PathItem> {
    vec![
        PathItem {
            path: "/v1/channels/{channel}",
            mount: AGENT,
            operations: CHANNEL_METHODS
                .iter()
                .map(|m| (*m, channel_operation(m, false)))
                .collect(),
        },
        PathItem {
            path: "/v1/channels/{channel}/{path}",
            mount: AGENT,
            operations: CHANNEL_METHODS
                .iter()
                .map(|m| (*m, channel_operation(m, true)))
                .collect(),
        },
    ]
}

/// One MCP endpoint: POST carries a JSON-RPC message; GET and DELETE are
/// refused because the server keeps no MCP session and opens no stream.
fn mcp_item(path: &'static str, id: &str, summary: &str, description: &str) -> PathItem {
    let refused = |verb: &str, what: &str| {
        Op::new(
            &format!("{id}{verb}"),
            "mcp",
            &format!("{what} (not supported)"),
            "This endpoint is stateless: there is no server-initiated stream and no MCP session, so the answer is always 405 with `Allow: POST`.",
        )
        .errors(&[Code::MethodNotAllowed])
        .protected()
        .build()
    };
    let plain = |description: &str| {
        json!({
            "description": description,
            "content": {"text/plain": {"schema": {"type": "string"}}},
        })
    };
    PathItem {
        path,
        mount: AGENT,
        operations: vec![
            (
                "post",
                Op::new(id, "mcp", summary, description)
                    .body(
                        "JsonRpcRequest",
                        true,
                        "One JSON-RPC 2.0 message (`initialize`, `tools/list`, `tools/call`, `ping`, or a notification). Send `Accept: application/json, text/event-stream`; a request without an Accept header is treated the same.",
                        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                    )
                    .json("200", "The JSON-RPC response (a failed tool call is a result with `isError: true`).", "JsonRpcResponse")
                    .response("202", json!({"description": "A notification or response was accepted; no body."}))
                    .response(
                        "400",
                        json!({
                            "description": "The body is not JSON (code -32700) or not a JSON-RPC message (-32600).",
                            "content": {"application/json": {"schema": schema("JsonRpcResponse")}},
                        }),
                    )
                    .response("406", plain("The Accept header names neither JSON nor event streams."))
                    .response("415", plain("The body is not sent as application/json."))
                    .errors(&[Code::RequestTimeout, Code::PayloadTooLarge])
                    .protected()
                    .build(),
            ),
            ("get", refused("Stream", "Open a server stream")),
            ("delete", refused("End", "End an MCP session")),
        ],
    }
}

fn mcp_items() -> Vec<PathItem> {
    vec![
        mcp_item(
            "/v1/mcp",
            "mcp",
            "Talk to the agent over MCP",
            "MCP tools `ask` (start or continue a chat session owned by the caller and wait up to `waitMs` for the reply), `check` (a session's status, latest reply and recent tool calls) and, when the agent has server tools, `call_tool` (a direct call with no model involved). Errors are tool results with `isError: true` whose text starts with the error code.",
        ),
        mcp_item(
            "/v1/mcp/tools",
            "mcpTools",
            "The agent's server tools over MCP",
            "Every deterministic server tool as an MCP tool under its own name, with its input and output schemas; `readOnlyHint` is true for read tools. Results carry structured content (for object results) and the same value as text.",
        ),
    ]
}

fn html(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"text/html": {"schema": {"type": "string"}}},
    })
}

fn host_items() -> Vec<PathItem> {
    vec![
        PathItem {
            path: "/",
            mount: HOST,
            operations: vec![(
                "get",
                Op::new(
                    "getIndex",
                    "host",
                    "The agents, as a web page",
                    "An HTML list of the agents this server hosts (multi-agent layout only).",
                )
                .open()
                .response("200", html("The index page."))
                .build(),
            )],
        },
        PathItem {
            path: "/v1/agents",
            mount: HOST,
            operations: vec![(
                "get",
                Op::new(
                    "listAgents",
                    "host",
                    "The agents, as JSON",
                    "The agents this server hosts (multi-agent layout only).",
                )
                .open()
                .json("200", "The agents.", "AgentsResponse")
                .build(),
            )],
        },
        PathItem {
            path: "/docs",
            mount: SERVER,
            operations: vec![(
                "get",
                Op::new(
                    "docsRedirect",
                    "docs",
                    "The documentation",
                    "Redirects to `/docs/`. Absent with `--no-docs`.",
                )
                .open()
                .response(
                    "308",
                    json!({
                        "description": "A permanent redirect.",
                        "headers": {"Location": {"schema": {"type": "string", "const": "/docs/"}}},
                    }),
                )
                .build(),
            )],
        },
        PathItem {
            path: "/docs/",
            mount: SERVER,
            operations: vec![(
                "get",
                Op::new(
                    "docsIndex",
                    "docs",
                    "The documentation index",
                    "The documentation's index page, rendered from Markdown. Absent with `--no-docs`.",
                )
                .open()
                .response("200", html("The index page."))
                .build(),
            )],
        },
        PathItem {
            path: "/docs/{path}",
            mount: SERVER,
            operations: vec![(
                "get",
                Op::new(
                    "docsPage",
                    "docs",
                    "One documentation page",
                    "A page of the documentation, named with or without `.md`, rendered from Markdown. Absent with `--no-docs`.",
                )
                .open()
                .param(path_param(
                    "path",
                    json!({"type": "string"}),
                    "The page, for example `http-api` or `http-api.md`; it may span several segments.",
                ))
                .response("200", html("The page."))
                .errors(&[Code::NotFound])
                .build(),
            )],
        },
    ]
}

fn ok_true() -> Value {
    json!({"const": true})
}

fn schemas() -> Value {
    let mut s = Map::new();
    let mut put = |name: &str, value: Value| {
        s.insert(name.to_owned(), value);
    };

    put(
        "ErrorCode",
        json!({
            "type": "string",
            "description": "The stable code of an error.",
            "enum": Code::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        }),
    );
    put(
        "Error",
        json!({
            "type": "object",
            "description": "The body of every error answer.",
            "required": ["ok", "error", "message"],
            "properties": {
                "ok": {"const": false},
                "error": schema("ErrorCode"),
                "message": text("For people; may change between versions."),
                "available": {
                    "type": "array", "items": {"type": "string"},
                    "description": "With `unknown_tool`: the tools that can be called.",
                },
                "errors": {
                    "type": "array", "items": {"type": "string"},
                    "description": "With `invalid_tool_input`, `invalid_body` and `invalid_query`: one entry per violation.",
                },
            },
        }),
    );
    put(
        "SessionId",
        json!({"type": "string", "pattern": "^ses_.+", "examples": ["ses_01jh8k3m2n4p5q6r7s8t9v0w1x"]}),
    );
    put("TurnId", json!({"type": "string", "pattern": "^turn_.+"}));
    put(
        "ContinuationToken",
        json!({
            "type": "string",
            "description": "`http:…` (opaque, rotated on every accepted follow-up) for sessions of this API; `<channelId>:<key>` for channel sessions.",
        }),
    );
    put(
        "DeliveryId",
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 256,
            "description": "The id of one send: the caller's (1-256 characters, no control characters) or a generated `dlv_…`.",
        }),
    );
    put(
        "SessionMode",
        json!({"type": "string", "enum": ["chat", "task"]}),
    );
    put(
        "Admission",
        json!({
            "type": "string",
            "enum": ["preempt", "coalesce"],
            "default": "preempt",
            "description": "`preempt` interrupts a running turn, waits for it to settle, then runs the message; `coalesce` queues it, to be picked up at the running turn's next tool boundary or as the next turn.",
        }),
    );
    put(
        "WorkspaceFiles",
        json!({
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Files written into the session workspace before the turn: relative path to content. An absolute path, a `\\` or a `..` that leaves the workspace is `400 invalid_request`.",
        }),
    );
    put(
        "StartSessionRequest",
        json!({
            "type": "object",
            "properties": {
                "message": text("The first message; must not be blank. Without it the session is created idle."),
                "title": text("A display title."),
                "dryRun": {"type": "boolean", "default": false, "description": "Run read tools, stub write tools."},
                "asOf": {"type": "string", "format": "date-time", "description": "An RFC 3339 instant with a zone; tools see it as now, and time arguments later than it are refused."},
                "workspaceFiles": schema("WorkspaceFiles"),
                "purpose": text("Free-form; `eval` marks regression traffic."),
                "deliveryId": schema("DeliveryId"),
            },
        }),
    );
    put(
        "StartSessionResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessionId", "continuationToken", "traceUrl"],
            "properties": {
                "ok": ok_true(),
                "sessionId": schema("SessionId"),
                "continuationToken": schema("ContinuationToken"),
                "deliveryId": schema("DeliveryId"),
                "turnId": schema("TurnId"),
                "traceUrl": text("Where the session's events can be read, absolute when the request named a usable host."),
                "playgroundUrl": text("The session in the playground, when it is mounted."),
            },
        }),
    );
    put(
        "FollowUpRequest",
        json!({
            "type": "object",
            "required": ["message"],
            "properties": {
                "message": text("The message; must not be blank."),
                "continuationToken": {
                    "allOf": [schema("ContinuationToken")],
                    "description": "The token of the last accepted send. Optional; when given it must be current.",
                },
                "admission": schema("Admission"),
                "deliveryId": schema("DeliveryId"),
                "workspaceFiles": schema("WorkspaceFiles"),
            },
        }),
    );
    put(
        "FollowUpResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessionId", "continuationToken", "deliveryId"],
            "properties": {
                "ok": ok_true(),
                "sessionId": schema("SessionId"),
                "continuationToken": {
                    "allOf": [schema("ContinuationToken")],
                    "description": "The new token: keep it for the next follow-up.",
                },
                "deliveryId": schema("DeliveryId"),
                "turnId": {
                    "allOf": [schema("TurnId")],
                    "description": "Absent when a coalesced message was queued behind the running turn.",
                },
            },
        }),
    );
    put(
        "EventType",
        json!({
            "type": "string",
            "description": "The event vocabulary; `docs/events.md` describes each type's `data`.",
            "enum": bdk_events::EVENT_TYPES,
        }),
    );
    put(
        "Envelope",
        json!({
            "type": "object",
            "description": "One recorded event. `index` starts at 0 and grows by exactly one per session.",
            "required": ["type", "index", "sessionId", "at", "data"],
            "properties": {
                "type": schema("EventType"),
                "index": {"type": "integer", "minimum": 0},
                "sessionId": schema("SessionId"),
                "turnId": schema("TurnId"),
                "at": {"type": "string", "format": "date-time"},
                "data": {"type": "object", "description": "The event's fields; their shape depends on `type`."},
            },
        }),
    );
    put(
        "EventsResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessionId", "events"],
            "properties": {
                "ok": ok_true(),
                "sessionId": schema("SessionId"),
                "events": {"type": "array", "items": schema("Envelope")},
                "playgroundUrl": text("The session in the playground, when it is mounted."),
            },
        }),
    );
    put(
        "StopResponse",
        json!({
            "type": "object",
            "required": ["ok", "stopped"],
            "properties": {"ok": ok_true(), "stopped": {"type": "boolean"}},
        }),
    );
    put(
        "DeleteSessionResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessionId"],
            "properties": {"ok": ok_true(), "sessionId": schema("SessionId")},
        }),
    );
    put(
        "ScheduleDispatched",
        json!({
            "type": "object",
            "required": ["ok", "scheduleId", "sessionIds"],
            "properties": {
                "ok": ok_true(),
                "scheduleId": {"type": "string", "description": "The schedule name."},
                "sessionIds": {"type": "array", "items": schema("SessionId")},
                "toolCall": schema("ScheduleToolCall"),
            },
        }),
    );
    put(
        "ScheduleToolCall",
        json!({
            "type": "object",
            "description": "The direct call a tool schedule made, as the principal `schedule:<name>`.",
            "required": ["toolName", "callId", "isError", "result", "durationMs"],
            "properties": {
                "toolName": text("The tool."),
                "callId": text("The call id (`tool_<name>_...`)."),
                "isError": {"type": "boolean", "description": "True when the tool answered an error."},
                "result": {"description": "What the tool returned."},
                "durationMs": {"type": "integer", "minimum": 0},
            },
        }),
    );
    put(
        "ScheduleStatus",
        json!({
            "type": "object",
            "required": ["name", "cron", "kind"],
            "properties": {
                "name": text("The schedule name."),
                "cron": text("Its 5-field UTC cron expression."),
                "kind": {"type": "string", "enum": ["prompt", "handoff", "tool"]},
                "nextFireAt": {"type": "string", "format": "date-time", "description": "The next scheduled minute after now."},
                "lastClaimedFor": {"type": "string", "format": "date-time", "description": "The latest scheduled minute that fired (claimed) on record."},
                "lastRun": {
                    "type": "object",
                    "description": "How the latest fire (scheduled or by hand) ended.",
                    "required": ["finishedAt", "ok", "sessionIds"],
                    "properties": {
                        "finishedAt": {"type": "string", "format": "date-time"},
                        "scheduledFor": {"type": "string", "format": "date-time", "description": "The scheduled minute; absent for a dispatch by hand."},
                        "ok": {"type": "boolean"},
                        "sessionIds": {"type": "array", "items": schema("SessionId")},
                        "toolCall": schema("ScheduleToolCall"),
                        "error": text("Why the fire failed."),
                    },
                },
                "missed": {
                    "type": "object",
                    "description": "Fires skipped under the catch-up policy (skip).",
                    "required": ["schedule", "policy", "total", "incidents"],
                    "properties": {
                        "schedule": text("The schedule name."),
                        "policy": {"type": "string", "enum": ["skip"]},
                        "total": {"type": "integer", "minimum": 0},
                        "incidents": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["detectedAt", "reason", "count", "skipped"],
                                "properties": {
                                    "detectedAt": {"type": "string", "format": "date-time"},
                                    "reason": {"type": "string", "enum": ["server_down", "late_wake"]},
                                    "count": {"type": "integer", "minimum": 0},
                                    "skipped": {"type": "array", "items": {"type": "string", "format": "date-time"}},
                                },
                            },
                        },
                    },
                },
            },
        }),
    );
    put(
        "ScheduleList",
        json!({
            "type": "object",
            "required": ["ok", "schedules"],
            "properties": {
                "ok": ok_true(),
                "schedules": {"type": "array", "items": schema("ScheduleStatus")},
            },
        }),
    );
    put(
        "Reminder",
        json!({
            "type": "object",
            "required": ["id", "sessionId", "kind", "schedule", "status", "fireCount", "createdAt"],
            "properties": {
                "id": text("The reminder id (`rem_...`)."),
                "sessionId": schema("SessionId"),
                "kind": {"type": "string", "enum": ["delay", "every", "cron", "at"]},
                "schedule": text("The schedule as given: a duration, a 5-field UTC cron expression or an RFC 3339 time."),
                "prompt": text("The message sent into the conversation (prompt form)."),
                "until": text("The standing cancellation condition shown to the model."),
                "handler": text("The server tool called on fire (handler form)."),
                "args": {"description": "The handler's input."},
                "status": {"type": "string", "enum": ["armed", "completed", "cancelled", "disarmed"]},
                "reason": text("Why the host disarmed it (`handler_lost_on_restart`, `session_deleted`)."),
                "fireCount": {"type": "integer", "minimum": 0},
                "nextFireAt": {"type": "string", "format": "date-time"},
                "lastFiredAt": {"type": "string", "format": "date-time"},
                "lastError": text("The last delivery failure."),
                "createdAt": {"type": "string", "format": "date-time"},
            },
        }),
    );
    put(
        "EvalCase",
        json!({
            "type": "object",
            "required": ["id", "file", "tags", "metadata", "iterations", "minPassRate", "messages"],
            "properties": {
                "id": text("`<path under evals/ without .eval.toml>/<case name>`."),
                "file": text("The case file, relative to the project root."),
                "description": {"type": ["string", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "metadata": {"type": "object", "description": "File metadata with the case's merged over it."},
                "timeoutMs": {"type": ["integer", "null"], "minimum": 1},
                "iterations": {"type": "integer", "minimum": 1},
                "minPassRate": {"type": "number", "minimum": 0, "maximum": 1},
                "judge": {"type": ["string", "null"], "description": "The judge model, when the case has one."},
                "messages": {"type": "array", "items": {"type": "string"}, "description": "The messages its steps send, in order."},
            },
        }),
    );
    put(
        "EvalList",
        json!({
            "type": "object",
            "required": ["ok", "evals", "config", "diagnostics"],
            "properties": {
                "ok": ok_true(),
                "evals": {"type": "array", "items": schema("EvalCase")},
                "config": {
                    "type": "object",
                    "required": ["maxConcurrency", "maxPlaygroundRuns", "persistRuns", "durableRuns"],
                    "properties": {
                        "maxConcurrency": {"type": "integer", "minimum": 1, "maximum": 200},
                        "timeoutMs": {"type": ["integer", "null"]},
                        "judge": {"type": ["string", "null"]},
                        "maxPlaygroundRuns": {"type": "integer", "minimum": 1},
                        "persistRuns": {"type": "boolean"},
                        "durableRuns": {"type": "boolean", "description": "Whether this server keeps runs in its store."},
                    },
                },
                "diagnostics": {"type": "array", "items": {"type": "object"}},
            },
        }),
    );
    put(
        "EvalRunRequest",
        json!({
            "type": "object",
            "properties": {
                "filterIds": {"type": "array", "maxItems": 500, "items": {"type": "string", "minLength": 1, "maxLength": 300}},
                "tags": {"type": "array", "maxItems": 500, "items": {"type": "string", "minLength": 1, "maxLength": 300}},
                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 3600000, "description": "Per-case timeout; a case's or file's own timeout wins."},
                "verbose": {"type": "boolean", "description": "Keep whole replies of passing turns."},
            },
        }),
    );
    put(
        "EvalFailure",
        json!({
            "type": "object",
            "required": ["assertion", "scope", "message"],
            "properties": {
                "assertion": text("The assertion as written, like `calledTool(\"get_weather\")`."),
                "scope": text("`case`, or `turn N` for an assertion on one turn."),
                "message": text("What went wrong."),
                "event": {
                    "type": "object",
                    "required": ["index", "type"],
                    "description": "The event that broke it: the offending event, or the last one inspected when something expected never happened.",
                    "properties": {"index": {"type": "integer", "minimum": 0}, "type": {"type": "string"}},
                },
            },
        }),
    );
    put(
        "EvalIteration",
        json!({
            "type": "object",
            "required": ["iteration", "status", "durationMs", "failures", "scores", "assertions", "turns"],
            "properties": {
                "iteration": {"type": "integer", "minimum": 1},
                "status": {"type": "string", "enum": ["passed", "failed", "timeout", "cancelled"]},
                "durationMs": {"type": "integer", "minimum": 0},
                "failures": {"type": "array", "items": schema("EvalFailure")},
                "scores": {"type": "array", "items": {
                    "type": "object", "required": ["name", "value"],
                    "properties": {"name": {"type": "string"}, "value": {"type": "number", "minimum": 0, "maximum": 1}},
                }},
                "assertions": {"type": "integer", "minimum": 0},
                "turns": {"type": "array", "items": {
                    "type": "object",
                    "required": ["index", "prompt", "message", "ok", "toolCalls"],
                    "properties": {
                        "index": {"type": "integer", "minimum": 1},
                        "prompt": {"type": "string"},
                        "message": {"type": "string"},
                        "ok": {"type": "boolean"},
                        "toolCalls": {"type": "array", "items": {"type": "string"}},
                    },
                }},
                "sessionId": schema("SessionId"),
                "stopped": text("Why the case body stopped early (a require form, expect_ok, a send error, the timeout, a cancel)."),
            },
        }),
    );
    put(
        "EvalCaseResult",
        json!({
            "type": "object",
            "required": ["id", "file", "tags", "metadata", "status", "passRate", "minPassRate", "iterationCount", "iterations", "durationMs"],
            "properties": {
                "id": {"type": "string"},
                "file": {"type": "string"},
                "description": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "metadata": {"type": "object"},
                "status": {"type": "string", "enum": ["pending", "running", "passed", "failed", "cancelled"]},
                "passRate": {"type": "number", "minimum": 0, "maximum": 1},
                "minPassRate": {"type": "number", "minimum": 0, "maximum": 1},
                "iterationCount": {"type": "integer", "minimum": 1},
                "iterations": {"type": "array", "items": schema("EvalIteration")},
                "durationMs": {"type": "integer", "minimum": 0},
            },
        }),
    );
    put(
        "EvalRun",
        json!({
            "type": "object",
            "required": ["runId", "status", "options", "startedAt", "durationMs", "summary", "cases"],
            "properties": {
                "runId": text("`evr_...`."),
                "status": {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]},
                "options": schema("EvalRunRequest"),
                "startedAt": {"type": "string", "format": "date-time"},
                "finishedAt": {"type": "string", "format": "date-time"},
                "durationMs": {"type": "integer", "minimum": 0},
                "summary": {
                    "type": "object",
                    "required": ["total", "passed", "failed", "cancelled"],
                    "properties": {
                        "total": {"type": "integer", "minimum": 0},
                        "passed": {"type": "integer", "minimum": 0},
                        "failed": {"type": "integer", "minimum": 0},
                        "cancelled": {"type": "integer", "minimum": 0, "description": "Cancelled, or not finished yet."},
                    },
                },
                "cases": {"type": "array", "items": schema("EvalCaseResult")},
                "error": text("What broke the run, when its status is `failed`."),
            },
        }),
    );
    put(
        "EvalRunList",
        json!({
            "type": "object",
            "required": ["ok", "runs"],
            "properties": {
                "ok": ok_true(),
                "runs": {"type": "array", "items": schema("EvalRun")},
                "activeRunId": text("The run in progress, when there is one."),
            },
        }),
    );
    put(
        "EvalRunStarted",
        json!({
            "type": "object",
            "required": ["ok", "runId", "run"],
            "properties": {"ok": ok_true(), "runId": {"type": "string"}, "run": schema("EvalRun")},
        }),
    );
    put(
        "EvalRunView",
        json!({
            "type": "object",
            "required": ["ok", "run"],
            "properties": {"ok": ok_true(), "run": schema("EvalRun")},
        }),
    );
    put(
        "ReminderList",
        json!({
            "type": "object",
            "required": ["ok", "reminders"],
            "properties": {
                "ok": ok_true(),
                "reminders": {"type": "array", "items": schema("Reminder")},
            },
        }),
    );
    put(
        "ReminderFired",
        json!({
            "type": "object",
            "required": ["ok", "reminder", "result", "turnId"],
            "properties": {
                "ok": ok_true(),
                "reminder": schema("Reminder"),
                "result": {"type": "string", "enum": ["delivered", "skip", "stop", "failed", "disarmed"], "description": "`disarmed` when the reminder's session no longer exists: it is disarmed with reason `session_deleted` instead of firing."},
                "turnId": {"type": ["string", "null"], "description": "The turn the fire started; null when it started none."},
            },
        }),
    );
    put(
        "SessionSummary",
        json!({
            "type": "object",
            "required": ["sessionId", "mode", "channel", "title", "principal", "createdAt", "updatedAt"],
            "properties": {
                "sessionId": schema("SessionId"),
                "mode": schema("SessionMode"),
                "channel": text("`http`, `cli` or a custom channel id."),
                "title": nullable("string", "The display title."),
                "principal": nullable("string", "The owner; null for sessions created without one."),
                "createdAt": {"type": "string", "format": "date-time"},
                "updatedAt": {"type": "string", "format": "date-time"},
                "continuationToken": {
                    "allOf": [schema("ContinuationToken")],
                    "description": "Only on sessions the caller owns.",
                },
            },
        }),
    );
    put(
        "SessionsResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessions"],
            "properties": {
                "ok": ok_true(),
                "sessions": {"type": "array", "items": schema("SessionSummary")},
            },
        }),
    );
    put(
        "Usage",
        json!({
            "type": "object",
            "required": ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"],
            "properties": {
                "inputTokens": {"type": "integer", "minimum": 0},
                "outputTokens": {"type": "integer", "minimum": 0},
                "cacheReadTokens": {"type": "integer", "minimum": 0},
                "cacheWriteTokens": {"type": "integer", "minimum": 0},
            },
        }),
    );
    put(
        "CostTurn",
        json!({
            "type": "object",
            "required": ["turnId", "status", "model", "usage", "durationMs", "estimatedCostUsd"],
            "properties": {
                "turnId": {"oneOf": [schema("TurnId"), {"type": "null"}]},
                "status": {"type": "string", "enum": ["completed", "failed", "cancelled", "interrupted"]},
                "model": nullable("string", "`provider/model`; null when the turn never reached a model."),
                "usage": {"oneOf": [schema("Usage"), {"type": "null"}], "description": "Null when the server reported no token usage for some step of the turn (unknown, not zero)."},
                "durationMs": nullable("integer", "Null when the turn's start was not recorded."),
                "estimatedCostUsd": nullable("number", "Null when the model has no known price or the usage is unknown."),
            },
        }),
    );
    put(
        "CostResponse",
        json!({
            "type": "object",
            "required": ["ok", "sessionId", "turns", "totals"],
            "properties": {
                "ok": ok_true(),
                "sessionId": schema("SessionId"),
                "turns": {"type": "array", "items": schema("CostTurn")},
                "totals": {
                    "type": "object",
                    "required": ["turns", "usage", "durationMs", "estimatedCostUsd"],
                    "properties": {
                        "turns": {"type": "integer", "minimum": 0},
                        "usage": {"oneOf": [schema("Usage"), {"type": "null"}], "description": "Null when any turn's usage is unknown."},
                        "durationMs": {"type": "integer", "minimum": 0},
                        "estimatedCostUsd": nullable("number", "Null when any turn's cost is unknown."),
                    },
                },
            },
        }),
    );
    put(
        "Approval",
        json!({
            "type": "object",
            "required": ["callId", "name", "input", "requestedAt"],
            "properties": {
                "callId": {"type": "string"},
                "name": text("The tool."),
                "input": {"description": "The validated input."},
                "requestedAt": {"type": "string", "format": "date-time"},
            },
        }),
    );
    put(
        "ApprovalsResponse",
        json!({
            "type": "object",
            "required": ["ok", "approvals"],
            "properties": {
                "ok": ok_true(),
                "approvals": {"type": "array", "items": schema("Approval")},
            },
        }),
    );
    put(
        "ApprovalDecision",
        json!({
            "type": "object",
            "required": ["decision"],
            "properties": {
                "decision": {"type": "string", "enum": ["approve", "deny"]},
                "reason": text("Why; recorded with the decision."),
            },
        }),
    );
    put(
        "OkResponse",
        json!({"type": "object", "required": ["ok"], "properties": {"ok": ok_true()}}),
    );
    put(
        "Tool",
        json!({
            "type": "object",
            "required": ["name", "title", "source", "description", "effect", "execution", "needsApproval", "timeoutMs", "inputSchema", "outputSchema"],
            "properties": {
                "name": {"type": "string"},
                "title": nullable("string", "The display title the tool declares (`title` in its manifest, the MCP server's title, `NativeTool::title`); null when it declares none."),
                "source": schema("ToolSource"),
                "description": {"type": "string"},
                "effect": {"type": "string", "enum": ["read", "write"]},
                "execution": {"type": "string", "enum": ["server", "agent"]},
                "needsApproval": {"type": "boolean"},
                "timeoutMs": nullable("integer", "The tool's own timeout; null for the default."),
                "inputSchema": {"description": "The JSON Schema of the input."},
                "outputSchema": {"description": "The JSON Schema of the output, or null when none is declared."},
            },
        }),
    );
    put(
        "ToolSource",
        json!({
            "type": "string",
            "pattern": "^(builtin|manifest|native|mcp:.+)$",
            "description": "Where the tool comes from: `builtin` (a runtime tool), `manifest` (`agent/tools/<name>.toml`), `native` (Rust, given to the host), or `mcp:<connection>` (advertised by that MCP connection).",
        }),
    );
    put(
        "ToolsResponse",
        json!({
            "type": "object",
            "required": ["ok", "tools"],
            "properties": {"ok": ok_true(), "tools": {"type": "array", "items": schema("Tool")}},
        }),
    );
    put(
        "ToolResponse",
        json!({
            "type": "object",
            "required": ["ok", "tool"],
            "properties": {"ok": ok_true(), "tool": schema("Tool")},
        }),
    );
    put(
        "ToolCallRequest",
        json!({
            "type": "object",
            "properties": {
                "input": {"description": "The tool input; omitted or null means `{}`."},
                "sessionId": text("Run inside this session: its workspace, its owner check, the call recorded on its stream."),
                "continuationToken": text("Or bind by token, `<channelId>:<key>` (as `/v1/sessions` shows it). Not together with `sessionId`; a token that matches no session runs the call in a temporary workspace with the token as its identity."),
                "approve": {"type": "boolean", "description": "Approve a `needs_approval` tool by calling it; recorded with the caller's principal (`action.approval_*` events in a bound session, the server log otherwise). Without it such a tool answers 403 `approval_required`."},
            },
        }),
    );
    put(
        "ToolCallResponse",
        json!({
            "type": "object",
            "required": ["ok", "toolName", "callId", "isError", "result", "durationMs"],
            "properties": {
                "ok": ok_true(),
                "toolName": {"type": "string"},
                "callId": text("`tool_<name>_…`."),
                "isError": {"type": "boolean", "description": "True when the tool failed; `result` is then the failure, as the model would see it."},
                "result": {"description": "The tool's result."},
                "durationMs": {"type": "integer", "minimum": 0},
                "scratchWorkspace": {"type": "boolean", "description": "Present (true) when a session-bound read ran in a temporary workspace because the session's could not be created."},
                "sessionId": schema("SessionId"),
                "approvedBy": text("Who approved the call, for a `needs_approval` tool: the caller's principal."),
            },
        }),
    );
    put(
        "Info",
        json!({
            "type": "object",
            "description": "The agent's surface, as `bdk info --json` prints it.",
            "required": ["name", "model", "tools", "skills", "subagents", "mcpConnections", "channels", "hooks", "schedules", "diagnostics"],
            "properties": {
                "name": {"type": "string"},
                "description": nullable("string", "From `agent.toml`."),
                "model": nullable("string", "`provider/model` from `agent.toml`; null for the default."),
                "effort": nullable("string", "Reasoning effort."),
                "maxSteps": nullable("integer", "Step limit of a turn."),
                "maxRunningTurns": nullable("integer", "Turns beyond it are queued."),
                "builtinTools": {"type": "object", "description": "Which built-in tools are on."},
                "instructions": {
                    "type": "object",
                    "properties": {
                        "files": {"type": "array", "items": {"type": "string"}},
                        "chars": {"type": "integer", "minimum": 0},
                    },
                },
                "tools": {"type": "array", "description": "Manifest tools, then advertised MCP tools and native tools (built-ins are summarized under `builtinTools`).", "items": {"type": "object", "required": ["name", "title", "source", "description", "effect", "execution", "inputSchema"], "properties": {
                    "name": {"type": "string"},
                    "title": nullable("string", "The declared display title, or null."),
                    "source": schema("ToolSource"),
                    "description": {"type": "string"},
                    "effect": {"type": "string", "enum": ["read", "write"]},
                    "execution": {"type": "string", "enum": ["server", "agent"]},
                    "needsApproval": {"type": "boolean"},
                    "timeoutMs": nullable("integer", "The tool's own timeout; null for the default."),
                    "inputSchema": {"description": "The JSON Schema of the input."},
                    "outputSchema": {"description": "The JSON Schema of the output, or null."},
                    "runner": {"type": "string", "enum": ["command", "url", "script"], "description": "Manifest tools only."},
                    "file": {"type": "string", "description": "Manifest tools only: the manifest, relative to the project."},
                }}},
                "skills": {"type": "array", "items": {"type": "object"}},
                "subagents": {"type": "array", "items": {"type": "object"}},
                "mcpConnections": {"type": "array", "items": {"type": "object"}},
                "channels": {"type": "array", "items": {"type": "object", "required": ["name", "routes"], "properties": {
                    "name": {"type": "string"},
                    "description": nullable("string", "From the channel manifest."),
                    "routes": {"type": "array", "items": {
                        "type": "object",
                        "required": ["method", "path", "fullPath", "description", "mode", "bodySchema", "querySchema"],
                        "properties": {
                            "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                            "path": text("The route's path relative to `/v1/channels/<name>`, as declared (`/` for the channel's own URL)."),
                            "fullPath": text("The path under the agent's base path: `/v1/channels/<name>...`."),
                            "description": nullable("string", "From the route."),
                            "mode": {"type": "string", "enum": ["chat", "task"], "description": "The mode of the sessions it starts."},
                            "bodySchema": {"description": "The JSON Schema the body is checked against (`body_schema`), or null when undeclared."},
                            "querySchema": {"description": "The JSON Schema the query is checked against (`query_schema`), or null when undeclared."},
                        },
                    }, "description": "Each route answers `ChannelAccepted` (the routes declare no output schema of their own)."},
                }}},
                "hooks": {"type": "array", "items": {"type": "object"}},
                "schedules": {"type": "array", "items": {"type": "object"}},
                "sandboxFiles": {"type": "array", "items": {"type": "string"}},
                "scriptedRules": {"type": "array", "items": {"type": "string"}},
                "evals": {"type": "boolean"},
                "diagnostics": {"type": "array", "items": {"type": "object", "properties": {
                    "severity": {"type": "string"},
                    "file": {"type": "string"},
                    "message": {"type": "string"},
                    "fix": {"type": "string"},
                }}},
            },
        }),
    );
    put(
        "Meta",
        json!({
            "type": "object",
            "required": ["ok", "agent", "slug", "description", "dev", "basePath", "auth", "playground", "version"],
            "properties": {
                "ok": ok_true(),
                "agent": text("The agent's name."),
                "slug": nullable("string", "Null in single mode."),
                "description": nullable("string", "From `agent.toml`."),
                "dev": {"type": "boolean", "description": "The server runs with `--dev`."},
                "basePath": text("`/<slug>`, or empty in single mode."),
                "auth": {"type": "string", "enum": ["localDevStrict", "bearer", "anonymous"]},
                "playground": {"type": "boolean"},
                "version": text("The server's version."),
            },
        }),
    );
    put(
        "Health",
        json!({"type": "object", "required": ["ok"], "properties": {"ok": ok_true()}}),
    );
    put(
        "LogLine",
        json!({
            "type": "object",
            "required": ["cursor", "at", "level", "target", "message"],
            "properties": {
                "cursor": {"type": "integer", "minimum": 1},
                "at": {"type": "string", "format": "date-time"},
                "level": text("`error`, `warn`, `info`, `debug` or `trace`."),
                "target": text("The component that logged the line."),
                "message": {"type": "string"},
            },
        }),
    );
    put(
        "LogsResponse",
        json!({
            "type": "object",
            "required": ["ok", "lines", "next"],
            "properties": {
                "ok": ok_true(),
                "lines": {"type": "array", "items": schema("LogLine")},
                "next": {"type": "integer", "minimum": 0, "description": "Pass it as `after` to poll for newer lines."},
            },
        }),
    );
    let count =
        |description: &str| json!({"type": "integer", "minimum": 0, "description": description});
    put(
        "MemoryResponse",
        json!({
            "type": "object",
            "required": [
                "ok", "activeSessions", "cachedTranscripts", "cachedTranscriptBytes",
                "transcriptBudgetBytes", "evictedTranscripts", "storeResidentSessions",
                "storeEvictedSessions",
            ],
            "properties": {
                "ok": ok_true(),
                "activeSessions": count("Sessions in use right now: a turn running or queued, a send, stop or direct call in progress."),
                "cachedTranscripts": count("Resting sessions whose conversation is cached."),
                "cachedTranscriptBytes": count("The estimated size of those conversations; at most `transcriptBudgetBytes`."),
                "transcriptBudgetBytes": count("The cache's budget (`--session-cache`); 0 caches nothing."),
                "evictedTranscripts": count("Conversations dropped from the cache since start (rebuilt from the events when needed)."),
                "storeResidentSessions": count("Sessions the store holds in-memory state for: those in use and a bounded number of recent ones (0 for PostgreSQL)."),
                "storeEvictedSessions": count("Idle sessions whose store state was dropped since start."),
            },
        }),
    );
    put(
        "Artifact",
        json!({
            "type": "object",
            "required": ["id", "kind", "name", "contentType", "size", "createdAt"],
            "properties": {
                "id": text("`art_…`."),
                "sessionId": schema("SessionId"),
                "principal": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string"},
                "contentType": {"type": "string"},
                "size": {"type": "integer", "minimum": 0},
                "metadata": {"description": "Free-form."},
                "createdAt": {"type": "string", "format": "date-time"},
            },
        }),
    );
    put(
        "ArtifactsResponse",
        json!({
            "type": "object",
            "required": ["ok", "artifacts"],
            "properties": {"ok": ok_true(), "artifacts": {"type": "array", "items": schema("Artifact")}},
        }),
    );
    put(
        "AgentEntry",
        json!({
            "type": "object",
            "required": ["slug", "name", "description", "model", "basePath"],
            "properties": {
                "slug": {"type": "string"},
                "name": {"type": "string"},
                "description": nullable("string", "From `agent.toml`."),
                "model": nullable("string", "From `agent.toml`."),
                "basePath": text("`/<slug>`."),
                "playgroundPath": text("When the playground is mounted."),
            },
        }),
    );
    put(
        "AgentsResponse",
        json!({
            "type": "object",
            "required": ["ok", "agents"],
            "properties": {"ok": ok_true(), "agents": {"type": "array", "items": schema("AgentEntry")}},
        }),
    );
    put(
        "ChannelAccepted",
        json!({
            "type": "object",
            "required": ["ok", "sessionId", "continuationToken", "deliveryId", "created"],
            "properties": {
                "ok": ok_true(),
                "sessionId": schema("SessionId"),
                "continuationToken": text("`<channel>:<key>`; channel tokens never rotate."),
                "deliveryId": schema("DeliveryId"),
                "turnId": {
                    "allOf": [schema("TurnId")],
                    "description": "Absent when a coalesced message was queued behind a running turn.",
                },
                "created": {"type": "boolean", "description": "True when this request started the session."},
            },
        }),
    );
    put(
        "JsonRpcRequest",
        json!({
            "type": "object",
            "description": "A JSON-RPC 2.0 request or notification of the MCP protocol.",
            "required": ["jsonrpc", "method"],
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"type": ["string", "integer"]},
                "method": {"type": "string"},
                "params": {"type": "object"},
            },
        }),
    );
    put(
        "JsonRpcResponse",
        json!({
            "type": "object",
            "description": "A JSON-RPC 2.0 response: `result` on success, `error` otherwise.",
            "required": ["jsonrpc", "id"],
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"type": ["string", "integer", "null"]},
                "result": {"type": "object"},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
                },
            },
        }),
    );
    put(
        "OpenApiDocument",
        json!({
            "type": "object",
            "description": "An OpenAPI 3.1 document.",
            "required": ["openapi", "info", "paths"],
            "properties": {"openapi": {"type": "string", "pattern": "^3\\.1\\."}},
        }),
    );
    Value::Object(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document();
        let mut ids = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for (key, op) in item.as_object().unwrap() {
                if let Some(id) = op.get("operationId") {
                    ids.push((key.clone(), id.as_str().unwrap().to_owned()));
                }
            }
        }
        let mut names: Vec<&str> = ids.iter().map(|(_, id)| id.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "{ids:?}");
    }
}
