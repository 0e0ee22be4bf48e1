//! The keys of a handler program, read the same way wherever one is
//! declared: a schedule file (`handler = [...]` at the top level) or a
//! channel route (`handler = [...]` in a `[[routes]]` table).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::util::{Diags, Fields, check_env_name, is_slug, sandbox_mode};
use crate::SandboxMode;
use crate::handler::{
    DEFAULT_HANDLER_TIMEOUT, HandlerCommand, HandlerSpec, MAX_HANDLER_TIMEOUT_SECS,
};

/// The keys [`handler`] reads besides `handler` itself.
pub(crate) const HANDLER_KEYS: &[&str] = &[
    "handler",
    "env",
    "timeout_secs",
    "max_output_bytes",
    "sandbox",
];

/// The handler of `f` (its `handler` key present): a program running in
/// `dir`, or a native handler's name. `None` when a key is wrong
/// (reported).
pub(crate) fn handler(d: &mut Diags, f: &Fields<'_>, dir: &Path) -> Option<HandlerSpec> {
    if let Some(toml::Value::String(name)) = f.table.get("handler") {
        return native(d, f, name);
    }
    program(d, f, dir).map(HandlerSpec::Program)
}

/// `handler = "name"`: registered in Rust by the embedding program; only
/// `timeout_secs` applies.
fn native(d: &mut Diags, f: &Fields<'_>, name: &str) -> Option<HandlerSpec> {
    let errors_before = d.error_count();
    if !is_slug(name, 64) {
        d.error(
            f.path,
            format!("`{}` names `{name}`, which is not a handler name", f.key("handler")),
            "write a program as an array (`handler = [\"python3\", \"run.py\"]`), or a native handler's name of letters, digits, `_` and `-`",
        );
    }
    for key in ["env", "max_output_bytes", "sandbox"] {
        if f.has(key) {
            d.error(
                f.path,
                format!(
                    "`{}` applies to handler programs, not to native handler `{name}`",
                    f.key(key)
                ),
                format!("remove `{}`", f.key(key)),
            );
        }
    }
    let timeout = timeout(d, f);
    d.warn(
        f.path,
        format!("handler `{name}` is a native handler: the program that embeds bdk must register it (`HostBuilder::handler`), and `bdk serve` refuses to start without it"),
        "write a program instead (`handler = [\"python3\", \"run.py\"]`) unless you embed bdk in Rust",
    );
    if d.error_count() > errors_before {
        return None;
    }
    Some(HandlerSpec::Native {
        name: name.to_owned(),
        timeout: timeout.unwrap_or(DEFAULT_HANDLER_TIMEOUT),
    })
}

/// `timeout_secs`, bounded.
fn timeout(d: &mut Diags, f: &Fields<'_>) -> Option<Duration> {
    match f.positive(d, "timeout_secs") {
        Some(secs) if secs > MAX_HANDLER_TIMEOUT_SECS => {
            d.error(
                f.path,
                format!(
                    "`{}` is {secs}; the longest a handler may run is {MAX_HANDLER_TIMEOUT_SECS} seconds",
                    f.key("timeout_secs")
                ),
                "lower it, or let the handler start a session that does the long work",
            );
            None
        }
        other => other.map(Duration::from_secs),
    }
}

fn program(d: &mut Diags, f: &Fields<'_>, dir: &Path) -> Option<HandlerCommand> {
    let errors_before = d.error_count();
    let argv = f.strings(d, "handler");
    if let Some(argv) = &argv
        && argv.first().is_none_or(|p| p.trim().is_empty())
    {
        d.error(
            f.path,
            format!("`{}` must start with a program", f.key("handler")),
            format!(
                "write `{} = [\"python3\", \"handler.py\"]`",
                f.key("handler")
            ),
        );
    }
    // `env` sets values (a table) or passes the server's own variables
    // through by name (an array), as for tools.
    let (env, pass_env) = match f.table.get("env") {
        Some(toml::Value::Array(_)) => {
            let names = f.strings(d, "env").unwrap_or_default();
            for name in &names {
                check_env_name(d, f.path, name);
            }
            (BTreeMap::new(), names)
        }
        _ => (f.string_map(d, "env").unwrap_or_default(), Vec::new()),
    };
    let timeout = timeout(d, f);
    let max_output_bytes = f
        .positive(d, "max_output_bytes")
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let sandbox = sandbox_mode(d, f, "sandbox").unwrap_or_default();
    if sandbox == SandboxMode::Off {
        d.warn(
            f.path,
            "`sandbox = \"off\"`: this handler runs uncontained, with access to every file the server can read and write",
            "remove `sandbox = \"off\"` and grant what the handler needs with `[sandbox] read`/`write` in agent.toml",
        );
    }
    if d.error_count() > errors_before {
        return None;
    }
    let mut command = HandlerCommand::new(argv?, dir.to_path_buf());
    command.env = env;
    command.pass_env = pass_env;
    command.sandbox = sandbox;
    if let Some(timeout) = timeout {
        command.timeout = timeout;
    }
    if let Some(bytes) = max_output_bytes {
        command.max_output_bytes = bytes;
    }
    Some(command)
}

/// The files of its folder a handler program's argv names (`./run.py` and
/// `run.py` alike), so discovery does not call them strays.
pub(crate) fn referenced(spec: &HandlerSpec) -> impl Iterator<Item = String> + '_ {
    let argv: &[String] = match spec {
        HandlerSpec::Program(command) => &command.argv,
        HandlerSpec::Native { .. } => &[],
    };
    argv.iter().map(|arg| super::tools::norm_ref(arg))
}
