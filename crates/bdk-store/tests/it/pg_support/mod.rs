//! Shared by the PostgreSQL tests: the database URL, fresh schemas, and the
//! conformance harness over them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::sync::Mutex;

use bdk_store::conformance::Harness;
use bdk_store::{PgOptions, PgStore, Store};
use sqlx::{Connection, Executor, PgConnection};

/// The database the tests use: `BDK_TEST_DATABASE_URL`, or the local
/// default that `.ci/run` provides.
pub fn database_url() -> String {
    std::env::var("BDK_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// An admin connection. PostgreSQL being unreachable fails the test with
/// the fix: these tests never skip.
pub async fn admin() -> PgConnection {
    let url = database_url();
    match PgConnection::connect(&url).await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "PostgreSQL is unreachable at {url}: {e}\n\
             Start it (`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, \
             as `.ci/run` does) or point BDK_TEST_DATABASE_URL at a reachable database."
        ),
    }
}

/// A new schema name, unique to this call.
pub fn new_schema() -> String {
    format!("bdk_t_{}", uuid::Uuid::new_v4().simple())
}

/// Drops schemas made by a test.
pub async fn drop_schemas(schemas: &[String]) {
    if schemas.is_empty() {
        return;
    }
    let mut conn = admin().await;
    for schema in schemas {
        conn.execute(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .await
        .expect("drop a test schema");
    }
    conn.close().await.ok();
}

/// Opens a store on `schema` with a local state root at `<dir>/state`.
pub async fn open(schema: &str, dir: &std::path::Path, max_connections: u32) -> PgStore {
    let url = database_url();
    PgStore::connect(
        PgOptions::new(&url, dir.join("state"))
            .schema(schema)
            .max_connections(max_connections),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "cannot open a PgStore at {url} (schema {schema}): {e}\n\
             Is PostgreSQL running? `.ci/run` starts it; BDK_TEST_DATABASE_URL overrides the URL."
        )
    })
}

/// [`Harness`] over PostgreSQL: each fresh store gets its own schema and
/// local temp directory; `reopen` connects a new store to the same schema.
#[derive(Default)]
pub struct PgHarness {
    made: Mutex<Vec<(String, tempfile::TempDir)>>,
}

impl PgHarness {
    /// Drops every schema this harness made.
    pub async fn cleanup(&self) {
        let schemas: Vec<String> = self
            .made
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| s.clone())
            .collect();
        drop_schemas(&schemas).await;
    }
}

impl Harness for PgHarness {
    type S = PgStore;

    async fn fresh(&self) -> PgStore {
        let schema = new_schema();
        let dir = tempfile::tempdir().expect("create a temp dir");
        let store = open(&schema, dir.path(), 8).await;
        self.made.lock().unwrap().push((schema, dir));
        store
    }

    async fn reopen(&self, store: PgStore) -> PgStore {
        let schema = store.schema().to_owned();
        let root = store.state_root();
        store.close().await;
        drop(store);
        let parent = root
            .parent()
            .expect("state root has a parent")
            .to_path_buf();
        open(&schema, &parent, 8).await
    }
}
