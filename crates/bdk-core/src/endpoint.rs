//! The host endpoint: a local Unix socket through which subprocess tools,
//! written in any language, reach host services (kv, files, artifacts,
//! session facts) without linking Rust.
//!
//! One [`Endpoint`] belongs to each `Host`. It starts lazily, on the first
//! command-tool call that has host services, because most hosts (`bdk
//! validate`, `bdk info`, agents without command tools) never need a socket.
//! The socket lives at `<state_root>/host.sock` when that path is short
//! enough for `sun_path` and no live host holds it, else in a private
//! directory (mode 0700) under the system temp dir. The socket file (and that
//! directory) is removed when the endpoint closes: on `Host::shutdown` and on
//! drop.
//!
//! Every call gets its own capability: [`Endpoint::grant`] mints a random
//! token bound to the call's context (session or none, principal, dry-run
//! flag), and the returned [`EndpointGrant`] revokes it when dropped. The
//! command tool runner holds the grant until the tool's process group is gone
//! and hands `BDK_HOST_SOCKET` and `BDK_HOST_TOKEN` to the process.
//!
//! The protocol is JSON lines: a request `{"token", "id", "op", "args"}` per
//! line, answered in order by `{"id", "ok": true, "result"}` or
//! `{"id", "ok": false, "error": "<code>", "message"}`. `docs/tools.md`
//! documents the operations for tool authors.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bdk_events::SessionId;
use bdk_store::{Store, StoreError};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::extension::{HostExtension, OperationCall, OperationError};
use crate::tool::report::LOG_LEVELS;
use crate::tool::services::{SendArgs, SessionArgs, ToolCallArgs};
use crate::tool::{NewArtifact, ServiceError, ToolContext, ToolNote, ToolServices};

pub use bdk_exec::grant;

pub use grant::{EndpointGrant, SOCKET_ENV, TOKEN_ENV};

/// The longest request line accepted. A longer line is answered with
/// `line_too_long` and the connection is closed, because the rest of the line
/// cannot be told apart from the next request.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The longest socket path used. `sun_path` holds 108 bytes on Linux and 104
/// on macOS (with the terminating NUL); staying under 100 leaves a margin.
pub const MAX_SOCKET_PATH_BYTES: usize = 100;

/// The largest report (`report.progress` message, `report.log` message and
/// data, as JSON) a tool may send: reports wait in memory for a slow caller,
/// so each is kept small.
pub const MAX_REPORT_BYTES: usize = 16 * 1024;

/// Connections open at once; more are answered with `busy` and closed, so a
/// runaway tool cannot exhaust the host's file descriptors.
const MAX_CONNECTIONS: usize = 256;

/// How long probing an existing socket file may take before it counts as held
/// by a live host.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The pause after a failed `accept` (usually: out of file descriptors), so
/// the accept loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The socket file name, in the state root or the private directory.
const SOCKET_NAME: &str = "host.sock";

/// Errors starting the endpoint or granting a capability.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The endpoint was closed (the host shut down).
    #[error("host endpoint is closed")]
    Closed,
    /// Neither the state root nor the temp dir gives a short enough path.
    #[error(
        "socket path {} is longer than {MAX_SOCKET_PATH_BYTES} bytes; set TMPDIR to a shorter directory",
        path.display()
    )]
    PathTooLong {
        /// The path that was too long.
        path: PathBuf,
    },
    /// A file-system or socket operation failed.
    #[error("failed to {action} {}: {source}", path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// Removes a token from the table when the grant goes.
struct Revoke {
    shared: Arc<Shared>,
    token: String,
}

impl Drop for Revoke {
    fn drop(&mut self) {
        self.shared.tokens().remove(&self.token);
    }
}

/// What a token may do: the context of the call it was minted for, and the
/// services that record artifacts for it.
struct Binding {
    ctx: ToolContext,
    services: Arc<dyn ToolServices>,
}

/// State the accept loop and the connections share with the endpoint.
struct Shared {
    store: Arc<dyn Store>,
    /// The host's extensions, which answer the operations they declare.
    extensions: Vec<Arc<dyn HostExtension>>,
    /// The key-value namespaces the server keeps its own state in, which
    /// the `kv.*` operations refuse.
    reserved: BTreeSet<String>,
    tokens: Mutex<HashMap<String, Arc<Binding>>>,
}

