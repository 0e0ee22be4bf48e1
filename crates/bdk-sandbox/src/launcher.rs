//! The launcher: the two stages that put a program into its sandbox (see the
//! crate docs for why there are two).
//!
//! Stage 1 (`run`, `probe`) supervises from outside the PID namespace; stage
//! 2, a fork of stage 1, confines itself inside it and becomes the program.
//! The `serve` stage (`fork_server.rs`) forks a stage 1 per call instead.
//! Both are short and single-threaded: they run before any runtime or thread
//! of the host program starts, which is what makes `unshare`, blocking
//! signals process-wide and running ordinary code after `fork` safe here.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode};

use landlock::{
    ABI, Access, AccessFs, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use crate::protocol::{ERROR_PREFIX, EXEC_FAILED_PREFIX, LAUNCHER_FAILED, Spec, Support};

/// The newest Landlock ABI whose rights this launcher asks for. Older
/// kernels silently grant less; [`Support`] says what held.
const ABI_WANTED: ABI = ABI::V9;

/// The signals that stop a launched program (and `SIGCHLD`, its end).
const WATCHED: [Signal; 5] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGCHLD,
];

/// The launcher's entry: `args` are the arguments after
/// [`LAUNCHER_ARG`](crate::LAUNCHER_ARG).
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let stage = args.next();
    let spec = match spec_of(args.next()) {
        Ok(spec) => spec,
        Err(code) => return ExitCode::from(code),
    };
    let argv: Vec<OsString> = args.collect();
    match stage.as_deref().and_then(OsStr::to_str) {
        Some("run") => ExitCode::from(supervise(&spec, None, Program { argv, env: None }, false)),
        Some("probe") => ExitCode::from(supervise(&spec, None, Program::default(), true)),
        _ => fail("unknown launcher stage"),
    }
}

/// The policy argument, parsed; the launcher's exit status when it is
/// missing or invalid.
pub(crate) fn spec_of(arg: Option<OsString>) -> Result<Spec, u8> {
    let Some(text) = arg else {
        return Err(failed("missing the sandbox policy argument"));
    };
    match text.to_str().map(serde_json::from_str) {
        Some(Ok(spec)) => Ok(spec),
        _ => Err(failed("the sandbox policy argument is not valid")),
    }
}

/// What stage 2 becomes.
#[derive(Default)]
pub(crate) struct Program {
    /// The program and its arguments.
    pub(crate) argv: Vec<OsString>,
    /// Its whole environment; `None` keeps the launcher's own.
    pub(crate) env: Option<Vec<(String, String)>>,
}

/// The system's grants opened once, by a fork server, for every call.
pub(crate) struct Held {
    pub(crate) system_read: Vec<PathFd>,
    pub(crate) devices: Vec<PathFd>,
}

impl Held {
    /// Opens the system grants of `spec`; paths that do not exist are left
    /// out, as [`confine`] leaves them out.
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
        }
    }
}

fn fail(message: &str) -> ExitCode {
    ExitCode::from(failed(message))
}

/// Says why the launcher failed and returns its exit status.
pub(crate) fn failed(message: &str) -> u8 {
    eprintln!("{ERROR_PREFIX}{message}");
    LAUNCHER_FAILED as u8
}

fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for signal in WATCHED {
        set.add(signal);
    }
    set
}

