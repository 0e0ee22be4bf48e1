//! Admission: starting sessions, follow-ups (preempt or coalesce, queued
//! behind a running turn), stop and delete, and waiting for turns. Per
//! session it is serialized by the slot's admission lock, so two follow-ups
//! never race into the same turn boundary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bdk_events::ids::new_http_token;
use bdk_events::view::turn_end;
use bdk_events::{DeliveryId, SessionId, SessionMode, SessionStarted, SessionWaiting, TurnId};
use bdk_store::{NewEvent, SessionRecord, Store, TokenSwap};
use chrono::Utc;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::agent::Nudge;
use crate::workspace;

use super::Host;
use super::driver::received_event;
use super::error::{HostError, HostResult, check_owner, session_error};
use super::slots::{Queued, REASON_NONE, REASON_PREEMPT, REASON_STOP, Running, SlotRef, wait_done};
use super::types::{FollowUp, Sent, StartSession, Started, TurnResult};

pub(super) fn validate_workspace_files(files: &BTreeMap<String, String>) -> HostResult<()> {
    // The shape only; where a path leads is judged when it is opened
    // beneath the real workspace.
    for path in files.keys() {
        workspace::Rel::parse(path).map_err(|e| HostError::InvalidRequest(e.to_string()))?;
    }
    Ok(())
}

impl Host {
    /// Creates a session, prepares its workspace and, with a message, starts
    /// its first turn (which runs in the background).
    pub async fn start_session(&self, opts: StartSession) -> HostResult<Started> {
        if let Some(m) = &opts.message
            && m.trim().is_empty()
        {
            return Err(HostError::InvalidRequest(
                "message must not be empty".into(),
            ));
        }
        validate_workspace_files(&opts.workspace_files)?;
        let id = SessionId::generate();
        let now = Utc::now();
        let channel = if opts.channel.is_empty() {
            "http".to_owned()
        } else {
            opts.channel.clone()
        };
        let token = opts
            .continuation_token
            .clone()
            .unwrap_or_else(|| new_http_token(&id));
        // Drawn (or pinned) before anything is stored, so a bad pin refuses
        // the start cleanly.
        let project = self.project();
        let arms = super::arms::enroll(&project, &id, &token, &opts.arms)?;
        let record = SessionRecord {
            id: id.clone(),
            mode: opts.mode,
            channel: channel.clone(),
            principal: opts.principal.clone(),
            continuation_token: token.clone(),
            title: opts.title.clone(),
            purpose: opts.purpose.clone(),
            dry_run: opts.dry_run,
            as_of: opts.as_of,
            created_at: now,
            updated_at: now,
            extra: Value::Null,
        };
        self.inner.store.create_session(record.clone()).await?;
        let workspace = self.workspace(&id);
        if let Err(e) = workspace::materialize(&workspace, &project).await {
            tracing::warn!(session_id = %id, error = %e, "failed to prepare the session workspace");
        }
        if let Err(e) = workspace::write_files(&workspace, &opts.workspace_files).await {
            return Err(HostError::InvalidRequest(e.to_string()));
        }
        // `ab.assigned` follows `session.started` in the same durable write,
        // before any turn: the session's arms are part of its start. With a
        // message, `message.received` joins that write too, so a new session
        // with its first turn costs one fsync rather than two.
        let mut started = vec![
            SessionStarted {
                mode: opts.mode,
                channel,
                principal: opts.principal.clone(),
                title: opts.title.clone(),
                purpose: opts.purpose.clone(),
                dry_run: opts.dry_run,
                as_of: opts.as_of,
                agent: Some(project.name.clone()),
            }
            .into(),
        ];
        started.extend(arms.iter().cloned().map(Into::into));
        let Some(message) = opts.message else {
            started.push(SessionWaiting {}.into());
            self.record(&id, None, started).await?;
            return Ok(Started {
                session_id: id,
                continuation_token: token,
                turn_id: None,
                delivery_id: None,
                index: None,
            });
        };
        let delivery = opts
            .delivery_id
            .unwrap_or_else(|| DeliveryId::generate().to_string());
        let slot = self.slot(&id);
        let _admission = slot.admission.lock().await;
        {
            let mut state = slot.state();
            state.transcript = Some(Vec::new());
            state.arms = Some(std::sync::Arc::new(arms));
        }
        let started = started
            .into_iter()
            .map(|event| NewEvent {
                turn_id: None,
                event,
            })
            .collect();
        let (turn_id, index) = self
            .begin_turn(
                &record,
                &slot,
                started,
                vec![Nudge {
                    message,
                    delivery_id: Some(delivery.clone()),
                }],
            )
            .await?;
        Ok(Started {
            session_id: id,
            continuation_token: token,
            turn_id: Some(turn_id),
            delivery_id: Some(delivery),
            index: Some(index),
        })
    }

