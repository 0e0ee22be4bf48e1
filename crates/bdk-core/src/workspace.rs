//! The session workspace: the directory a session's turns and tools work in.
//!
//! This module owns two things:
//! - confinement: [`resolve`] turns a relative path that came from outside
//!   (the model, a `workspaceFiles` send, a tool manifest) into a path inside
//!   the workspace, or refuses it. Every workspace write in the runtime goes
//!   through it;
//! - creation: [`materialize`] lays out what a project contributes to a new
//!   workspace (skills, agent-tool scripts and their `AGENTS.md` catalog,
//!   sandbox seed files) exactly once, and [`write_files`] writes a send's
//!   `workspaceFiles` before a turn.
//!
//! Instructions are deliberately not written here: they reach the model as
//! its system prompt.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::project::{Project, ToolRunner};

/// The marker written last by [`materialize`]; its presence means the
/// workspace belongs to the session and must not be re-seeded.
pub const MATERIALIZED_MARKER: &str = ".bdk/materialized";

/// Where skills land, one folder per skill.
pub const SKILLS_DIR: &str = ".bdk/skills";

/// Failures of workspace operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The path is not an acceptable relative workspace path.
    #[error("invalid workspace path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The path would land outside the workspace.
    #[error("workspace path {path:?} escapes the workspace")]
    Escapes {
        /// The path as given.
        path: String,
    },
    /// A filesystem operation failed.
    #[error("failed to {action} {path}")]
    Io {
        /// What was being done (`write`, `create directory`, ...).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        WorkspaceError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Resolves `rel` against the workspace `root`, refusing anything that could
/// land outside it.
///
/// Refused: the empty string, absolute paths, Windows drive prefixes and
/// backslashes, NUL bytes, `..` that climbs above the root, and paths whose
/// existing part runs through a symlink that points outside the root (or
/// nowhere: a dangling link could be followed out by a later write). `.`
/// components are dropped, so `"."` names the root itself. The result may not
/// exist yet.
///
/// This does a few `lstat`/`realpath` calls on the calling thread: each is a
/// short, bounded syscall on a local path, so async callers use it directly
/// rather than paying a `spawn_blocking` hop per path. A symlink created
/// between this check and the use of the path is not caught; the workspace is
/// the session's own directory, so that race needs a process already inside it.
pub fn resolve(root: &Path, rel: &str) -> Result<PathBuf, WorkspaceError> {
    let invalid = |reason| WorkspaceError::InvalidPath {
        path: rel.to_owned(),
        reason,
    };
    if rel.is_empty() {
        return Err(invalid("the path is empty"));
    }
    if rel.contains('\0') {
        return Err(invalid("the path contains a NUL byte"));
    }
    if rel.contains('\\') {
        return Err(invalid("use '/' as the separator, not '\\'"));
    }
    let bytes = rel.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(invalid("drive prefixes are not allowed"));
    }
    if rel.starts_with('/') {
        return Err(invalid("the path must be relative to the workspace"));
    }

    // Normalize lexically first: `a/../b` is fine, `a/../../b` is not.
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(rel).components() {
        match component {
            Component::Normal(part) => {
                let Some(part) = part.to_str() else {
                    return Err(invalid("the path is not valid UTF-8"));
                };
                parts.push(part);
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(WorkspaceError::Escapes {
                        path: rel.to_owned(),
                    });
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid("the path must be relative to the workspace"));
            }
        }
    }
    let mut joined = root.to_path_buf();
    joined.extend(&parts);

    // Then follow the filesystem: the deepest part of the path that exists
    // (without following a final symlink, so a dangling link counts as
    // existing) must canonicalize to somewhere inside the canonical root.
    // Canonicalizing resolves every symlink on the way, so one check covers
    // all the existing components.
    let Ok(canonical_root) = root.canonicalize() else {
        // No root yet means nothing inside it exists, so no symlink can
        // redirect the path.
        return Ok(joined);
    };
    let mut probe = joined.clone();
    let mut depth = parts.len();
    loop {
        if probe.symlink_metadata().is_ok() {
            let escapes = match probe.canonicalize() {
                Ok(real) => !real.starts_with(&canonical_root),
                // A dangling symlink (or a loop): refuse rather than guess
                // where a later write would land.
                Err(_) => true,
            };
            if escapes {
                return Err(WorkspaceError::Escapes {
                    path: rel.to_owned(),
                });
            }
            break;
        }
        if depth == 0 {
            break;
        }
        probe.pop();
        depth -= 1;
    }
    Ok(joined)
}

/// Checks every path of a send's `workspaceFiles` against the workspace as it
/// is now (see [`resolve`]) without writing anything, so a send can be
/// refused before it is accepted.
pub fn check_files(root: &Path, files: &BTreeMap<String, String>) -> Result<(), WorkspaceError> {
    for rel in files.keys() {
        resolve(root, rel)?;
    }
    Ok(())
}

