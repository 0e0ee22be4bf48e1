//! Who owns what the server makes inside a tree.
//!
//! A server running as root is to run contained programs as an unprivileged
//! user; then everything the server creates in a tree those programs write
//! (a directory, a file `write_file` makes, a seeded skill) must belong to
//! that user, and a tree made before must be handed over once. An
//! [`Owner`] on a [`Tree`](super::Tree) gives every file and directory it
//! creates to that user; [`adopt`] hands over an existing tree.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use super::error::WorkspaceError;

/// The user and group a tree's new files and directories are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

impl Owner {
    /// The owner `uid:gid`.
    pub fn new(uid: u32, gid: u32) -> Self {
        Owner { uid, gid }
    }

    fn owns(&self, stat: &Stat) -> bool {
        stat.st_uid == self.uid && stat.st_gid == self.gid
    }

    /// Gives what the descriptor `fd` names to this owner: a file or a
    /// directory, or, for an `O_PATH | O_NOFOLLOW` descriptor, a symlink
    /// itself (never its target). `fchownat(fd, "", AT_EMPTY_PATH)`, which,
    /// unlike `fchown`, also takes the `O_PATH` descriptors cap-std opens
    /// directories with.
    pub(crate) fn give(&self, fd: impl AsFd) -> io::Result<()> {
        rustix::fs::chownat(
            fd,
            c"",
            Some(rustix::fs::Uid::from_raw(self.uid)),
            Some(rustix::fs::Gid::from_raw(self.gid)),
            AtFlags::EMPTY_PATH,
        )
        .map_err(io::Error::from)
    }
}

/// How deep [`adopt`] walks. It holds one descriptor per level, so a tool
/// that nests directories without end cannot make the server run out of
/// descriptors; a tree deeper than this is refused and stays as it was.
pub const ADOPT_MAX_DEPTH: usize = 128;

/// What [`adopt`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    /// Entries (the root included) given to the owner.
    pub given: usize,
    /// Files left as they were because they have other hard links: such a
    /// file may also be a file outside the tree, which must not change hands.
    pub skipped_links: usize,
}

/// Hands the existing tree at `root` to `owner`: every entry beneath it not
/// already owned by it, then the root itself.
///
/// A cheap no-op (one `fstat`) when the root already belongs to `owner`: a
/// tree is adopted once, and a [`Tree`](super::Tree) with the same owner
/// gives it everything it creates afterwards. The root is given last, so an
/// adoption cut short is taken up again by the next call.
///
/// Never follows a symlink: the root is opened with `O_NOFOLLOW`, each
/// entry is opened by name beneath its directory's descriptor with
/// `O_PATH | O_NOFOLLOW` (a symlink is changed itself, never its target)
/// and changed through that same descriptor (`fchownat(fd, "",
/// AT_EMPTY_PATH)`), so what is judged is what is changed even if the name
/// is swapped meanwhile. A file with other hard links is left alone (see
/// [`Adopted::skipped_links`]), and nothing on another filesystem is
/// entered. Blocking: call it from the blocking pool.
pub fn adopt(root: &Path, owner: Owner) -> Result<Adopted, WorkspaceError> {
    let fail = |action, e: rustix::io::Errno| WorkspaceError::io(action, root, e.into());
    let root_fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail("open", e))?;
    let root_stat = rustix::fs::fstat(&root_fd).map_err(|e| fail("inspect", e))?;
    if owner.owns(&root_stat) {
        return Ok(Adopted::default());
    }
    let mut adopted = Adopted::default();
    // One open directory per level being walked.
    let reader = rustix::fs::Dir::read_from(&root_fd).map_err(|e| fail("list", e))?;
    let mut stack: Vec<rustix::fs::Dir> = vec![reader];
    while let Some(dir) = stack.last_mut() {
        let Some(entry) = dir.next() else {
            stack.pop();
            continue;
        };
        let entry = entry.map_err(|e| fail("list", e))?;
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        let parent = dir.fd().map_err(|e| fail("list", e))?;
        let Some(child) = adopt_entry(parent, name, owner, root_stat.st_dev, &mut adopted)
            .map_err(|e| WorkspaceError::io("adopt an entry of", root, e))?
        else {
            continue;
        };
        if stack.len() >= ADOPT_MAX_DEPTH {
            return Err(WorkspaceError::io(
                "adopt",
                root,
                io::Error::other(format!(
                    "the tree is nested deeper than {ADOPT_MAX_DEPTH} directories"
                )),
            ));
        }
        stack.push(rustix::fs::Dir::new(child).map_err(|e| fail("list", e))?);
    }
    owner
        .give(&root_fd)
        .map_err(|e| WorkspaceError::io("give", root, e))?;
    adopted.given += 1;
    Ok(adopted)
}

/// Gives the entry `name` of the directory `parent` to `owner` (when it is
/// not already its own); returns the entry opened for reading when it is a
/// directory to walk.
fn adopt_entry(
    parent: impl AsFd,
    name: &CStr,
    owner: Owner,
    dev: u64,
    adopted: &mut Adopted,
) -> io::Result<Option<OwnedFd>> {
    let fd = match rustix::fs::openat(
        &parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // Removed since it was listed: nothing to give.
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    if stat.st_dev != dev {
        return Ok(None);
    }
    let kind = FileType::from_raw_mode(stat.st_mode);
    let is_dir = kind == FileType::Directory;
    if !is_dir && kind != FileType::Symlink && stat.st_nlink > 1 {
        adopted.skipped_links += 1;
        return Ok(None);
    }
    if !owner.owns(&stat) {
        owner.give(&fd)?;
        adopted.given += 1;
    }
    if !is_dir {
        return Ok(None);
    }
    // Opened through the descriptor just judged, so it is that directory.
    let dir = rustix::fs::openat(
        &fd,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(Some(dir))
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    const OWNER: Owner = Owner {
        uid: 4242,
        gid: 4343,
    };

    fn owner_of(path: &Path) -> (u32, u32) {
        let meta = std::fs::symlink_metadata(path).unwrap();
        (meta.uid(), meta.gid())
    }

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    fn adopt_gives_every_entry_and_never_follows_a_link() {
        if !is_root() {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tree");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), "x").unwrap();
        std::fs::write(root.join("top"), "x").unwrap();
        // Outside the tree, owned by root: reached only through links.
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "secret").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("a/up")).unwrap();
        // A hard link to a file outside: left alone.
        let linked = tmp.path().join("linked");
        std::fs::write(&linked, "secret").unwrap();
        std::fs::hard_link(&linked, root.join("hard")).unwrap();

        let adopted = adopt(&root, OWNER).unwrap();
        for rel in ["", "a", "a/b", "a/b/file", "top", "link", "a/up"] {
            assert_eq!(owner_of(&root.join(rel)), (4242, 4343), "{rel:?}");
        }
        assert_eq!(adopted.given, 7);
        assert_eq!(adopted.skipped_links, 1);
        for outside in [&outside, &linked, &tmp.path().to_path_buf()] {
            assert_eq!(owner_of(outside), (0, 0), "{}", outside.display());
        }

        // Adopted once: a second call looks at the root only.
        std::fs::write(root.join("later"), "x").unwrap();
        assert_eq!(adopt(&root, OWNER).unwrap(), Adopted::default());
        assert_eq!(owner_of(&root.join("later")), (0, 0));
    }

    #[test]
    fn adopt_refuses_a_root_that_is_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("alias")).unwrap();
        let err = adopt(&tmp.path().join("alias"), OWNER).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Io { action: "open", .. }),
            "{err:?}"
        );
    }
}
