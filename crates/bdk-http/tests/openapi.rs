#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Keeps the OpenAPI document (`bdk_http::openapi::document`) in sync with
//! what the crate actually serves.
//!
//! - The source of `src/` is scanned for every route registration
//!   (`.route("<path>", get(..).post(..))`, the channel router, nests) and
//!   the document must list exactly those paths, methods and mounts.
//! - The error-code enum must be exactly the codes of `ErrorCode`, each
//!   under its status.
//! - The app is served on 127.0.0.1:0, in both layouts, and every
//!   documented operation is requested: none may fall through to the
//!   unknown-route 404 or the wrong-method 405, every status must be
//!   documented for its operation, and every JSON body must match the
//!   documented schema.
//! - The document is checked for the structure OpenAPI 3.1 requires, with
//!   every `$ref` resolving.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bdk_core::discover;
use bdk_core::host::Host;
use bdk_http::{Config, Mount};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;

// ---------------------------------------------------------------------------
// Reading Rust source without a parser
// ---------------------------------------------------------------------------

/// A source file with comments and the contents of string and char literals
/// replaced by spaces (byte for byte, so offsets match the original). String
/// quotes stay, so literals can still be found and read from the original.
struct Source {
    name: String,
    text: String,
    masked: String,
}

impl Source {
    fn read(path: &Path, name: &str) -> Source {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let masked = mask(&text);
        assert_eq!(masked.len(), text.len());
        Source {
            name: name.to_owned(),
            text,
            masked,
        }
    }

    /// Byte offsets where `needle` starts in the masked text.
    fn find_all(&self, needle: &str) -> Vec<usize> {
        self.masked.match_indices(needle).map(|(i, _)| i).collect()
    }

    /// The string literal whose opening quote is at `pos`, if there is one.
    fn literal_at(&self, pos: usize) -> Option<String> {
        let m = self.masked.as_bytes();
        if m.get(pos) != Some(&b'"') {
            return None;
        }
        let end = pos + 1 + self.masked[pos + 1..].find('"')?;
        Some(self.text[pos + 1..end].to_owned())
    }

    /// The index of the bracket closing the one at `open`.
    fn closing(&self, open: usize) -> usize {
        let m = self.masked.as_bytes();
        let mut depth = 0usize;
        for (i, b) in m.iter().enumerate().skip(open) {
            match b {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            }
        }
        panic!("{}: unbalanced bracket at byte {open}", self.name);
    }

    /// The top-level comma-separated arguments between `start` and `end`,
    /// as trimmed byte ranges.
    fn args(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let m = self.masked.as_bytes();
        let mut out = Vec::new();
        let mut depth = 0i32;
        let mut from = start;
        for (i, byte) in m.iter().enumerate().take(end).skip(start) {
            match byte {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b',' if depth == 0 => {
                    out.push(self.trim(from, i));
                    from = i + 1;
                }
                _ => {}
            }
        }
        let last = self.trim(from, end);
        if last.0 < last.1 {
            out.push(last);
        }
        out
    }

    fn trim(&self, mut a: usize, mut b: usize) -> (usize, usize) {
        let m = self.masked.as_bytes();
        while a < b && m[a].is_ascii_whitespace() {
            a += 1;
        }
        while b > a && m[b - 1].is_ascii_whitespace() {
            b -= 1;
        }
        (a, b)
    }

    /// The call `<needle>(args)` at `pos`: its argument ranges.
    fn call_args(&self, pos: usize, needle: &str) -> Vec<(usize, usize)> {
        let open = pos + needle.len() - 1;
        assert_eq!(self.masked.as_bytes()[open], b'(');
        let close = self.closing(open);
        self.args(open + 1, close)
    }