/// Writes a send's `workspaceFiles` (relative path -> UTF-8 content) into the
/// workspace, creating parent directories.
///
/// Every path is validated before anything is written, so one bad path leaves
/// the workspace untouched.
pub async fn write_files(
    root: &Path,
    files: &BTreeMap<String, String>,
) -> Result<(), WorkspaceError> {
    let resolved = files
        .iter()
        .map(|(rel, content)| Ok((resolve(root, rel)?, content)))
        .collect::<Result<Vec<_>, WorkspaceError>>()?;
    for (path, content) in resolved {
        write_with_parents(&path, content.as_bytes()).await?;
    }
    Ok(())
}

/// Creates `path`'s parent directories and writes `content` to it.
pub(crate) async fn write_with_parents(path: &Path, content: &[u8]) -> Result<(), WorkspaceError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| WorkspaceError::io("create directory", parent, e))?;
    }
    tokio::fs::write(path, content)
        .await
        .map_err(|e| WorkspaceError::io("write", path, e))
}

/// One file [`materialize`] will write.
enum Source {
    Bytes(Vec<u8>),
    /// Copied from the agent folder; `executable` sets the mode bits.
    Copy {
        from: PathBuf,
        executable: bool,
    },
}

/// Seeds a new session workspace from the project; returns `false` (and does
/// nothing) when the workspace was already materialized.
///
/// Written in order: skills as `.bdk/skills/<name>/SKILL.md` (frontmatter with
/// the name and description, then the body) with their sibling files,
/// agent-execution tool scripts at their workspace paths (executable), the
/// `sandbox/workspace/**` seed files, the `AGENTS.md` catalog of agent tools,
/// and finally the marker. When the sandbox seeds its own `AGENTS.md` and
/// there are agent tools, the catalog is appended to the seeded text rather
/// than replacing it. All destination paths are checked before anything is
/// written. Later sends never call this again for the same workspace, so a
/// session's own edits survive.
pub async fn materialize(root: &Path, project: &Project) -> Result<bool, WorkspaceError> {
    let marker = resolve(root, MATERIALIZED_MARKER)?;
    // One `stat` of a path the host just used: checked in place rather
    // than through the blocking pool (every direct tool call asks).
    if marker
        .try_exists()
        .map_err(|e| WorkspaceError::io("check", &marker, e))?
    {
        return Ok(false);
    }
    let mut plan: Vec<(PathBuf, Source)> = Vec::new();

    for skill in &project.skills {
        let dir = format!("{SKILLS_DIR}/{}", skill.name);
        let text = format!(
            "---\nname: {}\ndescription: {}\n---\n\n{}",
            yaml_string(&skill.name),
            yaml_string(&skill.description),
            skill.body
        );
        plan.push((
            resolve(root, &format!("{dir}/SKILL.md"))?,
            Source::Bytes(text.into_bytes()),
        ));
        for (rel, content) in &skill.files {
            plan.push((
                resolve(root, &format!("{dir}/{rel}"))?,
                Source::Bytes(content.clone()),
            ));
        }
    }

    let mut catalog_entries = Vec::new();
    for tool in &project.tools {
        let ToolRunner::Script {
            source,
            workspace_path,
        } = &tool.runner
        else {
            continue;
        };
        plan.push((
            resolve(root, workspace_path)?,
            Source::Copy {
                from: source.clone(),
                executable: true,
            },
        ));
        let head = read_head(source).await?;
        catalog_entries.push(catalog_entry(
            &tool.spec.name,
            &tool.spec.description,
            tool.spec.effect,
            &tool.spec.input_schema,
            &run_command(workspace_path, &head),
        ));
    }

    let mut seeded_agents_md: Option<PathBuf> = None;
    for file in &project.sandbox_files {
        let dest = resolve(root, &file.workspace_path)?;
        if !catalog_entries.is_empty() && file.workspace_path == "AGENTS.md" {
            seeded_agents_md = Some(file.source.clone());
            continue;
        }
        plan.push((
            dest,
            Source::Copy {
                from: file.source.clone(),
                executable: false,
            },
        ));
    }

    if !catalog_entries.is_empty() {
        let mut text = String::new();
        if let Some(seed) = &seeded_agents_md {
            let seeded = tokio::fs::read_to_string(seed)
                .await
                .map_err(|e| WorkspaceError::io("read", seed, e))?;
            text.push_str(seeded.trim_end());
            text.push_str("\n\n");
        }
        text.push_str(&catalog(&catalog_entries));
        plan.push((
            resolve(root, "AGENTS.md")?,
            Source::Bytes(text.into_bytes()),
        ));
    }

    // Everything is written in one trip to the blocking pool: a workspace
    // costs one hop however many directories and files it gets.
    let owned = root.to_path_buf();
    tokio::task::spawn_blocking(move || write_plan(&owned, plan, &marker))
        .await
        .map_err(|e| WorkspaceError::io("write", root, io::Error::other(e)))??;
    Ok(true)
}

