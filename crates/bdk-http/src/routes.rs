//! The route table of one agent: every path, its methods, their handlers
//! and what the OpenAPI document says about each.
//!
//! The app serves these routers and the document is generated from them
//! ([`crate::openapi`]), so the two cannot disagree about which paths and
//! methods exist. Types say the rest: request and response bodies, path
//! and query parameters and the error codes of the extractors come from the
//! handlers' signatures; what is written here is the prose and the error
//! codes of the host calls.

use std::sync::Arc;

use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
#[cfg(feature = "mcp")]
use aide::transform::TransformOperation;
use bdk_api::paths;
use serde_json::json;

#[cfg(feature = "mcp")]
use crate::api::schema_of;
use crate::api::{Describe, open, protected};
#[cfg(feature = "mcp")]
use crate::described;
use crate::error::ErrorCode;
#[cfg(feature = "evals")]
use crate::evals;
#[cfg(feature = "mcp")]
use crate::mcp;
use crate::openapi::served;
use crate::state::Agent;
use crate::{abs, artifacts, cost, discovery, sessions, stream, tools};
#[cfg(feature = "scheduler")]
use crate::{dev, dev_reminders};

/// The codes of every route that reads a session.
const SESSION_READ: &[ErrorCode] = &[
    ErrorCode::Forbidden,
    ErrorCode::SessionNotFound,
    ErrorCode::SessionCorrupt,
];

/// The routes of an agent behind the auth chain (the caller wraps them in
/// it).
pub(crate) fn protected_routes() -> ApiRouter<Arc<Agent>> {
    let routes = ApiRouter::new()
        .merge(session_routes())
        .merge(tool_routes())
        .merge(discovery_routes())
        .merge(artifact_routes());
    #[cfg(feature = "scheduler")]
    let routes = routes.merge(dev_routes());
    #[cfg(feature = "evals")]
    let routes = routes.merge(eval_routes());
    #[cfg(feature = "mcp")]
    let routes = routes.merge(mcp_routes());
    protected(routes)
}

/// The routes of an agent that run no auth (the playground aside, which
/// the app adds unless `--no-playground`).
pub(crate) fn open_routes() -> ApiRouter<Arc<Agent>> {
    let routes = ApiRouter::new()
        .api_route(paths::HEALTH, get_with(discovery::health, discovery::health_doc))
        .api_route(
            paths::META,
            get_with(discovery::meta, |op| {
                op.doc(
                    "getMeta",
                    "discovery",
                    "What a client needs first",
                    "The agent's name, base path, auth policy and server settings: what a browser client reads before its first call.",
                )
            }),
        )
        .api_route(
            paths::OPENAPI,
            get_with(served::agent_document, served::openapi_doc),
        );
    open(routes)
}

