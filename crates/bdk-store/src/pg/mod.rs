//! [`PgStore`]: the PostgreSQL engine of the [`Store`] port, for several
//! `bdk serve` replicas sharing one database.
//!
//! Everything durable lives in the tables of one schema (the connection's
//! `search_path`, chosen by [`PgOptions::schema`]), created by the embedded
//! migrations under `crates/bdk-store/migrations/` when the store connects:
//!
//! ```text
//! bdk_sessions   pk, id, token, principal, created_at, next_index, record (json)
//! bdk_events     (session_pk, idx) primary key, turn_id, at, kind, data (json)
//! bdk_kv         (namespace, key) primary key, value (json)
//! bdk_files      path primary key, content (bytea)
//! bdk_artifacts  id primary key, session_id, principal, kind, created_at, record, content
//! bdk_migrations the migrations applied (sqlx's table under our name)
//! ```
//!
//! How the port's promises are kept across processes:
//! - **Gapless indices.** An append is one statement (one transaction): it
//!   bumps `bdk_sessions.next_index` with `UPDATE ... RETURNING`, which takes
//!   the session row's lock, inserts the batch at the returned indices, and
//!   queues a notification. Appenders of one session therefore serialize on
//!   that row lock whichever replica they run on, and a batch commits whole.
//!   Every append commits before it returns; a batch holding a boundary
//!   event also waits for the WAL flush, other batches commit
//!   asynchronously (the file store's fsync rule, in PostgreSQL terms).
//! - **Token rotation** is a compare-and-swap under the same row lock.
//! - **Live streams** (`follow.rs`): replay from the table, then wake on
//!   `LISTEN`/`NOTIFY` and read the rows past the last one delivered.
//!
//! Workspaces, tool-call scratch directories and traces are per-replica
//! scratch and stay on a local state root given at connect time, in the same
//! layout as [`crate::FsStore`].

mod coord;
mod follow;
mod rows;

pub use self::coord::PgCoordination;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::{Envelope, SessionId};
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor, Row};

use self::follow::Hub;
pub(crate) use self::rows::db;
use self::rows::{corrupt, envelope, from_db_index, to_db_index};
use crate::fs::paths::{self, MAX_KEY_LEN, MAX_NAMESPACE_LEN, invalid, safe_id};
use crate::{
    ArtifactFilter, ArtifactRecord, EventStream, NewEvent, Result, SessionRecord, Store,
    StoreError, TokenSwap,
};

/// The embedded migrations, in order. A new schema version is a new file
/// and a new line here; applied files must never change (sqlx checks their
/// checksums).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "initial",
        include_str!("../../migrations/0001_initial.sql"),
    ),
    // Turn leases and replica liveness (`coord.rs`).
    (
        2,
        "coordination",
        include_str!("../../migrations/0002_coordination.sql"),
    ),
];

/// The table sqlx records applied migrations in (inside the store's schema).
const MIGRATIONS_TABLE: &str = "bdk_migrations";

/// Default size of the connection pool of one store.
const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// How long a request waits for a pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// How to connect a [`PgStore`].
#[derive(Clone, Debug)]
pub struct PgOptions {
    url: String,
    schema: Option<String>,
    state_root: PathBuf,
    max_connections: u32,
}

