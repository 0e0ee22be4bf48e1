//! The agent's own MCP endpoints: the handlers behind `/v1/mcp` (the
//! conversational tools `ask`, `check` and `call_tool`, the skills as
//! prompts, sessions' events, artifacts and workspace files as resources,
//! and completion), `/v1/mcp/tools` (every deterministic server tool as an
//! MCP tool, and nothing else) and `bdk mcp` over stdio (all of it).
//!
//! Every handler is a thin view over a [`Host`] plus the [`Principal`] the
//! caller authenticated as. Nothing lives in memory between requests: a
//! session's state is read back from its event stream, so any replica can
//! answer any request and the HTTP surface runs rmcp's stateless streamable
//! HTTP mode, building one handler per request. For the same reason there
//! are no resource subscriptions.
//!
//! Files: `principal.rs` (who calls and what it may read), `prompts.rs`
//! (skills as prompts, with their attachments), `uri.rs` (session resource
//! URIs), `resources.rs` (reading sessions' resources), `declared.rs` (the
//! resources the agent folder declares), `content.rs` (what every reader
//! shares: limits, text or blob, confined file reads, errors) and
//! `completion.rs` (the shape of completion answers); this file holds the
//! tools and the `ServerHandler` that dispatches to the others, declared
//! resources before the sessions'.

mod completion;
mod content;
mod declared;
mod elicit;
mod notes;
mod principal;
mod progress;
mod prompts;
mod resources;
mod turn;
mod uri;

pub use principal::Principal;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bdk_core::host::{
    CallOrigin, DirectCall, DirectOutcome, FollowUp, Host, HostError, StartSession,
};
use bdk_core::tool::{Effect, ToolReporter, ToolSpec};
use bdk_events::view::{last_turn_end, open_turns};
use bdk_events::{Event, SessionId};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage,
    CompleteRequestMethod, CompleteRequestParams, CompleteResult, ContentBlock,
    GetPromptRequestMethod, GetPromptRequestParams, GetPromptResponse, Implementation, JsonObject,
    ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod,
    ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressToken, ReadResourceRequestMethod, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Reference, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};

/// How long `ask` waits for the turn when the caller names no `waitMs`.
pub const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest wait `ask` accepts; larger values are clamped to it.
pub const MAX_WAIT_MS: u64 = 120_000;
/// Who hears about an `ask` while it waits: the caller's progress token,
/// and its client's forms for approvals.
#[derive(Default)]
struct Listeners {
    reporter: Option<progress::Reporter>,
    asker: Option<elicit::Asker>,
    /// The caller of a direct call, and its progress token: where the
    /// tool's own reports go.
    caller: Option<(Peer<RoleServer>, Option<ProgressToken>)>,
}

impl Listeners {
    /// A reporter for a direct call of `tool`, and what forwards what it
    /// reports to the caller; `None` when nobody listens.
    fn notes(&self, tool: &str) -> Option<(ToolReporter, notes::Forwarder)> {
        let (peer, token) = self.caller.clone()?;
        Some(notes::channel(peer, token, tool))
    }
}

/// How long a finished `ask` waits for its progress report to send the
/// turn's last events.
const REPORT_CATCH_UP: Duration = Duration::from_millis(500);
/// How many of the latest tool calls `check` reports.
const RECENT_TOOL_CALLS: usize = 10;
/// The channel recorded on sessions that `ask` creates.
const CHANNEL: &str = "mcp";

/// Which tool set a handler serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// `/v1/mcp`: `ask`, `check` and (when the agent has server tools)
    /// `call_tool`; prompts, resources and completion.
    Agent,
    /// `/v1/mcp/tools`: every server tool under its own name, and nothing
    /// else, so that a client which only wants tools sees only tools.
    Tools,
    /// `bdk mcp`: `ask`, `check` and every server tool under its own name
    /// (a server tool named `ask` or `check` is left out, since the
    /// conversational tools take those names); prompts, resources and
    /// completion.
    Local,
}

