//! The temp dirs of program runs (their `TMPDIR`), under
//! `<state_root>/tmp/`, and the pool that lets a finished run's directory
//! serve the next run.
//!
//! Making and removing a directory per run costs an inode allocated and
//! freed, and two hops to the blocking pool. On ext4 without a journal the
//! allocation also scans past every inode freed in the last minute or more,
//! which under load made one `mkdir` cost hundreds of microseconds. So a
//! directory that a run hands back exactly as it got it (still the same
//! directory, with the same mode, owner and extended attributes, and
//! empty) goes to a small pool of its host and serves the next run under the
//! same root; anything else is removed, as before. Only a run whose whole
//! process tree is known to be gone hands its directory back (a contained
//! program that exited: its PID namespace died with it); a timed-out,
//! cancelled or uncontained run always gets its directory removed, since
//! something it started could still write there.
//!
//! A directory serves runs of different sessions: it carries nothing from
//! one run to the next (the checks above), and a run can reach only its own
//! directory. The pool keeps at most [`MAX_IDLE`] directories per root and
//! removes them when the last [`Containment`](crate::containment::Containment)
//! holding it goes; a process that dies leaves them behind, empty, as it
//! leaves the directories of the runs it was in.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Idle directories kept per root; more are removed.
pub(crate) const MAX_IDLE: usize = 8;

/// What must still hold of a directory for it to be handed out again.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    /// Type and permission bits.
    mode: u32,
    uid: u32,
    gid: u32,
    /// Its extended attribute names, as the kernel lists them.
    xattrs: Vec<u8>,
}

impl Identity {
    /// The directory at `path`, not following a symbolic link.
    fn of(path: &Path) -> std::io::Result<Self> {
        let meta = std::fs::symlink_metadata(path)?;
        let mut xattrs = Vec::new();
        if meta.is_dir() {
            match rustix::fs::llistxattr_query(path) {
                Ok(len) => {
                    xattrs.resize(len, 0);
                    let n = rustix::fs::llistxattr(path, &mut xattrs[..])?;
                    xattrs.truncate(n);
                }
                // No extended attributes on this filesystem: none to carry.
                Err(rustix::io::Errno::OPNOTSUPP) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            xattrs,
        })
    }
}

/// An idle directory.
#[derive(Debug)]
struct Idle {
    path: PathBuf,
    identity: Identity,
}

/// The idle directories of one host, per `tmp/` folder.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool {
    idle: Mutex<HashMap<PathBuf, Vec<Idle>>>,
}

impl ScratchPool {
    /// An idle directory of `tmp` that is still what it was, if any. One
    /// that changed since is forgotten (not removed: it is no longer ours
    /// to judge).
    fn take(&self, tmp: &Path) -> Option<Idle> {
        loop {
            let idle = self.lock().get_mut(tmp)?.pop()?;
            if Identity::of(&idle.path).is_ok_and(|now| now == idle.identity) {
                return Some(idle);
            }
        }
    }

