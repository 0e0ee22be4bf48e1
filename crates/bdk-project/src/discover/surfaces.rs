//! `mcp-connections/`, `channels/` and `hooks/`: one TOML manifest per file,
//! named by its file stem.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bdk_events::EVENT_TYPES;
use toml::Table;

use super::util::{
    Diags, Entry, Fields, Kind, check_schema, is_slug, list_dir, read_toml, report_other,
    table_to_json,
};
use crate::{
    ChannelEventTarget, ChannelEvents, ChannelManifest, ChannelRoute, DEFAULT_EVENT_ATTEMPTS,
    DEFAULT_EVENT_BACKOFF, HookEvents, HookManifest, HookTarget, MAX_EVENT_ATTEMPTS, McpConnection,
    McpOAuth, McpTransport, RouteAuth, RouteHandler, RouteMethod, default_token_env,
};
use bdk_events::{Admission, SessionMode};

/// The `.toml` manifests of a folder, with strays reported. `what` names the
/// folder in messages.
fn manifests(d: &mut Diags, dir: &Path, what: &str) -> Vec<Entry> {
    let (out, strays) = manifests_and_strays(d, dir);
    for stray in strays {
        report_stray(d, &stray, what);
    }
    out
}

/// The `.toml` manifests of a folder and the other entries in it, which
/// the caller reports unless a manifest uses them.
fn manifests_and_strays(d: &mut Diags, dir: &Path) -> (Vec<Entry>, Vec<Entry>) {
    let mut out = Vec::new();
    let mut strays = Vec::new();
    for entry in list_dir(d, dir) {
        match (entry.kind, entry.stem_ext().1) {
            (Kind::File, Some("toml")) => out.push(entry),
            (Kind::Other, _) => report_other(d, &entry),
            (Kind::File | Kind::Dir, _) => strays.push(entry),
        }
    }
    (out, strays)
}

fn report_stray(d: &mut Diags, entry: &Entry, what: &str) {
    match entry.kind {
        Kind::Dir => d.warn(
            &entry.path,
            format!("stray folder in {what}/: only <name>.toml manifests are discovered"),
            "move the folder to lib/ or remove it",
        ),
        _ => d.warn(
            &entry.path,
            format!("stray file in {what}/: only <name>.toml manifests are discovered"),
            "rename it to <name>.toml if it is a manifest, reference it from a route's `handler` or an events `command`, or move it to lib/",
        ),
    }
}

const MCP_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "bearer_token_env",
    "oauth",
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
    let http_only = ["headers", "bearer_token_env", "oauth"];
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
            let oauth = f.table(d, "oauth").map(|t| {
                let o = Fields::nested(t, path, "oauth.");
                o.unknown_keys(d, &["client_id", "scopes"]);
                McpOAuth {
                    client_id: o.nonempty_string(d, "client_id"),
                    scopes: o.strings(d, "scopes").unwrap_or_default(),
                }
            });
            if oauth.is_some() && bearer_token_env.is_some() {
                d.error(
                    path,
                    "both `bearer_token_env` and `[oauth]` are set",
                    "keep `[oauth]` for a server that signs you in with OAuth (`bdk mcp login`), or `bearer_token_env` for a fixed token",
                );
                return None;
            }
            Some(McpTransport::Http {
                url,
                headers,
                bearer_token_env,
                oauth,
            })
        }
    }
}

/// Channel-level keys. The auth keys set the default for every route that
/// declares no `auth` of its own.
const CHANNEL_KEYS: &[&str] = &[
    "kind",
    "description",
    "auth",
    "secret_env",
    "signature_header",
    "token_env",
    "routes",
    "events",
];

/// Top-level keys of a channel with `kind = "github"`: it declares no
/// routes, the pack serves its webhook.
const GITHUB_CHANNEL_KEYS: &[&str] = &["kind", "description", "github", "events"];

/// Top-level keys of a channel with `kind = "slack"`: the pack serves
/// Slack's requests.
const SLACK_CHANNEL_KEYS: &[&str] = &["kind", "description", "slack", "events"];

/// Keys of one `[[routes]]` entry.
const ROUTE_KEYS: &[&str] = &[
    "method",
    "path",
    "description",
    "auth",
    "secret_env",
    "signature_header",
    "token_env",
    "body_schema",
    "query_schema",
    "message",
    "continuation_key",
    "delivery_id",
    "admission",
    "mode",
    "handler",
    "env",
    "timeout_secs",
    "max_output_bytes",
    "sandbox",
    "pass_headers",
];

/// Keys of one `[[events]]` entry.
const EVENT_KEYS: &[&str] = &[
    "types",
    "url",
    "command",
    "headers",
    "attempts",
    "backoff_ms",
];

