//! Containment for the programs an agent runs: tools, the `shell` built-in,
//! command hooks and channel deliveries.
//!
//! A contained program gets exactly what its author granted and nothing of
//! the server's:
//!
//! - **Environment**: an allowlist ([`env::base`]: `PATH`, `HOME`, the
//!   locale and `TZ`) plus what the caller adds (the per-call `BDK_*`
//!   variables, what a manifest declares). Nothing else of the server's
//!   environment reaches it. This part needs no launcher and applies even
//!   when the sandbox is off.
//! - **Filesystem** (Linux, Landlock): the system is readable and
//!   executable, except the paths the caller protects (state roots, agent
//!   folders), home directories (the server user's home and `/root`,
//!   `/home`; the installation roots of the programs on `PATH` stay
//!   readable), temp directories, `/dev` (a few harmless devices stay usable)
//!   and well-known secret files. A call adds its own grants: its folder to
//!   read, its workspace and a temp dir to write, a Unix socket to connect
//!   to. Landlock also scopes signals and abstract Unix sockets (ABI 6), so
//!   the program can signal no process outside its sandbox, and it cannot
//!   read `/proc/<pid>/environ` of processes outside it (Landlock denies
//!   ptrace-mode access to them).
//! - **Privileges**: `no_new_privs`, and every capability dropped, so a
//!   server running as root gives its programs no `CAP_DAC_OVERRIDE`,
//!   `CAP_SYS_ADMIN` or `CAP_SYS_MODULE`. Given a user ([`Builder::user`],
//!   meant for a root server), the program runs as that unprivileged uid
//!   instead, keeping only `CAP_DAC_READ_SEARCH` (see [`user`]), so it owns
//!   nothing of root's.
//! - **Metadata**: a mount namespace in which everything but the write
//!   grants is read-only, so `chmod`, `chown`, `utime` and `setxattr`
//!   change nothing outside them (Landlock does not mediate those).
//! - **System calls**: a seccomp filter refuses new namespaces, mounts, the
//!   keyrings, `bpf`, `ptrace`, io_uring, `open_by_handle_at` and set-id
//!   modes, among others.
//! - **Resources** ([`Builder::limits`]): memory and processes of the whole
//!   call in a cgroup of its own where the host delegates one
//!   ([`cgroup::prepare`]), rlimits otherwise; CPU time and file size per
//!   process. A call over a limit ends with a [`LIMIT_PREFIX`] line naming
//!   it; its OOM score is the highest.
//! - **Lifetime**: the program runs in a PID namespace of its own, under a
//!   small init that is the namespace's first process. When the program
//!   ends, the init reports its status and exits, and the kernel kills
//!   every other process in the namespace: a `setsid` grandchild cannot
//!   outlive its call. The launcher in between dies with the server
//!   (`PR_SET_PDEATHSIG`), and takes the namespace with it, so not even
//!   `kill -9` of the server leaves a tool running. As the init's child the
//!   program keeps ordinary signal semantics (it can signal itself; a crash
//!   is a death by its signal).
//!
//! # How a program is started
//!
//! [`Sandbox::wrap`] turns `program args...` into a command line of the
//! *launcher*: an executable that calls [`run_if_launcher`] first thing in
//! `main` (the `bdk` binary does; so does this crate's `bdk-sandbox` binary).
//! The launcher runs in two stages, because a process cannot move itself into
//! a new PID namespace and must not confine itself before it has set up the
//! one it supervises:
//!
//! 1. **supervise** (outside the namespace): blocks the stop signals, asks
//!    for `SIGTERM` when its parent dies, checks the parent is still the
//!    server, makes the call's cgroup, unshares a PID namespace (with a user
//!    namespace when it is not root), forks stage 2 as the namespace's
//!    first process and waits. On `SIGTERM` (the server stopping the call,
//!    or the server dying) it `SIGKILL`s stage 2, which takes the namespace
//!    down. It exits with the program's status, or dies by the program's
//!    signal.
//! 2. **confine** (inside): joins the cgroup, enters the read-only view,
//!    switches user or drops capabilities, sets rlimits, applies Landlock
//!    (and with it `no_new_privs`) and the system-call filter, then forks
//!    the program and stays as its init.
//!
//! The caller stops a launched program by sending [`STOP_SIGNAL`] to the
//! launcher's pid; `SIGKILL` would leave the launcher no chance to take the
//! namespace down (stage 2 still dies with it through its own parent-death
//! signal, unless the program cleared that).
//!
//! A host that runs many programs can start them through a [`ForkServer`]
//! instead ([`Sandbox::fork_server`]): one launcher that stays, holds the
//! system grants open and forks a stage 1 per call, so a call costs no
//! launcher `exec` and no reopening of the grants. What the program gets is
//! the same.
//!
//! Failures of the launcher itself exit with [`LAUNCHER_FAILED`] and a line
//! on stderr starting with [`ERROR_PREFIX`]; a program that cannot be
//! executed exits with 127 (not found) or 126 (any other reason) and a line
//! starting with [`EXEC_FAILED_PREFIX`].
//!
//! # What this crate does not contain
//!
//! The network: a contained program can open connections (tools call APIs).
//! The total size of what it writes: only each file is bounded.
//! Pathname Unix sockets are reachable on kernels before Landlock ABI 9.
//! Where Landlock or namespaces are missing, [`Sandbox::probe`] says what is
//! not enforced; callers warn or refuse to start.
//!
//! This crate knows nothing of agents, sessions or stores: it is given
//! paths and a program.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod call;
#[cfg(target_os = "linux")]
pub mod cgroup;
#[cfg(target_os = "linux")]
mod confine;
pub mod env;
#[cfg(target_os = "linux")]
mod fork_client;
#[cfg(target_os = "linux")]
mod fork_server;
#[cfg(target_os = "linux")]
mod launcher;
pub mod limits;
mod plan;
mod protocol;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
mod stage;
#[cfg(target_os = "linux")]
pub mod user;
#[cfg(target_os = "linux")]
mod view;

