//! Seeding a new workspace: what a project contributes to it (skills,
//! agent-tool scripts and their `AGENTS.md` catalog, sandbox seed files),
//! written once, through the workspace's [`Tree`].
//!
//! The marker that says "seeded" lives in the workspace, where the
//! session's tools can delete it; then the next call seeds again into a
//! tree they may have filled with links and pipes, which is why every write
//! here goes beneath the tree's handle like any other.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdk_project::{Project, ToolRunner};

use super::error::WorkspaceError;
use super::path::Rel;
use super::tree::Tree;
use super::trees::TreeRoot;

/// The marker written last by [`materialize`]; its presence means the
/// workspace belongs to the session and must not be re-seeded.
pub const MATERIALIZED_MARKER: &str = ".bdk/materialized";

/// Where skills land, one folder per skill.
pub const SKILLS_DIR: &str = ".bdk/skills";

/// One file [`materialize`] will write.
enum Source {
    Bytes(Vec<u8>),
    /// Copied from the agent folder; `executable` adds the execute bits
    /// to its mode.
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
pub async fn materialize(root: &TreeRoot, project: &Arc<Project>) -> Result<bool, WorkspaceError> {
    let marker = Rel::parse(MATERIALIZED_MARKER)?;
    // A workspace made before its programs ran as a user of their own (or
    // under another one) is handed to that user once, so they can write
    // what is in it. One `lstat` of the root when it is theirs already.
    if let Some(owner) = root.owner()
        && rustix::fs::lstat(root.path())
            .is_ok_and(|stat| (stat.st_uid, stat.st_gid) != (owner.uid, owner.gid))
    {
        root.adopt().await?;
    }
    // Every direct tool call asks, so the common answer costs no trip to
    // the blocking pool: opening the root and one `lstat` beneath it, which
    // never opens a file a tool could have made (a FIFO cannot block it).
    if let Ok(tree) = Tree::open(root.path(), root.owner())
        && tree.exists(&marker)?
    {
        return Ok(false);
    }
    let project = Arc::clone(project);
    // Reading the agent folder and writing everything take one trip to the
    // blocking pool: a workspace costs one hop however many directories and
    // files it gets.
    root.blocking(move |path, owner| {
        let plan = plan(&project)?;
        let tree = Tree::create(path, owner)?;
        if tree.exists(&marker)? {
            return Ok(false);
        }
        write_plan(&tree, plan, &marker)?;
        Ok(true)
    })
    .await
}

/// What [`materialize`] writes, every destination checked.
fn plan(project: &Project) -> Result<Vec<(Rel, Source)>, WorkspaceError> {
    let mut plan: Vec<(Rel, Source)> = Vec::new();

    for skill in &project.skills {
        let dir = format!("{SKILLS_DIR}/{}", skill.name);
        let text = format!(
            "---\nname: {}\ndescription: {}\n---\n\n{}",
            yaml_string(&skill.name),
            yaml_string(&skill.description),
            skill.body
        );
        plan.push((
            Rel::parse(&format!("{dir}/SKILL.md"))?,
            Source::Bytes(text.into_bytes()),
        ));
        for (rel, content) in &skill.files {
            plan.push((
                Rel::parse(&format!("{dir}/{rel}"))?,
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
            Rel::parse(workspace_path)?,
            Source::Copy {
                from: source.clone(),
                executable: true,
            },
        ));
        let head = read_head(source)?;
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
        let dest = Rel::parse(&file.workspace_path)?;
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
            let seeded =
                std::fs::read_to_string(seed).map_err(|e| WorkspaceError::io("read", seed, e))?;
            text.push_str(seeded.trim_end());
            text.push_str("\n\n");
        }
        text.push_str(&catalog(&catalog_entries));
        plan.push((Rel::parse("AGENTS.md")?, Source::Bytes(text.into_bytes())));
    }
    Ok(plan)
}

/// Writes a [`materialize`] plan into `tree`, then the marker.
fn write_plan(tree: &Tree, plan: Vec<(Rel, Source)>, marker: &Rel) -> Result<(), WorkspaceError> {
    for (dest, source) in plan {
        match source {
            Source::Bytes(bytes) => tree.write(&dest, &bytes)?,
            Source::Copy { from, executable } => {
                // The agent folder is the server's own: read by path.
                let bytes =
                    std::fs::read(&from).map_err(|e| WorkspaceError::io("copy", &from, e))?;
                let mode = if executable {
                    Some(executable_mode(&from)?)
                } else {
                    None
                };
                tree.write_with_mode(&dest, &bytes, mode)?;
            }
        }
    }
    tree.write(marker, b"")
}

/// A YAML scalar for frontmatter. JSON strings are valid YAML double-quoted
/// scalars, so quoting through serde_json handles colons, quotes and newlines.
fn yaml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The first bytes of a script, enough to see a `#!` line.
fn read_head(path: &Path) -> Result<Vec<u8>, WorkspaceError> {
    let file = std::fs::File::open(path).map_err(|e| WorkspaceError::io("read", path, e))?;
    let mut head = Vec::with_capacity(2);
    file.take(2)
        .read_to_end(&mut head)
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

/// The mode of the agent-folder file `from`, executable for everyone who
/// may read it: what a copy of a tool script gets.
fn executable_mode(from: &Path) -> Result<u32, WorkspaceError> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(from).map_err(|e| WorkspaceError::io("read metadata of", from, e))?;
    let mode = meta.permissions().mode() & 0o7777;
    Ok(mode | ((mode & 0o444) >> 2))
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
