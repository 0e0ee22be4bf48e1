//! `bdk dev`: `bdk serve --dev` that watches each agent's folder and
//! reloads the agent when a file in it changes.
//!
//! A burst of changes (an editor saving several files, a `git checkout`)
//! settles for [`SETTLE`] before the folder is discovered again. A folder
//! that validates becomes the host's next version ([`Host::reload`]): turns
//! that start afterwards take it, running turns finish on theirs, and
//! sessions, streams and the port stay. A folder with errors is not loaded:
//! the diagnostics are printed, the last good version keeps serving, and
//! the [`ReloadStatus`] the routes share reports both (`/v1/info`,
//! `/v1/meta`, which the playground polls).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use bdk_core::host::Host;
use bdk_core::{Diagnostic, Severity};
use bdk_http::ReloadStatus;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a folder must be quiet before it is read again.
const SETTLE: Duration = Duration::from_millis(150);

/// One agent to watch.
pub struct Watched {
    /// The agent's name, for messages.
    pub name: String,
    /// The project root (the folder holding `agent/`).
    pub root: PathBuf,
    /// `agent/` or `bot/`: what is watched.
    pub agent_dir: PathBuf,
    /// The agent's host, reloaded in place.
    pub host: Host,
    /// What the routes report.
    pub status: ReloadStatus,
}

/// Starts watching every agent's folder until `stop`; the watchers live as
/// long as the returned handle.
pub fn start(
    agents: Vec<Watched>,
    stop: CancellationToken,
) -> Result<Vec<notify::RecommendedWatcher>> {
    let mut watchers = Vec::new();
    for agent in agents {
        let (tx, rx) = mpsc::unbounded_channel::<PathBuf>();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
                Ok(event) if !matches!(event.kind, notify::EventKind::Access(_)) => {
                    for path in event.paths {
                        let _ = tx.send(path);
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "the folder watcher failed"),
            })
            .context("cannot watch the agent folder")?;
        watcher
            .watch(&agent.agent_dir, RecursiveMode::Recursive)
            .with_context(|| format!("cannot watch {}", agent.agent_dir.display()))?;
        errln!(
            "watching {} for changes to `{}`",
            agent.agent_dir.display(),
            agent.name
        );
        tokio::spawn(follow(agent, rx, stop.clone()));
        watchers.push(watcher);
    }
    Ok(watchers)
}

/// Reloads `agent` after each settled burst of changes.
async fn follow(agent: Watched, mut rx: mpsc::UnboundedReceiver<PathBuf>, stop: CancellationToken) {
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            path = rx.recv() => match path {
                Some(path) => path,
                None => return,
            },
        };
        let mut changed = BTreeSet::new();
        changed.insert(first);
        // Wait for the burst to settle.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                more = tokio::time::timeout(SETTLE, rx.recv()) => match more {
                    Ok(Some(path)) => { changed.insert(path); }
                    Ok(None) => return,
                    Err(_) => break,
                },
            }
        }
        let changed: Vec<&PathBuf> = changed.iter().filter(|p| !ignored(p)).collect();
        if changed.is_empty() {
            continue;
        }
        // Named for the message: the files there now (an editor's or
        // `sed -i`'s temporary files come and go), else what was removed.
        let present: Vec<String> = changed
            .iter()
            .filter(|p| p.exists())
            .map(|p| relative(&agent.root, p))
            .collect();
        let named = if present.is_empty() {
            changed.iter().map(|p| relative(&agent.root, p)).collect()
        } else {
            present
        };
        reload(&agent, &named).await;
    }
}

/// Discovers the folder again and reloads the host, or reports why not.
async fn reload(agent: &Watched, changed: &[String]) {
    let what = match changed {
        [one] => one.clone(),
        [one, rest @ ..] => format!("{one} and {} more", rest.len()),
        [] => "the folder".to_owned(),
    };
    let root = agent.root.clone();
    let discovery = match tokio::task::spawn_blocking(move || bdk_core::discover(&root)).await {
        Ok(d) => d,
        Err(e) => {
            errln!("error: reading `{}` again failed: {e}", agent.name);
            return;
        }
    };
    let (errors, warnings): (Vec<Diagnostic>, Vec<Diagnostic>) = discovery
        .diagnostics
        .into_iter()
        .partition(|d| d.severity == Severity::Error);
    let served = agent.host.version();
    let mut errors = errors;
    let project = match discovery.project {
        Some(project) if errors.is_empty() => {
            match bdk_scheduler::check_schedules(&project.schedules) {
                Ok(()) => Some(project),
                Err(e) => {
                    errors.push(problem(
                        "agent/schedules",
                        e.to_string(),
                        "fix the schedule",
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let Some(project) = project else {
        errln!(
            "{what} changed: `{}` does not load; still serving version {served}",
            agent.name
        );
        crate::support::print_diagnostics(&errors, true);
        agent.status.failed(errors);
        return;
    };
    match agent.host.reload(project).await {
        Ok(reloaded) => {
            errln!(
                "{what} changed: reloaded `{}` (version {}); the next turn takes it",
                agent.name,
                reloaded.version
            );
            crate::support::print_diagnostics(&warnings, true);
            if !reloaded.needs_restart.is_empty() {
                errln!(
                    "note: {} changed; restart bdk dev to apply that",
                    reloaded.needs_restart.join(", ")
                );
            }
            agent
                .status
                .loaded(reloaded.version, warnings, &reloaded.needs_restart);
        }
        Err(e) => {
            errln!(
                "{what} changed: `{}` does not load: {e}; still serving version {served}",
                agent.name
            );
            agent.status.failed(vec![problem(
                "agent",
                e.to_string(),
                "fix the agent folder; it reloads on the next save",
            )]);
        }
    }
}

fn problem(file: &str, message: String, fix: &str) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        file: file.to_owned(),
        message,
        fix: fix.to_owned(),
    }
}

/// Files no reload should follow: caches, version control and editors'
/// temporary files.
fn ignored(path: &Path) -> bool {
    if path.components().any(|c| {
        matches!(
            c.as_os_str().to_str(),
            Some("__pycache__" | ".git" | "node_modules")
        )
    }) {
        return true;
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".tmp")
        || name.starts_with(".#")
        || name == "4913"
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_and_editor_files_are_ignored() {
        for p in [
            "/p/agent/tools/__pycache__/x.pyc",
            "/p/agent/.instructions.md.swp",
            "/p/agent/instructions.md~",
            "/p/agent/.#instructions.md",
            "/p/agent/4913",
            "/p/agent/.git/index",
        ] {
            assert!(ignored(Path::new(p)), "{p}");
        }
        for p in [
            "/p/agent/instructions.md",
            "/p/agent/tools/x.toml",
            "/p/agent/scripted.toml",
        ] {
            assert!(!ignored(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn changed_paths_are_shown_relative_to_the_project() {
        assert_eq!(
            relative(Path::new("/p"), Path::new("/p/agent/instructions.md")),
            "agent/instructions.md"
        );
        assert_eq!(relative(Path::new("/p"), Path::new("/q/x")), "/q/x");
    }
}
