//! Built-in tools the runtime offers the model next to the project's own:
//! workspace file tools, `shell`, `load_skill`, `tag_artifact`, and the spec
//! of `task` (which the agent loop executes itself, since running a subagent
//! is a turn, not a tool body).
//!
//! Every path a built-in receives is checked by the workspace's front door
//! ([`crate::workspace::Rel`]) and then opened beneath the workspace's
//! handle ([`crate::workspace::Tree`], through the call's
//! [`ToolContext::trees`]): a symlink a tool swaps in cannot lead a read or a
//! write out of the workspace, and FIFOs, sockets and devices are refused
//! by name. Paths in results are workspace-relative and `/`-separated, so
//! the model can pass them straight back.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::containment::{Containment, Grants};
use crate::process::{self, ProcessEnd, ProcessSpec};
use crate::tool::subprocess;
use crate::tool::{NewArtifact, Tool, ToolContext, ToolOutput, ToolSource, ToolSpec};
use crate::workspace::{Folder, Kind, Rel, TreeRoot, WorkspaceError};
pub use bdk_project::builtin::{
    SHELL_DEFAULT_TIMEOUT_MS, SHELL_MAX_TIMEOUT_MS, delete_file_spec, edit_file_spec,
    list_files_spec, load_skill_spec, read_file_spec, shell_spec, tag_artifact_spec, task_spec,
    workspace_specs, write_file_spec,
};

/// `read_file` returns at most this many bytes of text per call.
pub const READ_FILE_CAP_BYTES: usize = 256 * 1024;
/// `edit_file` refuses files larger than this.
pub const EDIT_FILE_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// `list_files` lists at most this many entries.
pub const LIST_FILES_MAX_ENTRIES: usize = 1000;
/// `tag_artifact` refuses workspace files larger than this.
pub const ARTIFACT_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// `shell` keeps at most this much stdout; more stops the command.
pub const SHELL_MAX_STDOUT_BYTES: usize = 256 * 1024;

/// The workspace file tools: `read_file`, `write_file`, `edit_file`,
/// `list_files`, `delete_file`.
pub fn workspace_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile {
            spec: read_file_spec(),
        }),
        Arc::new(WriteFile {
            spec: write_file_spec(),
        }),
        Arc::new(EditFile {
            spec: edit_file_spec(),
        }),
        Arc::new(ListFiles {
            spec: list_files_spec(),
        }),
        Arc::new(DeleteFile {
            spec: delete_file_spec(),
        }),
    ]
}

/// `shell`: runs a command with `sh -c` in the workspace.
/// Its commands run under `containment`, like command tools: contained,
/// they read the system and write only the workspace and a temp dir.
pub fn shell_tool(containment: Containment) -> Arc<dyn Tool> {
    Arc::new(Shell {
        spec: shell_spec(),
        containment,
    })
}

/// `load_skill`: returns a skill's full text by name.
pub fn load_skill_tool() -> Arc<dyn Tool> {
    Arc::new(LoadSkill {
        spec: load_skill_spec(),
    })
}

/// `tag_artifact`: records a workspace file or inline text as an artifact of
/// the session.
pub fn tag_artifact_tool() -> Arc<dyn Tool> {
    Arc::new(TagArtifact {
        spec: tag_artifact_spec(),
    })
}

/// Decodes a tool's input. The runtime validates input against the schema
/// first, but a tool is also callable directly, so it checks again.
fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolOutput> {
    serde_json::from_value(input).map_err(|e| ToolOutput::error(format!("invalid input: {e}")))
}

/// Checks a model-supplied path, turning a refusal into the tool's error.
fn confine(rel: &str) -> Result<Rel, ToolOutput> {
    Rel::parse(rel).map_err(|e| ToolOutput::error(e.to_string()))
}

/// The call's workspace, as a tree.
fn workspace(ctx: &ToolContext) -> TreeRoot {
    ctx.trees.root(&ctx.workspace_dir)
}

/// A workspace error as the tool's error, phrased with the path the model
/// gave.
fn ws_error(rel: &str, e: WorkspaceError) -> ToolOutput {
    match e {
        WorkspaceError::Io { action, source, .. } => fs_error(action, rel, &source),
        other => ToolOutput::error(other.to_string()),
    }
}