/// Discovers custom channels, sorted by name, typed. Discovery checks
/// everything that can be checked without serving (keys, methods, path
/// syntax, path-parameter conflicts, auth settings, schemas, template syntax
/// and the events map) and settles the defaults, so the HTTP layer
/// (`bdk_http::channels`) and the event delivery read the typed manifest
/// without checking it again.
pub(crate) fn channels(d: &mut Diags, dir: &Path) -> Vec<ChannelManifest> {
    let mut out = Vec::new();
    let (entries, strays) = manifests_and_strays(d, dir);
    for entry in entries {
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
        match f.string(d, "kind").as_deref() {
            None | Some("routes") => {}
            Some("github") => {
                f.unknown_keys(d, GITHUB_CHANNEL_KEYS);
                let description = f.string(d, "description");
                let events = check_events(d, path, &table);
                let github = super::github::settings(d, path, &table, &name);
                if d.error_count() > errors_before {
                    continue;
                }
                out.push(ChannelManifest {
                    name,
                    path: entry.path.clone(),
                    description,
                    routes: Vec::new(),
                    events,
                    github,
                    slack: None,
                });
                continue;
            }
            Some("slack") => {
                f.unknown_keys(d, SLACK_CHANNEL_KEYS);
                let description = f.string(d, "description");
                let events = check_events(d, path, &table);
                let slack = super::slack::settings(d, path, &table);
                if d.error_count() > errors_before {
                    continue;
                }
                out.push(ChannelManifest {
                    name,
                    path: entry.path.clone(),
                    description,
                    routes: Vec::new(),
                    events,
                    github: None,
                    slack,
                });
                continue;
            }
            Some(other) => {
                d.error(
                    path,
                    format!(
                        "`kind` must be \"routes\", \"github\" or \"slack\", found \"{other}\""
                    ),
                    "remove `kind` for a channel of routes, or write `kind = \"github\"` or `kind = \"slack\"`",
                );
                continue;
            }
        }
        f.unknown_keys(d, CHANNEL_KEYS);
        let description = f.string(d, "description");
        let channel_auth = check_auth(d, &f, &name);
        let events = check_events(d, path, &table);
        let mut routes = Vec::new();
        let mut shapes = RouteShapes::default();
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
                    if let Some(r) = check_route(d, path, i, route, &name, &channel_auth) {
                        if let Err(message) = shapes.add(&r.path) {
                            d.error(
                                path,
                                format!("`routes[{i}].path`: {message}"),
                                "give a path parameter at one position the same name in every route",
                            );
                        }
                        if !seen.insert((r.method, r.path.clone())) {
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
            description,
            routes,
            events,
            github: None,
            slack: None,
        });
    }
    // A program a route handler or an events command runs is no stray; nor
    // is a folder one of them reaches into.
    let used: BTreeSet<String> = out
        .iter()
        .flat_map(|c| {
            let handlers = c
                .routes
                .iter()
                .filter_map(|r| r.handler.as_ref())
                .flat_map(|h| super::handler::referenced(&h.handler).collect::<Vec<_>>());
            let commands = c.events.iter().flat_map(|e| match &e.target {
                ChannelEventTarget::Command { argv } => {
                    argv.iter().map(|a| super::tools::norm_ref(a)).collect()
                }
                ChannelEventTarget::Url { .. } => Vec::new(),
            });
            handlers.chain(commands).collect::<Vec<_>>()
        })
        .collect();
    for stray in strays {
        let name = stray.name.as_str();
        let referenced = match stray.kind {
            Kind::Dir => used.iter().any(|r| r.starts_with(&format!("{name}/"))),
            _ => used.contains(name),
        };
        if !referenced {
            report_stray(d, &stray, "channels");
        }
    }
    out
}

