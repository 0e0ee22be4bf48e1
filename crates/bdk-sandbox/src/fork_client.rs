//! The host's side of a fork server (see `fork_server.rs` for the other):
//! one socket to send requests on, and one thread that hands each reply to
//! the call it names.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};

use crate::call::{Call, Error};
use crate::protocol::{Confine, LAUNCHER_ARG, Reply, Request};

/// What a [`ForkServer`] reports about one call, in order: `Started` once,
/// then one of the others, last.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// The call's supervisor runs as this pid (a process group of its own).
    Started(u32),
    /// It ended: the program's status, or the launcher's own failure
    /// ([`crate::LAUNCHER_FAILED`], with its reason on the call's stderr).
    Exited(std::process::ExitStatus),
    /// It could not be started.
    Failed(String),
    /// The fork server went away before the call ended (its supervisor was
    /// killed with it).
    Lost,
}

/// The host's side of a fork server: starts programs contained, without a
/// launcher per call. Made by [`crate::Sandbox::fork_server`]; cheap to
/// clone (clones share the server). When the last clone goes, the fork
/// server stops whatever still runs and exits.
#[derive(Clone)]
pub struct ForkServer {
    shared: std::sync::Arc<Shared>,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

type Callback = Box<dyn FnMut(Event) + Send>;

struct Shared {
    socket: OwnedFd,
    /// What every call asks for beyond its grants (as the sandbox decided
    /// when it started this fork server).
    confine: Confine,
    next: std::sync::atomic::AtomicU64,
    calls: std::sync::Arc<std::sync::Mutex<CallTable>>,
}

/// The calls in flight, and whether the fork server still answers.
#[derive(Default)]
struct CallTable {
    waiting: std::collections::HashMap<u64, Callback>,
    gone: bool,
}

/// A call started through a [`ForkServer`], to stop it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallId(u64);

fn table(calls: &std::sync::Mutex<CallTable>) -> std::sync::MutexGuard<'_, CallTable> {
    // Every update leaves the table consistent.
    calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ForkServer {
    /// Starts the fork server of `launcher` with the system grants of
    /// `spec`.
    pub(crate) fn start(
        launcher: &std::path::Path,
        spec_json: String,
        confine: Confine,
    ) -> Result<Self, Error> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let launch = |source: std::io::Error| Error::Launch {
            launcher: launcher.to_path_buf(),
            source,
        };
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| launch(e.into()))?;
        let mut child = std::process::Command::new(launcher)
            .arg(LAUNCHER_ARG)
            .arg("serve")
            .arg(spec_json)
            .env_clear()
            // A group of its own: a terminal's Ctrl-C (SIGINT to the
            // foreground group) is for the host, which decides what to
            // stop, not for the fork server.
            .process_group(0)
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(launch)?;
        // Its first message says it runs; anything else (a launcher that
        // has no fork server, one that failed) is an error here, so the
        // caller can start a launcher per call instead.
        let ready = wait_ready(&ours);
        let reader = match ready.and_then(|()| ours.try_clone()) {
            Ok(reader) => reader,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::ForkServer(format!(
                    "{} did not start a fork server: {e}",
                    launcher.display()
                )));
            }
        };
        let calls = std::sync::Arc::new(std::sync::Mutex::new(CallTable::default()));
        let listening = calls.clone();
        let spawned = std::thread::Builder::new()
            .name("bdk-fork-server".to_owned())
            .spawn(move || listen(&reader, &listening, child));
        if let Err(e) = spawned {
            return Err(launch(e));
        }
        Ok(Self {
            shared: std::sync::Arc::new(Shared {
                socket: ours,
                confine,
                next: std::sync::atomic::AtomicU64::new(1),
                calls,
            }),
        })
    }

    /// True until the fork server is known to have gone.
    pub fn is_alive(&self) -> bool {
        !table(&self.shared.calls).gone
    }

    /// Starts `argv` (program and arguments) contained by `call`, with
    /// exactly `env`, in `cwd`, on `stdio` (its stdin, stdout and stderr).
    /// `on` hears what becomes of it, from the fork server's thread: first
    /// [`Event::Started`] (unless it fails at once), then its end.
    pub fn run(
        &self,
        call: &Call,
        argv: &[String],
        env: &[(String, String)],
        cwd: &std::path::Path,
        stdio: [OwnedFd; 3],
        on: impl FnMut(Event) + Send + 'static,
    ) -> Result<CallId, Error> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage};
        let id = self
            .shared
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request = Request::Run(Box::new(crate::protocol::Run {
            id,
            filesystem: call.filesystem,
            read: call.read.clone(),
            write: call.write.clone(),
            sockets: call.sockets.clone(),
            confine: self.shared.confine.clone(),
            argv: argv.to_vec(),
            env: env.to_vec(),
            cwd: cwd.to_path_buf(),
        }));
        for path in call.read.iter().chain(&call.write).chain(&call.sockets) {
            if path.to_str().is_none() {
                return Err(Error::NonUtf8Path(path.clone()));
            }
        }
        let bytes = serde_json::to_vec(&request).map_err(|e| self.broken(e.to_string()))?;
        {
            let mut calls = table(&self.shared.calls);
            if calls.gone {
                return Err(self.broken("the fork server has gone".to_owned()));
            }
            calls.waiting.insert(id, Box::new(on));
        }
        let fds = [stdio[0].as_fd(), stdio[1].as_fd(), stdio[2].as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        let sent = rustix::net::sendmsg(
            &self.shared.socket,
            &[std::io::IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        );
        if let Err(e) = sent {
            table(&self.shared.calls).waiting.remove(&id);
            return Err(self.broken(format!("cannot reach the fork server: {e}")));
        }
        Ok(CallId(id))
    }

    /// Asks the fork server to stop call `id` (the supervisor gets
    /// [`crate::STOP_SIGNAL`] and takes its PID namespace down). Does
    /// nothing once the call has ended.
    pub fn stop(&self, id: CallId) {
        if let Ok(bytes) = serde_json::to_vec(&Request::Stop { id: id.0 }) {
            let _ = rustix::net::send(&self.shared.socket, &bytes, SendFlags::NOSIGNAL);
        }
    }

    fn broken(&self, message: String) -> Error {
        Error::ForkServer(message)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The fork server reads end-of-file, stops what still runs and
        // exits; the listening thread then reads end-of-file too.
        let _ = rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Both);
    }
}