/// A file-system error phrased with the workspace-relative path, so the
/// model sees paths it can use and not the host's layout.
fn fs_error(action: &str, rel: &str, e: &io::Error) -> ToolOutput {
    match e.kind() {
        io::ErrorKind::NotFound => ToolOutput::error(format!("no such file: {rel}")),
        io::ErrorKind::IsADirectory => ToolOutput::error(format!("{rel} is a directory")),
        _ => ToolOutput::error(format!("failed to {action} {rel}: {e}")),
    }
}

/// Turns a `Result` whose both arms are outputs into the output.
fn settle(result: Result<ToolOutput, ToolOutput>) -> ToolOutput {
    result.unwrap_or_else(|e| e)
}

// ---------------------------------------------------------------- read_file

struct ReadFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadFileInput {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(read_file(input, &ctx).await)
    }
}

async fn read_file(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: ReadFileInput = parse_input(input)?;
    let first = input.offset.unwrap_or(1);
    if first == 0 {
        return Err(ToolOutput::error("offset counts lines from 1"));
    }
    let limit = input.limit.unwrap_or(u64::MAX);
    if limit == 0 {
        return Err(ToolOutput::error("limit must be at least 1"));
    }
    let rel = confine(&input.path)?;
    let given = input.path.clone();
    let (out, note) = workspace(ctx)
        .open(move |tree| {
            let (file, _) = tree.open_file(&rel)?;
            read_lines(file, first, limit)
                .map_err(|e| WorkspaceError::io("read", &tree.root().join(rel.normalized()), e))
        })
        .await
        .map_err(|e| ws_error(&given, e))?;

    let mut text = match String::from_utf8(out) {
        Ok(text) => text,
        // A cut inside a multi-byte character leaves an incomplete sequence
        // at the very end; anything else is not text.
        Err(e) if note.is_some() && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes)
                .map_err(|_| ToolOutput::error(format!("{} is not UTF-8 text", input.path)))?
        }
        Err(_) => {
            return Err(ToolOutput::error(format!(
                "{} is not UTF-8 text",
                input.path
            )));
        }
    };
    if text.is_empty() && first > 1 && note.is_none() {
        return Ok(ToolOutput::ok(format!(
            "[the file has fewer than {first} lines]"
        )));
    }
    if let Some(note) = note {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
    }
    Ok(ToolOutput::ok(text))
}

/// Lines `first..first + limit` of `file` (counting from 1), cut at
/// [`READ_FILE_CAP_BYTES`], and the note saying where to continue when cut.
/// Streams the file in chunks, counting lines, so neither a huge file nor a
/// huge single line is held in memory beyond the output cap.
fn read_lines(
    mut file: impl Read,
    first: u64,
    limit: u64,
) -> io::Result<(Vec<u8>, Option<String>)> {
    let end = first.saturating_add(limit);
    let mut line: u64 = 1;
    let mut out: Vec<u8> = Vec::new();
    let mut line_start = 0usize;
    let mut note: Option<String> = None;
    let mut buf = vec![0u8; 64 * 1024];
    'read: loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        while !chunk.is_empty() {
            if line >= end {
                break 'read;
            }
            let (piece, rest, complete) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..=i], &chunk[i + 1..], true),
                None => (chunk, &[][..], false),
            };
            if line >= first {
                if out.len() + piece.len() > READ_FILE_CAP_BYTES {
                    if line_start > 0 {
                        // Whole lines only: drop the partial line and say
                        // where to pick up.
                        out.truncate(line_start);
                        note = Some(format!(
                            "[output cut at {READ_FILE_CAP_BYTES} bytes; continue with offset={line}]"
                        ));
                    } else {
                        let room = READ_FILE_CAP_BYTES - out.len();
                        out.extend_from_slice(&piece[..room]);
                        note = Some(format!(
                            "[line {line} is longer than {READ_FILE_CAP_BYTES} bytes and was cut; continue with offset={}]",
                            line + 1
                        ));
                    }
                    break 'read;
                }
                out.extend_from_slice(piece);
            }
            if complete {
                line += 1;
                line_start = out.len();
            }
            chunk = rest;
        }
    }
    Ok((out, note))
}