/// One route: method, path, optional auth and schemas. A route without its
/// own `auth` takes the channel's whole auth block (`channel_auth`), so a
/// secret set beside the channel's `auth` is never mixed with a route's
/// different scheme. `None` when the route has an error (reported).
fn check_route(
    d: &mut Diags,
    path: &Path,
    i: usize,
    route: &Table,
    channel: &str,
    channel_auth: &Option<RouteAuth>,
) -> Option<ChannelRoute> {
    let f = Fields::nested(route, path, format!("routes[{i}]."));
    f.unknown_keys(d, ROUTE_KEYS);
    let description = f.string(d, "description");
    let own_auth = check_auth(d, &f, channel);
    let auth = if f.has("auth") {
        own_auth
    } else {
        channel_auth.clone()
    }
    .unwrap_or(RouteAuth::Default);
    let mut schema = |key: &str| {
        let t = f.table(d, key)?;
        let schema = table_to_json(t);
        check_schema(d, path, &f.key(key), &schema).then_some(schema)
    };
    let body_schema = schema("body_schema");
    let query_schema = schema("query_schema");
    let mut template = |key: &str| {
        let source = f.nonempty_string(d, key)?;
        check_template(d, &f, key, &source).then_some(source)
    };
    let message = template("message");
    let continuation_key = template("continuation_key");
    let delivery_id = template("delivery_id");
    let admission = match check_choice(d, &f, "admission", &["preempt", "coalesce"]).as_deref() {
        Some("coalesce") => Admission::Coalesce,
        _ => Admission::Preempt,
    };
    let mode = match check_choice(d, &f, "mode", &["chat", "task"]).as_deref() {
        Some("task") => SessionMode::Task,
        _ => SessionMode::Chat,
    };
    let handler = route_handler(d, &f, path);
    let method = match f.string(d, "method") {
        Some(m) if RouteMethod::parse(&m).is_some() => RouteMethod::parse(&m),
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
        Some(p) if p.starts_with('/') => match check_route_path(&p) {
            Ok(()) => Some(p),
            Err(message) => {
                d.error(
                    path,
                    format!("`routes[{i}].path` `{p}` is invalid: {message}"),
                    "use segments of letters, digits, `.`, `_`, `~` or `-`, or a whole-segment parameter such as `{id}`",
                );
                None
            }
        },
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
    Some(ChannelRoute {
        method: method?,
        path: route_path?,
        description,
        auth,
        body_schema,
        query_schema,
        message,
        continuation_key,
        delivery_id,
        admission,
        mode,
        handler,
    })
}

/// A route's handler program (`handler = [...]` and its keys), run in the
/// channels folder; a route with a handler renders no templates.
fn route_handler(d: &mut Diags, f: &Fields<'_>, path: &Path) -> Option<RouteHandler> {
    if !f.has("handler") {
        for key in super::handler::HANDLER_KEYS
            .iter()
            .skip(1)
            .chain(&["pass_headers"])
            .filter(|k| f.has(k))
        {
            d.error(
                path,
                format!("`{}` only applies to a route with a `handler`", f.key(key)),
                format!(
                    "remove `{}`, or run a program with `handler = [...]`",
                    f.key(key)
                ),
            );
        }
        return None;
    }
    for key in ["message", "continuation_key", "delivery_id"] {
        if f.has(key) {
            d.error(
                path,
                format!(
                    "`{}` does not apply to a route with a `handler`",
                    f.key(key)
                ),
                format!(
                    "remove `{}`; the handler's answer says what to deliver",
                    f.key(key)
                ),
            );
        }
    }
    let pass_headers: Vec<String> = f
        .strings(d, "pass_headers")
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    for name in &pass_headers {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
        {
            d.error(
                path,
                format!(
                    "`{}` names `{name}`, which is not a header name",
                    f.key("pass_headers")
                ),
                "list header names such as \"x-github-event\"",
            );
        }
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let handler = super::handler::handler(d, f, dir)?;
    Some(RouteHandler {
        handler,
        pass_headers,
    })
}

/// The syntax of a route path: `/`, or `/`-separated segments that are
/// either literal (`[A-Za-z0-9._~-]+`) or one whole parameter (`{name}`, an
/// identifier). The HTTP router refuses anything else, so it is refused here
/// first.
pub(crate) fn check_route_path(p: &str) -> Result<(), String> {
    if p == "/" {
        return Ok(());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err("it must start with `/`".into());
    };
    let mut names = BTreeSet::new();
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err("it has an empty segment (`//` or a trailing `/`)".into());
        }
        if let Some(inner) = segment.strip_prefix('{') {
            let Some(name) = inner.strip_suffix('}') else {
                return Err(format!(
                    "segment `{segment}` opens a parameter it never closes"
                ));
            };
            let mut chars = name.chars();
            let ident = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ident {
                return Err(format!(
                    "parameter `{{{name}}}` must be named with letters, digits and `_`"
                ));
            }
            if !names.insert(name) {
                return Err(format!("parameter `{{{name}}}` appears twice"));
            }
        } else if !segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-'))
        {
            return Err(format!(
                "segment `{segment}` may only hold letters, digits, `.`, `_`, `~` and `-`"
            ));
        }
    }
    Ok(())
}

/// The routes of one channel as a tree of path segments. The router allows
/// a literal and a parameter at the same position, but two parameters at the
/// same position must share their name.
#[derive(Default)]
struct RouteShapes {
    literal: std::collections::BTreeMap<String, RouteShapes>,
    param: Option<(String, Box<RouteShapes>)>,
}

