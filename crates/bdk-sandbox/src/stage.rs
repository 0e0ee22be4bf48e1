//! What every stage of the launcher shares (`launcher.rs`' supervisor,
//! `confine.rs`' init, `fork_server.rs`): the program to become, the
//! system grants a fork server holds open, how a stage fails, and the one
//! `fork`. A leaf: it names none of them.

use std::ffi::OsString;

use landlock::PathFd;
use nix::unistd::ForkResult;

use crate::protocol::{ERROR_PREFIX, LAUNCHER_FAILED, Spec};

/// What stage 2 becomes.
#[derive(Default)]
pub(crate) struct Program {
    /// The program and its arguments.
    pub(crate) argv: Vec<OsString>,
    /// Its whole environment; `None` keeps the launcher's own.
    pub(crate) env: Option<Vec<(String, String)>>,
}

/// What a fork server prepares once for every call: the system's grants,
/// opened, and the system-call filter, compiled.
pub(crate) struct Held {
    pub(crate) system_read: Vec<PathFd>,
    pub(crate) devices: Vec<PathFd>,
    pub(crate) filter: Option<crate::seccomp::Filter>,
}

impl Held {
    /// Opens the system grants of `spec`; paths that do not exist are left
    /// out, as Landlock setup leaves them out.
    pub(crate) fn open(spec: &Spec) -> Self {
        let open = |paths: &[std::path::PathBuf]| {
            paths
                .iter()
                .filter_map(|p| PathFd::new(p).ok())
                .collect::<Vec<_>>()
        };
        Self {
            system_read: open(&spec.system_read),
            devices: open(&spec.devices),
            // A filter that cannot be compiled is compiled again (and its
            // error reported) by the call that asks for it.
            filter: crate::seccomp::Filter::build().ok(),
        }
    }
}

/// Says why the launcher failed and returns its exit status.
pub(crate) fn failed(message: &str) -> u8 {
    eprintln!("{ERROR_PREFIX}{message}");
    LAUNCHER_FAILED as u8
}

/// Forks this process: stage 2 from a supervisor, a supervisor from a fork
/// server. The only unsafe code of the workspace (the crate's lints allow
/// it here by name).
#[allow(unsafe_code)]
pub(crate) fn fork_single_threaded() -> nix::Result<ForkResult> {
    // SAFETY: `fork` is unsound only where another thread may hold a lock
    // (the allocator's, stdout's) that the child then waits on forever. The
    // launcher runs from `run_if_launcher`, which its binaries call first
    // thing in `main`, before any thread or runtime exists, and it starts
    // none (a fork server included); so this process has one thread and the
    // child may run any code.
    unsafe { nix::unistd::fork() }
}
