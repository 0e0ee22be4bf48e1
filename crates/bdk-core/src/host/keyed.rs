//! One session per conversation key, across replicas: the host side of a
//! channel's continuation token `<channel>:<key>`.
//!
//! [`Host::session_for_key`] finds the session whose token is
//! `<channel>:<key>` or creates it, so that of any number of callers
//! racing on one key (in this process or on other replicas over the same
//! store) exactly one creates the session and the others find it. The
//! creator first claims the key with [`Store::kv_put_if_absent`] (namespace
//! [`KEY_CLAIMS_NAMESPACE`], key `<token>#<generation>`), which only one
//! caller wins; a loser waits for the winner's session to appear.
//!
//! A claim records its time, and the session id once the session exists.
//! Generations let a key get a new session after its old one was deleted
//! (the claim names a session that no longer exists) and take over a claim
//! whose creator died before creating anything: a claim with no session
//! for [`CLAIM_PATIENCE`] is abandoned, and the next caller claims the
//! next generation (again, only one wins it). A creator that died after
//! creating the session but before recording it in the claim left a
//! session with the token, which every caller finds first. A creation that
//! fails releases its claim, so the next caller tries again at once.
//!
//! [`Store::kv_put_if_absent`]: bdk_store::Store::kv_put_if_absent

use std::time::Duration;

use bdk_store::SessionRecord;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Host, HostResult, StartSession, Started};

/// The key-value namespace of key claims.
pub const KEY_CLAIMS_NAMESPACE: &str = "channel-keys";

/// How long a claim may stay without its session before another caller
/// takes the key over (its creator is taken to have died).
pub const CLAIM_PATIENCE: Duration = Duration::from_secs(30);

/// The first and the longest wait between two looks at a claim in progress.
const FIRST_WAIT: Duration = Duration::from_millis(5);
const LONGEST_WAIT: Duration = Duration::from_millis(200);

/// What [`Host::session_for_key`] found or made.
#[derive(Clone, Debug)]
pub enum KeySession {
    /// The key's session already existed.
    Found(SessionRecord),
    /// This call created it (with the message of its `StartSession`).
    Started(Started),
}

/// The latest claim of a token.
struct Claim {
    generation: u64,
    claimed_at: Option<DateTime<Utc>>,
    session_id: Option<String>,
}

impl Host {
    /// The session of conversation `key` on `channel` (token
    /// `<channel>:<key>`): the existing one, or one started with `start`
    /// (its `channel` and `continuation_token` are set here). Of concurrent
    /// callers on one key, on this replica or others sharing the store,
    /// exactly one starts the session; see the module docs for claims whose
    /// creator died.
    pub async fn session_for_key(
        &self,
        channel: &str,
        key: &str,
        start: StartSession,
    ) -> HostResult<KeySession> {
        let token = format!("{channel}:{key}");
        let store = &self.inner.store;
        let mut wait = FIRST_WAIT;
        loop {
            if let Some(record) = store.find_by_token(&token).await? {
                return Ok(KeySession::Found(record));
            }
            let latest = latest_claim(self, &token).await?;
            let generation = match &latest {
                None => 0,
                Some(claim) => match &claim.session_id {
                    Some(id) => {
                        let id = bdk_events::SessionId::from_string(id);
                        if let Some(record) = store.get_session(&id).await? {
                            return Ok(KeySession::Found(record));
                        }
                        // Its session was deleted: the key starts over.
                        claim.generation + 1
                    }
                    None => {
                        let age = claim
                            .claimed_at
                            .map(|at| Utc::now().signed_duration_since(at));
                        let abandoned = age
                            .is_none_or(|age| age.to_std().is_ok_and(|age| age >= CLAIM_PATIENCE));
                        if !abandoned {
                            // Another caller is creating the session.
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(LONGEST_WAIT);
                            continue;
                        }
                        tracing::warn!(continuation_token = %token, generation = claim.generation, "a conversation key's claim was never completed; taking it over");
                        claim.generation + 1
                    }
                },
            };
            let claim_key = claim_key(&token, generation);
            let won = store
                .kv_put_if_absent(
                    KEY_CLAIMS_NAMESPACE,
                    &claim_key,
                    json!({ "claimedAt": Utc::now() }),
                )
                .await?;
            if !won {
                continue;
            }
            let started = self
                .start_session(StartSession {
                    channel: channel.to_owned(),
                    continuation_token: Some(token.clone()),
                    ..start
                })
                .await;
            return match started {
                Ok(started) => {
                    let done = json!({
                        "claimedAt": Utc::now(),
                        "sessionId": started.session_id,
                    });
                    if let Err(e) = store.kv_put(KEY_CLAIMS_NAMESPACE, &claim_key, done).await {
                        // The session has the token, so every caller finds
                        // it anyway; only a later deletion of the session
                        // waits out the claim's patience.
                        tracing::warn!(continuation_token = %token, error = %e, "cannot record the session of a conversation key");
                    }
                    Ok(KeySession::Started(started))
                }
                Err(e) => {
                    if let Err(e) = store.kv_delete(KEY_CLAIMS_NAMESPACE, &claim_key).await {
                        tracing::warn!(continuation_token = %token, error = %e, "cannot release a conversation key's claim");
                    }
                    Err(e)
                }
            };
        }
    }
}

fn claim_key(token: &str, generation: u64) -> String {
    format!("{token}#{generation}")
}

/// The claim of the highest generation of `token`, if any.
async fn latest_claim(host: &Host, token: &str) -> HostResult<Option<Claim>> {
    let store = &host.inner.store;
    let prefix = format!("{token}#");
    let generation = store
        .kv_list(KEY_CLAIMS_NAMESPACE, &prefix)
        .await?
        .iter()
        .filter_map(|k| k.strip_prefix(&prefix)?.parse::<u64>().ok())
        .max();
    let Some(generation) = generation else {
        return Ok(None);
    };
    let value = store
        .kv_get(KEY_CLAIMS_NAMESPACE, &claim_key(token, generation))
        .await?;
    // A claim released between the listing and the read: look again from
    // the start, as if it were in progress.
    let Some(value) = value else {
        return Ok(Some(Claim {
            generation,
            claimed_at: Some(Utc::now()),
            session_id: None,
        }));
    };
    Ok(Some(Claim {
        generation,
        claimed_at: value
            .get("claimedAt")
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc)),
        session_id: value
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }))
}
