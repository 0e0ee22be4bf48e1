//! [`Tree`]: a directory tree a tool may write, opened once as a directory
//! handle, and every file operation the server does in it resolved beneath
//! that handle.
//!
//! A tool that can write its workspace can put a symlink where a file was
//! at any moment, so no answer about a path ("it stays inside", "it is a
//! file") holds by the time the path is opened. Here nothing is checked
//! first and opened after: each operation opens its path relative to the
//! root's descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! (through cap-std, which walks component by component with `O_NOFOLLOW`
//! where the kernel has no `openat2`), so the kernel refuses any step out
//! of the tree at the moment of the open; and what is judged afterwards
//! (regular file or not) is the opened descriptor, never the name.
//!
//! The rules:
//! - the root is opened with `O_DIRECTORY | O_NOFOLLOW`;
//! - a symlink inside the tree is followed while every step stays beneath
//!   the root; an absolute link, one that climbs out, a magic link
//!   (`/proc/self/fd/...`), a loop and, for writes, a dangling link are
//!   refused as [`WorkspaceError::Escapes`];
//! - files are opened with `O_NONBLOCK | O_NOCTTY`, so a FIFO never blocks
//!   the opening thread, and the descriptor is `fstat`ed: a FIFO, a socket
//!   or a device is refused as [`WorkspaceError::NotAFile`], a directory
//!   as an `EISDIR` I/O error;
//! - writes open without `O_TRUNC` (a FIFO without a reader answers `ENXIO`,
//!   reported as a FIFO), check the descriptor, and only then truncate and
//!   write; parent directories are created beneath the handle;
//! - listing ([`Folder`]) reports symlinks as they are and enters a
//!   subdirectory only with `O_NOFOLLOW`; deleting unlinks beneath the
//!   handle, removing a link itself rather than its target;
//! - with an [`Owner`], every file and directory the tree creates is given
//!   to it (`fchown` of the new descriptor).
//!
//! Every method blocks: call them from the blocking pool, through
//! [`TreeRoot`](super::TreeRoot).

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt as _, OpenOptionsSyncExt as _};
use cap_std::fs::{Dir, FileTypeExt as _, OpenOptions, OpenOptionsExt as _};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::error::{Access, SpecialKind, WorkspaceError};
use super::owner::Owner;
use super::path::Rel;

/// What a name in a tree is, without following a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by a listing).
    Symlink,
    /// A FIFO, socket or device.
    Special(SpecialKind),
}

impl Kind {
    fn of_std(t: std::fs::FileType) -> Self {
        if t.is_file() {
            Kind::File
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_symlink() {
            Kind::Symlink
        } else if t.is_fifo() {
            Kind::Special(SpecialKind::Fifo)
        } else if t.is_socket() {
            Kind::Special(SpecialKind::Socket)
        } else if t.is_char_device() {
            Kind::Special(SpecialKind::CharDevice)
        } else if t.is_block_device() {
            Kind::Special(SpecialKind::BlockDevice)
        } else {
            Kind::Special(SpecialKind::Other)
        }
    }

    fn of_cap(t: cap_std::fs::FileType) -> Self {
        if t.is_file() {
            Kind::File
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_symlink() {
            Kind::Symlink
        } else if t.is_fifo() {
            Kind::Special(SpecialKind::Fifo)
        } else if t.is_socket() {
            Kind::Special(SpecialKind::Socket)
        } else if t.is_char_device() {
            Kind::Special(SpecialKind::CharDevice)
        } else if t.is_block_device() {
            Kind::Special(SpecialKind::BlockDevice)
        } else {
            Kind::Special(SpecialKind::Other)
        }
    }
}

/// An open directory tree; see the module documentation for its rules.
#[derive(Debug)]
pub struct Tree {
    dir: Dir,
    root: PathBuf,
    owner: Option<Owner>,
}

impl Tree {
    /// Opens the existing directory at `root` (`O_DIRECTORY | O_NOFOLLOW`:
    /// a root that is itself a symlink is refused).
    pub fn open(root: &Path, owner: Option<Owner>) -> Result<Self, WorkspaceError> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| WorkspaceError::io("open", root, e.into()))?;
        Ok(Tree {
            dir: Dir::from_std_file(std::fs::File::from(fd)),
            root: root.to_path_buf(),
            owner,
        })
    }