impl RouteShapes {
    fn add(&mut self, route_path: &str) -> Result<(), String> {
        let mut node = self;
        for segment in route_path.split('/').filter(|s| !s.is_empty()) {
            match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => {
                    let (existing, child) = node
                        .param
                        .get_or_insert_with(|| (name.to_owned(), Box::default()));
                    if existing != name {
                        return Err(format!(
                            "parameter `{{{name}}}` sits where another route has `{{{existing}}}`"
                        ));
                    }
                    node = child;
                }
                None => node = node.literal.entry(segment.to_owned()).or_default(),
            }
        }
        Ok(())
    }
}

/// A channel template must compile; rendering happens per request. True
/// when it does.
fn check_template(d: &mut Diags, f: &Fields<'_>, key: &str, source: &str) -> bool {
    let env = minijinja::Environment::new();
    let compiled = env.template_from_str(source);
    if let Err(e) = &compiled {
        let k = f.key(key);
        let detail = e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned);
        d.error(
            f.path,
            format!("`{k}` is not a valid template: {detail}"),
            format!("fix the template syntax of `{k}` (minijinja, `{{{{ body.field }}}}`)"),
        );
    }
    compiled.is_ok()
}

/// A string key limited to `choices`: the value when it is one of them.
fn check_choice(d: &mut Diags, f: &Fields<'_>, key: &str, choices: &[&str]) -> Option<String> {
    let value = f.string(d, key)?;
    if !choices.contains(&value.as_str()) {
        let k = f.key(key);
        let list = choices
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(" or ");
        d.error(
            f.path,
            format!("`{k}` must be {list}, found \"{value}\""),
            format!("set `{k}` to {list}"),
        );
        return None;
    }
    Some(value)
}

/// `[[events]]`: which event types of the channel's sessions go where.
/// Returns the entries without an error.
fn check_events(d: &mut Diags, path: &Path, table: &Table) -> Vec<ChannelEvents> {
    let mut out = Vec::new();
    let items = match table.get("events") {
        None => return out,
        Some(toml::Value::Array(items)) => items,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`events` must be an array of tables, found {}",
                    other.type_str()
                ),
                "declare deliveries as `[[events]]` sections",
            );
            return out;
        }
    };
    for (i, item) in items.iter().enumerate() {
        let Some(entry) = item.as_table() else {
            d.error(
                path,
                format!("`events[{i}]` must be a table"),
                "write each delivery as an `[[events]]` section",
            );
            continue;
        };
        let f = Fields::nested(entry, path, format!("events[{i}]."));
        f.unknown_keys(d, EVENT_KEYS);
        let errors_before = d.error_count();
        let types = f.strings(d, "types");
        match &types {
            None if !f.has("types") => d.error(
                path,
                format!("`events[{i}]` has no `types`"),
                "add `types = [\"message.completed\"]` (event types) or `types = [\"*\"]`",
            ),
            None => {}
            Some(types) if types.is_empty() => d.warn(
                path,
                format!("`events[{i}].types` is empty: nothing is delivered"),
                "list the event types to deliver",
            ),
            Some(types) => {
                for kind in types {
                    if kind != "*" && !EVENT_TYPES.contains(&kind.as_str()) {
                        d.warn(
                            path,
                            format!("`events[{i}].types` names unknown event type `{kind}`: it is never delivered"),
                            "use an event type from the event vocabulary (for example `message.completed`)",
                        );
                    }
                }
            }
        }
        let target = match (f.has("url"), f.has("command")) {
            (true, true) => {
                d.error(
                    path,
                    format!("`events[{i}]` sets both `url` and `command`"),
                    "keep exactly one of `url` and `command`",
                );
                None
            }
            (false, false) => {
                d.error(
                    path,
                    format!("`events[{i}]` has no target: set `url` or `command`"),
                    "add `url = \"https://...\"` or `command = [\"./notify.sh\"]`",
                );
                None
            }
            (true, false) => {
                let url = f.nonempty_string(d, "url");
                if let Some(url) = &url
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    d.error(
                        path,
                        format!(
                            "`events[{i}].url` must start with http:// or https://, found `{url}`"
                        ),
                        "write the full endpoint URL",
                    );
                }
                let headers = f.string_map(d, "headers").unwrap_or_default();
                url.map(|url| ChannelEventTarget::Url { url, headers })
            }
            (false, true) => {
                let argv = f.strings(d, "command");
                if let Some(argv) = &argv
                    && argv.first().is_none_or(|p| p.trim().is_empty())
                {
                    d.error(
                        path,
                        format!("`events[{i}].command` must start with a program"),
                        "write `command = [\"program\", \"arg\", ...]`",
                    );
                }
                if f.has("headers") {
                    d.warn(
                        path,
                        format!("`events[{i}].headers` is ignored without `url`"),
                        "remove `headers`, or deliver to a `url`",
                    );
                }
                argv.map(|argv| ChannelEventTarget::Command { argv })
            }
        };
        let attempts = f.positive(d, "attempts");
        if let Some(n) = attempts
            && n > u64::from(MAX_EVENT_ATTEMPTS)
        {
            d.error(
                path,
                format!("`events[{i}].attempts` must be at most {MAX_EVENT_ATTEMPTS}, found {n}"),
                format!("set `events[{i}].attempts` between 1 and {MAX_EVENT_ATTEMPTS}"),
            );
        }
        let backoff = f
            .positive(d, "backoff_ms")
            .map_or(DEFAULT_EVENT_BACKOFF, Duration::from_millis);
        if d.error_count() > errors_before {
            continue;
        }
        if let (Some(types), Some(target)) = (types, target) {
            out.push(ChannelEvents {
                types,
                target,
                attempts: attempts
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(DEFAULT_EVENT_ATTEMPTS),
                backoff,
            });
        }
    }
    out
}