    /// Keeps `idle` for the next run; gives it back when the pool is full.
    fn put(&self, tmp: PathBuf, idle: Idle) -> Result<(), Idle> {
        let mut pool = self.lock();
        let list = pool.entry(tmp).or_default();
        if list.len() >= MAX_IDLE {
            return Err(idle);
        }
        list.push(idle);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Vec<Idle>>> {
        // The map is consistent after every operation: a panic elsewhere
        // cannot leave it half-updated.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many directories are idle under `tmp` (tests).
    #[cfg(test)]
    fn idle(&self, tmp: &Path) -> usize {
        self.lock().get(tmp).map_or(0, Vec::len)
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        let pool = std::mem::take(
            self.idle
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // Empty directories: one `rmdir` each, which fails harmlessly on
        // one that is not (or is no longer) ours and empty.
        for idle in pool.into_values().flatten() {
            let _ = std::fs::remove_dir(&idle.path);
        }
    }
}

/// A directory of one program run (its `TMPDIR`). Dropped, it is removed;
/// [`ScratchDir::finish`] may hand it back to its pool instead.
#[derive(Debug)]
pub(crate) struct ScratchDir {
    path: PathBuf,
    /// The pool and the directory's identity when it was handed out.
    reuse: Option<(Arc<ScratchPool>, Identity)>,
}

impl ScratchDir {
    /// A directory under `<root>/tmp/`: an idle one of `pool`, else a new
    /// `<root>/tmp/<name>` (the state root's `tmp/` holds them, so no other
    /// program can reach it).
    pub(crate) async fn create(
        pool: &Arc<ScratchPool>,
        root: &Path,
        name: &str,
        owner: Option<bdk_sandbox::Ids>,
    ) -> std::io::Result<Self> {
        let tmp = root.join("tmp");
        // A pool belongs to one containment, so its idle directories were
        // all made for this owner.
        if let Some(idle) = pool.take(&tmp) {
            return Ok(Self {
                path: idle.path,
                reuse: Some((pool.clone(), idle.identity)),
            });
        }
        let path = tmp.join(name);
        let made = path.clone();
        let identity = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&made)?;
            // The program writes it as its own user. The path is the
            // server's (`tmp/` of the state root), so no link can redirect
            // the change.
            if let Some(owner) = owner {
                rustix::fs::chownat(
                    rustix::fs::CWD,
                    &made,
                    Some(rustix::fs::Uid::from_raw(owner.uid)),
                    Some(rustix::fs::Gid::from_raw(owner.gid)),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )?;
            }
            // A directory whose identity cannot be read is simply not
            // reused.
            Ok::<_, std::io::Error>(Identity::of(&made).ok())
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Self {
            path,
            reuse: identity.map(|identity| (pool.clone(), identity)),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Ends the run's use of the directory: back to the pool when
    /// `tree_gone` (no process of the run can still reach it) and the run
    /// left it as it got it; removed otherwise.
    pub(crate) fn finish(mut self, tree_gone: bool) {
        if !tree_gone {
            return;
        }
        let Some((pool, identity)) = self.reuse.take() else {
            return;
        };
        let Some(tmp) = self.path.parent().map(Path::to_path_buf) else {
            return;
        };
        // The identity first: it does not follow a symbolic link, and the
        // emptiness check after it reads the directory it vouched for.
        let pristine = Identity::of(&self.path).is_ok_and(|now| now == identity)
            && is_empty(&self.path).unwrap_or(false);
        if !pristine {
            return;
        }
        let idle = Idle {
            path: std::mem::take(&mut self.path),
            identity,
        };
        if let Err(idle) = pool.put(tmp, idle) {
            // The pool is full: removed on drop.
            self.path = idle.path;
        }
    }
}

/// True when the directory at `path` has no entries.
fn is_empty(path: &Path) -> std::io::Result<bool> {
    Ok(std::fs::read_dir(path)?.next().is_none())
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.as_os_str().is_empty() {
            return;
        }
        // The removal walks a tree: keep it off the async threads when there
        // is a runtime to hand it to.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(move || {
                    let _ = std::fs::remove_dir_all(&path);
                });
            }
            Err(_) => {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Arc<ScratchPool> {
        Arc::default()
    }

    #[tokio::test]
    async fn a_directory_left_empty_serves_the_next_run_and_a_used_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        let pool = pool();
        let first = ScratchDir::create(&pool, root.path(), "run_1", None)
            .await
            .unwrap();
        let path = first.path().to_path_buf();
        assert_eq!(path, tmp.join("run_1"));
        first.finish(true);
        assert_eq!(pool.idle(&tmp), 1);
        assert!(path.is_dir());

        // The next run gets the same directory, whatever its own name.
        let second = ScratchDir::create(&pool, root.path(), "run_2", None)
            .await
            .unwrap();
        assert_eq!(second.path(), path);
        assert_eq!(pool.idle(&tmp), 0);
        std::fs::write(path.join("left.txt"), "x").unwrap();
        second.finish(true);
        assert_eq!(
            pool.idle(&tmp),
            0,
            "a directory with a file in it is not kept"
        );
        wait_gone(&path).await;

        // Nothing idle: a new directory under the run's own name.
        let third = ScratchDir::create(&pool, root.path(), "run_3", None)
            .await
            .unwrap();
        assert_eq!(third.path(), tmp.join("run_3"));
    }

    #[tokio::test]
    async fn a_run_whose_tree_may_live_on_never_hands_its_directory_back() {
        let root = tempfile::tempdir().unwrap();
        let pool = pool();
        let dir = ScratchDir::create(&pool, root.path(), "run_1", None)
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        dir.finish(false);
        assert_eq!(pool.idle(&root.path().join("tmp")), 0);
        wait_gone(&path).await;
    }

    #[tokio::test]
    async fn a_changed_mode_or_an_added_attribute_keeps_a_directory_out_of_the_pool() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        let pool = pool();

        let dir = ScratchDir::create(&pool, root.path(), "mode", None)
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        dir.finish(true);
        assert_eq!(pool.idle(&tmp), 0);
        wait_gone(&path).await;

        let dir = ScratchDir::create(&pool, root.path(), "xattr", None)
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        let set = rustix::fs::setxattr(
            &path,
            "user.left_for_the_next_run",
            b"secret",
            rustix::fs::XattrFlags::empty(),
        );
        dir.finish(true);
        match set {
            Ok(()) => {
                assert_eq!(pool.idle(&tmp), 0);
                wait_gone(&path).await;
            }
            // A filesystem without user attributes: nothing to carry.
            Err(e) => assert_eq!(e, rustix::io::Errno::OPNOTSUPP, "{e}"),
        }
    }

    #[tokio::test]
    async fn an_idle_directory_replaced_meanwhile_is_not_handed_out() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        let pool = pool();
        let dir = ScratchDir::create(&pool, root.path(), "run_1", None)
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        dir.finish(true);
        assert_eq!(pool.idle(&tmp), 1);
        // Something swaps the idle directory for a link to elsewhere.
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();

        let next = ScratchDir::create(&pool, root.path(), "run_2", None)
            .await
            .unwrap();
        assert_eq!(next.path(), tmp.join("run_2"));
        assert_eq!(pool.idle(&tmp), 0);
        // The link is not ours any more: left alone.
        assert!(path.symlink_metadata().unwrap().is_symlink());
    }

    #[tokio::test]
    async fn the_pool_keeps_a_few_and_removes_them_when_it_goes() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        let pool = pool();
        let mut dirs = Vec::new();
        for n in 0..MAX_IDLE + 2 {
            dirs.push(
                ScratchDir::create(&pool, root.path(), &format!("run_{n}"), None)
                    .await
                    .unwrap(),
            );
        }
        for dir in dirs {
            dir.finish(true);
        }
        assert_eq!(pool.idle(&tmp), MAX_IDLE);
        for n in MAX_IDLE..MAX_IDLE + 2 {
            wait_gone(&tmp.join(format!("run_{n}"))).await;
        }
        drop(pool);
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    }

    /// Removals run on the blocking pool: waits until `path` is gone.
    async fn wait_gone(path: &Path) {
        for _ in 0..500 {
            if path.symlink_metadata().is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} was not removed", path.display());
    }
}