// --------------------------------------------------------------- write_file

struct WriteFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteFileInput {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(write_file(input, &ctx).await)
    }
}

async fn write_file(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: WriteFileInput = parse_input(input)?;
    let rel = confine(&input.path)?;
    let bytes = input.content.len();
    let content = input.content.into_bytes();
    workspace(ctx)
        .create(move |tree| tree.write(&rel, &content))
        .await
        .map_err(|e| ws_error(&input.path, e))?;
    Ok(ToolOutput::ok(json!({"path": input.path, "bytes": bytes})))
}

// ---------------------------------------------------------------- edit_file

struct EditFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditFileInput {
    path: String,
    old_text: String,
    new_text: String,
}

#[async_trait]
impl Tool for EditFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(edit_file(input, &ctx).await)
    }
}

async fn edit_file(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: EditFileInput = parse_input(input)?;
    if input.old_text.is_empty() {
        return Err(ToolOutput::error("old_text must not be empty"));
    }
    let rel = confine(&input.path)?;
    let given = input.path.clone();
    // Read, edit and write back in one trip to the blocking pool; the write
    // opens the file beneath the workspace again, whatever happened to the
    // name in between.
    let edited = workspace(ctx)
        .open(move |tree| {
            let Some(bytes) = tree.read(&rel, EDIT_FILE_MAX_BYTES)? else {
                return Ok(Err(ToolOutput::error(format!(
                    "{} is larger than {EDIT_FILE_MAX_BYTES} bytes; rewrite it with write_file or the shell",
                    input.path
                ))));
            };
            let edited = match edit_text(bytes, &input) {
                Ok(edited) => edited,
                Err(refusal) => return Ok(Err(refusal)),
            };
            tree.write(&rel, edited.as_bytes())?;
            Ok(Ok(edited.len()))
        })
        .await
        .map_err(|e| ws_error(&given, e))??;
    Ok(ToolOutput::ok(json!({"path": given, "bytes": edited})))
}

/// The file's text with `old_text` replaced once, or why not.
fn edit_text(bytes: Vec<u8>, input: &EditFileInput) -> Result<String, ToolOutput> {
    let text = String::from_utf8(bytes)
        .map_err(|_| ToolOutput::error(format!("{} is not UTF-8 text", input.path)))?;
    let count = text.matches(input.old_text.as_str()).count();
    match count {
        1 => {}
        0 => {
            return Err(ToolOutput::error(format!(
                "old_text does not occur in {}; read the file and copy the text exactly",
                input.path
            )));
        }
        n => {
            return Err(ToolOutput::error(format!(
                "old_text occurs {n} times in {}; include more surrounding text so it occurs exactly once",
                input.path
            )));
        }
    }
    Ok(text.replacen(input.old_text.as_str(), &input.new_text, 1))
}

// --------------------------------------------------------------- list_files

struct ListFiles {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListFilesInput {
    path: Option<String>,
}

#[async_trait]
impl Tool for ListFiles {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(list_files(input, &ctx).await)
    }
}

/// One directory entry, with the key that orders a listing.
struct Listed {
    /// The file name, plus `/` for directories: sorting siblings by this key
    /// and walking depth-first yields exactly the sorted list of full paths,
    /// so the walk can stop at the cap without reading the rest of the tree.
    key: String,
    name: std::ffi::OsString,
    is_dir: bool,
}

/// One directory of the walk: the directory open, its entries left, and the
/// prefix its entries are shown under.
struct Level {
    folder: Folder,
    entries: std::vec::IntoIter<Listed>,
    prefix: String,
}

