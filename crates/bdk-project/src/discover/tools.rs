//! `tools/<name>.toml`: one tool per manifest, plus the files its runner uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use super::util::{
    Diags, Entry, Fields, Kind, check_env_name, check_schema, is_safe_relpath, list_dir, read_text,
    read_toml, report_other, sandbox_mode, table_to_json,
};
use crate::tool::{Effect, Execution, ToolSpec};
use crate::{SandboxMode, ToolManifest, ToolRunner};

const TOOL_KEYS: &[&str] = &[
    "title",
    "description",
    "input_schema",
    "input_schema_file",
    "output_schema",
    "effect",
    "execution",
    "needs_approval",
    "timeout_ms",
    "command",
    "env",
    "max_output_bytes",
    "sandbox",
    "url",
    "headers",
    "script",
];

/// Default cap on a command tool's stdout.
const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// True for `^[A-Za-z0-9_-]{1,64}$`, the tool name shape providers accept.
fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Discovers the tools in `dir`, sorted by name.
pub(crate) fn discover(d: &mut Diags, dir: &Path) -> Vec<ToolManifest> {
    let entries = list_dir(d, dir);
    let manifests: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.is_file() && e.stem_ext().1 == Some("toml"))
        .collect();
    let stems: BTreeSet<&str> = manifests.iter().map(|e| e.stem_ext().0).collect();

    let mut tools = Vec::new();
    // Paths (relative to tools/) that some manifest points at; files and
    // folders they name are part of a tool, not strays.
    let mut refs: BTreeSet<String> = BTreeSet::new();
    for entry in &manifests {
        if let Some(tool) = parse(d, entry, dir, &mut refs) {
            tools.push(tool);
        }
    }

    for entry in &entries {
        if manifests.iter().any(|m| m.path == entry.path) {
            continue;
        }
        let owned = {
            let name = entry.name.as_str();
            let first_stem = name.split('.').next().unwrap_or(name);
            let shares_stem = stems.contains(first_stem) || stems.contains(entry.stem_ext().0);
            let referenced = match entry.kind {
                Kind::Dir => refs.iter().any(|r| r.starts_with(&format!("{name}/"))),
                _ => refs.contains(name),
            };
            shares_stem || referenced
        };
        match entry.kind {
            Kind::Other => report_other(d, entry),
            Kind::File if !owned => d.warn(
                &entry.path,
                "stray file in tools/: no manifest uses it",
                "reference it from a manifest (`command` or `script`), name it after its manifest (`<tool>.py` next to `<tool>.toml`), or move it to lib/",
            ),
            Kind::Dir if !owned => d.warn(
                &entry.path,
                "stray folder in tools/: no manifest uses it",
                "reference a file inside it from a manifest (for example `command = [\"python3\", \"helper/run.py\"]`), or move it to lib/",
            ),
            Kind::File | Kind::Dir => {}
        }
    }

    // Agent scripts land in one workspace folder by file name, so two scripts
    // with the same name would overwrite each other.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for tool in &tools {
        if let ToolRunner::Script { workspace_path, .. } = &tool.runner
            && let Some(other) = seen.insert(workspace_path.clone(), tool.spec.name.clone())
        {
            d.error(
                &tool.path,
                format!("script lands at {workspace_path}, which tool `{other}` also uses"),
                "give each agent script a distinct file name",
            );
        }
    }

    tools.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    tools
}

/// Strips a leading `./` so `./run.py` and `run.py` name the same file.
pub(crate) fn norm_ref(arg: &str) -> String {
    let mut s = arg;
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    s.to_owned()
}

