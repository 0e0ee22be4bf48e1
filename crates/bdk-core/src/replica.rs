//! Turn ownership across replicas: the host's side of the
//! [`Coordination`] port.
//!
//! Without a coordination engine (the default, one process over `FsStore`)
//! nothing here runs and the host keeps all turn state in memory. With one
//! ([`crate::host::HostBuilder::coordination`]), several hosts over one shared
//! store behave as replicas:
//!
//! - a turn takes the session's lease before its `message.received` is
//!   recorded and gives it back once the session rests; a session-bound write
//!   call holds the lease while it runs, so no turn starts under it anywhere;
//! - a follow-up on a replica that does not own the running turn asks the
//!   owner to preempt it and waits (bounded) until the lease is free; `stop`
//!   does the same with a stop control;
//! - a background task heartbeats, applies controls addressed to this replica
//!   and takes over the leases of dead replicas, recording their turns
//!   `turn.failed` (interrupted), or running them when they had not started,
//!   and delivering the follow-ups they had queued, so the sessions stay
//!   usable and nothing acknowledged is lost;
//! - startup recovery only settles a session whose lease it can take.

use std::sync::Arc;
use std::time::Duration;

use bdk_events::view::open_turn;
use bdk_events::{Envelope, Event, SessionId, TurnId};
use bdk_store::coord::{Acquire, Control, ControlKind, ControlStream, Coordination, Lease};
use bdk_store::{SessionRecord, StoreError};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::host::{Host, HostError, HostResult, WeakHost};

/// How long a follow-up, a stop or a write call waits for a turn running on
/// another replica to end before it gives up with `session_busy`.
pub const DEFAULT_REMOTE_WAIT: Duration = Duration::from_secs(30);

/// How often a waiter re-reads the lease when no event wakes it.
const POLL: Duration = Duration::from_millis(100);

/// How often a waiter repeats its control: a notification lost on the way
/// (a dropped listening connection) then only delays the turn's end.
const RESIGNAL: Duration = Duration::from_secs(1);

/// How many of the last events a write call looks at to tell a turn that is
/// only settling (its end recorded, its lease not yet released) from one that
/// still runs.
const SETTLE_TAIL: u64 = 8;

/// A session-bound write call's hold on the lease; released when dropped.
pub(crate) struct CallLease {
    coord: Arc<dyn Coordination>,
    session: SessionId,
    turn: TurnId,
}

impl Drop for CallLease {
    fn drop(&mut self) {
        let coord = Arc::clone(&self.coord);
        let session = self.session.clone();
        let turn = self.turn.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = coord.release_turn(&session, &turn).await {
                    tracing::warn!(session_id = %session, error = %e, "failed to release the lease of a write call; it lapses with this replica's heartbeat");
                }
            });
        }
    }
}

impl Host {
    /// Joins the cluster at build time: a first heartbeat, the dead replicas'
    /// turns taken over, and the control stream opened (before any turn can
    /// be addressed to this replica).
    pub(crate) async fn join_cluster(&self) -> HostResult<Option<ControlStream>> {
        let Some(coord) = self.coordination() else {
            return Ok(None);
        };
        coord.heartbeat().await?;
        let controls = coord.controls().await?;
        self.reap_dead_turns().await;
        Ok(Some(controls))
    }

    /// Leaves the cluster on shutdown, after the turns have settled.
    pub(crate) async fn leave_cluster(&self) {
        if let Some(coord) = self.coordination()
            && let Err(e) = coord.retire().await
        {
            tracing::warn!(replica = %coord.replica_id(), error = %e, "failed to leave the cluster; other replicas wait for the heartbeat to lapse");
        }
    }

