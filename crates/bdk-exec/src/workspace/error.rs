//! The failures of workspace operations: one enum for the whole module, a
//! leaf that every other file of it names.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Failures of workspace operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The path is not an acceptable relative workspace path.
    #[error("invalid workspace path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The path would land outside the workspace: it climbs out, or runs
    /// through a symlink that is absolute, climbs out, loops, dangles or is
    /// a magic link.
    #[error("workspace path {path:?} escapes the workspace")]
    Escapes {
        /// The path as given.
        path: String,
    },
    /// The path names a FIFO, a socket or a device where a regular file is
    /// wanted: the server never opens one for reading or writing.
    #[error("{path} is a {kind}; only regular files can be {access}")]
    NotAFile {
        /// The path as given.
        path: String,
        /// What it is.
        kind: SpecialKind,
        /// What was asked of it.
        access: Access,
    },
    /// A filesystem operation failed.
    #[error("failed to {action} {path}")]
    Io {
        /// What was being done (`write`, `create directory`, ...).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        WorkspaceError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The kind of the underlying I/O error, for callers that phrase "no
    /// such file" or "is a directory" themselves.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            WorkspaceError::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// A kind of file that is not a regular file or a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecialKind {
    /// A named pipe: opening it blocks until the other end opens.
    Fifo,
    /// A Unix domain socket file.
    Socket,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
    /// Something else that is neither a file nor a directory.
    Other,
}

impl fmt::Display for SpecialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpecialKind::Fifo => "FIFO (named pipe)",
            SpecialKind::Socket => "Unix socket",
            SpecialKind::CharDevice => "character device",
            SpecialKind::BlockDevice => "block device",
            SpecialKind::Other => "special file",
        })
    }
}

/// What was asked of a file, as a refusal names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Reading it.
    Read,
    /// Writing it.
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Write => "written",
        })
    }
}
