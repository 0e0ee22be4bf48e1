#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hostile connections against a real `bdk serve` (issue 13, part 4): what a
//! client that holds a connection without using it can do (nothing lasting),
//! SIGTERM whatever clients do, and the strict `Host` rule of the default
//! local-only auth. The timeouts are set small on the command line, so no
//! test waits on long wall-clock time; every wait is for an event (a closed
//! socket, a log line, an answer) under a generous deadline.
//!
//! Before the fix, slowloris connections and slow bodies were never closed,
//! 300 of them under a 256-descriptor limit made tool calls fail with
//! EMFILE, one half-sent request kept the process alive after SIGTERM, and
//! `Host: [::1]evil.com` was taken for loopback.

use std::process::Command;
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common;
use common::{Server, client, post, read_until, weather};

/// How long any single wait may take before the test fails: far beyond
/// every timeout the servers here are given.
const PATIENCE: Duration = Duration::from_secs(60);

fn authority(server: &Server) -> String {
    server.base.strip_prefix("http://").unwrap().to_owned()
}

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(authority(server)).await.unwrap()
}

/// Reads until the server closes the connection (end of stream or reset);
/// returns what it sent before.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the server never closed the connection; it sent {:?}",
                String::from_utf8_lossy(&seen)
            ),
            Ok(Ok(0) | Err(_)) => return seen,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response (headers and a `Content-Length` body) and leaves the
/// connection open; returns the status and the body.
async fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .unwrap_or_else(|| panic!("no content-length in {head}"));
            if seen.len() >= end + 4 + length {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = String::from_utf8_lossy(&seen[end + 4..end + 4 + length]).into_owned();
                return (status, body);
            }
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("no response")
            .unwrap();
        assert!(n > 0, "closed before the response was complete");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Sends a complete request and returns its answer, on a fresh connection.
async fn exchange(server: &Server, request: &[u8]) -> (u16, Value) {
    let mut stream = connect(server).await;
    stream.write_all(request).await.unwrap();
    let (status, body) = read_response(&mut stream).await;
    let body = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, body)
}

