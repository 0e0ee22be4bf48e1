//! The eval state of one agent: its run history (opened on first use) and
//! what serializes run starts. A leaf: the app's shared state holds it, and
//! the eval routes (`evals.rs`) read it.

use std::path::PathBuf;
use std::sync::Arc;

use bdk_core::host::Host;
use bdk_evals::EvalConfig;
use bdk_evals::history::RunHistory;
use tokio::sync::{Mutex, OnceCell, watch};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;

/// Per-agent eval state.
pub(crate) struct Evals {
    pub(crate) host: Host,
    root: PathBuf,
    pub(crate) shutdown: CancellationToken,
    pub(crate) history: OnceCell<Arc<RunHistory>>,
    /// Serializes run starts, so two requests cannot both become active.
    pub(crate) starting: Mutex<()>,
    /// Bumped each time a run finishes.
    pub(crate) finished: watch::Sender<u64>,
}

impl Evals {
    pub(crate) fn new(host: Host, shutdown: CancellationToken) -> Evals {
        let root = host.project().root.clone();
        Evals {
            host,
            root,
            shutdown,
            history: OnceCell::new(),
            starting: Mutex::new(()),
            finished: watch::channel(0).0,
        }
    }

    pub(crate) async fn load(&self) -> Result<bdk_evals::spec::Loaded, ApiError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || bdk_evals::load(&root))
            .await
            .map_err(|e| ApiError::internal(&e))
    }

    /// The history, opened on first use with the config in force then.
    pub(crate) async fn history(&self, config: Option<&EvalConfig>) -> Arc<RunHistory> {
        let config = config.cloned().unwrap_or_default();
        let store = Arc::clone(self.host.store());
        Arc::clone(
            self.history
                .get_or_init(|| async move {
                    let store = config.persist_runs.then_some(store);
                    Arc::new(RunHistory::open(store, config.max_playground_runs).await)
                })
                .await,
        )
    }
}
