//! How the host runs the programs an agent declares: command tools, the
//! `shell` built-in and command hooks (and, through `Host::containment`,
//! the channels' command deliveries).
//!
//! Every program starts from an empty environment plus an allowlist
//! ([`bdk_sandbox::env`]), the variables the agent passes through
//! (`[sandbox] env`, a tool's `env = ["NAME"]`) and its own per-call
//! variables: none of the server's secrets reach it. When the host has a
//! [`Sandbox`] and the agent leaves it on, the program also runs contained
//! (Landlock, a PID namespace of its own, no privileges; see
//! [`bdk_sandbox`]): it reads the system and its own folder, writes its
//! workspace and a temp dir of its own, and cannot outlive its call. A host
//! built without a sandbox (an embedder that gave no launcher) runs
//! programs uncontained and says so once in the log.
//!

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use bdk_sandbox::{CgroupDirs, Ids, Limits, Sandbox, Support, cgroup, run_if_launcher, user};
use tokio_util::sync::CancellationToken;

use crate::process::{self, ProcessEnd, ProcessSpec};
use crate::scratch::{ScratchDir, ScratchPool};
use bdk_project::{SandboxConfig, SandboxMode};

/// A program the host runs once on an author's behalf (a channel's command
/// delivery, a handler): one input on stdin, a bounded stdout.
#[derive(Clone, Debug)]
pub struct Program {
    /// Program and arguments (a bare name is looked up on `PATH`).
    pub argv: Vec<String>,
    /// Its working directory, which it may also read (its own folder).
    pub cwd: PathBuf,
    /// More folders it may read (the agent's `lib/`).
    pub read: Vec<PathBuf>,
    /// Written to its stdin, which is then closed.
    pub stdin: Vec<u8>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
    /// Stdout beyond this many bytes stops it.
    pub max_stdout: usize,
    /// Wall-clock limit.
    pub timeout: Duration,
}

/// How a [`Program`] ended.
#[derive(Debug)]
pub enum ProgramEnd {
    /// It exited on its own, with this status.
    Exited {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its stdout.
        stdout: Vec<u8>,
        /// The end of its stderr, trimmed.
        stderr: String,
    },
    /// It ran past its timeout and was stopped with everything it started.
    TimedOut,
    /// It wrote more than `max_stdout` bytes and was stopped.
    OutputExceeded,
    /// It could not be started.
    SpawnFailed(std::io::Error),
    /// Running it failed (the sandbox, its pipes).
    Failed(std::io::Error),
    /// The cancellation token fired; it was stopped.
    Cancelled,
    /// A resource limit of the sandbox stopped it (`memory limit of 1 GiB`).
    LimitReached(String),
}

/// The containment of one host's programs.
#[derive(Clone, Debug)]
pub struct Containment {
    sandbox: Option<Sandbox>,
    config: SandboxConfig,
    /// The server's environment as it was when the containment was made
    /// (its UTF-8 variables): every program's variables are picked from
    /// it, rather than from a fresh copy of the whole environment per
    /// program.
    environment: Arc<Vec<(String, String)>>,
    /// Temp dirs of finished runs, kept for the next ones (see
    /// [`crate::scratch`]).
    scratch: Arc<ScratchPool>,
}

impl Default for Containment {
    fn default() -> Self {
        Self::new(None, SandboxConfig::default())
    }
}

/// What one program may reach besides the system.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// The program's own mode (`sandbox = "off"` on a tool).
    pub mode: SandboxMode,
    /// Readable and executable: its folder, its shared code.
    pub read: Vec<PathBuf>,
    /// Readable and writable: its workspace, its temp dir.
    pub write: Vec<PathBuf>,
    /// Unix sockets it may connect to (the host endpoint).
    pub sockets: Vec<PathBuf>,
    /// Variables of the server's environment it gets by name.
    pub pass_env: Vec<String>,
    /// Keep only the lifetime and privilege protections, not the
    /// filesystem confinement (for long-lived servers such as MCP
    /// connections, which manage files of their own).
    pub lifetime_only: bool,
}

impl Containment {
    /// Programs run through `sandbox` (when given) under the agent's
    /// `[sandbox]` settings.
    pub fn new(sandbox: Option<Sandbox>, config: SandboxConfig) -> Self {
        let environment = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self {
            sandbox,
            config,
            environment: Arc::new(environment),
            scratch: Arc::default(),
        }
    }

    /// The process's sandbox, when programs run contained.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// True when the agent's programs run contained (a sandbox is there and
    /// the agent did not turn it off).
    pub fn is_on(&self) -> bool {
        self.sandbox.is_some() && self.config.mode == SandboxMode::On
    }

    /// The user the agent's programs run as, when it is not the server's
    /// own (a server running as root gives them an unprivileged one): what
    /// they write (workspaces, temp dirs, the host socket) must be theirs.
    pub fn owner(&self) -> Option<Ids> {
        if !self.is_on() {
            return None;
        }
        self.sandbox.as_ref().and_then(Sandbox::effective_user)
    }

    /// A temp dir (`TMPDIR`) for one run under `<state_root>/tmp/`: an idle
    /// one of an earlier run, or a new `<state_root>/tmp/<name>`, given to
    /// the programs' user ([`Containment::owner`]).
    pub(crate) async fn scratch(
        &self,
        state_root: &Path,
        name: &str,
    ) -> std::io::Result<ScratchDir> {
        ScratchDir::create(&self.scratch, state_root, name, self.owner()).await
    }