impl Shared {
    fn tokens(&self) -> MutexGuard<'_, HashMap<String, Arc<Binding>>> {
        // The table is plain data that no panic can leave half-updated.
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bound socket and what to clean up when it closes.
struct Listening {
    socket: PathBuf,
    /// The private directory holding the socket, when the state root was not
    /// usable.
    private_dir: Option<PathBuf>,
    /// Device and inode of the socket file we bound, so closing never removes
    /// a file another host put at the same path since.
    identity: (u64, u64),
    task: JoinHandle<()>,
}

impl Listening {
    /// Stops accepting (dropping the accept task drops every connection task
    /// with it) and removes the socket file. Short, bounded file-system calls
    /// on local paths: fine to run synchronously, also from `Drop`.
    fn close(self) {
        self.task.abort();
        remove_socket(&self.socket, self.private_dir.as_deref(), self.identity);
    }
}

/// Removes the socket file we bound (when it is still ours) and its
/// private directory.
fn remove_socket(socket: &Path, private_dir: Option<&Path>, identity: (u64, u64)) {
    if let Ok(meta) = std::fs::symlink_metadata(socket)
        && (meta.dev(), meta.ino()) == identity
        && let Err(e) = std::fs::remove_file(socket)
    {
        tracing::debug!(socket = %socket.display(), error = %e, "failed to remove the host socket");
    }
    if let Some(dir) = private_dir
        && let Err(e) = std::fs::remove_dir(dir)
    {
        tracing::debug!(dir = %dir.display(), error = %e, "failed to remove the host socket directory");
    }
}

enum State {
    Idle,
    Listening(Listening),
    Closed,
}

/// The local endpoint of one host.
pub struct Endpoint {
    shared: Arc<Shared>,
    state_root: PathBuf,
    /// The user the socket is given to when programs run as one of their
    /// own (see [`Endpoint::for_user`]).
    user: Option<bdk_sandbox::Ids>,
    state: Mutex<State>,
    /// Serializes the lazy start, which awaits (probing a stale socket).
    starting: tokio::sync::Mutex<()>,
}

impl Endpoint {
    /// An endpoint over `store` that also answers the operations of
    /// `extensions` and refuses the `kv.*` operations on the `reserved`
    /// namespaces (the server's own); nothing is bound until the first
    /// grant.
    pub fn new(
        store: Arc<dyn Store>,
        extensions: Vec<Arc<dyn HostExtension>>,
        reserved: BTreeSet<String>,
    ) -> Self {
        let state_root = store.state_root();
        Self {
            shared: Arc::new(Shared {
                store,
                extensions,
                reserved,
                tokens: Mutex::new(HashMap::new()),
            }),
            state_root,
            user: None,
            state: Mutex::new(State::Idle),
            starting: tokio::sync::Mutex::new(()),
        }
    }

    /// The endpoint whose socket belongs to `user`: the user contained
    /// programs run as when the server runs as root, who must be able to
    /// connect (the socket is mode 0600).
    pub fn for_user(mut self, user: Option<bdk_sandbox::Ids>) -> Self {
        self.user = user;
        self
    }

    /// Mints a token for the call of `ctx`, starting the endpoint if needed.
    /// `services` records artifacts for the call. The token is valid until the
    /// grant is dropped or the endpoint closes.
    pub async fn grant(
        &self,
        ctx: &ToolContext,
        services: Arc<dyn ToolServices>,
    ) -> Result<EndpointGrant, EndpointError> {
        let socket = self.start().await?;
        let token = new_token();
        self.shared.tokens().insert(
            token.clone(),
            Arc::new(Binding {
                ctx: ctx.clone(),
                services,
            }),
        );
        let revoke = Revoke {
            shared: Arc::clone(&self.shared),
            token: token.clone(),
        };
        Ok(EndpointGrant::new(socket, token, Box::new(revoke)))
    }

    /// The socket path, once the endpoint listens.
    pub fn socket_path(&self) -> Option<PathBuf> {
        match &*self.state() {
            State::Listening(l) => Some(l.socket.clone()),
            State::Idle | State::Closed => None,
        }
    }

