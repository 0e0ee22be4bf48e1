//! One turn's events as `ask` follows them while it waits: the session's
//! stream from where the turn was admitted, only that turn's events, ending
//! with its `turn.completed` or `turn.failed` (or when the stream does).
//! What `progress.rs` reports and `elicit.rs` asks about both read it.
//!
//! A leaf: it names the host and the event types.

use bdk_core::host::Host;
use bdk_events::{Envelope, Event, SessionId, TurnId};
use futures::{Stream, StreamExt};

/// The events of `turn` in `session` from event index `from`; empty when
/// the session cannot be followed.
pub(crate) async fn events(
    host: &Host,
    session: &SessionId,
    turn: &TurnId,
    from: u64,
) -> impl Stream<Item = Envelope> + Send + 'static {
    let stream = host.subscribe(session, from, None).await.ok();
    let ours = turn.clone();
    let turn = turn.clone();
    futures::stream::iter(stream)
        .flatten()
        // A read error, or the turn's end already passed, ends the stream.
        .scan(false, move |ended, item| {
            let next = match item {
                Ok(envelope) if !*ended => {
                    *ended = envelope.turn_id.as_ref() == Some(&turn)
                        && matches!(
                            envelope.event,
                            Event::TurnCompleted(_) | Event::TurnFailed(_)
                        );
                    Some(envelope)
                }
                _ => None,
            };
            futures::future::ready(next)
        })
        .filter(move |e| futures::future::ready(e.turn_id.as_ref() == Some(&ours)))
}
