//! `agent.toml` and the instructions of the root agent and of subagents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::json;
use toml::Table;

use super::util::{
    Diags, Fields, Kind, check_env_name, list_dir, path_kind, read_text, report_other, sandbox_mode,
};
use crate::{AgentConfig, BuiltinTools, ProviderConfig, SandboxConfig, SandboxMode};
use bdk_models::ToolChoice;

/// The keys `agent.toml` understands.
const AGENT_KEYS: &[&str] = &[
    "name",
    "description",
    "model",
    "effort",
    "tool_choice",
    "max_output_tokens",
    "max_steps",
    "max_running_turns",
    "tool_timeout_ms",
    "local",
    "builtin_tools",
    "provider",
    "step_timeout_ms",
    "context_window",
    "prices",
    "sandbox",
];
const SANDBOX_KEYS: &[&str] = &[
    "mode",
    "read",
    "write",
    "deny",
    "env",
    "user",
    "memory",
    "processes",
    "cpu_seconds",
    "file_size",
];
const PROVIDER_KEYS: &[&str] = &["base_url", "api_key_env"];
const BUILTIN_KEYS: &[&str] = &["workspace", "shell", "reminders", "artifacts", "direct"];

/// Parses an `agent.toml` table; relative paths are resolved against `root`
/// so consumers never depend on the process's working directory.
pub(crate) fn parse_config(d: &mut Diags, path: &Path, table: &Table, root: &Path) -> AgentConfig {
    let f = Fields::new(table, path);
    f.unknown_keys(d, AGENT_KEYS);
    let name = f.nonempty_string(d, "name");
    let description = f.string(d, "description");
    let model = f.string(d, "model");
    if let Some(model) = &model {
        check_model_shape(d, path, model);
    }
    let effort = f.nonempty_string(d, "effort");
    let tool_choice = parse_tool_choice(d, path, table);
    let max_output_tokens = f.positive_u32(d, "max_output_tokens");
    let max_steps = f.positive_u32(d, "max_steps");
    let max_running_turns = f.positive_u32(d, "max_running_turns");
    let tool_timeout_ms = f.positive(d, "tool_timeout_ms");

    if f.table.contains_key("local") {
        // The seeds' `local.cwd` picks the parent directory of a local
        // harness's working directory. bdk has no such harness: every
        // session works in its own workspace under the state root, so the
        // key would do nothing. Refuse it rather than accept it silently.
        d.error(
            path,
            "`[local]` is not supported: every session works in its own workspace under the state root",
            "remove the `[local]` table; to keep state elsewhere, pass `--state-root DIR` (or set BDK_STATE_ROOT)",
        );
    }

    let mut builtin_tools = BuiltinTools::default();
    if let Some(t) = f.table(d, "builtin_tools") {
        let bf = Fields::nested(t, path, "builtin_tools.");
        bf.unknown_keys(d, BUILTIN_KEYS);
        if let Some(b) = bf.bool(d, "workspace") {
            builtin_tools.workspace = b;
        }
        if let Some(b) = bf.bool(d, "shell") {
            builtin_tools.shell = b;
        }
        if let Some(b) = bf.bool(d, "reminders") {
            builtin_tools.reminders = b;
        }
        if let Some(b) = bf.bool(d, "artifacts") {
            builtin_tools.artifacts = b;
        }
        builtin_tools.direct = bf.strings(d, "direct").unwrap_or_default();
    }

    let step_timeout_ms = f.positive(d, "step_timeout_ms");
    let provider = f
        .table(d, "provider")
        .map(|t| parse_provider(d, path, t))
        .unwrap_or_default();

    AgentConfig {
        name,
        description,
        model,
        effort,
        tool_choice,
        max_output_tokens,
        max_steps,
        max_running_turns,
        tool_timeout_ms,
        builtin_tools,
        provider,
        step_timeout_ms,
        context_window: f.positive(d, "context_window"),
        prices: f
            .table(d, "prices")
            .map(|t| parse_prices(d, path, t))
            .unwrap_or_default(),
        sandbox: parse_sandbox(d, &f, root),
    }
}

