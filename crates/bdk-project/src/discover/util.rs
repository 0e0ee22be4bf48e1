//! Shared plumbing for discovery: the diagnostic collector, directory
//! listings that never fail the walk, file reads that report instead of
//! erroring, and typed access to TOML tables with one diagnostic per bad key.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;
use toml::Table;

use crate::{Diagnostic, SandboxMode, Severity, rel_path};

/// Collects diagnostics with paths relative to the project root.
pub(crate) struct Diags {
    root: PathBuf,
    list: Vec<Diagnostic>,
}

impl Diags {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            list: Vec::new(),
        }
    }

    /// The project-relative, `/`-separated form of `path`.
    pub(crate) fn rel(&self, path: &Path) -> String {
        if self.root.as_os_str().is_empty() || !path.starts_with(&self.root) {
            return path.to_string_lossy().into_owned();
        }
        let rel = rel_path(&self.root, path);
        if rel.is_empty() { ".".to_owned() } else { rel }
    }

    pub(crate) fn error(
        &mut self,
        path: &Path,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.push(Severity::Error, path, message.into(), fix.into());
    }

    pub(crate) fn warn(&mut self, path: &Path, message: impl Into<String>, fix: impl Into<String>) {
        self.push(Severity::Warning, path, message.into(), fix.into());
    }

    fn push(&mut self, severity: Severity, path: &Path, message: String, fix: String) {
        let file = self.rel(path);
        self.list.push(Diagnostic {
            severity,
            file,
            message,
            fix,
        });
    }

    /// How many errors have been reported so far (to tell whether one
    /// manifest added any).
    pub(crate) fn error_count(&self) -> usize {
        self.list
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// The diagnostics in their stable order: file, then message.
    pub(crate) fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list.sort_by(|a, b| {
            (a.file.as_str(), a.message.as_str(), a.severity).cmp(&(
                b.file.as_str(),
                b.message.as_str(),
                b.severity,
            ))
        });
        self.list
    }
}

/// What a directory entry is, after following a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    /// A socket, a device, a broken symlink, or anything unreadable.
    Other,
}

/// One directory entry with a UTF-8 name.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    /// True when the entry itself is a symlink (`kind` describes its target).
    pub(crate) symlink: bool,
}

impl Entry {
    pub(crate) fn is_file(&self) -> bool {
        self.kind == Kind::File
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    /// The name without its last extension, and the extension.
    pub(crate) fn stem_ext(&self) -> (&str, Option<&str>) {
        match self.name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => (stem, Some(ext)),
            _ => (self.name.as_str(), None),
        }
    }
}

/// The entries of `dir`, sorted by name. Unreadable directories and
/// non-UTF-8 names are reported, and the walk goes on without them.
pub(crate) fn list_dir(d: &mut Diags, dir: &Path) -> Vec<Entry> {
    let read = match fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) => {
            d.error(
                dir,
                format!("cannot read directory: {e}"),
                "check that the directory exists and is readable by this user",
            );
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for item in read {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                d.error(
                    dir,
                    format!("cannot list directory: {e}"),
                    "check the directory's permissions",
                );
                continue;
            }
        };
        let path = item.path();
        let Some(name) = item.file_name().to_str().map(str::to_owned) else {
            d.warn(
                &path,
                "file name is not valid UTF-8; skipped",
                "rename the entry using UTF-8 characters",
            );
            continue;
        };
        let (kind, symlink) = match item.file_type() {
            Ok(t) if t.is_symlink() => (kind_of(fs::metadata(&path)), true),
            Ok(t) if t.is_dir() => (Kind::Dir, false),
            Ok(t) if t.is_file() => (Kind::File, false),
            Ok(_) | Err(_) => (Kind::Other, false),
        };
        out.push(Entry {
            name,
            path,
            kind,
            symlink,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn kind_of(meta: io::Result<fs::Metadata>) -> Kind {
    match meta {
        Ok(m) if m.is_dir() => Kind::Dir,
        Ok(m) if m.is_file() => Kind::File,
        _ => Kind::Other,
    }
}

/// The kind of `path` (following symlinks), or `None` when it does not exist.
pub(crate) fn path_kind(path: &Path) -> Option<Kind> {
    match fs::metadata(path) {
        Ok(m) => Some(kind_of(Ok(m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A dangling symlink still occupies the name.
            fs::symlink_metadata(path).ok().map(|_| Kind::Other)
        }
        Err(_) => Some(Kind::Other),
    }
}

/// Reports an entry that is neither a file nor a directory.
pub(crate) fn report_other(d: &mut Diags, entry: &Entry) {
    d.warn(
        &entry.path,
        "not a regular file or directory (broken symlink or special file); skipped",
        "remove it or point it at a real file",
    );
}

/// The bytes of a file, or a diagnostic.
pub(crate) fn read_bytes(d: &mut Diags, path: &Path) -> Option<Vec<u8>> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            d.error(
                path,
                "expected a file, found a directory",
                "replace the directory with a file of that name",
            );
            return None;
        }
        Ok(m) if !m.is_file() => {
            d.error(
                path,
                "expected a regular file",
                "replace it with a regular file",
            );
            return None;
        }
        _ => {}
    }
    match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            d.error(
                path,
                format!("cannot read file: {e}"),
                "check that the file exists and is readable by this user",
            );
            None
        }
    }
}

