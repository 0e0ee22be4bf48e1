//! The tree-fs check: no `std::fs`/`tokio::fs` path operation in the
//! modules that handle trees a tool can write.
//!
//! A contained tool writes its session workspace, its direct call's
//! `tool-calls/<callId>/` and its temp dir, and can put a symlink or a FIFO
//! at any name there at any moment. The server (often root) must therefore
//! never open a path in such a tree by name: checking a path and then
//! opening it is a race a tool wins. `bdk_exec::workspace` owns every file
//! operation on those trees and does each one beneath a directory handle
//! (`Tree`). This check keeps it that way: in the files of [`SCANNED`]
//! (outside test code), a path operation of `std::fs` or `tokio::fs`
//! (`File::open`, `OpenOptions`, `read`, `write`, `read_dir`, `metadata`,
//! `symlink_metadata`, `remove_file`, `create_dir_all`, `copy`, ...) or one
//! of `Path`'s own (`exists`, `canonicalize`, `read_dir`, ...) fails the
//! build, except in [`OWNERS`], the files that implement the handle, and on
//! the lines [`ALLOWLIST`] names with the reason each one is safe (a path
//! no tool can write, such as the host socket under the state root).
//!
//! Like `cycles`, it reads source text, not the compiler's view: comments
//! and string literals are blanked first, items under `#[cfg(test)]` or
//! `#[test]` are dropped, and an operation reached through an alias other
//! than `fs::` (`use std::fs::read as r`) or a method whose receiver it
//! cannot see (`.metadata()`, `.is_dir()`, which are also methods of open
//! files and file types) is not caught. It is a tripwire for the usual
//! ways, not a proof.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The committed allowlist, relative to the workspace root.
pub const ALLOWLIST: &str = "xtask/tree-fs-allowlist.txt";

/// The files and folders (every `.rs` below) scanned, relative to the
/// workspace root: the modules that handle trees a tool can write.
pub const SCANNED: &[&str] = &[
    "crates/bdk-exec/src/tool",
    "crates/bdk-core/src/host.rs",
    "crates/bdk-core/src/host",
    "crates/bdk-core/src/endpoint.rs",
    "crates/bdk-core/src/endpoint",
    "crates/bdk-exec/src/grant.rs",
    "crates/bdk-exec/src/workspace",
    "crates/bdk-exec/src/scratch.rs",
    "crates/bdk-exec/src/gate.rs",
    "crates/bdk-exec/src/gate",
    "crates/bdk-exec/src/handler.rs",
    "crates/bdk-mcp/src/server",
];

/// The owning module's files: they implement the handle-based operations
/// and may use any file operation.
pub const OWNERS: &[&str] = &[
    "crates/bdk-exec/src/workspace/tree.rs",
    "crates/bdk-exec/src/workspace/owner.rs",
];

/// Functions of `std::fs`, `tokio::fs` and `std::os::unix::fs` that take a
/// path (`fs::read(`, `tokio::fs::write(`, ...).
const PATH_FUNCTIONS: &[&str] = &[
    "read",
    "read_to_string",
    "write",
    "read_dir",
    "metadata",
    "symlink_metadata",
    "remove_file",
    "remove_dir",
    "remove_dir_all",
    "create_dir",
    "create_dir_all",
    "copy",
    "rename",
    "hard_link",
    "soft_link",
    "symlink",
    "read_link",
    "canonicalize",
    "set_permissions",
    "try_exists",
    "exists",
    "chown",
    "lchown",
];

/// Constructors that open by path.
const PATH_CONSTRUCTORS: &[&str] = &[
    "File::open(",
    "File::create(",
    "File::create_new(",
    "File::options(",
    "OpenOptions::new(",
    "DirBuilder::new(",
];

/// Methods of `Path` that ask the filesystem (they have no other meaning
/// in std).
const PATH_METHODS: &[&str] = &[
    ".exists()",
    ".try_exists()",
    ".symlink_metadata()",
    ".canonicalize()",
    ".read_dir()",
    ".read_link()",
];

