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

use bdk_store::Store;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::extension::HostExtension;
use crate::tool::{ToolContext, ToolServices};

pub use bdk_exec::grant;

pub use grant::{EndpointGrant, SOCKET_ENV, TOKEN_ENV};

mod ops;
mod shared;

use ops::run_op;
pub use shared::MAX_REPORT_BYTES;
use shared::{Binding, Shared};

/// The longest request line accepted. A longer line is answered with
/// `line_too_long` and the connection is closed, because the rest of the line
/// cannot be told apart from the next request.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The longest socket path used. `sun_path` holds 108 bytes on Linux and 104
/// on macOS (with the terminating NUL); staying under 100 leaves a margin.
pub const MAX_SOCKET_PATH_BYTES: usize = 100;

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

#[cfg(test)]
mod tests {
    use super::ops::{base64_decode, base64_encode};
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