/// Stage 1: make the PID namespace, fork stage 2 as its first process,
/// and take it down on a stop signal or when the server dies.
///
/// Stage 2 is a `fork` of this process, not a new launcher: this process is
/// single-threaded (it runs before the host program starts anything), so the
/// child may run any code, and a second `exec` of the launcher binary (the
/// whole `bdk` program, when `bdk` is the launcher) would cost more than
/// everything else the sandbox does.
///
/// `held` holds the system grants already opened (a fork server's); the
/// policy's paths are opened otherwise. Returns the exit status: the
/// program's, or [`LAUNCHER_FAILED`].
pub(crate) fn supervise(spec: &Spec, held: Option<&Held>, program: Program, probe: bool) -> u8 {
    // Block the stop signals first, so that from here on a stop waits for
    // the loop below instead of killing this process before it can take the
    // namespace down. Stage 2 unblocks them before anything else.
    let mask = watched();
    if let Err(e) = mask.thread_block() {
        return failed(&format!("cannot block signals: {e}"));
    }
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
        return failed(&format!("cannot ask for a parent-death signal: {e}"));
    }
    // The server may have died between starting us and the line above:
    // then no signal is coming, and the program must not start.
    let parent = nix::unistd::getppid().as_raw();
    if u32::try_from(parent).ok() != Some(spec.parent) {
        return failed("the process that started the launcher is gone");
    }
    let pid_namespace = match enter_pid_namespace() {
        Ok(entered) => entered,
        Err(message) => return failed(&message),
    };
    let child = match fork_single_threaded() {
        Ok(ForkResult::Child) => {
            let code = confine_and_exec(spec, held, program, probe);
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::process::exit(i32::from(code));
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => return failed(&format!("cannot start the sandbox: {e}")),
    };
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => {
                    return u8::try_from(code).unwrap_or(1);
                }
                Ok(WaitStatus::Signaled(_, signal, _)) => return die_like(signal),
                Ok(_) => {}
                Err(e) => {
                    stop(child, pid_namespace);
                    return failed(&format!("cannot wait for the program: {e}"));
                }
            },
            Ok(_) => {
                stop(child, pid_namespace);
                return 128 + 9;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                stop(child, pid_namespace);
                return failed(&format!("cannot wait for signals: {e}"));
            }
        }
    }
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

/// Kills the program. In a PID namespace killing its first process kills
/// every process in it; without one, the launcher's process group (which
/// the caller made) is the best reach there is, and the launcher goes with
/// it.
fn stop(child: Pid, pid_namespace: bool) {
    let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
    let _ = waitpid(child, None);
    if !pid_namespace {
        let _ = nix::sys::signal::killpg(nix::unistd::getpgrp(), Signal::SIGKILL);
    }
}

/// Ends the launcher the way the program ended: by its signal.
fn die_like(signal: Signal) -> u8 {
    let _ = SigSet::all().thread_unblock();
    let _ = nix::sys::signal::raise(signal);
    // Still here: the signal was one that does not kill (a stop, or an
    // ignored one). Report it the way shells do.
    u8::try_from(128 + signal as i32).unwrap_or(1)
}