async fn list_files(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: ListFilesInput = parse_input(input)?;
    let given = input.path.unwrap_or_else(|| ".".to_owned());
    let rel = confine(&given)?;
    let shown = given.clone();
    let walked = workspace(ctx)
        .open(move |tree| {
            let folder = tree.dir(&rel)?;
            let prefix = rel.normalized();
            let entries = read_sorted(&folder, prefix.is_empty())
                .map_err(|e| WorkspaceError::io("list", &tree.root().join(&prefix), e))?;
            Ok(walk(Level {
                folder,
                entries: entries.into_iter(),
                prefix,
            }))
        })
        .await;
    let (lines, truncated) = walked.map_err(|e| match e.io_kind() {
        Some(io::ErrorKind::NotFound) => ToolOutput::error(format!("no such directory: {shown}")),
        Some(io::ErrorKind::NotADirectory) => {
            ToolOutput::error(format!("{shown} is not a directory"))
        }
        _ => ws_error(&shown, e),
    })?;

    let mut text = if lines.is_empty() {
        "(no files)".to_owned()
    } else {
        lines.join("\n")
    };
    if truncated {
        text.push_str(&format!(
            "\n[listing stopped at {LIST_FILES_MAX_ENTRIES} entries; list a subdirectory to see more]"
        ));
    }
    Ok(ToolOutput::ok(text))
}

/// Walks depth-first from `top`, sorted, up to [`LIST_FILES_MAX_ENTRIES`]
/// lines; true when it stopped there. A subdirectory is entered only by
/// name and without following a symlink.
fn walk(top: Level) -> (Vec<String>, bool) {
    let mut lines: Vec<String> = Vec::new();
    let mut stack = vec![top];
    while let Some(level) = stack.last_mut() {
        let Some(entry) = level.entries.next() else {
            stack.pop();
            continue;
        };
        if lines.len() == LIST_FILES_MAX_ENTRIES {
            return (lines, true);
        }
        let shown = if level.prefix.is_empty() {
            entry.key.clone()
        } else {
            format!("{}/{}", level.prefix, entry.key)
        };
        // An unreadable subdirectory (or one swapped for a link meanwhile)
        // is still listed; its contents are simply not shown.
        let below = entry
            .is_dir
            .then(|| level.folder.child(&entry.name).ok())
            .flatten()
            .and_then(|folder| {
                let entries = read_sorted(&folder, false).ok()?;
                Some(Level {
                    folder,
                    entries: entries.into_iter(),
                    prefix: shown.trim_end_matches('/').to_owned(),
                })
            });
        lines.push(shown);
        if let Some(below) = below {
            stack.push(below);
        }
    }
    (lines, false)
}

/// A directory's entries sorted by [`Listed::key`]; `.bdk` is left out at the
/// workspace root (it holds the runtime's own seed files). Symlinks are listed
/// but never followed.
fn read_sorted(folder: &Folder, at_root: bool) -> io::Result<Vec<Listed>> {
    let mut entries = Vec::new();
    for item in folder.entries()? {
        let name = item.name.to_string_lossy().into_owned();
        if at_root && name == ".bdk" {
            continue;
        }
        let is_dir = item.kind == Kind::Dir;
        let key = if is_dir { format!("{name}/") } else { name };
        entries.push(Listed {
            key,
            name: item.name,
            is_dir,
        });
    }
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries)
}

// -------------------------------------------------------------- delete_file

struct DeleteFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteFileInput {
    path: String,
}

#[async_trait]
impl Tool for DeleteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(delete_file(input, &ctx).await)
    }
}

async fn delete_file(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: DeleteFileInput = parse_input(input)?;
    let rel = confine(&input.path)?;
    // A symlink is removed itself, never what it names.
    let removed = workspace(ctx)
        .open(move |tree| tree.remove_file(&rel))
        .await;
    removed.map_err(|e| match e.io_kind() {
        Some(io::ErrorKind::IsADirectory) => ToolOutput::error(format!(
            "{} is a directory; delete_file removes files only",
            input.path
        )),
        _ => ws_error(&input.path, e),
    })?;
    Ok(ToolOutput::ok(json!({"path": input.path, "deleted": true})))
}

// -------------------------------------------------------------------- shell

struct Shell {
    spec: ToolSpec,
    containment: Containment,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellInput {
    command: String,
    timeout_ms: Option<u64>,
}

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(shell(input, &ctx, &self.containment).await)
    }
}

