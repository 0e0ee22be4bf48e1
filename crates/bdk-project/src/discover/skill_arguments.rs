//! A skill's `arguments`: what an MCP client fills in when it asks for the
//! skill as a prompt. Written as frontmatter in Markdown skills and as an
//! array of tables in generated ones; both arrive here as JSON.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value};

use super::util::{Diags, is_slug};
use crate::SkillArgument;

/// More arguments than a person fills in by hand is a mistake.
const MAX_ARGUMENTS: usize = 32;
/// MCP completion answers at most 100 values.
const MAX_VALUES: usize = 100;

const ARGUMENT_KEYS: &[&str] = &["name", "description", "required", "values"];

const SHAPE_FIX: &str = "write `arguments:` as a list of mappings, e.g. `- name: pr`, `description: The pull request number`, `required: true`";

/// Reads `arguments` (absent is no arguments). Every problem is an error
/// naming the argument; `None` when there was one.
pub(crate) fn read(
    d: &mut Diags,
    path: &Path,
    value: Option<&Value>,
) -> Option<Vec<SkillArgument>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    let Value::Array(items) = value else {
        d.error(
            path,
            format!("`arguments` must be a list, found {}", kind(value)),
            SHAPE_FIX,
        );
        return None;
    };
    let errors_before = d.error_count();
    if items.len() > MAX_ARGUMENTS {
        d.error(
            path,
            format!(
                "a skill takes at most {MAX_ARGUMENTS} arguments, found {}",
                items.len()
            ),
            "keep the arguments a person fills in; put the rest in the skill's text",
        );
        return None;
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            d.error(
                path,
                format!("`arguments[{i}]` must be a mapping, found {}", kind(item)),
                SHAPE_FIX,
            );
            continue;
        };
        let Some(arg) = argument(d, path, i, map) else {
            continue;
        };
        if !seen.insert(arg.name.clone()) {
            d.error(
                path,
                format!("argument `{}` is declared more than once", arg.name),
                "keep one entry per argument name",
            );
            continue;
        }
        out.push(arg);
    }
    (d.error_count() == errors_before).then_some(out)
}

/// One entry of the list, or `None` after reporting what is wrong with it.
fn argument(
    d: &mut Diags,
    path: &Path,
    i: usize,
    map: &Map<String, Value>,
) -> Option<SkillArgument> {
    let errors_before = d.error_count();
    for key in map.keys() {
        if !ARGUMENT_KEYS.contains(&key.as_str()) {
            d.error(
                path,
                format!(
                    "unknown key `{key}` in `arguments[{i}]` (known keys: {})",
                    ARGUMENT_KEYS.join(", ")
                ),
                format!("remove `{key}` or correct its spelling"),
            );
        }
    }
    let name = match map.get("name") {
        Some(Value::String(name)) if is_slug(name, 64) => Some(name.clone()),
        Some(Value::String(name)) => {
            d.error(
                path,
                format!("argument name `{name}` in `arguments[{i}]` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
            None
        }
        Some(other) => {
            d.error(
                path,
                format!(
                    "`arguments[{i}].name` must be a string, found {}",
                    kind(other)
                ),
                "write `name: pr`",
            );
            None
        }
        None => {
            d.error(
                path,
                format!("`arguments[{i}]` has no `name`"),
                "give every argument a `name`",
            );
            None
        }
    };
    let label = name.clone().unwrap_or_else(|| format!("arguments[{i}]"));
    let description = match map.get("description") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Some(Value::String(_)) => None,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`description` of argument `{label}` must be a string, found {}",
                    kind(other)
                ),
                "write `description: What to fill in`",
            );
            None
        }
    };
    let required = match map.get("required") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`required` of argument `{label}` must be true or false, found {}",
                    kind(other)
                ),
                "write `required: true` or leave it out",
            );
            false
        }
    };
    let values = match map.get("values") {
        None => Vec::new(),
        Some(Value::Array(values)) if values.len() > MAX_VALUES => {
            d.error(
                path,
                format!(
                    "argument `{label}` suggests {} values; completion offers at most {MAX_VALUES}",
                    values.len()
                ),
                "keep the most useful values",
            );
            Vec::new()
        }
        Some(Value::Array(values)) => {
            let strings: Option<Vec<String>> = values
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect();
            strings.unwrap_or_else(|| {
                d.error(
                    path,
                    format!("`values` of argument `{label}` must be a list of strings"),
                    "quote each value: `values: [\"low\", \"high\"]`",
                );
                Vec::new()
            })
        }
        Some(other) => {
            d.error(
                path,
                format!(
                    "`values` of argument `{label}` must be a list of strings, found {}",
                    kind(other)
                ),
                "write `values: [\"low\", \"high\"]`",
            );
            Vec::new()
        }
    };
    if d.error_count() > errors_before {
        return None;
    }
    Some(SkillArgument {
        name: name?,
        description,
        required,
        values,
    })
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
