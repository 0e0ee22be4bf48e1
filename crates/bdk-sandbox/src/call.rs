//! What one call may reach ([`Call`]), and what can go wrong ([`Error`]):
//! the values the host side passes and gets back. A leaf.

use std::path::PathBuf;

/// Errors of building a sandbox or probing it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A path cannot be passed to the launcher.
    #[error("path {0} is not valid UTF-8")]
    NonUtf8Path(PathBuf),
    /// The launcher could not be run.
    #[error("failed to run the sandbox launcher {launcher}: {source}")]
    Launch {
        /// The launcher.
        launcher: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A fork server could not take a call.
    #[error("the sandbox's fork server failed: {0}")]
    ForkServer(String),
    /// The launcher ran but did not report.
    #[error("the sandbox launcher {launcher} failed: {message}")]
    Probe {
        /// The launcher.
        launcher: PathBuf,
        /// What it said.
        message: String,
    },
}

/// What one call may reach beyond the system: its own folder, its
/// workspace, a socket.
#[derive(Clone, Debug, Default)]
pub struct Call {
    /// Confine the filesystem (Landlock). `false` keeps only the lifetime
    /// and privilege protections (for long-lived servers that need more).
    pub filesystem: bool,
    /// Readable and executable: the program's folder and its shared code.
    pub read: Vec<PathBuf>,
    /// Readable and writable: the workspace and the call's temp dir.
    pub write: Vec<PathBuf>,
    /// Unix sockets the program may connect to (the host endpoint).
    pub sockets: Vec<PathBuf>,
}