async fn shell(
    input: Value,
    ctx: &ToolContext,
    containment: &Containment,
) -> Result<ToolOutput, ToolOutput> {
    let input: ShellInput = parse_input(input)?;
    if input.command.trim().is_empty() {
        return Err(ToolOutput::error("command must not be empty"));
    }
    let timeout_ms = input
        .timeout_ms
        .unwrap_or(SHELL_DEFAULT_TIMEOUT_MS)
        .clamp(1, SHELL_MAX_TIMEOUT_MS);
    workspace(ctx)
        .create(|_| Ok(()))
        .await
        .map_err(|e| ToolOutput::error(format!("failed to create the workspace: {e}")))?;
    let scratch = containment
        .scratch(&ctx.state_root, &ctx.call_id)
        .await
        .map_err(|e| ToolOutput::error(format!("failed to create the command's temp dir: {e}")))?;
    let mut env = containment.env(&[]);
    env.extend(subprocess::context_env(ctx));
    env.extend(process::temp_env(scratch.path()));
    let grants = Grants {
        write: vec![ctx.workspace_dir.clone(), scratch.path().to_path_buf()],
        ..Grants::default()
    };
    let spec = ProcessSpec {
        program: PathBuf::from("sh"),
        args: vec!["-c".to_owned(), input.command],
        cwd: ctx.workspace_dir.clone(),
        env,
        stdin: None,
        max_stdout: SHELL_MAX_STDOUT_BYTES,
        timeout: Duration::from_millis(timeout_ms),
        sandbox: containment.call(&grants),
    };
    let contained = spec.sandbox.is_some();
    let end = process::run_process(spec, &ctx.cancel).await;
    scratch.finish(containment.tree_gone(contained, &end));
    match end {
        ProcessEnd::Exited {
            status,
            stdout,
            stderr,
        } => {
            // Like a shell's `$?`: a death by signal N reads as 128 + N.
            use std::os::unix::process::ExitStatusExt;
            let code = status.code().or_else(|| status.signal().map(|s| 128 + s));
            let mut result = json!({
                "exitCode": code,
                "stdout": String::from_utf8_lossy(&stdout),
                "stderr": String::from_utf8_lossy(&stderr.bytes),
            });
            if stderr.dropped {
                result["stderrTruncated"] = Value::Bool(true);
            }
            Ok(ToolOutput::ok(result))
        }
        ProcessEnd::OutputExceeded { head } => Ok(ToolOutput {
            content: json!({
                "exitCode": null,
                "stdout": String::from_utf8_lossy(&head),
                "stderr": "",
                "error": format!("output exceeded {SHELL_MAX_STDOUT_BYTES} bytes; the command was killed"),
            }),
            is_error: true,
            blocks: Vec::new(),
        }),
        ProcessEnd::TimedOut => Err(ToolOutput::error(format!(
            "command timed out after {timeout_ms} ms and was killed"
        ))),
        ProcessEnd::Cancelled => Err(ToolOutput::error("tool call cancelled")),
        ProcessEnd::SpawnFailed(e) => Err(ToolOutput::error(format!("failed to start sh: {e}"))),
        ProcessEnd::Failed(e) => Err(ToolOutput::error(format!("shell i/o failed: {e}"))),
        ProcessEnd::LimitReached { limit } => Err(ToolOutput::error(
            subprocess::limit_message(&limit).replace("the tool", "the command"),
        )),
    }
}

// --------------------------------------------------------------- load_skill

struct LoadSkill {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadSkillInput {
    name: String,
}

#[async_trait]
impl Tool for LoadSkill {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        let input: LoadSkillInput = match parse_input(input) {
            Ok(input) => input,
            Err(output) => return output,
        };
        let Some(services) = &ctx.services else {
            return ToolOutput::error("skills are not available in this context");
        };
        match services.skill(&input.name) {
            Some(text) => ToolOutput::ok(text),
            None => ToolOutput::error(format!(
                "unknown skill `{}`; use a name from the skill catalog",
                input.name
            )),
        }
    }
}

// ------------------------------------------------------------- tag_artifact

struct TagArtifact {
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TagArtifactInput {
    kind: String,
    path: Option<String>,
    content: Option<String>,
    name: Option<String>,
    content_type: Option<String>,
    metadata: Option<Value>,
}

#[async_trait]
impl Tool for TagArtifact {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        settle(tag_artifact(input, &ctx).await)
    }
}

