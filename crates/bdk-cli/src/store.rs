//! Which store `bdk serve` hosts an agent on: the file store under the
//! agent's state root (default), or PostgreSQL (`--store postgres://...`,
//! or `BDK_STORE`).
//!
//! With PostgreSQL, each agent's tables live in their own schema,
//! `bdk_<slug>` (the slug lower-cased, anything but `a-z 0-9 _` turned into
//! `_`), so one database can hold several agents and every replica serving
//! the same agent directory name lands on the same schema. The local state
//! root then only holds per-replica scratch (workspaces, tool-call
//! directories, traces) in `<state root>/replicas/<pid>/`, and the
//! single-writer lock is taken on that directory, not on the shared root:
//! several replicas on one machine can share a database.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bdk_store::{FsStore, PgOptions, PgStore, Store};

use crate::lock::{self, StateLock};

/// The engine chosen by `--store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// The file store (`fs`, or no flag).
    Fs,
    /// PostgreSQL at this URL.
    Postgres(String),
}

impl StoreSpec {
    /// Reads a `--store` value.
    pub fn parse(raw: Option<&str>) -> Result<StoreSpec> {
        match raw.map(str::trim) {
            None | Some("") | Some("fs") => Ok(StoreSpec::Fs),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(StoreSpec::Postgres(url.to_owned()))
            }
            Some(_) => bail!(
                "--store must be `fs` or a postgres:// URL (e.g. postgres://user@host:5432/db)"
            ),
        }
    }

    /// True when several processes may serve the same agent.
    pub fn is_shared(&self) -> bool {
        matches!(self, StoreSpec::Postgres(_))
    }
}

/// The PostgreSQL schema of an agent served at `slug`.
pub fn schema_for(slug: &str) -> String {
    let mut schema = String::from("bdk_");
    schema.extend(slug.chars().map(|c| {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    schema.truncate(63);
    schema
}

/// Opens the store of one agent and takes the local lock that goes with it.
pub async fn open(
    spec: &StoreSpec,
    slug: &str,
    root: &Path,
) -> Result<(Arc<dyn Store>, StateLock)> {
    match spec {
        StoreSpec::Fs => {
            let held = lock::acquire(root)?;
            let store = FsStore::open(root)
                .with_context(|| format!("failed to open the state root {}", root.display()))?;
            Ok((Arc::new(store), held))
        }
        StoreSpec::Postgres(url) => {
            let local: PathBuf = root.join("replicas").join(std::process::id().to_string());
            let held = lock::acquire(&local)?;
            let schema = schema_for(slug);
            let store = PgStore::connect(PgOptions::new(url.clone(), &local).schema(&schema))
                .await
                .with_context(|| {
                    format!(
                        "failed to open the PostgreSQL store (schema {schema}) for agent `{slug}`"
                    )
                })?;
            Ok((Arc::new(store), held))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_flags_parse() {
        assert_eq!(StoreSpec::parse(None).unwrap(), StoreSpec::Fs);
        assert_eq!(StoreSpec::parse(Some("fs")).unwrap(), StoreSpec::Fs);
        assert_eq!(
            StoreSpec::parse(Some("postgres://u@h/db")).unwrap(),
            StoreSpec::Postgres("postgres://u@h/db".into())
        );
        assert!(
            StoreSpec::parse(Some("postgresql://h/db"))
                .unwrap()
                .is_shared()
        );
        assert!(StoreSpec::parse(Some("mysql://h/db")).is_err());
        assert!(StoreSpec::parse(Some("/var/lib/bdk")).is_err());
    }

    #[test]
    fn schemas_are_valid_identifiers() {
        assert_eq!(schema_for("weather"), "bdk_weather");
        assert_eq!(schema_for("My-Agent_2"), "bdk_my_agent_2");
        assert_eq!(schema_for(&"x".repeat(100)).len(), 63);
    }
}
