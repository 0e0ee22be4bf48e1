//! Serving the app over TCP, safe against clients that hold connections
//! without using them: the connection limit, the header, body and idle
//! timeouts, and a shutdown with a hard deadline.
//!
//! axum's own `serve` has none of these, so [`serve_with`] drives hyper
//! itself (`hyper_util`'s HTTP/1.1-and-HTTP/2 connection builder) and
//! watches every connection. A connection is always in one of three phases:
//!
//! - **head**: waiting for a request's headers, from the moment it opened
//!   or from the first byte of a later request: bounded by
//!   [`Connections::header_read_timeout`];
//! - **busy**: at least one request in flight, from its complete head until
//!   its response body has been handed to hyper in full: never bounded,
//!   since an NDJSON stream or a long model turn is work, not idleness (the
//!   request body alone has its own deadline, [`Connections::body_read_timeout`],
//!   enforced by the app);
//! - **idle**: a kept-alive connection between requests: bounded by
//!   [`Connections::idle_timeout`].
//!
//! hyper's own `header_read_timeout` is off: it also runs while a kept-alive
//! connection waits for its next request, so it cannot tell a slow client
//! from an idle one.
//!
//! At [`Connections::max_connections`] the accept loop stops accepting:
//! further connections wait in the kernel's listen queue, where they hold no
//! descriptor of this process, so tool subprocesses and the store keep the
//! descriptors they need. Idle connections are closed to make room.
//!
//! On shutdown the listener closes, connections still waiting for a head
//! are dropped (no request of theirs was received, so nothing is owed),
//! idle ones close, and busy ones get until [`Connections::shutdown_grace`]
//! to finish; then every connection still open is closed.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

/// How long a client may take to send a request's headers: 10 seconds.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's body, counted from its
/// complete headers: 30 seconds (a full 1 MiB body at about 35 KB/s).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a kept-alive connection may wait for its next request: 75
/// seconds, longer than the 60 seconds load balancers commonly keep idle
/// upstream connections, so that the balancer, not this server, closes them
/// (a server that closes first races the balancer's next request).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
/// How long open requests get to finish once shutdown starts: 15 seconds.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(15);
/// The largest default connection limit, whatever the descriptor limit.
pub const MAX_DEFAULT_CONNECTIONS: usize = 4096;

/// How connections are limited ([`crate::Config::connections`]). Every
/// duration must be positive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connections {
    /// The most time from a connection's opening, or from the first byte of
    /// a later request on it, until the request's headers are complete.
    /// Then the connection is closed without an answer.
    pub header_read_timeout: Duration,
    /// The most time from a request's complete headers until its whole body
    /// has arrived. Then the request is answered `408 request_timeout` and
    /// the connection closed. Applied by [`crate::app`], so it holds however
    /// the app is served.
    pub body_read_timeout: Duration,
    /// The most time a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The most connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// How long requests still running at shutdown get to finish before
    /// their connections are closed.
    pub shutdown_grace: Duration,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: default_max_connections(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// The default connection limit: half the process's open-file limit (the
/// soft `RLIMIT_NOFILE`), at most [`MAX_DEFAULT_CONNECTIONS`]. The other
/// half stays for what the server itself opens: tool subprocess pipes, the
/// store's files and database connections, MCP servers, the host endpoint.
/// At the common limit of 1024 that is 512 connections; at 256, 128.
pub fn default_max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let half = limit.map_or(MAX_DEFAULT_CONNECTIONS as u64, |n| n / 2);
    usize::try_from(half)
        .unwrap_or(MAX_DEFAULT_CONNECTIONS)
        .clamp(1, MAX_DEFAULT_CONNECTIONS)
}

/// [`serve_with`] with the default [`Connections`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, app, &Connections::default(), shutdown).await
}

