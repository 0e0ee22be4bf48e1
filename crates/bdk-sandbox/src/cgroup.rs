//! Per-call cgroups: the memory and the processes of a whole call bounded
//! by the kernel, where the host lets this process make cgroups.
//!
//! The host side ([`prepare`], once per process) finds the hierarchies
//! this process may make children in and makes a directory for its calls
//! in each (`bdk-<pid>`): cgroup v1's `memory` and `pids` hierarchies, or
//! a cgroup v2 tree whose `memory` and `pids` controllers are delegated.
//! Per call, the supervisor makes `call-<pid>` there with the call's
//! limits (`CallGroup::create`), stage 2 joins it before it starts the
//! program, and when the call is over the supervisor reads which limit was
//! hit, kills whatever is left in it and removes it.
//!
//! On cgroup v2 a cgroup that holds processes cannot hand controllers to
//! children, so [`prepare`] moves this process into a child of its own
//! cgroup (`bdk-<pid>/server`) first: that is what a service manager's
//! delegation (`Delegate=yes`) expects. It is the one change to this
//! process's state the crate makes, and only when a caller asks for it.

use std::path::{Path, PathBuf};

use crate::protocol::{CgroupDirs, Limits};

/// The controllers limits need.
const CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// Finds where this process may make per-call cgroups and makes its
/// directory in each: what a sandbox's calls use (empty when no hierarchy
/// is usable, as for an ordinary user without delegation). Removes the
/// directories of processes that no longer run, left by a crash.
pub fn prepare() -> CgroupDirs {
    let (Ok(membership), Ok(mountinfo)) = (
        std::fs::read_to_string("/proc/self/cgroup"),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return CgroupDirs::default();
    };
    let own = format!("bdk-{}", std::process::id());
    let mut dirs = CgroupDirs::default();
    for mount in mounts(&mountinfo) {
        match &mount.kind {
            Kind::V1(controllers) => {
                for controller in CONTROLLERS {
                    if !controllers.iter().any(|c| c == controller) {
                        continue;
                    }
                    let Some(path) = v1_path(&membership, controller) else {
                        continue;
                    };
                    let parent = join(&mount.point, &path);
                    sweep(&parent);
                    let dir = parent.join(&own);
                    if std::fs::create_dir(&dir).is_ok() || dir.is_dir() {
                        match controller {
                            "memory" => dirs.memory = Some(dir),
                            _ => dirs.pids = Some(dir),
                        }
                    }
                }
            }
            Kind::V2 => {
                if dirs.unified.is_some() {
                    continue;
                }
                let Some(path) = v2_path(&membership) else {
                    continue;
                };
                let parent = join(&mount.point, &path);
                sweep(&parent);
                dirs.unified = delegate(&parent, &own);
            }
        }
    }
    // A v1 controller also bound to v2 is not there: v2 is used only for
    // what v1 lacks, and one hierarchy per controller is enough.
    dirs
}

/// Removes what [`prepare`] made (once no call runs any more), as a
/// server does when it stops.
pub fn release(dirs: &CgroupDirs) {
    for dir in [&dirs.memory, &dirs.pids].into_iter().flatten() {
        remove_tree(dir);
    }
    // On v2 this process lives in `bdk-<pid>/server`: only the calls' part
    // can go while it runs; the rest goes with the next `prepare` after it
    // has exited.
    if let Some(calls) = &dirs.unified {
        remove_tree(calls);
    }
}

/// On cgroup v2: makes `parent/own` with the memory and pids controllers
/// handed down to its children, moving this process out of `parent` into
/// `parent/own/server` when `parent` must stop holding processes first.
fn delegate(parent: &Path, own: &str) -> Option<PathBuf> {
    let available = std::fs::read_to_string(parent.join("cgroup.controllers")).ok()?;
    if !CONTROLLERS
        .iter()
        .all(|c| available.split_whitespace().any(|a| a == *c))
    {
        return None;
    }
    let dir = parent.join(own);
    if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
        return None;
    }
    let enable = "+memory +pids";
    let control = parent.join("cgroup.subtree_control");
    if std::fs::write(&control, enable).is_err() {
        // `parent` holds processes (this one): move it into a leaf.
        let server = dir.join("server");
        let _ = std::fs::create_dir(&server);
        let moved = std::fs::write(server.join("cgroup.procs"), "0");
        if moved.is_err() || std::fs::write(&control, enable).is_err() {
            return None;
        }
    }
    let calls = dir.join("calls");
    if std::fs::create_dir(&calls).is_err() && !calls.is_dir() {
        return None;
    }
    std::fs::write(dir.join("cgroup.subtree_control"), enable).ok()?;
    std::fs::write(calls.join("cgroup.subtree_control"), enable).ok()?;
    Some(calls)
}

