//! The specs of the runtime's built-in tools (workspace files, `shell`,
//! `tag_artifact`, `load_skill`, `task`): what discovery, listings and
//! the model see of them. The runtime implements them (`bdk_core::tool::builtin`).

use serde_json::json;

use crate::tool::{Effect, ToolSpec};

/// `shell`'s timeout when the call names none.
pub const SHELL_DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The longest timeout a `shell` call may ask for.
pub const SHELL_MAX_TIMEOUT_MS: u64 = 600_000;

/// The specs of the workspace file tools, in listing order: `read_file`,
/// `write_file`, `edit_file`, `list_files`, `delete_file`.
pub fn workspace_specs() -> Vec<ToolSpec> {
    vec![
        read_file_spec(),
        write_file_spec(),
        edit_file_spec(),
        list_files_spec(),
        delete_file_spec(),
    ]
}

/// The spec of `read_file`.
pub fn read_file_spec() -> ToolSpec {
    ToolSpec::server(
        "read_file",
        "Read a UTF-8 text file from the workspace. Optionally start at line `offset` \
         (counting from 1) and return at most `limit` lines. Long output is cut at 256 KiB \
         with a note saying where to continue.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Workspace-relative file path."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1 = the first line)."},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        Effect::Read,
    )
}

/// The spec of `write_file`.
pub fn write_file_spec() -> ToolSpec {
    ToolSpec::server(
        "write_file",
        "Create or overwrite a file in the workspace with the given text, creating parent \
         directories as needed.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Workspace-relative file path."},
                "content": {"type": "string", "description": "The complete new content."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
        Effect::Write,
    )
}

/// The spec of `edit_file`.
pub fn edit_file_spec() -> ToolSpec {
    ToolSpec::server(
        "edit_file",
        "Replace one exact piece of text in a workspace file. `old_text` must occur exactly \
         once: include enough surrounding lines to make it unique.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Workspace-relative file path."},
                "old_text": {"type": "string", "minLength": 1, "description": "The exact text to replace (must occur once)."},
                "new_text": {"type": "string", "description": "The replacement text."}
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": false
        }),
        Effect::Write,
    )
}

/// The spec of `list_files`.
pub fn list_files_spec() -> ToolSpec {
    ToolSpec::server(
        "list_files",
        "List the files and directories under a workspace directory (default: the whole \
         workspace), recursively and sorted, one workspace-relative path per line; \
         directories end with '/'. Stops after 1000 entries.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Workspace-relative directory (default \".\")."}
            },
            "additionalProperties": false
        }),
        Effect::Read,
    )
}

/// The spec of `delete_file`.
pub fn delete_file_spec() -> ToolSpec {
    ToolSpec::server(
        "delete_file",
        "Delete a file from the workspace (files only, not directories).",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "Workspace-relative file path."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        Effect::Write,
    )
}

/// The spec of `shell`: runs a command with `sh -c` in the workspace.
pub fn shell_spec() -> ToolSpec {
    let mut spec = ToolSpec::server(
        "shell",
        "Run a shell command (sh -c) with the session workspace as the working directory. \
         Returns the exit code, stdout and the end of stderr. Use it for scripts, builds and \
         the agent tools listed in AGENTS.md. The command is killed, with everything it \
         started, when it exceeds its timeout.",
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "The command line, run with sh -c."},
                "timeout_ms": {
                    "type": "integer", "minimum": 1, "maximum": SHELL_MAX_TIMEOUT_MS,
                    "description": format!("Kill the command after this many milliseconds (default {SHELL_DEFAULT_TIMEOUT_MS}).")
                }
            },
            "required": ["command"],
            "additionalProperties": false
        }),
        Effect::Write,
    );
    // The call applies its own (input-chosen) timeout; advertise the largest
    // one so a runtime-level deadline never cuts a command short of it.
    spec.timeout_ms = Some(SHELL_MAX_TIMEOUT_MS + 5_000);
    spec
}

/// The spec of `load_skill`: returns a skill's full text by name.
pub fn load_skill_spec() -> ToolSpec {
    ToolSpec::server(
        "load_skill",
        "Load a skill by name and return its full instructions. Load a skill from the \
         catalog in your instructions before doing the work it describes.",
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "The skill name, as listed in the catalog."}
            },
            "required": ["name"],
            "additionalProperties": false
        }),
        Effect::Read,
    )
}

/// The spec of `tag_artifact`: records a workspace file or inline text as
/// an artifact of the session.
pub fn tag_artifact_spec() -> ToolSpec {
    ToolSpec::server(
        "tag_artifact",
        "Tag a result worth keeping (a report, a patch, a generated file) as an artifact \
         of this session so people and other systems can find it. Give exactly one of \
         `path` (a file in the workspace, at most 10 MiB) or `content` (inline text).",
        json!({
            "type": "object",
            "properties": {
                "kind": {"type": "string", "minLength": 1, "description": "What the artifact is, e.g. report, patch, summary."},
                "path": {"type": "string", "description": "A workspace file to tag."},
                "content": {"type": "string", "description": "Inline text to tag."},
                "name": {"type": "string", "minLength": 1, "description": "A display name (default: the file name, or the kind)."},
                "contentType": {"type": "string", "minLength": 1, "description": "The media type (default: guessed from the file name, text/plain for content)."},
                "metadata": {"type": "object", "description": "Extra JSON facts about the artifact."}
            },
            "required": ["kind"],
            "additionalProperties": false
        }),
        Effect::Write,
    )
}

/// The spec of `task`, which delegates to a subagent. The agent loop
/// recognizes the name and runs the subagent itself; `subagents` is
/// `(name, description)` pairs.
pub fn task_spec(subagents: &[(String, String)]) -> ToolSpec {
    let mut description = String::from(
        "Delegate a self-contained task to a subagent and get its final reply. The subagent \
         does not see this conversation: put everything it needs in the prompt. Subagents:",
    );
    for (name, about) in subagents {
        description.push_str(&format!("\n- {name}: {about}"));
    }
    let names: Vec<&str> = subagents.iter().map(|(name, _)| name.as_str()).collect();
    ToolSpec::server(
        "task",
        &description,
        json!({
            "type": "object",
            "properties": {
                "subagent": {"type": "string", "enum": names, "description": "Which subagent to run."},
                "prompt": {"type": "string", "minLength": 1, "description": "The complete task for the subagent."}
            },
            "required": ["subagent", "prompt"],
            "additionalProperties": false
        }),
        Effect::Write,
    )
}