/// What stopped the check from reading the tree or the allowlist.
#[derive(Debug)]
pub enum Error {
    /// A source file, folder or the allowlist could not be read.
    Read { path: PathBuf, source: io::Error },
    /// A line of the allowlist is not `file | text | reason`.
    Allowlist { line: usize, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, source } => {
                write!(f, "could not read {}: {source}", path.display())
            }
            Error::Allowlist { line, message } => write!(f, "{ALLOWLIST}:{line}: {message}"),
        }
    }
}

/// One path operation found outside test code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file, relative to the workspace root.
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// What was matched (`fs::read(`, `.exists()`).
    pub what: String,
    /// The source line, trimmed.
    pub text: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}` in `{}`",
            self.file, self.line, self.what, self.text
        )
    }
}

/// One line of the allowlist: the lines of `file` containing `text` may do
/// a path operation, for `reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    pub file: String,
    pub text: String,
    pub reason: String,
}

/// Every path operation in the scanned files of the workspace at `root`,
/// owners left out.
pub fn find(root: &Path) -> Result<Vec<Finding>, Error> {
    let mut files = BTreeSet::new();
    for place in SCANNED {
        collect(root, &root.join(place), &mut files)?;
    }
    let mut findings = Vec::new();
    for rel in files {
        if OWNERS.contains(&rel.as_str()) {
            continue;
        }
        let path = root.join(&rel);
        let text = fs::read_to_string(&path).map_err(|source| Error::Read { path, source })?;
        for (line, what) in scan(&text) {
            let source_line = text.lines().nth(line - 1).unwrap_or("").trim().to_owned();
            findings.push(Finding {
                file: rel.clone(),
                line,
                what,
                text: source_line,
            });
        }
    }
    Ok(findings)
}

/// The `.rs` files at `path` (a file, or a folder walked recursively) as
/// paths relative to `root` with `/` separators. A place that is not there
/// is skipped: the list names some files that may come and go.
pub fn collect(root: &Path, path: &Path, out: &mut BTreeSet<String>) -> Result<(), Error> {
    let read = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    let Ok(meta) = fs::metadata(path) else {
        return Ok(());
    };
    if meta.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(path);
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
        return Ok(());
    }
    for entry in fs::read_dir(path).map_err(read)? {
        collect(root, &entry.map_err(read)?.path(), out)?;
    }
    Ok(())
}

/// The path operations in one file's text, outside comments, string
/// literals and test code: (1-based line, what matched).
pub fn scan(text: &str) -> Vec<(usize, String)> {
    let code = without_tests(&blank_comments_and_strings(text));
    let mut found = Vec::new();
    for (i, line) in code.lines().enumerate() {
        for what in matches(line) {
            found.push((i + 1, what));
        }
    }
    found
}

/// What one line of code does that the check forbids.
fn matches(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    let mut rest = compact.as_str();
    while let Some(at) = rest.find("fs::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let called = after[name.len()..].starts_with('(');
        if called && PATH_FUNCTIONS.contains(&name.as_str()) {
            found.push(format!("fs::{name}("));
        }
    }
    for pattern in PATH_CONSTRUCTORS.iter().chain(PATH_METHODS) {
        let mut from = 0;
        while let Some(at) = compact[from..].find(pattern) {
            let start = from + at;
            from = start + pattern.len();
            // `File::open(` but not `MyFile::open(`.
            let before = compact[..start].chars().next_back();
            if pattern.starts_with('.') || !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                found.push((*pattern).to_owned());
            }
        }
    }
    found
}