pub use call::{Call, Error};
#[cfg(target_os = "linux")]
pub use fork_client::{CallId, Event, ForkServer};
use protocol::{CallSpec, Confine, Spec};
pub use protocol::{
    CgroupDirs, ERROR_PREFIX, EXEC_FAILED_PREFIX, Ids, LAUNCHER_ARG, LAUNCHER_FAILED, LIMIT_PREFIX,
    Limits, STOP_SIGNAL, Support,
};
use serde_json::value::RawValue;

/// A program line that runs through the launcher, for
/// [`std::process::Command::new`]`(program).args(args)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wrapped {
    /// The launcher.
    pub program: PathBuf,
    /// Its arguments: the launcher marker, the policy, the program and its
    /// arguments.
    pub args: Vec<OsString>,
}

/// The sandbox of one server: the launcher and the system's read grants,
/// computed once from what must stay protected. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Sandbox {
    launcher: PathBuf,
    read: Arc<Vec<PathBuf>>,
    /// `read` as the launcher's policy carries it, encoded once (or the
    /// first path that cannot be encoded).
    read_json: Arc<Result<Box<RawValue>, PathBuf>>,
    devices: Arc<Vec<PathBuf>>,
    /// The user programs run as (when the server is root).
    user: Option<Ids>,
    /// Each call's resource limits.
    limits: Limits,
    /// Where calls' cgroups are made.
    cgroups: Arc<CgroupDirs>,
    /// The fork server every clone shares, once one was asked for.
    #[cfg(target_os = "linux")]
    shared: Arc<std::sync::Mutex<Option<ForkServer>>>,
}

/// Builds a [`Sandbox`].
#[derive(Clone, Debug)]
pub struct Builder {
    launcher: PathBuf,
    protect: Vec<PathBuf>,
    grant: Vec<PathBuf>,
    defaults: bool,
    user: Option<Ids>,
    limits: Limits,
    cgroups: CgroupDirs,
}

impl Sandbox {
    /// A builder for a sandbox whose programs start through `launcher` (an
    /// executable calling [`run_if_launcher`]).
    pub fn builder(launcher: impl Into<PathBuf>) -> Builder {
        Builder {
            launcher: launcher.into(),
            protect: Vec::new(),
            grant: Vec::new(),
            defaults: true,
            user: None,
            limits: Limits::default(),
            cgroups: CgroupDirs::default(),
        }
    }

    /// The launcher.
    pub fn launcher(&self) -> &Path {
        &self.launcher
    }

    /// The paths every contained program may read and execute, in order.
    pub fn system_reads(&self) -> &[PathBuf] {
        &self.read
    }

    /// The user contained programs run as, when the sandbox was given one
    /// (see [`Builder::user`]); the host gives it what programs write.
    pub fn user(&self) -> Option<Ids> {
        self.user
    }

    /// The user contained programs do run as: [`Sandbox::user`] unless
    /// this launcher's probe found it cannot switch users (a `bdk` that is
    /// itself inside another's sandbox). What programs write must belong
    /// to it.
    pub fn effective_user(&self) -> Option<Ids> {
        self.user
            .filter(|_| self.probed().is_none_or(|s| s.user == Some(true)))
    }

