//! Waiting for what a session records, driven by the store's event
//! subscription: a waiter wakes on each appended event and never sleeps to
//! look again. Each gives up after [`PATIENCE`] with the events it saw.

use bdk_core::host::Host;
use bdk_events::{Envelope, Event, SessionId};
use bdk_store::Store;
use futures::StreamExt;

use crate::poll::PATIENCE;

/// The first event of `session` (replayed from index 0, then live) that
/// satisfies `pred`.
pub async fn wait_for_event(
    store: &dyn Store,
    session: &SessionId,
    pred: impl FnMut(&Envelope) -> bool,
) -> Envelope {
    wait_for_event_from(store, session, 0, pred).await
}

/// Like [`wait_for_event`], from index `from`.
pub async fn wait_for_event_from(
    store: &dyn Store,
    session: &SessionId,
    from: u64,
    mut pred: impl FnMut(&Envelope) -> bool,
) -> Envelope {
    let mut stream = store.subscribe(session, from).await.unwrap();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(item) = stream.next().await {
            let env = item.unwrap();
            if pred(&env) {
                return Some(env);
            }
            seen.push(env.kind().to_owned());
        }
        None
    })
    .await;
    match found {
        Ok(Some(env)) => env,
        Ok(None) => panic!("the stream of {session} ended first; saw {seen:?}"),
        Err(_) => panic!("no such event in {session} after {PATIENCE:?}; saw {seen:?}"),
    }
}

/// The first event of type `kind` (a wire name such as `"step.started"`).
pub async fn wait_for_kind(store: &dyn Store, session: &SessionId, kind: &str) -> Envelope {
    wait_for_event(store, session, |e| e.kind() == kind).await
}

/// Waits until `session` rests: its last recorded event is
/// `session.waiting`. Returns that event.
///
/// Each `session.waiting` read off the subscription is checked against the
/// store's next index, so one that a later turn has already followed does
/// not count.
pub async fn wait_until_waiting(host: &Host, session: &SessionId) -> Envelope {
    let store = host.store();
    let mut stream = store.subscribe(session, 0).await.unwrap();
    let rested = tokio::time::timeout(PATIENCE, async {
        while let Some(item) = stream.next().await {
            let env = item.unwrap();
            if matches!(env.event, Event::SessionWaiting(_))
                && store.next_index(session).await.unwrap() == env.index + 1
            {
                return Some(env);
            }
        }
        None
    })
    .await;
    match rested {
        Ok(Some(env)) => env,
        Ok(None) => panic!("the stream of {session} ended before it rested"),
        Err(_) => panic!("{session} did not rest within {PATIENCE:?}"),
    }
}