fn session_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::SESSION,
            post_with(sessions::start, |op| {
                op.doc(
                    "startSession",
                    "sessions",
                    "Start a session",
                    "Creates a chat session on the `http` channel, owned by the caller. With a `message` the first turn starts in the background and the answer comes as soon as the message is accepted; without one the session is created idle and waits for a follow-up.",
                )
                .body(
                    false,
                    "Every field is optional; an empty body counts as `{}`.",
                    json!({"message": "What is the weather in Paris?"}),
                )
                .errors(&[ErrorCode::InvalidAsOf])
            }),
        )
        .api_route(
            paths::SESSION_ID,
            post_with(sessions::follow_up, |op| {
                op.doc(
                    "sendMessage",
                    "sessions",
                    "Send a follow-up message",
                    "Sends a message to a chat session. Every accepted follow-up replaces the continuation token (a refused one leaves it as it was); of two sends racing with the same token exactly one is accepted and the others answer `409 stale_continuation_token`. Sends without a token are admitted one at a time; one that loses a race to another replica answers `409 session_busy`.",
                )
                .body(
                    true,
                    "The message and, optionally, the current continuation token.",
                    json!({"message": "And in Tokyo?", "continuationToken": "http:…"}),
                )
                .errors(SESSION_READ)
                .errors(&[
                    ErrorCode::StaleContinuationToken,
                    ErrorCode::TaskSession,
                    ErrorCode::SessionBusy,
                ])
            })
            .delete_with(sessions::delete, |op| {
                op.doc(
                    "deleteSession",
                    "sessions",
                    "Delete a session",
                    "Removes the session: its record, its events and its workspace; its reminders are disarmed and its open streams end. A running turn is stopped first (recorded `turn.failed`, status `cancelled`, which open streams still receive) and queued coalesced messages are dropped. Only the owner may delete a session; a damaged session can be deleted too. `409 session_busy` when a turn another replica runs does not end in time, or a new turn was admitted while the delete waited.",
                )
                .errors(&[
                    ErrorCode::Forbidden,
                    ErrorCode::SessionNotFound,
                    ErrorCode::SessionBusy,
                ])
            }),
        )
        .api_route(
            paths::SESSION_STREAM,
            get_with(stream::stream, |op| {
                op.doc(
                    "streamEvents",
                    "sessions",
                    "Follow a session's events",
                    "Replays the session's events from `startIndex`, then sends new ones as they are recorded. The connection stays open until the client closes it, the session is deleted or the server shuts down. To resume after a disconnect, pass the last index received plus one.",
                )
                .errors(SESSION_READ)
            }),
        )
        .api_route(
            paths::SESSION_EVENTS,
            get_with(sessions::events, |op| {
                op.doc(
                    "listEvents",
                    "sessions",
                    "Dump a session's recorded events",
                    "The events recorded so far, without following: NDJSON by default, one JSON document with `format=json`.",
                )
                .errors(SESSION_READ)
            }),
        )
        .api_route(
            paths::SESSION_STOP,
            post_with(sessions::stop, |op| {
                op.doc(
                    "stopTurn",
                    "sessions",
                    "Stop the running turn",
                    "Interrupts the running turn without sending anything: it ends with `turn.failed`, status `cancelled`, and queued coalesced messages are dropped. The session stays a chat session. Answers once the turn has settled. Any request body is ignored.",
                )
                .errors(SESSION_READ)
                .errors(&[ErrorCode::SessionBusy])
            }),
        )
        .api_route(
            paths::SESSION_COST,
            get_with(cost::cost, |op| {
                op.doc(
                    "getCost",
                    "sessions",
                    "Token usage and estimated cost",
                    "One entry per ended turn (from `turn.completed` and `turn.failed`) and the totals. `estimatedCostUsd` is null for a model without a known price, and the total is null when any turn's is.",
                )
                .errors(SESSION_READ)
            }),
        )
        .api_route(
            paths::SESSION_APPROVALS,
            get_with(sessions::approvals, |op| {
                op.doc(
                    "listApprovals",
                    "approvals",
                    "Calls waiting for a decision",
                    "Calls of tools declared with `needs_approval` that are parked until someone approves or denies them.",
                )
                .errors(SESSION_READ)
            }),
        )
        .api_route(
            paths::SESSION_APPROVAL,
            post_with(sessions::resolve_approval, |op| {
                op.doc(
                    "resolveApproval",
                    "approvals",
                    "Approve or deny a parked call",
                    "Records the decision and the approver's principal on `action.approval_resolved`; a denied call reaches the model as an error result.",
                )
                .body(true, "The decision.", json!({"decision": "approve"}))
                .errors(SESSION_READ)
                .errors(&[ErrorCode::ApprovalNotFound])
            }),
        )
        .api_route(
            paths::SESSIONS,
            get_with(sessions::list, |op| {
                op.doc(
                    "listSessions",
                    "sessions",
                    "List sessions",
                    "The caller's sessions, newest first (every session for a caller that sees everything: loopback callers under `--dev`, and everyone under `--allow-anonymous`). `continuationToken` is only included on sessions the caller owns.",
                )
            }),
        )
}

