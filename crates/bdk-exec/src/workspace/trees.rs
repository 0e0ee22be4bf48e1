//! [`Trees`]: a host's way to the trees its tools write, and the bound on
//! how much blocking file work each of them may have at once.
//!
//! Every file operation on a tree runs on tokio's blocking pool, which is
//! shared by the whole process. Whatever in a tree could make an operation
//! slow or stuck (a huge directory, a filesystem that hangs, a kind of file
//! nobody thought of) must cost its own session only: before it goes to the
//! pool, an operation takes a permit of its tree's semaphore
//! ([`FILE_OPS_PER_TREE`] permits), and holds it until the blocking work
//! itself ends (also when the caller stopped waiting). So one session can
//! hold at most that many of the pool's threads however many calls it
//! makes.
//!
//! The registry belongs to the host that made it (nothing here is a process
//! global) and holds its trees weakly: an entry lives while an operation or
//! a [`TreeRoot`] of its tree does, and dead entries are dropped as new ones
//! come, so it does not grow with the host's history.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Semaphore;

use super::error::WorkspaceError;
use super::owner::{Adopted, Owner, adopt};
use super::tree::Tree;

/// How many file operations of one tree may be on the blocking pool at once.
pub const FILE_OPS_PER_TREE: usize = 4;

/// The trees of one host: their gates, and the owner new files get.
#[derive(Clone, Debug, Default)]
pub struct Trees {
    registry: Arc<Mutex<Registry>>,
    owner: Option<Owner>,
}

#[derive(Debug, Default)]
struct Registry {
    gates: HashMap<PathBuf, Weak<Gate>>,
    /// Entries alive after the last sweep; the next sweep waits until the
    /// map has grown well past that, so sweeping costs O(1) a tree.
    live: usize,
}

#[derive(Debug)]
struct Gate {
    permits: Arc<Semaphore>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl Trees {
    /// A registry of its own, giving new files no particular owner.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same registry, giving every file and directory its trees create
    /// to `owner` (see [`Owner`]).
    pub fn with_owner(mut self, owner: Option<Owner>) -> Self {
        self.owner = owner;
        self
    }

    /// The owner new files get, if any.
    pub fn owner(&self) -> Option<Owner> {
        self.owner
    }

    /// The tree rooted at `path`.
    pub fn root(&self, path: impl Into<PathBuf>) -> TreeRoot {
        let path = path.into();
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let gate = match registry.gates.get(&path).and_then(Weak::upgrade) {
            Some(gate) => gate,
            None => {
                let gate = Arc::new(Gate {
                    permits: Arc::new(Semaphore::new(FILE_OPS_PER_TREE)),
                    in_flight: AtomicUsize::new(0),
                    peak: AtomicUsize::new(0),
                });
                registry.gates.insert(path.clone(), Arc::downgrade(&gate));
                if registry.gates.len() > 2 * registry.live.max(16) {
                    registry.gates.retain(|_, gate| gate.strong_count() > 0);
                    registry.live = registry.gates.len();
                }
                gate
            }
        };
        TreeRoot {
            path,
            owner: self.owner,
            gate,
        }
    }

    /// How many trees the registry holds an entry for (live or not yet
    /// swept).
    pub fn tracked(&self) -> usize {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .gates
            .len()
    }
}

/// One tree of a [`Trees`]: its root's path, the owner its new files get,
/// and its gate. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TreeRoot {
    path: PathBuf,
    owner: Option<Owner>,
    gate: Arc<Gate>,
}

impl TreeRoot {
    /// The root's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The owner new files get, if any.
    pub fn owner(&self) -> Option<Owner> {
        self.owner
    }

