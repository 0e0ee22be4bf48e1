//! Following a session's events durably: the one loop behind every
//! follower that acts on a session from outside its turns (a channel's
//! event deliveries, the channel packs' progress and replies).
//!
//! A follower reads the session's stream (replay, then live) from a
//! durable cursor in the store's key-value area (its own namespace, key
//! `<channel>/<sessionId>`, value `{"next": <index>, ...}` plus whatever
//! state the follower keeps), so after a restart it resumes where it
//! stopped instead of replaying the history or skipping what happened
//! while the server was down. The cursor moves past an event only once the
//! follower has acted on it ([`Handled::Acted`]); an event a shutdown cut
//! short ([`Handled::Interrupted`]) is handled again after the restart.
//!
//! The loop ends on shutdown, when the session is deleted (its stream
//! ends; the cursor goes too), when a task session has ended
//! (`session.completed` or `session.failed`: nothing follows those), or
//! when the stream fails.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bdk_events::{Envelope, Event, SessionId};
use bdk_store::Store;
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

/// Where a follower starts reading when it has no cursor yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowStart {
    /// A session this process just created: from its first event.
    New,
    /// An existing session (found at startup): from the end of its stream,
    /// so events recorded before anyone followed it are not acted on after
    /// the fact.
    Resume,
}

/// What a follower did with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Nothing worth saving: the cursor stays (the event may be seen again
    /// after a restart, which must be harmless).
    Passed,
    /// Acted on it: the cursor moves past it, with the follower's state.
    Acted,
    /// Cut short by shutdown: the cursor stays before it, and the loop
    /// ends.
    Interrupted,
}

/// What a follower does with the events of one session.
#[async_trait]
pub trait SessionFollower: Send {
    /// Takes back the state saved with the cursor (everything but `next`).
    fn restore(&mut self, _saved: &Map<String, Value>) {}

    /// The state to save with the cursor (everything but `next`).
    fn state(&self) -> Map<String, Value> {
        Map::new()
    }

    /// Handles one event. A follower that must make a step durable before
    /// it returns (a reply posted, which a restart must not post again)
    /// saves through `cursor` itself.
    async fn on_event(&mut self, env: &Envelope, cursor: &Cursor) -> Handled;
}

/// One session's durable cursor.
pub struct Cursor {
    store: Arc<dyn Store>,
    namespace: &'static str,
    key: String,
    channel: String,
    session: SessionId,
    /// What follows, for log lines: "channel delivery", a pack's "progress".
    what: &'static str,
}

impl Cursor {
    /// The cursor of `session` of `channel`, in `namespace`.
    pub fn new(
        store: Arc<dyn Store>,
        namespace: &'static str,
        what: &'static str,
        channel: &str,
        session: &SessionId,
    ) -> Self {
        Cursor {
            store,
            namespace,
            key: format!("{channel}/{session}"),
            channel: channel.to_owned(),
            session: session.clone(),
            what,
        }
    }

    /// The session this cursor follows.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Where to read from and the state saved with the cursor; the start
    /// is recorded as the cursor when there is none yet, so events recorded
    /// after this returns are never missed. `None` when the store cannot
    /// say (then the session is not followed).
    pub async fn start(&self, start: FollowStart) -> Option<(u64, Map<String, Value>)> {
        match self.store.kv_get(self.namespace, &self.key).await {
            Ok(Some(Value::Object(mut saved))) => {
                if let Some(next) = saved.remove("next").and_then(|n| n.as_u64()) {
                    return Some((next, saved));
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(channel = %self.channel, session_id = %self.session, error = %e, "cannot read the {} cursor", self.what);
                return None;
            }
        }
        let from = match start {
            FollowStart::New => 0,
            FollowStart::Resume => match self.store.next_index(&self.session).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(channel = %self.channel, session_id = %self.session, error = %e, "cannot resume {}", self.what);
                    return None;
                }
            },
        };
        self.save(from, Map::new()).await;
        Some((from, Map::new()))
    }

    /// Records `next` (the first event not yet acted on) and `state`.
    pub async fn save(&self, next: u64, mut state: Map<String, Value>) {
        state.insert("next".into(), Value::from(next));
        if let Err(e) = self
            .store
            .kv_put(self.namespace, &self.key, Value::Object(state))
            .await
        {
            tracing::warn!(channel = %self.channel, session_id = %self.session, error = %e, "cannot save the {} cursor", self.what);
        }
    }

    /// Removes the cursor of a session that no longer exists.
    async fn forget_if_deleted(&self) {
        if let Ok(None) = self.store.get_session(&self.session).await
            && let Err(e) = self.store.kv_delete(self.namespace, &self.key).await
        {
            tracing::debug!(channel = %self.channel, session_id = %self.session, error = %e, "cannot remove a deleted session's {} cursor", self.what);
        }
    }
}