impl Surface {
    /// Prompts, resources and completion are served here.
    fn has_context(self) -> bool {
        matches!(self, Surface::Agent | Surface::Local)
    }
}

/// Errors of serving MCP over stdio.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client never completed the MCP handshake.
    #[error("mcp handshake failed: {0}")]
    Handshake(String),
    /// The serving task ended abnormally.
    #[error("mcp server task failed: {0}")]
    Task(String),
}

/// An MCP server over one agent, for one caller.
#[derive(Clone)]
pub struct McpServer {
    host: Host,
    principal: Principal,
    surface: Surface,
}

impl McpServer {
    /// A handler serving `surface` of `host` to `principal`.
    pub fn new(host: Host, principal: Principal, surface: Surface) -> Self {
        Self {
            host,
            principal,
            surface,
        }
    }

    /// Answers one streamable-HTTP request (POST carries JSON-RPC; GET and
    /// DELETE answer 405 since there is neither a server stream nor a
    /// session). The `Host` header is not checked here: the caller's auth
    /// chain has already decided who may reach this endpoint, and checking
    /// it again would refuse every deployment not reached as `localhost`.
    pub async fn handle_http(
        self,
        request: http::Request<Full<Bytes>>,
        max_body_bytes: usize,
    ) -> http::Response<BoxBody<Bytes, Infallible>> {
        if request.method() == http::Method::POST
            && let Some(refused) = malformed(request.body())
        {
            return refused;
        }
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .disable_allowed_hosts()
            .with_max_request_body_bytes(max_body_bytes);
        let service = StreamableHttpService::new(
            move || Ok(self.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        service.handle(request).await
    }

    /// Serves this handler over the process's stdin and stdout until the
    /// client disconnects. Nothing else may write to stdout meanwhile.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Handshake(e.to_string()))?;
        running
            .waiting()
            .await
            .map_err(|e| ServeError::Task(e.to_string()))?;
        Ok(())
    }

    fn tool_catalog(&self) -> Vec<Tool> {
        let server_tools = self.host.direct_tools(CallOrigin::Mcp);
        let mut out = Vec::new();
        if matches!(self.surface, Surface::Agent | Surface::Local) {
            out.push(ask_tool());
            out.push(check_tool());
        }
        if self.surface == Surface::Agent && !server_tools.is_empty() {
            out.push(call_tool_tool(&server_tools));
        }
        if matches!(self.surface, Surface::Tools | Surface::Local) {
            for spec in &server_tools {
                if self.surface == Surface::Local && is_conversational(&spec.name) {
                    tracing::warn!(
                        tool = %spec.name,
                        "server tool not served over stdio: `ask` and `check` take its name"
                    );
                    continue;
                }
                out.push(spec_tool(spec));
            }
        }
        out
    }

    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        listeners: Listeners,
    ) -> Result<CallToolResult, Failure> {
        match (self.surface, name) {
            (Surface::Agent | Surface::Local, "ask") => {
                self.ask(parse(name, args)?, listeners).await.map(success)
            }
            (Surface::Agent | Surface::Local, "check") => {
                self.check(parse(name, args)?).await.map(success)
            }
            (Surface::Agent, "call_tool") => self.passthrough(parse(name, args)?, listeners).await,
            (Surface::Tools | Surface::Local, _) => self.direct(name, args, listeners).await,
            (Surface::Agent, _) => Err(Failure::new(
                "unknown_tool",
                format!("unknown tool `{name}`; this endpoint serves ask, check and call_tool"),
            )),
        }
    }