/// Parses one manifest; `None` when it has errors (they are reported).
fn parse(
    d: &mut Diags,
    entry: &Entry,
    dir: &Path,
    refs: &mut BTreeSet<String>,
) -> Option<ToolManifest> {
    let path = entry.path.as_path();
    let name = entry.stem_ext().0.to_owned();
    let errors_before = d.error_count();
    if !is_tool_name(&name) {
        d.error(
            path,
            format!("tool name `{name}` is invalid: use 1-64 letters, digits, `_` or `-`"),
            "rename the manifest so its file stem matches ^[A-Za-z0-9_-]{1,64}$",
        );
    }
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, TOOL_KEYS);

    let description = if f.has("description") {
        f.nonempty_string(d, "description")
    } else {
        d.error(
            path,
            "missing `description`",
            "add `description = \"...\"` saying what the tool does and when to use it",
        );
        None
    };

    // A display title for people; `nonempty_string` reports an empty one.
    let title = if f.has("title") {
        f.nonempty_string(d, "title")
    } else {
        None
    };
    let input_schema = input_schema(d, &f, dir, refs);
    let output_schema = match f.table(d, "output_schema") {
        Some(t) => {
            let schema = table_to_json(t);
            check_schema(d, path, "output_schema", &schema).then_some(schema)
        }
        None => None,
    };

    let effect = match f.string(d, "effect").as_deref() {
        None | Some("write") => Effect::Write,
        Some("read") => Effect::Read,
        Some(other) => {
            d.error(
                path,
                format!("`effect` must be \"read\" or \"write\", found \"{other}\""),
                "set `effect = \"read\"` for tools that change nothing, else `\"write\"`",
            );
            Effect::Write
        }
    };
    let execution = match f.string(d, "execution").as_deref() {
        None | Some("server") => Execution::Server,
        Some("agent") => Execution::Agent,
        Some(other) => {
            d.error(
                path,
                format!("`execution` must be \"server\" or \"agent\", found \"{other}\""),
                "set `execution = \"server\"` (runs on the host) or `\"agent\"` (a script in the workspace)",
            );
            Execution::Server
        }
    };
    let needs_approval = f.bool(d, "needs_approval").unwrap_or(false);
    let timeout_ms = f.positive(d, "timeout_ms");

    let runner = runner(d, &f, dir, execution, refs);

    if d.error_count() > errors_before {
        return None;
    }
    Some(ToolManifest {
        path: path.to_owned(),
        dir: dir.to_owned(),
        spec: ToolSpec {
            name,
            title,
            description: description?,
            input_schema: input_schema?,
            output_schema,
            effect,
            execution,
            needs_approval,
            timeout_ms,
        },
        runner: runner?,
    })
}

/// The input schema: inline, from a JSON file, or the empty object schema.
fn input_schema(
    d: &mut Diags,
    f: &Fields<'_>,
    dir: &Path,
    refs: &mut BTreeSet<String>,
) -> Option<Value> {
    let path = f.path;
    let schema = match (f.has("input_schema"), f.has("input_schema_file")) {
        (true, true) => {
            d.error(
                path,
                "both `input_schema` and `input_schema_file` are set",
                "keep only one of `input_schema` (inline) and `input_schema_file` (a JSON file)",
            );
            return None;
        }
        (false, false) => return Some(json!({"type": "object", "properties": {}})),
        (true, false) => table_to_json(f.table(d, "input_schema")?),
        (false, true) => {
            let rel = f.nonempty_string(d, "input_schema_file")?;
            if !is_safe_relpath(&rel) {
                d.error(
                    path,
                    format!(
                        "`input_schema_file` must be a relative path inside tools/, found `{rel}`"
                    ),
                    "point `input_schema_file` at a JSON file in tools/ (no `..`, not absolute)",
                );
                return None;
            }
            refs.insert(rel.clone());
            let file = dir.join(&rel);
            let text = read_text(d, &file)?;
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => v,
                Err(e) => {
                    d.error(
                        &file,
                        format!("invalid JSON: {e}"),
                        "fix the JSON syntax of the schema file",
                    );
                    return None;
                }
            }
        }
    };
    if !check_schema(d, path, "input_schema", &schema) {
        return None;
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        d.error(
            path,
            "`input_schema` must have top-level `\"type\": \"object\"`",
            "describe the tool input as an object: `type = \"object\"` with its `properties`",
        );
        return None;
    }
    Some(schema)
}

