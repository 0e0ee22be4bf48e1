//! How the runtime runs a program: [`run_process`] starts it from a
//! [`ProcessSpec`] (directly, or through the sandbox launcher), in a process
//! group of its own, with capped and concurrently drained output, a timeout
//! and cancellation, and makes sure no process of its tree outlives the run.
//!
//! A leaf shared by the programs the host runs ([`crate::containment`]'s
//! `Containment::run`), manifest command tools and the built-in shell
//! ([`crate::tool`]), so neither has to reach into the other for it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use bdk_sandbox::Sandbox;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// How much of a tool's stderr is kept for error messages: the end, where the
/// reason for a failure usually is.
pub(crate) const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// How long to wait for a killed process to be reaped before leaving it to
/// tokio's orphan reaper. SIGKILL cannot be caught, so this only matters for a
/// process stuck in uninterruptible I/O.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// `TMPDIR` (and the names other runtimes read) pointing at a program's
/// own temp dir: the system's temp dirs are closed to contained programs.
pub(crate) fn temp_env(dir: &Path) -> Vec<(String, String)> {
    let dir = dir.to_string_lossy().into_owned();
    ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|k| (k.to_owned(), dir.clone()))
        .collect()
}

/// What to run, for [`run_process`].
pub(crate) struct ProcessSpec {
    /// The program (a path, or a bare name looked up on PATH).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The whole environment: the program starts from an empty one.
    pub env: Vec<(String, String)>,
    /// Bytes written to stdin before it is closed; `None` connects stdin to
    /// `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Stdout beyond this many bytes kills the process.
    pub max_stdout: usize,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Run through this sandbox with this policy; `None` runs the program
    /// directly.
    pub sandbox: Option<(Sandbox, bdk_sandbox::Call)>,
}

/// The end of the last [`STDERR_TAIL_BYTES`] of stderr.
pub(crate) struct Tail {
    /// The kept bytes.
    pub bytes: Vec<u8>,
    /// True when earlier output was dropped.
    pub dropped: bool,
}

impl Tail {
    /// The tail as trimmed text, marked when it was cut.
    pub fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        let text = text.trim();
        if self.dropped && !text.is_empty() {
            format!("...{text}")
        } else {
            text.to_owned()
        }
    }
}

/// How a process run ended.
pub(crate) enum ProcessEnd {
    /// It exited on its own (any status).
    Exited {
        status: ExitStatus,
        stdout: Vec<u8>,
        stderr: Tail,
    },
    /// The timeout fired; the group was killed.
    TimedOut,
    /// The cancellation token fired; the group was killed.
    Cancelled,
    /// Stdout passed the cap; the group was killed. `head` holds the first
    /// `max_stdout` bytes.
    OutputExceeded { head: Vec<u8> },
    /// A resource limit of the sandbox ended the program: `limit` names
    /// it (`memory limit of 1 GiB`).
    LimitReached { limit: String },
    /// The program could not be started.
    SpawnFailed(io::Error),
    /// Talking to the process failed.
    Failed(io::Error),
}

/// Why a run stopped early.
enum Stop {
    TimedOut,
    Cancelled,
    OutputExceeded(Vec<u8>),
    Io(io::Error),
}

/// Stops a program's whole process tree; on drop too, so a call future
/// dropped mid-run (its caller gave up) still takes the tree down with it.
///
/// A program started directly leads a process group of its own, which gets
/// SIGKILL. A program started through the sandbox launcher is stopped by
/// sending the launcher [`bdk_sandbox::STOP_SIGNAL`]: the launcher then
/// kills the program's PID namespace, detached processes included; one
/// started by the sandbox's fork server is stopped by asking the fork
/// server, which sends its supervisor the same signal. The launcher's (or
/// supervisor's) own group is swept with SIGKILL once it has exited.
struct GroupGuard {
    /// The group leader: the program, the launcher or the supervisor.
    pid: Option<rustix::process::Pid>,
    halt: Halt,
    armed: bool,
}