    async fn ask(&self, args: AskArgs, listeners: Listeners) -> Result<Value, Failure> {
        let wait = Duration::from_millis(args.wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
        let (session_id, token, turn, from) = match &args.session_id {
            None => {
                if args.continuation_token.is_some() {
                    return Err(Failure::new(
                        "invalid_request",
                        "continuationToken needs the sessionId it belongs to".to_owned(),
                    ));
                }
                let started = self
                    .host
                    .start_session(StartSession {
                        message: Some(args.message),
                        channel: CHANNEL.to_owned(),
                        principal: Some(self.principal.name.clone()),
                        ..StartSession::default()
                    })
                    .await?;
                (
                    started.session_id,
                    started.continuation_token,
                    started.turn_id,
                    started.index,
                )
            }
            Some(id) => {
                let id = session_id(id)?;
                let sent = self
                    .host
                    .send(
                        &id,
                        FollowUp {
                            message: args.message,
                            continuation_token: args.continuation_token,
                            principal: Some(self.principal.name.clone()),
                            ..FollowUp::default()
                        },
                    )
                    .await?;
                (
                    sent.session_id,
                    sent.continuation_token,
                    sent.turn_id,
                    sent.index,
                )
            }
        };
        let mut out = json!({
            "sessionId": session_id.as_str(),
            "continuationToken": token,
            "status": "running",
        });
        let Some(turn) = turn else {
            // Queued behind a running turn: `check` reports when it is done.
            return Ok(out);
        };
        out["turnId"] = json!(turn.as_str());
        let from = from.unwrap_or(0);
        let waited = tokio::time::timeout(wait, async {
            let ended = self.host.wait_turn_from(&session_id, &turn, from);
            let Listeners {
                reporter, asker, ..
            } = listeners;
            if reporter.is_none() && asker.is_none() {
                return ended.await;
            }
            // Both end with the turn; the answer waits for the last
            // notification so the stream carries the end before the result.
            let report = async {
                let report = async {
                    if let Some(r) = reporter {
                        r.follow(&self.host, &session_id, &turn, from).await;
                    }
                };
                let approvals = async {
                    if let Some(a) = asker {
                        a.follow(&self.host, &session_id, &turn, from).await;
                    }
                };
                tokio::join!(report, approvals);
            };
            tokio::pin!(ended, report);
            tokio::select! {
                result = &mut ended => {
                    let _ = tokio::time::timeout(REPORT_CATCH_UP, &mut report).await;
                    result
                }
                () = &mut report => ended.await,
            }
        })
        .await;
        if let Ok(result) = waited {
            let result = result?;
            out["status"] = json!(if result.ok { "completed" } else { "failed" });
            out["reply"] = json!(result.reply);
        }
        Ok(out)
    }

    async fn check(&self, args: CheckArgs) -> Result<Value, Failure> {
        let id = session_id(&args.session_id)?;
        let scope = self.principal.read_scope();
        let record = self.host.session(&id, scope).await?;
        let events = self.host.events(&id, 0, scope).await?;
        let running = !open_turns(&events).is_empty();
        let last = last_turn_end(&events).map(|(_, end)| end);
        let mut calls: Vec<Value> = events
            .iter()
            .filter_map(|env| match &env.event {
                Event::ActionResult(r) => Some(json!({
                    "callId": r.call_id,
                    "name": r.name,
                    "isError": r.is_error,
                    "durationMs": r.duration_ms,
                })),
                _ => None,
            })
            .collect();
        let status = if running {
            "running"
        } else {
            last.as_ref()
                .map_or("idle", |end| if end.ok { "completed" } else { "failed" })
        };
        let recent = calls.split_off(calls.len().saturating_sub(RECENT_TOOL_CALLS));
        let mut out = json!({
            "sessionId": id.as_str(),
            "continuationToken": record.continuation_token,
            "status": status,
            "toolCalls": recent,
        });
        if let Some(end) = last {
            out["reply"] = json!(end.text);
        }
        Ok(out)
    }

    /// `call_tool`: the outcome as structured content, and the tool's
    /// content blocks, when it answered with some, as the content.
    async fn passthrough(
        &self,
        args: CallArgs,
        listeners: Listeners,
    ) -> Result<CallToolResult, Failure> {
        let session_id = args.session_id.as_deref().map(session_id).transpose()?;
        let call = DirectCall {
            name: args.name,
            input: args.input.unwrap_or_else(|| json!({})),
            session_id,
            principal: Some(self.principal.name.clone()),
            origin: CallOrigin::Mcp,
            ..DirectCall::default()
        };
        let outcome = self.call_reporting(call, &listeners).await?;
        let value = serde_json::to_value(&outcome)
            .map_err(|e| Failure::new("internal", format!("unserializable outcome: {e}")))?;
        if outcome.is_error {
            return Err(Failure::tool(value, outcome.content));
        }
        Ok(match rich(outcome.content, Some(value.clone()), false) {
            Some(result) => result,
            None => success(value),
        })
    }

    /// A tool of `/v1/mcp/tools`: its result, with its content blocks
    /// unchanged when it answered with some.
    async fn direct(
        &self,
        name: &str,
        args: Value,
        listeners: Listeners,
    ) -> Result<CallToolResult, Failure> {
        let call = DirectCall {
            name: name.to_owned(),
            input: args,
            principal: Some(self.principal.name.clone()),
            origin: CallOrigin::Mcp,
            ..DirectCall::default()
        };
        let outcome = self.call_reporting(call, &listeners).await?;
        if outcome.is_error {
            return Err(Failure::tool(outcome.result, outcome.content));
        }
        Ok(
            match rich(outcome.content, Some(outcome.result.clone()), false) {
                Some(result) => result,
                None => success(outcome.result),
            },
        )
    }
}

impl McpServer {
    /// A direct call whose progress and log messages reach the caller.
    async fn call_reporting(
        &self,
        mut call: DirectCall,
        listeners: &Listeners,
    ) -> Result<DirectOutcome, HostError> {
        match listeners.notes(&call.name) {
            Some((reporter, forwarder)) => {
                call.reporter = Some(reporter);
                forwarder.alongside(self.host.call_tool(call)).await
            }
            None => self.host.call_tool(call).await,
        }
    }
}

impl ServerHandler for McpServer {
    // `enable_logging`: see `set_level`; rmcp marks logging deprecated for the
    // coming protocol revision, and clients of today use it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let (capabilities, instructions) = match self.surface {
            Surface::Tools => (
                ServerCapabilities::builder()
                    .enable_logging()
                    .enable_tools()
                    .build(),
                "Each tool runs one of the agent's deterministic server tools directly, with no model involved.",
            ),
            // No `subscribe` and no `listChanged`: the endpoint is
            // stateless, so there is no stream to notify on.
            Surface::Agent | Surface::Local => (
                ServerCapabilities::builder()
                    .enable_completions()
                    .enable_logging()
                    .enable_prompts()
                    .enable_resources()
                    .enable_tools()
                    .build(),
                "Use `ask` to talk to the agent (pass back sessionId and continuationToken to continue a conversation) and `check` to poll a session whose reply was not ready yet. The agent's skills are prompts; the resources it publishes and sessions' events (bdk://sessions/{sessionId}/events), artifacts and workspace files are resources.",
            ),
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                self.host.project().name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(instructions)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<ListPromptsRequestMethod>());
        }
        Ok(ListPromptsResult::with_all_items(prompts::list(
            &self.host.project().skills,
        )))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<GetPromptRequestMethod>());
        }
        let project = self.host.project();
        prompts::get(&project.skills, &request.name, request.arguments.as_ref()).map(Into::into)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<ListResourcesRequestMethod>());
        }
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (sessions, next) = resources::list(&self.host, &self.principal, cursor).await?;
        // The agent's own resources lead the first page; the cursor pages
        // through sessions only, so each item is listed exactly once.
        let mut items = match cursor {
            None => declared::list(&self.host.project().resources),
            Some(_) => Vec::new(),
        };
        items.extend(sessions);
        let mut result =
            ListResourcesResult::with_all_items(items).with_cache_scope(CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<
                ListResourceTemplatesRequestMethod,
            >());
        }
        let mut templates = declared::templates(&self.host.project().resources);
        templates.extend(resources::templates());
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<ReadResourceRequestMethod>());
        }
        // The agent's declared URIs first (exact, then templates), then the
        // sessions' `bdk://` ones.
        let contents = match declared::read(&self.host, &self.principal, &request.uri).await? {
            Some(contents) => contents,
            None => resources::read(&self.host, &self.principal, &request.uri).await?,
        };
        let mut result = ReadResourceResult::new(vec![contents]);
        // What a read returns depends on who asks and changes as the
        // session runs: nobody else may reuse it.
        result.cache_scope = Some(CacheScope::Private);
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        if !self.surface.has_context() {
            return Err(ErrorData::method_not_found::<CompleteRequestMethod>());
        }
        let argument = &request.argument;
        let completion = match &request.r#ref {
            Reference::Prompt(prompt) => prompts::complete(
                &self.host.project().skills,
                &prompt.name,
                &argument.name,
                &argument.value,
            )?,
            Reference::Resource(template) => {
                if let Some(answer) = declared::complete(
                    &self.host.project().resources,
                    &template.uri,
                    &argument.name,
                ) {
                    return answer.map(CompleteResult::new);
                }
                let session = request
                    .context
                    .as_ref()
                    .and_then(|c| c.get_argument("sessionId"))
                    .map(String::as_str);
                resources::complete(
                    &self.host,
                    &self.principal,
                    &template.uri,
                    &argument.name,
                    &argument.value,
                    session,
                )
                .await?
            }
            // A kind of reference newer than this server.
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion answers prompt (ref/prompt) and resource template (ref/resource) arguments",
                    None,
                ));
            }
        };
        Ok(CompleteResult::new(completion))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tool_catalog()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_catalog().into_iter().find(|t| t.name == name)
    }

    /// Accepted for clients that set a level before they ask. The endpoint
    /// is stateless, so no level outlives its request: an `ask` that
    /// carries a progress token gets the turn's messages at every level
    /// (info for steps and tool calls, notice for approval waits, warning
    /// for a failed tool call, error for a failed turn).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        // A caller that sends a progress token hears how `ask` advances:
        // the answer then comes as an event stream (rmcp switches to SSE
        // at the first notification); without one it stays plain JSON.
        let reporter = context
            .meta
            .get_progress_token()
            .map(|token| progress::Reporter::new(context.peer.clone(), token));
        // A client that can answer forms is asked about parked calls.
        let asker = elicit::Asker::for_client(&context.peer, &self.principal.name);
        let caller = Some((context.peer.clone(), context.meta.get_progress_token()));
        let listeners = Listeners {
            reporter,
            asker,
            caller,
        };
        let result = match self.dispatch(&request.name, args, listeners).await {
            Ok(result) => result,
            Err(failure) => failure.into_result(),
        };
        Ok(result.into())
    }
}