impl PgOptions {
    /// `url` is a `postgres://` connection URL; `state_root` is the local
    /// directory for workspaces, tool-call scratch and traces.
    pub fn new(url: impl Into<String>, state_root: impl Into<PathBuf>) -> Self {
        Self {
            url: url.into(),
            schema: None,
            state_root: state_root.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// Keeps the store's tables in this schema (created if missing) instead
    /// of the URL's default `search_path`. Names: 1-63 of `a-z 0-9 _`,
    /// starting with a letter or `_`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The most connections the store opens at once (at least 1).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }
}

/// True for a schema name [`PgOptions::schema`] accepts.
pub fn valid_schema(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name.len() <= 63
}

/// The PostgreSQL store. Cheap to clone: clones share one pool and one
/// notification listener.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    schema: String,
    /// The `NOTIFY` channel of this schema's appends and deletes.
    channel: String,
    hub: Hub,
    root: PathBuf,
    sessions: PathBuf,
    traces: PathBuf,
    tool_calls: PathBuf,
    tmp: PathBuf,
}

/// Creates `schema` if it does not exist. Two replicas starting at once may
/// race on it; the loser's duplicate error means the schema is there.
async fn create_schema(options: &PgConnectOptions, schema: &str) -> Result<()> {
    let mut conn = sqlx::PgConnection::connect_with(options)
        .await
        .map_err(db)?;
    let sql = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
    let result = conn.execute(sqlx::AssertSqlSafe(sql)).await;
    let _ = conn.close().await;
    match result {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e))
            if matches!(e.code().as_deref(), Some("23505") | Some("42P06")) =>
        {
            Ok(())
        }
        Err(e) => Err(db(e)),
    }
}