    /// The name of the function whose body contains `pos`.
    fn enclosing_fn(&self, pos: usize) -> String {
        let m = &self.masked[..pos];
        let mut search = m.len();
        while let Some(i) = m[..search].rfind("fn ") {
            let before = i.checked_sub(1).map(|j| m.as_bytes()[j]);
            if before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == b'_')) {
                let name: String = m[i + 3..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                return name;
            }
            search = i;
        }
        panic!("{}: no function around byte {pos}", self.name);
    }

    /// The body (between its braces) of `fn <name>`.
    fn fn_body(&self, name: &str) -> (usize, usize) {
        let needle = format!("fn {name}");
        let start = self
            .find_all(&needle)
            .into_iter()
            .find(|i| {
                let after = self.masked.as_bytes()[i + needle.len()];
                !(after.is_ascii_alphanumeric() || after == b'_')
            })
            .unwrap_or_else(|| panic!("{}: no `fn {name}`", self.name));
        let open = start + self.masked[start..].find('{').unwrap();
        (open + 1, self.closing(open))
    }

    fn slice(&self, (a, b): (usize, usize)) -> &str {
        &self.text[a..b]
    }

    fn masked_slice(&self, (a, b): (usize, usize)) -> &str {
        &self.masked[a..b]
    }
}

/// Blanks comments and literal contents; see [`Source`].
fn mask(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, i: usize| {
        if out[i] != b'\n' {
            out[i] = b' ';
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let prev_ident = i > 0 && ident(b[i - 1]);
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                blank(&mut out, i);
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            loop {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    blank(&mut out, i);
                    blank(&mut out, i + 1);
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    blank(&mut out, i);
                    blank(&mut out, i + 1);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, i);
                    i += 1;
                }
            }
        } else if c == b'r' && !prev_ident && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if b[j] != b'"' {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = j + 1;
            let end = body
                + b[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .unwrap();
            for k in body..end {
                blank(&mut out, k);
            }
            i = end + close.len();
        } else if c == b'"' {
            i += 1;
            while b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, i);
                    i += 1;
                }
                blank(&mut out, i);
                i += 1;
            }
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}', 'é') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                // Skip the escaped character itself: it may be a quote.
                let mut j = i + 3;
                while b[j] != b'\'' {
                    j += 1;
                }
                for k in i + 1..j {
                    blank(&mut out, k);
                }
                i = j + 1;
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    for k in i + 1..i + 1 + ch_len {
                        blank(&mut out, k);
                    }
                    i += 2 + ch_len;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The names of the calls at the top level of a method-router expression:
