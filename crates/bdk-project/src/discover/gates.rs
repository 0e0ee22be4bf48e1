//! `gates/<name>.toml`: one result gate per manifest, plus the program
//! files its `command` names (its runner is `bdk_core::gate`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::util::{
    Diags, Entry, Fields, Kind, check_env_name, is_slug, list_dir, read_toml, report_other,
    sandbox_mode,
};
use crate::gate::{
    DEFAULT_GATE_TIMEOUT, DEFAULT_MAX_ATTEMPTS, GateSpec, MAX_ATTEMPTS_LIMIT, OnError,
};
use crate::{GateManifest, HandlerCommand, SandboxMode};

const GATE_KEYS: &[&str] = &[
    "command",
    "description",
    "max_attempts",
    "timeout_secs",
    "env",
    "on_error",
    "sandbox",
    "max_output_bytes",
];

/// The longest a gate may take: a turn waits for it.
const MAX_TIMEOUT_SECS: u64 = 600;

/// Discovers the gates in `dir`, sorted by name (the order they run in).
pub(crate) fn discover(d: &mut Diags, dir: &Path) -> Vec<GateManifest> {
    let entries = list_dir(d, dir);
    let manifests: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.is_file() && e.stem_ext().1 == Some("toml"))
        .collect();
    let stems: BTreeSet<&str> = manifests.iter().map(|e| e.stem_ext().0).collect();
    // Files the manifests' commands name are part of a gate, not strays.
    let mut refs: BTreeSet<String> = BTreeSet::new();
    let mut gates = Vec::new();
    for entry in &manifests {
        if let Some(toml::Value::Array(args)) = read_command(entry) {
            refs.extend(args.iter().filter_map(toml::Value::as_str).map(norm_ref));
        }
        if let Some(gate) = parse(d, entry, dir) {
            gates.push(gate);
        }
    }
    for entry in &entries {
        if manifests.iter().any(|m| m.path == entry.path) {
            continue;
        }
        let name = entry.name.as_str();
        let first_stem = name.split('.').next().unwrap_or(name);
        let owned = stems.contains(first_stem)
            || stems.contains(entry.stem_ext().0)
            || match entry.kind {
                Kind::Dir => refs.iter().any(|r| r.starts_with(&format!("{name}/"))),
                _ => refs.contains(name),
            };
        match entry.kind {
            Kind::Other => report_other(d, entry),
            Kind::File | Kind::Dir if !owned => d.warn(
                &entry.path,
                "stray entry in gates/: no gate manifest uses it",
                "reference it from a gate's `command`, name it after its manifest (`<gate>.py` next to `<gate>.toml`), or move it to lib/",
            ),
            Kind::File | Kind::Dir => {}
        }
    }
    gates.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    gates
}

/// The raw `command` of a manifest, read quietly (the parse reports problems).
fn read_command(entry: &Entry) -> Option<toml::Value> {
    let text = std::fs::read_to_string(&entry.path).ok()?;
    let table: toml::Table = text.parse().ok()?;
    table.get("command").cloned()
}

/// Strips a leading `./` so `./check.py` and `check.py` name the same file.
fn norm_ref(arg: &str) -> String {
    let mut s = arg;
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    s.to_owned()
}

/// Parses one manifest; `None` when it has errors (they are reported).
fn parse(d: &mut Diags, entry: &Entry, dir: &Path) -> Option<GateManifest> {
    let path = entry.path.as_path();
    let name = entry.stem_ext().0.to_owned();
    let errors_before = d.error_count();
    if !is_slug(&name, 64) {
        d.error(
            path,
            format!("gate name `{name}` is invalid"),
            "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
        );
    }
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, GATE_KEYS);

    let argv = match f.strings(d, "command") {
        Some(argv) if argv.first().is_some_and(|p| !p.trim().is_empty()) => Some(argv),
        Some(_) => {
            d.error(
                path,
                "`command` must start with a program",
                "write `command = [\"python3\", \"<gate>.py\"]`",
            );
            None
        }
        None if !f.has("command") => {
            d.error(
                path,
                "missing `command`: a gate is a program",
                "add `command = [\"python3\", \"<gate>.py\"]` (it runs in gates/)",
            );
            None
        }
        None => None,
    };
    let description = if f.has("description") {
        f.nonempty_string(d, "description")
    } else {
        Some(String::new())
    };
    let max_attempts = match f.positive(d, "max_attempts") {
        Some(n) if n > u64::from(MAX_ATTEMPTS_LIMIT) => {
            d.error(
                path,
                format!("`max_attempts` must be 1 to {MAX_ATTEMPTS_LIMIT}, found {n}"),
                format!(
                    "set `max_attempts` to at most {MAX_ATTEMPTS_LIMIT}: every attempt is one more model reply in the same turn"
                ),
            );
            None
        }
        Some(n) => u32::try_from(n).ok(),
        None if f.has("max_attempts") => None,
        None => Some(DEFAULT_MAX_ATTEMPTS),
    };
    let timeout = match f.positive(d, "timeout_secs") {
        Some(n) if n > MAX_TIMEOUT_SECS => {
            d.error(
                path,
                format!("`timeout_secs` must be at most {MAX_TIMEOUT_SECS}, found {n}"),
                "a turn waits for its gates: keep `timeout_secs` short",
            );
            None
        }
        Some(n) => Some(Duration::from_secs(n)),
        None if f.has("timeout_secs") => None,
        None => Some(DEFAULT_GATE_TIMEOUT),
    };
    let on_error = match f.string(d, "on_error").as_deref() {
        None if !f.has("on_error") => Some(OnError::Fail),
        None => None,
        Some("fail") => Some(OnError::Fail),
        Some("accept") => Some(OnError::Accept),
        Some(other) => {
            d.error(
                path,
                format!("`on_error` must be \"fail\" or \"accept\", found \"{other}\""),
                "write `on_error = \"fail\"` (the default: a broken gate fails the turn) or `\"accept\"`",
            );
            None
        }
    };
    // `env` sets values (a table) or passes the server's own variables
    // through by name (an array), as for command tools.
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
    let max_output_bytes = f
        .positive(d, "max_output_bytes")
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let sandbox = sandbox_mode(d, &f, "sandbox").unwrap_or_default();
    if sandbox == SandboxMode::Off {
        d.warn(
            path,
            "`sandbox = \"off\"`: this gate runs uncontained, with access to every file the server can read and write",
            "remove `sandbox = \"off\"` and grant what the gate needs with `[sandbox] read`/`write` in agent.toml",
        );
    }

    if d.error_count() > errors_before {
        return None;
    }
    let timeout = timeout?;
    let mut command = HandlerCommand::new(argv?, dir.to_path_buf());
    command.env = env;
    command.pass_env = pass_env;
    command.sandbox = sandbox;
    command.timeout = timeout;
    if let Some(bytes) = max_output_bytes {
        command.max_output_bytes = bytes;
    }
    Some(GateManifest {
        path: path.to_owned(),
        spec: GateSpec {
            name,
            description: description?,
            max_attempts: max_attempts?,
            timeout,
            on_error: on_error?,
        },
        command,
    })
}
