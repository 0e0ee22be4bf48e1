//! [`PgCoordination`] on the real PostgreSQL: replicas as separate stores
//! (separate pools) on one fresh schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::pg_support;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bdk_events::{SessionId, TurnId};
use bdk_store::PgCoordination;
use bdk_store::coord::{Acquire, Control, ControlKind, Coordination};
use futures::{FutureExt, StreamExt};
use pg_support::{admin, drop_schemas, new_schema, open};
use sqlx::Executor;

const DEADLINE: Duration = Duration::from_secs(30);

async fn with_schema<F, Fut>(body: F)
where
    F: FnOnce(String, std::path::PathBuf) -> Fut,
    Fut: Future<Output = ()>,
{
    drop(admin().await);
    let schema = new_schema();
    let dir = tempfile::tempdir().unwrap();
    let outcome = AssertUnwindSafe(body(schema.clone(), dir.path().to_path_buf()))
        .catch_unwind()
        .await;
    drop_schemas(&[schema]).await;
    if let Err(payload) = outcome {
        std::panic::resume_unwind(payload);
    }
}

/// One replica: its own store (pool) on the shared schema, alive.
async fn replica(schema: &str, dir: &std::path::Path) -> PgCoordination {
    let store = open(schema, &dir.join(new_schema()), 4).await;
    let coord = PgCoordination::new(&store);
    coord.heartbeat().await.unwrap();
    coord
}

/// Makes `replica`'s last heartbeat an hour old, as if its process had died.
async fn kill(schema: &str, replica: &str) {
    let mut conn = admin().await;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "UPDATE \"{schema}\".bdk_replicas SET heartbeat_at = now() - interval '1 hour' \
         WHERE id = '{replica}'"
    )))
    .await
    .unwrap();
}

#[tokio::test]
async fn one_lease_per_session_across_replicas() {
    with_schema(|schema, dir| async move {
        let a = replica(&schema, &dir).await;
        let b = replica(&schema, &dir).await;
        assert_ne!(a.replica_id(), b.replica_id());
        let s = SessionId::generate();
        let (t1, t2) = (TurnId::generate(), TurnId::generate());
        assert_eq!(a.acquire_turn(&s, &t1).await.unwrap(), Acquire::Acquired);
        match b.acquire_turn(&s, &t2).await.unwrap() {
            Acquire::HeldBy(lease) => {
                assert_eq!(lease.replica, a.replica_id());
                assert_eq!(lease.turn_id, t1);
                assert!(lease.alive);
            }
            other => panic!("{other:?}"),
        }
        // The holder moves its lease to its next turn; stale releases miss.
        assert_eq!(a.acquire_turn(&s, &t2).await.unwrap(), Acquire::Acquired);
        assert!(!a.release_turn(&s, &t1).await.unwrap());
        assert!(!b.release_turn(&s, &t2).await.unwrap());
        assert_eq!(b.holder(&s).await.unwrap().unwrap().turn_id, t2);
        assert!(a.release_turn(&s, &t2).await.unwrap());
        assert_eq!(b.holder(&s).await.unwrap(), None);
        assert_eq!(b.acquire_turn(&s, &t1).await.unwrap(), Acquire::Acquired);
    })
    .await;
}

#[tokio::test]
async fn racing_acquirers_get_exactly_one_lease() {
    with_schema(|schema, dir| async move {
        let mut replicas = Vec::new();
        for _ in 0..4 {
            replicas.push(Arc::new(replica(&schema, &dir).await));
        }
        for _ in 0..10 {
            let s = SessionId::generate();
            let tasks: Vec<_> = replicas
                .iter()
                .map(|r| {
                    let r = Arc::clone(r);
                    let s = s.clone();
                    tokio::spawn(async move { r.acquire_turn(&s, &TurnId::generate()).await })
                })
                .collect();
            let mut won = 0;
            for t in tasks {
                if t.await.unwrap().unwrap() == Acquire::Acquired {
                    won += 1;
                }
            }
            assert_eq!(won, 1);
        }
    })
    .await;
}

#[tokio::test]
async fn a_dead_replicas_leases_go_to_exactly_one_of_three_claimers() {
    with_schema(|schema, dir| async move {
        let dead = replica(&schema, &dir).await;
        let mut sessions = Vec::new();
        for _ in 0..20 {
            let s = SessionId::generate();
            dead.acquire_turn(&s, &TurnId::generate()).await.unwrap();
            sessions.push(s);
        }
        let mut claimers = Vec::new();
        for _ in 0..3 {
            claimers.push(Arc::new(replica(&schema, &dir).await));
        }
        // Alive: nothing to claim.
        assert!(claimers[0].claim_dead_turns().await.unwrap().is_empty());
        kill(&schema, dead.replica_id()).await;
        assert!(
            !claimers[1]
                .holder(&sessions[0])
                .await
                .unwrap()
                .unwrap()
                .alive
        );
        // acquire never takes a dead replica's lease.
        assert!(matches!(
            claimers[1]
                .acquire_turn(&sessions[0], &TurnId::generate())
                .await
                .unwrap(),
            Acquire::HeldBy(_)
        ));
        let tasks: Vec<_> = claimers
            .iter()
            .map(|c| {
                let c = Arc::clone(c);
                tokio::spawn(async move { c.claim_dead_turns().await.unwrap() })
            })
            .collect();
        let mut claimed = Vec::new();
        for t in tasks {
            claimed.extend(t.await.unwrap().into_iter().map(|(s, _)| s));
        }
        claimed.sort();
        sessions.sort();
        assert_eq!(claimed, sessions, "each dead lease claimed exactly once");
        // A replica that is itself dead claims nothing.
        let late = replica(&schema, &dir).await;
        let s = SessionId::generate();
        late.acquire_turn(&s, &TurnId::generate()).await.unwrap();
        kill(&schema, late.replica_id()).await;
        kill(&schema, claimers[0].replica_id()).await;
        assert!(claimers[0].claim_dead_turns().await.unwrap().is_empty());
        // A live one takes the late replica's lease (and the dead claimer's).
        let taken = claimers[1].claim_dead_turns().await.unwrap();
        assert!(taken.iter().any(|(t, _)| t == &s), "{taken:?}");
    })
    .await;
}

#[tokio::test]
async fn controls_reach_only_the_addressed_replica() {
    with_schema(|schema, dir| async move {
        let a = replica(&schema, &dir).await;
        let b = replica(&schema, &dir).await;
        let mut to_a = a.controls().await.unwrap();
        let mut to_b = b.controls().await.unwrap();
        let control = |replica: &str| Control {
            replica: replica.to_owned(),
            session_id: SessionId::generate(),
            turn_id: TurnId::generate(),
            kind: ControlKind::Stop,
        };
        let (for_a, for_b) = (control(a.replica_id()), control(b.replica_id()));
        b.signal(for_a.clone()).await.unwrap();
        a.signal(for_b.clone()).await.unwrap();
        let got_a = tokio::time::timeout(DEADLINE, to_a.next()).await.unwrap();
        let got_b = tokio::time::timeout(DEADLINE, to_b.next()).await.unwrap();
        assert_eq!(got_a, Some(for_a));
        assert_eq!(got_b, Some(for_b));
        // Retiring removes the replica at once: its leases read as dead.
        let s = SessionId::generate();
        a.acquire_turn(&s, &TurnId::generate()).await.unwrap();
        a.retire().await.unwrap();
        assert!(!b.holder(&s).await.unwrap().unwrap().alive);
    })
    .await;
}
