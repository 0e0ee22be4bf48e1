//! Durable claims on delivery ids: how a channel pack runs each platform
//! delivery once, across restarts and replicas, although the platform
//! retries (GitHub's redeliveries, Slack's retries).
//!
//! A claim is a key-value entry (`<namespace>`, `<channel>/<id>`) written
//! with put-if-absent when a delivery is taken: `claimed`, then `done` with
//! the session it reached. The same id again is a duplicate. A claim whose
//! delivery never reached a session (its process died in between) is taken
//! over after [`STALE_CLAIM`]; one whose session could not be woken is
//! released so the platform's retry runs it. Entries older than the
//! retention are pruned, so the namespace stays bounded.

use std::time::Duration;

use bdk_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// A claim older than this whose delivery never reached a session is taken
/// over by a retry.
pub const STALE_CLAIM: Duration = Duration::from_secs(60);

/// How long claims are kept: platforms retry within minutes (Slack) or
/// redeliver by hand within days (GitHub keeps deliveries for three).
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// What [`claim`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The id is ours to run.
    Taken,
    /// The id was taken before: `session` is where it went, when known.
    Duplicate {
        /// The session it reached.
        session: Option<String>,
    },
}

fn key(channel: &str, id: &str) -> String {
    format!("{channel}/{id}")
}

fn at(value: &Value) -> Option<DateTime<Utc>> {
    value["at"]
        .as_str()
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .map(|at| at.with_timezone(&Utc))
}

fn older_than(value: &Value, now: DateTime<Utc>, age: Duration) -> bool {
    at(value).is_none_or(|at| now.signed_duration_since(at).to_std().unwrap_or_default() > age)
}

/// Claims delivery `id` on `channel` at `now`.
pub async fn claim(
    store: &dyn Store,
    namespace: &str,
    channel: &str,
    id: &str,
    now: DateTime<Utc>,
) -> Result<Claim, StoreError> {
    let key = key(channel, id);
    let claimed = json!({"state": "claimed", "at": now.to_rfc3339()});
    if store
        .kv_put_if_absent(namespace, &key, claimed.clone())
        .await?
    {
        return Ok(Claim::Taken);
    }
    let seen = store.kv_get(namespace, &key).await?;
    let stale = seen
        .as_ref()
        .is_some_and(|v| v["state"] == "claimed" && older_than(v, now, STALE_CLAIM));
    if !stale {
        return Ok(Claim::Duplicate {
            session: seen
                .as_ref()
                .and_then(|v| v["sessionId"].as_str())
                .map(str::to_owned),
        });
    }
    tracing::warn!(
        namespace,
        channel,
        id,
        "taking over a delivery whose claim was never completed"
    );
    store.kv_put(namespace, &key, claimed).await?;
    Ok(Claim::Taken)
}

/// Records that delivery `id` reached `session` (or needed none).
pub async fn done(
    store: &dyn Store,
    namespace: &str,
    channel: &str,
    id: &str,
    session: Option<&str>,
    now: DateTime<Utc>,
) {
    let value = json!({"state": "done", "sessionId": session, "at": now.to_rfc3339()});
    if let Err(e) = store.kv_put(namespace, &key(channel, id), value).await {
        tracing::warn!(namespace, channel, id, error = %e, "cannot record a delivery as done");
    }
}

/// Gives back the claim of a delivery whose session could not be woken,
/// so the platform's retry runs it.
pub async fn release(store: &dyn Store, namespace: &str, channel: &str, id: &str) {
    if let Err(e) = store.kv_delete(namespace, &key(channel, id)).await {
        tracing::warn!(namespace, channel, id, error = %e, "cannot release a delivery claim");
    }
}

/// Deletes the claims of `namespace` older than `retention` at `now`; how
/// many.
pub async fn prune(
    store: &dyn Store,
    namespace: &str,
    retention: Duration,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let mut pruned = 0;
    for key in store.kv_list(namespace, "").await? {
        let Some(value) = store.kv_get(namespace, &key).await? else {
            continue;
        };
        if older_than(&value, now, retention) && store.kv_delete(namespace, &key).await? {
            pruned += 1;
        }
    }
    Ok(pruned)
}

/// How often [`keep_pruned`] prunes.
const PRUNE_EVERY: Duration = Duration::from_secs(60 * 60);

/// Prunes `namespace` now and every hour until `shutdown`, keeping
/// [`RETENTION`]; for a pack to spawn when its host starts.
pub async fn keep_pruned(
    store: std::sync::Arc<dyn Store>,
    namespace: &'static str,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(PRUNE_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        match prune(store.as_ref(), namespace, RETENTION, Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(namespace, pruned = n, "pruned old delivery claims"),
            Err(e) => tracing::warn!(namespace, error = %e, "cannot prune delivery claims"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bdk_store::FsStore;

    const NS: &str = "test-claims";

    #[tokio::test]
    async fn a_claim_is_taken_once_released_or_taken_over_when_stale_and_pruned_when_old() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let t0 = Utc::now();
        assert_eq!(
            claim(&store, NS, "gh", "d1", t0).await.unwrap(),
            Claim::Taken
        );
        assert_eq!(
            claim(&store, NS, "gh", "d1", t0).await.unwrap(),
            Claim::Duplicate { session: None }
        );
        // Another channel's id of the same name is its own.
        assert_eq!(
            claim(&store, NS, "other", "d1", t0).await.unwrap(),
            Claim::Taken
        );
        // Released: the retry runs.
        release(&store, NS, "gh", "d1").await;
        assert_eq!(
            claim(&store, NS, "gh", "d1", t0).await.unwrap(),
            Claim::Taken
        );
        // Done: a duplicate that names its session, even much later.
        done(&store, NS, "gh", "d1", Some("ses_1"), t0).await;
        let later = t0 + chrono::Duration::minutes(10);
        assert_eq!(
            claim(&store, NS, "gh", "d1", later).await.unwrap(),
            Claim::Duplicate {
                session: Some("ses_1".into())
            }
        );
        // A claim left half-way is taken over once stale, not before.
        assert_eq!(
            claim(&store, NS, "gh", "d2", t0).await.unwrap(),
            Claim::Taken
        );
        let soon = t0 + chrono::Duration::seconds(30);
        assert!(matches!(
            claim(&store, NS, "gh", "d2", soon).await.unwrap(),
            Claim::Duplicate { .. }
        ));
        assert_eq!(
            claim(&store, NS, "gh", "d2", later).await.unwrap(),
            Claim::Taken
        );
        // Pruning removes what is older than the retention only.
        let week = t0 + chrono::Duration::days(8);
        claim(&store, NS, "gh", "fresh", week).await.unwrap();
        assert_eq!(prune(&store, NS, RETENTION, week).await.unwrap(), 3);
        let left = store.kv_list(NS, "").await.unwrap();
        assert_eq!(left, ["gh/fresh"]);
    }
}
