//! Coalesced follow-ups queued behind a running turn, made durable before
//! they are acknowledged.
//!
//! A follow-up sent with `admission: "coalesce"` while a turn runs is
//! answered before it reaches the agent: it waits in the session's slot to
//! be steered into the running turn (`nudge.delivered`) or drained into the
//! next one (`message.received`). The event vocabulary has no event for
//! "queued", so the durable record lives in the store's key-value space
//! ([`QUEUE_NAMESPACE`], one entry per message, `<session>/<index>.<n>` so a
//! listing is in send order), written before the answer. An entry goes once
//! the event that delivers its message is durable: right after a drained
//! turn's `message.received` (a boundary, fsynced or committed), and after
//! the turn's end for a nudge (`nudge.delivered` is not a boundary; the end
//! is, and covers it). What a crash leaves behind is delivered when a host
//! recovers the session; an entry whose delivery id the log already shows
//! (at or after the index it was queued at) was delivered just before the
//! crash and is only removed, so a message is delivered once, also across
//! later restarts.

use std::sync::atomic::{AtomicU64, Ordering};

use bdk_events::{Envelope, Event, SessionId};
use serde::{Deserialize, Serialize};

use super::slots::Queued;
use super::{Host, HostResult, session_error};
use crate::agent::Nudge;

/// The key-value namespace of queued coalesced follow-ups.
pub const QUEUE_NAMESPACE: &str = "queued-messages";

/// What an entry holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    message: String,
    delivery_id: Option<String>,
    /// The session's next event index when the message was queued: whatever
    /// delivered it was recorded at this index or later.
    after: u64,
}

/// Tells entries queued in the same instant apart.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

fn prefix(id: &SessionId) -> String {
    format!("{id}/")
}

impl Host {
    /// Records a coalesced follow-up durably; returns its key.
    pub(super) async fn queue_durably(&self, id: &SessionId, nudge: &Nudge) -> HostResult<String> {
        let store = self.store();
        let after = store.next_index(id).await.map_err(session_error(id))?;
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{after:020}.{n:020}", prefix(id));
        let stored = Stored {
            message: nudge.message.clone(),
            delivery_id: nudge.delivery_id.clone(),
            after,
        };
        let value = serde_json::to_value(&stored).map_err(bdk_store::StoreError::from)?;
        store.kv_put(QUEUE_NAMESPACE, &key, value).await?;
        Ok(key)
    }

    /// Removes the records of delivered (or dropped) follow-ups. A record
    /// that cannot be removed is delivered at most once anyway: recovery
    /// finds its delivery in the log.
    pub(super) async fn forget_queued(&self, keys: Vec<String>) {
        for key in keys {
            if let Err(e) = self.store().kv_delete(QUEUE_NAMESPACE, &key).await {
                tracing::warn!(key = %key, error = %e, "cannot remove the record of a delivered follow-up; recovery will find it delivered");
            }
        }
    }

    /// True when the store holds queued follow-ups of the session.
    pub(crate) async fn has_stored_queue(&self, id: &SessionId) -> HostResult<bool> {
        Ok(!self
            .store()
            .kv_list(QUEUE_NAMESPACE, &prefix(id))
            .await?
            .is_empty())
    }

    /// Removes every queued record of a session (stopped or deleted).
    pub(super) async fn drop_stored_queue(&self, id: &SessionId) {
        match self.store().kv_list(QUEUE_NAMESPACE, &prefix(id)).await {
            Ok(keys) => self.forget_queued(keys).await,
            Err(e) => {
                tracing::warn!(session_id = %id, error = %e, "cannot list the queued follow-ups of a session")
            }
        }
    }

