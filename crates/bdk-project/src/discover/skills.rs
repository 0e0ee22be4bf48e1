//! `skills/`: flat `<name>.md`, packaged `<name>/SKILL.md` with sibling
//! files, and generated `<name>.toml`. Each may declare `arguments`
//! (`skill_arguments.rs`) for clients that ask for it as an MCP prompt, and
//! a packaged or generated one `attachments` (`skill_attachments.rs`), the
//! bundled files that prompt carries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::frontmatter;
use super::skill_arguments;
use super::skill_attachments;
use super::util::{
    Diags, Fields, Kind, is_safe_relpath, is_slug, list_dir, read_bytes, read_text, read_toml,
    report_other, toml_to_json,
};
use crate::{Skill, SkillForm};

/// Largest sibling file a packaged skill may carry.
const MAX_SKILL_FILE_BYTES: u64 = 1024 * 1024;

const GENERATED_KEYS: &[&str] = &[
    "description",
    "markdown",
    "files",
    "arguments",
    "attachments",
];

/// Discovers the skills in `dir`, sorted by name.
pub(crate) fn discover(d: &mut Diags, dir: &Path) -> Vec<Skill> {
    let mut by_name: BTreeMap<String, Skill> = BTreeMap::new();
    // The source of every definition, to name both sides of a conflict.
    let mut sources: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in list_dir(d, dir) {
        let (stem, ext) = entry.stem_ext();
        let (name, form) = match (entry.kind, ext) {
            (Kind::Dir, _) => (entry.name.clone(), SkillForm::Packaged),
            (Kind::File, Some("md")) => (stem.to_owned(), SkillForm::Flat),
            (Kind::File, Some("toml")) => (stem.to_owned(), SkillForm::Generated),
            (Kind::File, _) => {
                d.warn(
                    &entry.path,
                    "stray file in skills/: skills are <name>.md, <name>/SKILL.md or <name>.toml",
                    "rename it to <name>.md, move it into a skill folder, or remove it",
                );
                continue;
            }
            (Kind::Other, _) => {
                report_other(d, &entry);
                continue;
            }
        };
        if !is_slug(&name, 64) {
            d.error(
                &entry.path,
                format!("skill name `{name}` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
            continue;
        }
        sources
            .entry(name.clone())
            .or_default()
            .push(entry.path.clone());
        let skill = match form {
            SkillForm::Flat => flat(d, &entry.path, name.clone()),
            SkillForm::Packaged => packaged(d, &entry.path, name.clone()),
            SkillForm::Generated => generated(d, &entry.path, name.clone()),
        };
        if let Some(skill) = skill {
            by_name.entry(name).or_insert(skill);
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
                format!("skill `{name}` is defined more than once ({list})"),
                "keep exactly one form of the skill: <name>.md, <name>/SKILL.md or <name>.toml",
            );
            by_name.remove(name);
        }
    }
    by_name.into_values().collect()
}

/// A non-empty string `description` from frontmatter, or a diagnostic.
fn fm_description(d: &mut Diags, path: &Path, data: &Map<String, Value>) -> Option<String> {
    match data.get("description")? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::String(_) => {
            d.error(
                path,
                "frontmatter `description` is empty",
                "write a routing rule: when should the model load this skill?",
            );
            None
        }
        _ => {
            d.error(
                path,
                "frontmatter `description` must be a string",
                "write `description: Use when ...` as plain text",
            );
            None
        }
    }
}

/// `skills/<name>.md`.
fn flat(d: &mut Diags, path: &Path, name: String) -> Option<Skill> {
    let text = read_text(d, path)?;
    let fm = match frontmatter::parse(&text) {
        Ok(fm) => fm,
        Err(e) => {
            d.error(path, e, "fix the frontmatter between the `---` lines");
            return None;
        }
    };
    let description = match fm.data.contains_key("description") {
        true => fm_description(d, path, &fm.data)?,
        false => {
            let first = fm
                .body
                .lines()
                .map(|l| l.trim().trim_start_matches('#').trim())
                .find(|l| !l.is_empty());
            match first {
                Some(line) => line.to_owned(),
                None => {
                    d.error(
                        path,
                        "skill has no description: no `description` frontmatter and an empty body",
                        "add `description: Use when ...` frontmatter and the skill's steps",
                    );
                    return None;
                }
            }
        }
    };
    let arguments = skill_arguments::read(d, path, fm.data.get("arguments"))?;
    let attachments = skill_attachments::read(
        d,
        path,
        SkillForm::Flat,
        fm.data.get("attachments"),
        &BTreeMap::new(),
    )?;
    Some(Skill {
        name,
        description,
        body: fm.body,
        form: SkillForm::Flat,
        path: path.to_owned(),
        files: BTreeMap::new(),
        arguments,
        attachments,
    })
}

