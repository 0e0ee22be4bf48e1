//! Live streams of the PostgreSQL engine: replay from the table, then follow
//! appends made by any replica through `LISTEN`/`NOTIFY`.
//!
//! Every append and delete commits a notification on the schema's channel
//! (payload `<session id> <max index>` or `<session id> deleted`). One
//! [`Hub`] per store holds one listening connection, opened on the first
//! subscription, and fans notifications out in-process to one `watch`
//! channel per followed session. A notification only says "look again":
//! a follower always reads the rows past the last index it delivered from
//! the table, so a lost, merged or early notification can delay an event but
//! never drop or repeat one.
//!
//! The seam: a follower registers its `watch` receiver (with the listener
//! already `LISTEN`ing) before its first read, and marks the signal seen
//! before every read. An append committed before a read is in that read; one
//! committed after it sends a notification that arrives after the mark and
//! wakes the follower for another read. When the listening connection drops,
//! the hub reconnects and wakes every follower to re-read and to check that
//! its session still exists, since notifications sent meanwhile are lost.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bdk_events::{Envelope, SessionId};
use futures::StreamExt;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::rows::{EventRow, db, envelope, to_db_index};
use crate::{EventStream, Result};

/// Rows read per query while catching up.
const PAGE: i64 = 512;

/// Pause before retrying a listening connection that failed to reconnect.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// What a follower is told; it compares counters with the last values it saw.
#[derive(Clone, Copy, Debug, Default)]
struct Signal {
    /// Bumped on every notification about the session: read again.
    appended: u64,
    /// Bumped on a delete notification or a lost connection: check that the
    /// session still exists.
    check: u64,
}

type Watchers = Mutex<HashMap<String, watch::Sender<Signal>>>;

/// The shared listener of one store and its in-process fan-out.
pub(crate) struct Hub {
    pool: PgPool,
    channel: String,
    watchers: Arc<Watchers>,
    /// The listening task, once started; restarted when it has ended.
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
    }
}