/// A body that is not JSON, or JSON that is no JSON-RPC message, answered
/// as JSON-RPC prescribes (parse error, invalid request, `id: null`) with
/// status 400. rmcp would refuse such bodies with a plain-text 415, which
/// JSON-RPC clients cannot read.
fn malformed(body: &Full<Bytes>) -> Option<http::Response<BoxBody<Bytes, Infallible>>> {
    let bytes = body.clone().into_inner().unwrap_or_default();
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        Ok(_) => return None,
        Err(e) if e.is_data() => {
            ErrorData::invalid_request(format!("not a JSON-RPC message: {e}"), None)
        }
        Err(e) => ErrorData::parse_error(format!("the body is not valid JSON: {e}"), None),
    };
    let body = json!({"jsonrpc": "2.0", "id": null, "error": error});
    let mut resp = http::Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *resp.status_mut() = http::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Some(resp)
}

/// A failed call, reported to the client as an MCP tool error (`isError`)
/// rather than a JSON-RPC error, so that models see what went wrong.
struct Failure {
    text: String,
    structured: Option<Value>,
    blocks: Vec<Value>,
}

impl Failure {
    fn new(code: &str, message: String) -> Self {
        Self {
            text: format!("{code}: {message}"),
            structured: Some(json!({"error": code, "message": message})),
            blocks: Vec::new(),
        }
    }