    /// Sends a follow-up. Idle session: starts a turn. Busy session: preempt
    /// interrupts the running turn, waits for it to settle and starts a new
    /// one; coalesce queues the message to be steered into the running turn
    /// at its next tool boundary, or drained into one follow-up turn.
    pub async fn send(&self, id: &SessionId, opts: FollowUp) -> HostResult<Sent> {
        if opts.message.trim().is_empty() {
            return Err(HostError::InvalidRequest(
                "message must not be empty".into(),
            ));
        }
        validate_workspace_files(&opts.workspace_files)?;
        // The order of the refusals: a session the caller cannot see is 404
        // or 403 before anything else; one it can see but that takes no
        // follow-ups is 409 (the real reason) before 403 for a session it
        // may read but not drive.
        let read_scope = if opts.sees_all {
            None
        } else {
            opts.principal.as_deref()
        };
        let record = self.session(id, read_scope).await?;
        if record.mode == SessionMode::Task {
            return Err(HostError::TaskSession(id.to_string()));
        }
        check_owner(&record, opts.principal.as_deref())?;
        if opts
            .continuation_token
            .as_deref()
            .is_some_and(|t| t != record.continuation_token)
        {
            return Err(HostError::StaleToken);
        }
        let slot = self.slot(id);
        // Everything from the token check to the turn's start happens under
        // the admission lock, so sends of this process are accepted one at a
        // time: a tokenless send never loses a race to another one here, and
        // of two sends holding the same token the second sees it stale.
        let _admission = slot.admission.lock().await;
        let record = self.session(id, opts.principal.as_deref()).await?;
        if opts
            .continuation_token
            .as_deref()
            .is_some_and(|t| t != record.continuation_token)
        {
            return Err(HostError::StaleToken);
        }
        // Bad input is refused before anything is accepted: the token only
        // rotates for a send that will run.
        let workspace = self.workspace(id);
        workspace::check_files(&workspace, &opts.workspace_files)
            .await
            .map_err(|e| HostError::InvalidRequest(e.to_string()))?;
        // Opaque HTTP tokens rotate on every accepted send, as a
        // compare-and-swap so that of two racing sends with one token exactly
        // one wins (also across replicas). Channel tokens (`<channel>:<key>`)
        // name a conversation and stay as they are. The swap may become
        // durable only with this send's `message.received` (one sync for
        // both), so the new token goes to the caller only after that write,
        // or after `commit_token` when the message is queued instead.
        let mut rotation = None;
        let new_token = if record.continuation_token.starts_with("http:") {
            let expected = opts
                .continuation_token
                .clone()
                .unwrap_or_else(|| record.continuation_token.clone());
            let new = new_http_token(id);
            match self
                .inner
                .store
                .rotate_token_deferred(id, &expected, &new)
                .await?
            {
                TokenSwap::Rotated => {
                    rotation = Some(Rotation {
                        store: Arc::clone(&self.inner.store),
                        id: id.clone(),
                        new: new.clone(),
                        old: expected,
                        settled: false,
                    });
                    new
                }
                TokenSwap::Stale if opts.continuation_token.is_some() => {
                    return Err(HostError::StaleToken);
                }
                // A caller without a token held nothing that went stale: a
                // send on another replica was accepted in between.
                TokenSwap::Stale => return Err(HostError::SessionBusy(id.to_string())),
            }
        } else {
            record.continuation_token.clone()
        };
        // From here on a failure means nothing was accepted, so the caller's
        // token stays good for a retry: `Rotation::undo`, or its drop when
        // the send itself is dropped (a caller that hung up).
        if let Err(e) = workspace::write_files(&workspace, &opts.workspace_files).await {
            Rotation::undo(rotation).await;
            return Err(HostError::InvalidRequest(e.to_string()));
        }
        let delivery = opts
            .delivery_id
            .clone()
            .unwrap_or_else(|| DeliveryId::generate().to_string());
        let nudge = Nudge {
            message: opts.message,
            delivery_id: Some(delivery.clone()),
        };
        let running = slot.state().running.is_some();
        if opts.admission == bdk_events::Admission::Coalesce && running {
            // No `message.received` follows a queued message, so the new
            // token is made durable on its own.
            if let Err(e) = self.inner.store.commit_token(id).await {
                Rotation::undo(rotation).await;
                return Err(e.into());
            }
            // Recorded before the answer, so an acknowledged message survives
            // a crash: recovery delivers it.
            let key = match self.queue_durably(id, &nudge).await {
                Ok(key) => key,
                Err(e) => {
                    Rotation::undo(rotation).await;
                    return Err(e);
                }
            };
            let queued = {
                let mut state = slot.state();
                let running = state.running.is_some();
                if running {
                    state.pending.push(Queued {
                        nudge: nudge.clone(),
                        key: Some(key.clone()),
                    });
                }
                running
            };
            if queued {
                Rotation::keep(rotation);
                return Ok(Sent {
                    session_id: id.clone(),
                    continuation_token: new_token,
                    delivery_id: delivery,
                    turn_id: None,
                    index: None,
                });
            }
            // The turn ended while the record was written: this send starts
            // the next turn itself and answers only once its message is
            // recorded, so the record is not needed.
            self.forget_queued(vec![key]).await;
        }
        // Preempt: interrupt whatever runs (a drained follow-up may start
        // as the first one settles) until the session is idle.
        loop {
            let wait = slot.state().running.as_ref().map(|running| {
                running.reason.store(REASON_PREEMPT, Ordering::SeqCst);
                running.cancel.cancel();
                running.done.clone()
            });
            match wait {
                Some(done) => wait_done(done).await,
                None => break,
            }
        }
        let (turn_id, index) = match self
            .begin_turn(&record, &slot, Vec::new(), vec![nudge])
            .await
        {
            Ok(started) => started,
            Err(e) => {
                // The turn did not start (another replica's turn did not end
                // in time, the log cannot be written): nothing was accepted.
                Rotation::undo(rotation).await;
                return Err(e);
            }
        };
        Rotation::keep(rotation);
        Ok(Sent {
            session_id: id.clone(),
            continuation_token: new_token,
            delivery_id: delivery,
            turn_id: Some(turn_id),
            index: Some(index),
        })
    }