/// `tool_choice = "auto" | "required" | "none"`, or `tool_choice = { tool =
/// "name" }` to force one tool.
fn parse_tool_choice(d: &mut Diags, path: &Path, table: &Table) -> Option<ToolChoice> {
    let fix = "write `tool_choice = \"auto\"`, `\"required\"`, `\"none\"` or `{ tool = \"<tool name>\" }`";
    match table.get("tool_choice")? {
        toml::Value::String(s) => match s.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Required),
            "none" => Some(ToolChoice::None),
            other => {
                d.error(
                    path,
                    format!("`tool_choice` must be \"auto\", \"required\", \"none\" or {{ tool = \"name\" }}, found \"{other}\""),
                    fix,
                );
                None
            }
        },
        toml::Value::Table(t) => match (t.get("tool"), t.len()) {
            (Some(toml::Value::String(name)), 1) if !name.trim().is_empty() => {
                Some(ToolChoice::Tool(name.clone()))
            }
            _ => {
                d.error(
                    path,
                    "`tool_choice` as a table takes exactly one key, `tool`, naming the tool to call",
                    fix,
                );
                None
            }
        },
        _ => {
            d.error(path, "`tool_choice` must be a string or a table", fix);
            None
        }
    }
}

/// `[sandbox]`, or the shorthand `sandbox = "on" | "off"`.
fn parse_sandbox(d: &mut Diags, f: &Fields<'_>, root: &Path) -> SandboxConfig {
    let path = f.path;
    let mut config = SandboxConfig::default();
    match f.table.get("sandbox") {
        None => return config,
        Some(toml::Value::String(_)) => {
            config.mode = sandbox_mode(d, f, "sandbox").unwrap_or_default();
        }
        Some(_) => {
            let Some(t) = f.table(d, "sandbox") else {
                return config;
            };
            let sf = Fields::nested(t, path, "sandbox.");
            sf.unknown_keys(d, SANDBOX_KEYS);
            config.mode = sandbox_mode(d, &sf, "mode").unwrap_or_default();
            let paths = |d: &mut Diags, key: &str| -> Vec<PathBuf> {
                sf.strings(d, key)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|p| sandbox_path(d, path, &sf.key(key), p, root))
                    .collect()
            };
            config.read = paths(d, "read");
            config.write = paths(d, "write");
            config.deny = paths(d, "deny");
            config.env = sf.strings(d, "env").unwrap_or_default();
            for name in &config.env {
                check_env_name(d, path, name);
            }
            config.user = sandbox_user(d, &sf);
            let limits = &mut config.limits;
            limit(d, &sf, "memory", Unit::Bytes, &mut limits.memory);
            limit(d, &sf, "processes", Unit::Count, &mut limits.processes);
            limit(d, &sf, "cpu_seconds", Unit::Count, &mut limits.cpu_seconds);
            limit(d, &sf, "file_size", Unit::Bytes, &mut limits.file_size);
        }
    }
    if config.mode == SandboxMode::Off {
        d.warn(
            path,
            "the sandbox is off: the agent's tools, shell and command hooks run uncontained, with access to every file the server can read and write",
            "remove the setting to turn the sandbox back on, and grant what the programs need with `[sandbox] read`/`write`",
        );
    }
    config
}

/// `[sandbox] user`: `"name"`, `1234` or `"1234:1234"`.
fn sandbox_user(d: &mut Diags, f: &Fields<'_>) -> Option<crate::SandboxUser> {
    use crate::SandboxUser;
    let key = f.key("user");
    let fix =
        "write an account name (`user = \"bdk-tools\"`), a uid (`user = 64000`) or `\"uid:gid\"`";
    let ids = |uid: i64, gid: i64| -> Option<SandboxUser> {
        let uid = u32::try_from(uid).ok().filter(|u| *u != 0)?;
        let gid = u32::try_from(gid).ok().filter(|g| *g != 0)?;
        Some(SandboxUser::Ids { uid, gid })
    };
    let parsed = match f.table.get("user")? {
        toml::Value::Integer(uid) => ids(*uid, *uid),
        toml::Value::String(text) => match text.split_once(':') {
            Some((uid, gid)) => match (uid.trim().parse(), gid.trim().parse()) {
                (Ok(uid), Ok(gid)) => ids(uid, gid),
                _ => None,
            },
            None if text.trim().parse::<i64>().is_ok() => {
                text.trim().parse().ok().and_then(|uid| ids(uid, uid))
            }
            None if !text.trim().is_empty() && text.trim() != "root" => {
                Some(SandboxUser::Name(text.trim().to_owned()))
            }
            None => None,
        },
        _ => None,
    };
    if parsed.is_none() {
        d.error(
            f.path,
            format!(
                "`{key}` must name an account other than root, or a uid (and gid) other than 0"
            ),
            fix,
        );
    }
    parsed
}