    /// The session's queued follow-ups that `events` does not show
    /// delivered, in send order; the records of those it does show are
    /// removed.
    pub(crate) async fn stored_queue(
        &self,
        id: &SessionId,
        events: &[Envelope],
    ) -> HostResult<Vec<Queued>> {
        let store = self.store();
        let mut entries = Vec::new();
        for key in store.kv_list(QUEUE_NAMESPACE, &prefix(id)).await? {
            let Some(value) = store.kv_get(QUEUE_NAMESPACE, &key).await? else {
                continue;
            };
            match serde_json::from_value::<Stored>(value) {
                Ok(stored) => entries.push((key, stored)),
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "dropping an unreadable queued follow-up");
                    self.forget_queued(vec![key]).await;
                }
            }
        }
        let (pending, delivered) = undelivered(entries, events);
        if !delivered.is_empty() {
            tracing::info!(session_id = %id, count = delivered.len(), "queued follow-ups were delivered before a restart; removing their records");
            self.forget_queued(delivered).await;
        }
        Ok(pending)
    }
}

/// Splits entries (in key order) into the undelivered ones and the keys of
/// those `events` shows delivered: each entry takes the first unclaimed
/// delivery of its delivery id at or after its `after` index, so repeated
/// caller-chosen ids are matched one for one.
fn undelivered(entries: Vec<(String, Stored)>, events: &[Envelope]) -> (Vec<Queued>, Vec<String>) {
    let mut deliveries: Vec<(u64, &str, bool)> = Vec::new();
    for env in events {
        match &env.event {
            Event::MessageReceived(m) => {
                deliveries.extend(
                    m.delivery_ids
                        .iter()
                        .map(|d| (env.index, d.as_str(), false)),
                );
            }
            Event::NudgeDelivered(n) => {
                if let Some(d) = &n.delivery_id {
                    deliveries.push((env.index, d.as_str(), false));
                }
            }
            _ => {}
        }
    }
    let mut pending = Vec::new();
    let mut delivered = Vec::new();
    for (key, stored) in entries {
        let found = stored.delivery_id.as_deref().and_then(|want| {
            deliveries
                .iter_mut()
                .find(|(index, id, claimed)| !*claimed && *index >= stored.after && *id == want)
        });
        match found {
            Some(delivery) => {
                delivery.2 = true;
                delivered.push(key);
            }
            None => pending.push(Queued {
                nudge: Nudge {
                    message: stored.message,
                    delivery_id: stored.delivery_id,
                },
                key: Some(key),
            }),
        }
    }
    (pending, delivered)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bdk_events::{MessageReceived, NudgeDelivered};
    use chrono::Utc;

    fn env(index: u64, event: Event) -> Envelope {
        Envelope {
            index,
            session_id: SessionId::generate(),
            turn_id: None,
            at: Utc::now(),
            event,
        }
    }

    fn stored(key: &str, delivery: &str, after: u64) -> (String, Stored) {
        (
            key.to_owned(),
            Stored {
                message: format!("message {key}"),
                delivery_id: Some(delivery.to_owned()),
                after,
            },
        )
    }

    #[test]
    fn entries_already_delivered_are_told_apart_one_for_one() {
        let events = vec![
            // A delivery of `dlv_a` before the entry was queued: not it.
            env(
                1,
                MessageReceived {
                    message: "old".into(),
                    delivery_ids: vec!["dlv_a".into()],
                }
                .into(),
            ),
            env(
                5,
                NudgeDelivered {
                    message: "x".into(),
                    delivery_id: Some("dlv_a".into()),
                }
                .into(),
            ),
            env(
                7,
                MessageReceived {
                    message: "y".into(),
                    delivery_ids: vec!["dlv_b".into(), "dlv_c".into()],
                }
                .into(),
            ),
        ];
        let entries = vec![
            stored("k1", "dlv_a", 3),
            // The same caller-chosen id twice: one delivery covers one entry.
            stored("k2", "dlv_a", 3),
            stored("k3", "dlv_b", 3),
            stored("k4", "dlv_d", 3),
            stored("k5", "dlv_c", 8),
        ];
        let (pending, delivered) = undelivered(entries, &events);
        assert_eq!(delivered, ["k1", "k3"]);
        let keys: Vec<_> = pending.iter().map(|q| q.key.clone().unwrap()).collect();
        assert_eq!(keys, ["k2", "k4", "k5"]);
        assert_eq!(pending[0].nudge.message, "message k2");
    }
}
