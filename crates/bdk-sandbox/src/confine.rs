//! Stage 2 of the launcher: the first process of the call's PID namespace.
//! It confines itself step by step, then starts the program as its only
//! child and stays as the namespace's init (see [`init`]).
//!
//! The order matters, and each step needs what the one before leaves:
//!
//! 1. join the call's cgroup and raise the OOM score, while it may still
//!    write `/proc` and the cgroup files;
//! 2. the read-only view (`view.rs`): a mount namespace, which needs the
//!    privileges the next step gives up;
//! 3. the user (`user.rs`) and capabilities: an unprivileged uid when the
//!    server is root, no capability otherwise;
//! 4. resource limits (`limits.rs`), after the user change, since
//!    `RLIMIT_NPROC` counts the processes of the new user;
//! 5. Landlock, which also sets `no_new_privs`;
//! 6. the system-call filter (`seccomp.rs`), last, since it refuses the
//!    mount calls of step 2.
//!
//! A probe runs every step it can, lets none of them fail, and prints what
//! held as a [`Support`] instead of starting a program.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use landlock::{
    ABI, Access, AccessFs, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use crate::cgroup::CallGroup;
use crate::protocol::{EXEC_FAILED_PREFIX, Spec, Support};
use crate::stage::{Held, Program, failed, fork_single_threaded};

/// The newest Landlock ABI whose rights this launcher asks for. Older
/// kernels silently grant less; [`Support`] says what held.
const ABI_WANTED: ABI = ABI::V9;

/// The signals the init passes on to the program (and `SIGCHLD`, which
/// it reaps on).
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Stage 2: confine this process, start the program and wait for it as
/// the namespace's init; its wait status goes to `status`. Returns this
/// process's exit status: 0 once the status is reported, the launcher's
/// failure status when a step fails.
pub(crate) fn stage_two(
    spec: &Spec,
    held: Option<&Held>,
    program: Program,
    probe: bool,
    group: Option<&CallGroup>,
    status: OwnedFd,
) -> u8 {
    // A fallback only: should the supervisor die without taking the
    // namespace down, this process (and with it the namespace) follows.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let confine = &spec.confine;
    // Tools, hooks and handlers get the whole containment; a program that
    // asked for the lifetime protections only (a long-lived MCP server,
    // which manages files of its own) keeps the filesystem and the user
    // it was started with.
    let whole = spec.filesystem;
    let mut support = Support {
        pid_namespace: std::process::id() == 1,
        ..Support::default()
    };

    if let Some(group) = group {
        match group.join() {
            Ok(()) => support.cgroup_limits = true,
            Err(message) if probe => drop(message),
            Err(message) => return failed(&message),
        }
    }
    if whole {
        // The kernel's OOM killer picks the program before anything else
        // of the machine (the server lowers its own score).
        let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    }

    let mut fresh_proc = false;
    if whole && (confine.view || probe) {
        let cwd = std::env::current_dir();
        match crate::view::enter(&spec.write) {
            Ok(fresh) => {
                fresh_proc = fresh;
                support.view = probe && crate::view::holds();
            }
            Err(message) if probe => drop(message),
            Err(message) => return failed(&message),
        }
        // The working directory was looked up before the view: enter it
        // again so relative paths go through the view's mounts (a
        // workspace stays writable).
        if let Ok(cwd) = cwd
            && let Err(e) = std::env::set_current_dir(&cwd)
        {
            return failed(&format!(
                "cannot enter the working directory {}: {e}",
                cwd.display()
            ));
        }
    }

    let privileges = match confine.user.filter(|_| whole) {
        Some(ids) => match crate::user::become_user(ids) {
            Ok(()) => {
                support.user = Some(true);
                crate::user::holds_only_read_search()
            }
            Err(message) if probe => {
                drop(message);
                support.user = Some(false);
                drop_capabilities()
            }
            Err(message) => return failed(&message),
        },
        None => drop_capabilities(),
    };

    if whole
        && !probe
        && let Err(message) = crate::limits::apply(
            &confine.limits,
            group.map_or((false, false), CallGroup::enforces),
            confine.user.is_some(),
        )
    {
        return failed(&message);
    }
    // A core dump of a crashing program would land in its working
    // directory, or go to a handler outside the sandbox.
    let _ = crate::limits::no_core_files();

    match landlock(spec, held, fresh_proc) {
        Ok((abi, status)) => {
            support.landlock_abi = abi;
            let enforced = status.ruleset != RulesetStatus::NotEnforced;
            support.filesystem = spec.filesystem && enforced;
            support.scoped = enforced && abi >= 6;
            support.privileges_dropped = privileges && status.no_new_privs;
        }
        Err(message) => return failed(&message),
    }

    if confine.seccomp || probe {
        let applied = match held.and_then(|h| h.filter.as_ref()) {
            Some(filter) => filter.apply(),
            None => crate::seccomp::Filter::build().and_then(|filter| filter.apply()),
        };
        match applied {
            Ok(()) => support.seccomp = probe && crate::seccomp::holds(),
            Err(message) if probe => drop(message),
            Err(message) => return failed(&message),
        }
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
    init(program, &status)
}

/// The namespace's init: starts the program as its child, passes the
/// stop signals on to it, reaps whatever else ends in the namespace, and
/// when the program ends writes its wait status to `status` and returns.
///
/// The program is not the namespace's first process because the kernel
/// treats that one specially: signals it sends itself with no handler
/// installed are dropped (so `kill -TERM $$` would do nothing), and a
/// crash could not be passed on as a death by signal, since an init
/// cannot die of one. As the init's child the program behaves as it would
/// anywhere else. Without a PID namespace the init is a subreaper, so
/// orphans of the program are reaped all the same.
fn init(program: Program, status: &OwnedFd) -> u8 {
    let _ = rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(
        rustix::process::getpid().as_raw_nonzero().get(),
    ));
    // Blocked signals are queued even for an init (the kernel drops only
    // those it would act on by default), so `wait` below sees them.
    let mut mask = SigSet::empty();
    for signal in FORWARDED {
        mask.add(signal);
    }
    mask.add(Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        return failed(&format!("cannot block signals: {e}"));
    }
    let child = match fork_single_threaded() {
        Ok(ForkResult::Child) => std::process::exit(exec(program)),
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => return failed(&format!("cannot start the program: {e}")),
    };
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Some(raw) = reap(child) {
                    report(status, raw);
                    return 0;
                }
            }
            Ok(signal) => {
                let _ = nix::sys::signal::kill(child, signal);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                return failed(&format!("cannot wait for signals: {e}"));
            }
        }
    }
}