async fn tag_artifact(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let input: TagArtifactInput = parse_input(input)?;
    if input.kind.trim().is_empty() {
        return Err(ToolOutput::error("kind must not be empty"));
    }
    let metadata = match input.metadata {
        None => json!({}),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => return Err(ToolOutput::error("metadata must be a JSON object")),
    };
    let Some(services) = ctx.services.clone() else {
        return Err(ToolOutput::error(
            "artifacts are not available in this context",
        ));
    };
    let (bytes, default_name, default_type, path) = match (input.path, input.content) {
        (Some(rel), None) => {
            let file = read_artifact_file(ctx, &rel).await?;
            (file.bytes, file.name, file.content_type, Some(file.path))
        }
        (None, Some(content)) => (
            content.into_bytes(),
            input.kind.clone(),
            "text/plain; charset=utf-8",
            None,
        ),
        (Some(_), Some(_)) | (None, None) => {
            return Err(ToolOutput::error("give exactly one of path or content"));
        }
    };
    let artifact = NewArtifact {
        name: input.name.unwrap_or(default_name),
        content_type: input
            .content_type
            .unwrap_or_else(|| default_type.to_owned()),
        kind: input.kind,
        path,
        content: bytes,
        metadata,
    };
    match services.tag_artifact(ctx, artifact).await {
        Ok(id) => Ok(ToolOutput::ok(json!({"artifactId": id}))),
        Err(message) => Err(ToolOutput::error(format!(
            "failed to tag the artifact: {message}"
        ))),
    }
}

/// A workspace file read for tagging.
pub struct ArtifactFile {
    pub bytes: Vec<u8>,
    /// Its file name (the default display name).
    pub name: String,
    /// Guessed from the name.
    pub content_type: &'static str,
    /// The workspace-relative path, normalized to `/` separators without
    /// `.` parts: what `artifact.tagged` records.
    pub path: String,
}

/// Reads the workspace file `rel` of the call (confined to the workspace, at
/// most [`ARTIFACT_MAX_BYTES`]) for `tag_artifact` and `artifacts.tag`.
pub async fn read_artifact_file(ctx: &ToolContext, rel: &str) -> Result<ArtifactFile, ToolOutput> {
    let parsed = confine(rel)?;
    let name = parsed.file_name().unwrap_or(rel).to_owned();
    let normalized = parsed.normalized();
    let bytes = workspace(ctx)
        .open(move |tree| tree.read(&parsed, ARTIFACT_MAX_BYTES))
        .await
        .map_err(|e| ws_error(rel, e))?
        .ok_or_else(|| {
            ToolOutput::error(format!("{rel} is larger than {ARTIFACT_MAX_BYTES} bytes"))
        })?;
    let content_type = guess_content_type(&name);
    Ok(ArtifactFile {
        bytes,
        name,
        content_type,
        path: if normalized.is_empty() {
            rel.to_owned()
        } else {
            normalized
        },
    })
}

/// A media type from a file name's extension; unknown types are opaque bytes.
fn guess_content_type(name: &str) -> &'static str {
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" => "text/plain; charset=utf-8",
        "md" | "markdown" => "text/markdown; charset=utf-8",
        "json" => "application/json",
        "ndjson" | "jsonl" => "application/x-ndjson",
        "csv" => "text/csv; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "diff" | "patch" => "text/x-diff; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_from_extensions() {
        assert_eq!(
            guess_content_type("report.MD"),
            "text/markdown; charset=utf-8"
        );
        assert_eq!(guess_content_type("data.json"), "application/json");
        assert_eq!(guess_content_type("blob"), "application/octet-stream");
    }

    #[test]
    fn task_spec_lists_subagents() {
        let spec = task_spec(&[
            ("reviewer".to_owned(), "Reviews diffs".to_owned()),
            ("writer".to_owned(), "Writes docs".to_owned()),
        ]);
        assert_eq!(spec.name, "task");
        assert_eq!(spec.effect, crate::tool::Effect::Write);
        assert!(spec.description.contains("- reviewer: Reviews diffs"));
        assert!(spec.description.contains("- writer: Writes docs"));
        assert_eq!(
            spec.input_schema["properties"]["subagent"]["enum"],
            json!(["reviewer", "writer"])
        );
        assert_eq!(spec.input_schema["additionalProperties"], json!(false));
    }
}