/// What a limit counts.
#[derive(Clone, Copy)]
enum Unit {
    /// Bytes: an integer, or a string with a unit (`"512 MiB"`, `"1GiB"`).
    Bytes,
    /// A plain positive integer.
    Count,
}

/// One `[sandbox]` limit: `"unlimited"` clears it, a value replaces the
/// default, absence keeps the default.
fn limit(d: &mut Diags, f: &Fields<'_>, key: &str, unit: Unit, slot: &mut Option<u64>) {
    let Some(value) = f.table.get(key) else {
        return;
    };
    let k = f.key(key);
    let parsed = match (value, unit) {
        (toml::Value::String(s), _) if s.trim() == "unlimited" => {
            *slot = None;
            return;
        }
        (toml::Value::Integer(n), _) => u64::try_from(*n).ok().filter(|n| *n > 0),
        (toml::Value::String(s), Unit::Bytes) => parse_size(s),
        _ => None,
    };
    match parsed {
        Some(n) => *slot = Some(n),
        None => {
            let example = match unit {
                Unit::Bytes => format!("`{key} = \"2 GiB\"`"),
                Unit::Count => format!("`{key} = 100`"),
            };
            d.error(
                f.path,
                format!(
                    "`{k}` must be a positive {} or \"unlimited\"",
                    match unit {
                        Unit::Bytes => "size",
                        Unit::Count => "integer",
                    }
                ),
                format!("write it like {example}"),
            );
        }
    }
}

/// A size with an optional binary or decimal unit: `1024`, `"512 MiB"`,
/// `"1GiB"`, `"2 GB"`, `"100k"`.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor).filter(|n| *n > 0)
}

/// A path of `[sandbox]`: absolute, `~/...` (the server's home) or
/// relative to the project root.
fn sandbox_path(d: &mut Diags, path: &Path, key: &str, raw: &str, root: &Path) -> Option<PathBuf> {
    if raw.trim().is_empty() {
        d.error(
            path,
            format!("`{key}` has an empty path"),
            "remove the empty entry",
        );
        return None;
    }
    if raw == "~" || raw.starts_with("~/") {
        let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
            d.error(
                path,
                format!("`{key}` names `{raw}` but HOME is not set"),
                "write the path in full",
            );
            return None;
        };
        let rest = raw.trim_start_matches('~').trim_start_matches('/');
        return Some(PathBuf::from(home).join(rest));
    }
    let p = PathBuf::from(raw);
    Some(if p.is_absolute() { p } else { root.join(p) })
}

/// The keys of one `[prices."provider/model"]` table.
const PRICE_KEYS: &[&str] = &["input", "output", "cache_read", "cache_write"];

/// Parses `[prices]`: one table per `provider/model` (or `provider/*`) with
/// non-negative USD-per-million-token rates. `input` and `output` are
/// required; a missing cache rate is the input rate, which never
/// underestimates.
fn parse_prices(
    d: &mut Diags,
    path: &Path,
    table: &Table,
) -> BTreeMap<String, bdk_models::prices::Price> {
    let mut out = BTreeMap::new();
    for (model, value) in table {
        let key = format!("prices.\"{model}\"");
        let shape_ok = model.split_once('/').is_some_and(|(p, m)| {
            !p.is_empty() && !m.is_empty() && !model.chars().any(char::is_whitespace)
        });
        if !shape_ok {
            d.error(
                path,
                format!("`[{key}]` must name a model as `provider/model` or `provider/*`"),
                "write the key as the model string, for example `[prices.\"xai/grok-4.3\"]`",
            );
            continue;
        }
        let toml::Value::Table(rates) = value else {
            d.error(
                path,
                format!("`{key}` must be a table of rates, found {}", value.type_str()),
                format!("write `[{key}]` with `input = 3.0` and `output = 15.0` (USD per million tokens)"),
            );
            continue;
        };
        let f = Fields::nested(rates, path, format!("{key}."));
        f.unknown_keys(d, PRICE_KEYS);
        let mut rate = |name: &str| -> Result<Option<f64>, ()> {
            let Some(v) = rates.get(name) else {
                return Ok(None);
            };
            let n = match v {
                toml::Value::Float(x) => *x,
                toml::Value::Integer(i) => *i as f64,
                other => {
                    d.error(
                        path,
                        format!(
                            "`{key}.{name}` must be a number, found {}",
                            other.type_str()
                        ),
                        format!("write it as `{name} = 3.0` (USD per million tokens)"),
                    );
                    return Err(());
                }
            };
            if !n.is_finite() || n < 0.0 {
                d.error(
                    path,
                    format!("`{key}.{name}` must be a non-negative number, found {n}"),
                    format!("set `{name}` to the price in USD per million tokens (0 for free)"),
                );
                return Err(());
            }
            Ok(Some(n))
        };
        let (input, output, cache_read, cache_write) = (
            rate("input"),
            rate("output"),
            rate("cache_read"),
            rate("cache_write"),
        );
        let (Ok(input), Ok(output), Ok(cache_read), Ok(cache_write)) =
            (input, output, cache_read, cache_write)
        else {
            continue;
        };
        let (Some(input), Some(output)) = (input, output) else {
            d.error(
                path,
                format!("`[{key}]` needs both `input` and `output`"),
                "add the missing rate in USD per million tokens",
            );
            continue;
        };
        out.insert(
            model.clone(),
            bdk_models::prices::Price::new(
                input,
                output,
                cache_read.unwrap_or(input),
                cache_write.unwrap_or(input),
            ),
        );
    }
    out
}

