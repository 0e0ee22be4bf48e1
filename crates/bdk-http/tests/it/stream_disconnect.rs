#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A reader that disconnects mid-stream leaves nothing running, and the
//! server keeps working. Alone in its own test binary because it reads the
//! process-wide stream gauge.

use crate::common;

use std::time::Duration;

use bdk_http::{Config, open_streams};
use common::*;
use serde_json::json;

#[tokio::test]
async fn a_disconnected_reader_leaves_nothing_behind() {
    // Short heartbeats make the server write to the dead connection soon,
    // which is how it notices a peer that went away without a FIN.
    let s = single(Config {
        heartbeat: Duration::from_millis(20),
        ..Config::default()
    })
    .await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(
        http,
        base,
        json!({"message": "What's the weather in Paris?"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();

    assert_eq!(open_streams(), 0);
    let mut lines = stream(http, base, &id, 0).await;
    let first = lines.next().await.unwrap();
    assert_eq!(first["type"], "session.started");
    assert_eq!(open_streams(), 1);
    drop(lines);

    // There is no event for "the server dropped a body", so poll the gauge
    // with a bounded deadline.
    bdk_testkit::poll::until("the stream body to end with its client", || {
        std::future::ready(open_streams() == 0)
    })
    .await;

    // The server still serves, the session still works, and a new reader
    // gets the whole sequence.
    let all = settle(http, base, &id, 1).await;
    assert!(all.iter().any(|e| e["type"] == "turn.completed"));
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "still there?"}),
        )
        .await,
    )
    .await;
    let all = settle(http, base, &id, 2).await;
    assert_eq!(
        all.iter().filter(|e| e["type"] == "turn.completed").count(),
        2
    );
    bdk_testkit::poll::until("finished readers to close their streams", || {
        std::future::ready(open_streams() == 0)
    })
    .await;
}