/// Removes the `bdk-<pid>` directories under `parent` whose process is
/// gone (and their emptied call groups).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("bdk-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        remove_tree(&entry.path());
    }
}

/// Removes a cgroup directory and the cgroups below it, deepest first
/// (a cgroup directory holds only control files, which go with it).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// `mount` + `path` for a cgroup path that starts with `/`.
fn join(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

/// This process's path in the v1 hierarchy of `controller`.
fn v1_path(membership: &str, controller: &str) -> Option<String> {
    membership.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let _id = fields.next()?;
        let controllers = fields.next()?;
        let path = fields.next()?;
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })
}

/// This process's path in the v2 hierarchy.
fn v2_path(membership: &str) -> Option<String> {
    membership
        .lines()
        .find_map(|line| line.strip_prefix("0::").map(str::to_owned))
}

enum Kind {
    /// A v1 hierarchy with these controllers.
    V1(Vec<String>),
    V2,
}

struct CgroupMount {
    point: PathBuf,
    kind: Kind,
}

/// The cgroup mounts of a mount table.
fn mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = head.split(' ').nth(4)?;
            let mut tail = tail.split(' ');
            let fstype = tail.next()?;
            let _source = tail.next()?;
            let options = tail.next().unwrap_or("");
            let kind = match fstype {
                "cgroup2" => Kind::V2,
                "cgroup" => Kind::V1(options.split(',').map(str::to_owned).collect()),
                _ => return None,
            };
            Some(CgroupMount {
                point: PathBuf::from(point),
                kind,
            })
        })
        .collect()
}

/// The cgroup of one call: a directory per hierarchy, removed on drop.
#[derive(Debug)]
pub(crate) struct CallGroup {
    dirs: Vec<(Hierarchy, PathBuf)>,
    limits: Limits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    Unified,
    Memory,
    Pids,
}

