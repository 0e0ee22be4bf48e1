//! The fork server: one long-lived launcher per sandbox that starts every
//! call by `fork` instead of a new launcher per call.
//!
//! A launcher started per call costs an `exec` of the launcher, its start-up
//! and an `open` of every system grant, each time: about half of what a
//! contained call costs (see `docs/design/tool-launch.md`). A fork server is
//! the launcher's `serve` stage: it opens the system grants once and then,
//! for every request the host sends, forks a supervisor that does exactly
//! what a launcher's `run` stage does (PID namespace, Landlock, no
//! privileges, `exec` of the program), with the held grants instead of
//! opening them again.
//!
//! The host and the fork server talk over a `SOCK_SEQPACKET` socket pair:
//! the fork server's end is its stdin. Each message is one JSON object. A
//! [`Request::Run`] carries the program's stdin, stdout and stderr as
//! `SCM_RIGHTS`; the fork server answers [`Reply::Started`] with the
//! supervisor's pid, then [`Reply::Exited`] with its wait status once it has
//! reaped it (it watches each supervisor through a pidfd, so it needs no
//! signal handler). [`Request::Stop`] sends the supervisor the stop signal,
//! only while it is the fork server's own unreaped child, so a recycled pid
//! is never hit. When the host goes (its end of the socket closes, which a
//! `kill -9` of the host does too), the fork server stops every supervisor,
//! reaps them and exits; should the fork server itself die, every
//! supervisor gets its parent-death signal and takes its namespace down.

use std::ffi::OsString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags};

use crate::launcher::{spec_of, supervise};
use crate::protocol::{Reply, Request, STOP_SIGNAL, Spec};
use crate::stage::{Held, Program, failed, fork_single_threaded};

/// The longest request the fork server reads; a longer one is refused.
pub(crate) const MAX_MESSAGE: usize = 1 << 20;

/// A supervisor the fork server started and has not reaped yet.
struct Running {
    id: u64,
    pid: Pid,
    /// Readable once the supervisor has exited.
    pidfd: OwnedFd,
}

/// What one receive brought.
enum Received {
    Request(Request, Vec<OwnedFd>),
    /// The host closed its end.
    Closed,
    /// A message that is not a request (or too long); answered with
    /// nothing, since it names no call.
    Invalid(String),
}

/// The launcher's `serve` stage: `args` are the arguments after
/// [`LAUNCHER_ARG`](crate::LAUNCHER_ARG), `serve` and the policy.
pub(crate) fn main(args: Vec<OsString>) -> std::process::ExitCode {
    let code = match spec_of(args.into_iter().nth(1)) {
        Ok(spec) => serve(&spec),
        Err(code) => code,
    };
    std::process::ExitCode::from(code)
}