/// How a [`GroupGuard`] stops its tree.
enum Halt {
    /// SIGKILL to the program's group.
    Group,
    /// The stop signal to the launcher.
    Launcher,
    /// A stop request to the fork server.
    Forked(bdk_sandbox::ForkServer, bdk_sandbox::CallId),
}

impl GroupGuard {
    fn new(pid: Option<u32>, halt: Halt) -> Self {
        Self {
            pid: pid
                .and_then(|p| i32::try_from(p).ok())
                .and_then(rustix::process::Pid::from_raw),
            halt,
            armed: true,
        }
    }

    /// Asks the tree to go: SIGTERM to a launcher, SIGKILL to a plain group.
    fn stop(&self) {
        if !self.armed {
            return;
        }
        // ESRCH (already gone) is the common case after a clean exit and
        // needs no handling.
        match (&self.halt, self.pid) {
            (Halt::Forked(server, id), _) => server.stop(*id),
            (Halt::Launcher, Some(pid)) => {
                let signal = rustix::process::Signal::from_named_raw(bdk_sandbox::STOP_SIGNAL)
                    .unwrap_or(rustix::process::Signal::TERM);
                let _gone = rustix::process::kill_process(pid, signal);
            }
            (Halt::Group, Some(pid)) => {
                let _gone = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            (_, None) => {}
        }
    }

    /// SIGKILLs whatever is left in the group, once its leader is reaped (or
    /// will not stop).
    fn sweep(&self) {
        if let (true, Some(pid)) = (self.armed, self.pid) {
            let _gone = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // A launcher must get the chance to take its namespace down: a
        // SIGKILL now would beat its handling of the stop.
        self.stop();
    }
}

/// The process a run waits for: its own child (the program, or the
/// launcher), or a supervisor of the sandbox's fork server.
enum Leader {
    Child(tokio::process::Child),
    Forked {
        events: tokio::sync::mpsc::UnboundedReceiver<bdk_sandbox::Event>,
        /// The end, once heard (waiting again returns it again).
        ended: Option<Result<ExitStatus, String>>,
    },
}

impl Leader {
    /// Waits for the leader to end (cancel-safe, and repeatable).
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        let (events, ended) = match self {
            Leader::Child(child) => return child.wait().await,
            Leader::Forked { events, ended } => (events, ended),
        };
        while ended.is_none() {
            *ended = match events.recv().await {
                Some(bdk_sandbox::Event::Exited(status)) => Some(Ok(status)),
                Some(bdk_sandbox::Event::Failed(message)) => Some(Err(message)),
                Some(bdk_sandbox::Event::Lost) | None => {
                    Some(Err("the sandbox's fork server went away".to_owned()))
                }
                Some(_) => None,
            };
        }
        match ended {
            Some(Ok(status)) => Ok(*status),
            Some(Err(message)) => Err(io::Error::other(message.clone())),
            None => Err(io::Error::other("the program's end was not heard")),
        }
    }
}

/// A started run: who to wait for, how to stop it, its pipes.
struct Launched {
    leader: Leader,
    group: GroupGuard,
    stdin: Option<Box<dyn tokio::io::AsyncWrite + Unpin + Send>>,
    stdout: Box<dyn AsyncRead + Unpin + Send>,
    stderr: Box<dyn AsyncRead + Unpin + Send>,
}

/// Starts `spec` through the sandbox's fork server. `Ok(None)` when there
/// is no fork server to use (the caller then starts a launcher per call);
/// `Err` when the fork server took the call but could not start it.
async fn start_forked(
    sandbox: &Sandbox,
    call: &bdk_sandbox::Call,
    spec: &ProcessSpec,
) -> Result<Option<Launched>, ProcessEnd> {
    // A running one at once; starting one waits for its "ready", which is
    // for the blocking pool, not a runtime thread.
    let server = match sandbox.running_fork_server() {
        Some(server) => server,
        None => {
            let sandbox = sandbox.clone();
            match tokio::task::spawn_blocking(move || sandbox.shared_fork_server()).await {
                Ok(Ok(server)) => server,
                _ => return Ok(None),
            }
        }
    };
    let Some(program) = spec.program.to_str() else {
        return Err(ProcessEnd::Failed(io::Error::other(format!(
            "the program path {} is not valid UTF-8",
            spec.program.display()
        ))));
    };
    let pipes = (|| {
        let stdin = match spec.stdin {
            Some(_) => {
                let (child, host) = std::io::pipe()?;
                (std::os::fd::OwnedFd::from(child), Some(host))
            }
            None => (std::fs::File::open("/dev/null")?.into(), None),
        };
        let (stdout_host, stdout_child) = std::io::pipe()?;
        let (stderr_host, stderr_child) = std::io::pipe()?;
        Ok::<_, io::Error>((
            stdin,
            (stdout_host, stdout_child),
            (stderr_host, stderr_child),
        ))
    })();
    let ((stdin_child, stdin_host), (stdout_host, stdout_child), (stderr_host, stderr_child)) =
        match pipes {
            Ok(pipes) => pipes,
            Err(e) => return Err(ProcessEnd::Failed(e)),
        };
    let (tell, mut events) = tokio::sync::mpsc::unbounded_channel();
    let argv: Vec<String> = std::iter::once(program.to_owned())
        .chain(spec.args.iter().cloned())
        .collect();
    let id = match server.run(
        call,
        &argv,
        &spec.env,
        &spec.cwd,
        [stdin_child, stdout_child.into(), stderr_child.into()],
        move |event| {
            let _gone = tell.send(event);
        },
    ) {
        Ok(id) => id,
        // Gone between the check and the call: a launcher per call will do.
        Err(_) => return Ok(None),
    };
    // From here the call exists: a drop stops it.
    let mut group = GroupGuard::new(None, Halt::Forked(server, id));
    let pid = match events.recv().await {
        Some(bdk_sandbox::Event::Started(pid)) => pid,
        Some(bdk_sandbox::Event::Failed(message)) => {
            group.disarm();
            return Err(ProcessEnd::Failed(io::Error::other(format!(
                "the sandbox could not start the program: {message}"
            ))));
        }
        _ => {
            group.disarm();
            return Err(ProcessEnd::Failed(io::Error::other(
                "the sandbox's fork server went away",
            )));
        }
    };
    group.pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    let host = (|| {
        let stdin = match stdin_host {
            Some(pipe) => Some(
                Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(pipe.into())?)
                    as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
            ),
            None => None,
        };
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_host.into())?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_host.into())?;
        Ok::<_, io::Error>((stdin, stdout, stderr))
    })();
    match host {
        Ok((stdin, stdout, stderr)) => Ok(Some(Launched {
            leader: Leader::Forked {
                events,
                ended: None,
            },
            group,
            stdin,
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
        })),
        // The guard stops the call as it goes.
        Err(e) => Err(ProcessEnd::Failed(e)),
    }
}

