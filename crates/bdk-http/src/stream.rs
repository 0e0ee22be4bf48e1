//! `GET /v1/session/{sessionId}/stream`: the live NDJSON feed of a session.
//!
//! The body is a stream polled by the connection itself: there is no task
//! behind it. It replays from `startIndex`, follows live appends, writes a
//! bare `"\n"` after a quiet heartbeat interval, and ends when the session is
//! deleted or the app shuts down. When the client disconnects, hyper drops
//! the body, which drops the store subscription with it; nothing keeps
//! running.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{Operation, Response as DocResponse, StatusCode as DocStatus};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bdk_store::EventStream;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use bdk_api::sessions::StreamQuery;

use crate::api::response;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{QueryParams, SessionPath};
use crate::state::Agent;

/// A chunk stops growing past this size, so one burst of ready events does
/// not build an unbounded buffer.
const MAX_CHUNK: usize = 64 * 1024;

static OPEN_STREAMS: AtomicUsize = AtomicUsize::new(0);

/// The number of NDJSON stream bodies alive in this process: a gauge for
/// metrics, and the way tests check that a disconnected reader leaves
/// nothing behind.
pub fn open_streams() -> usize {
    OPEN_STREAMS.load(Ordering::SeqCst)
}

/// Counts one live stream body for as long as it exists.
struct Gauge;

impl Gauge {
    fn open() -> Self {
        OPEN_STREAMS.fetch_add(1, Ordering::SeqCst);
        Gauge
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        OPEN_STREAMS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The streaming answer: NDJSON envelopes, then live ones.
pub(crate) struct Ndjson(Body);

impl IntoResponse for Ndjson {
    fn into_response(self) -> Response {
        let mut response = self.0.into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Reverse proxies that buffer responses would hold events back.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        response
    }
}

impl OperationOutput for Ndjson {
    type Inner = ();

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<DocResponse> {
        let envelope = ctx.schema.subschema_for::<bdk_events::Envelope>();
        response(json!({
            "description": "An NDJSON stream: one `Envelope` per line. While nothing happens an empty line is written every 15 seconds; skip blank lines.",
            "headers": {
                "Cache-Control": {"schema": {"type": "string", "const": "no-cache"}},
                "X-Accel-Buffering": {
                    "description": "Asks reverse proxies not to buffer the stream.",
                    "schema": {"type": "string", "const": "no"},
                },
            },
            "content": {"application/x-ndjson": {"schema": envelope}},
        }))
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, DocResponse)> {
        Self::operation_response(ctx, operation)
            .map(|r| (Some(DocStatus::Code(200)), r))
            .into_iter()
            .collect()
    }
}

/// The handler: checks the session and its owner, then answers with the
/// streaming body.
pub(crate) async fn stream(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
    QueryParams(query): QueryParams<StreamQuery>,
) -> Result<Ndjson, ApiError> {
    let events = agent
        .host
        .subscribe(&id, query.start_index, caller.read_scope())
        .await?;
    Ok(Ndjson(ndjson_body(
        events,
        agent.shared.shutdown.clone(),
        agent.shared.heartbeat,
    )))
}

struct Feed {
    events: EventStream,
    shutdown: CancellationToken,
    heartbeat: Option<Duration>,
    done: bool,
    _gauge: Gauge,
}

/// What woke the feed up.
#[expect(
    clippy::large_enum_variant,
    reason = "a short-lived value on the stack, matched right away; boxing would allocate per event"
)]
enum Step {
    Event(Option<bdk_store::Result<bdk_events::Envelope>>),
    Heartbeat,
    Shutdown,
}

fn ndjson_body(
    events: EventStream,
    shutdown: CancellationToken,
    heartbeat: Option<Duration>,
) -> Body {
    let feed = Feed {
        events,
        shutdown,
        heartbeat,
        done: false,
        _gauge: Gauge::open(),
    };
    let chunks = futures::stream::unfold(feed, |mut feed| async move {
        if feed.done {
            return None;
        }
        let step = {
            let heartbeat = async {
                match feed.heartbeat {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = feed.shutdown.cancelled() => Step::Shutdown,
                item = feed.events.next() => Step::Event(item),
                _ = heartbeat => Step::Heartbeat,
            }
        };
        let first = match step {
            Step::Shutdown => {
                // Shutdown first records running turns as interrupted, then
                // fires this token: send what is already recorded (that
                // `turn.failed` included) before ending the stream.
                let mut buf = Vec::new();
                while buf.len() < MAX_CHUNK {
                    match feed.events.next().now_or_never() {
                        Some(Some(Ok(env))) => encode(&env, &mut buf),
                        _ => break,
                    }
                }
                if buf.is_empty() {
                    return None;
                }
                feed.done = true;
                return Some((Ok(Bytes::from(buf)), feed));
            }
            Step::Event(None) => return None,
            Step::Heartbeat => return Some((Ok::<_, Infallible>(Bytes::from_static(b"\n")), feed)),
            Step::Event(Some(Err(e))) => {
                tracing::warn!(error = %e, "session stream ended by a store error");
                return None;
            }
            Step::Event(Some(Ok(env))) => env,
        };
        let mut buf = Vec::new();
        encode(&first, &mut buf);
        // Events that are already there go out in the same chunk: one write
        // per burst instead of one per event.
        while buf.len() < MAX_CHUNK {
            match feed.events.next().now_or_never() {
                Some(Some(Ok(env))) => encode(&env, &mut buf),
                Some(Some(Err(e))) => {
                    tracing::warn!(error = %e, "session stream ended by a store error");
                    feed.done = true;
                    break;
                }
                Some(None) => {
                    feed.done = true;
                    break;
                }
                None => break,
            }
        }
        Some((Ok(Bytes::from(buf)), feed))
    });
    Body::from_stream(chunks)
}

fn encode(env: &bdk_events::Envelope, buf: &mut Vec<u8>) {
    let mark = buf.len();
    if let Err(e) = bdk_events::ndjson::encode_into(env, buf) {
        buf.truncate(mark);
        // An envelope that cannot be serialized is skipped rather than
        // written half; the reader sees the index gap.
        tracing::error!(index = env.index, error = %e, "failed to encode an event for a stream");
    }
}
