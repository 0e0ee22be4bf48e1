//! `resources.toml`: the resources and resource templates an agent
//! publishes to MCP callers, and `resources/`, the folder their files
//! usually live in.
//!
//! A `[[resources]]` entry serves a file of the agent folder under a URI;
//! a `[[templates]]` entry serves the result of a server tool for every URI
//! its template matches. Every problem is a diagnostic naming the entry;
//! a broken entry is left out, the others are served.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use super::schedules::Targets;
use super::util::{
    Diags, Fields, Kind, is_safe_relpath, list_dir, path_kind, read_toml, report_other,
};
use crate::tool::Execution;
use crate::{
    AgentResource, AgentResourceTemplate, AgentResources, MAX_RESOURCE_BYTES, UriTemplate,
    check_uri,
};

/// The most entries of each kind one agent may declare: the first page of
/// `resources/list` carries every declared resource.
pub(crate) const MAX_ENTRIES: usize = 100;

const TOP_KEYS: &[&str] = &["resources", "templates"];
const RESOURCE_KEYS: &[&str] = &["uri", "name", "title", "description", "mime_type", "file"];
const TEMPLATE_KEYS: &[&str] = &[
    "uri_template",
    "name",
    "title",
    "description",
    "mime_type",
    "tool",
];

/// The tools a template may name.
pub(crate) struct Tools<'a> {
    /// The tools of the folder and the enabled built-ins.
    pub(crate) targets: &'a Targets,
    /// The names of the enabled built-ins.
    pub(crate) builtins: &'a BTreeSet<String>,
    /// `[builtin_tools] direct`: the built-ins remote callers may call.
    pub(crate) direct: &'a [String],
}

/// Reads `agent_dir/resources.toml` (absent is no resources) and warns
/// about files under `resources/` that no entry serves.
pub(crate) fn discover(d: &mut Diags, agent_dir: &Path, tools: &Tools<'_>) -> AgentResources {
    let path = agent_dir.join("resources.toml");
    let mut out = AgentResources::default();
    if path_kind(&path).is_some()
        && let Some(table) = read_toml(d, &path)
    {
        out.path = Some(path.clone());
        let f = Fields::new(&table, &path);
        f.unknown_keys(d, TOP_KEYS);
        for (i, entry) in entries(d, &f, "resources").into_iter().enumerate() {
            let prefix = format!("resources[{i}].");
            let e = Fields::nested(entry, &path, prefix);
            if let Some(r) = resource(d, &e, agent_dir) {
                if out.resources.iter().any(|o| o.uri == r.uri) {
                    d.error(
                        &path,
                        format!("resource `{}` is declared more than once", r.uri),
                        "keep one [[resources]] entry per URI",
                    );
                    continue;
                }
                out.resources.push(r);
            }
        }
        for (i, entry) in entries(d, &f, "templates").into_iter().enumerate() {
            let prefix = format!("templates[{i}].");
            let e = Fields::nested(entry, &path, prefix);
            if let Some(t) = template(d, &e, tools) {
                if out
                    .templates
                    .iter()
                    .any(|o| o.uri_template == t.uri_template)
                {
                    d.error(
                        &path,
                        format!("template `{}` is declared more than once", t.uri_template),
                        "keep one [[templates]] entry per URI template",
                    );
                    continue;
                }
                out.templates.push(t);
            }
        }
    }
    let folder = agent_dir.join("resources");
    if path_kind(&folder) == Some(Kind::Dir) {
        let served: BTreeSet<&str> = out.resources.iter().map(|r| r.file.as_str()).collect();
        strays(d, &folder, "resources/", &served, 0);
    }
    out
}

/// The tables of the array `key`, capped at [`MAX_ENTRIES`].
fn entries<'a>(d: &mut Diags, f: &Fields<'a>, key: &str) -> Vec<&'a toml::Table> {
    let Some(value) = f.table.get(key) else {
        return Vec::new();
    };
    let toml::Value::Array(items) = value else {
        d.error(
            f.path,
            format!(
                "`{key}` must be an array of tables, found {}",
                value.type_str()
            ),
            format!("declare each entry as a `[[{key}]]` section"),
        );
        return Vec::new();
    };
    if items.len() > MAX_ENTRIES {
        d.error(
            f.path,
            format!(
                "at most {MAX_ENTRIES} `[[{key}]]` entries are served, found {}",
                items.len()
            ),
            "serve fewer, or use a template for a family of resources",
        );
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().take(MAX_ENTRIES).enumerate() {
        match item {
            toml::Value::Table(t) => out.push(t),
            other => d.error(
                f.path,
                format!("`{key}[{i}]` must be a table, found {}", other.type_str()),
                format!("declare each entry as a `[[{key}]]` section"),
            ),
        }
    }
    out
}

/// What every entry has: a name, and optionally a title, a description and
/// a media type. `None` after an error.
struct Common {
    name: Option<String>,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
}