    /// Interrupts the running turn (recorded `turn.failed`, status
    /// `cancelled`) and drops queued follow-ups. Returns true when a turn was
    /// running. Waits until the turn has settled.
    pub async fn stop(&self, id: &SessionId, principal: Option<&str>) -> HostResult<bool> {
        self.session(id, principal).await?;
        let slot = self.slot(id);
        let _admission = slot.admission.lock().await;
        let (wait, dropped) = {
            let mut state = slot.state();
            let dropped: Vec<String> = state.pending.drain(..).filter_map(|q| q.key).collect();
            let wait = state.running.as_ref().map(|running| {
                running.reason.store(REASON_STOP, Ordering::SeqCst);
                running.cancel.cancel();
                running.done.clone()
            });
            (wait, dropped)
        };
        self.forget_queued(dropped).await;
        match wait {
            Some(done) => {
                wait_done(done).await;
                Ok(true)
            }
            // With replicas the turn may run elsewhere: ask its owner.
            None => self.stop_remote(id).await,
        }
    }

    /// Deletes a session owned by `principal`: stops its running turn,
    /// removes it from the store (record, events, workspace) and tells the
    /// host's extensions (reminders disarm the session's). `Ok(false)` when
    /// there is no such session.
    pub async fn delete_session(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<bool> {
        match self.stop(id, principal).await {
            Ok(_) => {}
            Err(HostError::SessionNotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        let slot = self.slot(id);
        let _admission = slot.admission.lock().await;
        // A turn admitted between the stop and this lock is not ours to kill.
        if slot.state().running.is_some() {
            return Err(HostError::SessionBusy(id.to_string()));
        }
        let deleted = self.inner.store.delete_session(id).await?;
        self.inner.slots.forget(id);
        self.drop_stored_queue(id).await;
        self.extensions_session_deleted(id).await;
        Ok(deleted)
    }

    /// Waits until the given turn has ended and reads how.
    pub async fn wait_turn(&self, id: &SessionId, turn_id: &TurnId) -> HostResult<TurnResult> {
        self.wait_turn_from(id, turn_id, 0).await
    }

    /// Like [`Host::wait_turn`], reading the stream from `from` (the turn's
    /// `index` from [`Started`] or [`Sent`]) instead of from the start.
    pub async fn wait_turn_from(
        &self,
        id: &SessionId,
        turn_id: &TurnId,
        from: u64,
    ) -> HostResult<TurnResult> {
        let mut stream = self
            .inner
            .store
            .subscribe(id, from)
            .await
            .map_err(session_error(id))?;
        while let Some(item) = stream.next().await {
            let env = item.map_err(session_error(id))?;
            if env.turn_id.as_ref() != Some(turn_id) {
                continue;
            }
            if let Some(end) = turn_end(&env.event) {
                return Ok(TurnResult {
                    turn_id: turn_id.clone(),
                    ok: end.ok,
                    reply: end.text.to_owned(),
                    status: end.status,
                    usage: end.usage,
                });
            }
        }
        Err(HostError::SessionNotFound(id.to_string()))
    }

    /// Waits until the session has no running turn and nothing queued.
    pub async fn wait_idle(&self, id: &SessionId) {
        loop {
            let running = self.inner.slots.with(id, |slot| {
                slot.state().running.as_ref().map(|r| r.done.clone())
            });
            match running.flatten() {
                Some(done) => wait_done(done).await,
                None => return,
            }
        }
    }

    /// Records `message.received` for `messages` and starts the turn task;
    /// returns the turn and the index of its `message.received`. `prefix`
    /// (a new session's `session.started`) is recorded in the same durable
    /// write, just before, and alone when the turn cannot start. The caller
    /// holds the session's admission lock.
    pub(super) async fn begin_turn(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        mut prefix: Vec<NewEvent>,
        messages: Vec<Nudge>,
    ) -> HostResult<(TurnId, u64)> {
        let turn_id = TurnId::generate();
        // With replicas, the turn first takes the session's lease (waiting
        // out a turn of another replica).
        if let Err(e) = self.lease_turn(&record.id, &turn_id).await {
            if !prefix.is_empty() {
                self.record_batch(&record.id, prefix).await?;
            }
            return Err(e);
        }
        if self.coordination().is_some() {
            // Other replicas may have run turns since this one cached the
            // conversation: rebuild it from the store.
            slot.state().transcript = None;
        }
        prefix.push(NewEvent {
            turn_id: Some(turn_id.clone()),
            event: received_event(&messages).into(),
        });
        let recorded = match self.record_batch(&record.id, prefix).await {
            Ok(r) => r,
            Err(e) => {
                self.release_lease(&record.id, &turn_id).await;
                return Err(e);
            }
        };
        // `message.received` is the batch's last event.
        let index = recorded.last().map_or(0, |e| e.index);
        self.spawn_turn(record, slot, &turn_id, messages);
        Ok((turn_id, index))
    }

    /// Marks `turn_id` running in the slot and starts its task.
    pub(super) fn spawn_turn(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        turn_id: &TurnId,
        messages: Vec<Nudge>,
    ) {
        let cancel = self.inner.shutdown.child_token();
        let reason = Arc::new(AtomicU8::new(REASON_NONE));
        let (done_tx, done_rx) = watch::channel(false);
        slot.state().running = Some(Running {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            reason: Arc::clone(&reason),
            done: done_rx,
        });
        let host = self.clone();
        let record = record.clone();
        let slot = slot.clone();
        let first = turn_id.clone();
        tokio::spawn(async move {
            host.drive(record, slot, first, messages, cancel, reason, done_tx)
                .await;
        });
    }

    /// Runs again a turn that a crash (or a shutdown) caught before it
    /// started: its `message.received` (and maybe `turn.queued`) is
    /// recorded, nothing else. It keeps its turn id and continues its own
    /// events, with `queued` follow-ups waiting behind it. With replicas the
    /// caller holds the session's lease for `turn_id`.
    pub(crate) fn resume_turn(
        &self,
        record: &SessionRecord,
        turn_id: &TurnId,
        prompt: String,
        queued: Vec<Queued>,
    ) {
        tracing::info!(session_id = %record.id, turn_id = %turn_id, "running a turn that was accepted but had not started when the host stopped");
        let slot = self.slot(&record.id);
        slot.state().pending = queued;
        let messages = vec![Nudge {
            message: prompt,
            delivery_id: None,
        }];
        self.spawn_turn(record, &slot, turn_id, messages);
    }

    /// Delivers follow-ups found queued in the store (a crash or a shutdown
    /// left them) as one new turn, or behind the running one.
    pub(crate) async fn deliver_queued(
        &self,
        record: &SessionRecord,
        queued: Vec<Queued>,
    ) -> HostResult<()> {
        if queued.is_empty() {
            return Ok(());
        }
        tracing::info!(session_id = %record.id, count = queued.len(), "delivering follow-ups that were queued when the host stopped");
        let slot = self.slot(&record.id);
        let _admission = slot.admission.lock().await;
        {
            let mut state = slot.state();
            if state.running.is_some() {
                state.pending.extend(queued);
                return Ok(());
            }
        }
        let (messages, keys): (Vec<Nudge>, Vec<String>) = queued
            .into_iter()
            .map(|q| (q.nudge, q.key))
            .fold((Vec::new(), Vec::new()), |(mut m, mut k), (n, key)| {
                m.push(n);
                k.extend(key);
                (m, k)
            });
        self.begin_turn(record, &slot, Vec::new(), messages).await?;
        self.forget_queued(keys).await;
        Ok(())
    }
}

/// A send's token swap until the send is accepted or refused. Dropped
/// unsettled (the send's future was dropped half-way: a caller that hung
/// up, a shutdown), it swaps back in a task of its own, so that the session
/// does not keep a token nobody was given.
struct Rotation {
    store: Arc<dyn Store>,
    id: SessionId,
    new: String,
    old: String,
    settled: bool,
}

impl Rotation {
    /// The send was accepted: the new token stays.
    fn keep(rotation: Option<Rotation>) {
        if let Some(mut rotation) = rotation {
            rotation.settled = true;
        }
    }

    /// The send was refused: the caller's token becomes current again.
    async fn undo(rotation: Option<Rotation>) {
        if let Some(mut rotation) = rotation {
            rotation.settled = true;
            rotation.swap_back().await;
        }
    }

    async fn swap_back(&self) {
        if let Err(e) = self
            .store
            .rotate_token(&self.id, &self.new, &self.old)
            .await
        {
            tracing::warn!(session_id = %self.id, error = %e, "cannot restore the continuation token of a refused send");
        }
    }
}

impl Drop for Rotation {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let rotation = Rotation {
            store: Arc::clone(&self.store),
            id: self.id.clone(),
            new: std::mem::take(&mut self.new),
            old: std::mem::take(&mut self.old),
            settled: true,
        };
        runtime.spawn(async move { rotation.swap_back().await });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use bdk_events::SessionMode;
    use bdk_store::FsStore;

    use super::*;

    async fn token(store: &Arc<dyn Store>, id: &SessionId) -> String {
        store
            .get_session(id)
            .await
            .unwrap()
            .unwrap()
            .continuation_token
    }

    /// A send dropped between its token swap and its answer (a caller that
    /// hung up) leaves the caller's token current again; an accepted one
    /// keeps the new token, durably.
    #[tokio::test]
    async fn a_rotation_dropped_unsettled_swaps_back_and_a_kept_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path()).unwrap());
        let id = SessionId::generate();
        let old = new_http_token(&id);
        let now = Utc::now();
        store
            .create_session(SessionRecord {
                id: id.clone(),
                mode: SessionMode::Chat,
                channel: "http".into(),
                principal: None,
                continuation_token: old.clone(),
                title: None,
                purpose: None,
                dry_run: false,
                as_of: None,
                created_at: now,
                updated_at: now,
                extra: Value::Null,
            })
            .await
            .unwrap();
        let rotate = |new: String, old: String| Rotation {
            store: Arc::clone(&store),
            id: id.clone(),
            new,
            old,
            settled: false,
        };

        let new = new_http_token(&id);
        let swap = store.rotate_token_deferred(&id, &old, &new).await.unwrap();
        assert_eq!(swap, TokenSwap::Rotated);
        assert_eq!(token(&store, &id).await, new);
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        assert_eq!(alive(), 0);
        drop(rotate(new.clone(), old.clone()));
        assert_eq!(alive(), 1, "a dropped rotation spawns its swap-back");
        // The swap-back writes the old token back and then ends: wait for
        // both, or the count below may still see it on a loaded machine.
        let restored = tokio::time::timeout(Duration::from_secs(10), async {
            while token(&store, &id).await != old || alive() != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(restored.is_ok(), "the dropped rotation was not undone");

        let kept = new_http_token(&id);
        store.rotate_token_deferred(&id, &old, &kept).await.unwrap();
        Rotation::keep(Some(rotate(kept.clone(), old.clone())));
        assert_eq!(alive(), 0, "a kept rotation spawns no swap-back");
        store.commit_token(&id).await.unwrap();
        assert_eq!(token(&store, &id).await, kept);
        let reopened = FsStore::open(dir.path()).unwrap();
        let record = reopened.get_session(&id).await.unwrap().unwrap();
        assert_eq!(record.continuation_token, kept);
    }
}