/// The text of a UTF-8 file (a leading byte-order mark removed), or a diagnostic.
pub(crate) fn read_text(d: &mut Diags, path: &Path) -> Option<String> {
    let bytes = read_bytes(d, path)?;
    match String::from_utf8(bytes) {
        Ok(mut text) => {
            if text.starts_with('\u{feff}') {
                text.drain(..'\u{feff}'.len_utf8());
            }
            Some(text)
        }
        Err(e) => {
            d.error(
                path,
                format!(
                    "file is not valid UTF-8 (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
                "save the file as UTF-8 text",
            );
            None
        }
    }
}

/// Parses TOML text into a table, reporting syntax errors with line and column.
pub(crate) fn parse_toml(d: &mut Diags, path: &Path, text: &str) -> Option<Table> {
    match text.parse::<Table>() {
        Ok(table) => Some(table),
        Err(e) => {
            let at = e.span().map(|span| line_col(text, span.start));
            let message = e.message().trim().to_owned();
            match at {
                Some((line, col)) => d.error(
                    path,
                    format!("invalid TOML at line {line}, column {col}: {message}"),
                    format!("fix the TOML syntax at line {line}"),
                ),
                None => d.error(
                    path,
                    format!("invalid TOML: {message}"),
                    "fix the TOML syntax",
                ),
            }
            None
        }
    }
}

/// Reads and parses a TOML file.
pub(crate) fn read_toml(d: &mut Diags, path: &Path) -> Option<Table> {
    let text = read_text(d, path)?;
    parse_toml(d, path, &text)
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// A TOML value as JSON. Datetimes become strings; non-finite floats become null.
pub(crate) fn toml_to_json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(dt) => Value::String(dt.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => table_to_json(table),
    }
}

/// A TOML table as a JSON object.
pub(crate) fn table_to_json(table: &Table) -> Value {
    Value::Object(
        table
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect(),
    )
}

/// Checks that `schema` is a valid JSON Schema (against its meta-schema, then
/// by compiling it). Reports and returns false when it is not.
#[cfg(feature = "validate")]
pub(crate) fn check_schema(d: &mut Diags, path: &Path, label: &str, schema: &Value) -> bool {
    if let Err(e) = jsonschema::meta::validate(schema) {
        let at = e.instance_path().as_str().to_owned();
        let place = if at.is_empty() {
            String::new()
        } else {
            format!(" at {at}")
        };
        d.error(
            path,
            format!("`{label}` is not a valid JSON Schema{place}: {e}"),
            format!("correct `{label}` so it validates against the JSON Schema meta-schema"),
        );
        return false;
    }
    if let Err(e) = jsonschema::validator_for(schema) {
        d.error(
            path,
            format!("`{label}` cannot be compiled as a JSON Schema: {e}"),
            format!("correct `{label}` (references must resolve inside the schema)"),
        );
        return false;
    }
    true
}

/// Without the `schema` feature a declared schema is taken as written: the
/// runtime (which enables the feature) checks it when it loads the agent.
#[cfg(not(feature = "validate"))]
pub(crate) fn check_schema(_d: &mut Diags, _path: &Path, _label: &str, _schema: &Value) -> bool {
    true
}

/// True for `[A-Za-z0-9][A-Za-z0-9_-]{0,max-1}`: the slug shape of skill,
/// subagent, connection and hook names.
pub(crate) fn is_slug(name: &str, max: usize) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && name.len() <= max
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// True for a relative, `/`-separated path with no empty, `.` or `..`
/// segments, no backslashes and no drive-like prefixes: a path that cannot
/// leave the folder it is resolved in.
pub(crate) fn is_safe_relpath(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && !p.contains('\0')
        && !p.contains(':')
        && p.split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Typed, reporting access to the keys of one TOML table.
pub(crate) struct Fields<'a> {
    pub(crate) table: &'a Table,
    pub(crate) path: &'a Path,
    /// Prepended to key names in messages, e.g. `local.` or `routes[0].`.
    pub(crate) prefix: String,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(table: &'a Table, path: &'a Path) -> Self {
        Self {
            table,
            path,
            prefix: String::new(),
        }
    }

    pub(crate) fn nested(table: &'a Table, path: &'a Path, prefix: impl Into<String>) -> Self {
        Self {
            table,
            path,
            prefix: prefix.into(),
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    pub(crate) fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// An error for each of `keys` the table lacks, whose fix shows the key
    /// with a string value.
    pub(crate) fn require(&self, d: &mut Diags, keys: &[&str]) {
        for key in keys {
            if !self.has(key) {
                d.error(
                    self.path,
                    format!("missing `{}`", self.key(key)),
                    format!("add `{key} = \"...\"`"),
                );
            }
        }
    }

    fn wrong_type(&self, d: &mut Diags, key: &str, want: &str, example: &str, found: &toml::Value) {
        let k = self.key(key);
        d.error(
            self.path,
            format!("`{k}` must be {want}, found {}", found.type_str()),
            format!("write it as {example}"),
        );
    }

    /// A string value.
    pub(crate) fn string(&self, d: &mut Diags, key: &str) -> Option<String> {
        match self.table.get(key)? {
            toml::Value::String(s) => Some(s.clone()),
            other => {
                self.wrong_type(d, key, "a string", &format!("`{key} = \"...\"`"), other);
                None
            }
        }
    }

    /// A string value that is not blank.
    pub(crate) fn nonempty_string(&self, d: &mut Diags, key: &str) -> Option<String> {
        let s = self.string(d, key)?;
        if s.trim().is_empty() {
            let k = self.key(key);
            d.error(
                self.path,
                format!("`{k}` is empty"),
                format!("give `{k}` a non-empty value"),
            );
            return None;
        }
        Some(s)
    }

    /// A boolean value.
    pub(crate) fn bool(&self, d: &mut Diags, key: &str) -> Option<bool> {
        match self.table.get(key)? {
            toml::Value::Boolean(b) => Some(*b),
            other => {
                self.wrong_type(d, key, "a boolean", &format!("`{key} = true`"), other);
                None
            }
        }
    }

    /// An integer greater than zero.
    pub(crate) fn positive(&self, d: &mut Diags, key: &str) -> Option<u64> {
        match self.table.get(key)? {
            toml::Value::Integer(i) if *i > 0 => u64::try_from(*i).ok(),
            toml::Value::Integer(i) => {
                let k = self.key(key);
                d.error(
                    self.path,
                    format!("`{k}` must be greater than 0, found {i}"),
                    format!("set `{k}` to a positive integer or remove it"),
                );
                None
            }
            other => {
                self.wrong_type(
                    d,
                    key,
                    "a positive integer",
                    &format!("`{key} = 10`"),
                    other,
                );
                None
            }
        }
    }

    /// An integer greater than zero that fits in a `u32`.
    pub(crate) fn positive_u32(&self, d: &mut Diags, key: &str) -> Option<u32> {
        let n = self.positive(d, key)?;
        match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                let k = self.key(key);
                d.error(
                    self.path,
                    format!("`{k}` is too large ({n})"),
                    format!("set `{k}` to at most {}", u32::MAX),
                );
                None
            }
        }
    }

    /// An array of strings.
    pub(crate) fn strings(&self, d: &mut Diags, key: &str) -> Option<Vec<String>> {
        let value = self.table.get(key)?;
        let example = format!("`{key} = [\"a\", \"b\"]`");
        let toml::Value::Array(items) = value else {
            self.wrong_type(d, key, "an array of strings", &example, value);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                toml::Value::String(s) => out.push(s.clone()),
                other => {
                    let k = self.key(key);
                    d.error(
                        self.path,
                        format!("`{k}[{i}]` must be a string, found {}", other.type_str()),
                        format!("write every element of `{k}` as a quoted string"),
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    /// A table of string values.
    pub(crate) fn string_map(&self, d: &mut Diags, key: &str) -> Option<BTreeMap<String, String>> {
        let value = self.table.get(key)?;
        let toml::Value::Table(table) = value else {
            self.wrong_type(
                d,
                key,
                "a table of strings",
                &format!("`{key} = {{ NAME = \"value\" }}`"),
                value,
            );
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, v) in table {
            match v {
                toml::Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => {
                    ok = false;
                    let full = self.key(key);
                    d.error(
                        self.path,
                        format!("`{full}.{k}` must be a string, found {}", other.type_str()),
                        format!("quote the value of `{full}.{k}`"),
                    );
                }
            }
        }
        ok.then_some(out)
    }

    /// A sub-table.
    pub(crate) fn table(&self, d: &mut Diags, key: &str) -> Option<&'a Table> {
        match self.table.get(key)? {
            toml::Value::Table(t) => Some(t),
            other => {
                self.wrong_type(d, key, "a table", &format!("a `[{key}]` section"), other);
                None
            }
        }
    }

    /// Warns about every key not in `known`.
    pub(crate) fn unknown_keys(&self, d: &mut Diags, known: &[&str]) {
        for key in self.table.keys() {
            if !known.contains(&key.as_str()) {
                let k = self.key(key);
                let list = known
                    .iter()
                    .map(|k| format!("{}{k}", self.prefix))
                    .collect::<Vec<_>>()
                    .join(", ");
                d.warn(
                    self.path,
                    format!("unknown key `{k}` is ignored (known keys: {list})"),
                    format!("remove `{k}` or correct its spelling"),
                );
            }
        }
    }
}

/// Reports `key` unless `url` is an http(s) URL without a query or fragment.
pub(crate) fn check_url(d: &mut Diags, f: &Fields<'_>, key: &str, url: &str) {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && !url.contains('?')
        && !url.contains('#')
        && url.split("://").nth(1).is_some_and(|rest| !rest.is_empty());
    if !ok {
        let k = f.key(key);
        d.error(
            f.path,
            format!("`{k}` is not an http(s) URL: `{url}`"),
            format!("write `{k}` as `https://host[/path]`, without a query"),
        );
    }
}

/// Reports an environment variable name that no program could receive.
pub(crate) fn check_env_name(d: &mut Diags, path: &Path, name: &str) {
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        d.error(
            path,
            format!("`{name}` is not an environment variable name"),
            "use letters, digits and `_`, not starting with a digit",
        );
    }
}

/// `key = "on" | "off"`.
pub(crate) fn sandbox_mode(d: &mut Diags, f: &Fields<'_>, key: &str) -> Option<SandboxMode> {
    match f.string(d, key)?.as_str() {
        "on" => Some(SandboxMode::On),
        "off" => Some(SandboxMode::Off),
        other => {
            let k = f.key(key);
            d.error(
                f.path,
                format!("`{k}` must be \"on\" or \"off\", found \"{other}\""),
                format!("write `{k} = \"on\"` (the default) or `{k} = \"off\"`"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert!(is_slug("a", 64));
        assert!(is_slug("pr-review_2", 64));
        assert!(!is_slug("-a", 64));
        assert!(!is_slug("", 64));
        assert!(!is_slug("a.b", 64));
        assert!(!is_slug(&"a".repeat(65), 64));
    }

    #[test]
    fn safe_relpaths() {
        assert!(is_safe_relpath("references/a.md"));
        assert!(!is_safe_relpath("../x"));
        assert!(!is_safe_relpath("a/../../x"));
        assert!(!is_safe_relpath("/etc/passwd"));
        assert!(!is_safe_relpath("a//b"));
        assert!(!is_safe_relpath("a\\b"));
        assert!(!is_safe_relpath("C:x"));
        assert!(!is_safe_relpath(""));
    }

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 1), (1, 1));
    }
}