/// Reaps every process that has ended; the program's raw wait status once
/// it is among them.
fn reap(program: Pid) -> Option<i32> {
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == program => {
                return Some((code & 0xff) << 8);
            }
            Ok(WaitStatus::Signaled(pid, signal, core)) if pid == program => {
                return Some(signal as i32 | if core { 0x80 } else { 0 });
            }
            Ok(WaitStatus::StillAlive) => return None,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // No child left, yet the program was not seen to end: cannot
            // happen (only this loop reaps), but must not spin.
            Err(_) => return Some(crate::protocol::LAUNCHER_FAILED << 8),
        }
    }
}

/// Writes the program's wait status for the supervisor.
fn report(status: &OwnedFd, raw: i32) {
    let bytes = raw.to_ne_bytes();
    let mut sent = 0;
    while sent < bytes.len() {
        match rustix::io::write(status, &bytes[sent..]) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// In the init's child: becomes the program. Returns the exit status when
/// it cannot (127 when it is not found, 126 otherwise).
fn exec(program: Program) -> i32 {
    // The program starts with no signal blocked, as programs expect.
    let _ = SigSet::empty().thread_set_mask();
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let mut argv = program.argv.into_iter();
    let Some(name) = argv.next() else {
        return i32::from(failed("no program to run"));
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
/// running as root without a user to give its programs runs them as an
/// ordinary uid 0 without root's powers. True when the process ends up
/// with none.
fn drop_capabilities() -> bool {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    crate::user::drop_bounding_except(CapabilitySet::empty());
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
fn landlock(
    spec: &Spec,
    held: Option<&Held>,
    fresh_proc: bool,
) -> Result<(i32, landlock::RestrictionStatus), String> {
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
        // A procfs mounted by the view is a filesystem of its own, which
        // the system's grants (opened before it) do not cover.
        let proc = std::path::PathBuf::from("/proc");
        let fresh = fresh_proc.then_some((&proc, read));
        for (path, access) in grants.chain(fresh) {
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