    /// True when a run that ended with `end` left no process behind that
    /// could still use its temp dir: it ran `contained`, exited, and the
    /// system gives contained programs a PID namespace of their own (which
    /// dies with the program), as this process's probe of the launcher found.
    pub(crate) fn tree_gone(&self, contained: bool, end: &ProcessEnd) -> bool {
        contained
            && matches!(end, ProcessEnd::Exited { .. })
            && self
                .sandbox
                .as_ref()
                .and_then(Sandbox::probed)
                .is_some_and(|support| support.pid_namespace)
    }

    /// The environment a program starts with: the allowlist plus the
    /// agent's and the program's pass-through names.
    pub fn env(&self, pass: &[String]) -> Vec<(String, String)> {
        let passed = |name: &str| {
            bdk_sandbox::env::is_allowed(name)
                || self.config.env.iter().any(|p| p == name)
                || pass.iter().any(|p| p == name)
        };
        self.environment
            .iter()
            .filter(|(name, _)| passed(name))
            .cloned()
            .collect()
    }

    /// The sandbox and its call policy for a program, or `None` when it
    /// runs uncontained.
    pub fn call(&self, grants: &Grants) -> Option<(Sandbox, bdk_sandbox::Call)> {
        let sandbox = self.sandbox.as_ref()?;
        if self.config.mode == SandboxMode::Off || grants.mode == SandboxMode::Off {
            return None;
        }
        let mut read = self.config.read.clone();
        read.extend(grants.read.iter().cloned());
        let mut write = self.config.write.clone();
        write.extend(grants.write.iter().cloned());
        Some((
            sandbox.clone(),
            bdk_sandbox::Call {
                filesystem: !grants.lifetime_only,
                read,
                write,
                sockets: grants.sockets.clone(),
            },
        ))
    }
}

/// The sandbox's limits of a call, from the agent's `[sandbox]`.
pub fn limits(config: &bdk_project::ResourceLimits) -> Limits {
    Limits {
        memory_bytes: config.memory,
        processes: config.processes,
        cpu_seconds: config.cpu_seconds,
        file_bytes: config.file_size,
    }
}

impl Containment {
    /// Runs `program` under this containment, with a temp dir of its own
    /// under `<state_root>/tmp/` (its `TMPDIR`, removed afterwards).
    pub async fn run(
        &self,
        program: Program,
        state_root: &Path,
        cancel: &CancellationToken,
    ) -> ProgramEnd {
        let Some((name, args)) = program.argv.split_first() else {
            return ProgramEnd::SpawnFailed(std::io::Error::other("the command is empty"));
        };
        let scratch = match self
            .scratch(state_root, &bdk_events::ids::new_id("run"))
            .await
        {
            Ok(dir) => dir,
            Err(e) => return ProgramEnd::Failed(e),
        };
        let mut env = self.env(&[]);
        env.extend(program.env);
        env.extend(process::temp_env(scratch.path()));
        let mut read = vec![program.cwd.clone()];
        read.extend(program.read);
        let grants = Grants {
            read,
            write: vec![scratch.path().to_path_buf()],
            ..Grants::default()
        };
        let spec = ProcessSpec {
            program: PathBuf::from(name),
            args: args.to_vec(),
            cwd: program.cwd,
            env,
            stdin: Some(program.stdin),
            max_stdout: program.max_stdout,
            timeout: program.timeout,
            sandbox: self.call(&grants),
        };
        let contained = spec.sandbox.is_some();
        let end = process::run_process(spec, cancel).await;
        scratch.finish(self.tree_gone(contained, &end));
        match end {
            ProcessEnd::Exited {
                status,
                stdout,
                stderr,
            } => ProgramEnd::Exited {
                status,
                stdout,
                stderr: stderr.text(),
            },
            ProcessEnd::TimedOut => ProgramEnd::TimedOut,
            ProcessEnd::Cancelled => ProgramEnd::Cancelled,
            ProcessEnd::OutputExceeded { .. } => ProgramEnd::OutputExceeded,
            ProcessEnd::SpawnFailed(e) => ProgramEnd::SpawnFailed(e),
            ProcessEnd::Failed(e) => ProgramEnd::Failed(e),
            ProcessEnd::LimitReached { limit } => ProgramEnd::LimitReached(limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_gets_the_allowlist_and_the_names_passed_of_the_snapshot() {
        let config = SandboxConfig {
            env: vec!["AGENT_WIDE".into()],
            ..SandboxConfig::default()
        };
        let containment = Containment {
            environment: Arc::new(
                [
                    ("PATH", "/usr/bin"),
                    ("LC_ALL", "C"),
                    ("AGENT_WIDE", "a"),
                    ("TOOL_ONLY", "t"),
                    ("API_KEY", "secret"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .to_vec(),
            ),
            ..Containment::new(None, config)
        };
        let names = |env: Vec<(String, String)>| -> Vec<String> {
            env.into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(
            names(containment.env(&[])),
            ["PATH", "LC_ALL", "AGENT_WIDE"]
        );
        assert_eq!(
            names(containment.env(&["TOOL_ONLY".into(), "UNSET".into()])),
            ["PATH", "LC_ALL", "AGENT_WIDE", "TOOL_ONLY"]
        );
    }
}