    /// Each call's resource limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The protections beyond Landlock that calls ask for: what this
    /// launcher's probe found to hold, or all of them before a probe (so a
    /// missing one fails the call rather than being skipped unseen).
    fn confine(&self) -> Confine {
        let probed = self.probed();
        let holds = |f: fn(&Support) -> bool| probed.as_ref().is_none_or(f);
        Confine {
            seccomp: holds(|s| s.seccomp),
            view: holds(|s| s.view),
            user: self.effective_user(),
            limits: self.limits,
            cgroups: if holds(|s| s.cgroup_limits) {
                self.cgroups.as_ref().clone()
            } else {
                CgroupDirs::default()
            },
        }
    }

    /// The command line that runs `program args...` contained by `call`.
    pub fn wrap(&self, call: &Call, program: &Path, args: &[String]) -> Result<Wrapped, Error> {
        let system_read = self
            .read_json
            .as_ref()
            .as_ref()
            .map_err(|path| Error::NonUtf8Path(path.clone()))?;
        let confine = self.confine();
        let spec = CallSpec {
            parent: std::process::id(),
            filesystem: call.filesystem,
            system_read,
            read: &call.read,
            write: &call.write,
            devices: &self.devices,
            sockets: &call.sockets,
            confine: &confine,
        };
        let paths = [
            &call.read,
            &call.write,
            &call.sockets,
            self.devices.as_ref(),
        ];
        let mut out = vec![
            OsString::from(LAUNCHER_ARG),
            OsString::from("run"),
            OsString::from(encode(&spec, paths.into_iter().flatten())?),
            program.as_os_str().to_owned(),
        ];
        out.extend(args.iter().map(OsString::from));
        Ok(Wrapped {
            program: self.launcher.clone(),
            args: out,
        })
    }

    /// Starts a fork server for this sandbox: one launcher that stays and
    /// starts every call by `fork`, holding the system grants open, instead
    /// of a launcher per call (about half of a contained call's cost; see
    /// `docs/design/tool-launch.md`). What a program gets is the same as
    /// through [`Sandbox::wrap`].
    #[cfg(target_os = "linux")]
    pub fn fork_server(&self) -> Result<ForkServer, Error> {
        let spec = self.system_spec();
        let paths = spec.system_read.iter().chain(&spec.devices);
        let json = encode(&spec, paths)?;
        ForkServer::start(&self.launcher, json, self.confine())
    }

    /// The shared fork server when one runs, without starting one.
    #[cfg(target_os = "linux")]
    pub fn running_fork_server(&self) -> Option<ForkServer> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|s| s.is_alive())
            .cloned()
    }

    /// The fork server shared by this sandbox and its clones: started on
    /// the first call, and again when the last one has gone. Starting one
    /// waits for it to say it is ready (milliseconds, at most 10 s).
    #[cfg(target_os = "linux")]
    pub fn shared_fork_server(&self) -> Result<ForkServer, Error> {
        let mut shared = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(server) = shared.as_ref().filter(|s| s.is_alive()) {
            return Ok(server.clone());
        }
        let server = self.fork_server()?;
        *shared = Some(server.clone());
        Ok(server)
    }

    /// What the last successful [`Sandbox::probe`] of this launcher in this
    /// process found, if there was one. What the system enforces is a
    /// property of the kernel and the launcher, not of one sandbox's paths,
    /// so the result is shared by every sandbox with the same launcher.
    pub fn probed(&self) -> Option<Support> {
        probes()
            .iter()
            .find(|(launcher, _)| *launcher == self.launcher)
            .map(|(_, support)| support.clone())
    }

    /// Runs the launcher once, the whole way, and reads back what the system
    /// enforced (also kept for [`Sandbox::probed`]).
    pub fn probe(&self) -> Result<Support, Error> {
        let support = self.probe_once()?;
        let mut probes = probes();
        probes.retain(|(launcher, _)| *launcher != self.launcher);
        probes.push((self.launcher.clone(), support.clone()));
        Ok(support)
    }

    /// The policy of the system's grants alone, from this process: what a
    /// probe and a fork server are started with. A probe tries every
    /// protection there is.
    fn system_spec(&self) -> Spec {
        Spec {
            parent: std::process::id(),
            filesystem: true,
            system_read: self.read.as_ref().clone(),
            devices: self.devices.as_ref().clone(),
            confine: Confine {
                seccomp: true,
                view: true,
                user: self.user,
                limits: self.limits,
                cgroups: self.cgroups.as_ref().clone(),
            },
            ..Spec::default()
        }
    }

    fn probe_once(&self) -> Result<Support, Error> {
        let spec = self.system_spec();
        let paths = spec.system_read.iter().chain(&spec.devices);
        let output = std::process::Command::new(&self.launcher)
            .arg(LAUNCHER_ARG)
            .arg("probe")
            .arg(encode(&spec, paths)?)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|source| Error::Launch {
                launcher: self.launcher.clone(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        match serde_json::from_str::<Support>(stdout.trim()) {
            Ok(support) if output.status.success() => Ok(support),
            _ => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                Err(Error::Probe {
                    launcher: self.launcher.clone(),
                    message: format!("{}: {}", output.status, stderr.trim()),
                })
            }
        }
    }
}