    /// Opens the directory at `root`, creating it (and its parents, which
    /// are the server's own) first when it is missing. A root it creates is
    /// given to `owner`.
    pub fn create(root: &Path, owner: Option<Owner>) -> Result<Self, WorkspaceError> {
        let failed = |e| WorkspaceError::io("create directory", root, e);
        let created = match std::fs::create_dir(root) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = root.parent() {
                    std::fs::create_dir_all(parent).map_err(failed)?;
                }
                match std::fs::create_dir(root) {
                    Ok(()) => true,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                    Err(e) => return Err(failed(e)),
                }
            }
            Err(e) => return Err(failed(e)),
        };
        let tree = Self::open(root, owner)?;
        if created && let Some(owner) = owner {
            owner
                .give(&tree.dir)
                .map_err(|e| WorkspaceError::io("give", root, e))?;
        }
        Ok(tree)
    }

    /// Removes the whole tree at `root`, the root included. std's
    /// `remove_dir_all` never follows a symlink on Linux (it walks with
    /// `openat(O_NOFOLLOW)` and `unlinkat` from each directory's descriptor,
    /// the fix of CVE-2022-21658), so a link a tool left inside is removed,
    /// not what it names.
    pub fn remove(root: &Path) -> Result<(), WorkspaceError> {
        std::fs::remove_dir_all(root).map_err(|e| WorkspaceError::io("remove", root, e))
    }

    /// The root's path, for messages.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `rel` is, for messages.
    fn shown(&self, rel: &Rel) -> PathBuf {
        let mut path = self.root.clone();
        path.push(rel.normalized());
        path
    }

    /// Opens the regular file `rel` for reading: the descriptor and what
    /// its `fstat` said.
    pub fn open_file(
        &self,
        rel: &Rel,
    ) -> Result<(std::fs::File, std::fs::Metadata), WorkspaceError> {
        let mut options = OpenOptions::new();
        options.read(true);
        guard(&mut options);
        let file = self
            .dir
            .open_with(rel.path(), &options)
            .map_err(|e| self.failed(rel, "read", Access::Read, e))?
            .into_std();
        let meta = self.regular(rel, &file, "read", Access::Read)?;
        Ok((file, meta))
    }

    /// Reads the regular file `rel` whole when it holds at most `max`
    /// bytes; `None` when it holds more (nothing more than `max + 1` bytes
    /// is read).
    pub fn read(&self, rel: &Rel, max: u64) -> Result<Option<Vec<u8>>, WorkspaceError> {
        let (file, meta) = self.open_file(rel)?;
        if meta.len() > max {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| WorkspaceError::io("read", &self.shown(rel), e))?;
        Ok((bytes.len() as u64 <= max).then_some(bytes))
    }

    /// Creates or replaces the regular file `rel` with `bytes`, creating
    /// its parent directories.
    pub fn write(&self, rel: &Rel, bytes: &[u8]) -> Result<(), WorkspaceError> {
        self.write_with_mode(rel, bytes, None)
    }

    /// [`Tree::write`], then sets the file's permission bits to `mode` when
    /// given.
    pub fn write_with_mode(
        &self,
        rel: &Rel,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> Result<(), WorkspaceError> {
        if rel.is_root() {
            return Err(WorkspaceError::io("write", &self.root, Errno::ISDIR.into()));
        }
        if let Some(parent) = rel.parent() {
            self.create_dir_all(&parent)?;
        }
        let mut file = self.open_for_write(rel)?;
        let shown = || self.shown(rel);
        file.set_len(0)
            .map_err(|e| WorkspaceError::io("write", &shown(), e))?;
        file.write_all(bytes)
            .map_err(|e| WorkspaceError::io("write", &shown(), e))?;
        if let Some(mode) = mode {
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| WorkspaceError::io("set permissions of", &shown(), e))?;
        }
        Ok(())
    }

    /// Opens `rel` for writing, creating it when it is not there; the new
    /// file is given to the owner. Never truncates: that waits until the
    /// descriptor is known to be a regular file.
    fn open_for_write(&self, rel: &Rel) -> Result<std::fs::File, WorkspaceError> {
        let fail = |e| self.failed(rel, "write", Access::Write, e);
        // Creating with O_EXCL tells a new file (ours to give away) from an
        // existing one, and never follows a symlink in the last place. A name
        // that exists but cannot be opened (deleted in between, or a dangling
        // link) is tried again a few times, then refused.
        for _ in 0..3 {
            let mut create = OpenOptions::new();
            create.write(true).create_new(true);
            guard(&mut create);
            match self.dir.open_with(rel.path(), &create) {
                Ok(file) => {
                    let file = file.into_std();
                    self.regular(rel, &file, "write", Access::Write)?;
                    if let Some(owner) = self.owner {
                        owner
                            .give(&file)
                            .map_err(|e| WorkspaceError::io("give", &self.shown(rel), e))?;
                    }
                    return Ok(file);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(fail(e)),
            }
            let mut existing = OpenOptions::new();
            existing.write(true);
            guard(&mut existing);
            match self.dir.open_with(rel.path(), &existing) {
                Ok(file) => {
                    let file = file.into_std();
                    self.regular(rel, &file, "write", Access::Write)?;
                    return Ok(file);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Err(WorkspaceError::Escapes {
            path: rel.given().to_owned(),
        })
    }

    /// Creates the directory `rel` and the missing ones above it, each
    /// resolved from the root (a link to a directory inside the tree is
    /// followed, one that leads out is refused). Directories it creates are
    /// given to the owner.
    pub fn create_dir_all(&self, rel: &Rel) -> Result<(), WorkspaceError> {
        for prefix in rel.prefixes() {
            match self.dir.create_dir(&prefix) {
                Ok(()) => self.give_dir(&prefix)?,
                // A directory, a link to one or something else: the next
                // step (or the open after the loop) judges what it is.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    let dir = Rel::parse(&prefix.to_string_lossy()).unwrap_or_else(|_| rel.clone());
                    return Err(self.failed_as(rel, &dir, "create directory", Access::Write, e));
                }
            }
        }
        Ok(())
    }

    /// Gives a directory this tree just made to the owner. One swapped for
    /// something else in between is not ours: left alone.
    fn give_dir(&self, prefix: &Path) -> Result<(), WorkspaceError> {
        let Some(owner) = self.owner else {
            return Ok(());
        };
        let Ok(dir) = self.dir.open_dir_nofollow(prefix) else {
            return Ok(());
        };
        owner
            .give(&dir)
            .map_err(|e| WorkspaceError::io("give", &self.root.join(prefix), e))
    }

    /// What `rel` is, not following a symlink in the last place.
    pub fn kind(&self, rel: &Rel) -> Result<Kind, WorkspaceError> {
        let meta = self
            .dir
            .symlink_metadata(rel.path())
            .map_err(|e| self.failed(rel, "inspect", Access::Read, e))?;
        Ok(Kind::of_cap(meta.file_type()))
    }

    /// True when something (a link included) is at `rel`.
    pub fn exists(&self, rel: &Rel) -> Result<bool, WorkspaceError> {
        match self.kind(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes the file (or symlink, or special file) `rel`; a directory is
    /// refused with an `EISDIR` I/O error.
    pub fn remove_file(&self, rel: &Rel) -> Result<(), WorkspaceError> {
        if rel.is_root() {
            return Err(WorkspaceError::io(
                "delete",
                &self.root,
                Errno::ISDIR.into(),
            ));
        }
        self.dir.remove_file(rel.path()).map_err(|e| {
            // Linux answers EISDIR; some systems answer EPERM.
            if self.kind(rel).is_ok_and(|k| k == Kind::Dir) {
                WorkspaceError::io("delete", &self.shown(rel), Errno::ISDIR.into())
            } else {
                self.failed(rel, "delete", Access::Write, e)
            }
        })
    }

    /// Opens the directory `rel` for listing (following links beneath the
    /// root, like any path); anything else is an `ENOTDIR` I/O error.
    pub fn dir(&self, rel: &Rel) -> Result<Folder, WorkspaceError> {
        let dir = if rel.is_root() {
            self.dir.try_clone()
        } else {
            self.dir.open_dir(rel.path())
        }
        .map_err(|e| self.failed(rel, "list", Access::Read, e))?;
        Ok(Folder { dir })
    }

    /// Refuses `rel` as [`WorkspaceError::Escapes`] when the part of it that
    /// exists now leads out of the tree (or ends in a dangling link), so a
    /// batch of writes can be refused before the first one. Only a courtesy:
    /// the writes themselves open beneath the root whatever happens in
    /// between.
    pub fn check_beneath(&self, rel: &Rel) -> Result<(), WorkspaceError> {
        let mut probe = Some(rel.clone());
        while let Some(at) = probe {
            match self.dir.metadata(at.path()) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A name that is there but leads nowhere is a dangling
                    // link: a write through it would land who knows where.
                    if !at.is_root() && self.dir.symlink_metadata(at.path()).is_ok() {
                        return Err(WorkspaceError::Escapes {
                            path: rel.given().to_owned(),
                        });
                    }
                    probe = at.parent();
                }
                Err(e) if is_escape(&e) => {
                    return Err(WorkspaceError::Escapes {
                        path: rel.given().to_owned(),
                    });
                }
                // A file where a directory is wanted and the like: the write
                // reports it.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Checks that the opened `file` is a regular file.
    fn regular(
        &self,
        rel: &Rel,
        file: &std::fs::File,
        action: &'static str,
        access: Access,
    ) -> Result<std::fs::Metadata, WorkspaceError> {
        let meta = file
            .metadata()
            .map_err(|e| WorkspaceError::io(action, &self.shown(rel), e))?;
        match Kind::of_std(meta.file_type()) {
            Kind::File => Ok(meta),
            Kind::Dir => Err(WorkspaceError::io(
                action,
                &self.shown(rel),
                Errno::ISDIR.into(),
            )),
            Kind::Special(kind) => Err(not_a_file(rel, kind, access)),
            // An open descriptor is never a link.
            Kind::Symlink => Err(WorkspaceError::Escapes {
                path: rel.given().to_owned(),
            }),
        }
    }

    fn failed(
        &self,
        rel: &Rel,
        action: &'static str,
        access: Access,
        e: io::Error,
    ) -> WorkspaceError {
        self.failed_as(rel, rel, action, access, e)
    }

    /// The error for `e`, met while doing `action` to `at` on the way to
    /// `rel` (the path the caller gave, which messages name).
    fn failed_as(
        &self,
        rel: &Rel,
        at: &Rel,
        action: &'static str,
        access: Access,
        e: io::Error,
    ) -> WorkspaceError {
        if is_escape(&e) {
            return WorkspaceError::Escapes {
                path: rel.given().to_owned(),
            };
        }
        // Opening a socket answers ENXIO, and so does a FIFO opened for
        // writing with no reader; a device without a driver answers ENXIO
        // or ENODEV. Say which it is.
        if matches!(
            Errno::from_io_error(&e),
            Some(Errno::NXIO | Errno::NODEV | Errno::OPNOTSUPP)
        ) && let Ok(meta) = self.dir.metadata(at.path())
            && let Kind::Special(kind) = Kind::of_cap(meta.file_type())
        {
            return not_a_file(rel, kind, access);
        }
        WorkspaceError::io(action, &self.shown(at), e)
    }
}

fn not_a_file(rel: &Rel, kind: SpecialKind, access: Access) -> WorkspaceError {
    WorkspaceError::NotAFile {
        path: rel.given().to_owned(),
        kind,
        access,
    }
}

/// The flags every file open of a tree carries: `O_NONBLOCK`, so opening a
/// FIFO returns at once (reading) or fails with `ENXIO` (writing, no
/// reader) instead of holding the thread until the other end opens; and
/// `O_NOCTTY`, so a terminal device never becomes the server's.
fn guard(options: &mut OpenOptions) {
    options.nonblock(true);
    options.custom_flags(OFlags::NOCTTY.bits() as i32);
}

/// True when `e` says the path would have left the tree. cap-std reports
/// that (the kernel's `EXDEV` under `RESOLVE_BENEATH`, or its own walk's
/// verdict) as `PermissionDenied` without an OS error code; a symlink loop
/// or a link where `O_NOFOLLOW` forbids one is `ELOOP`.
fn is_escape(e: &io::Error) -> bool {
    (e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none())
        || matches!(Errno::from_io_error(e), Some(Errno::XDEV | Errno::LOOP))
}

/// An open directory of a tree, for listing.
#[derive(Debug)]
pub struct Folder {
    dir: Dir,
}

/// One entry of a [`Folder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name.
    pub name: OsString,
    /// What it is, not following a symlink.
    pub kind: Kind,
}

impl Folder {
    /// The entries, in the order the directory yields them; symlinks are
    /// reported as [`Kind::Symlink`], never followed.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for entry in self.dir.entries()? {
            let entry = entry?;
            let kind = Kind::of_cap(entry.file_type()?);
            out.push(Entry {
                name: entry.file_name(),
                kind,
            });
        }
        Ok(out)
    }

    /// The subdirectory `name`, opened with `O_NOFOLLOW`: a symlink (or
    /// anything else that is not a directory) is an error.
    pub fn child(&self, name: &std::ffi::OsStr) -> io::Result<Folder> {
        Ok(Folder {
            dir: self.dir.open_dir_nofollow(name)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A tree `ws` beside a directory `outside` holding a secret.
    struct Fixture {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    const SECRET: &str = "the-secret-outside-the-tree";

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(ws.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), SECRET).unwrap();
        std::fs::write(ws.join("real/file.txt"), "inside").unwrap();
        Fixture {
            _tmp: tmp,
            ws,
            outside,
        }
    }

    fn rel(s: &str) -> Rel {
        Rel::parse(s).unwrap()
    }

    fn escapes(result: Result<impl std::fmt::Debug, WorkspaceError>) -> bool {
        matches!(result, Err(WorkspaceError::Escapes { .. }))
    }

    #[test]
    fn links_inside_are_followed_and_links_out_are_refused() {
        let f = fixture();
        let tree = Tree::open(&f.ws, None).unwrap();
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, f.ws.join(name)).unwrap()
        };
        link(Path::new("real/file.txt"), "relative-in");
        link(Path::new("real"), "dir-in");
        link(&f.outside.join("secret"), "absolute-out");
        link(Path::new("../outside/secret"), "climbs-out");
        link(Path::new("../outside"), "dir-out");
        link(Path::new("/proc/self/root/etc/hostname"), "magic");
        link(Path::new("loop"), "loop");
        link(Path::new("real/nothing-here"), "dangling");

        assert_eq!(
            tree.read(&rel("relative-in"), 100).unwrap().unwrap(),
            b"inside"
        );
        assert_eq!(
            tree.read(&rel("dir-in/file.txt"), 100).unwrap().unwrap(),
            b"inside"
        );
        for name in [
            "absolute-out",
            "climbs-out",
            "dir-out/secret",
            "magic",
            "loop",
        ] {
            assert!(escapes(tree.read(&rel(name), 100)), "read {name}");
            assert!(escapes(tree.write(&rel(name), b"x")), "write {name}");
        }
        assert!(escapes(tree.write(&rel("dir-out/new.txt"), b"x")));
        assert!(escapes(tree.create_dir_all(&rel("dir-out/deeper"))));
        // A dangling link is never written through.
        assert!(escapes(tree.write(&rel("dangling"), b"x")));
        assert!(!f.ws.join("real/nothing-here").exists());
        assert!(escapes(tree.dir(&rel("dir-out"))));
        assert!(escapes(tree.remove_file(&rel("dir-out/secret"))));
        assert!(escapes(tree.check_beneath(&rel("dir-out/new.txt"))));
        assert!(escapes(tree.check_beneath(&rel("dangling"))));
        tree.check_beneath(&rel("dir-in/new/deeper.txt")).unwrap();
        // Deleting a link removes the link, not what it names.
        tree.remove_file(&rel("absolute-out")).unwrap();
        assert!(f.ws.join("absolute-out").symlink_metadata().is_err());
        assert_eq!(
            std::fs::read_to_string(f.outside.join("secret")).unwrap(),
            SECRET
        );
        assert!(!f.outside.join("new.txt").exists());
        assert!(!f.outside.join("deeper").exists());
    }

    #[test]
    fn a_root_that_is_a_link_is_refused() {
        let f = fixture();
        let alias = f.ws.parent().unwrap().join("alias");
        std::os::unix::fs::symlink(&f.ws, &alias).unwrap();
        assert!(Tree::open(&alias, None).is_err());
        assert!(Tree::create(&alias, None).is_err());
    }

    #[test]
    fn writes_replace_create_parents_and_report_directories() {
        let f = fixture();
        let tree = Tree::create(&f.ws.join("new-root"), None).unwrap();
        tree.write(&rel("a/b/c.txt"), b"first, longer").unwrap();
        tree.write(&rel("a/b/c.txt"), b"second").unwrap();
        assert_eq!(
            tree.read(&rel("a/b/c.txt"), 100).unwrap().unwrap(),
            b"second"
        );
        assert_eq!(tree.read(&rel("a/b/c.txt"), 3).unwrap(), None);
        let err = tree.write(&rel("a/b"), b"x").unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::IsADirectory), "{err:?}");
        let err = tree.read(&rel("a"), 100).unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::IsADirectory), "{err:?}");
        let err = tree.remove_file(&rel("a")).unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::IsADirectory), "{err:?}");
        assert_eq!(tree.kind(&rel("a")).unwrap(), Kind::Dir);
        assert!(!tree.exists(&rel("missing")).unwrap());
        tree.write_with_mode(&rel("run.sh"), b"#!/bin/sh\n", Some(0o755))
            .unwrap();
        let mode = std::fs::metadata(tree.root().join("run.sh"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn special_files_are_refused_at_once_by_name() {
        let f = fixture();
        let tree = Tree::open(&f.ws, None).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            f.ws.join("pipe"),
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(f.ws.join("sock")).unwrap();
        let message = |r: Result<_, WorkspaceError>| match r {
            Err(e @ WorkspaceError::NotAFile { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        };
        // Nothing has the FIFO open: a blocking open would wait forever.
        assert_eq!(
            message(tree.read(&rel("pipe"), 100).map(|_| ())),
            "pipe is a FIFO (named pipe); only regular files can be read"
        );
        assert_eq!(
            message(tree.write(&rel("pipe"), b"x")),
            "pipe is a FIFO (named pipe); only regular files can be written"
        );
        // With a reader on the other end the write opens, and is refused
        // before a byte goes in.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(f.ws.join("pipe"))
            .unwrap();
        assert!(message(tree.write(&rel("pipe"), b"x")).contains("FIFO"));
        drop(reader);
        assert_eq!(
            message(tree.read(&rel("sock"), 100).map(|_| ())),
            "sock is a Unix socket; only regular files can be read"
        );
        assert!(message(tree.write(&rel("sock"), b"x")).contains("Unix socket"));
        assert_eq!(
            tree.kind(&rel("pipe")).unwrap(),
            Kind::Special(SpecialKind::Fifo)
        );

        // A device node: only root may make one (the machines that run
        // these tests run them as root).
        if rustix::process::geteuid().is_root() {
            // The numbers of /dev/zero.
            rustix::fs::mknodat(
                rustix::fs::CWD,
                f.ws.join("zero"),
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o666),
                rustix::fs::makedev(1, 5),
            )
            .unwrap();
            assert_eq!(
                message(tree.read(&rel("zero"), 100).map(|_| ())),
                "zero is a character device; only regular files can be read"
            );
            assert!(message(tree.write(&rel("zero"), b"x")).contains("character device"));
        }
    }

    #[test]
    fn listing_reports_links_and_never_enters_them() {
        let f = fixture();
        std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
        let tree = Tree::open(&f.ws, None).unwrap();
        let top = tree.dir(&Rel::root()).unwrap();
        let mut entries = top.entries().unwrap();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            entries,
            [
                Entry {
                    name: "out".into(),
                    kind: Kind::Symlink
                },
                Entry {
                    name: "real".into(),
                    kind: Kind::Dir
                },
            ]
        );
        assert!(top.child("out".as_ref()).is_err());
        let real = top.child("real".as_ref()).unwrap();
        assert_eq!(real.entries().unwrap().len(), 1);
        let err = tree.dir(&rel("real/file.txt")).unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::NotADirectory), "{err:?}");
    }

    /// A tool's race, in process: a file and a link to the secret swapped
    /// under one name as fast as a thread can, while the tree reads and
    /// writes that name. Nothing may ever read or change the secret.
    #[test]
    fn swapping_a_file_and_a_link_never_reaches_outside() {
        let f = fixture();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (ws, outside, stop) = (f.ws.clone(), f.outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let staged = ws.join(format!(".staged-{}", n % 2));
                    let _ = std::fs::remove_file(&staged);
                    if n.is_multiple_of(2) {
                        let _ = std::fs::write(&staged, "plain");
                    } else {
                        let _ = std::os::unix::fs::symlink(outside.join("secret"), &staged);
                    }
                    let _ = std::fs::rename(&staged, ws.join("swap"));
                    n += 1;
                }
            })
        };
        let tree = Tree::open(&f.ws, None).unwrap();
        let name = rel("swap");
        for _ in 0..3000 {
            if let Ok(Some(bytes)) = tree.read(&name, 1024) {
                assert_ne!(bytes, SECRET.as_bytes());
            }
            let _ = tree.write(&name, b"overwritten");
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(
            std::fs::read_to_string(f.outside.join("secret")).unwrap(),
            SECRET
        );
    }

    #[test]
    fn an_owner_gets_every_file_and_directory_the_tree_creates() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let f = fixture();
        let owner = Owner::new(4242, 4343);
        let root = f.ws.join("owned");
        let tree = Tree::create(&root, Some(owner)).unwrap();
        tree.write(&rel("a/b/new.txt"), b"x").unwrap();
        tree.create_dir_all(&rel("c/d")).unwrap();
        for made in ["", "a", "a/b", "a/b/new.txt", "c", "c/d"] {
            let meta = std::fs::metadata(root.join(made)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (4242, 4343), "{made:?}");
        }
        // What the tree only rewrites keeps its owner.
        let existing = f.ws.join("real/file.txt");
        let tree = Tree::open(&f.ws, Some(owner)).unwrap();
        tree.write(&rel("real/file.txt"), b"changed").unwrap();
        let meta = std::fs::metadata(&existing).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0));
        // Without an owner nothing changes hands.
        let plain = Tree::create(&f.ws.join("plain"), None).unwrap();
        plain.write(&rel("x/y.txt"), b"x").unwrap();
        let meta = std::fs::metadata(f.ws.join("plain/x/y.txt")).unwrap();
        assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());
    }
}