/// `text` with comments and the contents of string and character literals
/// replaced by spaces, lines kept where they were.
fn blank_comments_and_strings(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = s[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == 'r'
            && (next == Some('#') || next == Some('"'))
            && !(i > 0 && ident(s[i - 1]) && s[i - 1] != 'b')
        {
            // A raw string `r"..."`, `r#"..."#` (also after `b`).
            let mut hashes = 0;
            while s.get(i + 1 + hashes) == Some(&'#') {
                hashes += 1;
            }
            if s.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let start = i + 2 + hashes;
            let mut j = start;
            while j < s.len() {
                if s[j] == '"' && (1..=hashes).all(|h| s.get(j + h) == Some(&'#')) {
                    break;
                }
                j += 1;
            }
            blank(&mut out, start, j);
            i = j + 1 + hashes;
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c == '\'' {
            // A character literal, or a lifetime (`'a`), which is left.
            let end = match (next, s.get(i + 2)) {
                (Some('\\'), _) => s[i + 2..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|p| i + 2 + p),
                (Some(_), Some('\'')) => Some(i + 2),
                _ => None,
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// `code` (comments and strings already blanked) with test code blanked:
/// the item after a `#[cfg(test)]`, `#[test]` or `#[tokio::test]`
/// attribute, and the rest of a file after `#![cfg(test)]`.
fn without_tests(code: &str) -> String {
    let s: Vec<char> = code.chars().collect();
    let mut out = s.clone();
    let mut i = 0;
    while i < s.len() {
        if s[i] != '#' {
            i += 1;
            continue;
        }
        let inner = s.get(i + 1) == Some(&'!');
        let open = if inner { i + 2 } else { i + 1 };
        if s.get(open) != Some(&'[') {
            i += 1;
            continue;
        }
        let Some(close) = matching(&s, open) else {
            break;
        };
        let attr: String = s[open + 1..close]
            .iter()
            .filter(|c| !c.is_whitespace())
            .collect();
        if !is_test_attribute(&attr) {
            i = close + 1;
            continue;
        }
        let end = if inner {
            s.len()
        } else {
            item_end(&s, close + 1)
        };
        for c in &mut out[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    out.into_iter().collect()
}

fn is_test_attribute(attr: &str) -> bool {
    if attr == "test" || attr.starts_with("tokio::test") {
        return true;
    }
    let Some(cfg) = attr.strip_prefix("cfg(") else {
        return false;
    };
    !cfg.contains("not(test")
        && cfg
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "test")
}

/// The index of the bracket closing the one at `open` (`[`, `(` or `{`).
fn matching(s: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in s.iter().enumerate().skip(open) {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// Where the item starting at `from` ends: after its `;`, or after the
/// `}` closing its body (attributes before it included).
fn item_end(s: &[char], from: usize) -> usize {
    let mut j = from;
    while j < s.len() {
        match s[j] {
            '#' if s.get(j + 1) == Some(&'[') => match matching(s, j + 1) {
                Some(close) => j = close + 1,
                None => return s.len(),
            },
            '(' | '[' => match matching(s, j) {
                Some(close) => j = close + 1,
                None => return s.len(),
            },
            ';' => return j + 1,
            '{' => return matching(s, j).map_or(s.len(), |close| close + 1),
            _ => j += 1,
        }
    }
    s.len()
}

/// Reads the committed allowlist under `root`.
pub fn read_allowlist(root: &Path) -> Result<Vec<Allowed>, Error> {
    let path = root.join(ALLOWLIST);
    let text = fs::read_to_string(&path).map_err(|source| Error::Read { path, source })?;
    parse_allowlist(&text)
}

/// Parses the allowlist: `#` comments, blank lines, and one exception a
/// line as `file | text on the line | why it is safe`.
pub fn parse_allowlist(text: &str) -> Result<Vec<Allowed>, Error> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.splitn(3, " | ").map(str::trim).collect();
        let [file, text, reason] = fields.as_slice() else {
            return Err(Error::Allowlist {
                line: i + 1,
                message: "expected `file | text on the line | why it is safe`".into(),
            });
        };
        if file.is_empty() || text.is_empty() || reason.is_empty() {
            return Err(Error::Allowlist {
                line: i + 1,
                message: "every field needs a value, the reason too".into(),
            });
        }
        entries.push(Allowed {
            file: (*file).to_owned(),
            text: (*text).to_owned(),
            reason: (*reason).to_owned(),
        });
    }
    Ok(entries)
}

/// Every finding no allowlist entry covers, and every entry that covers
/// nothing (stale: delete it), one message each; empty when clean.
pub fn compare(findings: &[Finding], allowed: &[Allowed]) -> Vec<String> {
    let covers = |a: &Allowed, f: &Finding| a.file == f.file && f.text.contains(&a.text);
    let mut problems = Vec::new();
    for f in findings {
        if !allowed.iter().any(|a| covers(a, f)) {
            problems.push(format!(
                "{f}: open it through bdk_core::workspace (a Tree beneath the tree's handle), or add the line to {ALLOWLIST} with why no tool can write that path"
            ));
        }
    }
    for a in allowed {
        if !findings.iter().any(|f| covers(a, f)) {
            problems.push(format!(
                "the allowlist entry `{} | {}` matches nothing; delete it",
                a.file, a.text
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_operations_are_found_in_code_only() {
        let text = r##"
use std::fs;
// std::fs::read("in a comment") is not code
/* tokio::fs::write(block, comment) */
fn f(p: &Path) {
    let a = std::fs::read(p);
    let b = tokio::fs::read_to_string(p).await;
    let c = fs::create_dir_all(p);
    let d = std::fs::File::open(p);
    let e = tokio::fs::OpenOptions::new().write(true).open(p);
    let s = "std::fs::remove_file(p) in a string";
    let r = r#"fs::copy(a, b)"#;
    if p.exists() && p.symlink_metadata().is_ok() {}
    let m = file.metadata();
    let t: std::fs::Metadata = m;
    let q = MyFile::open(p);
    let x = cap_fs::read_thing(p);
}
"##;
        let found: Vec<(usize, String)> = scan(text);
        let shown: Vec<String> = found.iter().map(|(l, w)| format!("{l}:{w}")).collect();
        assert_eq!(
            shown,
            [
                "6:fs::read(",
                "7:fs::read_to_string(",
                "8:fs::create_dir_all(",
                "9:File::open(",
                "10:OpenOptions::new(",
                "13:.exists()",
                "13:.symlink_metadata()",
            ]
        );
    }

    #[test]
    fn test_code_is_ignored() {
        let text = r#"
fn real() {
    std::fs::write("a", "b");
}

#[cfg(test)]
mod tests {
    fn helper() { std::fs::read("x"); }
    #[test]
    fn t() { let _ = std::fs::remove_file("y"); }
}

#[test]
fn loose() { std::fs::copy("a", "b"); }

#[cfg(not(test))]
fn shipped() { std::fs::rename("a", "b"); }
"#;
        let found: Vec<(usize, String)> = scan(text);
        assert_eq!(
            found,
            [(3, "fs::write(".to_owned()), (17, "fs::rename(".to_owned())]
        );
        assert!(scan("#![cfg(test)]\nfn f() { std::fs::read(\"x\"); }\n").is_empty());
    }

    #[test]
    fn an_allowlisted_line_passes_and_a_stale_entry_fails() {
        let finding = |file: &str, text: &str| Finding {
            file: file.to_owned(),
            line: 1,
            what: "fs::remove_file(".to_owned(),
            text: text.to_owned(),
        };
        let allowed = parse_allowlist(
            "# comment\n\na.rs | std::fs::remove_file(&self.socket) | the socket is under the state root\n",
        )
        .unwrap();
        let socket = finding("a.rs", "let _ = std::fs::remove_file(&self.socket);");
        assert!(compare(std::slice::from_ref(&socket), &allowed).is_empty());
        // The same call on another line, or in another file, is not covered.
        let other = finding("a.rs", "std::fs::remove_file(&workspace_path)");
        let elsewhere = finding("b.rs", "std::fs::remove_file(&self.socket)");
        let problems = compare(&[socket, other, elsewhere], &allowed);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("workspace_path"), "{problems:?}");
        // An entry that covers nothing is stale.
        let problems = compare(&[], &allowed);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("matches nothing"), "{problems:?}");
        // Every entry gives its reason.
        assert!(parse_allowlist("a.rs | text |\n").is_err());
        assert!(parse_allowlist("a.rs text reason\n").is_err());
    }

    #[test]
    fn the_tree_matches_the_allowlist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace root");
        let findings = find(root).unwrap();
        let problems = compare(&findings, &read_allowlist(root).unwrap());
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
