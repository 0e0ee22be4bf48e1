#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! bdk-api's client against the real router over real sockets: every
//! session route, the refusals it reads, and an event stream that survives
//! a dropped connection.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bdk_api::sessions::{Decision, FollowUpRequest, StartSessionRequest};
use bdk_api::{Client, ClientError, ErrorCode, Resume};
use bdk_events::Envelope;
use bdk_http::Config;
use common::*;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

fn api(base: &str) -> Client {
    Client::new(base, client()).unwrap()
}

/// Reads `events` until one satisfies `stop`; all of them, in order.
async fn read_until(
    events: &mut BoxStream<'static, Result<Envelope, ClientError>>,
    stop: impl Fn(&Envelope) -> bool,
) -> Vec<Envelope> {
    let mut seen = Vec::new();
    let read = async {
        while let Some(e) = events.next().await {
            let e = e.unwrap();
            let done = stop(&e);
            seen.push(e);
            if done {
                return;
            }
        }
        panic!("the stream ended early");
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .unwrap_or_else(|_| panic!("no matching event within {DEADLINE:?}"));
    seen
}

fn kind(k: &'static str) -> impl Fn(&Envelope) -> bool {
    move |e| e.kind() == k
}

#[tokio::test]
async fn the_client_drives_a_session_through_every_session_route() {
    let s = single(Config::default()).await;
    let api = api(&s.base);

    let started = api
        .start_session(&StartSessionRequest::message(
            "What's the weather in Paris?",
        ))
        .await
        .unwrap();
    let id = started.session_id.clone();
    let mut events = api.stream(&id, 0);
    let first = read_until(&mut events, kind("session.waiting")).await;
    assert_eq!(first[0].kind(), "session.started");
    assert!(first.iter().any(|e| e.kind() == "turn.completed"));

    // A follow-up rotates the token; the old one is stale from then on.
    let sent = api
        .follow_up(
            &id,
            &FollowUpRequest::message("deploy it", Some(started.continuation_token.clone())),
        )
        .await
        .unwrap();
    assert_ne!(sent.continuation_token, started.continuation_token);
    let stale = api
        .follow_up(
            &id,
            &FollowUpRequest::message("again", Some(started.continuation_token.clone())),
        )
        .await
        .unwrap_err();
    assert_eq!(
        stale.code(),
        Some(ErrorCode::StaleContinuationToken),
        "{stale}"
    );
    assert_eq!(stale.status(), Some(409));

    // `deploy` needs approval: the call parks until it is decided.
    let parked = read_until(&mut events, kind("action.approval_requested")).await;
    let call_id = match &parked.last().unwrap().event {
        bdk_events::Event::ActionApprovalRequested(d) => d.call_id.clone(),
        other => panic!("{other:?}"),
    };
    let waiting = api.approvals(&id).await.unwrap();
    assert_eq!(waiting.approvals.len(), 1);
    assert_eq!(waiting.approvals[0].call_id, call_id);
    assert_eq!(waiting.approvals[0].name, "deploy");
    let unknown = api
        .decide(&id, "call_nope", Decision::Approve, None)
        .await
        .unwrap_err();
    assert_eq!(
        unknown.code(),
        Some(ErrorCode::ApprovalNotFound),
        "{unknown}"
    );
    api.decide(&id, &call_id, Decision::Approve, Some("ship it".into()))
        .await
        .unwrap();
    let rest = read_until(&mut events, kind("session.waiting")).await;
    assert!(rest.iter().any(|e| e.kind() == "turn.completed"));

    let all = api.events(&id).await.unwrap();
    let streamed = first.len() + parked.len() + rest.len();
    assert_eq!(all.len(), streamed, "the stream gave every recorded event");
    assert!(all.iter().enumerate().all(|(i, e)| e.index == i as u64));

    let listed = api.sessions().await.unwrap();
    assert!(listed.sessions.iter().any(|x| x.session_id == id));
    assert!(!api.stop(&id).await.unwrap().stopped, "no turn was running");

    // Deleting the session ends a stream that follows it, without an error.
    assert_eq!(api.delete_session(&id).await.unwrap().session_id, id);
    let after = tokio::time::timeout(DEADLINE, events.next()).await.unwrap();
    assert!(after.is_none(), "{after:?}");
    let gone = api.events(&id).await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::SessionNotFound), "{gone}");
    assert_eq!(gone.status(), Some(404));

    // A stream of a session that never existed is refused, not retried.
    let mut missing = api.stream(&id, 0);
    let refused = missing.next().await.unwrap().unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::SessionNotFound),
        "{refused}"
    );
    assert!(missing.next().await.is_none());
}

