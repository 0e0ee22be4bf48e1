//! `mcp-connections/`, `channels/` and `hooks/`: one TOML manifest per file,
//! named by its file stem.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bdk_events::EVENT_TYPES;
use toml::Table;

use super::util::{
    Diags, Entry, Fields, Kind, check_schema, is_slug, list_dir, read_toml, report_other,
    table_to_json,
};
use crate::project::{
    ChannelManifest, HookEvents, HookManifest, HookTarget, McpConnection, McpTransport,
};

/// The `.toml` manifests of a folder, with strays reported. `what` names the
/// folder in messages.
fn manifests(d: &mut Diags, dir: &Path, what: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for entry in list_dir(d, dir) {
        match (entry.kind, entry.stem_ext().1) {
            (Kind::File, Some("toml")) => out.push(entry),
            (Kind::Other, _) => report_other(d, &entry),
            (Kind::File, _) => d.warn(
                &entry.path,
                format!("stray file in {what}/: only <name>.toml manifests are discovered"),
                "rename it to <name>.toml if it is a manifest, or move it to lib/",
            ),
            (Kind::Dir, _) => d.warn(
                &entry.path,
                format!("stray folder in {what}/: only <name>.toml manifests are discovered"),
                "move the folder to lib/ or remove it",
            ),
        }
    }
    out
}

const MCP_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "bearer_token_env",
    "advertise_tools",
    "timeout_ms",
];

/// Discovers MCP connections, sorted by name.
pub(crate) fn mcp_connections(d: &mut Diags, dir: &Path) -> Vec<McpConnection> {
    let mut out = Vec::new();
    for entry in manifests(d, dir, "mcp-connections") {
        let name = entry.stem_ext().0.to_owned();
        let errors_before = d.error_count();
        if !is_slug(&name, 64) {
            d.error(
                &entry.path,
                format!("connection name `{name}` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
        }
        let Some(table) = read_toml(d, &entry.path) else {
            continue;
        };
        let transport = mcp_transport(d, &entry.path, &table);
        let f = Fields::new(&table, &entry.path);
        let advertise_tools = f.bool(d, "advertise_tools").unwrap_or(false);
        let timeout_ms = f.positive(d, "timeout_ms");
        if d.error_count() > errors_before {
            continue;
        }
        if let Some(transport) = transport {
            out.push(McpConnection {
                name,
                path: entry.path.clone(),
                transport,
                advertise_tools,
                timeout_ms,
            });
        }
    }
    out
}

fn mcp_transport(d: &mut Diags, path: &Path, table: &Table) -> Option<McpTransport> {
    let f = Fields::new(table, path);
    f.unknown_keys(d, MCP_KEYS);
    let stdio_only = ["args", "env", "cwd"];
    let http_only = ["headers", "bearer_token_env"];
    match (f.has("command"), f.has("url")) {
        (true, true) => {
            d.error(
                path,
                "both `command` and `url` are set",
                "keep `command` for a local stdio server or `url` for a remote HTTP server, not both",
            );
            None
        }
        (false, false) => {
            d.error(
                path,
                "no transport: set `command` (stdio) or `url` (streamable HTTP)",
                "add `command = \"npx\"` with `args = [...]`, or `url = \"https://.../mcp\"`",
            );
            None
        }
        (true, false) => {
            for key in http_only {
                if f.has(key) {
                    d.warn(
                        path,
                        format!("`{key}` is ignored for a stdio connection"),
                        format!("remove `{key}`; it applies to `url` connections"),
                    );
                }
            }
            let command = f.nonempty_string(d, "command");
            let args = f.strings(d, "args").unwrap_or_default();
            let env = f.string_map(d, "env").unwrap_or_default();
            let cwd = f.nonempty_string(d, "cwd").map(PathBuf::from);
            Some(McpTransport::Stdio {
                command: command?,
                args,
                env,
                cwd,
            })
        }
        (false, true) => {
            for key in stdio_only {
                if f.has(key) {
                    d.warn(
                        path,
                        format!("`{key}` is ignored for an HTTP connection"),
                        format!("remove `{key}`; it applies to `command` connections"),
                    );
                }
            }
            let url = f.nonempty_string(d, "url")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                d.error(
                    path,
                    format!("`url` must start with http:// or https://, found `{url}`"),
                    "write the server's full endpoint URL",
                );
                return None;
            }
            let headers = f.string_map(d, "headers").unwrap_or_default();
            let bearer_token_env = f.nonempty_string(d, "bearer_token_env");
            Some(McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            })
        }
    }
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Discovers custom channels, sorted by name. The manifests' other keys
/// belong to the HTTP layer, so unknown keys are kept rather than warned about.
pub(crate) fn channels(d: &mut Diags, dir: &Path) -> Vec<ChannelManifest> {
    let mut out = Vec::new();
    for entry in manifests(d, dir, "channels") {
        let name = entry.stem_ext().0.to_owned();
        let path = entry.path.as_path();
        let errors_before = d.error_count();
        if !is_slug(&name, usize::MAX) {
            d.error(
                path,
                format!("channel name `{name}` is invalid"),
                "use letters, digits, `_` or `-`, starting with a letter or digit",
            );
        }
        let Some(table) = read_toml(d, path) else {
            continue;
        };
        let f = Fields::new(&table, path);
        check_auth(d, &f);
        let mut routes = Vec::new();
        match table.get("routes") {
            None => d.error(
                path,
                "missing `[[routes]]`: a channel needs at least one route",
                "add a `[[routes]]` entry with `method = \"POST\"` and `path = \"/\"`",
            ),
            Some(toml::Value::Array(items)) if items.is_empty() => d.error(
                path,
                "`routes` is empty: a channel needs at least one route",
                "add a `[[routes]]` entry with `method` and `path`",
            ),
            Some(toml::Value::Array(items)) => {
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let Some(route) = item.as_table() else {
                        d.error(
                            path,
                            format!("`routes[{i}]` must be a table"),
                            "write each route as a `[[routes]]` section",
                        );
                        continue;
                    };
                    if let Some(r) = check_route(d, path, i, route) {
                        if !seen.insert(r.clone()) {
                            d.error(
                                path,
                                format!("route `{r}` is declared more than once"),
                                "remove the duplicate route",
                            );
                        }
                        routes.push(r);
                    }
                }
            }
            Some(other) => d.error(
                path,
                format!(
                    "`routes` must be an array of tables, found {}",
                    other.type_str()
                ),
                "declare routes as `[[routes]]` sections",
            ),
        }
        if d.error_count() > errors_before {
            continue;
        }
        out.push(ChannelManifest {
            name,
            path: entry.path.clone(),
            routes,
            raw: table_to_json(&table),
        });
    }
    out
}

