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
    /// The program runs as the first process of its own PID namespace.
    pub pid_namespace: bool,
    /// Every capability was dropped and `no_new_privs` set.
    pub privileges_dropped: bool,
}

impl Support {
    /// True when every protection this crate offers holds.
    pub fn is_complete(&self) -> bool {
        self.filesystem && self.scoped && self.pid_namespace && self.privileges_dropped
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
        out
    }
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
}

/// A request to a fork server (see `fork_server.rs`): one message on its
/// socket. A [`Request::Run`] carries the program's stdin, stdout and stderr
/// as `SCM_RIGHTS`, in that order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum Request {
    /// Start a program.
    Run(Run),
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
        let written = serde_json::to_string(&CallSpec {
            parent: 7,
            filesystem: true,
            system_read: &system,
            read: &read,
            write: &write,
            devices: &devices,
            sockets: &sockets,
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
    }
}