/// The `serve` stage: `spec` holds the system grants; the socket to the
/// host is stdin. Returns the exit status once the host has gone.
fn serve(spec: &Spec) -> u8 {
    let parent = nix::unistd::getppid().as_raw();
    if u32::try_from(parent).ok() != Some(spec.parent) {
        return failed("the process that started the fork server is gone");
    }
    let socket = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(socket) => socket,
        Err(e) => return failed(&format!("fork server: no socket on stdin: {e}")),
    };
    // Supervisors get their own stdin; nothing may inherit the socket as 0.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
    }
    close_inherited(&socket);
    let held = Held::open(spec);
    reply(&socket, &Reply::Ready);
    let mut running: Vec<Running> = Vec::new();
    let mut buffer = vec![0u8; MAX_MESSAGE];
    loop {
        let (socket_ready, ended) = {
            let mut fds = Vec::with_capacity(1 + running.len());
            fds.push(PollFd::new(&socket, PollFlags::IN));
            fds.extend(running.iter().map(|r| PollFd::new(&r.pidfd, PollFlags::IN)));
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => {
                    shut_down(&mut running);
                    return failed(&format!("fork server: cannot wait: {e}"));
                }
            }
            let ended: Vec<u64> = fds[1..]
                .iter()
                .zip(&running)
                .filter(|(fd, _)| !fd.revents().is_empty())
                .map(|(_, r)| r.id)
                .collect();
            (!fds[0].revents().is_empty(), ended)
        };
        for id in ended {
            if let Some(at) = running.iter().position(|r| r.id == id) {
                let ended = running.swap_remove(at);
                let status = reap(ended.pid);
                reply(&socket, &Reply::Exited { id, status });
            }
        }
        if !socket_ready {
            continue;
        }
        match receive(&socket, &mut buffer) {
            Received::Request(Request::Run(run), fds) => {
                if let Some(child) = start(&socket, &mut running, *run, fds) {
                    // The supervisor keeps nothing of the fork server's:
                    // the socket and the other supervisors' pidfds close
                    // here.
                    drop(socket);
                    running.clear();
                    drop(buffer);
                    let code = child.supervise(&held);
                    std::process::exit(i32::from(code));
                }
            }
            Received::Request(Request::Stop { id }, _) => {
                if let Some(r) = running.iter().find(|r| r.id == id) {
                    let signal = Signal::try_from(STOP_SIGNAL).unwrap_or(Signal::SIGTERM);
                    let _ = nix::sys::signal::kill(r.pid, signal);
                }
            }
            Received::Invalid(why) => eprintln!("bdk-sandbox: fork server: {why}"),
            Received::Closed => {
                shut_down(&mut running);
                return 0;
            }
        }
    }
}

/// What a forked supervisor goes on with.
struct Child {
    spec: Spec,
    stdio: [OwnedFd; 3],
    cwd: PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

/// Closes every descriptor this process inherited beyond stdin, stdout,
/// stderr and `keep`. The host may hold descriptors without close-on-exec
/// (a pipe a thread waits on for its hang-up, say); a fork server lives as
/// long as the host and would keep them open for good, and would pass them
/// on to every supervisor.
fn close_inherited(keep: &OwnedFd) {
    use std::os::fd::AsRawFd;
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && fd != keep.as_raw_fd() {
            // The directory's own descriptor is among them, closed already:
            // EBADF, nothing to do.
            let _ = nix::unistd::close(fd);
        }
    }
}

/// Forks a supervisor for `run` and says so to the host. Returns the
/// supervisor's work in the forked child, `None` in the fork server.
fn start(
    socket: &OwnedFd,
    running: &mut Vec<Running>,
    run: crate::protocol::Run,
    fds: Vec<OwnedFd>,
) -> Option<Child> {
    let id = run.id;
    let Ok(stdio) = <[OwnedFd; 3]>::try_from(fds) else {
        reply(
            socket,
            &Reply::Failed {
                id,
                message: "a run request must carry stdin, stdout and stderr".to_owned(),
            },
        );
        return None;
    };
    let spec = Spec {
        parent: std::process::id(),
        filesystem: run.filesystem,
        read: run.read,
        write: run.write,
        sockets: run.sockets,
        confine: run.confine,
        ..Spec::default()
    };
    match fork_single_threaded() {
        Ok(ForkResult::Child) => {
            return Some(Child {
                spec,
                stdio,
                cwd: run.cwd,
                argv: run.argv,
                env: run.env,
            });
        }
        Ok(ForkResult::Parent { child }) => {
            drop(stdio);
            let pidfd = rustix::process::Pid::from_raw(child.as_raw())
                .ok_or(Errno::SRCH)
                .and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                });
            match pidfd {
                Ok(pidfd) => {
                    running.push(Running {
                        id,
                        pid: child,
                        pidfd,
                    });
                    let pid = u32::try_from(child.as_raw()).unwrap_or(0);
                    reply(socket, &Reply::Started { id, pid });
                }
                Err(e) => {
                    // Without a pidfd the end could not be seen: take it
                    // down now rather than leave it unwatched.
                    let _ = nix::sys::signal::kill(child, Signal::SIGTERM);
                    let _ = waitpid(child, None);
                    reply(
                        socket,
                        &Reply::Failed {
                            id,
                            message: format!("cannot watch the program: {e}"),
                        },
                    );
                }
            }
        }
        Err(e) => reply(
            socket,
            &Reply::Failed {
                id,
                message: format!("cannot start the sandbox: {e}"),
            },
        ),
    }
    None
}