impl Builder {
    /// Never readable by a contained program (unless a call grants a path
    /// beneath it): a state root, an agent folder, a secret file.
    pub fn protect(mut self, path: impl Into<PathBuf>) -> Self {
        self.protect.push(path.into());
        self
    }

    /// Readable even where a protected area contains it.
    pub fn grant_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.grant.push(path.into());
        self
    }

    /// Runs contained programs as `user` (meant for a server running as
    /// root: see [`user::default_user`]). The launcher needs root's
    /// capabilities to switch; a probe says whether it could.
    pub fn user(mut self, user: Option<Ids>) -> Self {
        self.user = user;
        self
    }

    /// Bounds every call's resources (a cgroup where [`Builder::cgroups`]
    /// gives one, rlimits otherwise).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Where calls' cgroups are made ([`cgroup::prepare`]).
    pub fn cgroups(mut self, cgroups: CgroupDirs) -> Self {
        self.cgroups = cgroups;
        self
    }

    /// Leaves out the default protections (home directories, temp dirs,
    /// `/dev`, secret files): only what [`Builder::protect`] names is
    /// protected. For tests of the plan itself.
    pub fn without_defaults(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// Computes the system's read grants. Paths that do not exist are left
    /// out; nothing is started.
    pub fn build(self) -> Sandbox {
        let mut rules = Vec::new();
        if self.defaults {
            rules.extend(plan::default_rules());
        }
        rules.extend(
            self.protect
                .iter()
                .filter_map(|p| p.canonicalize().ok())
                .map(|p| (p, plan::Decision::Deny)),
        );
        rules.extend(
            self.grant
                .iter()
                .filter_map(|p| p.canonicalize().ok())
                .map(|p| (p, plan::Decision::Allow)),
        );
        let read = plan::plan(&rules);
        let devices = if self.defaults {
            plan::DEVICES
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect()
        } else {
            Vec::new()
        };
        let read_json = match read.iter().find(|p| p.to_str().is_none()) {
            Some(path) => Err(path.clone()),
            // A list of UTF-8 strings always encodes.
            None => serde_json::value::to_raw_value(&read).map_err(|_| PathBuf::new()),
        };
        Sandbox {
            launcher: self.launcher,
            read: Arc::new(read),
            read_json: Arc::new(read_json),
            devices: Arc::new(devices),
            user: self.user,
            limits: self.limits,
            cgroups: Arc::new(self.cgroups),
            #[cfg(target_os = "linux")]
            shared: Arc::default(),
        }
    }
}

/// The probe results of this process, per launcher.
fn probes() -> std::sync::MutexGuard<'static, Vec<(PathBuf, Support)>> {
    static PROBES: std::sync::Mutex<Vec<(PathBuf, Support)>> = std::sync::Mutex::new(Vec::new());
    // Every update leaves the list consistent.
    PROBES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The policy argument: `spec` as JSON, once every one of its `paths` is
/// known to be UTF-8.
fn encode<'a>(
    spec: &impl serde::Serialize,
    paths: impl IntoIterator<Item = &'a PathBuf>,
) -> Result<String, Error> {
    for path in paths {
        if path.to_str().is_none() {
            return Err(Error::NonUtf8Path(path.clone()));
        }
    }
    // Serializing plain strings, numbers and booleans cannot fail once the
    // paths are known to be UTF-8.
    serde_json::to_string(spec).map_err(|_| Error::NonUtf8Path(PathBuf::new()))
}

/// Runs the launcher when the process was started as one (its first
/// argument is [`LAUNCHER_ARG`]) and returns its exit status; `None`
/// otherwise. Call it first thing in `main`, before any thread or runtime
/// starts:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     if let Some(code) = bdk_sandbox::run_if_launcher() {
///         return code;
///     }
///     // ... the program itself
///     std::process::ExitCode::SUCCESS
/// }
/// ```
pub fn run_if_launcher() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os();
    let _program = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(LAUNCHER_ARG)) {
        return None;
    }
    Some(launch(args.collect()))
}

#[cfg(target_os = "linux")]
fn launch(args: Vec<OsString>) -> std::process::ExitCode {
    if args.first().is_some_and(|stage| stage == "serve") {
        return fork_server::main(args);
    }
    launcher::main(args)
}

#[cfg(not(target_os = "linux"))]
fn launch(_args: Vec<OsString>) -> std::process::ExitCode {
    eprintln!("{ERROR_PREFIX}the sandbox launcher runs on Linux only");
    std::process::ExitCode::from(LAUNCHER_FAILED as u8)
}