fn migrator() -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|(version, name, sql)| {
            Migration::new(
                *version,
                (*name).into(),
                MigrationType::Simple,
                sqlx::SqlSafeStr::into_sql_str(*sql),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

fn parse_record(json: &str, what: &str) -> Result<SessionRecord> {
    serde_json::from_str(json).map_err(|e| corrupt(what, e))
}

impl PgStore {
    /// Connects, creates the schema if needed, applies pending migrations
    /// (under sqlx's advisory lock, so replicas starting together are safe)
    /// and prepares the local state root.
    pub async fn connect(options: PgOptions) -> Result<PgStore> {
        if !(options.url.starts_with("postgres://") || options.url.starts_with("postgresql://")) {
            return Err(invalid(
                "database url",
                "expected a postgres:// or postgresql:// URL",
            ));
        }
        let mut connect =
            PgConnectOptions::from_str(&options.url).map_err(|e| StoreError::Invalid {
                what: "database url",
                reason: e.to_string(),
            })?;
        connect = connect.application_name("bdk");
        if let Some(schema) = &options.schema {
            if !valid_schema(schema) {
                return Err(invalid(
                    "schema",
                    format!("{schema:?} is not 1-63 of a-z 0-9 _ starting with a letter or _"),
                ));
            }
            create_schema(&connect, schema).await?;
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(connect.clone())
            .await
            .map_err(db)?;
        migrator()
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(Box::new(e)))?;
        let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
            .fetch_one(&pool)
            .await
            .map_err(db)?;
        // Channel names are identifiers of at most 63 bytes. Two long schema
        // names cut to the same channel only cost each other spurious wakes.
        let mut channel = format!("bdk:{schema}");
        while channel.len() > 63 {
            channel.pop();
        }
        // The listener gets its own one-connection pool, opened on the first
        // subscription, so it never waits behind appenders for a connection.
        let listen_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(connect);

        let root = std::path::absolute(&options.state_root)?;
        let inner = Inner {
            sessions: root.join("sessions"),
            traces: root.join("traces"),
            tool_calls: root.join("tool-calls"),
            tmp: root.join("tmp"),
            hub: Hub::new(listen_pool, channel.clone()),
            root,
            pool,
            schema,
            channel,
        };
        for dir in [
            &inner.root,
            &inner.sessions,
            &inner.traces,
            &inner.tool_calls,
            &inner.tmp,
        ] {
            std::fs::create_dir_all(dir)?;
        }
        Ok(PgStore {
            inner: Arc::new(inner),
        })
    }

    /// The schema holding this store's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Closes the pools: waits for checked-out connections and ends the
    /// listener. The store is unusable afterwards.
    pub async fn close(&self) {
        self.inner.hub.close().await;
        self.inner.pool.close().await;
    }

    fn session_dir(&self, id: &SessionId) -> Result<PathBuf> {
        Ok(self
            .inner
            .sessions
            .join(safe_id("session id", id.as_str())?))
    }

    /// The surrogate key of a session; `SessionNotFound` when absent.
    async fn session_pk(&self, id: &SessionId) -> Result<i64> {
        safe_id("session id", id.as_str())?;
        sqlx::query_scalar("SELECT pk FROM bdk_sessions WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(db)?
            .ok_or_else(|| StoreError::SessionNotFound(id.to_string()))
    }

    /// Rewrites a session record under its row lock: `change` gets the
    /// stored record and says what to write (`None`: write nothing).
    async fn with_record_locked<T>(
        &self,
        id: &SessionId,
        change: impl FnOnce(SessionRecord) -> (Option<SessionRecord>, T),
    ) -> Result<T> {
        safe_id("session id", id.as_str())?;
        let mut tx = self.inner.pool.begin().await.map_err(db)?;
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT pk, record::text FROM bdk_sessions WHERE id = $1 FOR UPDATE")
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
        let Some((pk, json)) = row else {
            return Err(StoreError::SessionNotFound(id.to_string()));
        };
        let current = parse_record(&json, &format!("bdk_sessions {id}"))?;
        let (write, out) = change(current);
        if let Some(record) = write {
            no_nul("continuation token", Some(&record.continuation_token))?;
            no_nul("principal", record.principal.as_deref())?;
            sqlx::query(
                "UPDATE bdk_sessions SET record = $2::json, token = $3, principal = $4, \
                 created_at = $5 WHERE pk = $1",
            )
            .bind(pk)
            .bind(serde_json::to_string(&record)?)
            .bind(&record.continuation_token)
            .bind(&record.principal)
            .bind(record.created_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    /// Rejects writing a file where a parent path is a file or the path is
    /// a directory of other files, the way a file system would.
    async fn check_file_shape(&self, path: &str, segments: &[&str]) -> Result<()> {
        let parents: Vec<String> = (1..segments.len())
            .map(|n| segments[..n].join("/"))
            .collect();
        let clash: Option<String> = sqlx::query_scalar(
            "SELECT path FROM bdk_files WHERE path = ANY($1) OR starts_with(path, $2) LIMIT 1",
        )
        .bind(&parents)
        .bind(format!("{path}/"))
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(db)?;
        match clash {
            None => Ok(()),
            Some(p) if parents.contains(&p) => {
                Err(invalid("path", "a parent of the path is a file"))
            }
            Some(_) => Err(invalid("path", format!("{path:?} is a directory"))),
        }
    }
}

#[async_trait]
impl Store for PgStore {
    async fn create_session(&self, record: SessionRecord) -> Result<()> {
        safe_id("session id", record.id.as_str())?;
        no_nul("continuation token", Some(&record.continuation_token))?;
        no_nul("principal", record.principal.as_deref())?;
        let created: Option<i64> = sqlx::query_scalar(
            "INSERT INTO bdk_sessions (id, token, principal, created_at, record) \
             VALUES ($1, $2, $3, $4, $5::json) ON CONFLICT (id) DO NOTHING RETURNING pk",
        )
        .bind(record.id.as_str())
        .bind(&record.continuation_token)
        .bind(&record.principal)
        .bind(record.created_at)
        .bind(serde_json::to_string(&record)?)
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(db)?;
        match created {
            Some(_) => Ok(()),
            None => Err(StoreError::SessionExists(record.id.to_string())),
        }
    }

    async fn get_session(&self, id: &SessionId) -> Result<Option<SessionRecord>> {
        safe_id("session id", id.as_str())?;
        let json: Option<String> =
            sqlx::query_scalar("SELECT record::text FROM bdk_sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(db)?;
        json.map(|j| parse_record(&j, &format!("bdk_sessions {id}")))
            .transpose()
    }

    /// Replaces the record but keeps the stored continuation token, under
    /// the row lock that rotations take too.
    async fn update_session(&self, mut record: SessionRecord) -> Result<()> {
        let id = record.id.clone();
        self.with_record_locked(&id, move |current| {
            record.continuation_token = current.continuation_token;
            (Some(record), ())
        })
        .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT id, record::text FROM bdk_sessions ORDER BY created_at, id")
                .fetch_all(&self.inner.pool)
                .await
                .map_err(db)?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, json) in rows {
            match parse_record(&json, &format!("bdk_sessions {id}")) {
                Ok(record) => out.push(record),
                Err(e) => {
                    tracing::warn!(session_id = %id, error = %e, "skipping an unreadable session record");
                }
            }
        }
        // The column keeps microseconds; the records may hold finer times.
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool> {
        let dir = self.session_dir(id)?;
        // Events go with the row (ON DELETE CASCADE); the notification tells
        // every replica's followers to end.
        let deleted: Option<String> = sqlx::query_scalar(
            "WITH d AS (DELETE FROM bdk_sessions WHERE id = $1 RETURNING id) \
             SELECT d.id FROM d CROSS JOIN LATERAL \
             (SELECT pg_notify($2, d.id || ' deleted')) AS n",
        )
        .bind(id.as_str())
        .bind(&self.inner.channel)
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(db)?;
        self.inner.hub.poke(id, true);
        // This replica's scratch workspace goes too; other replicas' copies
        // are theirs to clean.
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await;
        if let Ok(Err(e)) = removed
            && !paths::is_missing(&e)
        {
            tracing::warn!(session_id = %id, error = %e, "could not remove a deleted session's local directory");
        }
        Ok(deleted.is_some())
    }

    async fn find_by_token(&self, token: &str) -> Result<Option<SessionRecord>> {
        if token.contains('\0') {
            return Ok(None);
        }
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT id, record::text FROM bdk_sessions WHERE token = $1 ORDER BY pk LIMIT 1",
        )
        .bind(token)
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(db)?;
        row.map(|(id, j)| parse_record(&j, &format!("bdk_sessions {id}")))
            .transpose()
    }

    async fn rotate_token(&self, id: &SessionId, expected: &str, new: &str) -> Result<TokenSwap> {
        self.with_record_locked(id, |mut record| {
            if record.continuation_token != expected {
                return (None, TokenSwap::Stale);
            }
            new.clone_into(&mut record.continuation_token);
            record.updated_at = Utc::now();
            (Some(record), TokenSwap::Rotated)
        })
        .await
    }

    async fn append(&self, id: &SessionId, events: Vec<NewEvent>) -> Result<Vec<Envelope>> {
        safe_id("session id", id.as_str())?;
        if events.is_empty() {
            self.session_pk(id).await?;
            return Ok(Vec::new());
        }
        // The wire format keeps milliseconds; truncating here makes the
        // returned envelopes equal to the ones read back.
        let at = Utc::now().trunc_subsecs(3);
        let n = events.len();
        let mut turn_ids = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut datas = Vec::with_capacity(n);
        for e in &events {
            turn_ids.push(e.turn_id.as_ref().map(|t| t.as_str().to_owned()));
            kinds.push(e.event.kind().to_owned());
            datas.push(serde_json::to_string(&e.event.data_json()?)?);
        }
        let count = i64::try_from(n).map_err(|_| invalid("batch", "too many events"))?;
        // The durability rule of every engine: a batch holding a boundary
        // event is flushed to disk before it is acknowledged, as FsStore
        // fsyncs it. Other batches commit without waiting for the WAL flush
        // (PostgreSQL's asynchronous commit, for this transaction only), as
        // FsStore leaves them in the page cache: a database crash can lose
        // the last few of them, never leave a gap (WAL is replayed in order,
        // and the next boundary's flush covers everything before it).
        let boundary = events.iter().any(|e| e.event.is_boundary());
        let synchronous_commit = if boundary { "on" } else { "off" };
        // One statement, one transaction: the UPDATE takes the session row's
        // lock (serializing appenders across replicas) and hands out the
        // indices, the INSERT writes the batch, the notification leaves at
        // commit. Nothing is visible to any reader before the commit.
        let first: Option<i64> = sqlx::query_scalar(
            "WITH s AS ( \
                UPDATE bdk_sessions SET next_index = next_index + $2 WHERE id = $1 \
                RETURNING pk, next_index - $2 AS first \
             ), ins AS ( \
                INSERT INTO bdk_events (session_pk, idx, turn_id, at, kind, data) \
                SELECT s.pk, s.first + u.ord - 1, u.turn_id, $3, u.kind, u.data::json \
                FROM s, unnest($4::text[], $5::text[], $6::text[]) \
                    WITH ORDINALITY AS u(turn_id, kind, data, ord) \
             ), durability AS ( \
                SELECT set_config('synchronous_commit', $8, true) \
             ) \
             SELECT s.first FROM s CROSS JOIN durability CROSS JOIN LATERAL \
                (SELECT pg_notify($7, $1 || ' ' || (s.first + $2 - 1)::text)) AS n",
        )
        .bind(id.as_str())
        .bind(count)
        .bind(at)
        .bind(&turn_ids)
        .bind(&kinds)
        .bind(&datas)
        .bind(&self.inner.channel)
        .bind(synchronous_commit)
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(db)?;
        let Some(first) = first else {
            return Err(StoreError::SessionNotFound(id.to_string()));
        };
        let first = from_db_index(first)?;
        self.inner.hub.poke(id, false);
        Ok(events
            .into_iter()
            .zip(first..)
            .map(|(e, index)| Envelope {
                index,
                session_id: id.clone(),
                turn_id: e.turn_id,
                at,
                event: e.event,
            })
            .collect())
    }

    async fn read(&self, id: &SessionId, from: u64) -> Result<Vec<Envelope>> {
        safe_id("session id", id.as_str())?;
        // One round trip: the session row joined to its events, so a missing
        // session (no row) differs from one with nothing past `from` (one row
        // of nulls).
        let rows: Vec<(
            Option<i64>,
            Option<String>,
            Option<DateTime<Utc>>,
            Option<String>,
            Option<String>,
        )> = sqlx::query_as(
            "SELECT e.idx, e.turn_id, e.at, e.kind, e.data::text \
                 FROM bdk_sessions s \
                 LEFT JOIN bdk_events e ON e.session_pk = s.pk AND e.idx >= $2 \
                 WHERE s.id = $1 ORDER BY e.idx",
        )
        .bind(id.as_str())
        .bind(to_db_index(from))
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db)?;
        if rows.is_empty() {
            return Err(StoreError::SessionNotFound(id.to_string()));
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if let (Some(idx), turn_id, Some(at), Some(kind), Some(data)) = row {
                out.push(envelope(id, (idx, turn_id, at, kind, data))?);
            }
        }
        Ok(out)
    }

    async fn next_index(&self, id: &SessionId) -> Result<u64> {
        safe_id("session id", id.as_str())?;
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_index FROM bdk_sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(db)?;
        match next {
            Some(n) => from_db_index(n),
            None => Err(StoreError::SessionNotFound(id.to_string())),
        }
    }

    async fn subscribe(&self, id: &SessionId, from: u64) -> Result<EventStream> {
        safe_id("session id", id.as_str())?;
        let keep_alive: Arc<dyn std::any::Any + Send + Sync> = Arc::clone(&self.inner) as _;
        follow::subscribe(
            &self.inner.hub,
            self.inner.pool.clone(),
            keep_alive,
            id.clone(),
            from,
            self.session_pk(id),
        )
        .await
    }

    /// `sessions/<id>/workspace` under the local state root, as in
    /// [`crate::FsStore`]; an unsafe id maps under `tmp/`.
    fn workspace_dir(&self, id: &SessionId) -> PathBuf {
        match self.session_dir(id) {
            Ok(dir) => dir.join("workspace"),
            Err(_) => paths::chunked_path(
                &self.inner.tmp.join("invalid-sessions"),
                &paths::encode(id.as_str()),
                "",
            )
            .join("workspace"),
        }
    }

    fn tool_call_dir(&self, call_id: &str) -> Result<PathBuf> {
        Ok(self.inner.tool_calls.join(safe_id("call id", call_id)?))
    }

    fn traces_dir(&self) -> PathBuf {
        self.inner.traces.clone()
    }

    fn state_root(&self) -> PathBuf {
        self.inner.root.clone()
    }

    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Value>> {
        kv_names(namespace, key)?;
        let json: Option<String> =
            sqlx::query_scalar("SELECT value::text FROM bdk_kv WHERE namespace = $1 AND key = $2")
                .bind(namespace)
                .bind(key)
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(db)?;
        json.map(|j| {
            serde_json::from_str(&j)
                .map_err(|e| corrupt(format_args!("bdk_kv {namespace}/{key}"), e))
        })
        .transpose()
    }

    async fn kv_put(&self, namespace: &str, key: &str, value: Value) -> Result<()> {
        kv_names(namespace, key)?;
        sqlx::query(
            "INSERT INTO bdk_kv (namespace, key, value) VALUES ($1, $2, $3::json) \
             ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
        )
        .bind(namespace)
        .bind(key)
        .bind(serde_json::to_string(&value)?)
        .execute(&self.inner.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// `INSERT ... ON CONFLICT DO NOTHING`: the primary key decides the race.
    async fn kv_put_if_absent(&self, namespace: &str, key: &str, value: Value) -> Result<bool> {
        kv_names(namespace, key)?;
        let done = sqlx::query(
            "INSERT INTO bdk_kv (namespace, key, value) VALUES ($1, $2, $3::json) \
             ON CONFLICT (namespace, key) DO NOTHING",
        )
        .bind(namespace)
        .bind(key)
        .bind(serde_json::to_string(&value)?)
        .execute(&self.inner.pool)
        .await
        .map_err(db)?;
        Ok(done.rows_affected() == 1)
    }

    async fn kv_delete(&self, namespace: &str, key: &str) -> Result<bool> {
        kv_names(namespace, key)?;
        let done = sqlx::query("DELETE FROM bdk_kv WHERE namespace = $1 AND key = $2")
            .bind(namespace)
            .bind(key)
            .execute(&self.inner.pool)
            .await
            .map_err(db)?;
        Ok(done.rows_affected() > 0)
    }

    async fn kv_list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>> {
        paths::kv_name("namespace", namespace, MAX_NAMESPACE_LEN)?;
        if prefix.contains('\0') {
            return Err(invalid("key prefix", "contains a NUL byte"));
        }
        sqlx::query_scalar(
            "SELECT key FROM bdk_kv WHERE namespace = $1 AND starts_with(key, $2) ORDER BY key",
        )
        .bind(namespace)
        .bind(prefix)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db)
    }

    async fn file_put(&self, path: &str, bytes: Vec<u8>) -> Result<()> {
        let segments = paths::file_segments(path)?;
        self.check_file_shape(path, &segments).await?;
        sqlx::query(
            "INSERT INTO bdk_files (path, content) VALUES ($1, $2) \
             ON CONFLICT (path) DO UPDATE SET content = EXCLUDED.content, updated_at = now()",
        )
        .bind(path)
        .bind(bytes)
        .execute(&self.inner.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn file_get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        paths::file_segments(path)?;
        sqlx::query_scalar("SELECT content FROM bdk_files WHERE path = $1")
            .bind(path)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(db)
    }

    async fn file_delete(&self, path: &str) -> Result<bool> {
        paths::file_segments(path)?;
        let done = sqlx::query("DELETE FROM bdk_files WHERE path = $1")
            .bind(path)
            .execute(&self.inner.pool)
            .await
            .map_err(db)?;
        Ok(done.rows_affected() > 0)
    }

    async fn file_list(&self, prefix: &str) -> Result<Vec<String>> {
        paths::file_prefix_dir(prefix)?;
        sqlx::query_scalar("SELECT path FROM bdk_files WHERE starts_with(path, $1) ORDER BY path")
            .bind(prefix)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(db)
    }

    async fn artifact_put(&self, record: ArtifactRecord, content: Vec<u8>) -> Result<()> {
        safe_id("artifact id", &record.id)?;
        no_nul("artifact kind", Some(&record.kind))?;
        no_nul("principal", record.principal.as_deref())?;
        sqlx::query(
            "INSERT INTO bdk_artifacts (id, session_id, principal, kind, created_at, record, content) \
             VALUES ($1, $2, $3, $4, $5, $6::json, $7) \
             ON CONFLICT (id) DO UPDATE SET session_id = EXCLUDED.session_id, \
                principal = EXCLUDED.principal, kind = EXCLUDED.kind, \
                created_at = EXCLUDED.created_at, record = EXCLUDED.record, \
                content = EXCLUDED.content",
        )
        .bind(&record.id)
        .bind(record.session_id.as_ref().map(SessionId::as_str))
        .bind(&record.principal)
        .bind(&record.kind)
        .bind(record.created_at)
        .bind(serde_json::to_string(&record)?)
        .bind(content)
        .execute(&self.inner.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn artifact_get(&self, id: &str) -> Result<Option<ArtifactRecord>> {
        safe_id("artifact id", id)?;
        let json: Option<String> =
            sqlx::query_scalar("SELECT record::text FROM bdk_artifacts WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(db)?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| corrupt(format_args!("bdk_artifacts {id}"), e))
        })
        .transpose()
    }

    async fn artifact_content(&self, id: &str) -> Result<Option<Vec<u8>>> {
        safe_id("artifact id", id)?;
        sqlx::query_scalar("SELECT content FROM bdk_artifacts WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(db)
    }

    async fn artifact_list(&self, filter: &ArtifactFilter) -> Result<Vec<ArtifactRecord>> {
        let has_nul = |s: Option<&str>| s.is_some_and(|s| s.contains('\0'));
        if has_nul(filter.kind.as_deref()) || has_nul(filter.principal.as_deref()) {
            // No stored artifact can match.
            return Ok(Vec::new());
        }
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let rows = sqlx::query(
            "SELECT id, record::text FROM bdk_artifacts \
             WHERE ($1::text IS NULL OR session_id = $1) \
               AND ($2::text IS NULL OR kind = $2) \
               AND ($3::text IS NULL OR principal = $3) \
             ORDER BY created_at DESC, id DESC LIMIT $4",
        )
        .bind(filter.session_id.as_ref().map(SessionId::as_str))
        .bind(filter.kind.as_deref())
        .bind(filter.principal.as_deref())
        .bind(limit)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(db)?;
            let json: String = row.try_get(1).map_err(db)?;
            match serde_json::from_str::<ArtifactRecord>(&json) {
                Ok(record) => out.push(record),
                Err(e) => {
                    tracing::warn!(artifact_id = %id, error = %e, "skipping an unreadable artifact record");
                }
            }
        }
        Ok(out)
    }
}

/// Checks a key-value namespace and key the way every engine does.
/// PostgreSQL text cannot hold NUL: a lookup column with one is refused as
/// invalid input rather than failing as a database error. (JSON columns are
/// unaffected: serde_json writes NUL as an escape.)
fn no_nul(what: &'static str, s: Option<&str>) -> Result<()> {
    match s {
        Some(s) if s.contains('\0') => Err(invalid(what, "contains a NUL byte")),
        _ => Ok(()),
    }
}

fn kv_names(namespace: &str, key: &str) -> Result<()> {
    paths::kv_name("namespace", namespace, MAX_NAMESPACE_LEN)?;
    paths::kv_name("key", key, MAX_KEY_LEN)
}
