//! The client side: an agent's connections to MCP servers
//! (`agent/mcp-connections/<name>.toml`), as one [`McpConnections`] hub that
//! implements the core's [`McpHub`] port.
//!
//! Each connection starts lazily on first use, except that connections with
//! `advertise_tools = true` list their tools in the background at startup so
//! the catalog is ready for the first turn. A connection that fails lands in
//! [`McpHub::connection_errors`] while the others keep working. A crashed or
//! disconnected server is reconnected on the next call, with a short bounded
//! backoff; every call is bounded by the connection's timeout, and anything
//! going wrong (timeout, crash, malformed answer, oversized result) comes back
//! as an error [`ToolOutput`], never a stuck turn.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bdk_core::containment::{Containment, Grants};
use bdk_core::mcp::{ConnectionError, McpError, McpHub};
use bdk_core::project::{McpConnection, McpTransport, Project};
use bdk_core::tool::{
    Effect, Execution, Tool, ToolContext, ToolOutput, ToolSource, ToolSpec, content,
};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::oauth;

/// The per-call timeout when a manifest sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest tool result accepted from a server, serialized.
pub const MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// How many times one use tries to (re)connect before giving up.
const CONNECT_ATTEMPTS: u32 = 3;

/// The pause before the second connect attempt; it doubles after each failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// How long shutdown waits for one connection to close before dropping it
/// (dropping still kills a child process).
const CLOSE_GRACE: Duration = Duration::from_secs(3);

type Session = RunningService<RoleClient, Handler>;

/// State every connection shares with the hub.
struct Shared {
    /// Grows when the advertised catalog or the error list changes.
    generation: AtomicU64,
    /// Owns the background listings, so shutdown can stop and await them.
    tasks: TaskTracker,
    /// Fires on shutdown.
    closing: CancellationToken,
}