/// Writes a [`materialize`] plan under `root`, then the marker.
fn write_plan(
    root: &Path,
    plan: Vec<(PathBuf, Source)>,
    marker: &Path,
) -> Result<(), WorkspaceError> {
    let create_parent = |path: &Path| match path.parent() {
        Some(parent) => std::fs::create_dir_all(parent)
            .map_err(|e| WorkspaceError::io("create directory", parent, e)),
        None => Ok(()),
    };
    std::fs::create_dir_all(root).map_err(|e| WorkspaceError::io("create directory", root, e))?;
    for (dest, source) in plan {
        create_parent(&dest)?;
        match source {
            Source::Bytes(bytes) => {
                std::fs::write(&dest, bytes).map_err(|e| WorkspaceError::io("write", &dest, e))?;
            }
            Source::Copy { from, executable } => {
                std::fs::copy(&from, &dest).map_err(|e| WorkspaceError::io("copy", &from, e))?;
                if executable {
                    set_executable(&dest)?;
                }
            }
        }
    }
    create_parent(marker)?;
    std::fs::write(marker, b"").map_err(|e| WorkspaceError::io("write", marker, e))
}

/// A YAML scalar for frontmatter. JSON strings are valid YAML double-quoted
/// scalars, so quoting through serde_json handles colons, quotes and newlines.
fn yaml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The first bytes of a script, enough to see a `#!` line.
async fn read_head(path: &Path) -> Result<Vec<u8>, WorkspaceError> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| WorkspaceError::io("read", path, e))?;
    let mut head = Vec::with_capacity(2);
    file.take(2)
        .read_to_end(&mut head)
        .await
        .map_err(|e| WorkspaceError::io("read", path, e))?;
    Ok(head)
}

/// How the agent runs a script from the workspace root: directly when it
/// names its interpreter with `#!`, else through the usual interpreter for
/// its extension.
fn run_command(workspace_path: &str, head: &[u8]) -> String {
    if head.starts_with(b"#!") {
        return format!("./{workspace_path}");
    }
    let ext = Path::new(workspace_path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    let interpreter = match ext {
        "py" => "python3",
        "sh" => "sh",
        "bash" => "bash",
        "js" | "mjs" | "cjs" => "node",
        "ts" => "npx tsx",
        "rb" => "ruby",
        "pl" => "perl",
        _ => return format!("./{workspace_path}"),
    };
    format!("{interpreter} {workspace_path}")
}

fn catalog_entry(
    name: &str,
    description: &str,
    effect: crate::tool::Effect,
    input_schema: &serde_json::Value,
    command: &str,
) -> String {
    let effect = match effect {
        crate::tool::Effect::Read => "read",
        crate::tool::Effect::Write => "write",
    };
    let schema =
        serde_json::to_string_pretty(input_schema).unwrap_or_else(|_| input_schema.to_string());
    format!(
        "## {name}\n\n{description}\n\nEffect: {effect}\n\nInput schema:\n\n```json\n{schema}\n```\n\nRun it from the workspace root with the input as one JSON object on stdin:\n\n```sh\necho '<input JSON>' | {command}\n```\n"
    )
}

fn catalog(entries: &[String]) -> String {
    let mut text = String::from(
        "# Agent tools\n\nThese tools are scripts in this workspace. Run them with the shell; each reads its input as JSON on stdin and prints its result on stdout.\n",
    );
    for entry in entries {
        text.push('\n');
        text.push_str(entry);
    }
    text
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<(), WorkspaceError> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(path).map_err(|e| WorkspaceError::io("read metadata of", path, e))?;
    let mut perms = meta.permissions();
    // Executable for everyone who may read it.
    let mode = perms.mode();
    perms.set_mode(mode | ((mode & 0o444) >> 2));
    std::fs::set_permissions(path, perms)
        .map_err(|e| WorkspaceError::io("set permissions of", path, e))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> Result<(), WorkspaceError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_command_prefers_shebang_then_extension() {
        assert_eq!(run_command(".bdk/tools/a.py", b"#!"), "./.bdk/tools/a.py");
        assert_eq!(
            run_command(".bdk/tools/a.py", b"im"),
            "python3 .bdk/tools/a.py"
        );
        assert_eq!(run_command(".bdk/tools/a", b""), "./.bdk/tools/a");
    }

    #[test]
    fn yaml_string_quotes_awkward_text() {
        assert_eq!(yaml_string("a: \"b\"\nc"), r#""a: \"b\"\nc""#);
    }
}