    /// Stops listening, drops every connection, revokes every token and
    /// removes the socket file. Later grants fail with
    /// [`EndpointError::Closed`].
    pub fn close(&self) {
        let previous = std::mem::replace(&mut *self.state(), State::Closed);
        if let State::Listening(listening) = previous {
            listening.close();
        }
        // Bindings hold host services (and so the host); dropping them here
        // also breaks that cycle for grants nobody will use any more.
        self.shared.tokens().clear();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Swapped whole under the lock, so a panic cannot leave it torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The socket if listening, `None` if idle.
    fn current(&self) -> Result<Option<PathBuf>, EndpointError> {
        match &*self.state() {
            State::Listening(l) => Ok(Some(l.socket.clone())),
            State::Idle => Ok(None),
            State::Closed => Err(EndpointError::Closed),
        }
    }

    async fn start(&self) -> Result<PathBuf, EndpointError> {
        if let Some(socket) = self.current()? {
            return Ok(socket);
        }
        let _one = self.starting.lock().await;
        if let Some(socket) = self.current()? {
            return Ok(socket);
        }
        let bound = bind(&self.state_root, self.user).await?;
        let socket = bound.socket.clone();
        tracing::debug!(socket = %socket.display(), "host endpoint listening");
        let listening = Listening {
            socket: bound.socket,
            private_dir: bound.private_dir,
            identity: bound.identity,
            task: tokio::spawn(accept_loop(bound.listener, Arc::clone(&self.shared))),
        };
        let mut state = self.state();
        if matches!(*state, State::Closed) {
            drop(state);
            listening.close();
            return Err(EndpointError::Closed);
        }
        *state = State::Listening(listening);
        Ok(socket)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("socket", &self.socket_path())
            .finish_non_exhaustive()
    }
}

/// 244 random bits (two v4 UUIDs), hex.
fn new_token() -> String {
    format!(
        "bht_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

struct Bound {
    listener: UnixListener,
    socket: PathBuf,
    private_dir: Option<PathBuf>,
    identity: (u64, u64),
}

/// Binds `<state_root>/host.sock` when possible, else a socket in a fresh
/// private directory under the temp dir.
async fn bind(state_root: &Path, user: Option<bdk_sandbox::Ids>) -> Result<Bound, EndpointError> {
    let preferred = state_root.join(SOCKET_NAME);
    let mut bound = None;
    if preferred.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        match bind_preferred(&preferred).await {
            Ok(b) => bound = Some(b),
            Err(e) => {
                tracing::debug!(socket = %preferred.display(), error = %e, "using a private host socket directory instead");
            }
        }
    }
    let bound = match bound {
        Some(bound) => bound,
        None => bind_private().await?,
    };
    if let Some(user) = user {
        // The socket's path is the server's (its state root, or a private
        // directory it just made): no link can redirect the change.
        let given = rustix::fs::chownat(
            rustix::fs::CWD,
            &bound.socket,
            Some(rustix::fs::Uid::from_raw(user.uid)),
            Some(rustix::fs::Gid::from_raw(user.gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        );
        if let Err(e) = given {
            drop(bound.listener);
            remove_socket(&bound.socket, bound.private_dir.as_deref(), bound.identity);
            return Err(EndpointError::Io {
                action: "give the programs' user",
                path: bound.socket,
                source: e.into(),
            });
        }
    }
    Ok(bound)
}

async fn bind_preferred(path: &Path) -> Result<Bound, EndpointError> {
    let io_err = |action, source| EndpointError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    match tokio::fs::symlink_metadata(path).await {
        Ok(meta) if meta.file_type().is_socket() => {
            // A socket file is either held by a live host (this process or
            // another over the same state root) or left by one that died.
            // Only a refused connection proves it is stale.
            match tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(path)).await {
                Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    match tokio::fs::remove_file(path).await {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_err("remove the stale socket", e)),
                    }
                }
                Ok(Err(e)) => return Err(io_err("probe the socket", e)),
                Ok(Ok(_)) | Err(_) => {
                    return Err(io_err(
                        "bind",
                        io::Error::new(io::ErrorKind::AddrInUse, "another host is listening"),
                    ));
                }
            }
        }
        Ok(_) => {
            return Err(io_err(
                "bind",
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "a file that is not a socket is in the way",
                ),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspect", e)),
    }
    let listener = listen(path).await?;
    match identity(path).await {
        Ok(identity) => Ok(Bound {
            identity,
            listener,
            socket: path.to_path_buf(),
            private_dir: None,
        }),
        Err(e) => {
            // Without its identity the socket could not be cleaned up safely
            // later: give it up now rather than leave it behind.
            let _ = tokio::fs::remove_file(path).await;
            Err(e)
        }
    }
}

async fn bind_private() -> Result<Bound, EndpointError> {
    let dir = std::env::temp_dir().join(format!("bdk-{}", uuid::Uuid::new_v4().simple()));
    let socket = dir.join(SOCKET_NAME);
    if socket.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
        return Err(EndpointError::PathTooLong { path: socket });
    }
    // Mode 0700 (narrowed further by the umask, never widened): only this
    // user can reach the socket at all; the token still guards each request.
    tokio::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .await
        .map_err(|source| EndpointError::Io {
            action: "create",
            path: dir.clone(),
            source,
        })?;
    let bound = async {
        let listener = listen(&socket).await?;
        Ok(Bound {
            identity: identity(&socket).await?,
            listener,
            socket: socket.clone(),
            private_dir: Some(dir.clone()),
        })
    }
    .await;
    if bound.is_err() {
        let _ = tokio::fs::remove_file(&socket).await;
        let _ = tokio::fs::remove_dir(&dir).await;
    }
    bound
}

async fn listen(path: &Path) -> Result<UnixListener, EndpointError> {
    // `bind` is a socket, a bind and a listen syscall on a local path: bounded
    // and short, so it runs inline on the runtime.
    let listener = UnixListener::bind(path).map_err(|source| EndpointError::Io {
        action: "bind",
        path: path.to_path_buf(),
        source,
    })?;
    // Owner only: other local users have no business connecting.
    if let Err(e) = tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).await {
        tracing::debug!(socket = %path.display(), error = %e, "failed to restrict the host socket's mode");
    }
    Ok(listener)
}

async fn identity(path: &Path) -> Result<(u64, u64), EndpointError> {
    let meta = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|source| EndpointError::Io {
            action: "inspect",
            path: path.to_path_buf(),
            source,
        })?;
    Ok((meta.dev(), meta.ino()))
}

/// Accepts connections until the task is dropped; each connection runs in a
/// task of this loop's set, so they all end with it.
async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() >= MAX_CONNECTIONS => {
                    // A fresh socket's send buffer takes one short line
                    // without blocking; the connection is dropped right after.
                    let line = response_line(&error_response(
                        Value::Null,
                        "busy",
                        format!("the host endpoint already serves {MAX_CONNECTIONS} connections; close idle ones"),
                    ));
                    let _ = stream.try_write(&line);
                }
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "host endpoint failed to accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "a host endpoint connection panicked");
                }
            }
        }
    }
}