/// `get(a).post(b)` gives `get`, `post`.
fn top_level_calls(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'(' | b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth -= 1;
                i += 1;
            }
            c if depth == 0 && (c.is_ascii_alphabetic() || c == b'_') => {
                let mut name;
                loop {
                    let start = i;
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                        i += 1;
                    }
                    name = expr[start..i].to_owned();
                    if expr[i..].starts_with("::") {
                        i += 2;
                        continue;
                    }
                    break;
                }
                if expr[i..].trim_start().starts_with('(') {
                    out.push(name);
                }
            }
            _ => i += 1,
        }
    }
    out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`, by path relative to it.
fn sources() -> Vec<Source> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy();
                out.push(Source::read(&path, &rel.replace('\\', "/")));
            }
        }
    }
    let mut out = Vec::new();
    walk(&src_dir(), &src_dir(), &mut out);
    out
}

// ---------------------------------------------------------------------------
// The routes the source registers
// ---------------------------------------------------------------------------

/// Where the routes registered in a function end up. A new router function
/// must be added here, which is the point: someone decides where it lives
/// and the document follows.
const ROUTER_FUNCTIONS: &[(&str, &str, &str)] = &[
    // Every agent's routes, under its base path.
    ("lib.rs", "agent_router", "agent"),
    // The channel router, nested into the agent router (checked below).
    ("channels.rs", "router_with_auth", "agent"),
    // The root of a multi-agent app.
    ("discovery.rs", "host_routes", "host"),
    ("openapi.rs", "host_routes", "host"),
    // Merged at the root in both layouts.
    ("docs.rs", "routes", "server"),
    // Merged into every agent's routes unless `--no-playground`.
    ("playground.rs", "routes", "agent"),
];

/// A path template with every parameter written `{}`.
fn normalize(path: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '{' => {
                depth += 1;
                out.push('{');
            }
            '}' => {
                depth -= 1;
                out.push('}');
            }
            _ if depth > 0 => {}
            c => out.push(c),
        }
    }
    out
}

/// The route table the source builds: normalized path -> method -> mounts.
type Table = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn channel_methods() -> Vec<String> {
    let config = Source::read(&src_dir().join("channels/config.rs"), "channels/config.rs");
    let (start, end) = config.fn_body("parse_route");
    let mut methods = Vec::new();
    for arrow in config.find_all("=> Method::") {
        if arrow < start || arrow > end {
            continue;
        }
        let before = config.masked[..arrow].trim_end();
        assert!(
            before.ends_with('"'),
            "unexpected method arm in parse_route"
        );
        let open = config.masked[..before.len() - 1].rfind('"').unwrap();
        methods.push(config.literal_at(open).unwrap().to_ascii_lowercase());
    }
    assert!(
        !methods.is_empty(),
        "no channel methods found in parse_route"
    );
    methods
}

fn registered_routes() -> Table {
    let mut table = Table::new();
    let mut channel_prefix = None;
    let mut channel_router_seen = false;
    for src in sources() {
        // Unit tests build routers of their own; only live code counts.
        let cut = src.find_all("#[cfg(test)]").first().copied();
        let live = |pos: &usize| cut.is_none_or(|c| *pos < c);
        for needle in [".route_service(", ".nest_service(", ".fallback_service("] {
            assert!(
                !src.find_all(needle).iter().any(live),
                "{}: `{needle}` registers routes this test cannot read; teach it (and the OpenAPI document) about them",
                src.name
            );
        }
        for pos in src.find_all(".nest(").into_iter().filter(live) {
            let args = src.call_args(pos, ".nest(");
            let func = src.enclosing_fn(pos);
            assert_eq!(args.len(), 2, "{}: odd nest call", src.name);
            match (src.name.as_str(), func.as_str(), src.literal_at(args[0].0)) {
                // The agent prefix of the multi-agent layout.
                ("lib.rs", "app", None) => {
                    assert!(
                        src.slice(args[0]).contains("slug"),
                        "lib.rs: app nests something other than an agent"
                    );
                }
                ("lib.rs", "agent_router", Some(prefix)) => {
                    assert!(
                        src.slice(args[1]).contains("router_with_auth"),
                        "lib.rs: agent_router nests an unknown router at {prefix}"
                    );
                    channel_prefix = Some(prefix);
                }
                (file, func, lit) => panic!(
                    "{file}: unknown nest in fn {func} ({lit:?}); teach this test and the OpenAPI document about it"
                ),
            }
        }
        for pos in src.find_all(".route(").into_iter().filter(live) {
            let args = src.call_args(pos, ".route(");
            if args.is_empty() {
                // A method named `route` with no arguments, not a registration.
                continue;
            }
            assert_eq!(
                args.len(),
                2,
                "{}: a `.route(` call with {} arguments",
                src.name,
                args.len()
            );
            let func = src.enclosing_fn(pos);
            let mount = ROUTER_FUNCTIONS
                .iter()
                .find(|(f, n, _)| *f == src.name && *n == func)
                .map(|(_, _, m)| *m)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: fn {func} registers routes; add it to ROUTER_FUNCTIONS and the OpenAPI document",
                        src.name
                    )
                });
            match src.literal_at(args[0].0) {
                Some(path) => {
                    let calls = top_level_calls(src.masked_slice(args[1]));
                    assert!(
                        !calls.is_empty(),
                        "{}: cannot read the methods of {path}",
                        src.name
                    );
                    for call in calls {
                        assert!(
                            ["get", "post", "put", "patch", "delete"].contains(&call.as_str()),
                            "{}: route {path} uses `{call}`, which this test cannot read",
                            src.name
                        );
                        table
                            .entry(normalize(&path))
                            .or_default()
                            .entry(call)
                            .or_default()
                            .insert(mount.to_owned());
                    }
                }
                None => {
                    // Only the channel router builds paths at run time:
                    // `/<channel>` and `/<channel><route path>`.
                    assert_eq!(
                        (src.name.as_str(), func.as_str()),
                        ("channels.rs", "router_with_auth"),
                        "a route with a computed path outside the channel router"
                    );
                    channel_router_seen = true;
                }
            }
        }
    }
    assert!(channel_router_seen, "the channel router registers no route");
    let prefix = channel_prefix.expect("the channel router is not nested into the agent router");
    for path in [format!("{prefix}/{{}}"), format!("{prefix}/{{}}/{{}}")] {
        for method in channel_methods() {
            table
                .entry(path.clone())
                .or_default()
                .entry(method)
                .or_default()
                .insert("agent".to_owned());
        }
    }
    table
}

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn documented_routes(doc: &Value) -> Table {
    let mut table = Table::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let mounts: BTreeSet<String> = item["x-bdk-mount"]
            .as_array()
            .unwrap_or_else(|| panic!("{path}: no x-bdk-mount"))
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect();
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                table
                    .entry(normalize(path))
                    .or_default()
                    .insert(method.clone(), mounts.clone());
            }
        }
    }
    table
}

#[test]
fn every_registered_route_is_documented_and_nothing_else() {
    let registered = registered_routes();
    let documented = documented_routes(&bdk_http::openapi::document());
    // Sanity: the scan found the routes everyone knows about.
    assert!(registered.contains_key("/v1/session/{}/stream"));
    assert!(registered.contains_key("/docs/{}"));
    for (path, methods) in &registered {
        let doc = documented
            .get(path)
            .unwrap_or_else(|| panic!("{path} is registered but not documented"));
        assert_eq!(
            methods, doc,
            "{path}: registered methods and mounts differ from the document"
        );
    }
    for path in documented.keys() {
        assert!(
            registered.contains_key(path),
            "{path} is documented but no route registers it"
        );
    }
}

// ---------------------------------------------------------------------------
// Error codes
// ---------------------------------------------------------------------------

/// Every (code, status) pair the document's error answers list.
fn documented_codes(doc: &Value) -> BTreeMap<String, BTreeSet<u16>> {
    let mut codes: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            for (status, response) in op["responses"].as_object().unwrap() {
                let schema = &response["content"]["application/json"]["schema"];
                let Some(all) = schema["allOf"].as_array() else {
                    continue;
                };
                if all[0]["$ref"] != "#/components/schemas/Error" {
                    continue;
                }
                for code in all[1]["properties"]["error"]["enum"].as_array().unwrap() {
                    codes
                        .entry(code.as_str().unwrap().to_owned())
                        .or_default()
                        .insert(status.parse().unwrap());
                }
            }
        }
    }
    codes
}

#[test]
fn error_codes_match_the_error_code_table() {
    let doc = bdk_http::openapi::document();
    let table: BTreeMap<String, u16> = bdk_http::ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str().to_owned(), c.status().as_u16()))
        .collect();
    assert!(table.contains_key("invalid_session_id"), "{table:?}");
    assert!(table.contains_key("session_not_found"), "{table:?}");

    let enum_codes: BTreeSet<String> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    let table_codes: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        enum_codes, table_codes,
        "the ErrorCode schema differs from the ErrorCode table"
    );

    let documented = documented_codes(&doc);
    for (code, statuses) in &documented {
        assert_eq!(
            statuses,
            &BTreeSet::from([table[code]]),
            "`{code}`: documented statuses differ from the table"
        );
    }
    // Every code appears on at least one operation.
    for code in &enum_codes {
        assert!(documented.contains_key(code), "`{code}` is on no operation");
    }
}

// ---------------------------------------------------------------------------
// Structure
// ---------------------------------------------------------------------------

fn walk_refs(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push((at.to_owned(), v.as_str().unwrap().to_owned()));
                } else {
                    walk_refs(v, &format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk_refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn template_params(path: &str) -> BTreeSet<String> {
    path.split('{')
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_document_is_structurally_openapi_3_1() {
    let doc = bdk_http::openapi::document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    assert!(doc["info"]["title"].is_string());
    assert!(doc["info"]["version"].is_string());
    assert!(
        doc.get("servers").is_none(),
        "the generic document names no server"
    );
    let components = doc["components"].as_object().expect("components");
    let schemes = components["securitySchemes"].as_object().unwrap();
    let tags: BTreeSet<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();

    // Every $ref resolves inside the document.
    let mut refs = Vec::new();
    walk_refs(&doc, "", &mut refs);
    assert!(refs.len() > 50, "suspiciously few $refs: {}", refs.len());
    for (at, target) in &refs {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: external $ref {target}"));
        assert!(
            doc.pointer(pointer).is_some(),
            "{at}: $ref {target} does not resolve"
        );
    }

    let check_security = |at: &str, security: &Value| {
        for requirement in security.as_array().unwrap() {
            for name in requirement.as_object().unwrap().keys() {
                assert!(
                    schemes.contains_key(name),
                    "{at}: unknown security scheme {name}"
                );
            }
        }
    };
    check_security("(root)", &doc["security"]);

    let mut operation_ids = BTreeSet::new();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty());
    for (path, item) in paths {
        assert!(path.starts_with('/'), "{path}");
        let item = item.as_object().unwrap();
        for mount in item["x-bdk-mount"].as_array().unwrap() {
            assert!(
                ["agent", "host", "server"].contains(&mount.as_str().unwrap()),
                "{path}: mount {mount}"
            );
        }
        let mut operations = 0;
        for (key, op) in item {
            if !METHODS.contains(&key.as_str()) {
                assert!(
                    ["summary", "description", "servers", "parameters"].contains(&key.as_str())
                        || key.starts_with("x-"),
                    "{path}: unexpected key {key}"
                );
                continue;
            }
            operations += 1;
            let at = format!("{key} {path}");
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: operationId"));
            assert!(
                operation_ids.insert(id.to_owned()),
                "{at}: duplicate operationId {id}"
            );
            for tag in op["tags"].as_array().unwrap() {
                assert!(
                    tags.contains(tag.as_str().unwrap()),
                    "{at}: undeclared tag {tag}"
                );
            }
            if let Some(security) = op.get("security") {
                check_security(&at, security);
            }
            // Path parameters: exactly the template's, each required.
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let declared: BTreeSet<String> = params
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| {
                    assert_eq!(p["required"], true, "{at}: optional path parameter");
                    p["name"].as_str().unwrap().to_owned()
                })
                .collect();
            assert_eq!(declared, template_params(path), "{at}: path parameters");
            for p in &params {
                assert!(
                    ["path", "query", "header", "cookie"].contains(&p["in"].as_str().unwrap()),
                    "{at}: parameter location"
                );
                assert!(p.get("schema").is_some(), "{at}: parameter without schema");
            }
            if let Some(body) = op.get("requestBody") {
                assert!(
                    body["content"].as_object().is_some_and(|c| !c.is_empty()),
                    "{at}"
                );
            }
            let responses = op["responses"].as_object().unwrap();
            assert!(!responses.is_empty(), "{at}: no responses");
            for (status, response) in responses {
                assert!(
                    status == "default"
                        || (status.len() == 3
                            && status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s))),
                    "{at}: status {status}"
                );
                assert!(
                    response["description"].is_string(),
                    "{at} {status}: description"
                );
            }
        }
        assert!(operations > 0, "{path}: no operations");
    }

    // Every component schema compiles as JSON Schema 2020-12.
    for name in components["schemas"].as_object().unwrap().keys() {
        validator(
            &doc,
            &json!({"$ref": format!("#/components/schemas/{name}")}),
        );
    }
    // The stream's media type is NDJSON.
    let stream = &doc["paths"]["/v1/session/{sessionId}/stream"]["get"]["responses"]["200"];
    assert!(stream["content"]["application/x-ndjson"].is_object());
    // The event vocabulary is the one of bdk-events.
    assert_eq!(
        doc["components"]["schemas"]["EventType"]["enum"],
        json!(bdk_events::EVENT_TYPES)
    );
}

// ---------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------

/// A validator for `schema`, whose `$ref`s point into the document.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    jsonschema::validator_for(&root)
        .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"))
}

fn assert_valid(doc: &Value, schema: &Value, instance: &Value, at: &str) {
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path().as_str()))
        .collect();
    assert!(
        errors.is_empty(),
        "{at}: body does not match {schema}: {errors:#?}\n{instance}"
    );
}

/// Channel routes of every method, at the channel's root and below it.
const INBOX: &str = r#"
description = "Every method, at / and /hook."
auth = "default"

[[routes]]
method = "GET"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "POST"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PUT"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PATCH"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "DELETE"
path = "/"
message = "{{ method }} {{ path }}"

[[routes]]
method = "GET"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "POST"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PUT"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "PATCH"
path = "/hook"
message = "{{ method }} {{ path }}"

[[routes]]
method = "DELETE"
path = "/hook"
message = "{{ method }} {{ path }}"
"#;

/// A scripted test project with native tools and the `inbox` channel.
async fn agent() -> (TempDir, Host, Vec<bdk_core::Diagnostic>) {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "agent/agent.toml",
            "name = \"solo\"\ndescription = \"The OpenAPI test agent.\"\nmodel = \"scripted\"\n",
        ),
        ("agent/instructions.md", "You are a test agent.\n"),
        ("agent/scripted.toml", common::RULES),
        ("agent/channels/inbox.toml", INBOX),
    ];
    for (path, content) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let mut builder = Host::builder(d.project.unwrap(), store);
    for t in common::tools() {
        builder = builder.tool(t);
    }
    (dir, builder.build().await.unwrap(), d.diagnostics)
}

fn client() -> reqwest::Client {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn get_json(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = http.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// The bodies of the router's own fallbacks, found by asking for what
/// cannot exist.
struct Fallbacks {
    not_found: Value,
    method_not_allowed: Value,
}

impl Fallbacks {
    async fn probe(http: &reqwest::Client, agent_base: &str) -> Fallbacks {
        let (status, not_found) = get_json(http, &format!("{agent_base}/v1/no-such-route")).await;
        assert_eq!(status, 404);
        let resp = http
            .delete(format!("{agent_base}/v1/sessions"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 405);
        let method_not_allowed: Value = resp.json().await.unwrap();
        Fallbacks {
            not_found,
            method_not_allowed,
        }
    }

    fn is_fallback(&self, status: u16, body: Option<&Value>) -> bool {
        match (status, body) {
            (404, Some(b)) => *b == self.not_found,
            (405, Some(b)) => *b == self.method_not_allowed,
            _ => false,
        }
    }
}

/// The value a test request puts in a path parameter.
fn param_value(name: &str, path: &str, session: &str) -> String {
    match name {
        "sessionId" => session.to_owned(),
        "callId" => "call_not_parked".to_owned(),
        "name" => "lookup".to_owned(),
        "id" => "art_missing".to_owned(),
        "channel" => "inbox".to_owned(),
        "path" if path.starts_with("/docs/") => "http-api".to_owned(),
        "path" => "hook".to_owned(),
        "file" => "app.js".to_owned(),
        other => panic!("{path}: no test value for the path parameter {other}"),
    }
}

/// A value of a path parameter that names nothing, for the parameters
/// whose operations document that answer.
fn bad_value(name: &str) -> Option<&'static str> {
    match name {
        "sessionId" => Some("not-a-session-id"),
        "name" => Some("no_such_tool"),
        _ => None,
    }
}

/// The body a test request sends, chosen to reach the handler's success path
/// where one exists.
fn request_body(op_id: &str, op: &Value, session: &str) -> Option<Value> {
    let body = op.get("requestBody")?;
    Some(match op_id {
        "sendMessage" => json!({"message": "hello again"}),
        "callTool" => json!({"input": {"city": "Paris"}, "sessionId": session}),
        _ => {
            let example = &body["content"]["application/json"]["example"];
            if example.is_null() {
                json!({"text": "hi"})
            } else {
                example.clone()
            }
        }
    })
}

/// Requests every documented operation under `bases` (mount -> base URL;
/// a mount missing from it is not served in this layout) and checks the
/// answers against the document. Returns how many requests were made.
async fn exercise(
    doc: &Value,
    http: &reqwest::Client,
    bases: &BTreeMap<&str, String>,
    fallbacks: &Fallbacks,
    session: &str,
) -> usize {
    let mut requests = 0;
    let mut seen_urls = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for mount in item["x-bdk-mount"].as_array().unwrap() {
            let Some(base) = bases.get(mount.as_str().unwrap()) else {
                continue;
            };
            for (method, op) in item.as_object().unwrap() {
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                let op_id = op["operationId"].as_str().unwrap();
                // Deleting the shared session would leave every later
                // operation with nothing to act on: it gets one of its own.
                let own;
                let session = if op_id == "deleteSession" {
                    own = common::start(http, base, json!({})).await["sessionId"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    own.as_str()
                } else {
                    session
                };
                let params = template_params(path);
                // Good values, plus one variant per parameter that has a
                // documented "no such thing" answer, so error codes are
                // checked against the operation's list too.
                let mut variants = vec![None];
                variants.extend(
                    params
                        .iter()
                        .filter_map(|p| bad_value(p).map(|v| Some((p.clone(), v)))),
                );
                let url_paths: Vec<String> = variants
                    .iter()
                    .map(|bad| {
                        let mut url_path = path.clone();
                        for name in &params {
                            let value = match bad {
                                Some((n, v)) if n == name => (*v).to_owned(),
                                _ => param_value(name, path, session),
                            };
                            url_path = url_path.replace(&format!("{{{name}}}"), &value);
                        }
                        url_path
                    })
                    .collect();
                // One request as is, plus one per value of each enum query
                // parameter, so every documented representation is seen.
                let mut queries = vec![String::new()];
                for p in op["parameters"].as_array().cloned().unwrap_or_default() {
                    if p["in"] == "query"
                        && let Some(values) = p["schema"]["enum"].as_array()
                    {
                        for v in values {
                            queries.push(format!(
                                "?{}={}",
                                p["name"].as_str().unwrap(),
                                v.as_str().unwrap()
                            ));
                        }
                    }
                }
                let targets = url_paths
                    .iter()
                    .flat_map(|p| queries.iter().map(move |q| format!("{p}{q}")));
                for target in targets {
                    let url = format!("{base}{target}");
                    if !seen_urls.insert((method.clone(), url.clone())) {
                        continue;
                    }
                    let at = format!("{} {url} ({op_id})", method.to_uppercase());
                    let mut req = http.request(method.to_uppercase().parse().unwrap(), &url);
                    if let Some(body) = request_body(op_id, op, session) {
                        req = req.json(&body);
                    }
                    let resp = tokio::time::timeout(common::DEADLINE, req.send())
                        .await
                        .unwrap_or_else(|_| panic!("{at}: no answer"))
                        .unwrap();
                    requests += 1;
                    check_response(doc, op, op_id, &at, resp, fallbacks).await;
                }
            }
        }
    }
    requests
}

async fn check_response(
    doc: &Value,
    op: &Value,
    op_id: &str,
    at: &str,
    resp: reqwest::Response,
    fallbacks: &Fallbacks,
) {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let essence = content_type
        .as_deref()
        .map(|c| c.split(';').next().unwrap().trim().to_ascii_lowercase());

    let documented = op["responses"]
        .get(status.to_string())
        .or_else(|| op["responses"].get("default"));

    if op_id == "streamEvents" && status == 200 {
        // The stream never ends by itself: check the head and hang up.
        assert_eq!(essence.as_deref(), Some("application/x-ndjson"), "{at}");
        assert!(documented.is_some());
        return;
    }
    let text = resp.text().await.unwrap();
    let json_body: Option<Value> = if essence.as_deref() == Some("application/json") {
        Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{at}: invalid JSON ({e}): {text}")),
        )
    } else {
        None
    };
    assert!(
        !fallbacks.is_fallback(status, json_body.as_ref()),
        "{at}: the documented operation fell through to the router's {status} fallback"
    );
    let documented = documented
        .unwrap_or_else(|| panic!("{at}: status {status} is not documented; body: {text}"));

    let Some(content) = documented.get("content").and_then(Value::as_object) else {
        assert!(
            text.is_empty(),
            "{at}: {status} documents no body, got {text}"
        );
        return;
    };
    let essence = essence.unwrap_or_else(|| panic!("{at}: no content type"));
    let media = content
        .get(&essence)
        .or_else(|| content.get("*/*"))
        .unwrap_or_else(|| panic!("{at}: content type {essence} is not documented for {status}"));
    match essence.as_str() {
        "application/json" => {
            assert_valid(doc, &media["schema"], json_body.as_ref().unwrap(), at);
        }
        "application/x-ndjson" => {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(!lines.is_empty(), "{at}: no events");
            for line in lines {
                let event: Value = serde_json::from_str(line).unwrap();
                assert_valid(doc, &media["schema"], &event, at);
            }
        }
        _ => {}
    }
}

/// Starts a session and waits for its first turn to end.
async fn session(http: &reqwest::Client, agent_base: &str) -> String {
    let started = common::start(
        http,
        agent_base,
        json!({"message": "What is the weather in Paris?"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let events = common::settle(http, agent_base, &id, 1).await;
    let done = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap();
    assert!(done["data"]["reply"].as_str().unwrap().contains("Paris"));
    id
}

/// How many operations the document lists on paths whose mounts pass `filter`.
fn operations(doc: &Value, filter: impl Fn(&Value) -> bool) -> usize {
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .filter(|item| filter(&item["x-bdk-mount"]))
        .map(|item| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .count()
        })
        .sum()
}

fn strip_servers(mut doc: Value) -> (Value, Value) {
    let servers = doc
        .as_object_mut()
        .unwrap()
        .remove("servers")
        .expect("servers");
    (doc, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_agent_layout_serves_every_documented_operation() {
    let (_dir, host, diagnostics) = agent().await;
    let mount = Mount {
        slug: Some("solo".to_owned()),
        host,
        diagnostics,
    };
    let config = Config {
        playground: true,
        ..Config::default()
    };
    let base = common::serve(vec![mount], config).await;
    let http = client();
    let doc = bdk_http::openapi::document();

    // The agent's copy: the document, with the agent's base path as server.
    let (status, served) = get_json(&http, &format!("{base}/solo/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(served, doc);
    assert_eq!(servers[0]["url"], "/solo");

    // The root copy: a `{slug}` variable over the agents.
    let (status, served) = get_json(&http, &format!("{base}/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(served, doc);
    assert_eq!(servers[0]["url"], "/{slug}");
    assert_eq!(servers[0]["variables"]["slug"]["enum"], json!(["solo"]));
    assert_eq!(servers[0]["variables"]["slug"]["default"], "solo");

    let agent_base = format!("{base}/solo");
    let fallbacks = Fallbacks::probe(&http, &agent_base).await;
    let id = session(&http, &agent_base).await;
    let bases = BTreeMap::from([
        ("agent", agent_base.clone()),
        ("host", base.clone()),
        ("server", base.clone()),
    ]);
    let requests = exercise(&doc, &http, &bases, &fallbacks, &id).await;
    assert!(
        requests >= operations(&doc, |_| true),
        "only {requests} requests"
    );

    // The check above can fail: a path the document does not have falls
    // through, under the agent and at the root.
    let (status, body) = get_json(&http, &format!("{agent_base}/v1/agents")).await;
    assert!(
        fallbacks.is_fallback(status, Some(&body)),
        "{status} {body}"
    );
    let (status, body) = get_json(&http, &format!("{base}/v1/sessions")).await;
    assert!(
        fallbacks.is_fallback(status, Some(&body)),
        "{status} {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_layout_serves_every_documented_operation() {
    let (_dir, host, diagnostics) = agent().await;
    let mount = Mount {
        slug: None,
        host,
        diagnostics,
    };
    let config = Config {
        playground: true,
        ..Config::default()
    };
    let base = common::serve(vec![mount], config).await;
    let http = client();
    let doc = bdk_http::openapi::document();

    let (status, served) = get_json(&http, &format!("{base}/v1/openapi.json")).await;
    assert_eq!(status, 200);
    let (served, servers) = strip_servers(served);
    assert_eq!(servers, json!([{"url": "/"}]));
    // The served copy is the document minus the host-only paths, which this
    // layout does not answer (schemathesis would call them and get 404).
    let mut expected = doc.clone();
    expected["paths"]
        .as_object_mut()
        .unwrap()
        .retain(|_, item| item["x-bdk-mount"] != json!(["host"]));
    assert!(expected["paths"].as_object().unwrap().len() < doc["paths"].as_object().unwrap().len());
    assert_eq!(served, expected);
    for path in ["/", "/v1/agents"] {
        assert!(served["paths"].get(path).is_none(), "{path} is listed");
    }

    let fallbacks = Fallbacks::probe(&http, &base).await;
    let id = session(&http, &base).await;
    let bases = BTreeMap::from([("agent", base.clone()), ("server", base.clone())]);
    let requests = exercise(&doc, &http, &bases, &fallbacks, &id).await;
    let served = operations(&doc, |mounts| mounts != &json!(["host"]));
    assert!(requests >= served, "only {requests} requests");

    // Host-only paths are documented as absent in this layout, and are.
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item["x-bdk-mount"] == json!(["host"]) {
            let resp = http.get(format!("{base}{path}")).send().await.unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            assert!(
                fallbacks.is_fallback(status, Some(&body)),
                "{path}: {status} {body}"
            );
        }
    }
}