/// Reads the session from `from` and hands each event to `follower`
/// (after restoring `saved` into it), saving the cursor after each event
/// it acted on, until shutdown, the session's end or its deletion.
pub async fn run(
    cursor: Cursor,
    from: u64,
    saved: Map<String, Value>,
    shutdown: CancellationToken,
    mut follower: impl SessionFollower,
) {
    let mut stream = match cursor.store.subscribe(&cursor.session, from).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(channel = %cursor.channel, session_id = %cursor.session, error = %e, "cannot follow a session for {}; it stops", cursor.what);
            return;
        }
    };
    follower.restore(&saved);
    loop {
        let item = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        let env = match item {
            Some(Ok(env)) => env,
            Some(Err(e)) => {
                tracing::warn!(channel = %cursor.channel, session_id = %cursor.session, error = %e, "a session's stream failed; {} stops", cursor.what);
                return;
            }
            None => break,
        };
        let handled = tokio::select! {
            biased;
            // Shutdown mid-event: the cursor stays before this event.
            () = shutdown.cancelled() => Handled::Interrupted,
            handled = follower.on_event(&env, &cursor) => handled,
        };
        match handled {
            Handled::Interrupted => return,
            Handled::Acted => cursor.save(env.index + 1, follower.state()).await,
            Handled::Passed => {}
        }
        if matches!(
            env.event,
            Event::SessionCompleted(_) | Event::SessionFailed(_)
        ) {
            return;
        }
    }
    // The stream ended: the session was deleted, and its cursor goes too.
    cursor.forget_if_deleted().await;
}

/// The sessions an owner follows, so each is followed once however often
/// it is named (a new message, a restart's resume). Cheap to clone; clones
/// share the set.
#[derive(Clone, Debug, Default)]
pub struct Following(Arc<Mutex<HashSet<SessionId>>>);

impl Following {
    /// Whether `session` is followed now.
    pub fn contains(&self, session: &SessionId) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(session)
    }

    /// Follows `cursor`'s session with `follower` unless it is followed
    /// already: settles where to start (so events recorded after this
    /// returns are never missed), then runs [`run`] in a task until it
    /// ends. False when the session was followed already or the cursor
    /// could not be read. Must be called inside a Tokio runtime.
    pub async fn spawn(
        &self,
        cursor: Cursor,
        start: FollowStart,
        shutdown: CancellationToken,
        follower: impl SessionFollower + 'static,
    ) -> bool {
        let fresh = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cursor.session.clone());
        if !fresh {
            return false;
        }
        // Taken back when the task ends, however it ends (or now, when the
        // cursor cannot be read).
        let claim = Claim {
            set: Arc::clone(&self.0),
            session: cursor.session.clone(),
        };
        let Some((from, saved)) = cursor.start(start).await else {
            return false;
        };
        tokio::spawn(async move {
            let _claim = claim;
            run(cursor, from, saved, shutdown, follower).await;
        });
        true
    }
}

/// A session's place in a [`Following`] set, given back when dropped.
struct Claim {
    set: Arc<Mutex<HashSet<SessionId>>>,
    session: SessionId,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.session);
    }
}
