//! Cross-replica coordination: which replica runs a session's turn, how
//! another replica reaches that turn, and who cleans up after a replica that
//! died.
//!
//! Several `bdk serve` processes ("replicas") may share one store. The
//! [`Store`](crate::Store) port already makes events, tokens and streams
//! consistent between them; this port adds what the event log cannot:
//!
//! - a **turn lease** per session: at most one replica runs a turn of a
//!   session at a time, and the lease names it ([`Coordination::acquire_turn`],
//!   [`Coordination::holder`], [`Coordination::release_turn`]);
//! - **controls**: a replica that does not own a turn asks the owner to stop
//!   or preempt it ([`Coordination::signal`], [`Coordination::controls`]);
//! - **liveness**: every replica heartbeats; a lease whose replica has not
//!   heartbeaten within the engine's time-to-live is dead, and exactly one
//!   live replica takes it over ([`Coordination::claim_dead_turns`]) to record
//!   the turn interrupted.
//!
//! Engines: [`MemoryCoordination`] (one process; several hosts over one
//! shared store behave as replicas, which is how the runtime tests them) and
//! the PostgreSQL one beside the PostgreSQL store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_events::{SessionId, TurnId};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use crate::Result;

/// The default time after its last heartbeat at which a replica counts as dead.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// What a control asks of the turn's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlKind {
    /// Cancel the turn (`turn.failed`, status `cancelled`) and drop queued follow-ups.
    Stop,
    /// Interrupt the turn because a newer message arrived elsewhere.
    Preempt,
}

/// A request from one replica to the replica that owns a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    /// The replica addressed (the lease holder).
    pub replica: String,
    /// The session.
    pub session_id: SessionId,
    /// The turn the control is about; an owner ignores a control for a turn
    /// it no longer runs.
    pub turn_id: TurnId,
    /// What to do.
    pub kind: ControlKind,
}

/// A session's turn lease as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The replica that holds it.
    pub replica: String,
    /// The turn (or session-bound write call) it was taken for.
    pub turn_id: TurnId,
    /// False when the holder's heartbeat is older than the time-to-live.
    pub alive: bool,
}

/// Outcome of [`Coordination::acquire_turn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is now this replica's, for the given turn.
    Acquired,
    /// Another replica holds it.
    HeldBy(Lease),
}

/// Controls addressed to this replica.
pub type ControlStream = BoxStream<'static, Control>;

/// The coordination port. See the module docs.
///
/// Rules every engine keeps:
/// - `acquire_turn` succeeds when the session has no lease or when this
///   replica already holds it (the lease then moves to the new turn); a lease
///   of another replica, alive or dead, is never taken over by `acquire_turn`;
/// - `release_turn` removes the lease only while it is still for that turn of
///   this replica;
/// - `claim_dead_turns` moves every lease of a dead replica to this replica in
///   one atomic step, so of several replicas claiming at once exactly one gets
///   each lease;
/// - a control reaches the addressed replica's `controls` streams at most once
///   each; controls are advisory (an owner checks it still runs the turn).
#[async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// This replica's id (unique per process start).
    fn replica_id(&self) -> &str;
    /// How often the host should call [`Coordination::heartbeat`] and
    /// [`Coordination::claim_dead_turns`]; well under the time-to-live.
    fn heartbeat_interval(&self) -> Duration;
    /// Takes the session's lease for `turn_id`.
    async fn acquire_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Acquire>;
    /// Gives the lease back; true when it was held for that turn.
    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<bool>;
    /// Who holds the session's lease, if anyone.
    async fn holder(&self, session: &SessionId) -> Result<Option<Lease>>;
    /// Sends a control to `control.replica`.
    async fn signal(&self, control: Control) -> Result<()>;
    /// The controls addressed to this replica, from now on.
    async fn controls(&self) -> Result<ControlStream>;
    /// Records that this replica is alive.
    async fn heartbeat(&self) -> Result<()>;
    /// Takes over the leases of dead replicas; returns `(session, turn)` for
    /// each, now held by this replica, which records them interrupted and
    /// releases them.
    async fn claim_dead_turns(&self) -> Result<Vec<(SessionId, TurnId)>>;
    /// Leaves the cluster on a clean shutdown (after the replica's turns have
    /// ended), so nobody waits for its heartbeat to lapse.
    async fn retire(&self) -> Result<()>;
}

/// A new replica id: `rep_<random>`, fresh for every process start so a
/// restarted process never inherits the leases of its previous life.
pub fn new_replica_id() -> String {
    bdk_events::ids::new_id("rep")
}

/// In-process coordination shared by several replicas of one process.
///
/// Make one cluster, then one [`MemoryCoordination`] per replica with
/// [`MemoryCluster::join`]. Liveness follows real time: a replica that has
/// not heartbeaten within the time-to-live is dead; [`MemoryCluster::expire`]
/// makes one dead at once, as if its process had vanished.
#[derive(Clone)]
pub struct MemoryCluster {
    inner: Arc<ClusterInner>,
}