impl Shared {
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// One connection: its manifest, its live session (if any), its catalog.
struct Conn {
    manifest: McpConnection,
    /// The agent folder, the default working directory of a stdio server.
    root: std::path::PathBuf,
    /// How a stdio server runs: a clean environment, and the sandbox's
    /// lifetime protections when there is one.
    containment: Containment,
    timeout: Duration,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// The last successful listing (advertising connections only keep it).
    tools: Mutex<Vec<rmcp::model::Tool>>,
    /// Why the last start or listing failed, cleared by the next success.
    error: Mutex<Option<String>>,
    /// Where the OAuth tokens of `[oauth]` connections are kept.
    tokens: oauth::TokenStore,
    shared: Arc<Shared>,
}

/// Receives server notifications for one connection.
#[derive(Clone)]
struct Handler {
    conn: Weak<Conn>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Relisting sends a request on this very connection, so it runs
        // apart from the notification handler instead of inside it.
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        if !conn.manifest.advertise_tools {
            return;
        }
        let tracker = conn.shared.tasks.clone();
        tracker.spawn(async move {
            if let Err(e) = conn.list().await {
                tracing::warn!(connection = %conn.manifest.name, error = %e, "relisting MCP tools after tools/list_changed failed");
            }
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conn {
    fn set_error(&self, error: Option<String>) {
        let mut current = lock(&self.error);
        if *current != error {
            *current = error;
            drop(current);
            self.shared.bump();
        }
    }

    /// The live session, (re)connecting when there is none or it closed.
    async fn session(self: &Arc<Self>) -> Result<Arc<Session>, String> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_closed()
            && !s.is_transport_closed()
        {
            return Ok(Arc::clone(s));
        }
        if slot.take().is_some() {
            tracing::info!(connection = %self.manifest.name, "MCP connection closed; reconnecting");
        }
        let mut backoff = FIRST_BACKOFF;
        let mut last = String::new();
        for attempt in 1..=CONNECT_ATTEMPTS {
            if self.shared.closing.is_cancelled() {
                return Err("the host is shutting down".to_owned());
            }
            match self.connect().await {
                Ok(session) => {
                    let session = Arc::new(session);
                    *slot = Some(Arc::clone(&session));
                    return Ok(session);
                }
                Err(e) => {
                    tracing::debug!(connection = %self.manifest.name, attempt, error = %e, "MCP connect failed");
                    last = e;
                }
            }
            if attempt < CONNECT_ATTEMPTS {
                // A backoff pause between attempts, not a wait for an event.
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(last)
    }

    async fn connect(self: &Arc<Self>) -> Result<Session, String> {
        let handler = Handler {
            conn: Arc::downgrade(self),
        };
        match &self.manifest.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let dir = self.manifest.path.parent().unwrap_or(Path::new("."));
                let cwd = match cwd {
                    Some(c) => dir.join(c),
                    None => self.root.clone(),
                };
                let grants = Grants {
                    lifetime_only: true,
                    ..Grants::default()
                };
                let mut cmd = match self.containment.call(&grants) {
                    Some((sandbox, call)) => {
                        let wrapped = sandbox
                            .wrap(&call, std::path::Path::new(command), args)
                            .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                        let mut cmd = tokio::process::Command::new(wrapped.program);
                        cmd.args(wrapped.args);
                        cmd
                    }
                    None => {
                        let mut cmd = tokio::process::Command::new(command);
                        cmd.args(args);
                        cmd
                    }
                };
                cmd.env_clear()
                    .envs(self.containment.env(&[]))
                    .envs(env)
                    .current_dir(&cwd)
                    .kill_on_drop(true);
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(self.manifest.name.clone(), stderr));
                }
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("initialization failed: {e}"))
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
                oauth,
            } => {
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let name = http::HeaderName::try_from(k.as_str())
                        .map_err(|e| format!("invalid header name `{k}`: {e}"))?;
                    let value = http::HeaderValue::try_from(v.as_str())
                        .map_err(|e| format!("invalid value for header `{k}`: {e}"))?;
                    custom.insert(name, value);
                }
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                if let Some(var) = bearer_token_env {
                    let token = std::env::var(var).map_err(|_| {
                        format!("environment variable `{var}` (bearer_token_env) is not set")
                    })?;
                    config = config.auth_header(token);
                }
                let client = bdk_models::net::http_client().map_err(|e| e.to_string())?;
                if oauth.is_none() {
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    return handler
                        .serve(transport)
                        .await
                        .map_err(|e| format!("initialization failed: {e}"));
                }
                // An OAuth connection: the stored token, refreshed when it
                // has expired, and once more when the server refuses it.
                let name = &self.manifest.name;
                let token = oauth::fresh_token(&client, &self.tokens, name, false)
                    .await
                    .map_err(|e| e.to_string())?;
                let first = StreamableHttpClientTransport::with_client(
                    client.clone(),
                    config.clone().auth_header(token),
                );
                match handler.clone().serve(first).await {
                    Ok(session) => Ok(session),
                    Err(e) => {
                        tracing::debug!(connection = %name, error = %e, "MCP connect with the stored token failed; refreshing it");
                        let token = oauth::fresh_token(&client, &self.tokens, name, true)
                            .await
                            .map_err(|r| format!("initialization failed: {e}; {r}"))?;
                        let again = StreamableHttpClientTransport::with_client(
                            client,
                            config.auth_header(token),
                        );
                        handler
                            .serve(again)
                            .await
                            .map_err(|e| format!("initialization failed: {e}"))
                    }
                }
            }
        }
    }

    /// Forgets a session that failed, so the next use reconnects.
    async fn drop_session(&self, failed: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, failed)) {
            slot.take();
        }
    }

    /// Lists the server's tools (bounded by the timeout), keeping the
    /// catalog and error state up to date.
    async fn list(self: &Arc<Self>) -> Result<Vec<rmcp::model::Tool>, String> {
        let listed = tokio::time::timeout(self.timeout, async {
            let session = self.session().await?;
            match session.peer().list_all_tools().await {
                Ok(tools) => Ok(tools),
                Err(e) => {
                    self.drop_session(&session).await;
                    Err(format!("tools/list failed: {e}"))
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer to tools/list within {} ms",
                self.timeout.as_millis()
            ))
        });
        match &listed {
            Ok(tools) => {
                if self.manifest.advertise_tools {
                    *lock(&self.tools) = tools.clone();
                    self.shared.bump();
                }
                self.set_error(None);
            }
            Err(e) => self.set_error(Some(e.clone())),
        }
        listed
    }

    /// Calls one tool; every failure is an error output.
    async fn call(self: &Arc<Self>, tool: &str, args: Value) -> ToolOutput {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return ToolOutput::error(format!(
                    "MCP tool arguments must be a JSON object, not {other}"
                ));
            }
        };
        let name = &self.manifest.name;
        let called = tokio::time::timeout(self.timeout, async {
            let session = self
                .session()
                .await
                .map_err(|e| format!("MCP connection `{name}` is unavailable: {e}"))?;
            let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
            match session.peer().call_tool(params).await {
                Ok(result) => Ok(result),
                Err(e) => {
                    // Anything but the server's own error reply means the
                    // server crashed, hung up or garbled the stream: drop
                    // the session so the next call reconnects.
                    if !matches!(e, rmcp::service::ServiceError::McpError(_)) {
                        self.drop_session(&session).await;
                    }
                    Err(format!(
                        "MCP tool `{tool}` on connection `{name}` failed: {e}"
                    ))
                }
            }
        })
        .await;
        match called {
            Ok(Ok(result)) => to_output(tool, result),
            Ok(Err(message)) => ToolOutput::error(message),
            Err(_) => ToolOutput::error(format!(
                "MCP tool `{tool}` on connection `{name}` did not answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }

    async fn close(&self) {
        let session = self.session.lock().await.take();
        if let Some(session) = session {
            // Only this hub holds sessions beyond a call in flight; when a
            // call still holds one, dropping ours leaves the drop guard to
            // cancel it once the call ends.
            match Arc::try_unwrap(session) {
                Ok(mut session) => {
                    if tokio::time::timeout(CLOSE_GRACE, session.close())
                        .await
                        .is_err()
                    {
                        tracing::warn!(connection = %self.manifest.name, "MCP connection did not close in time; dropping it");
                    }
                }
                Err(shared) => drop(shared),
            }
        }
    }
}

/// Turns a server's result into a tool output. One text block (or none) is
/// a plain result: its text, or the structured content when there is some.
/// Anything richer keeps its content blocks unchanged, for callers and for
/// providers that take images ([`content::output`]).
fn to_output(tool: &str, result: CallToolResult) -> ToolOutput {
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |v| v.len());
    if size > MAX_RESULT_BYTES {
        return ToolOutput::error(format!(
            "MCP tool `{tool}` returned {size} bytes, more than the {MAX_RESULT_BYTES}-byte limit"
        ));
    }
    let is_error = result.is_error.unwrap_or(false);
    let plain = match result.content.as_slice() {
        [] => Some(String::new()),
        [one] => one.as_text().map(|t| t.text.clone()),
        _ => None,
    };
    if let Some(text) = plain {
        let content = match result.structured_content {
            Some(structured) if !is_error => structured,
            _ => Value::String(text),
        };
        return ToolOutput {
            content,
            is_error,
            blocks: Vec::new(),
        };
    }
    let blocks = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    match content::parse_blocks(&blocks) {
        Some(blocks) => content::output(blocks, result.structured_content, is_error),
        // Blocks this runtime does not know (a newer protocol's): the
        // model still sees them, as JSON.
        None => ToolOutput {
            content: blocks,
            is_error,
            blocks: Vec::new(),
        },
    }
}

/// The spec of a server tool as the runtime sees it.
fn to_spec(tool: &rmcp::model::Tool, timeout: Duration) -> ToolSpec {
    let read_only = tool
        .annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    let title = tool
        .title
        .as_deref()
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.as_deref()))
        .map(str::to_owned);
    ToolSpec {
        name: tool.name.to_string(),
        title,
        description: tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_owned(),
        input_schema: Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone())),
        effect: if read_only {
            Effect::Read
        } else {
            Effect::Write
        },
        execution: Execution::Server,
        needs_approval: false,
        // A little over the connection's own timeout, so the connection's
        // clearer message wins over the runtime's generic one.
        timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX) + 1000),
    }
}