/// A TCP proxy whose open connections the test can cut at once.
struct Proxy {
    base: String,
    open: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let open: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let conns = open.clone();
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    let mut up = TcpStream::connect(upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy { base, open }
    }

    /// Drops every connection open now (both sockets close).
    fn cut(&self) {
        for conn in self.open.lock().unwrap().drain(..) {
            conn.abort();
        }
    }
}

#[tokio::test]
async fn a_dropped_stream_resumes_from_the_next_event_without_gaps_or_repeats() {
    let s = single(Config::default()).await;
    let direct = api(&s.base);
    let proxy = Proxy::start(&s.base).await;
    let through = api(&proxy.base).resume(Resume {
        attempts: 5,
        delay: Duration::from_millis(20),
    });

    let started = direct
        .start_session(&StartSessionRequest::message(
            "What's the weather in Paris?",
        ))
        .await
        .unwrap();
    let id = started.session_id;
    let mut events = through.stream(&id, 0);
    let mut seen = read_until(&mut events, kind("session.waiting")).await;

    // The connection drops; meanwhile the session goes on.
    proxy.cut();
    direct
        .follow_up(&id, &FollowUpRequest::message("weather in Rome", None))
        .await
        .unwrap();
    seen.extend(
        read_until(&mut events, |e| {
            e.kind() == "session.waiting" && e.index > seen.len() as u64
        })
        .await,
    );
    // And once more, while the stream is idle.
    proxy.cut();
    direct
        .follow_up(&id, &FollowUpRequest::message("weather in Oslo", None))
        .await
        .unwrap();
    let before = seen.len() as u64;
    seen.extend(
        read_until(&mut events, |e| {
            e.kind() == "session.waiting" && e.index > before
        })
        .await,
    );

    let indexes: Vec<u64> = seen.iter().map(|e| e.index).collect();
    assert_eq!(indexes, (0..seen.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        seen.iter().filter(|e| e.kind() == "turn.completed").count(),
        3
    );
    assert_eq!(direct.events(&id).await.unwrap().len(), seen.len());
}

#[tokio::test]
async fn a_server_that_is_gone_is_a_transport_error_after_the_retries() {
    // A port nobody listens on: bind one, then free it.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let api = api(&format!("http://{addr}")).resume(Resume {
        attempts: 2,
        delay: Duration::from_millis(5),
    });
    let e = api
        .start_session(&StartSessionRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Transport { .. }), "{e}");
    let id = bdk_events::SessionId::generate();
    let mut events = api.stream(&id, 0);
    let e = tokio::time::timeout(DEADLINE, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, ClientError::Transport { .. }), "{e}");
    assert!(events.next().await.is_none());

    assert!(matches!(
        Client::new("ftp://example.com", client()),
        Err(ClientError::BadUrl(_))
    ));
    assert!(matches!(
        Client::new("not a url", client()),
        Err(ClientError::BadUrl(_))
    ));
}

/// A server that answers every request with `response`, verbatim.
async fn answering(response: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    base
}

#[tokio::test]
async fn answers_that_are_not_the_contract_are_unreadable_not_a_panic() {
    // A failure status whose body is not an error answer (a proxy's page).
    let proxy = answering(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 11\r\nconnection: close\r\n\r\n<h1>bad</h1",
    )
    .await;
    let e = api(&proxy).sessions().await.unwrap_err();
    assert!(matches!(e, ClientError::Unreadable { .. }), "{e}");
    assert!(e.to_string().contains("status 502"), "{e}");

    // A success whose body is not the route's.
    let odd = answering(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\nconnection: close\r\n\r\n{\"ok\":1}\n",
    )
    .await;
    let e = api(&odd).sessions().await.unwrap_err();
    assert!(matches!(e, ClientError::Unreadable { .. }), "{e}");

    // A stream line that is not an event ends the stream with the line.
    let stream = answering(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\nnot an event\n",
    )
    .await;
    let mut events = api(&stream).stream(&bdk_events::SessionId::generate(), 0);
    let e = events.next().await.unwrap().unwrap_err();
    assert!(matches!(e, ClientError::BadEvent { .. }), "{e}");
    assert!(e.to_string().contains("not an event"), "{e}");
    assert!(events.next().await.is_none());
}

#[tokio::test]
async fn a_stream_that_keeps_ending_empty_gives_up_after_the_retries() {
    let empty = answering(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await;
    let api = api(&empty).resume(Resume {
        attempts: 2,
        delay: Duration::from_millis(5),
    });
    let mut events = api.stream(&bdk_events::SessionId::generate(), 0);
    let e = tokio::time::timeout(DEADLINE, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string().contains("3 times in a row without an event"),
        "{e}"
    );
    assert!(events.next().await.is_none());
}
