//! One writer per state root.
//!
//! The file store assumes a single process appends to a state root (indices
//! are assigned in memory), and recovery marks every unfinished turn as
//! interrupted, which would be wrong while another process is still running
//! that turn. Commands that write take an exclusive advisory lock on
//! `<state-root>/.lock` first. The lock is released by the kernel when the
//! process exits, however it exits, so a `kill -9` never leaves a stale lock.
//!
//! The lock file says who holds it: `{"pid": N}`, and for `bdk serve` also
//! the agent's base URL (`{"pid": N, "url": "http://127.0.0.1:3000/weather"}`),
//! so a command that finds the root held can go through that server's API
//! instead of failing (see `remote.rs`).

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};

/// Holds the lock until dropped.
pub struct StateLock {
    file: File,
}

/// Who holds a state root, as its lock file says.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Holder {
    /// The holding process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The base URL of the agent, when the holder is `bdk serve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Holder {
    /// Reads a lock file's contents: JSON, or the bare pid older versions wrote.
    fn parse(text: &str) -> Holder {
        let text = text.trim();
        serde_json::from_str(text).unwrap_or_else(|_| Holder {
            pid: text.parse().ok(),
            url: None,
        })
    }
}

/// What [`try_acquire`] found.
pub enum Acquired {
    /// The lock is ours.
    Locked(StateLock),
    /// Another process holds it.
    Held(Holder),
}

impl StateLock {
    /// Records that this process serves the agent of this state root at
    /// `url`. A failure to write only costs other commands the shortcut.
    pub fn record_server(&mut self, url: &str) {
        let holder = Holder {
            pid: Some(std::process::id()),
            url: Some(url.to_owned()),
        };
        write_holder(&mut self.file, &holder);
    }
}

fn write_holder(file: &mut File, holder: &Holder) {
    let Ok(text) = serde_json::to_string(holder) else {
        return;
    };
    let _ = file.set_len(0);
    let _ = std::os::unix::fs::FileExt::write_all_at(file, text.as_bytes(), 0);
}

fn lock_path(state_root: &Path) -> PathBuf {
    state_root.join(".lock")
}

/// Takes the exclusive lock on `state_root` (creating the directory), or
/// says who holds it.
pub fn try_acquire(state_root: &Path) -> Result<Acquired> {
    std::fs::create_dir_all(state_root)
        .with_context(|| format!("failed to create the state root {}", state_root.display()))?;
    let path = lock_path(state_root);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("failed to open {}", path.display()))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        return Ok(Acquired::Held(Holder::parse(&text)));
    }
    write_holder(
        &mut file,
        &Holder {
            pid: Some(std::process::id()),
            url: None,
        },
    );
    Ok(Acquired::Locked(StateLock { file }))
}

/// Takes the exclusive lock on `state_root`, failing with a clear message
/// when another process holds it.
pub fn acquire(state_root: &Path) -> Result<StateLock> {
    match try_acquire(state_root)? {
        Acquired::Locked(lock) => Ok(lock),
        Acquired::Held(holder) => bail!("{}", held_message(state_root, &holder)),
    }
}

/// The refusal for a state root another process holds.
pub fn held_message(state_root: &Path, holder: &Holder) -> String {
    let who = match (holder.pid, &holder.url) {
        (Some(pid), Some(url)) => format!(" (pid {pid}, serving {url})"),
        (Some(pid), None) => format!(" (pid {pid})"),
        (None, Some(url)) => format!(" (serving {url})"),
        (None, None) => String::new(),
    };
    format!(
        "the state root {} is in use by another bdk process{who}; stop it or pass a different --state-root",
        state_root.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_back_and_old_lock_files_still_parse() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = match try_acquire(dir.path()).unwrap() {
            Acquired::Locked(l) => l,
            Acquired::Held(_) => panic!("free root reported held"),
        };
        let text = std::fs::read_to_string(lock_path(dir.path())).unwrap();
        assert_eq!(Holder::parse(&text).pid, Some(std::process::id()));
        lock.record_server("http://127.0.0.1:9/a");
        let text = std::fs::read_to_string(lock_path(dir.path())).unwrap();
        assert_eq!(
            Holder::parse(&text),
            Holder {
                pid: Some(std::process::id()),
                url: Some("http://127.0.0.1:9/a".into())
            }
        );
        assert_eq!(Holder::parse("1234\n").pid, Some(1234));
        assert_eq!(Holder::parse("garbage"), Holder::default());
    }
}
