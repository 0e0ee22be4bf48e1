//! What the commands share: exit codes, printing JSON and diagnostics,
//! loading a project, and opening its host here or through the server that
//! holds the state root. A leaf under the commands: it names none of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use bdk_core::host::{Host, HostBuilder, HostError};
use bdk_core::{Diagnostic, Discovery, Project, Severity, discover};
use bdk_events::SessionId;
use bdk_store::FsStore;

use crate::lock;

/// Exit code: success.
pub(crate) const OK: u8 = 0;
/// Exit code: the run failed.
pub(crate) const FAILED: u8 = 1;
/// Exit code: the request was unusable.
pub(crate) const UNUSABLE: u8 = 2;

pub(crate) use crate::render::Render;

/// Set once a command has chosen text for people (see [`choose_output`]).
static TEXT: std::sync::OnceLock<Render> = std::sync::OnceLock::new();

/// True when results go out as JSON: asked for with `--json`, or stdout is
/// not a terminal (a pipe, a file: a program is reading).
pub(crate) fn wants_json(json_flag: bool) -> bool {
    use std::io::IsTerminal as _;
    json_flag || !std::io::stdout().is_terminal()
}

/// Makes [`print_json`] print `kind`'s text form instead, unless JSON is
/// wanted ([`wants_json`]).
pub(crate) fn choose_output(kind: Render, json_flag: bool) {
    if !wants_json(json_flag) {
        let _ = TEXT.set(kind);
    }
}

/// Prints a command's result: pretty JSON, or its text form when the
/// command chose text for a terminal.
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    if let Some(kind) = TEXT.get() {
        let value = serde_json::to_value(value)?;
        outln!("{}", crate::render::text(*kind, &value));
        return Ok(());
    }
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub(crate) fn print_diagnostics(diagnostics: &[Diagnostic], to_stderr: bool) {
    for d in diagnostics {
        let level = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let text = format!("{level}: {}: {}\n  fix: {}", d.file, d.message, d.fix);
        if to_stderr {
            errln!("{text}");
        } else {
            outln!("{text}");
        }
    }
}

pub(crate) fn counts(diagnostics: &[Diagnostic]) -> (usize, usize) {
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    (errors, diagnostics.len() - errors)
}

/// Discovers the project for a command that runs it: errors stop it (exit
/// 2), warnings are printed to stderr.
pub(crate) fn load(dir: &Path) -> std::result::Result<Project, u8> {
    let Discovery {
        project,
        diagnostics,
    } = discover(dir);
    let (errors, _) = counts(&diagnostics);
    print_diagnostics(&diagnostics, true);
    match project {
        Some(p) if errors == 0 => Ok(p),
        _ => {
            errln!(
                "error: {} has {errors} validation error(s); run `bdk validate {}` for details",
                dir.display(),
                dir.display()
            );
            Err(UNUSABLE)
        }
    }
}

pub(crate) fn parse_session_id(id: &str) -> std::result::Result<SessionId, u8> {
    SessionId::parse(id).ok_or_else(|| {
        errln!("error: `{id}` is not a session id (expected ses_...)");
        UNUSABLE
    })
}

/// The MCP hub of `project`, when it has connections: advertised tools are
/// listed before the host serves a command, so `bdk run` and `bdk call`
/// see the whole catalog.
pub(crate) async fn mcp_hub(
    project: &Project,
    state_root: &Path,
    wait: bool,
    sandbox: Option<&bdk_core::containment::Sandbox>,
) -> Option<Arc<dyn bdk_core::mcp::McpHub>> {
    use bdk_core::mcp::McpHub;
    if project.mcp_connections.is_empty() {
        return None;
    }
    let containment =
        bdk_core::containment::Containment::new(sandbox.cloned(), project.config.sandbox.clone());
    let hub = bdk_mcp::client::McpConnections::start_in(project, containment, state_root);
    if wait {
        hub.ready().await;
    }
    Some(hub)
}

/// Where a command's work runs: in this process, or through the server that
/// holds the state root.
pub(crate) enum Opened {
    Local(Host, lock::StateLock),
    Remote(crate::remote::Remote),
}

/// Opens the project's host here, or, when `bdk serve` holds the state root,
/// its API. `Err(code)` is an exit code (the project does not validate).
pub(crate) async fn open_host_or_remote(
    dir: &Path,
    state_root: &Path,
    record: Option<&Path>,
) -> Result<std::result::Result<Opened, u8>> {
    let project = match load(dir) {
        Ok(p) => p,
        Err(code) => return Ok(Err(code)),
    };
    match crate::remote::access(state_root)? {
        crate::remote::Access::Local(guard) => Ok(build_host(project, state_root, record, guard)
            .await?
            .map(|(host, guard)| Opened::Local(host, guard))),
        crate::remote::Access::Remote(remote) => {
            if record.is_some() {
                errln!(
                    "error: --record writes the model steps of this process, but the running server takes the turns; stop the server to record"
                );
                return Ok(Err(UNUSABLE));
            }
            Ok(Ok(Opened::Remote(remote)))
        }
    }
}