fn common(d: &mut Diags, e: &Fields<'_>) -> Common {
    if !e.has("name") {
        let k = e.key("name");
        d.error(
            e.path,
            format!("missing `{k}`"),
            "give the entry a `name = \"...\"`, shown in MCP clients' listings",
        );
    }
    let name = e.nonempty_string(d, "name").map(|s| s.trim().to_owned());
    let title = e.nonempty_string(d, "title").map(|s| s.trim().to_owned());
    let description = e
        .nonempty_string(d, "description")
        .map(|s| s.trim().to_owned());
    let mime_type = e.nonempty_string(d, "mime_type").and_then(|m| {
        let m = m.trim().to_owned();
        if is_media_type(&m) {
            Some(m)
        } else {
            let k = e.key("mime_type");
            d.error(
                e.path,
                format!("`{k}` `{m}` is not a media type"),
                "write it as `type/subtype`, for example `text/markdown` or `image/png`",
            );
            None
        }
    });
    Common {
        name,
        title,
        description,
        mime_type,
    }
}

/// `type/subtype` with optional parameters, in printable ASCII.
fn is_media_type(m: &str) -> bool {
    let essence = m.split(';').next().unwrap_or("").trim();
    let token = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
    };
    m.chars().all(|c| c.is_ascii() && !c.is_ascii_control())
        && essence
            .split_once('/')
            .is_some_and(|(t, s)| token(t) && token(s))
}

fn resource(d: &mut Diags, e: &Fields<'_>, agent_dir: &Path) -> Option<AgentResource> {
    e.unknown_keys(d, RESOURCE_KEYS);
    let errors_before = d.error_count();
    if e.has("uri_template") || e.has("tool") {
        d.error(
            e.path,
            format!(
                "`{}` and `{}` belong to templates",
                e.key("uri_template"),
                e.key("tool")
            ),
            "declare a template as a `[[templates]]` section",
        );
    }
    e.require(d, &["uri", "file"]);
    let uri = e
        .nonempty_string(d, "uri")
        .and_then(|uri| match check_uri(&uri) {
            Ok(()) => Some(uri),
            Err(why) => {
                let k = e.key("uri");
                d.error(
                    e.path,
                    format!("`{k}` `{}` is not usable: {why}", shorten(&uri)),
                    "write an absolute URI with your own scheme, such as `docs://runbook`",
                );
                None
            }
        });
    let common = common(d, e);
    let file = e
        .nonempty_string(d, "file")
        .and_then(|file| check_file(d, e, agent_dir, &file).then_some(file));
    if d.error_count() > errors_before {
        return None;
    }
    Some(AgentResource {
        uri: uri?,
        name: common.name?,
        title: common.title,
        description: common.description,
        mime_type: common.mime_type,
        file: file?,
    })
}

/// The file of a resource: a relative path that stays inside the agent
/// folder (also after following symlinks), naming a regular file no larger
/// than a read returns.
fn check_file(d: &mut Diags, e: &Fields<'_>, agent_dir: &Path, file: &str) -> bool {
    let k = e.key("file");
    if !is_safe_relpath(file) {
        d.error(
            e.path,
            format!("`{k}` `{}` must be a relative path inside the agent folder", shorten(file)),
            "write a path relative to the agent folder, such as `resources/runbook.md` (no `..`, not absolute)",
        );
        return false;
    }
    let path = agent_dir.join(file);
    let inside = match (fs::canonicalize(&path), fs::canonicalize(agent_dir)) {
        (Ok(real), Ok(root)) => real.starts_with(root),
        (Err(e2), _) if e2.kind() == std::io::ErrorKind::NotFound => {
            d.error(
                e.path,
                format!("`{k}` `{file}` does not exist"),
                "create the file or correct the path (relative to the agent folder)",
            );
            return false;
        }
        (Err(e2), _) | (_, Err(e2)) => {
            d.error(
                e.path,
                format!("cannot read `{k}` `{file}`: {e2}"),
                "check that the file is readable by this user",
            );
            return false;
        }
    };
    if !inside {
        d.error(
            e.path,
            format!("`{k}` `{file}` leads outside the agent folder through a symlink"),
            "replace the symlink with a copy of the file",
        );
        return false;
    }
    match fs::metadata(&path) {
        Ok(m) if !m.is_file() => {
            d.error(
                e.path,
                format!("`{k}` `{file}` is not a regular file"),
                "name a file; folders are not resources",
            );
            false
        }
        Ok(m) if m.len() > MAX_RESOURCE_BYTES => {
            d.error(
                e.path,
                format!(
                    "`{k}` `{file}` is too large ({} bytes; a read returns at most {} MiB)",
                    m.len(),
                    MAX_RESOURCE_BYTES / (1024 * 1024)
                ),
                "shrink the file, or serve it another way (an artifact, a channel route)",
            );
            false
        }
        Ok(_) => true,
        Err(e2) => {
            d.error(
                e.path,
                format!("cannot read `{k}` `{file}`: {e2}"),
                "check that the file is readable by this user",
            );
            false
        }
    }
}