/// Starts `spec` as a child of this process: the program itself, or a
/// launcher per call when `wrapped` names one.
fn start_child(
    spec: &ProcessSpec,
    wrapped: Option<bdk_sandbox::Wrapped>,
) -> Result<Launched, ProcessEnd> {
    let launcher = wrapped.is_some();
    let (program, args): (PathBuf, Vec<std::ffi::OsString>) = match wrapped {
        Some(wrapped) => (wrapped.program, wrapped.args),
        None => (
            spec.program.clone(),
            spec.args.iter().map(std::ffi::OsString::from).collect(),
        ),
    };
    let mut command = tokio::process::Command::new(&program);
    command
        .args(&args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A launcher is stopped by the guard's signal; a SIGKILL on drop
        // would leave its namespace to the fallback.
        .kill_on_drop(!launcher)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if launcher => {
            return Err(ProcessEnd::Failed(io::Error::other(format!(
                "cannot start the sandbox launcher {}: {e}",
                program.display()
            ))));
        }
        Err(e) => return Err(ProcessEnd::SpawnFailed(e)),
    };
    // The child leads its own group, so its pid is the group id.
    let group = GroupGuard::new(
        child.id(),
        if launcher {
            Halt::Launcher
        } else {
            Halt::Group
        },
    );
    let stdin = child
        .stdin
        .take()
        .map(|pipe| Box::new(pipe) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        group.stop();
        return Err(ProcessEnd::Failed(io::Error::other(
            "child process pipes are missing",
        )));
    };
    Ok(Launched {
        leader: Leader::Child(child),
        group,
        stdin,
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
    })
}

