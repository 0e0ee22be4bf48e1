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
use std::path::Path;
use std::process::ExitCode;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use crate::cgroup::CallGroup;
use crate::protocol::{LIMIT_PREFIX, Limits, Spec};
use crate::stage::{Held, Program, failed, fork_single_threaded};

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

fn fail(message: &str) -> ExitCode {
    ExitCode::from(failed(message))
}

fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for signal in WATCHED {
        set.add(signal);
    }
    set
}

/// Stage 1: make the call's cgroup and PID namespace, fork stage 2 (the
/// namespace's init, see `confine.rs`) as its first process, and take it
/// down on a stop signal or when the server dies.
///
/// Stage 2 is a `fork` of this process, not a new launcher: this process is
/// single-threaded (it runs before the host program starts anything), so the
/// child may run any code, and a second `exec` of the launcher binary (the
/// whole `bdk` program, when `bdk` is the launcher) would cost more than
/// everything else the sandbox does.
///
/// `held` holds the system grants already opened (a fork server's); the
/// policy's paths are opened otherwise. Returns the exit status: the
/// program's, or [`LAUNCHER_FAILED`]; a program killed by a signal is
/// passed on by dying of the same signal.
pub(crate) fn supervise(spec: &Spec, held: Option<&Held>, program: Program, probe: bool) -> u8 {
    // Block the stop signals first, so that from here on a stop waits for
    // the loop below instead of killing this process before it can take the
    // namespace down. Stage 2 keeps them blocked (its init waits for them);
    // the program starts with none blocked.
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
    // The call's cgroup comes first, so its limits hold from the first
    // instruction of the program; stage 2 joins it.
    let group = if spec.filesystem || probe {
        match CallGroup::create(
            &spec.confine.cgroups,
            &spec.confine.limits,
            &format!("call-{}", std::process::id()),
        ) {
            Ok(group) => group,
            Err(_) if probe => None,
            Err(message) => return failed(&message),
        }
    } else {
        None
    };
    let pid_namespace = match enter_pid_namespace() {
        Ok(entered) => entered,
        Err(message) => return failed(&message),
    };
    // Stage 2 reports the program's wait status here: as the namespace's
    // init it cannot die of the program's signal itself.
    let (status_read, status_write) =
        match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok(pipe) => pipe,
            Err(e) => return failed(&format!("cannot make the status pipe: {e}")),
        };
    let child = match fork_single_threaded() {
        Ok(ForkResult::Child) => {
            drop(status_read);
            let code =
                crate::confine::stage_two(spec, held, program, probe, group.as_ref(), status_write);
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::process::exit(i32::from(code));
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => return failed(&format!("cannot start the sandbox: {e}")),
    };
    drop(status_write);
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => {
                    let program = read_status(&status_read);
                    return finish(program, code, group, &spec.confine.limits);
                }
                Ok(WaitStatus::Signaled(_, signal, _)) => {
                    // The init itself was killed (by the kernel's OOM
                    // killer, say): what the program did is unknown.
                    let raw = signal as i32;
                    return finish(Some(raw), 0, group, &spec.confine.limits);
                }
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

/// The program's wait status as stage 2 reported it, if it did (a stage 2
/// that failed before starting the program reports nothing).
fn read_status(pipe: &std::os::fd::OwnedFd) -> Option<i32> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        match rustix::io::read(pipe, &mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    (got == bytes.len()).then(|| i32::from_ne_bytes(bytes))
}

/// Ends the supervisor the way the program ended (`program`, its wait
/// status), or with stage 2's own exit `code` when it never started one;
/// names the limit that ended the call, if one did.
fn finish(program: Option<i32>, code: i32, group: Option<CallGroup>, limits: &Limits) -> u8 {
    let Some(raw) = program else {
        return u8::try_from(code).unwrap_or(1);
    };
    let status = decode(raw);
    if !matches!(status, Ended::Exited(0)) {
        let signal = match status {
            Ended::Signaled(signal) => Some(signal),
            Ended::Exited(_) => None,
        };
        let mut reached = group.as_ref().map(CallGroup::reached).unwrap_or_default();
        reached.extend(crate::limits::reached_by_signal(limits, signal));
        if let Some(limit) = reached.first() {
            eprintln!("{LIMIT_PREFIX}{limit}");
        }
    }
    // The cgroup goes now: dying of the program's signal below skips
    // every destructor.
    drop(group);
    match status {
        Ended::Exited(code) => u8::try_from(code).unwrap_or(1),
        Ended::Signaled(signal) => die_like(signal),
    }
}

/// How the program ended, from a raw wait status.
enum Ended {
    Exited(i32),
    Signaled(Signal),
}

fn decode(raw: i32) -> Ended {
    let signal = raw & 0x7f;
    if signal == 0 {
        Ended::Exited((raw >> 8) & 0xff)
    } else {
        match Signal::try_from(signal) {
            Ok(signal) => Ended::Signaled(signal),
            Err(_) => Ended::Exited(128 + signal),
        }
    }
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
    // A core file of the supervisor would say nothing about the program,
    // and would land in the call's working directory.
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Core,
        rustix::process::Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    );
    let _ = SigSet::all().thread_unblock();
    // Twice: the first `SIGSEGV` or `SIGBUS` goes to the Rust runtime's
    // stack-overflow handler, which puts the default action back and
    // returns, expecting a fault to repeat (a raised signal does not).
    let _ = nix::sys::signal::raise(signal);
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
    // Mapping uid 0 into a new user namespace takes CAP_SETFCAP, which a
    // root launcher without capabilities (a `bdk` inside another's
    // sandbox) lacks: the namespace would be made, then fail its maps.
    if uid.is_root() && !has_effective(rustix::thread::CapabilitySet::SETFCAP) {
        return Ok(false);
    }
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

/// True when this process holds `capability` in its effective set.
fn has_effective(capability: rustix::thread::CapabilitySet) -> bool {
    rustix::thread::capabilities(None).is_ok_and(|sets| sets.effective.contains(capability))
}