/// Parses `[provider]`: an http(s) `base_url` and the *name* of the variable
/// holding the key, so a key never has to be written into the project.
fn parse_provider(d: &mut Diags, path: &Path, table: &Table) -> ProviderConfig {
    let f = Fields::nested(table, path, "provider.");
    f.unknown_keys(d, PROVIDER_KEYS);
    let base_url = f.nonempty_string(d, "base_url").filter(|url| {
        // `http::Uri` rather than the `url` crate, which costs ~28 crates
        // (IDNA, Unicode tables) for hosts an API base does not use; the
        // HTTP client parses the URL again when a request is made.
        let ok = url.trim().parse::<http::Uri>().is_ok_and(|u| {
            matches!(u.scheme_str(), Some("http" | "https"))
                && u.host().is_some_and(|h| !h.is_empty())
        });
        if !ok {
            d.error(
                path,
                format!("`provider.base_url` must be an http or https URL, found `{url}`"),
                "write the API base, for example `base_url = \"http://127.0.0.1:11434/v1\"`",
            );
        }
        ok
    });
    let api_key_env = f.nonempty_string(d, "api_key_env").filter(|var| {
        let ok = var.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        // The value is not quoted back: a value that is not a variable name
        // is most likely the key itself, which must not land in logs.
        if !ok {
            d.error(
                path,
                "`provider.api_key_env` must be the name of an environment variable (letters, digits and `_`)",
                "set it to the variable's name, for example `api_key_env = \"MY_GATEWAY_KEY\"`, and export the key in that variable; never write the key itself into agent.toml",
            );
        }
        ok
    });
    ProviderConfig {
        base_url: base_url.map(|u| u.trim().to_owned()),
        api_key_env,
    }
}

/// Checks that a model string is `scripted` or `provider/model`.
pub(crate) fn check_model_shape(d: &mut Diags, path: &Path, model: &str) {
    if model == "scripted" {
        return;
    }
    let ok = match model.split_once('/') {
        Some((provider, name)) => {
            !provider.is_empty()
                && provider
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                && !name.is_empty()
                && !name.chars().any(char::is_whitespace)
        }
        None => false,
    };
    if ok
        && let Some((provider, _)) = model.split_once('/')
        && !matches!(provider, "scripted" | "replay")
        && !bdk_models::resolve::is_known_provider(provider)
    {
        d.error(
            path,
            format!("`model` names an unknown provider `{provider}` in `{model}`"),
            format!(
                "use one of {} as the part before the slash, or `replay/<recording>`",
                bdk_models::resolve::known_providers()
            ),
        );
    }
    if !ok {
        d.error(
            path,
            format!("`model` must be `provider/model` or `scripted`, found `{model}`"),
            "write the model as `provider/model` (for example `xai/grok-4` or `anthropic/claude-sonnet-4-5`), `scripted`, or `scripted/<rules>`",
        );
    }
}

/// Checks that a `scripted` model has its rules file. `agent_dir` is where
/// the rules live (always the root agent's folder: subagents share them).
pub(crate) fn check_scripted_rules(
    d: &mut Diags,
    path: &Path,
    model: &str,
    agent_dir: &Path,
    rules: &BTreeMap<String, PathBuf>,
) {
    let name = match model {
        "scripted" | "scripted/default" => "default",
        other => match other.strip_prefix("scripted/") {
            Some(name) => name,
            None => return,
        },
    };
    if rules.contains_key(name) {
        return;
    }
    let want = if name == "default" {
        agent_dir.join("scripted.toml")
    } else {
        agent_dir.join("scripted").join(format!("{name}.toml"))
    };
    let want = d.rel(&want);
    d.error(
        path,
        format!("model `{model}` needs a rules file at {want}, which does not exist"),
        format!("create {want} with `[[rules]]` entries, or choose another model"),
    );
}