    /// A tool that ran and reported failure: its own result is the payload,
    /// its content blocks the content when it answered with some.
    fn tool(result: Value, blocks: Vec<Value>) -> Self {
        Self {
            text: text_of(&result),
            structured: result.is_object().then_some(result),
            blocks,
        }
    }

    fn into_result(self) -> CallToolResult {
        let structured = self.structured.clone();
        if let Some(result) = rich(self.blocks, structured, true) {
            return result;
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(self.text)]);
        result.structured_content = self.structured;
        result
    }
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Self {
        Failure::new(e.code(), e.to_string())
    }
}

fn success(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text_of(&value))]);
    // MCP's structured content is a JSON object; other values travel as
    // text only.
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

/// A result made of a tool's MCP content blocks, passed on unchanged, with
/// `structured` as the structured content when it is an object; `None` when
/// there are no blocks (or, never expected, blocks rmcp cannot carry).
fn rich(blocks: Vec<Value>, structured: Option<Value>, is_error: bool) -> Option<CallToolResult> {
    if blocks.is_empty() {
        return None;
    }
    let content: Vec<ContentBlock> = serde_json::from_value(Value::Array(blocks))
        .inspect_err(|e| tracing::warn!(error = %e, "content blocks rmcp cannot carry"))
        .ok()?;
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = structured.filter(Value::is_object);
    Some(result)
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn parse<T: for<'de> Deserialize<'de>>(tool: &str, args: Value) -> Result<T, Failure> {
    serde_json::from_value(args).map_err(|e| {
        Failure::new(
            "invalid_request",
            format!("bad arguments for `{tool}`: {e}"),
        )
    })
}

fn session_id(raw: &str) -> Result<SessionId, Failure> {
    SessionId::parse(raw)
        .ok_or_else(|| Failure::new("session_not_found", format!("session {raw} not found")))
}

fn is_conversational(name: &str) -> bool {
    matches!(name, "ask" | "check")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AskArgs {
    message: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    continuation_token: Option<String>,
    #[serde(default)]
    wait_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CheckArgs {
    session_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallArgs {
    name: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    session_id: Option<String>,
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        // A non-object schema cannot describe MCP arguments; accept any
        // object and let the host validate the input against the real one.
        _ => Arc::new(JsonObject::from_iter([(
            "type".to_owned(),
            json!("object"),
        )])),
    }
}

fn session_status_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "sessionId": {"type": "string"},
            "continuationToken": {"type": "string"},
            "status": {"type": "string", "enum": ["completed", "failed", "running", "idle"]},
            "reply": {"type": "string"},
            "turnId": {"type": "string"},
            "toolCalls": {"type": "array", "items": {"type": "object"}}
        },
        "required": ["sessionId", "continuationToken", "status"]
    })
}

