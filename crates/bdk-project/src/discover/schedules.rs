//! `schedules/**`: Markdown prompts with `cron` frontmatter, and TOML
//! schedules that hand a message into a channel, call a server tool with a
//! fixed input, or run a handler program.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::frontmatter;
use super::handler::{HANDLER_KEYS, referenced};
use super::util::{
    Diags, Fields, Kind, list_dir, read_text, read_toml, report_other, toml_to_json,
};
use crate::builtin;
use crate::cron::CronExpr;
#[cfg(feature = "validate")]
use crate::schema::InputValidator;
use crate::tool::{Execution, ToolSpec};
use crate::{AgentConfig, HandlerSpec, Schedule, ScheduleAction, ToolManifest};

/// The most schedules one agent may declare.
const MAX_SCHEDULES: usize = 64;
const TOML_KEYS: &[&str] = &[
    "cron",
    "channel",
    "message",
    "continuation_key",
    "tool",
    "input",
    "handler",
    "env",
    "timeout_secs",
    "max_output_bytes",
    "sandbox",
];

/// What a TOML schedule may target.
pub(crate) struct Targets {
    /// The discovered channel names (every manifest file, even a broken one).
    pub(crate) channels: BTreeSet<String>,
    /// The tools known from the folder: manifest tools and the enabled
    /// built-ins, by name.
    pub(crate) tools: BTreeMap<String, ToolSpec>,
    /// Whether an MCP connection advertises its tools, which are only known
    /// once it is connected.
    pub(crate) mcp_advertises: bool,
}

/// The tools discovery can see: the enabled built-ins of the runtime, then
/// the manifest tools (which replace a built-in of the same name, as in the
/// host). The reminder tools are not among them: a host extension adds
/// them, and they need a chat session, which a tool schedule's call has not.
pub(crate) fn known_tools(
    config: &AgentConfig,
    manifests: &[ToolManifest],
    has_skills: bool,
) -> BTreeMap<String, ToolSpec> {
    let b = &config.builtin_tools;
    let mut builtins = Vec::new();
    if b.workspace {
        builtins.extend(builtin::workspace_specs());
    }
    if b.shell {
        builtins.push(builtin::shell_spec());
    }
    if b.artifacts {
        builtins.push(builtin::tag_artifact_spec());
    }
    if has_skills {
        builtins.push(builtin::load_skill_spec());
    }
    let mut tools: BTreeMap<String, ToolSpec> = builtins
        .into_iter()
        .map(|spec| (spec.name.clone(), spec))
        .collect();
    for m in manifests {
        tools.insert(m.spec.name.clone(), m.spec.clone());
    }
    tools
}

/// True for 1-100 characters of `[A-Za-z0-9._/-]` starting with a letter or digit.
fn is_schedule_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && name.len() <= 100
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
}

/// Discovers schedules under `dir`, sorted by name. TOML schedules must
/// target one of `targets`.
pub(crate) fn discover(d: &mut Diags, dir: &Path, targets: &Targets) -> Vec<Schedule> {
    let mut files = Vec::new();
    let mut strays = Vec::new();
    walk(d, dir, "", &mut files, &mut strays);
    let mut sources: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut out: BTreeMap<String, Schedule> = BTreeMap::new();
    for (name, path, is_md) in files {
        sources.entry(name.clone()).or_default().push(path.clone());
        if !is_schedule_name(&name) {
            d.error(
                &path,
                format!("schedule name `{name}` is invalid"),
                "use 1-100 characters of letters, digits, `.`, `_`, `/` or `-`, starting with a letter or digit",
            );
            continue;
        }
        let schedule = if is_md {
            markdown(d, &path, name.clone())
        } else {
            handler(d, &path, name.clone(), targets)
        };
        if let Some(s) = schedule {
            out.entry(name).or_insert(s);
        }
    }
    for (name, paths) in &sources {
        if paths.len() > 1 {
            let list = paths
                .iter()
                .map(|p| d.rel(p))
                .collect::<Vec<_>>()
                .join(", ");
            d.error(
                dir,
                format!("schedule `{name}` is defined more than once ({list})"),
                "keep one file per schedule name: either <name>.md or <name>.toml",
            );
            out.remove(name);
        }
    }
    // A file a handler runs is not a stray.
    let used: BTreeSet<PathBuf> = out
        .values()
        .filter_map(|s| match &s.action {
            ScheduleAction::Handler { handler } => Some(handler),
            _ => None,
        })
        .filter_map(|h| match h {
            HandlerSpec::Program(command) => Some((h, &command.dir)),
            _ => None,
        })
        .flat_map(|(h, dir)| referenced(h).map(|r| dir.join(r)))
        .collect();
    for stray in strays.iter().filter(|p| !used.contains(*p)) {
        d.warn(
            stray,
            "stray file in schedules/: schedules are <name>.md or <name>.toml",
            "rename it to .md (a prompt with `cron` frontmatter) or .toml (a channel hand-off, a tool call or a handler), reference it from a schedule's `handler`, or remove it",
        );
    }
    if sources.len() > MAX_SCHEDULES {
        d.error(
            dir,
            format!(
                "too many schedules ({}; the limit is {MAX_SCHEDULES})",
                sources.len()
            ),
            "merge schedules or remove some",
        );
    }
    out.into_values().collect()
}