/// The runner: exactly one of `command`, `url` (server) or `script` (agent).
fn runner(
    d: &mut Diags,
    f: &Fields<'_>,
    dir: &Path,
    execution: Execution,
    refs: &mut BTreeSet<String>,
) -> Option<ToolRunner> {
    let path = f.path;
    let present: Vec<&str> = ["command", "url", "script"]
        .into_iter()
        .filter(|k| f.has(k))
        .collect();
    for (key, owner) in [
        ("env", "command"),
        ("max_output_bytes", "command"),
        ("sandbox", "command"),
        ("headers", "url"),
    ] {
        if f.has(key) && !f.has(owner) {
            d.warn(
                path,
                format!("`{key}` is ignored without `{owner}`"),
                format!("remove `{key}`, or run the tool with `{owner}`"),
            );
        }
    }
    // Command arguments name the tool's own files, so record them even
    // when the manifest is otherwise broken: strays are reported once.
    if let Some(toml::Value::Array(args)) = f.table.get("command") {
        refs.extend(args.iter().filter_map(toml::Value::as_str).map(norm_ref));
    }
    if let Some(toml::Value::String(script)) = f.table.get("script") {
        refs.insert(norm_ref(script));
    }
    let key = match present.as_slice() {
        [] => {
            let fix = match execution {
                Execution::Server => {
                    "add `command = [\"python3\", \"<tool>.py\"]` or `url = \"https://...\"`"
                }
                Execution::Agent => "add `script = \"<file>\"` naming a script in tools/",
            };
            d.error(path, "no runner: set `command`, `url` or `script`", fix);
            return None;
        }
        [one] => *one,
        many => {
            d.error(
                path,
                format!("more than one runner ({})", many.join(", ")),
                "keep exactly one of `command`, `url` and `script`",
            );
            return None;
        }
    };
    match (key, execution) {
        ("script", Execution::Server) => {
            d.error(
                path,
                "`script` needs `execution = \"agent\"`",
                "set `execution = \"agent\"`, or use `command` for a tool that runs on the host",
            );
            return None;
        }
        ("command" | "url", Execution::Agent) => {
            d.error(
                path,
                format!("agent-execution tools run a `script`, not `{key}`"),
                format!(
                    "replace `{key}` with `script = \"<file>\"`, or set `execution = \"server\"`"
                ),
            );
            return None;
        }
        _ => {}
    }
    match key {
        "command" => {
            let argv = f.strings(d, "command")?;
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                d.error(
                    path,
                    "`command` must start with a program",
                    "write `command = [\"program\", \"arg\", ...]`",
                );
                return None;
            }
            // `env` sets values (a table) or passes the server's own
            // variables through by name (an array).
            let (env, pass_env) = match f.table.get("env") {
                Some(toml::Value::Array(_)) => {
                    let names = f.strings(d, "env").unwrap_or_default();
                    for name in &names {
                        check_env_name(d, path, name);
                    }
                    (BTreeMap::new(), names)
                }
                _ => (f.string_map(d, "env").unwrap_or_default(), Vec::new()),
            };
            let max_output_bytes = match f.positive(d, "max_output_bytes") {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => DEFAULT_MAX_OUTPUT_BYTES,
            };
            let sandbox = sandbox_mode(d, f, "sandbox").unwrap_or_default();
            if sandbox == SandboxMode::Off {
                d.warn(
                    path,
                    "`sandbox = \"off\"`: this tool runs uncontained, with access to every file the server can read and write",
                    "remove `sandbox = \"off\"` and grant what the tool needs with `[sandbox] read`/`write` in agent.toml",
                );
            }
            Some(ToolRunner::Command {
                argv,
                env,
                pass_env,
                sandbox,
                max_output_bytes,
            })
        }
        "url" => {
            let url = f.nonempty_string(d, "url")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                d.error(
                    path,
                    format!("`url` must start with http:// or https://, found `{url}`"),
                    "write the full endpoint URL, for example `url = \"https://example.com/tool\"`",
                );
                return None;
            }
            let headers = f.string_map(d, "headers").unwrap_or_default();
            Some(ToolRunner::Url { url, headers })
        }
        _ => {
            let script = f.nonempty_string(d, "script")?;
            let rel = norm_ref(&script);
            if !is_safe_relpath(&rel) {
                d.error(
                    path,
                    format!("`script` must be a relative path inside tools/, found `{script}`"),
                    "point `script` at a file in tools/ (no `..`, not absolute)",
                );
                return None;
            }
            let source = dir.join(&rel);
            if super::util::path_kind(&source) != Some(Kind::File) {
                d.error(
                    path,
                    format!("script `{script}` does not exist in tools/"),
                    format!("create tools/{rel} or correct `script`"),
                );
                return None;
            }
            let file_name = rel.rsplit('/').next().unwrap_or(&rel).to_owned();
            Some(ToolRunner::Script {
                source,
                workspace_path: format!(".bdk/tools/{file_name}"),
            })
        }
    }
}