fn tool_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::TOOLS,
            get_with(tools::list, |op| {
                op.doc(
                    "listTools",
                    "tools",
                    "The tool catalog",
                    "The server tools: manifest tools with a `command` or a `url`, native tools and the enabled built-ins; everything that can be called directly or bound to a session.",
                )
            }),
        )
        .api_route(
            paths::TOOL,
            get_with(tools::describe, |op| {
                op.doc(
                    "getTool",
                    "tools",
                    "Describe one tool",
                    "One server tool or agent-execution tool.",
                )
                .errors(&[ErrorCode::UnknownTool])
            })
            .post_with(tools::call, |op| {
                op.doc(
                    "callTool",
                    "tools",
                    "Call a tool directly",
                    "Runs a server tool with no model involved, after validating the input against the tool's schema. Bind the call to a session with `sessionId` or `continuationToken` (not both) to run it in that session's workspace and record it on its stream; otherwise it runs in a temporary workspace. A tool that fails is still a 200, with `isError: true`.",
                )
                .body(
                    false,
                    "The input and, optionally, the session to bind to.",
                    json!({"input": {"city": "Paris"}}),
                )
                .errors(&[
                    ErrorCode::InvalidToolInput,
                    ErrorCode::ToolNotCallable,
                    ErrorCode::InvalidContinuationToken,
                    ErrorCode::Forbidden,
                    ErrorCode::ToolNotExposed,
                    ErrorCode::ApprovalRequired,
                    ErrorCode::UnknownTool,
                    ErrorCode::SessionNotFound,
                    ErrorCode::SessionCorrupt,
                    ErrorCode::SessionBusy,
                    ErrorCode::WorkspaceUnavailable,
                ])
            }),
        )
}

fn discovery_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::INFO,
            get_with(discovery::info, |op| {
                op.doc(
                    "getInfo",
                    "discovery",
                    "The agent's surface",
                    "Model, tools with their schemas, skills, subagents, MCP connections, channels, hooks, schedules, sandbox files and discovery diagnostics: the same JSON `bdk info --json` prints (it has no `ok` field).",
                )
            }),
        )
        .api_route(
            paths::LOGS,
            get_with(discovery::logs, |op| {
                op.doc(
                    "getLogs",
                    "discovery",
                    "Recent server log lines",
                    "Lines with a cursor above `after`, oldest first. Poll again with `after` set to `next`. The server keeps the most recent lines only.",
                )
            }),
        )
        .api_route(
            paths::ABS,
            get_with(abs::abs, |op| {
                op.doc(
                    "getAbs",
                    "discovery",
                    "A/B experiments and their live figures",
                    "Every declared experiment (and any only recorded sessions still name) with each arm's weight and totals: sessions, turns, failed turns, input and output tokens, estimated cost and turn durations, folded from the sessions' event streams (`ab.assigned` and each turn's end). Only sessions the caller may see count, as in the session list. Sessions with a pinned arm (evals) are listed but kept out of the totals.",
                )
                .errors(&[ErrorCode::InvalidRequest])
            }),
        )
        .api_route(
            paths::MEMORY,
            get_with(discovery::memory, |op| {
                op.doc(
                    "getMemory",
                    "discovery",
                    "What the agent holds in memory for sessions",
                    "Gauges of the agent's per-session memory: sessions in use (a turn running or queued, a request in progress), the cached conversations of resting sessions within their budget (`bdk serve --session-cache`), and the store's per-session state. Resting sessions cost at most the budget; dropped conversations are rebuilt from the events on the next turn.",
                )
            }),
        )
}

fn artifact_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::ARTIFACTS,
            get_with(artifacts::list, |op| {
                op.doc(
                    "listArtifacts",
                    "artifacts",
                    "List artifacts",
                    "The artifacts the caller may see (its own, or all of them for a caller that sees every session), newest first.",
                )
            }),
        )
        .api_route(
            paths::ARTIFACT_CONTENT,
            get_with(artifacts::content, |op| {
                op.doc(
                    "getArtifactContent",
                    "artifacts",
                    "Download an artifact",
                    "The bytes, as an attachment with the recorded content type and headers that keep a browser from running them as a page of this server. An unknown id, a malformed one and another principal's artifact all answer `404 not_found`.",
                )
                .raw_response(
                    200,
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
            }),
        )
}

/// The codes of the dev routes besides their own: outside `--dev` they
/// answer `404 not_found`.
#[cfg(feature = "scheduler")]
const DEV_ONLY: &[ErrorCode] = &[ErrorCode::NotFound];