enum Line {
    /// A whole line is in the buffer (without its newline).
    Complete,
    /// The peer closed the connection with nothing pending.
    Eof,
    /// The line passed [`MAX_LINE_BYTES`].
    TooLong,
}

/// Reads one line into `buf`, never holding more than [`MAX_LINE_BYTES`].
/// A last line without a newline still counts as a request.
async fn read_line(reader: &mut BufReader<OwnedReadHalf>, buf: &mut Vec<u8>) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (take, newline) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (available.len(), false),
        };
        if buf.len() + take > MAX_LINE_BYTES {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(if newline { take + 1 } else { take });
        if newline {
            return Ok(Line::Complete);
        }
    }
}

/// Answers requests of one connection in order until it closes.
async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        let response = match read_line(&mut reader, &mut line).await {
            Ok(Line::Eof) => return,
            Ok(Line::TooLong) => {
                let response = error_response(
                    Value::Null,
                    "line_too_long",
                    format!(
                        "request line is longer than {MAX_LINE_BYTES} bytes; the connection is closed"
                    ),
                );
                let _ = write.write_all(&response_line(&response)).await;
                return;
            }
            Ok(Line::Complete) if line.trim_ascii().is_empty() => continue,
            Ok(Line::Complete) => handle(&shared, &line).await,
            Err(e) => {
                tracing::debug!(error = %e, "host endpoint connection failed");
                return;
            }
        };
        if write.write_all(&response_line(&response)).await.is_err() {
            return;
        }
    }
}

fn response_line(response: &Value) -> Vec<u8> {
    let mut bytes = response.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

fn error_response(id: Value, code: &str, message: impl Into<String>) -> Value {
    json!({"id": id, "ok": false, "error": code, "message": message.into()})
}

/// Parses, authorizes and runs one request.
async fn handle(shared: &Shared, line: &[u8]) -> Value {
    let request: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return error_response(
                Value::Null,
                "invalid_json",
                format!("request is not valid JSON: {e}"),
            );
        }
    };
    let Value::Object(mut request) = request else {
        return error_response(
            Value::Null,
            "invalid_request",
            "request must be a JSON object",
        );
    };
    let id = request.remove("id").unwrap_or(Value::Null);
    // Authorization comes first, so a caller without a valid token learns
    // nothing else about the endpoint.
    let binding = match request.get("token") {
        Some(Value::String(token)) => shared.tokens().get(token).cloned(),
        _ => None,
    };
    let Some(binding) = binding else {
        return error_response(
            id,
            "unauthorized",
            "token is missing, unknown, or its call has ended; send the BDK_HOST_TOKEN of the running call",
        );
    };
    let Some(Value::String(op)) = request.remove("op") else {
        return error_response(id, "invalid_request", "op must be a string");
    };
    let args = match request.remove("args") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => return error_response(id, "invalid_args", "args must be a JSON object"),
    };
    match run_op(shared, &binding, &op, args).await {
        Ok(result) => json!({"id": id, "ok": true, "result": result}),
        Err(e) => error_response(id, e.code(), e.to_string()),
    }
}

