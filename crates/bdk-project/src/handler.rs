//! The typed form of a handler program: author code the host runs where the
//! agent meets the world (a schedule's fire, a channel route's request), in
//! any language, the way a command tool runs.
//!
//! Discovery reads the same keys wherever a handler is declared (`handler`,
//! `env`, `timeout_secs`, `max_output_bytes`, `sandbox`) and settles the
//! defaults here, so the runner (`crate::handler`) reads finished values.
//! `handler = [...]` names a program ([`HandlerSpec::Program`]);
//! `handler = "name"` names a handler the embedding Rust program registers
//! ([`HandlerSpec::Native`], see `crate::handler::NativeHandler`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::SandboxMode;

/// How long a handler may run when its manifest sets no `timeout_secs`.
pub const DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `timeout_secs` a handler may set (an hour).
pub const MAX_HANDLER_TIMEOUT_SECS: u64 = 3600;

/// How much a handler may write to stdout when its manifest sets no
/// `max_output_bytes` (1 MiB).
pub const DEFAULT_HANDLER_OUTPUT_BYTES: usize = 1024 * 1024;

/// A handler as a manifest declares it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum HandlerSpec {
    /// A program in the agent folder (`handler = ["python3", "run.py"]`).
    Program(HandlerCommand),
    /// A handler registered in Rust by the program that embeds bdk
    /// (`handler = "name"`, `HostBuilder::handler`).
    Native {
        /// The name it is registered under.
        name: String,
        /// Wall-clock limit of one run.
        timeout: Duration,
    },
}

impl HandlerSpec {
    /// The program or the native name, for messages.
    pub fn label(&self) -> &str {
        match self {
            HandlerSpec::Program(command) => command.program(),
            HandlerSpec::Native { name, .. } => name,
        }
    }
}

/// A handler program declared in the agent folder.
#[derive(Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HandlerCommand {
    /// Program and arguments; a relative program path is resolved in `dir`.
    pub argv: Vec<String>,
    /// The folder it runs in and may read (its manifest's folder).
    pub dir: PathBuf,
    /// Variables set to these values (`env = { NAME = "value" }`).
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// Variables of the server's environment passed through by name
    /// (`env = ["NAME"]`).
    pub pass_env: Vec<String>,
    /// `sandbox = "off"` runs it uncontained.
    pub sandbox: SandboxMode,
    /// Wall-clock limit of one run.
    pub timeout: Duration,
    /// Stdout beyond this many bytes stops it.
    pub max_output_bytes: usize,
}

impl HandlerCommand {
    /// A handler running `argv` in `dir` with the defaults.
    pub fn new(argv: Vec<String>, dir: PathBuf) -> Self {
        Self {
            argv,
            dir,
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            sandbox: SandboxMode::On,
            timeout: DEFAULT_HANDLER_TIMEOUT,
            max_output_bytes: DEFAULT_HANDLER_OUTPUT_BYTES,
        }
    }

    /// The program, as written.
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }
}

impl std::fmt::Debug for HandlerCommand {
    // Literal `env` values may be secrets: keep them out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerCommand")
            .field("argv", &self.argv)
            .field("dir", &self.dir)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("pass_env", &self.pass_env)
            .field("sandbox", &self.sandbox)
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish()
    }
}