/// Runs a process in a new process group (through the sandbox when the
/// spec has one: its fork server, or a launcher per call) with capped,
/// concurrently drained output, a timeout and cancellation, and makes sure
/// no process of its tree survives the call.
pub(crate) async fn run_process(spec: ProcessSpec, cancel: &CancellationToken) -> ProcessEnd {
    if cancel.is_cancelled() {
        return ProcessEnd::Cancelled;
    }
    let contained = spec.sandbox.is_some();
    let launched = match &spec.sandbox {
        Some((sandbox, call)) => match start_forked(sandbox, call, &spec).await {
            Ok(Some(launched)) => Ok(launched),
            Ok(None) => match sandbox.wrap(call, &spec.program, &spec.args) {
                Ok(wrapped) => start_child(&spec, Some(wrapped)),
                Err(e) => Err(ProcessEnd::Failed(io::Error::other(e.to_string()))),
            },
            Err(end) => Err(end),
        },
        None => start_child(&spec, None),
    };
    let Launched {
        leader: mut child,
        group,
        stdin,
        stdout,
        stderr,
    } = match launched {
        Ok(launched) => launched,
        Err(end) => return end,
    };
    let launcher = contained;
    let input = spec.stdin;
    let max_stdout = spec.max_stdout;
    let io = async move {
        let feed = async move {
            if let (Some(mut pipe), Some(bytes)) = (stdin, input) {
                // A tool that never reads its request closes the pipe: that
                // is its business, not a failure.
                if let Err(e) = pipe.write_all(&bytes).await
                    && e.kind() != io::ErrorKind::BrokenPipe
                {
                    tracing::debug!(error = %e, "writing the tool request failed");
                }
            }
            Ok::<(), Stop>(())
        };
        let tail = async move { Ok::<Tail, Stop>(read_tail(stderr, STDERR_TAIL_BYTES).await) };
        let ((), out, err) = tokio::try_join!(feed, read_capped(stdout, max_stdout), tail)?;
        Ok::<(Vec<u8>, Tail), Stop>((out, err))
    };

    let work = async {
        tokio::pin!(io);
        enum First {
            Drained(Result<(Vec<u8>, Tail), Stop>),
            Exited(io::Result<ExitStatus>),
        }
        let first = tokio::select! {
            drained = &mut io => First::Drained(drained),
            status = child.wait() => First::Exited(status),
        };
        match first {
            First::Drained(drained) => {
                // Both pipes are closed, but the leader may still be running
                // (it can close stdout and carry on): wait for it.
                let (out, err) = drained?;
                let status = child.wait().await.map_err(Stop::Io)?;
                Ok((status, out, err))
            }
            First::Exited(status) => {
                // The leader is done. Anything left in its group (background
                // jobs holding the pipes open) goes now, which also lets the
                // pipes reach end-of-file.
                let status = status.map_err(Stop::Io)?;
                group.sweep();
                let (out, err) = io.await?;
                Ok((status, out, err))
            }
        }
    };

    let outcome = tokio::select! {
        result = work => result,
        () = tokio::time::sleep(spec.timeout) => Err(Stop::TimedOut),
        () = cancel.cancelled() => Err(Stop::Cancelled),
    };

    match outcome {
        Ok((status, stdout, stderr)) => {
            // After a clean exit this only sweeps up leftovers; the leader is
            // reaped by then, but a group id stays reserved while any member
            // lives, so the signal cannot reach a stranger unless the group
            // emptied and its id was recycled in the microseconds since.
            group.sweep();
            group.disarm();
            if launcher && let Some(end) = launcher_failure(status, &stderr) {
                return end;
            }
            ProcessEnd::Exited {
                status,
                stdout,
                stderr,
            }
        }
        Err(stop) => {
            // Stop the tree while the leader is still unreaped, then reap it
            // so no zombie is left. A launcher that does not go within the
            // grace gets SIGKILL with its group.
            group.stop();
            let reaped = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            if launcher && !matches!(reaped, Ok(Ok(_))) {
                group.sweep();
                let _reaped = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            }
            group.sweep();
            group.disarm();
            match stop {
                Stop::TimedOut => ProcessEnd::TimedOut,
                Stop::Cancelled => ProcessEnd::Cancelled,
                Stop::OutputExceeded(head) => ProcessEnd::OutputExceeded { head },
                Stop::Io(e) => ProcessEnd::Failed(e),
            }
        }
    }
}

