//! One writer per state root.
//!
//! The file store assumes a single process appends to a state root (indices
//! are assigned in memory), and recovery marks every unfinished turn as
//! interrupted, which would be wrong while another process is still running
//! that turn. Commands that write take an exclusive advisory lock on
//! `<state-root>/.lock` first and fail fast with a clear message when another
//! `bdk` holds it. The lock is released by the kernel when the process exits,
//! however it exits, so a `kill -9` never leaves a stale lock.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use rustix::fs::{FlockOperation, flock};

/// Holds the lock until dropped.
pub struct StateLock {
    _file: File,
}

/// Takes the exclusive lock on `state_root`, creating the directory.
pub fn acquire(state_root: &Path) -> Result<StateLock> {
    std::fs::create_dir_all(state_root)
        .with_context(|| format!("failed to create the state root {}", state_root.display()))?;
    let path = state_root.join(".lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("failed to open {}", path.display()))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        bail!(
            "the state root {} is in use by another bdk process{}; stop it or pass a different --state-root",
            state_root.display(),
            if holder.trim().is_empty() {
                String::new()
            } else {
                format!(" (pid {})", holder.trim())
            }
        );
    }
    // Record who holds it, for the message above; failure to write is harmless.
    let _ = file.set_len(0);
    let _ = write!(file, "{}", std::process::id());
    Ok(StateLock { _file: file })
}