fn lock(watchers: &Watchers) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Signal>>> {
    watchers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wakes the followers of `id` (all sessions when `None`).
fn wake(watchers: &Watchers, id: Option<&str>, check: bool) {
    let mut map = lock(watchers);
    let bump = |tx: &watch::Sender<Signal>| {
        tx.send_modify(|s| {
            s.appended += 1;
            if check {
                s.check += 1;
            }
        });
    };
    match id {
        Some(id) => {
            if let Some(tx) = map.get(id) {
                if tx.receiver_count() == 0 {
                    map.remove(id);
                } else {
                    bump(tx);
                }
            }
        }
        None => {
            map.retain(|_, tx| tx.receiver_count() > 0);
            map.values().for_each(bump);
        }
    }
}

impl Hub {
    pub(crate) fn new(pool: PgPool, channel: String) -> Self {
        Self {
            pool,
            channel,
            watchers: Arc::default(),
            task: tokio::sync::Mutex::new(None),
        }
    }

    /// Wakes this process's followers of `id` at once, without waiting for
    /// the notification's round trip (which still comes, and is harmless).
    pub(crate) fn poke(&self, id: &SessionId, deleted: bool) {
        wake(&self.watchers, Some(id.as_str()), deleted);
    }

    /// Makes sure the listening task runs and is `LISTEN`ing, starting it if
    /// needed. Returns once `LISTEN` has been acknowledged.
    async fn ensure_listening(&self) -> Result<()> {
        let mut task = self.task.lock().await;
        if task.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        let mut listener = PgListener::connect_with(&self.pool).await.map_err(db)?;
        listener.listen(&self.channel).await.map_err(db)?;
        let watchers = Arc::downgrade(&self.watchers);
        *task = Some(tokio::spawn(listen(listener, watchers)));
        Ok(())
    }

    /// Registers a follower of `id`.
    fn watch(&self, id: &SessionId) -> watch::Receiver<Signal> {
        let mut map = lock(&self.watchers);
        map.entry(id.as_str().to_owned())
            .or_insert_with(|| watch::channel(Signal::default()).0)
            .subscribe()
    }

    /// Ends the listening task and closes its pool.
    pub(crate) async fn close(&self) {
        if let Some(task) = self.task.lock().await.take() {
            task.abort();
        }
        self.pool.close().await;
    }
}

/// The listening task: dispatches notifications until the hub is gone.
async fn listen(mut listener: PgListener, watchers: Weak<Watchers>) {
    loop {
        let next = listener.try_recv().await;
        let Some(watchers) = watchers.upgrade() else {
            return;
        };
        match next {
            Ok(Some(note)) => {
                let payload = note.payload();
                let (id, what) = payload.rsplit_once(' ').unwrap_or((payload, ""));
                wake(&watchers, Some(id), what == "deleted");
            }
            Ok(None) => {
                // The connection dropped and was re-established (LISTEN
                // included); whatever was sent meanwhile is lost.
                tracing::warn!(
                    "the notification connection was lost and re-established; followers re-read"
                );
                wake(&watchers, None, true);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the notification connection failed; retrying");
                wake(&watchers, None, true);
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
    }
}

/// The state of one follower.
struct Follower {
    pool: PgPool,
    /// The store this follower reads: kept alive with it, so its hub (and
    /// the wake-ups) last as long as the stream.
    _store: Arc<dyn std::any::Any + Send + Sync>,
    id: SessionId,
    pk: i64,
    next: u64,
    rx: watch::Receiver<Signal>,
    checked: u64,
    buffer: VecDeque<Envelope>,
    done: bool,
}

/// A stream of session `id`'s events from index `from`, read from `pool`
/// and woken by `hub`; `pk` looks the session's row up (after the wake-up
/// is registered); `store` is kept alive with the stream.
pub(super) async fn subscribe(
    hub: &Hub,
    pool: PgPool,
    store: Arc<dyn std::any::Any + Send + Sync>,
    id: SessionId,
    from: u64,
    pk: impl std::future::Future<Output = Result<i64>>,
) -> Result<EventStream> {
    hub.ensure_listening().await?;
    // Registered before the session is looked up and before the first read:
    // nothing committed from here on can go unnoticed.
    let mut rx = hub.watch(&id);
    let checked = rx.borrow_and_update().check;
    let pk = pk.await?;
    let follower = Follower {
        pool,
        _store: store,
        id,
        pk,
        next: from,
        rx,
        checked,
        buffer: VecDeque::new(),
        done: false,
    };
    Ok(futures::stream::unfold(follower, |mut f| async move {
        match f.step().await {
            Ok(Some(env)) => Some((Ok(env), f)),
            Ok(None) => None,
            Err(e) => {
                // An error item ends the stream; the caller subscribes again
                // from the index after the last event it got.
                f.done = true;
                f.buffer.clear();
                Some((Err(e), f))
            }
        }
    })
    .fuse()
    .boxed())
}

impl Follower {
    /// The next event, or `None` when the session is gone.
    async fn step(&mut self) -> Result<Option<Envelope>> {
        loop {
            if let Some(env) = self.buffer.pop_front() {
                return Ok(Some(env));
            }
            if self.done {
                return Ok(None);
            }
            // Mark before reading: a commit the read misses wakes us again.
            let signal = *self.rx.borrow_and_update();
            let rows = self.page().await?;
            if !rows.is_empty() {
                for row in rows {
                    let env = envelope(&self.id, row)?;
                    self.next = env.index + 1;
                    self.buffer.push_back(env);
                }
                continue;
            }
            if signal.check != self.checked {
                self.checked = signal.check;
                if !self.exists().await? {
                    self.done = true;
                    continue;
                }
            }
            if self.rx.changed().await.is_err() {
                // The hub is gone with its store: nothing more will come.
                self.done = true;
            }
        }
    }

    async fn page(&self) -> Result<Vec<EventRow>> {
        sqlx::query_as(
            "SELECT idx, turn_id, at, kind, data::text FROM bdk_events \
             WHERE session_pk = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
        )
        .bind(self.pk)
        .bind(to_db_index(self.next))
        .bind(PAGE)
        .fetch_all(&self.pool)
        .await
        .map_err(db)
    }

    async fn exists(&self) -> Result<bool> {
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM bdk_sessions WHERE pk = $1")
            .bind(self.pk)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        Ok(found.is_some())
    }
}