/// Why an operation failed; each kind is one error code on the wire.
#[derive(Debug, thiserror::Error)]
enum OpError {
    #[error("{0}")]
    InvalidArgs(String),
    #[error("unknown op `{0}`; known ops: {1}")]
    UnknownOp(String, String),
    #[error("{0}")]
    Unavailable(&'static str),
    #[error("`{0}` needs a call bound to a session; this call has none")]
    NoSession(&'static str),
    #[error("`{0}` changes state and this call runs in a dry-run session")]
    DryRun(&'static str),
    #[error("{0}")]
    NotText(String),
    #[error(
        "kv namespace `{0}` belongs to the server, which keeps its own state there; tools and handlers may not read or change it, so use a namespace of your own"
    )]
    ReservedNamespace(String),
    #[error("host storage failed; the host log has the details")]
    Internal,
    /// An extension's refusal: its code and message.
    #[error("{1}")]
    Extension(&'static str, String),
    /// A host service's refusal: its code and message.
    #[error("{0}")]
    Service(ServiceError),
}

impl OpError {
    fn code(&self) -> &'static str {
        match self {
            OpError::InvalidArgs(_) | OpError::NotText(_) => "invalid_args",
            OpError::UnknownOp(..) => "unknown_op",
            OpError::Unavailable(_) => "unavailable",
            OpError::NoSession(_) => "no_session",
            OpError::DryRun(_) => "dry_run",
            OpError::ReservedNamespace(_) => "reserved_namespace",
            OpError::Internal => "internal",
            OpError::Extension(code, _) => code,
            OpError::Service(e) => e.code,
        }
    }
}

/// The operations every endpoint answers; extensions add theirs.
const BUILTIN_OPS: &[&str] = &[
    "kv.get",
    "kv.put",
    "kv.delete",
    "kv.list",
    "files.get",
    "files.put",
    "files.delete",
    "files.list",
    "artifacts.tag",
    "session.info",
    "send",
    "session.get",
    "session.wait",
    "tools.call",
    "mcp.names",
    "mcp.list_tools",
    "mcp.call_tool",
    "report.progress",
    "report.log",
];

/// Every operation `shared` answers, for the `unknown_op` message.
fn known_ops(shared: &Shared) -> String {
    let extension_ops = shared.extensions.iter().flat_map(|e| e.operations().iter());
    BUILTIN_OPS
        .iter()
        .chain(extension_ops)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// An operation an extension declared, answered by it.
async fn extension_op(
    extension: &dyn HostExtension,
    binding: &Binding,
    op: &str,
    args: Value,
) -> Result<Value, OpError> {
    let call = OperationCall {
        op,
        args,
        ctx: &binding.ctx,
    };
    extension.operation(call).await.map_err(|e| {
        let code = match &e {
            OperationError::InvalidArgs(_) => "invalid_args",
            OperationError::NoSession(_) => "no_session",
            OperationError::DryRun(_) => "dry_run",
            OperationError::Unavailable(_) => "unavailable",
            OperationError::SessionNotFound(_) => "session_not_found",
            OperationError::Forbidden(_) => "forbidden",
            OperationError::Storage(_) => "internal",
        };
        match e {
            OperationError::Storage(e) => store_error(op, e),
            other => OpError::Extension(code, other.to_string()),
        }
    })
}

fn store_error(op: &str, e: StoreError) -> OpError {
    match e {
        StoreError::Invalid { .. } => OpError::InvalidArgs(e.to_string()),
        other => {
            tracing::warn!(op, error = %other, "host endpoint storage failed");
            OpError::Internal
        }
    }
}

fn parse<T: DeserializeOwned>(op: &str, args: Value) -> Result<T, OpError> {
    serde_json::from_value(args)
        .map_err(|e| OpError::InvalidArgs(format!("invalid args for `{op}`: {e}")))
}

/// A report over [`MAX_REPORT_BYTES`] is refused.
fn report_size(bytes: usize) -> Result<(), OpError> {
    if bytes > MAX_REPORT_BYTES {
        Err(OpError::InvalidArgs(format!(
            "a report holds at most {MAX_REPORT_BYTES} bytes, this one {bytes}; log large data to a file or an artifact"
        )))
    } else {
        Ok(())
    }
}

/// The server's own namespaces are refused to every `kv.*` operation, reads
/// included: a tool that could write them could squat a conversation key or
/// forge a dedupe record, and one that could read or list them would learn
/// other conversations' keys and delivery ids.
fn unreserved(shared: &Shared, namespace: &str) -> Result<(), OpError> {
    if shared.reserved.contains(namespace) {
        Err(OpError::ReservedNamespace(namespace.to_owned()))
    } else {
        Ok(())
    }
}

/// Writes are refused in dry-run sessions, the same way write tools are
/// stubbed there.
fn writable(binding: &Binding, op: &'static str) -> Result<(), OpError> {
    if binding.ctx.dry_run {
        Err(OpError::DryRun(op))
    } else {
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvKey {
    namespace: String,
    key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvPut {
    namespace: String,
    key: String,
    value: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportProgress {
    progress: f64,
    #[serde(default)]
    total: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportLog {
    level: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvList {
    namespace: String,
    #[serde(default)]
    prefix: String,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    Text,
    Base64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGet {
    path: String,
    encoding: Option<Encoding>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePath {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FilePut {
    path: String,
    content: Option<String>,
    content_base64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prefix {
    #[serde(default)]
    prefix: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Tag {
    kind: String,
    name: Option<String>,
    path: Option<String>,
    content: Option<String>,
    content_base64: Option<String>,
    content_type: Option<String>,
    metadata: Option<Value>,
}

/// The bytes of a `content` / `contentBase64` pair, and whether they came as text.
fn content_bytes(
    content: Option<String>,
    content_base64: Option<String>,
) -> Result<(Vec<u8>, bool), OpError> {
    match (content, content_base64) {
        (Some(text), None) => Ok((text.into_bytes(), true)),
        (None, Some(encoded)) => base64_decode(&encoded)
            .map(|bytes| (bytes, false))
            .map_err(|e| OpError::InvalidArgs(format!("contentBase64 is not valid base64: {e}"))),
        _ => Err(OpError::InvalidArgs(
            "give exactly one of content (text) or contentBase64".to_owned(),
        )),
    }
}

async fn run_op(
    shared: &Shared,
    binding: &Binding,
    op: &str,
    args: Value,
) -> Result<Value, OpError> {
    let store = &shared.store;
    match op {
        "kv.get" => {
            let a: KvKey = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let value = store
                .kv_get(&a.namespace, &a.key)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"found": value.is_some(), "value": value}))
        }
        "kv.put" => {
            writable(binding, "kv.put")?;
            let a: KvPut = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            store
                .kv_put(&a.namespace, &a.key, a.value)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({}))
        }
        "kv.delete" => {
            writable(binding, "kv.delete")?;
            let a: KvKey = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let deleted = store
                .kv_delete(&a.namespace, &a.key)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"deleted": deleted}))
        }
        "kv.list" => {
            let a: KvList = parse(op, args)?;
            unreserved(shared, &a.namespace)?;
            let keys = store
                .kv_list(&a.namespace, &a.prefix)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"keys": keys}))
        }
        "files.get" => file_get(store, parse(op, args)?).await,
        "files.put" => {
            writable(binding, "files.put")?;
            let a: FilePut = parse(op, args)?;
            let (bytes, _) = content_bytes(a.content, a.content_base64)?;
            let size = bytes.len();
            store
                .file_put(&a.path, bytes)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"size": size}))
        }
        "files.delete" => {
            writable(binding, "files.delete")?;
            let a: FilePath = parse(op, args)?;
            let deleted = store
                .file_delete(&a.path)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"deleted": deleted}))
        }
        "files.list" => {
            let a: Prefix = parse(op, args)?;
            let paths = store
                .file_list(&a.prefix)
                .await
                .map_err(|e| store_error(op, e))?;
            Ok(json!({"paths": paths}))
        }
        "artifacts.tag" => tag_artifact(binding, args).await,
        "session.info" => {
            let session = &binding.ctx.session;
            Ok(json!({
                "id": session.id.as_ref().map(|id| id.as_str()),
                "channel": session.channel,
                "mode": session.mode,
                "principal": session.principal,
                "callId": binding.ctx.call_id,
                "dryRun": binding.ctx.dry_run,
            }))
        }
        "send" | "session.get" | "session.wait" | "tools.call" => {
            session_op(binding, op, args).await
        }
        "mcp.names" | "mcp.list_tools" | "mcp.call_tool" => mcp_op(binding, op, args).await,
        "report.progress" => {
            let a: ReportProgress = parse(op, args)?;
            report_size(a.message.as_ref().map_or(0, String::len))?;
            if !a.progress.is_finite() || a.total.is_some_and(|t| !t.is_finite()) {
                return Err(OpError::InvalidArgs(
                    "progress and total must be finite numbers".to_owned(),
                ));
            }
            binding.ctx.report(ToolNote::Progress {
                progress: a.progress,
                total: a.total,
                message: a.message,
            });
            Ok(json!({}))
        }
        "report.log" => {
            let a: ReportLog = parse(op, args)?;
            if !LOG_LEVELS.contains(&a.level.as_str()) {
                return Err(OpError::InvalidArgs(format!(
                    "unknown level `{}` (levels: {})",
                    a.level,
                    LOG_LEVELS.join(", ")
                )));
            }
            report_size(
                a.message.as_ref().map_or(0, String::len)
                    + a.data.as_ref().map_or(0, |d| d.to_string().len()),
            )?;
            let data = match (a.message, a.data) {
                (Some(message), None) => Value::String(message),
                (None, Some(data)) => data,
                (Some(message), Some(data)) => json!({"message": message, "data": data}),
                (None, None) => {
                    return Err(OpError::InvalidArgs(
                        "give a message, data, or both".to_owned(),
                    ));
                }
            };
            binding.ctx.report(ToolNote::Log {
                level: a.level,
                data,
            });
            Ok(json!({}))
        }
        other => match shared
            .extensions
            .iter()
            .find(|e| e.operations().contains(&other))
        {
            Some(extension) => extension_op(extension.as_ref(), binding, op, args).await,
            None => Err(OpError::UnknownOp(other.to_owned(), known_ops(shared))),
        },
    }
}