pub(crate) async fn open_host(
    dir: &Path,
    state_root: &Path,
    record: Option<&Path>,
) -> Result<std::result::Result<(Host, lock::StateLock), u8>> {
    let project = match load(dir) {
        Ok(p) => p,
        Err(code) => return Ok(Err(code)),
    };
    let guard = lock::acquire(state_root)?;
    build_host(project, state_root, record, guard).await
}

/// Reserves the key-value namespaces of every part of the server on a host
/// it builds, so the host endpoint refuses them to tools and handlers: the
/// schedule cadence's and the eval history's, which are not extensions, and
/// the packs' and reminders', which are reserved again here so that a host
/// without the pack (an agent with no GitHub channel yet, a `bdk run`)
/// still refuses them, since all hosts of an agent share its store and a
/// tool of one could plant state the pack of another reads.
pub(crate) fn reserve_server_namespaces(builder: HostBuilder) -> HostBuilder {
    [
        bdk_scheduler::status::CLAIMS_NAMESPACE,
        bdk_evals::history::RUNS_NAMESPACE,
    ]
    .into_iter()
    .chain(bdk_scheduler::reminders::NAMESPACES.iter().copied())
    .chain(bdk_github::NAMESPACES.iter().copied())
    .chain(bdk_slack::NAMESPACES.iter().copied())
    .fold(builder, HostBuilder::reserve_namespace)
}

async fn build_host(
    project: Project,
    state_root: &Path,
    record: Option<&Path>,
    guard: lock::StateLock,
) -> Result<std::result::Result<(Host, lock::StateLock), u8>> {
    let store = FsStore::open(state_root)
        .with_context(|| format!("failed to open the state root {}", state_root.display()))?;
    let protected = crate::sandbox::Protected(vec![project.root.clone(), state_root.to_path_buf()]);
    let sandbox = crate::sandbox::for_project(&project, &protected, false)?;
    let hub = mcp_hub(&project, state_root, true, sandbox.as_ref()).await;
    // Reminders fire while the process runs (a `bdk run` that ends takes
    // its timer with it; the reminders stay stored and armed).
    let mut builder = reserve_server_namespaces(Host::builder(project, Arc::new(store)))
        .extension(Arc::new(bdk_scheduler::Reminders::new()));
    if let Some(sandbox) = sandbox {
        builder = builder.sandbox(sandbox);
    }
    if let Some(hub) = hub {
        builder = builder.mcp(hub);
    }
    // The GitHub tools and host service work from `bdk run` too (progress
    // follows only sessions a webhook delivery woke).
    if let Some(github) =
        bdk_github::Github::from_project(builder.project(), bdk_github::GithubOptions::default())
    {
        builder = builder.extension(Arc::new(github));
    }
    // The `slack.*` host service works from `bdk run` too.
    if let Some(slack) =
        bdk_slack::Slack::from_project(builder.project(), bdk_slack::SlackOptions::default())
    {
        builder = builder.extension(Arc::new(slack));
    }
    if let Some(path) = record {
        builder = builder.record_to(path);
    }
    let host = match builder.build().await {
        Ok(h) => h,
        // A recording file that cannot be opened or is not a recording is
        // a bad argument, not a runtime failure.
        Err(e @ HostError::InvalidRequest(_)) if record.is_some() => {
            errln!("error: --record: {e}");
            return Ok(Err(UNUSABLE));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("failed to start the agent runtime")),
    };
    Ok(Ok((host, guard)))
}

/// Where the project and its state live.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct ProjectArgs {
    /// The project directory (the one holding `agent/`).
    #[arg(long, short = 'd', value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Where sessions are stored (default: `<DIR>/.bdk`).
    #[arg(long, value_name = "DIR", env = "BDK_STATE_ROOT")]
    pub(crate) state_root: Option<PathBuf>,
}

/// The nearest of `start` and its ancestors that holds an `agent/` or
/// `bot/` folder.
pub(crate) fn find_project(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join("agent").is_dir() || d.join("bot").is_dir())
        .map(Path::to_path_buf)
}

impl ProjectArgs {
    /// The project: the directory given (positional or `--dir`), else the
    /// nearest of the current directory and its parents that holds an
    /// `agent/` (or `bot/`) folder, as cargo and git find theirs, so any
    /// folder inside a project works, `agent/` itself included. When none
    /// does, the current directory, with a note on stderr saying where bdk
    /// looked.
    pub(crate) fn dir(&self, positional: Option<&Path>) -> PathBuf {
        if let Some(dir) = positional
            .map(Path::to_path_buf)
            .or_else(|| self.dir.clone())
        {
            return dir;
        }
        let Ok(cwd) = std::env::current_dir() else {
            return PathBuf::from(".");
        };
        match find_project(&cwd) {
            Some(root) if root == cwd => PathBuf::from("."),
            Some(root) => root,
            None => {
                static NOTED: std::sync::Once = std::sync::Once::new();
                NOTED.call_once(|| {
                    errln!(
                        "note: no agent/ folder in {} or any folder above it; pass the project directory (--dir DIR) or run bdk inside a project",
                        cwd.display()
                    );
                });
                PathBuf::from(".")
            }
        }
    }

    pub(crate) fn state_root(&self, dir: &Path) -> PathBuf {
        self.state_root.clone().unwrap_or_else(|| dir.join(".bdk"))
    }
}
