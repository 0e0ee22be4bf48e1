//! The read-only view: a mount namespace in which everything but the
//! program's write grants is mounted read-only.
//!
//! Landlock mediates reading and writing files, not their metadata: a
//! program may `chmod`, `chown`, `utime` and `setxattr` whatever its uid
//! owns, wherever it is. A read-only mount refuses all of those (`EROFS`)
//! whoever owns the file, so in the view a program changes nothing outside
//! its workspace and temp dir: not the server user's other files when the
//! server is an ordinary user, and not another session's workspace when
//! every session's files belong to the one sandbox user.
//!
//! The view is built per call, in stage 2, before the privileges go: the
//! write grants are bind-mounted onto themselves (so each is a mount of its
//! own, writable, `nosuid` and `nodev`), then every other mount of the new
//! namespace is remounted read-only, keeping its other flags (which the
//! kernel locks when the namespace belongs to an unprivileged user). Mounts
//! of the host that appear later do not propagate in. Nothing is
//! unmounted or hidden: what may be read is still Landlock's to decide.

use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags};

/// Enters a new mount namespace whose mounts are read-only but for the
/// `write` grants (those that exist). Returns whether `/proc` is now a
/// procfs of this process's own PID namespace (see [`fresh_proc`]).
pub(crate) fn enter(write: &[PathBuf]) -> Result<bool, String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot make a mount namespace: {e}"))?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    let mut writable = Vec::new();
    for path in write {
        // A grant that does not exist is skipped, as Landlock skips it.
        let Ok(path) = path.canonicalize() else {
            continue;
        };
        rustix::mount::mount_bind_recursive(&path, &path)
            .map_err(|e| format!("cannot mount {} writable: {e}", path.display()))?;
        writable.push(path);
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read the mount table: {e}"))?;
    for mount in parse(&mountinfo) {
        if writable.iter().any(|w| mount.point.starts_with(w)) {
            continue;
        }
        if mount.flags.contains(MountFlags::RDONLY) {
            continue;
        }
        let flags = MountFlags::BIND | MountFlags::RDONLY | mount.flags;
        if let Err(e) = rustix::mount::mount_remount(&mount.point, flags, "") {
            // A mount this process cannot even look up (a FUSE mount of
            // another user) cannot be reached by the program either.
            if !matches!(
                e,
                rustix::io::Errno::ACCESS | rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR
            ) {
                return Err(format!(
                    "cannot make {} read-only: {e}",
                    mount.point.display()
                ));
            }
        }
    }
    for path in &writable {
        // Keep what the bind took from its source (read-only stays so),
        // and make files there unable to raise privileges or be devices.
        let kept = mount_flags(path).unwrap_or_else(MountFlags::empty);
        let flags = MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV | kept;
        rustix::mount::mount_remount(path, flags, "")
            .map_err(|e| format!("cannot restrict {}: {e}", path.display()))?;
    }
    Ok(fresh_proc())
}

/// Mounts a procfs of this process's PID namespace over `/proc`, read-only,
/// so the program sees its own call's processes and no other: not the
/// server's, not other calls', not their command lines. Best effort: where
/// the kernel refuses (a container that masks parts of `/proc`), the
/// machine's `/proc` stays, read-only, and Landlock still refuses the
/// ptrace-guarded files of processes outside the sandbox.
fn fresh_proc() -> bool {
    let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC | MountFlags::RDONLY;
    rustix::mount::mount("proc", "/proc", "proc", flags, None).is_ok()
}

/// True when the root of this process's view is read-only.
pub(crate) fn holds() -> bool {
    mount_flags(Path::new("/")).is_some_and(|f| f.contains(MountFlags::RDONLY))
}

/// The per-mount flags of the mount `path` is on, as a remount must
/// repeat them.
fn mount_flags(path: &Path) -> Option<MountFlags> {
    use rustix::fs::StatVfsMountFlags as S;
    let stat = rustix::fs::statvfs(path).ok()?;
    let mut flags = MountFlags::empty();
    for (from, to) in [
        (S::RDONLY, MountFlags::RDONLY),
        (S::NOSUID, MountFlags::NOSUID),
        (S::NODEV, MountFlags::NODEV),
        (S::NOEXEC, MountFlags::NOEXEC),
        (S::NOATIME, MountFlags::NOATIME),
        (S::NODIRATIME, MountFlags::NODIRATIME),
        (S::RELATIME, MountFlags::RELATIME),
    ] {
        if stat.f_flag.contains(from) {
            flags |= to;
        }
    }
    if !stat.f_flag.intersects(S::NOATIME | S::RELATIME) {
        flags |= MountFlags::STRICTATIME;
    }
    Some(flags)
}

/// One line of `/proc/self/mountinfo`: the mount point and the per-mount
/// flags a remount must repeat.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    flags: MountFlags,
}

/// The mounts of a mount table, in its order.
fn parse(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let options = fields.next()?;
            let mut flags = MountFlags::empty();
            let mut atime = false;
            for option in options.split(',') {
                flags |= match option {
                    "ro" => MountFlags::RDONLY,
                    "nosuid" => MountFlags::NOSUID,
                    "nodev" => MountFlags::NODEV,
                    "noexec" => MountFlags::NOEXEC,
                    "noatime" => MountFlags::NOATIME,
                    "nodiratime" => MountFlags::NODIRATIME,
                    "relatime" => MountFlags::RELATIME,
                    "nosymfollow" => MountFlags::NOSYMFOLLOW,
                    _ => MountFlags::empty(),
                };
                atime |= matches!(option, "noatime" | "relatime");
            }
            // Neither means strict atime, which a remount must say, or the
            // kernel reads it as a change (refused on a locked mount).
            if !atime {
                flags |= MountFlags::STRICTATIME;
            }
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                flags,
            })
        })
        .collect()
}

/// A mount point as the kernel escapes it: space, tab, newline and
/// backslash as three octal digits.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = bytes
                .get(i + 1..i + 4)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_table_is_read_with_its_flags_and_escapes() {
        let table = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:5 / /dev rw,nosuid,noexec shared:2 - devtmpfs udev rw
24 22 0:6 / /mnt/my\\040disk ro,nodev,noatime - ext4 /dev/sdb rw
";
        let mounts = parse(table);
        assert_eq!(
            mounts,
            [
                Mount {
                    point: "/".into(),
                    flags: MountFlags::RELATIME,
                },
                Mount {
                    point: "/dev".into(),
                    flags: MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::STRICTATIME,
                },
                Mount {
                    point: "/mnt/my disk".into(),
                    flags: MountFlags::RDONLY | MountFlags::NODEV | MountFlags::NOATIME,
                },
            ]
        );
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
    }
}