fn template(d: &mut Diags, e: &Fields<'_>, tools: &Tools<'_>) -> Option<AgentResourceTemplate> {
    e.unknown_keys(d, TEMPLATE_KEYS);
    let errors_before = d.error_count();
    if e.has("uri") || e.has("file") {
        d.error(
            e.path,
            format!(
                "`{}` and `{}` belong to fixed resources",
                e.key("uri"),
                e.key("file")
            ),
            "declare a fixed resource as a `[[resources]]` section; a template names `uri_template` and `tool`",
        );
    }
    e.require(d, &["uri_template", "tool"]);
    let uri_template = e
        .nonempty_string(d, "uri_template")
        .and_then(|raw| match UriTemplate::parse(&raw) {
            Ok(t) => Some(t),
            Err(why) => {
                let k = e.key("uri_template");
                d.error(
                    e.path,
                    format!("`{k}` `{}` is not usable: {why}", shorten(&raw)),
                    "write an absolute URI with simple `{name}` variables, such as `docs://pages/{slug}`",
                );
                None
            }
        });
    let common = common(d, e);
    let tool = e
        .nonempty_string(d, "tool")
        .and_then(|tool| check_tool(d, e, tools, &tool).then_some(tool));
    if d.error_count() > errors_before {
        return None;
    }
    Some(AgentResourceTemplate {
        uri_template: uri_template?,
        name: common.name?,
        title: common.title,
        description: common.description,
        mime_type: common.mime_type,
        tool: tool?,
    })
}

/// The tool of a template must be one an MCP caller may run directly: a
/// server tool of the folder without approval, or a built-in the agent
/// exposes in `[builtin_tools] direct`. A tool only an MCP connection can
/// bring is a warning, since it is known once connected.
fn check_tool(d: &mut Diags, e: &Fields<'_>, tools: &Tools<'_>, tool: &str) -> bool {
    let k = e.key("tool");
    let Tools {
        targets,
        builtins,
        direct,
    } = tools;
    match targets.tools.get(tool) {
        Some(spec) if spec.execution == Execution::Agent => {
            d.error(
                e.path,
                format!("`{k}` `{tool}` runs in a session's workspace and cannot back a resource"),
                "name a server tool (`execution = \"server\"`)",
            );
            false
        }
        Some(spec) if spec.needs_approval => {
            d.error(
                e.path,
                format!("`{k}` `{tool}` needs approval, which a resource read cannot give"),
                "name a tool without `needs_approval`",
            );
            false
        }
        Some(_) if builtins.contains(tool) && !direct.iter().any(|n| n == tool) => {
            d.error(
                e.path,
                format!("`{k}` `{tool}` is a built-in that remote callers may not call"),
                format!("add `\"{tool}\"` to `direct` under [builtin_tools] in agent/agent.toml, or name a tool of tools/"),
            );
            false
        }
        Some(_) => true,
        None if targets.mcp_advertises => {
            d.warn(
                e.path,
                format!("`{k}` `{tool}` is not a tool of this folder; it must come from an MCP connection that advertises its tools"),
                "check the name against the connection's tools (`bdk info` lists them once connected)",
            );
            true
        }
        None => {
            let known = targets
                .tools
                .iter()
                .filter(|(n, s)| s.execution != Execution::Agent && !builtins.contains(n.as_str()))
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            d.error(
                e.path,
                format!("`{k}` names the unknown tool `{tool}`"),
                if known.is_empty() {
                    "add a tool under tools/ that takes the template's variables as its input"
                        .to_owned()
                } else {
                    format!("name one of the agent's server tools: {known}")
                },
            );
            false
        }
    }
}

/// Warns about each file under `resources/` that no `[[resources]]` entry
/// serves: a file there is meant to be served, and one that is not is
/// probably a typo in `file`.
fn strays(d: &mut Diags, dir: &Path, prefix: &str, served: &BTreeSet<&str>, depth: usize) {
    // Deep enough for any real layout; a deeper tree is not walked.
    if depth > 16 {
        return;
    }
    for entry in list_dir(d, dir) {
        let rel = format!("{prefix}{}", entry.name);
        match entry.kind {
            Kind::Dir if !entry.symlink => {
                strays(d, &entry.path, &format!("{rel}/"), served, depth + 1)
            }
            Kind::Dir => {}
            Kind::File if !served.contains(rel.as_str()) => d.warn(
                &entry.path,
                "file in resources/ that no [[resources]] entry of resources.toml serves",
                format!("serve it with `file = \"{rel}\"` in a [[resources]] entry, or remove it"),
            ),
            Kind::File => {}
            Kind::Other => report_other(d, &entry),
        }
    }
}

/// A value from the manifest, shortened for a message.
fn shorten(raw: &str) -> String {
    let mut out: String = raw.chars().take(120).collect();
    if out.len() < raw.len() {
        out.push('…');
    }
    out
}