    /// Takes the session's lease for a turn about to start. A turn of
    /// another replica is preempted and waited out (bounded); a dead
    /// replica's turn is recorded interrupted first.
    pub(crate) async fn lease_turn(&self, id: &SessionId, turn: &TurnId) -> HostResult<()> {
        let Some(coord) = self.coordination().cloned() else {
            return Ok(());
        };
        let deadline = Instant::now() + self.coordination_wait();
        loop {
            match coord.acquire_turn(id, turn).await? {
                Acquire::Acquired => return Ok(()),
                Acquire::HeldBy(lease) => {
                    if !lease.alive {
                        self.reap_dead_turns().await;
                    }
                    let preempt = Some(ControlKind::Preempt);
                    self.wait_released(&coord, id, &lease, deadline, preempt)
                        .await?;
                }
            }
        }
    }

    /// Moves this replica's lease to a drained follow-up turn. False when the
    /// lease was lost (another replica took this one for dead): the turn must
    /// not run.
    pub(crate) async fn move_lease(&self, id: &SessionId, turn: &TurnId) -> bool {
        let Some(coord) = self.coordination() else {
            return true;
        };
        match coord.acquire_turn(id, turn).await {
            Ok(Acquire::Acquired) => true,
            Ok(Acquire::HeldBy(lease)) => {
                tracing::error!(session_id = %id, holder = %lease.replica, "this replica lost the session's lease; the follow-up turn is not run here");
                false
            }
            Err(e) => {
                tracing::error!(session_id = %id, error = %e, "cannot move the session's lease to the next turn");
                false
            }
        }
    }

    /// Gives the lease of `turn` back (no-op without coordination).
    pub(crate) async fn release_lease(&self, id: &SessionId, turn: &TurnId) {
        if let Some(coord) = self.coordination()
            && let Err(e) = coord.release_turn(id, turn).await
        {
            tracing::warn!(session_id = %id, turn_id = %turn, error = %e, "failed to release the session's lease; it lapses with this replica's heartbeat");
        }
    }

    /// Stops a turn that runs on another replica. False when no other
    /// replica holds the session.
    pub(crate) async fn stop_remote(&self, id: &SessionId) -> HostResult<bool> {
        let Some(coord) = self.coordination().cloned() else {
            return Ok(false);
        };
        let Some(lease) = coord.holder(id).await? else {
            return Ok(false);
        };
        if lease.replica == coord.replica_id() {
            // Nothing runs here (the caller checked): this lease is being
            // released right now.
            return Ok(false);
        }
        if !lease.alive {
            self.reap_dead_turns().await;
        }
        let deadline = Instant::now() + self.coordination_wait();
        let stop = Some(ControlKind::Stop);
        self.wait_released(&coord, id, &lease, deadline, stop)
            .await?;
        Ok(true)
    }

    /// Takes the lease for a session-bound write call. Another replica's
    /// running turn answers `session_busy`; one whose end is already
    /// recorded is waited for, as it only has to release the lease.
    pub(crate) async fn lease_call(
        &self,
        id: &SessionId,
        turn: &TurnId,
    ) -> HostResult<Option<CallLease>> {
        let Some(coord) = self.coordination().cloned() else {
            return Ok(None);
        };
        let deadline = Instant::now() + self.coordination_wait();
        loop {
            let lease = match coord.acquire_turn(id, turn).await? {
                Acquire::Acquired => {
                    return Ok(Some(CallLease {
                        coord,
                        session: id.clone(),
                        turn: turn.clone(),
                    }));
                }
                Acquire::HeldBy(lease) => lease,
            };
            if lease.alive && !self.turn_ended(id, &lease.turn_id).await? {
                return Err(HostError::SessionBusy(id.to_string()));
            }
            if !lease.alive {
                self.reap_dead_turns().await;
            }
            self.wait_released(&coord, id, &lease, deadline, None)
                .await?;
        }
    }

    /// True when the last few events hold the end of `turn`.
    async fn turn_ended(&self, id: &SessionId, turn: &TurnId) -> HostResult<bool> {
        let store = self.store();
        let from = store.next_index(id).await?.saturating_sub(SETTLE_TAIL);
        Ok(store.read(id, from).await?.iter().any(|e| {
            e.turn_id.as_ref() == Some(turn)
                && matches!(e.event, Event::TurnCompleted(_) | Event::TurnFailed(_))
        }))
    }