/// One route: method, path, optional auth and schemas. Returns `METHOD path`.
fn check_route(d: &mut Diags, path: &Path, i: usize, route: &Table) -> Option<String> {
    let f = Fields::nested(route, path, format!("routes[{i}]."));
    check_auth(d, &f);
    for key in ["body_schema", "query_schema"] {
        if let Some(t) = f.table(d, key) {
            check_schema(d, path, &f.key(key), &table_to_json(t));
        }
    }
    let method = match f.string(d, "method") {
        Some(m) if METHODS.contains(&m.as_str()) => Some(m),
        Some(m) => {
            d.error(
                path,
                format!(
                    "`routes[{i}].method` must be one of GET, POST, PUT, PATCH, DELETE, found `{m}`"
                ),
                "use an upper-case HTTP method from that list",
            );
            None
        }
        None => {
            if !f.has("method") {
                d.error(
                    path,
                    format!("`routes[{i}]` has no `method`"),
                    "add `method = \"POST\"` (or GET, PUT, PATCH, DELETE)",
                );
            }
            None
        }
    };
    let route_path = match f.string(d, "path") {
        Some(p) if p.starts_with('/') => Some(p),
        Some(p) => {
            d.error(
                path,
                format!("`routes[{i}].path` must start with `/`, found `{p}`"),
                format!("write the path as `/{p}`"),
            );
            None
        }
        None => {
            if !f.has("path") {
                d.error(
                    path,
                    format!("`routes[{i}]` has no `path`"),
                    "add `path = \"/\"` (relative to /v1/channels/<name>)",
                );
            }
            None
        }
    };
    Some(format!("{} {}", method?, route_path?))
}

/// `auth = "default" | "bearer" | "hmac"`; hmac needs its secret and header.
fn check_auth(d: &mut Diags, f: &Fields<'_>) {
    let Some(auth) = f.string(d, "auth") else {
        return;
    };
    match auth.as_str() {
        "default" | "bearer" => {}
        "hmac" => {
            for key in ["secret_env", "signature_header"] {
                if f.has(key) {
                    f.nonempty_string(d, key);
                } else {
                    let k = f.key(key);
                    d.error(
                        f.path,
                        format!("`auth = \"hmac\"` needs `{k}`"),
                        format!("add `{k} = \"...\"`"),
                    );
                }
            }
        }
        other => {
            let k = f.key("auth");
            d.error(
                f.path,
                format!("`{k}` must be \"default\", \"bearer\" or \"hmac\", found \"{other}\""),
                format!("set `{k}` to one of \"default\", \"bearer\", \"hmac\""),
            );
        }
    }
}