/// A server tool advertised to the model and to direct calls.
struct McpTool {
    spec: ToolSpec,
    conn: Arc<Conn>,
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Mcp(self.conn.manifest.name.clone())
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        tokio::select! {
            output = self.conn.call(&self.spec.name, input) => output,
            () = ctx.cancel.cancelled() => ToolOutput::error("the call was cancelled"),
        }
    }
}

/// An agent's MCP connections.
pub struct McpConnections {
    conns: BTreeMap<String, Arc<Conn>>,
    shared: Arc<Shared>,
    /// How many startup listings are still running.
    pending: watch::Sender<usize>,
}

impl McpConnections {
    /// The hub for the connections of `project`, with stdio servers run
    /// uncontained (the environment allowlist only). Listings of advertising
    /// connections start in the background; call inside a Tokio runtime.
    pub fn start(project: &Project) -> Arc<Self> {
        Self::start_contained(
            project,
            Containment::new(None, project.config.sandbox.clone()),
        )
    }

    /// Like [`McpConnections::start`], running stdio servers under
    /// `containment`: from a clean environment (the allowlist, `[sandbox]
    /// env` and the connection's `env`), as the first process of a PID
    /// namespace that dies with the server, without privileges. Their
    /// filesystem is not confined: an MCP server manages files of its own.
    pub fn start_contained(project: &Project, containment: Containment) -> Arc<Self> {
        Self::start_in(project, containment, &project.root.join(".bdk"))
    }