struct ClusterInner {
    ttl: Duration,
    interval: Duration,
    state: Mutex<ClusterState>,
    controls: broadcast::Sender<Control>,
}

#[derive(Default)]
struct ClusterState {
    leases: HashMap<SessionId, (String, TurnId)>,
    beats: HashMap<String, Instant>,
    /// Replicas declared dead; their heartbeats are ignored from then on.
    expired: HashSet<String>,
}

impl ClusterState {
    fn alive(&self, replica: &str, ttl: Duration) -> bool {
        !self.expired.contains(replica)
            && self.beats.get(replica).is_some_and(|at| at.elapsed() < ttl)
    }
}

impl Default for MemoryCluster {
    fn default() -> Self {
        Self::new(DEFAULT_LEASE_TTL)
    }
}

impl MemoryCluster {
    /// A cluster whose replicas die `ttl` after their last heartbeat and
    /// heartbeat every third of it.
    pub fn new(ttl: Duration) -> Self {
        Self::with_interval(ttl, ttl / 3)
    }

    /// A cluster with an explicit heartbeat (and dead-turn claim) interval.
    pub fn with_interval(ttl: Duration, interval: Duration) -> Self {
        let (controls, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(ClusterInner {
                ttl,
                interval,
                state: Mutex::new(ClusterState::default()),
                controls,
            }),
        }
    }

    /// A new replica in the cluster, alive from now on (it heartbeats once).
    pub fn join(&self, replica: impl Into<String>) -> Arc<MemoryCoordination> {
        let replica = replica.into();
        self.inner
            .state()
            .beats
            .insert(replica.clone(), Instant::now());
        Arc::new(MemoryCoordination {
            cluster: Arc::clone(&self.inner),
            replica,
        })
    }

    /// Declares `replica` dead now and ignores its heartbeats from then on.
    pub fn expire(&self, replica: &str) {
        let mut state = self.inner.state();
        state.expired.insert(replica.to_owned());
        state.beats.remove(replica);
    }

    /// The current lease of a session.
    pub fn lease(&self, session: &SessionId) -> Option<(String, TurnId)> {
        self.inner.state().leases.get(session).cloned()
    }
}

impl ClusterInner {
    fn state(&self) -> MutexGuard<'_, ClusterState> {
        // Plain data that stays consistent; a panic elsewhere must not cascade.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One replica's view of a [`MemoryCluster`].
pub struct MemoryCoordination {
    cluster: Arc<ClusterInner>,
    replica: String,
}

#[async_trait]
impl Coordination for MemoryCoordination {
    fn replica_id(&self) -> &str {
        &self.replica
    }

    fn heartbeat_interval(&self) -> Duration {
        self.cluster.interval
    }

    async fn acquire_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Acquire> {
        let mut state = self.cluster.state();
        let ttl = self.cluster.ttl;
        if let Some((replica, held)) = state.leases.get(session)
            && replica != &self.replica
        {
            return Ok(Acquire::HeldBy(Lease {
                replica: replica.clone(),
                turn_id: held.clone(),
                alive: state.alive(replica, ttl),
            }));
        }
        state
            .leases
            .insert(session.clone(), (self.replica.clone(), turn_id.clone()));
        Ok(Acquire::Acquired)
    }

    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<bool> {
        let mut state = self.cluster.state();
        let mine = state
            .leases
            .get(session)
            .is_some_and(|(r, t)| r == &self.replica && t == turn_id);
        if mine {
            state.leases.remove(session);
        }
        Ok(mine)
    }

    async fn holder(&self, session: &SessionId) -> Result<Option<Lease>> {
        let state = self.cluster.state();
        Ok(state.leases.get(session).map(|(replica, turn_id)| Lease {
            replica: replica.clone(),
            turn_id: turn_id.clone(),
            alive: state.alive(replica, self.cluster.ttl),
        }))
    }

    async fn signal(&self, control: Control) -> Result<()> {
        // No receiver means no replica listens right now; a control is
        // advisory, so that is not an error.
        let _ = self.cluster.controls.send(control);
        Ok(())
    }

    async fn controls(&self) -> Result<ControlStream> {
        let me = self.replica.clone();
        let rx = self.cluster.controls.subscribe();
        Ok(BroadcastStream::new(rx)
            .filter_map(move |item| {
                let out = match item {
                    Ok(c) if c.replica == me => Some(c),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(replica = %me, error = %e, "controls were dropped; senders wait for the turn to end and retry");
                        None
                    }
                };
                std::future::ready(out)
            })
            .boxed())
    }