const HOOK_KEYS: &[&str] = &["events", "command", "url", "headers", "file"];

/// Discovers hooks, sorted by name.
pub(crate) fn hooks(d: &mut Diags, dir: &Path) -> Vec<HookManifest> {
    let mut out = Vec::new();
    for entry in manifests(d, dir, "hooks") {
        let name = entry.stem_ext().0.to_owned();
        let path = entry.path.as_path();
        let errors_before = d.error_count();
        if !is_slug(&name, 64) {
            d.error(
                path,
                format!("hook name `{name}` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
        }
        let Some(table) = read_toml(d, path) else {
            continue;
        };
        let f = Fields::new(&table, path);
        f.unknown_keys(d, HOOK_KEYS);
        let events = hook_events(d, path, &table);
        let target = hook_target(d, &f);
        if d.error_count() > errors_before {
            continue;
        }
        if let (Some(events), Some(target)) = (events, target) {
            out.push(HookManifest {
                name,
                path: entry.path.clone(),
                events,
                target,
            });
        }
    }
    out
}

fn hook_events(d: &mut Diags, path: &Path, table: &Table) -> Option<HookEvents> {
    match table.get("events") {
        None => {
            d.error(
                path,
                "missing `events`",
                "add `events = [\"turn.completed\"]` (event types) or `events = \"*\"` (everything)",
            );
            None
        }
        Some(toml::Value::String(s)) if s == "*" => Some(HookEvents::All),
        Some(toml::Value::Array(items)) => {
            let mut kinds = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Some(kind) = item.as_str() else {
                    d.error(
                        path,
                        format!("`events[{i}]` must be a string"),
                        "list event types as quoted strings",
                    );
                    return None;
                };
                if kind == "*" {
                    return Some(HookEvents::All);
                }
                if !EVENT_TYPES.contains(&kind) {
                    d.warn(
                        path,
                        format!("unknown event type `{kind}`: the hook never receives it"),
                        "use an event type from the event vocabulary (for example `turn.completed`)",
                    );
                }
                kinds.push(kind.to_owned());
            }
            if kinds.is_empty() {
                d.warn(
                    path,
                    "`events` is empty: the hook observes nothing",
                    "list the event types to observe, or `events = \"*\"`",
                );
            }
            Some(HookEvents::Only(kinds))
        }
        Some(other) => {
            d.error(
                path,
                format!(
                    "`events` must be \"*\" or a list of event types, found {}",
                    other.type_str()
                ),
                "write `events = \"*\"` or `events = [\"turn.completed\", ...]`",
            );
            None
        }
    }
}

fn hook_target(d: &mut Diags, f: &Fields<'_>) -> Option<HookTarget> {
    let path = f.path;
    let present: Vec<&str> = ["command", "url", "file"]
        .into_iter()
        .filter(|k| f.has(k))
        .collect();
    if f.has("headers") && !f.has("url") {
        d.warn(
            path,
            "`headers` is ignored without `url`",
            "remove `headers`, or deliver to a `url`",
        );
    }
    match present.as_slice() {
        [] => {
            d.error(
                path,
                "no target: set `command`, `url` or `file`",
                "add `file = \"audit.ndjson\"`, `command = [...]` or `url = \"https://...\"`",
            );
            None
        }
        ["command"] => {
            let argv = f.strings(d, "command")?;
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                d.error(
                    path,
                    "`command` must start with a program",
                    "write `command = [\"program\", \"arg\", ...]`",
                );
                return None;
            }
            Some(HookTarget::Command { argv })
        }
        ["url"] => {
            let url = f.nonempty_string(d, "url")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                d.error(
                    path,
                    format!("`url` must start with http:// or https://, found `{url}`"),
                    "write the full endpoint URL",
                );
                return None;
            }
            let headers = f.string_map(d, "headers").unwrap_or_default();
            Some(HookTarget::Url { url, headers })
        }
        ["file"] => Some(HookTarget::File {
            path: PathBuf::from(f.nonempty_string(d, "file")?),
        }),
        many => {
            d.error(
                path,
                format!("more than one target ({})", many.join(", ")),
                "keep exactly one of `command`, `url` and `file`",
            );
            None
        }
    }
}