/// What an instructions template sees as `agent`.
pub(crate) struct TemplateAgent<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: Option<&'a str>,
    pub(crate) model: Option<&'a str>,
}

/// Composed instructions and the files they came from.
#[derive(Default)]
pub(crate) struct Instructions {
    pub(crate) text: String,
    pub(crate) files: Vec<PathBuf>,
}

/// The three instruction forms, in the order they are preferred when
/// several exist (which is itself an error).
const FORMS: [&str; 3] = ["instructions.md", "instructions", "instructions.md.j2"];

/// True for the names the instruction loader owns in an agent folder.
pub(crate) fn is_instructions_entry(name: &str) -> bool {
    FORMS.contains(&name)
}

/// Loads the instructions of the agent in `dir` (exactly one form required).
pub(crate) fn load_instructions(
    d: &mut Diags,
    dir: &Path,
    agent: &TemplateAgent<'_>,
) -> Instructions {
    let present: Vec<&str> = FORMS
        .iter()
        .copied()
        .filter(|form| path_kind(&dir.join(form)).is_some())
        .collect();
    let Some(&form) = present.first() else {
        d.error(
            &dir.join("instructions.md"),
            "missing instructions",
            "create instructions.md (or an instructions/ folder of .md files, or an instructions.md.j2 template)",
        );
        return Instructions::default();
    };
    if present.len() > 1 {
        let list = present.join(", ");
        d.error(
            dir,
            format!("instructions are defined in more than one form ({list}); only {form} is used"),
            "keep exactly one of instructions.md, instructions/ and instructions.md.j2",
        );
    }
    let path = dir.join(form);
    let out = match form {
        "instructions" => load_dir(d, &path),
        "instructions.md.j2" => match read_text(d, &path) {
            Some(src) => match render(&src, agent) {
                Ok(text) => Instructions {
                    text,
                    files: vec![path.clone()],
                },
                Err(e) => {
                    d.error(
                        &path,
                        format!("instructions template failed to render: {e}"),
                        "fix the template; only `env` (the process environment) and `agent` (name, description, model) are defined, and undefined variables are errors",
                    );
                    Instructions::default()
                }
            },
            None => Instructions::default(),
        },
        _ => match read_text(d, &path) {
            Some(text) => Instructions {
                text,
                files: vec![path.clone()],
            },
            None => Instructions::default(),
        },
    };
    if out.text.trim().is_empty() && !out.files.is_empty() {
        d.warn(
            &path,
            "instructions are empty",
            "write the agent's identity, its tool-choice rules and its output contract",
        );
    }
    out
}

/// Composes `instructions/*.md` in filename order, joined by a blank line.
fn load_dir(d: &mut Diags, dir: &Path) -> Instructions {
    if path_kind(dir) != Some(Kind::Dir) {
        d.error(
            dir,
            "expected a directory of .md files",
            "make instructions/ a folder of .md files, or rename it to instructions.md",
        );
        return Instructions::default();
    }
    let mut parts = Vec::new();
    let mut files = Vec::new();
    for entry in list_dir(d, dir) {
        match entry.kind {
            Kind::File if entry.name.ends_with(".md") => {
                if let Some(text) = read_text(d, &entry.path) {
                    parts.push(text.trim_end_matches(['\n', '\r']).to_owned());
                    files.push(entry.path);
                }
            }
            Kind::Other => report_other(d, &entry),
            Kind::File | Kind::Dir => d.warn(
                &entry.path,
                "stray entry in instructions/: only .md files are composed",
                "rename it to end in .md, or move it out of instructions/",
            ),
        }
    }
    if files.is_empty() {
        d.warn(
            dir,
            "instructions are empty: instructions/ holds no .md files",
            "add at least one .md file to instructions/",
        );
    }
    Instructions {
        text: parts.join("\n\n"),
        files,
    }
}

/// Renders an instructions template with `env` and `agent`.
fn render(src: &str, agent: &TemplateAgent<'_>) -> Result<String, minijinja::Error> {
    let env_vars: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let ctx = json!({
        "env": env_vars,
        "agent": {
            "name": agent.name,
            "description": agent.description,
            "model": agent.model,
        },
    });
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.render_str(src, minijinja::Value::from(Serde(&ctx)))
}