fn ask_tool() -> Tool {
    Tool::new(
        "ask",
        "Send a message to the agent and wait for its reply. Without sessionId a new conversation starts; pass the sessionId and continuationToken from the previous answer to continue one. When the turn takes longer than waitMs the status is `running`: call `check` later.",
        object(json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "minLength": 1, "description": "What to say to the agent."},
                "sessionId": {"type": "string", "description": "Continue this session."},
                "continuationToken": {"type": "string", "description": "The token returned by the previous ask or check of the session."},
                "waitMs": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "description": "How long to wait for the reply (default 30000, at most 120000)."}
            },
            "required": ["message"],
            "additionalProperties": false
        })),
    )
    .with_raw_output_schema(object(session_status_schema()))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false))
}

fn check_tool() -> Tool {
    Tool::new(
        "check",
        "Read where a session stands: running, completed or failed, the latest reply and the most recent tool calls.",
        object(json!({
            "type": "object",
            "properties": {"sessionId": {"type": "string"}},
            "required": ["sessionId"],
            "additionalProperties": false
        })),
    )
    .with_raw_output_schema(object(session_status_schema()))
    .with_annotations(ToolAnnotations::new().read_only(true))
}

fn call_tool_tool(tools: &[ToolSpec]) -> Tool {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    Tool::new(
        "call_tool",
        format!(
            "Run one of the agent's server tools directly, with no model involved. Available: {}.",
            names.join(", ")
        ),
        object(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names},
                "input": {"type": "object", "description": "The tool's input."},
                "sessionId": {"type": "string", "description": "Run the call in this session's workspace and record it there."}
            },
            "required": ["name"],
            "additionalProperties": false
        })),
    )
    .with_annotations(ToolAnnotations::new().read_only(false))
}

