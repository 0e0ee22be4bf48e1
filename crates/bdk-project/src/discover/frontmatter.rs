//! YAML frontmatter of Markdown files (skills, schedules).
//!
//! We split on the `---` lines ourselves rather than relying on a
//! frontmatter crate: the rule is simple (the file's first line is `---`, the
//! block ends at the next `---` line) and owning it keeps error messages ours.

use serde_json::{Map, Value};

/// A Markdown file split into its frontmatter keys and its body.
#[derive(Debug, PartialEq)]
pub(crate) struct Frontmatter {
    /// The frontmatter keys (empty when there is no frontmatter).
    pub(crate) data: Map<String, Value>,
    /// Everything after the closing `---` line (or the whole text).
    pub(crate) body: String,
}

/// Splits and parses `text`. The error is a message fragment for a diagnostic.
pub(crate) fn parse(text: &str) -> Result<Frontmatter, String> {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return Ok(Frontmatter {
            data: Map::new(),
            body: String::new(),
        });
    };
    if first.trim_end() != "---" {
        return Ok(Frontmatter {
            data: Map::new(),
            body: text.to_owned(),
        });
    }
    let mut yaml = String::new();
    let mut closed = false;
    let mut consumed = first.len();
    for line in lines.by_ref() {
        consumed += line.len();
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err("frontmatter opened with `---` is never closed".to_owned());
    }
    let body = text[consumed..].trim_start_matches(['\r', '\n']).to_owned();
    if yaml.trim().is_empty() {
        return Ok(Frontmatter {
            data: Map::new(),
            body,
        });
    }
    let value: Value =
        yaml_serde::from_str(&yaml).map_err(|e| format!("invalid YAML frontmatter: {e}"))?;
    match value {
        Value::Object(data) => Ok(Frontmatter { data, body }),
        Value::Null => Ok(Frontmatter {
            data: Map::new(),
            body,
        }),
        _ => Err("frontmatter must be a mapping of `key: value` lines".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_frontmatter_keeps_the_whole_text() {
        let fm = parse("# Title\nbody\n").unwrap();
        assert!(fm.data.is_empty());
        assert_eq!(fm.body, "# Title\nbody\n");
    }

    #[test]
    fn splits_keys_and_body() {
        let fm = parse("---\ndescription: Use it\ncron: \"0 9 * * 1-5\"\n---\n\nDo it.\n").unwrap();
        assert_eq!(fm.data["description"], "Use it");
        assert_eq!(fm.data["cron"], "0 9 * * 1-5");
        assert_eq!(fm.body, "Do it.\n");
    }

    #[test]
    fn crlf_and_empty_blocks() {
        let fm = parse("---\r\n---\r\nbody").unwrap();
        assert!(fm.data.is_empty());
        assert_eq!(fm.body, "body");
    }

    #[test]
    fn errors() {
        assert!(
            parse("---\ndescription: x\n")
                .unwrap_err()
                .contains("never closed")
        );
        assert!(
            parse("---\n: : [\n---\n")
                .unwrap_err()
                .contains("invalid YAML")
        );
        assert!(parse("---\n- a\n---\n").unwrap_err().contains("mapping"));
    }
}
