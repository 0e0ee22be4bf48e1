//! [`PgCoordination`]: the PostgreSQL engine of the
//! [`Coordination`](crate::coord::Coordination) port, over the tables of
//! `migrations/0002_coordination.sql` in the store's schema.
//!
//! - Leases are rows of `bdk_turn_leases` (one per session); acquiring is an
//!   upsert that only overwrites a row of the same replica.
//! - Liveness is `bdk_replicas.heartbeat_at` against the database clock.
//! - Claiming dead leases is one `UPDATE` over rows selected `FOR UPDATE SKIP
//!   LOCKED`, so concurrent claimers split them and none takes a row twice.
//! - Controls travel as `NOTIFY` on the schema's control channel (JSON
//!   payload); each replica keeps one listening connection and keeps the
//!   controls addressed to it.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::{SessionId, TurnId};
use futures::StreamExt;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use super::{PgStore, create_schema, db, migrator, valid_schema};
use crate::coord::{
    Acquire, Control, ControlStream, Coordination, DEFAULT_LEASE_TTL, Lease, new_replica_id,
};
use crate::fs::paths::invalid;
use crate::{Result, StoreError};

/// Replica rows silent for this long are deleted (they hold no lease by then:
/// dead replicas' leases are claimed within a heartbeat interval).
const FORGET_AFTER_SECS: f64 = 24.0 * 3600.0;

/// Connections of a coordination opened with [`PgCoordination::connect`]
/// (the control listener has its own).
const MAX_CONNECTIONS: u32 = 4;

/// Coordination of the replicas that share one [`PgStore`]'s schema.
pub struct PgCoordination {
    pool: PgPool,
    channel: String,
    replica: String,
    ttl: Duration,
    interval: Duration,
}

impl PgCoordination {
    /// Coordination over `store`'s database and schema, as a new replica
    /// with a fresh id and the default time-to-live.
    pub fn new(store: &PgStore) -> Self {
        Self::over(store.inner.pool.clone(), &store.inner.schema)
    }

    /// Coordination over the store at `url` in `schema` (what
    /// [`crate::PgOptions::schema`] names), with its own small pool, for
    /// callers that hold the store only as a `dyn Store`. Creates the schema
    /// and applies the migrations when they are missing, like the store.
    pub async fn connect(url: &str, schema: &str) -> Result<Self> {
        if !valid_schema(schema) {
            return Err(invalid(
                "schema",
                format!("{schema:?} is not 1-63 of a-z 0-9 _ starting with a letter or _"),
            ));
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Invalid {
                what: "database url",
                reason: e.to_string(),
            })?
            .application_name("bdk");
        create_schema(&options, schema).await?;
        let options = options.options([("search_path", schema)]);
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(db)?;
        migrator()
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(Box::new(e)))?;
        Ok(Self::over(pool, schema))
    }

    fn over(pool: PgPool, schema: &str) -> Self {
        // Channel names are identifiers of at most 63 bytes.
        let mut channel = format!("bdk_control:{schema}");
        while channel.len() > 63 {
            channel.pop();
        }
        Self {
            pool,
            channel,
            replica: new_replica_id(),
            ttl: DEFAULT_LEASE_TTL,
            interval: DEFAULT_LEASE_TTL / 3,
        }
    }

    /// A replica counts as dead `ttl` after its last heartbeat; heartbeats
    /// (and dead-turn claims) run every third of it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.interval = ttl / 3;
        self
    }

    fn ttl_secs(&self) -> f64 {
        self.ttl.as_secs_f64()
    }

    /// The lease row of `session`, with its holder's liveness.
    async fn lease(&self, session: &SessionId) -> Result<Option<Lease>> {
        let row: Option<(String, String, bool)> = sqlx::query_as(
            "SELECT l.replica, l.turn_id, \
                    COALESCE(r.heartbeat_at > now() - $2 * interval '1 second', false) \
             FROM bdk_turn_leases l LEFT JOIN bdk_replicas r ON r.id = l.replica \
             WHERE l.session_id = $1",
        )
        .bind(session.as_str())
        .bind(self.ttl_secs())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.map(|(replica, turn_id, alive)| Lease {
            replica,
            turn_id: TurnId::from_string(turn_id),
            alive,
        }))
    }
}

#[async_trait]
impl Coordination for PgCoordination {
    fn replica_id(&self) -> &str {
        &self.replica
    }

    fn heartbeat_interval(&self) -> Duration {
        self.interval
    }