/// Serves `app` on `listener` until `shutdown` fires, then stops accepting,
/// gives running requests [`Connections::shutdown_grace`] to finish and
/// returns, closing whatever is still open (see the module docs). Each
/// request carries its peer address as `ConnectInfo<SocketAddr>`, which the
/// default auth policy needs; `TCP_NODELAY` is set on every connection.
///
/// `limits.body_read_timeout` is not used here: [`crate::app`] applies
/// [`crate::Config::connections`]'s body deadline itself.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    limits: &Connections,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let shared = Arc::new(Shared {
        app,
        builder: builder(),
        header_read_timeout: limits.header_read_timeout,
        idle_timeout: limits.idle_timeout,
        stop: shutdown.clone(),
        force: CancellationToken::new(),
        saturated: AtomicBool::new(false),
        make_room: Notify::new(),
    });
    let tracker = TaskTracker::new();
    // Accepting fails for want of descriptors or memory: logged once until
    // it works again.
    let mut accept_failing = false;
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => {
                shared.saturated.store(false, Ordering::SeqCst);
                permit
            }
            Err(_) => {
                if !shared.saturated.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        max_connections = max,
                        "the connection limit is reached: new connections wait until one closes, and idle ones are closed to make room"
                    );
                }
                shared.make_room.notify_waiters();
                let permit = tokio::select! {
                    permit = Arc::clone(&permits).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        // The semaphore is never closed.
                        Err(_) => break,
                    },
                    () = shutdown.cancelled() => break,
                };
                shared.saturated.store(false, Ordering::SeqCst);
                permit
            }
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    accept_failing = false;
                    accepted
                }
                Err(e) => {
                    accept_failed(&e, &mut accept_failing, &shutdown).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Streams write small NDJSON lines; without TCP_NODELAY, Nagle's
        // algorithm meeting the client's delayed ACK holds a line back ~40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "failed to set TCP_NODELAY");
        }
        tracker.spawn(connection(Arc::clone(&shared), tcp, peer, permit));
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(limits.shutdown_grace, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = tracker.len(),
            grace = ?limits.shutdown_grace,
            "closing the connections whose requests did not finish within the shutdown grace"
        );
        shared.force.cancel();
        tracker.wait().await;
    }
    Ok(())
}

/// An accept error. Per-connection failures (the peer reset before we
/// accepted) cost nothing; running out of descriptors or memory is retried
/// after a pause, so that a full descriptor table does not spin the loop,
/// and logged once until accepting works again.
async fn accept_failed(e: &io::Error, failing: &mut bool, shutdown: &CancellationToken) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return;
    }
    if !std::mem::replace(failing, true) {
        tracing::error!(error = %e, "failed to accept connections; retrying every 100 ms");
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
        () = shutdown.cancelled() => {}
    }
}

fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The connection phases below replace hyper's header timeout, which
    // would also close kept-alive connections after it.
    builder.http1().header_read_timeout(None);
    builder
}

/// What every connection task shares.
struct Shared {
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    /// Shutdown started: finish what is running, take nothing new.
    stop: CancellationToken,
    /// The shutdown grace is over: close now.
    force: CancellationToken,
    /// The connection limit is reached.
    saturated: AtomicBool,
    /// Wakes idle connections to close when the limit is reached.
    make_room: Notify,
}

/// Serves one connection and closes it when its phase's time runs out.
async fn connection(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        tcp,
        activity: Arc::clone(&activity),
    });
    let service = Tracked {
        app: shared.app.clone(),
        peer,
        activity: Arc::clone(&activity),
    };
    let conn = shared.builder.serve_connection_with_upgrades(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut seen = activity.epoch();
    let mut since = Instant::now();
    // `graceful_shutdown` was called: hyper finishes the request in flight
    // (or the response it is writing) and then closes.
    let mut closing = false;
    loop {
        let phase = activity.phase();
        if shared.stop.is_cancelled() && phase == Phase::Head {
            // A request that never got its head: nothing is owed to it.
            tracing::debug!(%peer, "closing a connection without a complete request at shutdown");
            return;
        }
        if !closing
            && (shared.stop.is_cancelled()
                || (phase == Phase::Idle && shared.saturated.load(Ordering::SeqCst)))
        {
            conn.as_mut().graceful_shutdown();
            closing = true;
        }
        let deadline = match phase {
            Phase::Head => Some(since + shared.header_read_timeout),
            Phase::Idle => Some(since + shared.idle_timeout),
            Phase::Busy => None,
        };
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = activity.changed.notified() => {
                let now = activity.epoch();
                if now != seen {
                    seen = now;
                    since = Instant::now();
                }
            }
            () = sleep_until(deadline) => {
                tracing::debug!(%peer, ?phase, "closing a connection whose time ran out");
                return;
            }
            () = shared.make_room.notified(), if phase == Phase::Idle && !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            () = shared.stop.cancelled(), if !closing => {}
            () = shared.force.cancelled() => return,
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where a connection is (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Head,
    Busy,
    Idle,
}

/// What a connection is doing, kept by its I/O and its service and read by
/// its task. `epoch` counts the changes so that the task restarts a phase's
/// clock even when two changes coalesce into one wake-up (a request that
/// came and went between two looks is still activity).
struct Activity {
    in_flight: AtomicUsize,
    /// Bytes arrived while no request was in flight: a head is coming.
    head_started: AtomicBool,
    epoch: AtomicU64,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            // A new connection is expected to send a request at once.
            head_started: AtomicBool::new(true),
            epoch: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_one();
    }

    fn bytes_read(&self) {
        if self.in_flight.load(Ordering::SeqCst) == 0
            && !self.head_started.swap(true, Ordering::SeqCst)
        {
            self.bump();
        }
    }

    fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.head_started.store(false, Ordering::SeqCst);
        self.bump();
    }

    fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.bump();
    }

    fn phase(&self) -> Phase {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            Phase::Busy
        } else if self.head_started.load(Ordering::SeqCst) {
            Phase::Head
        } else {
            Phase::Idle
        }
    }
}

