//! `schedules/**`: Markdown prompts with `cron` frontmatter and TOML
//! hand-offs into a channel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::frontmatter;
use super::util::{Diags, Fields, Kind, list_dir, read_text, read_toml, report_other};
use crate::project::cron::{next_fire_exists, validate_cron};
use crate::project::{Schedule, ScheduleAction};

/// The most schedules one agent may declare.
const MAX_SCHEDULES: usize = 64;
const TOML_KEYS: &[&str] = &["cron", "channel", "message", "continuation_key"];

/// True for 1-100 characters of `[A-Za-z0-9._/-]` starting with a letter or digit.
fn is_schedule_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && name.len() <= 100
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
}

/// Discovers schedules under `dir`, sorted by name. `channels` are the
/// discovered channel names, which hand-off schedules must target.
pub(crate) fn discover(d: &mut Diags, dir: &Path, channels: &BTreeSet<String>) -> Vec<Schedule> {
    let mut files = Vec::new();
    walk(d, dir, "", &mut files);
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
            handoff(d, &path, name.clone(), channels)
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

/// Collects `(name, path, is_markdown)` for every schedule file; reports strays.
fn walk(d: &mut Diags, dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf, bool)>) {
    for entry in list_dir(d, dir) {
        match (entry.kind, entry.stem_ext()) {
            // Following a linked folder could loop forever (a link to a
            // parent), so schedule folders must be real directories.
            (Kind::Dir, _) if entry.symlink => d.warn(
                &entry.path,
                "symlinked folder in schedules/ is skipped",
                "replace the link with a real folder",
            ),
            (Kind::Dir, _) => walk(d, &entry.path, &format!("{prefix}{}/", entry.name), out),
            (Kind::File, (stem, Some(ext @ ("md" | "toml")))) => {
                out.push((format!("{prefix}{stem}"), entry.path.clone(), ext == "md"));
            }
            (Kind::File, _) => d.warn(
                &entry.path,
                "stray file in schedules/: schedules are <name>.md or <name>.toml",
                "rename it to .md (a prompt with `cron` frontmatter) or .toml (a channel hand-off), or remove it",
            ),
            (Kind::Other, _) => report_other(d, &entry),
        }
    }
}

fn check_cron(d: &mut Diags, path: &Path, cron: &str) -> bool {
    match validate_cron(cron).and_then(|()| next_fire_exists(cron)) {
        Ok(()) => true,
        Err(e) => {
            d.error(
                path,
                format!("invalid cron `{cron}`: {e}"),
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

/// `<name>.toml`: `cron`, `channel`, `message`, optional `continuation_key`.
fn handoff(
    d: &mut Diags,
    path: &Path,
    name: String,
    channels: &BTreeSet<String>,
) -> Option<Schedule> {
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, TOML_KEYS);
    let errors_before = d.error_count();
    for key in ["cron", "channel", "message"] {
        if !f.has(key) {
            d.error(
                path,
                format!("missing `{key}`"),
                format!("add `{key} = \"...\"`"),
            );
        }
    }
    let cron = f.nonempty_string(d, "cron");
    if let Some(c) = &cron {
        check_cron(d, path, c);
    }
    let channel = f.nonempty_string(d, "channel");
    if let Some(ch) = &channel
        && !channels.contains(ch)
    {
        d.error(
            path,
            format!("channel `{ch}` does not exist"),
            format!("create channels/{ch}.toml or name an existing channel"),
        );
    }
    let message = f.nonempty_string(d, "message");
    let continuation_key = f.nonempty_string(d, "continuation_key");
    if d.error_count() > errors_before {
        return None;
    }
    Some(Schedule {
        name,
        path: path.to_owned(),
        cron: cron?,
        action: ScheduleAction::Handoff {
            channel: channel?,
            message: message?,
            continuation_key,
        },
    })
}