impl CallGroup {
    /// Makes the call's cgroup `name` under `dirs` with `limits`. `None`
    /// when no hierarchy applies (none usable, or no memory or process
    /// limit asked for).
    pub(crate) fn create(
        dirs: &CgroupDirs,
        limits: &Limits,
        name: &str,
    ) -> Result<Option<Self>, String> {
        let mut wanted = Vec::new();
        if let Some(base) = &dirs.unified
            && (limits.memory_bytes.is_some() || limits.processes.is_some())
        {
            wanted.push((Hierarchy::Unified, base));
        } else {
            if let (Some(base), Some(_)) = (&dirs.memory, limits.memory_bytes) {
                wanted.push((Hierarchy::Memory, base));
            }
            if let (Some(base), Some(_)) = (&dirs.pids, limits.processes) {
                wanted.push((Hierarchy::Pids, base));
            }
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        let mut group = CallGroup {
            dirs: Vec::new(),
            limits: *limits,
        };
        for (hierarchy, base) in wanted {
            let dir = base.join(name);
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot make the call's cgroup {}: {e}", dir.display()))?;
            group.dirs.push((hierarchy, dir.clone()));
            let write = |file: &str, value: String| {
                std::fs::write(dir.join(file), value)
                    .map_err(|e| format!("cannot set {}/{file}: {e}", dir.display()))
            };
            match hierarchy {
                Hierarchy::Unified => {
                    if let Some(bytes) = limits.memory_bytes {
                        write("memory.max", bytes.to_string())?;
                        // No swap beyond the limit, where swap is
                        // accounted.
                        let _ = write("memory.swap.max", "0".to_owned());
                    }
                    if let Some(count) = limits.processes {
                        write("pids.max", count.to_string())?;
                    }
                }
                Hierarchy::Memory => {
                    if let Some(bytes) = limits.memory_bytes {
                        write("memory.limit_in_bytes", bytes.to_string())?;
                        let _ = write("memory.memsw.limit_in_bytes", bytes.to_string());
                    }
                }
                Hierarchy::Pids => {
                    if let Some(count) = limits.processes {
                        write("pids.max", count.to_string())?;
                    }
                }
            }
        }
        Ok(Some(group))
    }

    /// Moves this process into the call's cgroup (in every hierarchy).
    pub(crate) fn join(&self) -> Result<(), String> {
        for (_, dir) in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), "0")
                .map_err(|e| format!("cannot join the call's cgroup {}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Whether the cgroup bounds (memory, processes).
    pub(crate) fn enforces(&self) -> (bool, bool) {
        let has = |h: Hierarchy| self.dirs.iter().any(|(d, _)| *d == h);
        let unified = has(Hierarchy::Unified);
        (
            self.limits.memory_bytes.is_some() && (unified || has(Hierarchy::Memory)),
            self.limits.processes.is_some() && (unified || has(Hierarchy::Pids)),
        )
    }

    /// The limits the call ran into, as phrases (`memory limit of 1 GiB`).
    pub(crate) fn reached(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (hierarchy, dir) in &self.dirs {
            let count = |file: &str, key: &str| {
                std::fs::read_to_string(dir.join(file))
                    .ok()
                    .and_then(|text| counter(&text, key))
                    .unwrap_or(0)
            };
            let memory = match hierarchy {
                Hierarchy::Unified => count("memory.events", "oom_kill"),
                Hierarchy::Memory => count("memory.oom_control", "oom_kill"),
                Hierarchy::Pids => 0,
            };
            if let (true, Some(bytes)) = (memory > 0, self.limits.memory_bytes) {
                out.push(format!("memory limit of {}", crate::limits::bytes(bytes)));
            }
            let pids = match hierarchy {
                Hierarchy::Unified | Hierarchy::Pids => count("pids.events", "max"),
                Hierarchy::Memory => 0,
            };
            if let (true, Some(limit)) = (pids > 0, self.limits.processes) {
                out.push(format!("process limit of {limit}"));
            }
        }
        out
    }
}

impl Drop for CallGroup {
    fn drop(&mut self) {
        for (_, dir) in &self.dirs {
            // Whatever is left in the call's cgroup goes with the call,
            // PID namespace or not; then the directory can go.
            for _ in 0..50 {
                let left: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                for pid in &left {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(*pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

/// The value of `key` in a flat keyed cgroup file (`oom_kill 3`).
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hierarchies_and_paths_are_read_off_proc() {
        let membership = "\
9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
1:cpu,cpuacct:/x
0::/user.slice/bdk.service
";
        assert_eq!(
            v1_path(membership, "memory").as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(v1_path(membership, "pids").as_deref(), Some("/"));
        assert_eq!(v1_path(membership, "cpuacct").as_deref(), Some("/x"));
        assert_eq!(v1_path(membership, "blkio"), None);
        assert_eq!(
            v2_path(membership).as_deref(),
            Some("/user.slice/bdk.service")
        );
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
";
        let found = mounts(mountinfo);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].point, Path::new("/sys/fs/cgroup/memory"));
        assert!(matches!(&found[0].kind, Kind::V1(c) if c.contains(&"memory".to_owned())));
        assert!(matches!(found[1].kind, Kind::V2));
        assert_eq!(
            join(Path::new("/sys/fs/cgroup/memory"), "/process_api/abc"),
            Path::new("/sys/fs/cgroup/memory/process_api/abc")
        );
        assert_eq!(join(Path::new("/m"), "/"), Path::new("/m/"));
    }

    #[test]
    fn counters_are_read_by_key() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(counter(text, "oom_kill"), Some(2));
        assert_eq!(counter(text, "max"), None);
        assert_eq!(counter("max 7\n", "max"), Some(7));
    }
}
