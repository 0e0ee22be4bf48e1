//! `bdk init`: scaffolds an agent project from a template into a
//! directory: `weather` (the offline weather example, the default) or
//! `empty` (the smallest agent that runs), with `--var key=value` setting
//! `name`, `description` or `model` in its `agent/agent.toml`.

use std::path::Path;

use anyhow::{Context, Result, bail};

include!(concat!(env!("OUT_DIR"), "/example_files.rs"));

/// The templates `--template` accepts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Template {
    /// The offline weather example: tools, a skill, a subagent, hooks,
    /// evals and the scripted model's rules.
    #[default]
    Weather,
    /// The smallest agent that runs: instructions and the scripted model.
    Empty,
}

/// The keys `--var` may set in `agent/agent.toml`.
const VARS: &[&str] = &["name", "description", "model"];

/// The `empty` template.
const EMPTY_FILES: &[(&str, &[u8])] = &[
    (
        "agent/agent.toml",
        b"# The agent's runtime configuration; every key is optional (docs/project-layout.md).\n\
# `scripted` answers from agent/scripted.toml, offline and without a key; set\n\
# `model` to a provider's model (for example \"openai/gpt-4o-mini\") for a real one.\n\
name = \"agent\"\nmodel = \"scripted\"\n",
    ),
    (
        "agent/instructions.md",
        b"You are a helpful assistant. Answer briefly.\n",
    ),
    (
        "agent/scripted.toml",
        b"# Rules for the offline `scripted` model (see the weather example's for the format).\n\
[[rules]]\nreply = \"Hello! I am a new agent: edit agent/instructions.md and add tools under agent/tools/.\"\n",
    ),
];

/// Writes the template into `dir`, which must be absent or empty, then
/// applies `vars` (`key=value`). Exit 2, with nothing written, for a
/// directory that is not empty or a bad `--var`.
pub(crate) fn run(dir: &Path, template: Template, vars: &[String]) -> Result<u8> {
    let mut settings = Vec::new();
    for var in vars {
        let Some((key, value)) = var.split_once('=') else {
            errln!("error: --var `{var}` is not key=value");
            return Ok(crate::support::UNUSABLE);
        };
        let key = key.trim();
        if !VARS.contains(&key) {
            errln!(
                "error: --var `{key}` is not a setting bdk init fills in; use one of {}",
                VARS.join(", ")
            );
            return Ok(crate::support::UNUSABLE);
        }
        settings.push((key.to_owned(), value.to_owned()));
    }
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if entries.next().is_some() {
            // A usage error (exit 2), like any other unusable argument.
            errln!(
                "error: {} is not empty; pass a new directory, e.g. `bdk init my-agent`",
                dir.display()
            );
            return Ok(crate::support::UNUSABLE);
        }
    }
    let files = match template {
        Template::Weather => EXAMPLE_FILES,
        Template::Empty => EMPTY_FILES,
    };
    if files.is_empty() {
        bail!("this build carries no example files");
    }
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let bytes = if *rel == "agent/agent.toml" && !settings.is_empty() {
            set_keys(&String::from_utf8_lossy(bytes), &settings).into_bytes()
        } else {
            bytes.to_vec()
        };
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        #[cfg(unix)]
        if rel.ends_with(".py") || rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    outln!(
        "created an agent project in {} ({} files)",
        dir.display(),
        files.len()
    );
    let ask = match template {
        Template::Weather => "What's the weather in Paris?",
        Template::Empty => "Hello",
    };
    outln!(
        "next: bdk validate {0} && bdk run --dir {0} --message \"{ask}\"",
        dir.display()
    );
    Ok(0)
}

/// `toml` with each top-level `key = ...` line of `settings` replaced (the
/// comments and the rest kept), and keys it lacks added after the last
/// top-level key.
fn set_keys(toml: &str, settings: &[(String, String)]) -> String {
    let mut lines: Vec<String> = toml.lines().map(str::to_owned).collect();
    // Top-level keys end at the first table header.
    let top_end = lines
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .unwrap_or(lines.len());
    let mut insert_at = lines[..top_end]
        .iter()
        .rposition(|l| l.contains('=') && !l.trim_start().starts_with('#'))
        .map_or(top_end, |i| i + 1);
    for (key, value) in settings {
        let line = format!("{key} = {}", quote(value));
        let existing = lines[..top_end].iter().position(|l| {
            l.split_once('=')
                .is_some_and(|(k, _)| k.trim() == key && !l.trim_start().starts_with('#'))
        });
        match existing {
            Some(i) => lines[i] = line,
            None => {
                lines.insert(insert_at, line);
                insert_at += 1;
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// A TOML basic string.
fn quote(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_replaced_or_added_above_the_first_table() {
        let toml =
            "# c\nname = \"weather\"\nmodel = \"scripted\"\n\n[builtin_tools]\nname = \"x\"\n";
        let out = set_keys(
            toml,
            &[
                ("name".into(), "help \"desk\"".into()),
                ("description".into(), "a\nb".into()),
            ],
        );
        assert_eq!(
            out,
            "# c\nname = \"help \\\"desk\\\"\"\nmodel = \"scripted\"\ndescription = \"a\\nb\"\n\n[builtin_tools]\nname = \"x\"\n"
        );
    }
}