impl Child {
    /// In the forked child: takes the call's stdio, process group and
    /// working directory, then supervises the program as a launcher's `run`
    /// stage does, with the held grants.
    fn supervise(self, held: &Held) -> u8 {
        let [stdin, stdout, stderr] = self.stdio;
        let stdio = nix::unistd::dup2_stdin(&stdin)
            .and_then(|()| nix::unistd::dup2_stdout(&stdout))
            .and_then(|()| nix::unistd::dup2_stderr(&stderr));
        drop((stdin, stdout, stderr));
        if let Err(e) = stdio {
            return failed(&format!("cannot take the program's stdio: {e}"));
        }
        // A group of its own, as a launcher started per call gets, so the host
        // can sweep what is left of it.
        if let Err(e) = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
            return failed(&format!("cannot make a process group: {e}"));
        }
        if let Err(e) = std::env::set_current_dir(&self.cwd) {
            return failed(&format!(
                "cannot enter the working directory {}: {e}",
                self.cwd.display()
            ));
        }
        let program = Program {
            argv: self.argv.into_iter().map(OsString::from).collect(),
            env: Some(self.env),
        };
        supervise(&self.spec, Some(held), program, false)
    }
}

/// Reaps a supervisor that has exited: its wait status, as `waitpid`
/// reports it (exit code in bits 8-15, or the signal in bits 0-6).
fn reap(pid: Pid) -> i32 {
    loop {
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, code)) => return (code & 0xff) << 8,
            Ok(WaitStatus::Signaled(_, signal, core)) => {
                return signal as i32 | if core { 0x80 } else { 0 };
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // Not ours any more (cannot happen: only this loop reaps).
            Err(_) => return (crate::protocol::LAUNCHER_FAILED & 0xff) << 8,
        }
    }
}

/// Stops every supervisor still running and reaps it.
fn shut_down(running: &mut Vec<Running>) {
    for r in running.iter() {
        let _ = nix::sys::signal::kill(r.pid, Signal::SIGTERM);
    }
    for r in running.drain(..) {
        let _ = reap(r.pid);
    }
}

/// Sends `message` to the host; a host that has gone is noticed on the next
/// receive.
fn reply(socket: &OwnedFd, message: &Reply) {
    if let Ok(bytes) = serde_json::to_vec(message) {
        let _ = rustix::net::send(socket, &bytes, SendFlags::NOSIGNAL);
    }
}

/// Receives one message with the descriptors it carries.
fn receive(socket: &OwnedFd, buffer: &mut [u8]) -> Received {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let received = loop {
        match rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => {}
            other => break other,
        }
    };
    let message = match received {
        Ok(message) => message,
        // The host's end is gone or broken: either way no more requests.
        Err(_) => return Received::Closed,
    };
    let mut fds = Vec::new();
    for item in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = item {
            fds.extend(rights);
        }
    }
    if message.bytes == 0 && fds.is_empty() {
        return Received::Closed;
    }
    if message
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Received::Invalid(format!(
            "a request longer than {MAX_MESSAGE} bytes or with too many descriptors"
        ));
    }
    let Some(bytes) = iov[0].get(..message.bytes) else {
        return Received::Invalid("a request longer than its buffer".to_owned());
    };
    match serde_json::from_slice(bytes) {
        Ok(request) => Received::Request(request, fds),
        Err(e) => Received::Invalid(format!("a request that does not parse: {e}")),
    }
}
