#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A live event stream of `bdk serve` ends when its session is deleted.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::common;
use common::{Server, client, post, queue_agent};

/// An NDJSON body read line by line.
struct Lines {
    chunks: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buf: Vec<u8>,
}

impl Lines {
    /// The next JSON line; `None` when the body ends. Heartbeats are skipped.
    async fn next(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            while let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                    return Some(v);
                }
            }
            match tokio::time::timeout_at(deadline, self.chunks.next())
                .await
                .expect("the stream stalled")
            {
                None => return None,
                Some(chunk) => self
                    .buf
                    .extend_from_slice(&chunk.expect("the stream broke")),
            }
        }
    }
}

/// Issue 15, item 7: a stream open on a session must not outlive
/// `DELETE /v1/session/:id`. Through the real server and a real socket it
/// ends cleanly, with a complete last line: at once for an idle session;
/// after the stopped turn's `turn.failed` for a session mid-turn. The
/// session is gone afterwards, and a new stream on it is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_stream_ends_when_its_session_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("queue");
    queue_agent(&dir);
    let server = Server::start(&[], &[&dir]);
    let c = client();
    let agent = format!("{}/queue/v1", server.base);
    for (message, marker) in [
        ("hello", "session.waiting"),
        ("slow please", "turn.started"),
    ] {
        let (status, started) =
            post(&c, &format!("{agent}/session"), json!({"message": message})).await;
        assert_eq!(status, 200, "{started}");
        let id = started["sessionId"].as_str().unwrap().to_owned();
        let resp = c
            .get(format!("{agent}/session/{id}/stream?startIndex=0"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut lines = Lines {
            chunks: resp.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(),
            buf: Vec::new(),
        };
        while let Some(v) = lines.next().await {
            if v["type"] == marker {
                break;
            }
        }
        let deleted = c
            .delete(format!("{agent}/session/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 200);
        let mut rest = Vec::new();
        while let Some(v) = lines.next().await {
            rest.push(v);
        }
        let kinds: Vec<&str> = rest.iter().map(|e| e["type"].as_str().unwrap()).collect();
        if marker == "session.waiting" {
            assert!(kinds.is_empty(), "{message}: {kinds:?}");
        } else {
            let failed = rest.iter().find(|e| e["type"] == "turn.failed").unwrap();
            assert_eq!(failed["data"]["status"], "cancelled", "{kinds:?}");
            assert_eq!(kinds.last(), Some(&"session.waiting"), "{kinds:?}");
        }
        let again = c
            .get(format!("{agent}/session/{id}/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 404, "{message}");
    }
}