/// How long a new fork server may take to say it is ready.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits for the fork server's [`Reply::Ready`].
fn wait_ready(socket: &OwnedFd) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + READY_WITHIN;
    let mut buffer = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer in time",
            ));
        }
        let timeout = rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(socket, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let n = match rustix::net::recv(socket, &mut buffer[..], RecvFlags::empty()) {
            Ok((n, _)) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        return match buffer.get(..n).map(serde_json::from_slice::<Reply>) {
            Some(Ok(Reply::Ready)) => Ok(()),
            _ if n == 0 => Err(std::io::Error::other("it exited")),
            _ => Err(std::io::Error::other("it answered something else")),
        };
    }
}

/// The listening thread: hands each reply to its call, and when the fork
/// server goes, tells every call still waiting and reaps it.
fn listen(socket: &OwnedFd, calls: &std::sync::Mutex<CallTable>, mut child: std::process::Child) {
    use std::os::unix::process::ExitStatusExt;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match rustix::net::recv(socket, &mut buffer[..], RecvFlags::empty()) {
            Ok((n, _)) => n,
            Err(Errno::INTR) => continue,
            Err(_) => 0,
        };
        if n == 0 {
            break;
        }
        let Some(Ok(reply)) = buffer.get(..n).map(serde_json::from_slice::<Reply>) else {
            continue;
        };
        let (id, event, last) = match reply {
            Reply::Ready => continue,
            Reply::Started { id, pid } => (id, Event::Started(pid), false),
            Reply::Exited { id, status } => (
                id,
                Event::Exited(std::process::ExitStatus::from_raw(status)),
                true,
            ),
            Reply::Failed { id, message } => (id, Event::Failed(message), true),
        };
        // The callback runs outside the lock: it may start another call.
        let callback = table(calls).waiting.remove(&id);
        if let Some(mut callback) = callback {
            callback(event);
            if !last {
                table(calls).waiting.insert(id, callback);
            }
        }
    }
    let orphans: Vec<Callback> = {
        let mut calls = table(calls);
        calls.gone = true;
        calls
            .waiting
            .drain()
            .map(|(_, callback)| callback)
            .collect()
    };
    for mut callback in orphans {
        callback(Event::Lost);
    }
    let _ = child.wait();
}