/// The TCP stream, telling [`Activity`] when bytes arrive.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The app as a hyper service: adds the peer address, and counts the
/// request in flight until its response body is done.
#[derive(Clone)]
struct Tracked {
    app: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let guard = InFlight::new(Arc::clone(&self.activity));
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let app = self.app.clone();
        Box::pin(async move {
            let response = match app.oneshot(req.map(Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|body| TrackedBody {
                inner: body,
                _guard: guard,
            }))
        })
    }
}

/// Counts one request in flight while it lives.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.request_started();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that holds its request's [`InFlight`] until hyper drops
/// it, after its last frame.
struct TrackedBody {
    inner: Body,
    _guard: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The error a request body fails with when it is not complete by its
/// deadline ([`Connections::body_read_timeout`]).
#[derive(Debug)]
pub(crate) struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

/// True when `e`, or an error it was caused by, is [`BodyTimedOut`].
pub(crate) fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(e) = current {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// Gives `req`'s body until `timeout` from now to arrive in full; a request
/// without a body is left as it is.
pub(crate) fn with_body_deadline(
    req: axum::extract::Request,
    timeout: Duration,
) -> axum::extract::Request {
    use hyper::body::Body as _;
    if req.body().is_end_stream() {
        return req;
    }
    req.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        })
    })
}

/// A request body that fails with [`BodyTimedOut`] once its deadline has
/// passed, however steadily the client trickles bytes in: the deadline is
/// for the whole body, not for the gap between two reads.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use http_body_util::BodyExt as _;

    use super::*;

    #[test]
    fn the_default_limit_leaves_half_the_descriptors() {
        let max = default_max_connections();
        assert!((1..=MAX_DEFAULT_CONNECTIONS).contains(&max));
        if let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            assert!(max as u64 <= limit / 2 || max == 1, "{max} of {limit}");
        }
    }

    #[test]
    fn phases_follow_reads_and_requests() {
        let a = Activity::new();
        assert_eq!(a.phase(), Phase::Head);
        a.request_started();
        assert_eq!(a.phase(), Phase::Busy);
        // Body bytes of a request in flight are not a new head.
        a.bytes_read();
        assert_eq!(a.phase(), Phase::Busy);
        let before = a.epoch();
        a.request_finished();
        assert_eq!(a.phase(), Phase::Idle);
        assert!(a.epoch() > before);
        a.bytes_read();
        assert_eq!(a.phase(), Phase::Head);
        let again = a.epoch();
        // More bytes of the same head change nothing.
        a.bytes_read();
        assert_eq!(a.epoch(), again);
    }

    #[tokio::test]
    async fn a_trickling_body_fails_at_its_deadline() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(8);
        let body = Body::new(http_body_util::StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ));
        let req = with_body_deadline(Request::new(body), Duration::from_millis(200));
        let mut body = req.into_body();
        // A byte every 20 ms: never quiet for long, and never done.
        let feeder = tokio::spawn(async move {
            while tx
                .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                .await
                .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let error = loop {
            match body.frame().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => break e,
                None => panic!("the body ended"),
            }
        };
        assert!(is_body_timeout(&error), "{error}");
        feeder.abort();
    }

    #[test]
    fn a_request_without_a_body_is_left_alone() {
        let req = with_body_deadline(Request::new(Body::empty()), Duration::from_secs(1));
        assert!(hyper::body::Body::is_end_stream(req.body()));
    }
}