    async fn heartbeat(&self) -> Result<()> {
        let mut state = self.cluster.state();
        if !state.expired.contains(&self.replica) {
            state.beats.insert(self.replica.clone(), Instant::now());
        }
        Ok(())
    }

    async fn claim_dead_turns(&self) -> Result<Vec<(SessionId, TurnId)>> {
        let mut state = self.cluster.state();
        if !state.alive(&self.replica, self.cluster.ttl) {
            // A replica that is itself considered dead must not take over
            // anyone's turns.
            return Ok(Vec::new());
        }
        let ttl = self.cluster.ttl;
        let dead: Vec<SessionId> = state
            .leases
            .iter()
            .filter(|(_, (r, _))| r != &self.replica && !state.alive(r, ttl))
            .map(|(s, _)| s.clone())
            .collect();
        let mut out = Vec::new();
        for session in dead {
            if let Some(lease) = state.leases.get_mut(&session) {
                lease.0 = self.replica.clone();
                out.push((session, lease.1.clone()));
            }
        }
        Ok(out)
    }

    async fn retire(&self) -> Result<()> {
        let mut state = self.cluster.state();
        state.beats.remove(&self.replica);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (SessionId, TurnId, TurnId) {
        (
            SessionId::generate(),
            TurnId::generate(),
            TurnId::generate(),
        )
    }

    #[tokio::test]
    async fn one_lease_per_session_and_the_holder_may_move_it() {
        let cluster = MemoryCluster::default();
        let a = cluster.join("a");
        let b = cluster.join("b");
        let (s, t1, t2) = ids();
        assert_eq!(a.acquire_turn(&s, &t1).await.unwrap(), Acquire::Acquired);
        let held = b.acquire_turn(&s, &t2).await.unwrap();
        assert_eq!(
            held,
            Acquire::HeldBy(Lease {
                replica: "a".into(),
                turn_id: t1.clone(),
                alive: true
            })
        );
        // The holder moves its own lease to its next turn.
        assert_eq!(a.acquire_turn(&s, &t2).await.unwrap(), Acquire::Acquired);
        // A release for an older turn (or by another replica) leaves it.
        assert!(!a.release_turn(&s, &t1).await.unwrap());
        assert!(!b.release_turn(&s, &t2).await.unwrap());
        assert!(a.release_turn(&s, &t2).await.unwrap());
        assert_eq!(a.holder(&s).await.unwrap(), None);
        assert_eq!(b.acquire_turn(&s, &t1).await.unwrap(), Acquire::Acquired);
    }

    #[tokio::test]
    async fn dead_leases_go_to_exactly_one_claimer() {
        let cluster = MemoryCluster::default();
        let a = cluster.join("a");
        let b = cluster.join("b");
        let c = cluster.join("c");
        let (s, t1, t2) = ids();
        a.acquire_turn(&s, &t1).await.unwrap();
        assert!(b.claim_dead_turns().await.unwrap().is_empty());
        cluster.expire("a");
        a.heartbeat().await.unwrap();
        let lease = b.holder(&s).await.unwrap().unwrap();
        assert!(!lease.alive);
        // acquire never steals, even from the dead.
        assert!(matches!(
            c.acquire_turn(&s, &t2).await.unwrap(),
            Acquire::HeldBy(_)
        ));
        let got_b = b.claim_dead_turns().await.unwrap();
        let got_c = c.claim_dead_turns().await.unwrap();
        assert_eq!(got_b, vec![(s.clone(), t1.clone())]);
        assert!(got_c.is_empty());
        // The dead replica claims nothing.
        assert!(a.claim_dead_turns().await.unwrap().is_empty());
        assert!(b.release_turn(&s, &t1).await.unwrap());
    }

    #[tokio::test]
    async fn controls_reach_only_the_addressed_replica() {
        let cluster = MemoryCluster::default();
        let a = cluster.join("a");
        let b = cluster.join("b");
        let mut to_a = a.controls().await.unwrap();
        let mut to_b = b.controls().await.unwrap();
        let (s, t, _) = ids();
        let control = |replica: &str| Control {
            replica: replica.into(),
            session_id: s.clone(),
            turn_id: t.clone(),
            kind: ControlKind::Stop,
        };
        b.signal(control("a")).await.unwrap();
        a.signal(control("b")).await.unwrap();
        assert_eq!(to_a.next().await.unwrap(), control("a"));
        assert_eq!(to_b.next().await.unwrap(), control("b"));
    }

    #[test]
    fn controls_have_a_stable_wire_shape() {
        let c = Control {
            replica: "rep_1".into(),
            session_id: SessionId::from_string("ses_1"),
            turn_id: TurnId::from_string("turn_1"),
            kind: ControlKind::Preempt,
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"replica":"rep_1","sessionId":"ses_1","turnId":"turn_1","kind":"preempt"}"#
        );
        assert_eq!(serde_json::from_str::<Control>(&json).unwrap(), c);
    }
}