/// `auth = "default" | "bearer" | "hmac"`; hmac needs its secret and header;
/// bearer reads its token from `token_env` (default
/// `BDK_CHANNEL_<NAME>_TOKEN`). The block's auth, `None` when it declares
/// none or has an error (reported).
fn check_auth(d: &mut Diags, f: &Fields<'_>, channel: &str) -> Option<RouteAuth> {
    let token_env = f.nonempty_string(d, "token_env");
    let auth = f.string(d, "auth")?;
    match auth.as_str() {
        "default" => Some(RouteAuth::Default),
        "bearer" => Some(RouteAuth::Bearer {
            token_env: token_env.unwrap_or_else(|| default_token_env(channel)),
        }),
        "hmac" => {
            let mut needed = |key: &str| {
                if f.has(key) {
                    return f.nonempty_string(d, key);
                }
                let k = f.key(key);
                d.error(
                    f.path,
                    format!("`auth = \"hmac\"` needs `{k}`"),
                    format!("add `{k} = \"...\"`"),
                );
                None
            };
            let secret_env = needed("secret_env");
            let signature_header = needed("signature_header");
            Some(RouteAuth::Hmac {
                secret_env: secret_env?,
                signature_header: signature_header?,
            })
        }
        other => {
            let k = f.key("auth");
            d.error(
                f.path,
                format!("`{k}` must be \"default\", \"bearer\" or \"hmac\", found \"{other}\""),
                format!("set `{k}` to one of \"default\", \"bearer\", \"hmac\""),
            );
            None
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Severity;

    /// Discovers one channel manifest and returns its diagnostics as
    /// `(severity, message)` pairs.
    fn check(toml: &str) -> (Vec<ChannelManifest>, Vec<(Severity, String)>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.toml"), toml).unwrap();
        let mut d = Diags::new(dir.path().to_path_buf());
        let found = channels(&mut d, dir.path());
        let diags = d
            .into_sorted()
            .into_iter()
            .map(|x| (x.severity, x.message))
            .collect();
        (found, diags)
    }

    fn has(diags: &[(Severity, String)], severity: Severity, needle: &str) -> bool {
        diags
            .iter()
            .any(|(s, m)| *s == severity && m.contains(needle))
    }

    #[test]
    fn route_handlers() {
        let (found, diags) = check(
            r#"
[[routes]]
method = "POST"
path = "/in"
handler = ["python3", "route.py"]
pass_headers = ["X-Request-Id", "x-github-event"]
timeout_secs = 5
env = ["TOKEN"]
"#,
        );
        assert!(diags.is_empty(), "{diags:?}");
        let handler = found[0].routes[0].handler.as_ref().unwrap();
        assert_eq!(handler.pass_headers, ["x-request-id", "x-github-event"]);
        let crate::HandlerSpec::Program(command) = &handler.handler else {
            panic!("{handler:?}");
        };
        assert_eq!(command.argv, ["python3", "route.py"]);
        assert_eq!(command.timeout, std::time::Duration::from_secs(5));
        assert_eq!(command.pass_env, ["TOKEN"]);

        let (found, diags) = check(
            r#"
[[routes]]
method = "POST"
path = "/a"
handler = ["x"]
message = "{{ body }}"
continuation_key = "k"

[[routes]]
method = "POST"
path = "/b"
pass_headers = ["x-a"]
timeout_secs = 3

[[routes]]
method = "POST"
path = "/c"
handler = ["x"]
pass_headers = ["bad header"]

[[routes]]
method = "POST"
path = "/d"
handler = []
"#,
        );
        assert!(found.is_empty());
        for needle in [
            "`routes[0].message` does not apply to a route with a `handler`",
            "`routes[0].continuation_key` does not apply to a route with a `handler`",
            "`routes[1].timeout_secs` only applies to a route with a `handler`",
            "`routes[1].pass_headers` only applies to a route with a `handler`",
            "names `bad header`, which is not a header name",
            "`routes[3].handler` must start with a program",
        ] {
            assert!(has(&diags, Severity::Error, needle), "{needle}: {diags:#?}");
        }
    }

    #[test]
    fn programs_a_channel_runs_are_not_strays() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            (
                "c.toml",
                "[[routes]]\nmethod = \"POST\"\npath = \"/\"\nhandler = [\"python3\", \"./route.py\"]\n\n[[events]]\ntypes = [\"*\"]\ncommand = [\"sh\", \"bin/notify.sh\"]\n",
            ),
            ("route.py", ""),
            ("other.py", ""),
        ];
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::create_dir(dir.path().join("junk")).unwrap();
        let mut d = Diags::new(dir.path().to_path_buf());
        let found = channels(&mut d, dir.path());
        assert_eq!(found.len(), 1);
        let strays: Vec<String> = d
            .into_sorted()
            .into_iter()
            .map(|x| format!("{} {}", x.file, x.message))
            .collect();
        assert_eq!(strays.len(), 2, "{strays:#?}");
        assert!(
            strays.iter().any(|m| m.starts_with("other.py stray file")),
            "{strays:#?}"
        );
        assert!(
            strays.iter().any(|m| m.starts_with("junk stray folder")),
            "{strays:#?}"
        );
    }

    #[test]
    fn a_complete_channel_is_clean() {
        let (found, diags) = check(
            r#"
description = "GitHub webhooks"
auth = "hmac"
secret_env = "S"
signature_header = "X-Hub-Signature-256"

[[routes]]
method = "POST"
path = "/github"
body_schema = { type = "object" }
message = "PR {{ body.number }}"
continuation_key = "pr:{{ body.number }}"
delivery_id = "{{ headers['x-github-delivery'] | default('') }}"
admission = "coalesce"
mode = "chat"

[[routes]]
method = "GET"
path = "/items/{id}"
auth = "bearer"
token_env = "T"

[[events]]
types = ["message.completed", "turn.failed"]
url = "http://127.0.0.1:9999/hook"
headers = { X-A = "b" }
attempts = 5
backoff_ms = 100

[[events]]
types = ["*"]
command = ["./notify.sh"]
"#,
        );
        assert!(diags.is_empty(), "{diags:#?}");
        assert_eq!(found[0].routes, ["POST /github", "GET /items/{id}"]);
    }

    #[test]
    fn every_problem_is_reported() {
        let (found, diags) = check(
            r#"
colour = "red"

[[routes]]
method = "POST"
path = "/a/{x}"
message = "{{ unclosed"
admission = "later"
mode = "batch"
token_env = ""
extra = 1

[[routes]]
method = "GET"
path = "/a/{y}"

[[routes]]
method = "POST"
path = "/bad/:id"

[[events]]
types = ["turn.exploded"]
url = "ftp://x"
command = ["x"]
attempts = 11

[[events]]
url = "http://x"

[[events]]
types = []
command = [""]
headers = { A = "b" }
"#,
        );
        assert!(found.is_empty());
        use Severity::{Error as E, Warning as W};
        for (severity, needle) in [
            (W, "unknown key `colour`"),
            (W, "unknown key `routes[0].extra`"),
            (E, "`routes[0].message` is not a valid template"),
            (
                E,
                "`routes[0].admission` must be \"preempt\" or \"coalesce\"",
            ),
            (E, "`routes[0].mode` must be \"chat\" or \"task\""),
            (E, "`routes[0].token_env` is empty"),
            (E, "parameter `{y}` sits where another route has `{x}`"),
            (E, "`routes[2].path` `/bad/:id` is invalid"),
            (W, "names unknown event type `turn.exploded`"),
            (E, "`events[0]` sets both `url` and `command`"),
            (E, "`events[0].attempts` must be at most 10"),
            (E, "`events[1]` has no `types`"),
            (W, "`events[2].types` is empty"),
            (E, "`events[2].command` must start with a program"),
            (W, "`events[2].headers` is ignored without `url`"),
        ] {
            assert!(has(&diags, severity, needle), "{needle}: {diags:#?}");
        }
    }

    #[test]
    fn routes_inherit_the_channel_auth_block() {
        let (found, diags) = check(
            r#"
auth = "hmac"
secret_env = "S"
signature_header = "X-Hub-Signature-256"

[[routes]]
method = "POST"
path = "/"

[[routes]]
method = "GET"
path = "/status"
auth = "bearer"

[[routes]]
method = "PUT"
path = "/open"
auth = "default"
"#,
        );
        assert!(diags.is_empty(), "{diags:#?}");
        let c = &found[0];
        assert_eq!(
            c.routes[0].auth,
            RouteAuth::Hmac {
                secret_env: "S".into(),
                signature_header: "X-Hub-Signature-256".into(),
            }
        );
        // The file is `c.toml`, so the channel is `c`.
        assert_eq!(
            c.routes[1].auth,
            RouteAuth::Bearer {
                token_env: "BDK_CHANNEL_C_TOKEN".into()
            }
        );
        assert_eq!(c.routes[2].auth, RouteAuth::Default);
        assert_eq!(c.routes[0].admission, Admission::Preempt);
        assert_eq!(c.routes[0].mode, SessionMode::Chat);
    }

    #[test]
    fn events_defaults_and_limits() {
        let (found, diags) = check(
            r#"
[[routes]]
method = "POST"
path = "/"

[[events]]
types = ["message.completed"]
url = "http://127.0.0.1:1/h"

[[events]]
types = ["*"]
command = ["./n.sh"]
attempts = 5
backoff_ms = 20
"#,
        );
        assert!(diags.is_empty(), "{diags:#?}");
        let events = &found[0].events;
        assert_eq!(events[0].attempts, DEFAULT_EVENT_ATTEMPTS);
        assert_eq!(events[0].backoff, DEFAULT_EVENT_BACKOFF);
        assert!(events[0].wants("message.completed"));
        assert!(!events[0].wants("turn.failed"));
        assert!(events[1].wants("turn.failed"));
        assert_eq!(events[1].attempts, 5);
        assert_eq!(events[1].backoff, Duration::from_millis(20));
        assert_eq!(
            events[1].target,
            ChannelEventTarget::Command {
                argv: vec!["./n.sh".into()]
            }
        );
    }

    #[test]
    fn route_paths() {
        for ok in ["/", "/github", "/a/{id}/b", "/v1.2/x_y~z-"] {
            assert_eq!(check_route_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "//", "/a/", "/{1x}", "/{a}/{a}", "/pr-{id}", "/{open", "/*rest", "/a b",
        ] {
            assert!(check_route_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_github_channel_is_typed_with_its_defaults() {
        let (found, diags) = check(
            r#"
kind = "github"
description = "PRs"

[github]
bot = "@review-bot"
repositories = ["acme/*", "octo/hello"]
reply = "review"
status_context = "review"
public_url = "https://bots.example.com/"

[[github.on]]
event = "pull_request"
actions = ["opened"]

[[github.on]]
event = "issue_comment"
message = "{{ sender }}: {{ payload.comment.body }}"
"#,
        );
        assert!(diags.is_empty(), "{diags:#?}");
        assert!(found[0].routes.is_empty());
        let g = found[0].github.as_ref().unwrap();
        assert_eq!(g.bot.as_deref(), Some("review-bot"));
        assert_eq!(g.secret_env, "GITHUB_WEBHOOK_SECRET");
        assert_eq!(
            g.credentials,
            crate::GithubCredentials::Token {
                token_env: "GITHUB_TOKEN".into()
            }
        );
        assert_eq!(g.reply, crate::GithubReply::Review);
        assert_eq!(g.status_context.as_deref(), Some("review"));
        assert_eq!(g.public_url.as_deref(), Some("https://bots.example.com"));
        assert_eq!(g.triggers.len(), 2);
        assert!(g.triggers[1].mention, "comment events wait for a mention");
        assert!(!g.triggers[0].mention);
        assert_eq!(g.admission, Admission::Coalesce);

        // No table at all: every default, as an App when asked.
        let (found, diags) = check("kind = \"github\"\n[github]\napp_id = 42\n");
        assert!(diags.is_empty(), "{diags:#?}");
        let g = found[0].github.as_ref().unwrap();
        assert_eq!(g.triggers, crate::github::default_triggers());
        assert!(matches!(
            &g.credentials,
            crate::GithubCredentials::App { private_key_env, .. } if private_key_env == "GITHUB_APP_PRIVATE_KEY"
        ));
    }

    #[test]
    fn a_slack_channel_is_typed_with_its_defaults() {
        let (found, diags) = check("kind = \"slack\"\n");
        assert!(diags.is_empty(), "{diags:#?}");
        assert!(found[0].routes.is_empty());
        assert_eq!(
            found[0].slack.as_ref().unwrap(),
            &crate::SlackChannel::default()
        );
        let (found, diags) = check(
            r#"
kind = "slack"
description = "Helpdesk"

[slack]
token_env = "HELP_BOT_TOKEN"
api_url = "http://127.0.0.1:9/api/"
admission = "preempt"
stop_words = ["Stop", " cancel "]
direct_messages = false
channels = ["C0GENERAL"]
approvers = ["U0ALICE", "W0BOB"]
placeholder = ""

[[slack.watch]]
channel = "C0ALERTS"
patterns = ["(?i)down|error"]
bots = false
"#,
        );
        assert!(diags.is_empty(), "{diags:#?}");
        let s = found[0].slack.as_ref().unwrap();
        assert_eq!(s.token_env, "HELP_BOT_TOKEN");
        assert_eq!(s.signing_secret_env, "SLACK_SIGNING_SECRET");
        assert_eq!(s.api_url.as_deref(), Some("http://127.0.0.1:9/api"));
        assert_eq!(s.admission, Admission::Preempt);
        assert_eq!(s.stop_words, ["stop", "cancel"]);
        assert!(!s.direct_messages);
        assert_eq!(s.channels, ["C0GENERAL"]);
        assert_eq!(s.approvers, ["U0ALICE", "W0BOB"]);
        assert_eq!(s.placeholder, None, "an empty placeholder posts none");
        assert_eq!(s.watch[0].channel, "C0ALERTS");
        assert!(!s.watch[0].bots);
    }

    #[test]
    fn slack_channel_problems_are_reported() {
        let (found, diags) = check(
            r##"
kind = "slack"

[[routes]]
method = "POST"
path = "/x"

[slack]
token_env = "not a var"
api_url = "slack.com/api"
admission = "later"
stop_words = [""]
channels = ["#general"]
approvers = ["alice"]
colour = "red"

[[slack.watch]]
patterns = ["(unclosed"]

[[slack.watch]]
channel = "C0ALERTS"
patterns = []
"##,
        );
        assert!(found.is_empty());
        for needle in [
            "unknown key `routes`",
            "unknown key `slack.colour`",
            "`not a var` is not an environment variable name",
            "`slack.api_url` is not an http(s) URL",
            "`slack.admission` must be",
            "`slack.stop_words` has an empty word",
            "`#general` is not a conversation id",
            "`alice` is not a user id",
            "`slack.watch[0]` has no `channel`",
            "is not a valid regular expression",
            "`slack.watch[1].patterns` is empty",
        ] {
            assert!(
                diags.iter().any(|(_, m)| m.contains(needle)),
                "{needle}: {diags:#?}"
            );
        }
        let (_, diags) = check("kind = \"slack\"\nslack = 3\n");
        assert!(
            has(&diags, Severity::Error, "`slack` must be a table"),
            "{diags:#?}"
        );
    }

    #[test]
    fn github_channel_problems_are_reported() {
        let (found, diags) = check(
            r#"
kind = "github"

[[routes]]
method = "POST"
path = "/x"

[github]
app_id = 7
token_env = "T"
installation_id = -1
api_url = "ftp://example.com"
repositories = ["acme", "a/b/c"]
reply = "shout"
admission = "later"
colour = "red"

[[github.on]]
event = "push"

[[github.on]]
event = "issues"
message = "{{ unclosed"
"#,
        );
        assert!(found.is_empty());
        for needle in [
            "unknown key `routes`",
            "unknown key `github.colour`",
            "`github.token_env` is set beside",
            "`github.installation_id` must be greater than 0",
            "`github.api_url` is not an http(s) URL",
            "`acme` is not `owner/name`",
            "`a/b/c` is not `owner/name`",
            "`github.reply` must be",
            "`github.admission` must be",
            "`push` is not an event",
            "`github.on[1].message` is not a valid template",
        ] {
            assert!(
                diags.iter().any(|(_, m)| m.contains(needle)),
                "{needle}: {diags:#?}"
            );
        }
        let (_, diags) = check("kind = \"teams\"\n");
        assert!(has(&diags, Severity::Error, "`kind` must be"), "{diags:#?}");
        let (_, diags) = check("kind = \"github\"\n[github]\nprivate_key_env = \"K\"\n");
        assert!(has(&diags, Severity::Error, "no `app_id`"), "{diags:#?}");
    }
}