    /// Like [`McpConnections::start_contained`], with the agent's state
    /// root, where the OAuth tokens `bdk mcp login` stores are read.
    pub fn start_in(project: &Project, containment: Containment, state_root: &Path) -> Arc<Self> {
        let tokens = oauth::TokenStore::under(state_root);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(1),
            tasks: TaskTracker::new(),
            closing: CancellationToken::new(),
        });
        let conns: BTreeMap<String, Arc<Conn>> = project
            .mcp_connections
            .iter()
            .map(|m| {
                let conn = Arc::new(Conn {
                    manifest: m.clone(),
                    root: project.root.clone(),
                    containment: containment.clone(),
                    timeout: m.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis),
                    session: tokio::sync::Mutex::new(None),
                    tools: Mutex::new(Vec::new()),
                    error: Mutex::new(None),
                    tokens: tokens.clone(),
                    shared: Arc::clone(&shared),
                });
                (m.name.clone(), conn)
            })
            .collect();
        let advertising: Vec<Arc<Conn>> = conns
            .values()
            .filter(|c| c.manifest.advertise_tools)
            .cloned()
            .collect();
        let (pending, _) = watch::channel(advertising.len());
        let hub = Arc::new(Self {
            conns,
            shared: Arc::clone(&shared),
            pending,
        });
        for conn in advertising {
            let pending = hub.pending.clone();
            let closing = shared.closing.clone();
            shared.tasks.spawn(async move {
                tokio::select! {
                    listed = conn.list() => {
                        if let Err(e) = listed {
                            tracing::warn!(connection = %conn.manifest.name, error = %e, "MCP connection failed to list its tools");
                        }
                    }
                    () = closing.cancelled() => {}
                }
                pending.send_modify(|n| *n = n.saturating_sub(1));
            });
        }
        hub
    }

    fn conn(&self, name: &str) -> Result<&Arc<Conn>, McpError> {
        self.conns
            .get(name)
            .ok_or_else(|| McpError::UnknownConnection(name.to_owned()))
    }
}

#[async_trait]
impl McpHub for McpConnections {
    fn names(&self) -> Vec<String> {
        self.conns.keys().cloned().collect()
    }

