//! Driving a host's sessions the way most tests do: start one with a first
//! message, wait for the turn it opened, read what it recorded once it
//! rests. Each is one call of the host's API (or two), written once so a
//! test reads as what it checks.

use bdk_core::host::{Host, StartSession, Started, TurnResult};
use bdk_events::{Envelope, SessionId};

/// Starts a chat session whose first turn answers `message`.
pub async fn start(host: &Host, message: impl Into<String>) -> Started {
    host.start_session(StartSession {
        message: Some(message.into()),
        ..StartSession::default()
    })
    .await
    .unwrap()
}

/// Waits for the first turn of `started` to end and returns how it ended.
pub async fn wait_turn(host: &Host, started: &Started) -> TurnResult {
    let turn = started
        .turn_id
        .as_ref()
        .expect("the session was started with a message, so with a turn");
    host.wait_turn(&started.session_id, turn).await.unwrap()
}

/// [`start`], then [`wait_turn`].
pub async fn run(host: &Host, message: impl Into<String>) -> (Started, TurnResult) {
    let started = start(host, message).await;
    let result = wait_turn(host, &started).await;
    (started, result)
}

/// Waits until `session` has no turn running or queued, then returns every
/// event it recorded.
pub async fn settled_events(host: &Host, session: &SessionId) -> Vec<Envelope> {
    host.wait_idle(session).await;
    host.events(session, 0, None).await.unwrap()
}