    /// Runs `op` on the blocking pool once this tree has a free permit; the
    /// permit is held until `op` returns.
    pub async fn blocking<R, F>(&self, op: F) -> Result<R, WorkspaceError>
    where
        R: Send + 'static,
        F: FnOnce(&Path, Option<Owner>) -> Result<R, WorkspaceError> + Send + 'static,
    {
        let failed = |e: io::Error| WorkspaceError::io("run a file operation in", &self.path, e);
        let permit = Arc::clone(&self.gate.permits)
            .acquire_owned()
            .await
            .map_err(|e| failed(io::Error::other(e)))?;
        let gate = Arc::clone(&self.gate);
        let path = self.path.clone();
        let owner = self.owner;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _busy = Busy::enter(&gate);
            op(&path, owner)
        })
        .await
        .map_err(|e| failed(io::Error::other(e)))?
    }

    /// Opens the existing tree and runs `op` on it (see [`TreeRoot::blocking`]).
    pub async fn open<R, F>(&self, op: F) -> Result<R, WorkspaceError>
    where
        R: Send + 'static,
        F: FnOnce(&Tree) -> Result<R, WorkspaceError> + Send + 'static,
    {
        self.blocking(move |path, owner| op(&Tree::open(path, owner)?))
            .await
    }

    /// Opens the tree, creating its root when missing, and runs `op` on it.
    pub async fn create<R, F>(&self, op: F) -> Result<R, WorkspaceError>
    where
        R: Send + 'static,
        F: FnOnce(&Tree) -> Result<R, WorkspaceError> + Send + 'static,
    {
        self.blocking(move |path, owner| op(&Tree::create(path, owner)?))
            .await
    }

    /// Hands the existing tree to this root's owner (see [`adopt`]); does
    /// nothing when the registry gives new files no owner.
    pub async fn adopt(&self) -> Result<Adopted, WorkspaceError> {
        let Some(owner) = self.owner else {
            return Ok(Adopted::default());
        };
        self.blocking(move |path, _| adopt(path, owner)).await
    }

    /// Removes the whole tree (see [`Tree::remove`]).
    pub async fn remove(&self) -> Result<(), WorkspaceError> {
        self.blocking(|path, _| Tree::remove(path)).await
    }

    /// How many operations of this tree are on the blocking pool now.
    pub fn in_flight(&self) -> usize {
        self.gate.in_flight.load(Ordering::SeqCst)
    }

    /// The most operations of this tree that were ever on the blocking pool
    /// at once (while its registry entry lived).
    pub fn peak(&self) -> usize {
        self.gate.peak.load(Ordering::SeqCst)
    }
}

/// One operation on the blocking pool, counted while it runs.
struct Busy<'g>(&'g Gate);

impl<'g> Busy<'g> {
    fn enter(gate: &'g Gate) -> Self {
        let now = gate.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        gate.peak.fetch_max(now, Ordering::SeqCst);
        Busy(gate)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;
    use std::time::Duration;

    /// A latch the blocked operations wait on.
    #[derive(Default)]
    struct Latch {
        open: Mutex<bool>,
        changed: Condvar,
    }

    impl Latch {
        fn wait(&self) {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.changed.wait(open).unwrap();
            }
        }

        fn release(&self) {
            *self.open.lock().unwrap() = true;
            self.changed.notify_all();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_tree_never_has_more_than_its_permits_on_the_blocking_pool() {
        let trees = Trees::new();
        let busy = trees.root("/nonexistent/a");
        let other = trees.root("/nonexistent/b");
        let latch = Arc::new(Latch::default());
        let started = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..40 {
            let (busy, latch, started) = (busy.clone(), latch.clone(), started.clone());
            calls.push(tokio::spawn(async move {
                busy.blocking(move |_, _| {
                    started.fetch_add(1, Ordering::SeqCst);
                    latch.wait();
                    Ok(())
                })
                .await
            }));
        }
        // The permits fill up: exactly that many operations are running.
        for _ in 0..1000 {
            if busy.in_flight() == FILE_OPS_PER_TREE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(busy.in_flight(), FILE_OPS_PER_TREE);
        // Another tree of the same host is not held up by them.
        other.blocking(|_, _| Ok(())).await.unwrap();
        assert_eq!(started.load(Ordering::SeqCst), FILE_OPS_PER_TREE);
        latch.release();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(started.load(Ordering::SeqCst), 40);
        assert_eq!(busy.peak(), FILE_OPS_PER_TREE);
        assert_eq!(busy.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_root_adopts_for_its_registrys_owner_only() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        let plain = Trees::new().root(tmp.path());
        assert_eq!(plain.adopt().await.unwrap(), Adopted::default());
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let owned = Trees::new()
            .with_owner(Some(Owner::new(4242, 4343)))
            .root(tmp.path());
        assert_eq!(owned.adopt().await.unwrap().given, 2);
        let meta = std::fs::metadata(tmp.path().join("f")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4242, 4343));
    }

    #[test]
    fn entries_are_weak_and_swept_as_new_trees_come() {
        let trees = Trees::new();
        let kept = trees.root("/kept");
        for n in 0..1000 {
            drop(trees.root(format!("/t/{n}")));
        }
        assert!(trees.tracked() <= 2 * 16 + 1, "{}", trees.tracked());
        // A tree still in use keeps its gate.
        let again = trees.root("/kept");
        assert!(Arc::ptr_eq(&kept.gate, &again.gate));
    }
}