#[cfg(feature = "scheduler")]
fn dev_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::DEV_REMINDERS,
            get_with(dev_reminders::list, |op| {
                op.doc(
                    "listReminders",
                    "dev",
                    "List reminders",
                    "Every reminder of the agent, oldest first, in any state (armed, completed, cancelled, disarmed), with its fire count and next fire time. Only under `--dev`; otherwise `404 not_found`.",
                )
                .errors(DEV_ONLY)
            }),
        )
        .api_route(
            paths::DEV_REMINDER,
            post_with(dev_reminders::fire, |op| {
                op.doc(
                    "fireReminder",
                    "dev",
                    "Fire a reminder now",
                    "Fires an armed reminder once through the same delivery path as its timer: the prompt is sent into its conversation as a coalescing follow-up, or its handler tool is called. A recurring reminder keeps its next scheduled fire; a one-shot completes. Only under `--dev`; otherwise, and for an unknown id, `404 not_found`; a reminder that is no longer armed is `400 invalid_request`.",
                )
                .errors(DEV_ONLY)
                .errors(&[ErrorCode::InvalidRequest])
            }),
        )
        .api_route(
            paths::DEV_SCHEDULES,
            get_with(dev::list_schedules, |op| {
                op.doc(
                    "listSchedules",
                    "dev",
                    "List schedules",
                    "Every discovered schedule with its next fire time, the latest scheduled minute that fired, how its last run ended (sessions, or the tool call of a tool schedule) and the fires skipped under the catch-up policy. Read from the agent's state, so a production run's history over the same state root shows too. Only under `--dev`; otherwise `404 not_found`.",
                )
                .errors(DEV_ONLY)
            }),
        )
        .api_route(
            paths::DEV_SCHEDULE,
            post_with(dev::dispatch_schedule, |op| {
                op.doc(
                    "dispatchSchedule",
                    "dev",
                    "Fire a schedule now",
                    "Fires the schedule once, through the same path as a fire on its cadence: a Markdown schedule starts a task session (channel `schedule`, principal `schedule:<name>`), a TOML schedule hands its message to its channel, calls its tool (the answer then carries `toolCall`, error results included) or runs its handler program (the answer then carries `handler`; a handler that gives no usable answer or reports a failure is `424 handler_failed`). No claim is recorded, so the cadence is unaffected. Only under `--dev`; otherwise, and for an unknown schedule, `404 not_found`.",
                )
                .errors(DEV_ONLY)
                .errors(&[
                    ErrorCode::InvalidRequest,
                    ErrorCode::WorkspaceUnavailable,
                    ErrorCode::UnknownTool,
                    ErrorCode::InvalidToolInput,
                    ErrorCode::HandlerFailed,
                ])
            }),
        )
}

#[cfg(feature = "evals")]
fn eval_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::DEV_EVALS,
            get_with(evals::list, |op| {
                op.doc(
                    "listEvals",
                    "evals",
                    "List eval cases",
                    "The cases discovered under `evals/` (read on every request) and the eval config. A project without `evals/` answers an empty list; files with problems answer the cases that loaded (none when there are errors) and `diagnostics`.",
                )
            }),
        )
        .api_route(
            paths::DEV_EVAL_RUNS,
            get_with(evals::runs, |op| {
                op.doc(
                    "listEvalRuns",
                    "evals",
                    "List eval runs",
                    "Recent runs, newest first, at most `maxPlaygroundRuns`; `activeRunId` names the run in progress.",
                )
            })
            .post_with(evals::start, |op| {
                op.doc(
                    "startEvalRun",
                    "evals",
                    "Start an eval run",
                    "Starts a run in the background and answers at once with its first snapshot; poll `GET /v1/dev/evals/runs/{id}`. Entries of `filterIds` (case ids, or id prefixes ending at a `/`) and of `tags` are alternatives; when both are given a case must match one of each. Every session the run opens has purpose `eval` and belongs to the caller. `404 no_matching_evals` when nothing matches, `409 eval_run_active` while another run is running, `400 invalid_evals` when the eval files have errors.",
                )
                .body(
                    false,
                    "The selection; an empty body runs every case.",
                    json!({"filterIds": ["weather/current-conditions"], "tags": ["smoke"], "timeoutMs": 60000}),
                )
                .errors(&[
                    ErrorCode::InvalidEvals,
                    ErrorCode::NoMatchingEvals,
                    ErrorCode::EvalRunActive,
                ])
            }),
        )
        .api_route(
            paths::DEV_EVAL_RUN,
            get_with(evals::run, |op| {
                op.doc(
                    "getEvalRun",
                    "evals",
                    "Get an eval run",
                    "The run's snapshot: `running` with case progress, then `completed` (every case ran; see `summary` for failures), `failed` (the run itself broke; see `error`) or `cancelled`.",
                )
                .errors(&[ErrorCode::EvalRunNotFound])
            }),
        )
        .api_route(
            paths::DEV_EVAL_RUN_CANCEL,
            post_with(evals::cancel, |op| {
                op.doc(
                    "cancelEvalRun",
                    "evals",
                    "Cancel an eval run",
                    "Cancels the active run: running turns are stopped and unfinished cases end `cancelled`. Answers with the run once it settled (after a short wait it may still say `running`; poll then). `404 eval_run_not_found` for an unknown id, `409 eval_run_finished` when the run already ended.",
                )
                .errors(&[ErrorCode::EvalRunNotFound, ErrorCode::EvalRunFinished])
            }),
        )
}