    async fn signal(
        &self,
        coord: &Arc<dyn Coordination>,
        id: &SessionId,
        lease: &Lease,
        kind: ControlKind,
    ) -> HostResult<()> {
        tracing::debug!(session_id = %id, turn_id = %lease.turn_id, owner = %lease.replica, ?kind, "asking the owning replica to end its turn");
        coord
            .signal(Control {
                replica: lease.replica.clone(),
                session_id: id.clone(),
                turn_id: lease.turn_id.clone(),
                kind,
            })
            .await?;
        Ok(())
    }

    /// Waits until `lease` no longer holds the session (its turn ended and
    /// was released, or a dead owner's turn was taken over), at most until
    /// `deadline`. With `control`, the owner is asked (and asked again every
    /// [`RESIGNAL`]) to end the turn. New events of the session wake the
    /// wait early.
    async fn wait_released(
        &self,
        coord: &Arc<dyn Coordination>,
        id: &SessionId,
        lease: &Lease,
        deadline: Instant,
        control: Option<ControlKind>,
    ) -> HostResult<()> {
        let store = self.store();
        let from = store.next_index(id).await?;
        let mut events = store.subscribe(id, from).await?;
        let mut signalled: Option<Instant> = None;
        loop {
            match coord.holder(id).await? {
                Some(h) if h.replica == lease.replica && h.turn_id == lease.turn_id => {
                    if !h.alive {
                        self.reap_dead_turns().await;
                    } else if let Some(kind) = control
                        && signalled.is_none_or(|at| at.elapsed() >= RESIGNAL)
                    {
                        self.signal(coord, id, lease, kind).await?;
                        signalled = Some(Instant::now());
                    }
                }
                _ => return Ok(()),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HostError::ReplicaBusy {
                    session: id.to_string(),
                    replica: lease.replica.clone(),
                    waited_ms: u64::try_from(self.coordination_wait().as_millis())
                        .unwrap_or(u64::MAX),
                });
            }
            let nap = tokio::time::sleep_until(deadline.min(now + POLL));
            tokio::pin!(nap);
            // Sleep until the poll interval passes or an event that can end
            // the turn arrives, whichever is first.
            loop {
                tokio::select! {
                    () = &mut nap => break,
                    item = events.next() => match item {
                        None => return Err(HostError::SessionNotFound(id.to_string())),
                        Some(Err(StoreError::SessionNotFound(_))) => {
                            return Err(HostError::SessionNotFound(id.to_string()));
                        }
                        Some(Err(e)) => return Err(e.into()),
                        Some(Ok(env)) if ends_something(&env.event) => break,
                        Some(Ok(_)) => {}
                    },
                }
            }
        }
    }

    /// Takes over the turns of dead replicas: each still open is settled as
    /// after a crash ([`Host::settle_session`]): a turn that had not started
    /// runs here, one that had is recorded `turn.failed` (interrupted) with
    /// the session's rest state, and the follow-ups the dead replica had
    /// queued are delivered.
    pub(crate) async fn reap_dead_turns(&self) {
        let Some(coord) = self.coordination().cloned() else {
            return;
        };
        let claimed = match coord.claim_dead_turns().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim the turns of dead replicas");
                return;
            }
        };
        for (session, turn) in claimed {
            tracing::warn!(session_id = %session, turn_id = %turn, "taking over a turn of a replica that stopped heartbeating");
            // Boxed: settling can start a turn, whose lease can reap again.
            let settled = Box::pin(self.settle_claimed(
                &session,
                &turn,
                "turn interrupted: the replica running it stopped responding",
            ));
            if let Err(e) = settled.await {
                tracing::error!(session_id = %session, turn_id = %turn, error = %e, "failed to settle a dead replica's turn; the next start does it");
                self.release_lease(&session, &turn).await;
            }
        }
    }

    /// Startup recovery of one session when replicas share the store: only a
    /// session whose lease this replica can take (nobody runs it) is
    /// settled; a lease held by a live replica is its business, and one held
    /// by a dead replica is taken over by the dead-turn claim.
    pub(crate) async fn recover_shared(
        &self,
        record: &SessionRecord,
        events: &[Envelope],
    ) -> HostResult<()> {
        let Some(coord) = self.coordination().cloned() else {
            return Ok(());
        };
        let turn = match open_turn(events) {
            Some(open) => open.id.clone(),
            // Nothing open: only follow-ups a stopped replica left queued
            // need the session, under a lease of their own.
            None if self.has_stored_queue(&record.id).await? => TurnId::generate(),
            None => return Ok(()),
        };
        match coord.acquire_turn(&record.id, &turn).await? {
            Acquire::Acquired => {
                let result = self
                    .settle_claimed(
                        &record.id,
                        &turn,
                        "turn interrupted: the host stopped while it was running",
                    )
                    .await;
                if result.is_err() {
                    self.release_lease(&record.id, &turn).await;
                }
                result
            }
            Acquire::HeldBy(_) => Ok(()),
        }
    }

    /// Settles a session whose lease this replica holds for `turn` (the
    /// open turn, or a placeholder while only queued follow-ups remain),
    /// reading its log again now that nobody else can change it. The lease
    /// is kept by a resumed turn and released otherwise.
    async fn settle_claimed(&self, id: &SessionId, turn: &TurnId, message: &str) -> HostResult<()> {
        let store = self.store();
        let Some(record) = store.get_session(id).await? else {
            self.release_lease(id, turn).await;
            return Ok(());
        };
        let events = store.read(id, 0).await?;
        let open = open_turn(&events);
        if open.as_ref().is_some_and(|open| open.id != turn) {
            // Another turn is open under a lease that is not this one: not
            // ours to settle.
            self.release_lease(id, turn).await;
            return Ok(());
        }
        let resumed = open.is_some_and(|open| !open.started);
        let result = self
            .settle_session(
                &record,
                &events,
                message,
                "task interrupted: the replica running it stopped",
            )
            .await;
        if !resumed {
            // Settled without a turn of its own: give the lease back (a no-op
            // when a delivered follow-up moved it to its turn).
            self.release_lease(id, turn).await;
        }
        result
    }
}

