//! A skill's `attachments`: files bundled with the skill that an MCP prompt
//! of it carries after its text (images as image content, other files as
//! embedded resources). Written as frontmatter in packaged skills and as a
//! key of generated ones; both arrive here as JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::util::{Diags, is_safe_relpath};
use crate::SkillForm;

/// More attachments than this is not a prompt a person reads.
pub(crate) const MAX_ATTACHMENTS: usize = 16;
/// The attachments of one skill together, before base64: a prompt stays
/// a size a client can show.
pub(crate) const MAX_ATTACHMENT_BYTES: usize = 4 * 1024 * 1024;

const SHAPE_FIX: &str = "write `attachments:` as a list of paths relative to the skill folder, e.g. `attachments: [diagram.png, notes.md]`";

/// Reads `attachments` (absent is none): each a path of one of the skill's
/// bundled `files`. Every problem is an error; `None` when there was one.
pub(crate) fn read(
    d: &mut Diags,
    path: &Path,
    form: SkillForm,
    value: Option<&Value>,
    files: &BTreeMap<String, Vec<u8>>,
) -> Option<Vec<String>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    if form == SkillForm::Flat {
        d.error(
            path,
            "`attachments` needs a packaged skill: a flat skill has no folder of its own to bundle files in",
            "move the skill to skills/<name>/SKILL.md and put the attached files beside it",
        );
        return None;
    }
    let Value::Array(items) = value else {
        d.error(path, "`attachments` must be a list of paths", SHAPE_FIX);
        return None;
    };
    if items.len() > MAX_ATTACHMENTS {
        d.error(
            path,
            format!(
                "a skill takes at most {MAX_ATTACHMENTS} attachments, found {}",
                items.len()
            ),
            "attach the files a person needs with the prompt; the model reads the rest from the skill folder",
        );
        return None;
    }
    let errors_before = d.error_count();
    let mut seen = BTreeSet::new();
    let mut total = 0usize;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::String(rel) = item else {
            d.error(
                path,
                format!("`attachments[{i}]` must be a path, found {}", kind(item)),
                SHAPE_FIX,
            );
            continue;
        };
        let shown: String = rel.chars().take(120).collect();
        if !is_safe_relpath(rel) {
            d.error(
                path,
                format!("attachment `{shown}` must be a relative path inside the skill folder"),
                "use paths like `diagrams/flow.png` (no `..`, not absolute)",
            );
            continue;
        }
        let Some(bytes) = files.get(rel.as_str()) else {
            let fix = match form {
                SkillForm::Generated => "add the file to `files`, or correct the path",
                _ => "put the file in the skill folder (not a symlink), or correct the path",
            };
            d.error(
                path,
                format!("attachment `{shown}` is not a file of the skill"),
                fix,
            );
            continue;
        };
        if !seen.insert(rel.clone()) {
            d.error(
                path,
                format!("attachment `{shown}` is listed more than once"),
                "list each file once",
            );
            continue;
        }
        total += bytes.len();
        out.push(rel.clone());
    }
    if total > MAX_ATTACHMENT_BYTES {
        d.error(
            path,
            format!(
                "the attachments add up to {total} bytes; a prompt carries at most {} MiB",
                MAX_ATTACHMENT_BYTES / (1024 * 1024)
            ),
            "attach fewer or smaller files",
        );
    }
    (d.error_count() == errors_before).then_some(out)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