/// The session services: `send`, `session.get`, `session.wait`,
/// `tools.call`, answered by the call's services under their reach rule.
async fn session_op(binding: &Binding, op: &str, args: Value) -> Result<Value, OpError> {
    let services = &binding.services;
    let ctx = &binding.ctx;
    let answer = match op {
        "send" => {
            let a: SendArgs = parse(op, args)?;
            let send = a.into_message().map_err(OpError::Service)?;
            services.send(ctx, send).await.map(|r| json!(r))
        }
        "session.get" => {
            let a: SessionArgs = parse(op, args)?;
            if a.timeout_ms.is_some() {
                return Err(OpError::InvalidArgs(
                    "`timeoutMs` applies to `session.wait`".to_owned(),
                ));
            }
            let (target, _) = a.into_parts().map_err(OpError::Service)?;
            services.session_get(ctx, target).await.map(|r| json!(r))
        }
        "session.wait" => {
            let a: SessionArgs = parse(op, args)?;
            let (target, wait) = a.into_parts().map_err(OpError::Service)?;
            services
                .session_wait(ctx, target, wait)
                .await
                .map(|r| json!(r))
        }
        _ => {
            let a: ToolCallArgs = parse(op, args)?;
            let input = a.input.unwrap_or_else(|| Value::Object(Map::new()));
            let session = match a.session_id {
                Some(id) if id.trim().is_empty() => {
                    return Err(OpError::InvalidArgs(
                        "sessionId must not be empty".to_owned(),
                    ));
                }
                Some(id) => Some(SessionId::from_string(&id)),
                None => None,
            };
            services
                .call_tool(ctx, &a.tool, input, session)
                .await
                .map(|r| json!(r))
        }
    };
    answer.map_err(OpError::Service)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpListTools {
    connection: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpCallTool {
    connection: String,
    tool: String,
    #[serde(default)]
    args: Option<Value>,
}

/// The `mcp.*` ops: the agent's MCP connections, as `host.mcp` offers them
/// to native tools.
async fn mcp_op(binding: &Binding, op: &str, args: Value) -> Result<Value, OpError> {
    let Some(mcp) = binding.services.mcp() else {
        return Err(OpError::Unavailable(
            "this agent has no MCP connections (agent/mcp-connections/)",
        ));
    };
    match op {
        "mcp.names" => {
            let _: Map<String, Value> = parse(op, args)?;
            Ok(json!({"names": mcp.names()}))
        }
        "mcp.list_tools" => {
            let a: McpListTools = parse(op, args)?;
            let tools = mcp
                .list_tools(&a.connection)
                .await
                .map_err(|e| OpError::InvalidArgs(e.to_string()))?;
            Ok(json!({"tools": tools}))
        }
        _ => {
            writable(binding, "mcp.call_tool")?;
            let a: McpCallTool = parse(op, args)?;
            let input = a.args.unwrap_or_else(|| Value::Object(Map::new()));
            let output = mcp
                .call_tool(&a.connection, &a.tool, input)
                .await
                .map_err(|e| OpError::InvalidArgs(e.to_string()))?;
            let mut answer = json!({"content": output.content, "isError": output.is_error});
            if !output.blocks.is_empty() {
                answer["blocks"] = Value::Array(output.blocks);
            }
            Ok(answer)
        }
    }
}

async fn file_get(store: &Arc<dyn Store>, a: FileGet) -> Result<Value, OpError> {
    let Some(bytes) = store
        .file_get(&a.path)
        .await
        .map_err(|e| store_error("files.get", e))?
    else {
        return Ok(json!({"found": false}));
    };
    let size = bytes.len();
    // Text when asked for, or by default when the bytes are UTF-8; base64
    // otherwise, so binary files round-trip.
    let text = match a.encoding {
        Some(Encoding::Base64) => Err(bytes),
        Some(Encoding::Text) => Ok(String::from_utf8(bytes).map_err(|_| {
            OpError::NotText(format!(
                "{} is not UTF-8 text; ask with encoding \"base64\"",
                a.path
            ))
        })?),
        None => String::from_utf8(bytes).map_err(|e| e.into_bytes()),
    };
    Ok(match text {
        Ok(text) => json!({"found": true, "size": size, "content": text}),
        Err(bytes) => {
            json!({"found": true, "size": size, "contentBase64": base64_encode(&bytes)})
        }
    })
}

/// Tags an artifact through the host services, which store it and record
/// `artifact.tagged` exactly as the `tag_artifact` built-in does.
async fn tag_artifact(binding: &Binding, args: Value) -> Result<Value, OpError> {
    const OP: &str = "artifacts.tag";
    if binding.ctx.session.id.is_none() {
        return Err(OpError::NoSession(OP));
    }
    writable(binding, OP)?;
    let a: Tag = parse(OP, args)?;
    if a.kind.trim().is_empty() {
        return Err(OpError::InvalidArgs("kind must not be empty".to_owned()));
    }
    let metadata = match a.metadata {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => {
            return Err(OpError::InvalidArgs(
                "metadata must be a JSON object".to_owned(),
            ));
        }
    };
    // A workspace file (recorded with its path, as the built-in does), or
    // inline content (recorded without one).
    let (bytes, default_name, default_type, path) = match a.path {
        Some(rel) => {
            if a.content.is_some() || a.content_base64.is_some() {
                return Err(OpError::InvalidArgs(
                    "give exactly one of path, content (text) or contentBase64".to_owned(),
                ));
            }
            let file = crate::tool::builtin::read_artifact_file(&binding.ctx, &rel)
                .await
                .map_err(|out| OpError::InvalidArgs(out.to_text()))?;
            (file.bytes, file.name, file.content_type, Some(file.path))
        }
        None => {
            let (bytes, text) = content_bytes(a.content, a.content_base64)?;
            let default_type = if text {
                "text/plain; charset=utf-8"
            } else {
                "application/octet-stream"
            };
            (bytes, a.kind.clone(), default_type, None)
        }
    };
    let artifact = NewArtifact {
        name: a.name.unwrap_or(default_name),
        content_type: a.content_type.unwrap_or_else(|| default_type.to_owned()),
        kind: a.kind,
        path,
        content: bytes,
        metadata,
    };
    match binding.services.tag_artifact(&binding.ctx, artifact).await {
        Ok(id) => Ok(json!({"artifactId": id})),
        Err(message) => {
            tracing::warn!(call_id = %binding.ctx.call_id, error = %message, "host endpoint failed to tag an artifact");
            Err(OpError::Internal)
        }
    }
}

/// Standard base64 (RFC 4648): padded when written; read with or without
/// padding (clients differ), anything else refused.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn base64_encode(bytes: &[u8]) -> String {
    base64::Engine::encode(&BASE64, bytes)
}

fn base64_decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // The crate's padding-indifferent mode also takes a partial pad (`Zg=`);
    // a pad, when there is one, must complete the last group.
    if text.ends_with('=') && !text.len().is_multiple_of(4) {
        return Err(base64::DecodeError::InvalidPadding);
    }
    base64::Engine::decode(&BASE64, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
            assert_eq!(
                base64_decode(encoded.trim_end_matches('=')).unwrap(),
                plain.as_bytes()
            );
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
        assert!(base64_decode("Zm9v!").is_err());
        assert!(base64_decode("Z").is_err());
        assert!(base64_decode("Zg===").is_err());
        assert!(base64_decode("Zg=").is_err());
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let a = new_token();
        assert_eq!(a.len(), 4 + 64);
        assert_ne!(a, new_token());
    }
}