fn spec_tool(spec: &ToolSpec) -> Tool {
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        object(spec.input_schema.clone()),
    )
    .with_annotations(ToolAnnotations::new().read_only(spec.effect == Effect::Read));
    // MCP output schemas describe structured content, which is an object.
    if let Some(schema) = &spec.output_schema
        && schema.get("type").and_then(Value::as_str) == Some("object")
    {
        tool = tool.with_raw_output_schema(object(schema.clone()));
    }
    tool
}

#[cfg(test)]
mod tests {
    use bdk_core::tool::Execution;

    use super::*;

    fn spec(effect: Effect, output_schema: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: "lookup".to_owned(),
            title: None,
            description: "Looks things up.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            output_schema,
            effect,
            execution: Execution::default(),
            needs_approval: false,
            timeout_ms: None,
        }
    }

    #[test]
    fn server_tools_carry_their_schemas_and_read_only_hint() {
        let tool = spec_tool(&spec(
            Effect::Read,
            Some(json!({"type": "object", "properties": {"a": {"type": "integer"}}})),
        ));
        let wire = serde_json::to_value(&tool).unwrap();
        assert_eq!(wire["name"], "lookup");
        assert_eq!(wire["inputSchema"]["properties"]["q"]["type"], "string");
        assert_eq!(wire["outputSchema"]["properties"]["a"]["type"], "integer");
        assert_eq!(wire["annotations"]["readOnlyHint"], true);

        let write = serde_json::to_value(spec_tool(&spec(Effect::Write, None))).unwrap();
        assert_eq!(write["annotations"]["readOnlyHint"], false);
        assert!(write.get("outputSchema").is_none(), "{write}");
    }

    #[test]
    fn output_schemas_that_are_not_objects_are_left_out() {
        let tool = spec_tool(&spec(Effect::Read, Some(json!({"type": "string"}))));
        assert!(tool.output_schema.is_none());
    }

    #[test]
    fn non_object_input_schemas_become_any_object() {
        assert_eq!(
            Value::Object((*object(json!(true))).clone()),
            json!({"type": "object"})
        );
    }

    #[test]
    fn malformed_bodies_get_json_rpc_errors() {
        let cases = [
            ("{", -32700),
            ("", -32700),
            ("[1, 2]", -32600),
            (r#"{"jsonrpc": "2.0"}"#, -32600),
        ];
        for (raw, code) in cases {
            let resp = malformed(&Full::new(Bytes::from(raw))).unwrap();
            assert_eq!(resp.status(), http::StatusCode::BAD_REQUEST, "{raw}");
            let body = futures::executor::block_on(resp.into_body().collect())
                .unwrap()
                .to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"]["code"], code, "{raw}: {body}");
            assert_eq!(body["id"], Value::Null, "{raw}: {body}");
        }
        let ping = r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#;
        assert!(malformed(&Full::new(Bytes::from(ping))).is_none());
    }

    #[test]
    fn failures_name_the_host_error_code() {
        let result = Failure::from(HostError::Forbidden("ses_x".to_owned())).into_result();
        assert_eq!(result.is_error, Some(true));
        let wire = serde_json::to_value(&result).unwrap();
        let text = wire["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("forbidden: "), "{text}");
        assert_eq!(wire["structuredContent"]["error"], "forbidden");
    }
}