/// Collects `(name, path, is_markdown)` for every schedule file, and the
/// other files in `strays` (reported unless a handler runs them).
fn walk(
    d: &mut Diags,
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, PathBuf, bool)>,
    strays: &mut Vec<PathBuf>,
) {
    for entry in list_dir(d, dir) {
        match (entry.kind, entry.stem_ext()) {
            // Following a linked folder could loop forever (a link to a
            // parent), so schedule folders must be real directories.
            (Kind::Dir, _) if entry.symlink => d.warn(
                &entry.path,
                "symlinked folder in schedules/ is skipped",
                "replace the link with a real folder",
            ),
            (Kind::Dir, _) => walk(
                d,
                &entry.path,
                &format!("{prefix}{}/", entry.name),
                out,
                strays,
            ),
            (Kind::File, (stem, Some(ext @ ("md" | "toml")))) => {
                out.push((format!("{prefix}{stem}"), entry.path.clone(), ext == "md"));
            }
            (Kind::File, _) => strays.push(entry.path.clone()),
            (Kind::Other, _) => report_other(d, &entry),
        }
    }
}

fn check_cron(d: &mut Diags, path: &Path, cron: &str) -> bool {
    match CronExpr::parse(cron) {
        Ok(_) => true,
        Err(e) => {
            d.error(
                path,
                format!("invalid cron `{cron}`: {}", e.reason()),
                "write a 5-field UTC cron expression such as \"0 9 * * 1-5\"",
            );
            false
        }
    }
}

/// `<name>.md`: `cron` frontmatter and the prompt as the body.
fn markdown(d: &mut Diags, path: &Path, name: String) -> Option<Schedule> {
    let text = read_text(d, path)?;
    let fm = match frontmatter::parse(&text) {
        Ok(fm) => fm,
        Err(e) => {
            d.error(path, e, "fix the frontmatter between the `---` lines");
            return None;
        }
    };
    let cron = match fm.data.get("cron") {
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => {
            d.error(
                path,
                "frontmatter `cron` must be a string",
                "quote the expression: `cron: \"0 9 * * 1-5\"`",
            );
            None
        }
        None => {
            d.error(
                path,
                "missing `cron` frontmatter",
                "start the file with `---`, `cron: \"0 9 * * 1-5\"`, `---`",
            );
            None
        }
    };
    let cron_ok = cron.as_deref().is_some_and(|c| check_cron(d, path, c));
    let prompt = fm.body.trim().to_owned();
    if prompt.is_empty() {
        d.error(
            path,
            "schedule has no prompt: the body after the frontmatter is empty",
            "write the task the scheduled session should do below the frontmatter",
        );
        return None;
    }
    if !cron_ok {
        return None;
    }
    Some(Schedule {
        name,
        path: path.to_owned(),
        cron: cron?,
        action: ScheduleAction::Prompt { prompt },
    })
}

/// `<name>.toml`: `cron` and exactly one target: `channel` with `message`
/// (and optional `continuation_key`), `tool` with an optional `[input]`, or
/// `handler` (a program).
fn handler(d: &mut Diags, path: &Path, name: String, targets: &Targets) -> Option<Schedule> {
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, TOML_KEYS);
    let errors_before = d.error_count();
    if !f.has("cron") {
        d.error(path, "missing `cron`", "add `cron = \"...\"`");
    }
    let cron = f.nonempty_string(d, "cron");
    if let Some(c) = &cron {
        check_cron(d, path, c);
    }
    let present: Vec<&str> = ["channel", "tool", "handler"]
        .into_iter()
        .filter(|k| f.has(k))
        .collect();
    if !f.has("handler") {
        for key in HANDLER_KEYS.iter().skip(1).filter(|k| f.has(k)) {
            d.error(
                path,
                format!("`{key}` only applies to handler schedules"),
                format!("remove `{key}`, or run a program with `handler = [...]`"),
            );
        }
    }
    let action = match present.as_slice() {
        [] => {
            d.error(
                path,
                "schedule names none of `channel`, `tool` and `handler`",
                "add `channel = \"...\"` and `message = \"...\"`, `tool = \"...\"` with an `[input]` table, or `handler = [\"python3\", \"<name>.py\"]`",
            );
            None
        }
        ["channel"] => handoff(d, path, &f, targets),
        ["tool"] => tool_call(d, path, &f, targets),
        ["handler"] => program(d, path, &f),
        _ => {
            d.error(
                path,
                format!("schedule names {}", present.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" and ")),
                "keep one: `channel` + `message` hands a message into a channel, `tool` + `[input]` calls a tool, `handler` runs a program",
            );
            None
        }
    };
    if d.error_count() > errors_before {
        return None;
    }
    Some(Schedule {
        name,
        path: path.to_owned(),
        cron: cron?,
        action: action?,
    })
}

