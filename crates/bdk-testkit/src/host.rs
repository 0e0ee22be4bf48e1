//! Hosts over a real [`FsStore`] in a temporary directory.

use std::path::Path;
use std::sync::Arc;

use bdk_core::Project;
use bdk_core::host::{Host, HostBuilder};
use bdk_store::{FsStore, Store};
use tempfile::TempDir;

use crate::folder::{AgentFolder, Discovered};

/// Builds a host for `project` over an [`FsStore`] at `state_root`; `build`
/// adds tools, hooks, a clock or a coordination before it starts.
pub async fn host_over(
    project: Project,
    state_root: &Path,
    build: impl FnOnce(HostBuilder) -> HostBuilder,
) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(state_root).unwrap());
    build(Host::builder(project, store)).build().await.unwrap()
}

/// An agent folder on disk and a host over it, with its state in
/// `<dir>/state`.
pub struct TestHost {
    /// The project root; the state root is its `state` directory.
    pub dir: TempDir,
    /// The host.
    pub host: Host,
    /// Discovery's warnings about the folder.
    pub diagnostics: Vec<bdk_core::Diagnostic>,
}

impl TestHost {
    /// Writes `folder`, discovers it and starts a host with no extras.
    pub async fn start(folder: &AgentFolder) -> Self {
        Self::start_with(folder, |b| b).await
    }

    /// Writes `folder`, discovers it and starts a host that `build` adds to.
    pub async fn start_with(
        folder: &AgentFolder,
        build: impl FnOnce(HostBuilder) -> HostBuilder,
    ) -> Self {
        let Discovered {
            dir,
            project,
            diagnostics,
        } = folder.discover();
        let host = host_over(project, &dir.path().join("state"), build).await;
        Self {
            dir,
            host,
            diagnostics,
        }
    }

    /// The state root of the host's store.
    pub fn state_root(&self) -> std::path::PathBuf {
        self.dir.path().join("state")
    }
}
