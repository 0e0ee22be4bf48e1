//! What the server side and the launcher agree on: the launcher's marker
//! argument, its exit status and stderr prefixes, the policy it is handed
//! ([`Spec`]) and what it reports ([`Support`]). A leaf: both halves use it,
//! it uses neither.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The first argument that makes a program act as the launcher.
pub const LAUNCHER_ARG: &str = "__bdk-sandbox";

/// The signal that stops a launched program and everything it started.
pub const STOP_SIGNAL: i32 = 15;

/// Exit status of a launcher that could not set the sandbox up.
pub const LAUNCHER_FAILED: i32 = 125;

/// Start of the stderr line of a launcher that could not set the sandbox up.
pub const ERROR_PREFIX: &str = "bdk-sandbox: ";

/// Start of the stderr line of a program the launcher could not execute.
pub const EXEC_FAILED_PREFIX: &str = "bdk-sandbox: cannot execute ";

/// Start of the stderr line of a call that a resource limit ended (the
/// rest names the limit: `memory limit of 1 GiB`).
pub const LIMIT_PREFIX: &str = "bdk-sandbox: limit reached: ";

/// What the running system enforces, as found by [`Sandbox::probe`](crate::Sandbox::probe).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Support {
    /// The Landlock ABI the kernel offers (0: none).
    pub landlock_abi: i32,
    /// Landlock restricts the filesystem (ABI 1 or newer, and enforced).
    pub filesystem: bool,
    /// Landlock scopes signals and abstract Unix sockets (ABI 6 or newer).
    pub scoped: bool,
    /// The program runs under a small init of the sandbox, as the second
    /// process of its own PID namespace.
    pub pid_namespace: bool,
    /// Every capability was dropped and `no_new_privs` set (but for
    /// `CAP_DAC_READ_SEARCH` of a program given another user, see
    /// [`Support::user`]).
    pub privileges_dropped: bool,
    /// The system-call filter (seccomp) is applied.
    #[serde(default)]
    pub seccomp: bool,
    /// The program sees the filesystem read-only outside its write grants
    /// (a mount namespace of its own).
    #[serde(default)]
    pub view: bool,
    /// The program runs as the unprivileged user it was given; `None` when
    /// it was given none (the server is not root).
    #[serde(default)]
    pub user: Option<bool>,
    /// Memory and process limits are enforced per call by a cgroup (else
    /// by per-process rlimits).
    #[serde(default)]
    pub cgroup_limits: bool,
}

impl Support {
    /// True when every protection this crate offers holds (per-call
    /// cgroups are not counted: without them rlimits bound each process).
    pub fn is_complete(&self) -> bool {
        self.filesystem
            && self.scoped
            && self.pid_namespace
            && self.privileges_dropped
            && self.seccomp
            && self.view
            && self.user != Some(false)
    }

    /// What does not hold, one phrase each (empty when complete).
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.filesystem {
            out.push("filesystem confinement (Landlock is not available)");
        } else if !self.scoped {
            out.push("signal and socket scoping (needs Landlock ABI 6, Linux 6.12)");
        }
        if !self.pid_namespace {
            out.push(
                "process lifetime (no PID namespace: a detached grandchild can outlive its call)",
            );
        }
        if !self.privileges_dropped {
            out.push("privilege drop (no_new_privs or capabilities)");
        }
        if !self.seccomp {
            out.push("system-call filter (seccomp is not available)");
        }
        if !self.view {
            out.push(
                "read-only view outside the grants (no mount namespace: chmod, utime and setxattr reach the server user's files)",
            );
        }
        if self.user == Some(false) {
            out.push("unprivileged user (the server runs as root but its tools keep uid 0)");
        }
        out
    }
}

/// The user and group a contained program runs as when the server runs as
/// root (see `docs/security.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// Resource limits of one contained call; `None` leaves one unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Memory of the whole call (a cgroup), or of each process (an
    /// rlimit on its data segment) where no cgroup is delegated.
    pub memory_bytes: Option<u64>,
    /// Processes and threads of the whole call (a cgroup), or of the
    /// sandbox user (an rlimit) where no cgroup is delegated.
    pub processes: Option<u64>,
    /// CPU time of each process, in seconds (an rlimit).
    pub cpu_seconds: Option<u64>,
    /// The largest file a process may write, in bytes (an rlimit).
    pub file_bytes: Option<u64>,
}

/// Where a call's cgroup is made: the directories this process made for
/// its calls in each hierarchy that has a controller it can use (see
/// `cgroup.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CgroupDirs {
    /// cgroup v2: a directory whose children have the memory and pids
    /// controllers.
    #[serde(default)]
    pub unified: Option<PathBuf>,
    /// cgroup v1: this process's directory in the memory hierarchy.
    #[serde(default)]
    pub memory: Option<PathBuf>,
    /// cgroup v1: this process's directory in the pids hierarchy.
    #[serde(default)]
    pub pids: Option<PathBuf>,
}

impl CgroupDirs {
    /// True when no hierarchy is usable.
    pub fn is_empty(&self) -> bool {
        self.unified.is_none() && self.memory.is_none() && self.pids.is_none()
    }
}