/// The `channel` form.
fn handoff(d: &mut Diags, path: &Path, f: &Fields, targets: &Targets) -> Option<ScheduleAction> {
    if f.has("input") {
        d.error(
            path,
            "`input` only applies to tool schedules",
            "remove `[input]`, or call a tool with `tool = \"...\"` instead of `channel`",
        );
    }
    if !f.has("message") {
        d.error(path, "missing `message`", "add `message = \"...\"`");
    }
    let channel = f.nonempty_string(d, "channel");
    if let Some(ch) = &channel
        && !targets.channels.contains(ch)
    {
        d.error(
            path,
            format!("channel `{ch}` does not exist"),
            format!("create channels/{ch}.toml or name an existing channel"),
        );
    }
    let message = f.nonempty_string(d, "message");
    let continuation_key = f.nonempty_string(d, "continuation_key");
    Some(ScheduleAction::Handoff {
        channel: channel?,
        message: message?,
        continuation_key,
    })
}

/// The `handler` form: a program run in the schedule file's folder.
fn program(d: &mut Diags, path: &Path, f: &Fields) -> Option<ScheduleAction> {
    for key in ["message", "continuation_key", "input"] {
        if f.has(key) {
            d.error(
                path,
                format!("`{key}` does not apply to handler schedules"),
                format!("remove `{key}`; the handler decides what to send or call"),
            );
        }
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let handler = super::handler::handler(d, f, dir)?;
    Some(ScheduleAction::Handler { handler })
}

/// The `tool` form: the tool must be one the host can call directly, and
/// the input must match its schema when discovery knows the tool.
fn tool_call(d: &mut Diags, path: &Path, f: &Fields, targets: &Targets) -> Option<ScheduleAction> {
    for key in ["message", "continuation_key"] {
        if f.has(key) {
            d.error(
                path,
                format!("`{key}` only applies to channel hand-offs"),
                format!("remove `{key}`; a tool schedule passes its `[input]` table to the tool"),
            );
        }
    }
    let tool = f.nonempty_string(d, "tool")?;
    let input = match f.table(d, "input") {
        Some(t) => toml_to_json(&toml::Value::Table(t.clone())),
        None if f.has("input") => return None,
        None => Value::Object(serde_json::Map::new()),
    };
    match targets.tools.get(&tool) {
        Some(spec) if spec.execution == Execution::Agent => {
            d.error(
                path,
                format!("tool `{tool}` runs in the agent's workspace and cannot be called by a schedule"),
                "name a server tool (`execution = \"server\"`)",
            );
        }
        Some(spec) if spec.needs_approval => {
            d.error(
                path,
                format!("tool `{tool}` needs approval, which a schedule cannot give when it fires"),
                "call a tool without `needs_approval`, or use a Markdown schedule so the model calls it in a session where a person approves it",
            );
        }
        #[cfg(feature = "validate")]
        Some(spec) => {
            // A broken schema is reported by the tool's own manifest.
            if let Ok(validator) = InputValidator::new(&spec.input_schema)
                && let Err(errors) = validator.validate(&input)
            {
                d.error(
                    path,
                    format!(
                        "`input` does not match the input schema of `{tool}`: {}",
                        errors.join("; ")
                    ),
                    "fix the `[input]` table to match the tool's input_schema",
                );
            }
        }
        // Without JSON Schema the input is checked when the schedule fires.
        #[cfg(not(feature = "validate"))]
        Some(_) => {}
        None if targets.mcp_advertises => d.warn(
            path,
            format!("tool `{tool}` is not a tool of this folder; it must come from an MCP connection that advertises its tools"),
            "check the name against the connection's tools (`bdk info` lists them once connected)",
        ),
        None => {
            let known = targets
                .tools
                .iter()
                .filter(|(_, s)| s.execution != Execution::Agent)
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            d.error(
                path,
                format!("unknown tool `{tool}`"),
                if known.is_empty() {
                    "add a tool under tools/ or name an existing one (this agent has no server tools)".to_owned()
                } else {
                    format!("name one of the agent's server tools: {known}")
                },
            );
        }
    }
    Some(ScheduleAction::Tool { tool, input })
}