#[cfg(feature = "mcp")]
fn mcp_routes() -> ApiRouter<Arc<Agent>> {
    ApiRouter::new()
        .api_route(
            paths::MCP,
            post_with(mcp::agent, |op| {
                mcp_post(
                    op,
                    "mcp",
                    "Talk to the agent over MCP",
                    "MCP tools `ask` (start or continue a chat session owned by the caller and wait up to `waitMs` for the reply), `check` (a session's status, latest reply and recent tool calls) and, when the agent has server tools, `call_tool` (a direct call with no model involved). Errors are tool results with `isError: true` whose text starts with the error code.",
                )
            })
            .get_with(mcp::stateless, |op| mcp_refused(op, "mcpStream", "Open a server stream"))
            .delete_with(mcp::stateless, |op| mcp_refused(op, "mcpEnd", "End an MCP session")),
        )
        .api_route(
            paths::MCP_TOOLS,
            post_with(mcp::tools, |op| {
                mcp_post(
                    op,
                    "mcpTools",
                    "The agent's server tools over MCP",
                    "Every deterministic server tool as an MCP tool under its own name, with its input and output schemas; `readOnlyHint` is true for read tools. Results carry structured content (for object results) and the same value as text.",
                )
            })
            .get_with(mcp::stateless, |op| {
                mcp_refused(op, "mcpToolsStream", "Open a server stream")
            })
            .delete_with(mcp::stateless, |op| {
                mcp_refused(op, "mcpToolsEnd", "End an MCP session")
            }),
        )
}

/// An MCP endpoint's `POST`: one JSON-RPC message, read and answered by
/// `bdk-mcp` (which is why its body and answers are described here rather
/// than by a typed extractor).
#[cfg(feature = "mcp")]
fn mcp_post<'a>(
    op: TransformOperation<'a>,
    id: &str,
    summary: &str,
    description: &str,
) -> TransformOperation<'a> {
    let mut op = op.doc(id, "mcp", summary, description);
    let request = schema_of::<described::JsonRpcRequest>();
    let response = schema_of::<described::JsonRpcResponse>();
    op.inner_mut().request_body = serde_json::from_value(json!({
        "required": true,
        "description": "One JSON-RPC 2.0 message (`initialize`, `tools/list`, `tools/call`, `ping`, or a notification). Send `Accept: application/json, text/event-stream`; a request without an Accept header is treated the same.",
        "content": {"application/json": {
            "schema": request,
            "example": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        }},
    }))
    .ok();
    let plain = |description: &str| {
        json!({
            "description": description,
            "content": {"text/plain": {"schema": {"type": "string"}}},
        })
    };
    op.raw_response(
        200,
        json!({
            "description": "The JSON-RPC response (a failed tool call is a result with `isError: true`).",
            "content": {"application/json": {"schema": response}},
        }),
    )
    .raw_response(
        202,
        json!({"description": "A notification or response was accepted; no body."}),
    )
    .raw_response(
        400,
        json!({
            "description": "The body is not JSON (code -32700) or not a JSON-RPC message (-32600).",
            "content": {"application/json": {"schema": response}},
        }),
    )
    .raw_response(
        406,
        plain("The Accept header names neither JSON nor event streams."),
    )
    .raw_response(415, plain("The body is not sent as application/json."))
    .errors(&[ErrorCode::RequestTimeout, ErrorCode::PayloadTooLarge])
}

/// `GET` and `DELETE` on an MCP endpoint, which is stateless.
#[cfg(feature = "mcp")]
fn mcp_refused<'a>(op: TransformOperation<'a>, id: &str, what: &str) -> TransformOperation<'a> {
    op.doc(
        id,
        "mcp",
        &format!("{what} (not supported)"),
        "This endpoint is stateless: there is no server-initiated stream and no MCP session, so the answer is always 405 with `Allow: POST`.",
    )
    .errors(&[ErrorCode::MethodNotAllowed])
}