    async fn acquire_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Acquire> {
        // The upsert writes when the session has no lease or this replica
        // holds it; otherwise it returns nothing and the holder is read. A
        // lease released in between reads as none, so try again.
        loop {
            let won: Option<bool> = sqlx::query_scalar(
                "INSERT INTO bdk_turn_leases (session_id, replica, turn_id) VALUES ($1, $2, $3) \
                 ON CONFLICT (session_id) DO UPDATE \
                   SET turn_id = EXCLUDED.turn_id, acquired_at = now() \
                   WHERE bdk_turn_leases.replica = EXCLUDED.replica \
                 RETURNING true",
            )
            .bind(session.as_str())
            .bind(&self.replica)
            .bind(turn_id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
            if won.is_some() {
                return Ok(Acquire::Acquired);
            }
            if let Some(lease) = self.lease(session).await? {
                return Ok(Acquire::HeldBy(lease));
            }
        }
    }

    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM bdk_turn_leases WHERE session_id = $1 AND replica = $2 AND turn_id = $3",
        )
        .bind(session.as_str())
        .bind(&self.replica)
        .bind(turn_id.as_str())
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(done.rows_affected() > 0)
    }

    async fn holder(&self, session: &SessionId) -> Result<Option<Lease>> {
        self.lease(session).await
    }

    async fn signal(&self, control: Control) -> Result<()> {
        let payload = serde_json::to_string(&control)?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn controls(&self) -> Result<ControlStream> {
        let mut listener = PgListener::connect_with(&self.pool).await.map_err(db)?;
        listener.listen(&self.channel).await.map_err(db)?;
        let me = self.replica.clone();
        // The stream ends at the first connection error; the host reopens
        // it, and senders repeat their controls until the turn ends.
        let stream = listener
            .into_stream()
            .take_while(|item| {
                if let Err(e) = item {
                    tracing::warn!(error = %e, "the control listener lost its connection");
                }
                std::future::ready(item.is_ok())
            })
            .filter_map(move |item| {
                let control = item.ok().and_then(|n| {
                    serde_json::from_str::<Control>(n.payload())
                        .map_err(|e| tracing::warn!(error = %e, "ignoring a malformed control"))
                        .ok()
                });
                std::future::ready(control.filter(|c| c.replica == me))
            });
        Ok(stream.boxed())
    }

    async fn heartbeat(&self) -> Result<()> {
        sqlx::query(
            "INSERT INTO bdk_replicas (id) VALUES ($1) \
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
        )
        .bind(&self.replica)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn claim_dead_turns(&self) -> Result<Vec<(SessionId, TurnId)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            // The candidates come from the statement's snapshot, with the
            // replica that held each. The update's own condition
            // `l.replica = dead.replica` is re-checked against the newest row
            // version when a concurrent claimer got there first (READ
            // COMMITTED), so of racing claimers exactly one takes each lease.
            // (Locking the candidates instead, with FOR UPDATE SKIP LOCKED in
            // the subquery, re-checks the anti-join against the old snapshot
            // and lets a second claimer through.)
            "WITH me AS ( \
                 SELECT 1 FROM bdk_replicas \
                 WHERE id = $1 AND heartbeat_at > now() - $2 * interval '1 second' \
             ), dead AS ( \
                 SELECT l.session_id, l.replica FROM bdk_turn_leases l \
                 WHERE l.replica <> $1 AND EXISTS (SELECT 1 FROM me) AND NOT EXISTS ( \
                     SELECT 1 FROM bdk_replicas r \
                     WHERE r.id = l.replica AND r.heartbeat_at > now() - $2 * interval '1 second') \
             ) \
             UPDATE bdk_turn_leases l SET replica = $1, acquired_at = now() \
             FROM dead WHERE l.session_id = dead.session_id AND l.replica = dead.replica \
             RETURNING l.session_id, l.turn_id",
        )
        .bind(&self.replica)
        .bind(self.ttl_secs())
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        sqlx::query(
            "DELETE FROM bdk_replicas r WHERE r.heartbeat_at < now() - $1 * interval '1 second' \
             AND NOT EXISTS (SELECT 1 FROM bdk_turn_leases l WHERE l.replica = r.id)",
        )
        .bind(FORGET_AFTER_SECS)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .into_iter()
            .map(|(s, t)| (SessionId::from_string(s), TurnId::from_string(t)))
            .collect())
    }

    async fn retire(&self) -> Result<()> {
        sqlx::query("DELETE FROM bdk_replicas WHERE id = $1")
            .bind(&self.replica)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }
}