/// How a launcher run ended when it was the launcher, not the program, that
/// failed or had the last word: the program could not be executed
/// (reported like a failed spawn), the sandbox could not be set up, or a
/// resource limit ended the program.
fn launcher_failure(status: ExitStatus, stderr: &Tail) -> Option<ProcessEnd> {
    let text = String::from_utf8_lossy(&stderr.bytes);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with(bdk_sandbox::ERROR_PREFIX))?;
    if let Some(limit) = line.strip_prefix(bdk_sandbox::LIMIT_PREFIX)
        && !status.success()
    {
        return Some(ProcessEnd::LimitReached {
            limit: limit.trim().to_owned(),
        });
    }
    match status.code() {
        Some(126 | 127) if line.starts_with(bdk_sandbox::EXEC_FAILED_PREFIX) => {
            // `bdk-sandbox: cannot execute `prog`: <error> (os error N)`
            let error = line
                .rsplit_once("(os error ")
                .and_then(|(_, n)| n.trim_end_matches(')').parse::<i32>().ok())
                .map_or_else(
                    || io::Error::other(line.to_owned()),
                    io::Error::from_raw_os_error,
                );
            Some(ProcessEnd::SpawnFailed(error))
        }
        Some(code) if code == bdk_sandbox::LAUNCHER_FAILED => {
            Some(ProcessEnd::Failed(io::Error::other(format!(
                "the sandbox could not start the program: {}",
                line.trim_start_matches(bdk_sandbox::ERROR_PREFIX)
            ))))
        }
        _ => None,
    }
}

/// Reads stdout to the end, stopping with [`Stop::OutputExceeded`] as soon as
/// it passes `max` bytes.
async fn read_capped(mut reader: impl AsyncRead + Unpin, max: usize) -> Result<Vec<u8>, Stop> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = reader.read(&mut chunk).await.map_err(Stop::Io)?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max {
            let take = max - out.len();
            out.extend_from_slice(&chunk[..take]);
            return Err(Stop::OutputExceeded(out));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Reads a stream to the end, keeping only its last `keep` bytes.
async fn read_tail(mut reader: impl AsyncRead + Unpin, keep: usize) -> Tail {
    let mut buf = Vec::new();
    let mut dropped = false;
    let mut chunk = vec![0u8; 8 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            // A read error on stderr only costs diagnostics; stop reading.
            Ok(0) | Err(_) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                // Trim in batches so a chatty stderr is not copied per read.
                if buf.len() > 2 * keep {
                    buf.drain(..buf.len() - keep);
                    dropped = true;
                }
            }
        }
    }
    if buf.len() > keep {
        buf.drain(..buf.len() - keep);
        dropped = true;
    }
    Tail {
        bytes: buf,
        dropped,
    }
}