    async fn list_tools(&self, name: &str) -> Result<Vec<ToolSpec>, McpError> {
        let conn = self.conn(name)?;
        let tools = conn.list().await.map_err(|message| McpError::Connection {
            name: name.to_owned(),
            message,
        })?;
        Ok(tools.iter().map(|t| to_spec(t, conn.timeout)).collect())
    }

    async fn call_tool(&self, name: &str, tool: &str, args: Value) -> Result<ToolOutput, McpError> {
        Ok(self.conn(name)?.call(tool, args).await)
    }

    fn connection_errors(&self) -> Vec<ConnectionError> {
        self.conns
            .values()
            .filter_map(|c| {
                lock(&c.error).clone().map(|message| ConnectionError {
                    name: c.manifest.name.clone(),
                    message,
                })
            })
            .collect()
    }

    fn advertised_tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for conn in self.conns.values().filter(|c| c.manifest.advertise_tools) {
            for tool in lock(&conn.tools).iter() {
                let spec = to_spec(tool, conn.timeout);
                if let Some(first) = seen.get(&spec.name) {
                    tracing::warn!(
                        tool = %spec.name,
                        "MCP tool `{}` of connection `{}` collides with the one of connection `{first}`; skipped",
                        spec.name,
                        conn.manifest.name
                    );
                    continue;
                }
                seen.insert(spec.name.clone(), conn.manifest.name.clone());
                out.push(Arc::new(McpTool {
                    spec,
                    conn: Arc::clone(conn),
                }));
            }
        }
        out
    }

    fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::SeqCst)
    }

    async fn ready(&self) {
        let mut rx = self.pending.subscribe();
        // `wait_for` fails only when the sender is gone, which cannot happen
        // while `self` is alive.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    async fn shutdown(&self) {
        self.shared.closing.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        futures::future::join_all(self.conns.values().map(|c| c.close())).await;
    }
}

/// The longest stderr line of a stdio server kept in the log; the rest of
/// the line is dropped.
const STDERR_LINE_BYTES: usize = 4096;

/// Sends what a stdio server writes on stderr (start-up banners, its own
/// logs) to bdk's log at debug level, one entry per line, instead of
/// letting it through to bdk's own stderr.
async fn log_stderr(connection: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    // One line at a time, never more than the cap in memory: bytes past it
    // are skipped up to the end of the line.
    let mut line = Vec::new();
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (part, ends) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        let room = STDERR_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let used = ends.unwrap_or(chunk.len());
        reader.consume(used);
        if ends.is_some() {
            log_line(&connection, &line);
            line.clear();
        }
    }
    log_line(&connection, &line);
}

fn log_line(connection: &str, line: &[u8]) {
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    if !line.is_empty() {
        tracing::debug!(connection = %connection, stderr = %line, "MCP server stderr");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(wire: Value) -> CallToolResult {
        serde_json::from_value(wire).expect("a CallToolResult")
    }

    #[test]
    fn one_text_block_is_a_plain_result_and_more_keeps_the_blocks() {
        let out = to_output(
            "t",
            result(json!({"content": [{"type": "text", "text": "hi"}]})),
        );
        assert_eq!(out, ToolOutput::ok("hi"));
        let out = to_output(
            "t",
            result(
                json!({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"n": 1}}),
            ),
        );
        assert_eq!(out, ToolOutput::ok(json!({"n": 1})));

        let wire = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        ]});
        let out = to_output("t", result(wire.clone()));
        assert_eq!(out.content, json!("a\n[image: image/png, 3 bytes]"));
        assert_eq!(Value::Array(out.blocks), wire["content"]);
    }

    #[test]
    fn blocks_that_are_not_valid_mcp_reach_the_model_as_json() {
        // rmcp does not check base64; the runtime does, and keeps what it
        // cannot vouch for out of the blocks callers and providers get.
        let out = to_output(
            "t",
            result(json!({"content": [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            ]})),
        );
        assert!(out.blocks.is_empty());
        assert_eq!(out.content[1]["data"], "not base64!");
        assert!(!out.is_error);
    }
}