/// `skills/<name>/SKILL.md` and its sibling files.
fn packaged(d: &mut Diags, dir: &Path, name: String) -> Option<Skill> {
    let skill_md = dir.join("SKILL.md");
    if super::util::path_kind(&skill_md).is_none() {
        d.error(
            dir,
            "skill folder has no SKILL.md",
            "add SKILL.md with `description` frontmatter, or remove the folder",
        );
        return None;
    }
    let errors_before = d.error_count();
    let mut files = BTreeMap::new();
    collect_files(d, dir, "", &mut files);
    let text = read_text(d, &skill_md)?;
    let fm = match frontmatter::parse(&text) {
        Ok(fm) => fm,
        Err(e) => {
            d.error(&skill_md, e, "fix the frontmatter between the `---` lines");
            return None;
        }
    };
    let description = if fm.data.contains_key("description") {
        fm_description(d, &skill_md, &fm.data)?
    } else {
        d.error(
            &skill_md,
            "missing `description` frontmatter (required for packaged skills)",
            "start SKILL.md with `---`, `description: Use when ...`, `---`",
        );
        return None;
    };
    let arguments = skill_arguments::read(d, &skill_md, fm.data.get("arguments"));
    let attachments = skill_attachments::read(
        d,
        &skill_md,
        SkillForm::Packaged,
        fm.data.get("attachments"),
        &files,
    );
    if d.error_count() > errors_before {
        return None;
    }
    Some(Skill {
        name,
        description,
        body: fm.body,
        form: SkillForm::Packaged,
        path: skill_md,
        files,
        arguments: arguments?,
        attachments: attachments?,
    })
}

/// Reads every file under a packaged skill except its top-level SKILL.md.
/// Symlinks are skipped: following them could package files from anywhere.
fn collect_files(d: &mut Diags, dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in list_dir(d, dir) {
        let rel = format!("{prefix}{}", entry.name);
        if rel == "SKILL.md" {
            continue;
        }
        if entry.symlink {
            d.warn(
                &entry.path,
                "symlink in a skill folder is skipped",
                "replace the symlink with a copy of the file",
            );
            continue;
        }
        match entry.kind {
            Kind::Dir => collect_files(d, &entry.path, &format!("{rel}/"), out),
            Kind::File => {
                let size = std::fs::metadata(&entry.path).map_or(0, |m| m.len());
                if size > MAX_SKILL_FILE_BYTES {
                    d.error(
                        &entry.path,
                        format!("skill file is too large ({size} bytes; the limit is 1 MiB)"),
                        "shrink the file or move it out of the skill folder",
                    );
                    continue;
                }
                if let Some(bytes) = read_bytes(d, &entry.path) {
                    out.insert(rel, bytes);
                }
            }
            Kind::Other => report_other(d, &entry),
        }
    }
}

/// `skills/<name>.toml`: `description`, `markdown`, and inline `files`.
fn generated(d: &mut Diags, path: &Path, name: String) -> Option<Skill> {
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, GENERATED_KEYS);
    let errors_before = d.error_count();
    for key in ["description", "markdown"] {
        if !f.has(key) {
            d.error(
                path,
                format!("missing `{key}`"),
                format!("add `{key} = \"...\"`"),
            );
        }
    }
    let description = f.nonempty_string(d, "description");
    let markdown = f.string(d, "markdown");
    let mut files = BTreeMap::new();
    if let Some(map) = f.string_map(d, "files") {
        for (rel, content) in map {
            if !is_safe_relpath(&rel) || rel == "SKILL.md" {
                d.error(
                    path,
                    format!("`files` path `{rel}` must be a relative path inside the skill folder"),
                    "use paths like `references/notes.md` (no `..`, not absolute, not SKILL.md)",
                );
                continue;
            }
            files.insert(rel, content.into_bytes());
        }
    }
    let arguments =
        skill_arguments::read(d, path, table.get("arguments").map(toml_to_json).as_ref());
    let attachments = skill_attachments::read(
        d,
        path,
        SkillForm::Generated,
        table.get("attachments").map(toml_to_json).as_ref(),
        &files,
    );
    if d.error_count() > errors_before {
        return None;
    }
    Some(Skill {
        name,
        description: description?.trim().to_owned(),
        body: markdown?,
        form: SkillForm::Generated,
        path: path.to_owned(),
        files,
        arguments: arguments?,
        attachments: attachments?,
    })
}