/// Unshares a PID namespace for the next child. Root can do it directly; any
/// other user needs a user namespace first, with its own uid and gid mapped
/// to themselves so files keep their owners. `Ok(false)` when the system
/// allows neither.
fn enter_pid_namespace() -> Result<bool, String> {
    if unshare(CloneFlags::CLONE_NEWPID).is_ok() {
        return Ok(true);
    }
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    if unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID).is_err() {
        return Ok(false);
    }
    // From here the launcher is in a new user namespace: without the maps
    // its programs would run as the overflow user, so a failure is fatal.
    let write = |file: &str, text: String| {
        std::fs::write(Path::new("/proc/self").join(file), text)
            .map_err(|e| format!("cannot write /proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".to_owned())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    Ok(true)
}

/// Stage 2: confine this process and become the program. Returns the exit
/// status when it cannot (or when it only probes).
fn confine_and_exec(spec: &Spec, held: Option<&Held>, program: Program, probe: bool) -> u8 {
    // The program starts with no signal blocked, as programs expect; the
    // supervisor's mask came along with the fork.
    let _ = SigSet::empty().thread_set_mask();
    // A fallback only: should the supervisor die without taking the
    // namespace down, this process (and with it the namespace) follows.
    // The program could clear it, which is why the supervisor kills it
    // rather than relying on this.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let mut support = Support {
        pid_namespace: std::process::id() == 1,
        ..Support::default()
    };
    let privileges = drop_capabilities();
    match confine(spec, held) {
        Ok((abi, status)) => {
            support.landlock_abi = abi;
            let enforced = status.ruleset != RulesetStatus::NotEnforced;
            support.filesystem = spec.filesystem && enforced;
            support.scoped = enforced && abi >= 6;
            support.privileges_dropped = privileges && status.no_new_privs;
        }
        Err(message) => return failed(&message),
    }
    if probe {
        return match serde_json::to_string(&support) {
            Ok(text) => {
                println!("{text}");
                0
            }
            Err(e) => failed(&format!("cannot report: {e}")),
        };
    }
    let mut argv = program.argv.into_iter();
    let Some(name) = argv.next() else {
        return failed("no program to run");
    };
    let mut command = Command::new(&name);
    command.args(argv);
    if let Some(env) = program.env {
        command.env_clear().envs(env);
    }
    let error = command.exec();
    eprintln!(
        "{EXEC_FAILED_PREFIX}`{}`: {error}",
        Path::new(&name).display()
    );
    if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Empties every capability set and the bounding set, so that a server
/// running as root gives its programs uid 0 without root's powers. True
/// when the process ends up with none.
fn drop_capabilities() -> bool {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    // Bounding set first: dropping from it needs CAP_SETPCAP, which goes
    // with the other sets below. Dropping a capability that is not in the
    // set succeeds, so there is no separate read: one call per capability
    // until the first error, which is either EINVAL (past the kernel's last
    // capability) or EPERM (no CAP_SETPCAP, so no drop could succeed).
    for bit in 0..64u32 {
        let cap = CapabilitySet::from_bits_retain(1 << bit);
        if rustix::thread::remove_capability_from_bounding_set(cap).is_err() {
            break;
        }
    }
    let _ = rustix::thread::clear_ambient_capability_set();
    let empty = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    let _ = rustix::thread::set_capabilities(None, empty);
    rustix::thread::capabilities(None).is_ok_and(|sets| {
        sets.effective.is_empty() && sets.permitted.is_empty() && sets.inheritable.is_empty()
    })
}

/// Applies the Landlock ruleset of `spec` to this process. Returns the
/// kernel's Landlock ABI and the enforcement status. Paths that vanished
/// since the plan was made are skipped.
fn confine(spec: &Spec, held: Option<&Held>) -> Result<(i32, landlock::RestrictionStatus), String> {
    let error = |e: landlock::RulesetError| format!("cannot set up Landlock: {e}");
    let mut ruleset = Ruleset::default();
    if spec.filesystem {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(ABI_WANTED))
            .map_err(error)?;
    }
    ruleset = ruleset.scope(Scope::from_all(ABI_WANTED)).map_err(error)?;
    let mut created = ruleset.create().map_err(error)?;
    if spec.filesystem {
        let read = AccessFs::from_read(ABI_WANTED) | AccessFs::ResolveUnix;
        let write = AccessFs::from_all(ABI_WANTED);
        let device = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate | IoctlDev});
        let socket = BitFlags::from(AccessFs::ResolveUnix);
        if let Some(held) = held {
            let grants = held
                .system_read
                .iter()
                .map(|fd| (fd, read))
                .chain(held.devices.iter().map(|fd| (fd, device)));
            for (fd, access) in grants {
                created = created
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(error)?;
            }
        }
        let (system_read, devices): (&[_], &[_]) = match held {
            Some(_) => (&[], &[]),
            None => (&spec.system_read, &spec.devices),
        };
        let grants = system_read
            .iter()
            .chain(&spec.read)
            .map(|p| (p, read))
            .chain(spec.write.iter().map(|p| (p, write)))
            .chain(devices.iter().map(|p| (p, device)))
            .chain(spec.sockets.iter().map(|p| (p, socket)));
        for (path, access) in grants {
            let Ok(fd) = PathFd::new(path) else {
                continue;
            };
            // On a file, the crate keeps only the rights Landlock accepts
            // there (it reads the kind from the descriptor itself, so the
            // path is looked up once).
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(error)?;
        }
    }
    let status = created.restrict_self().map_err(error)?;
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi.unwrap_or(effective_abi as i32),
        _ => 0,
    };
    Ok((abi, status))
}