/// The protections a launcher applies beyond Landlock, as the host decided
/// them from its probe: each one asked for must hold, or the program does
/// not start. A probe asks for all of them and reports what held instead.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Confine {
    /// Apply the system-call filter.
    #[serde(default)]
    pub(crate) seccomp: bool,
    /// Make the filesystem read-only outside the write grants.
    #[serde(default)]
    pub(crate) view: bool,
    /// Run as this user.
    #[serde(default)]
    pub(crate) user: Option<Ids>,
    /// Limit the call's resources.
    #[serde(default)]
    pub(crate) limits: Limits,
    /// Make the call's cgroup here.
    #[serde(default)]
    pub(crate) cgroups: CgroupDirs,
}

/// The policy handed to the launcher on its command line (it holds paths
/// only, never secrets).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// The pid the launcher's parent must have (the server): a launcher
    /// whose parent died before it could ask for a parent-death signal
    /// stops at once.
    pub(crate) parent: u32,
    /// Apply Landlock.
    pub(crate) filesystem: bool,
    /// Read-and-execute grants of the system (the same for every call).
    #[serde(default)]
    pub(crate) system_read: Vec<PathBuf>,
    /// Read-and-execute grants of this call.
    pub(crate) read: Vec<PathBuf>,
    /// Read-write grants.
    pub(crate) write: Vec<PathBuf>,
    /// Device files to read and write.
    pub(crate) devices: Vec<PathBuf>,
    /// Unix sockets to connect to.
    pub(crate) sockets: Vec<PathBuf>,
    /// Everything beyond Landlock.
    #[serde(default)]
    pub(crate) confine: Confine,
}

/// A [`Spec`] as the server writes it for one call: the system's grants
/// were encoded once, when the sandbox was built, and go in as they are;
/// the rest is borrowed from the call. Nothing is copied per call.
#[derive(Serialize)]
pub(crate) struct CallSpec<'a> {
    pub(crate) parent: u32,
    pub(crate) filesystem: bool,
    pub(crate) system_read: &'a RawValue,
    pub(crate) read: &'a [PathBuf],
    pub(crate) write: &'a [PathBuf],
    pub(crate) devices: &'a [PathBuf],
    pub(crate) sockets: &'a [PathBuf],
    pub(crate) confine: &'a Confine,
}

/// A request to a fork server (see `fork_server.rs`): one message on its
/// socket. A [`Request::Run`] carries the program's stdin, stdout and stderr
/// as `SCM_RIGHTS`, in that order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum Request {
    /// Start a program.
    Run(Box<Run>),
    /// Stop the program of call `id`, if it still runs.
    Stop { id: u64 },
}

/// What [`Request::Run`] asks for: a call's own grants (the system's are
/// the fork server's) and the program.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Run {
    /// The host's number for the call, repeated in every reply about it.
    pub(crate) id: u64,
    pub(crate) filesystem: bool,
    pub(crate) read: Vec<PathBuf>,
    pub(crate) write: Vec<PathBuf>,
    pub(crate) sockets: Vec<PathBuf>,
    /// Everything beyond Landlock.
    #[serde(default)]
    pub(crate) confine: Confine,
    /// The program and its arguments.
    pub(crate) argv: Vec<String>,
    /// Its whole environment.
    pub(crate) env: Vec<(String, String)>,
    /// Its working directory.
    pub(crate) cwd: PathBuf,
}

/// What a fork server tells the host about a call.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub(crate) enum Reply {
    /// The fork server holds its grants and takes requests (its first
    /// message).
    Ready,
    /// The supervisor of call `id` runs as `pid`.
    Started { id: u64, pid: u32 },
    /// It ended with this wait status (as `waitpid` gives it).
    Exited { id: u64, status: i32 },
    /// It could not be started.
    Failed { id: u64, message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_reads_what_the_server_writes_for_a_call() {
        let system = serde_json::value::to_raw_value(&["/usr", "/etc"]).unwrap();
        let paths = |p: &[&str]| p.iter().map(PathBuf::from).collect::<Vec<_>>();
        let (read, write, devices, sockets) = (
            paths(&["/agent/tools"]),
            paths(&["/state/ws"]),
            paths(&["/dev/null"]),
            paths(&["/state/host.sock"]),
        );
        let confine = Confine {
            seccomp: true,
            view: true,
            user: Some(Ids { uid: 9, gid: 8 }),
            limits: Limits {
                memory_bytes: Some(1 << 20),
                ..Limits::default()
            },
            cgroups: CgroupDirs::default(),
        };
        let written = serde_json::to_string(&CallSpec {
            parent: 7,
            filesystem: true,
            system_read: &system,
            read: &read,
            write: &write,
            devices: &devices,
            sockets: &sockets,
            confine: &confine,
        })
        .unwrap();
        let spec: Spec = serde_json::from_str(&written).unwrap();
        assert_eq!(spec.parent, 7);
        assert!(spec.filesystem);
        assert_eq!(spec.system_read, paths(&["/usr", "/etc"]));
        assert_eq!(
            (spec.read, spec.write, spec.devices, spec.sockets),
            (read, write, devices, sockets)
        );
        assert!(spec.confine.seccomp && spec.confine.view);
        assert_eq!(spec.confine.user, Some(Ids { uid: 9, gid: 8 }));
        assert_eq!(spec.confine.limits.memory_bytes, Some(1 << 20));
    }
}