fn health_request(server: &Server) -> String {
    format!(
        "GET /v1/health HTTP/1.1\r\nHost: {}\r\n\r\n",
        authority(server)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn slowloris_connections_are_closed_after_the_header_timeout() {
    let (_tmp, dir) = weather();
    let server = Server::start(&["--header-timeout", "200ms"], &[&dir]);
    let mut held = Vec::new();
    for i in 0..20 {
        let mut stream = connect(&server).await;
        if i % 2 == 0 {
            // Headers started and never finished.
            stream
                .write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .await
                .unwrap();
        }
        // The other half sends nothing at all.
        held.push(stream);
    }
    for stream in &mut held {
        let answer = read_to_close(stream).await;
        assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    }
    // The server still serves.
    let (status, _) = exchange(&server, health_request(&server).as_bytes()).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_body_is_answered_408_and_its_connection_closed() {
    let (_tmp, dir) = weather();
    let server = Server::start(&["--body-timeout", "200ms"], &[&dir]);
    let mut stream = connect(&server).await;
    let head = format!(
        "POST /weather/v1/session HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
        authority(&server)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // A byte every 20 ms: the connection is never quiet for long, and the
    // body never completes.
    let trickle = tokio::spawn(async move {
        while writer.write_all(b" ").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut seen)).await;
    assert!(closed.is_ok(), "the slow body was never cut");
    let answer = String::from_utf8_lossy(&seen);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains(r#""error":"request_timeout""#), "{answer}");
    trickle.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_are_closed_but_open_streams_are_not() {
    let (_tmp, dir) = weather();
    let server = Server::start(
        &["--idle-timeout", "200ms", "--header-timeout", "200ms"],
        &[&dir],
    );
    let c = client();
    let (status, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut waiting = 0;
    let stream = tokio::spawn(read_until(resp, move |e| {
        waiting += usize::from(e["type"] == "session.waiting");
        waiting == 2
    }));

    // A kept-alive connection that goes quiet after one request is closed.
    let mut idle = connect(&server).await;
    idle.write_all(health_request(&server).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle).await.0, 200);
    assert!(read_to_close(&mut idle).await.is_empty());

    // By now the stream has been open longer than both timeouts; it still
    // carries the next turn.
    let (status, body) = post(
        &c,
        &format!("{}/weather/v1/session/{id}", server.base),
        json!({"message": "What's the weather in Paris?"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (events, ended) = tokio::time::timeout(PATIENCE, stream)
        .await
        .unwrap()
        .unwrap();
    assert!(!ended, "the stream was cut: {events:?}");
    assert!(events.iter().any(|e| e["type"] == "turn.completed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_the_connection_limit_new_connections_wait_and_are_served_once_others_go() {
    let (_tmp, dir) = weather();
    let server = Server::start(
        &[
            "--max-connections",
            "2",
            "--header-timeout",
            "1h",
            "--idle-timeout",
            "1h",
        ],
        &[&dir],
    );
    // Two connections that never send a request fill the limit.
    let silent = connect(&server).await;
    let mut held = connect(&server).await;
    server.wait_for_stderr(|s| s.contains("the connection limit is reached"));

    // A third client waits (its connection sits in the listen queue) ...
    let base = server.base.clone();
    let waiting = tokio::spawn(async move {
        client()
            .get(format!("{base}/v1/health"))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    // ... and is served once one of them goes.
    drop(silent);
    let status = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the waiting request was never served")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);

    // Idle kept-alive connections make room: the slot of the one that was
    // served is free again, and an idle connection is closed for a
    // newcomer even though its idle timeout is an hour.
    let mut idle = connect(&server).await;
    idle.write_all(health_request(&server).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle).await.0, 200);
    let (status, _) = exchange(&server, health_request(&server).as_bytes()).await;
    assert_eq!(status, 200);
    assert!(read_to_close(&mut idle).await.is_empty());
    // The silent connection still holds its slot (a request may be coming).
    held.write_all(health_request(&server).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut held).await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn under_a_256_descriptor_limit_300_slow_connections_leave_tools_working() {
    let (_tmp, dir) = weather();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -S -n 256 && exec "$@""#)
        .arg("sh")
        .arg(Command::cargo_bin("bdk").unwrap().get_program())
        .arg("serve")
        .arg(&dir)
        .args([
            "--port",
            "0",
            "--header-timeout",
            "1h",
            "--body-timeout",
            "1h",
        ])
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN")
        .env_remove("BDK_MAX_CONNECTIONS");
    let server = Server::spawn(cmd);

    // The tool call's connection is open first, its body held back, so
    // that it is in flight while the flood arrives.
    let body = json!({"input": {"city": "Paris"}}).to_string();
    let mut call = connect(&server).await;
    call.write_all(
        format!(
            "POST /weather/v1/tools/get_weather HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            authority(&server),
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();

    let mut flood = Vec::new();
    for _ in 0..300 {
        let mut stream = connect(&server).await;
        stream
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        flood.push(stream);
    }
    // The server took what its limit allows (half of 256) and left the
    // rest in the listen queue.
    server.wait_for_stderr(|s| s.contains("the connection limit is reached"));

    call.write_all(body.as_bytes()).await.unwrap();
    let (status, answer) = read_response(&mut call).await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    let stderr = server.stderr.lock().unwrap().clone();
    assert!(!stderr.contains("Too many open files"), "{stderr}");
    drop(flood);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_within_the_grace_whatever_clients_do() {
    let (_tmp, dir) = weather();
    let mut server = Server::start(
        &[
            "--header-timeout",
            "1h",
            "--body-timeout",
            "1h",
            "--idle-timeout",
            "1h",
            "--shutdown-grace",
            "500ms",
        ],
        &[&dir],
    );
    let c = client();
    let (status, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap().to_owned();

    // An open NDJSON stream, read up to the session's rest.
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("session.waiting") {
        let chunk = tokio::time::timeout(PATIENCE, body.next())
            .await
            .expect("stream stalled")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Read on until the stream ends, which it must do on its own at shutdown.
    let stream = tokio::spawn(async move { while let Some(Ok(_)) = body.next().await {} });
    // A request whose headers never end.
    let mut half_head = connect(&server).await;
    half_head
        .write_all(b"POST /weather/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        .await
        .unwrap();
    // A request whose body never ends: in flight in the handler.
    let mut half_body = connect(&server).await;
    half_body
        .write_all(
            format!(
                "POST /weather/v1/session HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"mess",
                authority(&server)
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A kept-alive connection between requests.
    let mut idle = connect(&server).await;
    idle.write_all(health_request(&server).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle).await.0, 200);

    // `terminate` fails the test unless the process exits; before the fix
    // the half-sent body held it open.
    assert_eq!(server.terminate(), 0);
    tokio::time::timeout(PATIENCE, stream)
        .await
        .expect("the stream did not end")
        .unwrap();
    for stream in [&mut half_head, &mut half_body, &mut idle] {
        read_to_close(stream).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_auth_admits_only_one_well_formed_loopback_host() {
    let (_tmp, dir) = weather();
    let server = Server::start(&[], &[&dir]);
    let port = authority(&server).rsplit(':').next().unwrap().to_owned();
    let request = |host_lines: &[u8]| {
        let mut r = b"GET /weather/v1/sessions HTTP/1.1\r\n".to_vec();
        r.extend_from_slice(host_lines);
        r.extend_from_slice(b"\r\n");
        r
    };
    for ok in [
        format!("Host: 127.0.0.1:{port}\r\n"),
        format!("Host: localhost:{port}\r\n"),
        "Host: [::1]\r\n".to_owned(),
    ] {
        let (status, body) = exchange(&server, &request(ok.as_bytes())).await;
        assert_eq!(status, 200, "{ok}: {body}");
    }
    let refused: Vec<(&str, Vec<u8>, &str)> = vec![
        // Regression: admitted before, because the parser split at `]`.
        (
            "[::1]evil.com",
            b"Host: [::1]evil.com\r\n".to_vec(),
            "not a valid host",
        ),
        (
            "a byte above 0x7f",
            b"Host: localhost\xff\r\n".to_vec(),
            "not a valid host",
        ),
        (
            "a Cyrillic look-alike",
            "Host: lоcalhost\r\n".as_bytes().to_vec(),
            "not a valid host",
        ),
        (
            "two Host headers",
            b"Host: localhost\r\nHost: evil.com\r\n".to_vec(),
            "more than one Host",
        ),
        ("no Host", Vec::new(), "names no host"),
        (
            "a foreign name",
            b"Host: evil.example\r\n".to_vec(),
            "does not name a loopback",
        ),
    ];
    for (case, lines, reason) in refused {
        let (status, body) = exchange(&server, &request(&lines)).await;
        assert_eq!(status, 401, "{case}: {body}");
        assert_eq!(body["error"], "unauthorized", "{case}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(reason),
            "{case}: {body}"
        );
    }
    // HTTP/1.0 without a Host is refused too; open routes still answer it.
    let (status, _) = exchange(&server, b"GET /weather/v1/sessions HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 401);
    let (status, _) = exchange(&server, b"GET /v1/health HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 200);
}