/// Events after which a waiter re-reads the lease.
fn ends_something(event: &Event) -> bool {
    matches!(
        event,
        Event::TurnCompleted(_)
            | Event::TurnFailed(_)
            | Event::SessionWaiting(_)
            | Event::SessionCompleted(_)
            | Event::SessionFailed(_)
            | Event::ActionsCompleted(_)
    )
}

/// The replica's background task: heartbeats, claims dead replicas' turns
/// on the same interval, and applies the controls addressed to it. Ends
/// with the host (shutdown or drop).
pub(crate) async fn run(
    host: WeakHost,
    coord: Arc<dyn Coordination>,
    mut controls: ControlStream,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(coord.heartbeat_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listening = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            control = controls.next(), if listening => match control {
                Some(control) => {
                    let Some(h) = host.upgrade() else { return };
                    h.apply_control(&control);
                }
                None => {
                    tracing::warn!(replica = %coord.replica_id(), "the control stream ended; reopening it");
                    listening = false;
                }
            },
            _ = tick.tick() => {
                let Some(h) = host.upgrade() else { return };
                if let Err(e) = coord.heartbeat().await {
                    tracing::warn!(replica = %coord.replica_id(), error = %e, "heartbeat failed");
                }
                if !listening {
                    match coord.controls().await {
                        Ok(c) => {
                            controls = c;
                            listening = true;
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot reopen the control stream"),
                    }
                }
                h.reap_dead_turns().await;
            }
        }
    }
}
