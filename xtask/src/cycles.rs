//! The module-cycle check: no import circles inside a crate.
//!
//! Modules that import each other in a loop can only be read, tested and
//! split together. [`find_cycles`] reads every workspace crate's source tree
//! (`crates/*/src` and `xtask/src`, the crate named by its folder) from its
//! roots (`lib.rs`, `main.rs`) through the `mod x;` declarations (`x.rs` or
//! `x/mod.rs`, nested `foo.rs` + `foo/` layouts, `#[path]`), treats each FILE
//! as one node, and draws an edge from one file to another of the same crate
//! when it names it in a path: a `use` tree (`crate::`, `super::`, `self::`, a
//! child module, or a module an earlier `use` brought into scope) or a path
//! written in code (`crate::a::f()`, `super::x::Y`). A path counts toward the
//! deepest module file it names: `crate::model::openai::OpenAiConfig` is
//! `model/openai.rs` when that file exists, else `model/mod.rs`; an inline
//! `mod` block belongs to the file it is written in.
//!
//! Not counted: test code (items and modules under `#[cfg(test)]` or
//! `#[test]`, which may reach anywhere); a `mod child;` declaration; a
//! parent's facade, that is `pub use` (of any visibility) of a descendant's
//! items; comments, doc comments and string literals. The cycles are the
//! strongly connected components of that graph (Tarjan's algorithm).
//!
//! Today's tree still has cycles that are being taken apart, so the gate is a
//! ratchet: [`BASELINE`] lists each crate's cycles as they are, and the check
//! fails unless the cycles found equal it exactly. A new cycle or a grown one
//! fails; so does one that shrank or disappeared, asking for the progress to
//! be recorded with `cargo xtask cycles --update`. The baseline therefore
//! always tells the truth and can only shrink.
//!
//! This reads source text rather than asking the compiler: macros are not
//! expanded and a name brought in by a glob is not traced, so a path that
//! reaches a module only through a macro or a glob re-export of an item is
//! invisible. Every edge it does report is a path written in the source.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The committed ratchet, relative to the workspace root.
pub const BASELINE: &str = "xtask/module-cycles.txt";

/// What stopped the check from reading the tree or the baseline.
#[derive(Debug)]
pub enum Error {
    /// A source file, folder or the baseline could not be read.
    Read { path: PathBuf, source: io::Error },
    /// A `mod x;` names a file that is not there.
    MissingModule { file: PathBuf, name: String },
    /// A line of the baseline is not `crate: file file ...`.
    Baseline { line: usize, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, source } => {
                write!(f, "could not read {}: {source}", path.display())
            }
            Error::MissingModule { file, name } => write!(
                f,
                "{} declares `mod {name};` but neither {name}.rs nor {name}/mod.rs exists",
                file.display()
            ),
            Error::Baseline { line, message } => write!(f, "{BASELINE}:{line}: {message}"),
        }
    }
}

/// One import cycle: the files of a strongly connected component of a
/// crate's module graph and the edges between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub krate: String,
    /// Paths relative to the crate folder (`src/host.rs`), sorted.
    pub files: BTreeSet<String>,
    /// Every edge inside the cycle: (from, to, the names that tie them).
    pub ties: Vec<(String, String, BTreeSet<String>)>,
}

impl fmt::Display for Cycle {
    /// The cycle as `cargo xtask cycles` prints it: a heading, then one line
    /// per edge (`src/a.rs -> src/b.rs: Foo, bar`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: cycle of {} files: {}",
            self.krate,
            self.files.len(),
            join(&self.files)
        )?;
        for (from, to, names) in &self.ties {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            writeln!(f, "  {from} -> {to}: {}", names.join(", "))?;
        }
        Ok(())
    }
}

/// One line of the baseline: a cycle that existed when it was written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub krate: String,
    pub files: BTreeSet<String>,
}

impl Cycle {
    fn entry(&self) -> Entry {
        Entry {
            krate: self.krate.clone(),
            files: self.files.clone(),
        }
    }
}

fn join(files: &BTreeSet<String>) -> String {
    files
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------
// Reading the tree.

/// The cycles of every workspace crate under `root`, by crate and files.
pub fn find_cycles(root: &Path) -> Result<Vec<Cycle>, Error> {
    let mut cycles = Vec::new();
    for (krate, dir) in workspace_crates(root)? {
        let graph = crate_graph(&dir)?;
        for files in strongly_connected(&graph) {
            let mut ties = Vec::new();
            for from in &files {
                for (to, names) in graph.get(from).into_iter().flatten() {
                    if files.contains(to) {
                        ties.push((from.clone(), to.clone(), names.clone()));
                    }
                }
            }
            cycles.push(Cycle {
                krate: krate.clone(),
                files,
                ties,
            });
        }
    }
    cycles.sort_by(|a, b| (&a.krate, &a.files).cmp(&(&b.krate, &b.files)));
    Ok(cycles)
}

/// The workspace crates as (name, folder): every `crates/*` with a
/// `Cargo.toml`, then `xtask`. A crate is named by its folder, which the
/// layout keeps equal to the package name.
fn workspace_crates(root: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    let crates_dir = root.join("crates");
    let entries = fs::read_dir(&crates_dir).map_err(|source| Error::Read {
        path: crates_dir.clone(),
        source,
    })?;
    let mut crates = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: crates_dir.clone(),
            source,
        })?;
        let dir = entry.path();
        if dir.join("Cargo.toml").is_file() {
            crates.push((entry.file_name().to_string_lossy().into_owned(), dir));
        }
    }
    crates.sort();
    crates.push(("xtask".to_owned(), root.join("xtask")));
    Ok(crates)
}

/// A crate's module graph: from file -> to file -> names, files relative to
/// the crate folder.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// A module path below the crate root (`["model", "openai"]`); empty is the
/// root.
type ModPath = Vec<String>;

/// One module tree (the library's or the binary's): every module, inline
/// ones included, with the file it is written in, and each file's module.
#[derive(Default)]
struct Tree {
    modules: BTreeMap<ModPath, String>,
    files: Vec<(String, ModPath)>,
}

fn crate_graph(dir: &Path) -> Result<Graph, Error> {
    let mut parsed: BTreeMap<String, Parsed> = BTreeMap::new();
    let mut graph = Graph::new();
    for root in ["src/lib.rs", "src/main.rs"] {
        if dir.join(root).is_file() {
            let tree = load_tree(dir, root, &mut parsed)?;
            add_edges(&tree, &parsed, &mut graph);
        }
    }
    Ok(graph)
}

/// Walks a module tree from its root file through `mod x;` declarations,
/// parsing each file once into `parsed`.
fn load_tree(dir: &Path, root: &str, parsed: &mut BTreeMap<String, Parsed>) -> Result<Tree, Error> {
    let mut tree = Tree::default();
    // (file, its module, whether the file owns its folder: lib.rs, main.rs,
    // mod.rs and #[path] files do, `foo.rs` has its children in `foo/`).
    let mut queue: Vec<(String, ModPath, bool)> = vec![(root.to_owned(), Vec::new(), true)];
    while let Some((rel, module, owns_dir)) = queue.pop() {
        let path = dir.join(&rel);
        if !parsed.contains_key(&rel) {
            let text = fs::read_to_string(&path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            parsed.insert(rel.clone(), parse(&text));
        }
        let Some(file) = parsed.get(&rel) else {
            continue;
        };
        tree.modules.insert(module.clone(), rel.clone());
        for inline in &file.inline {
            tree.modules.insert(concat(&module, inline), rel.clone());
        }
        let file_dir = Path::new(&rel)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let own_dir = if owns_dir {
            file_dir.clone()
        } else {
            let stem = Path::new(&rel).file_stem().unwrap_or_default();
            file_dir.join(stem)
        };
        for decl in &file.mods {
            let child = concat(
                &concat(&module, &decl.scope),
                std::slice::from_ref(&decl.name),
            );
            let scope_dir = decl.scope.iter().fold(own_dir.clone(), |d, s| d.join(s));
            let found = match &decl.path {
                // Outside inline blocks #[path] is relative to the file's
                // folder; inside them, to the inline modules' folder.
                Some(p) if decl.scope.is_empty() => Some((file_dir.join(p), true)),
                Some(p) => Some((scope_dir.join(p), true)),
                None => [
                    (scope_dir.join(format!("{}.rs", decl.name)), false),
                    (scope_dir.join(&decl.name).join("mod.rs"), true),
                ]
                .into_iter()
                .find(|(candidate, _)| dir.join(candidate).is_file()),
            };
            let Some((child_rel, child_owns_dir)) = found else {
                return Err(Error::MissingModule {
                    file: path,
                    name: decl.name.clone(),
                });
            };
            let child_rel = child_rel.to_string_lossy().replace('\\', "/");
            queue.push((child_rel, child, child_owns_dir));
        }
        tree.files.push((rel, module));
    }
    Ok(tree)
}

fn concat(a: &[String], b: &[String]) -> ModPath {
    a.iter().chain(b).cloned().collect()
}

/// Adds the edges of one module tree's files to `graph`.
fn add_edges(tree: &Tree, parsed: &BTreeMap<String, Parsed>, graph: &mut Graph) {
    let aliases = module_aliases(tree, parsed);
    for (rel, module) in &tree.files {
        let Some(file) = parsed.get(rel) else {
            continue;
        };
        for r in &file.refs {
            let scope = concat(module, &r.scope);
            let Some((target, name)) = resolve(tree, &aliases, &scope, &r.segs, r.glob) else {
                continue;
            };
            let Some(to) = tree.modules.get(&target) else {
                continue;
            };
            // A parent re-exporting what its descendants define is a facade:
            // the descendants do not depend on it for that.
            let facade = r.public_use && target.len() > scope.len() && target.starts_with(&scope);
            if to == rel || facade {
                continue;
            }
            graph
                .entry(rel.clone())
                .or_default()
                .entry(to.clone())
                .or_default()
                .insert(name);
            graph.entry(to.clone()).or_default();
        }
    }
}

/// Names that `use` declarations bind to modules, per module scope: `use
/// crate::tool::{self, builtin}` lets later code write `builtin::f()`, and
/// `use super::*` brings the parent's child modules into scope. Resolved a
/// few rounds, since one `use` may go through a name another one bound.
fn module_aliases(tree: &Tree, parsed: &BTreeMap<String, Parsed>) -> Aliases {
    let mut aliases = Aliases::new();
    for _round in 0..4 {
        let mut changed = false;
        for (rel, module) in &tree.files {
            let Some(file) = parsed.get(rel) else {
                continue;
            };
            for r in file.refs.iter().filter(|r| r.is_use) {
                let scope = concat(module, &r.scope);
                let Some((target, None)) = resolve_module(tree, &aliases, &scope, &r.segs) else {
                    continue;
                };
                let mut bound: Vec<(String, ModPath)> = Vec::new();
                if r.glob {
                    for path in tree.modules.keys() {
                        if path.len() == target.len() + 1 && path.starts_with(&target) {
                            bound.push((path[target.len()].clone(), path.clone()));
                        }
                    }
                } else {
                    let name = r.alias.clone().or_else(|| target.last().cloned());
                    if let Some(name) = name.filter(|n| n != "_") {
                        bound.push((name, target));
                    }
                }
                let in_scope = aliases.entry(scope).or_default();
                for (name, path) in bound {
                    if in_scope.get(&name) != Some(&path) {
                        in_scope.insert(name, path);
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    aliases
}

type Aliases = BTreeMap<ModPath, BTreeMap<String, ModPath>>;

/// The deepest module `segs` names from `scope`, and the first segment
/// past it (the item the path names in that module), if any.
fn resolve_module(
    tree: &Tree,
    aliases: &Aliases,
    scope: &[String],
    segs: &[String],
) -> Option<(ModPath, Option<String>)> {
    let (first, rest) = segs.split_first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => scope.to_vec(),
        "super" => {
            let mut parent = scope.to_vec();
            parent.pop()?;
            parent
        }
        name => {
            let child = concat(scope, std::slice::from_ref(first));
            if tree.modules.contains_key(&child) {
                child
            } else {
                aliases.get(scope)?.get(name)?.clone()
            }
        }
    };
    for seg in rest {
        match seg.as_str() {
            "super" => {
                base.pop()?;
            }
            // `a::{self}` names `a`.
            "self" => {}
            _ => {
                base.push(seg.clone());
                if !tree.modules.contains_key(&base) {
                    base.pop();
                    return Some((base, Some(seg.clone())));
                }
            }
        }
    }
    Some((base, None))
}

/// The module a path names and the name that ties it: the item past the
/// deepest module, `*` for a glob, else the name the path ends on.
fn resolve(
    tree: &Tree,
    aliases: &Aliases,
    scope: &[String],
    segs: &[String],
    glob: bool,
) -> Option<(ModPath, String)> {
    let (target, item) = resolve_module(tree, aliases, scope, segs)?;
    let name = match item {
        Some(item) => item,
        None if glob => "*".to_owned(),
        None => segs
            .iter()
            .rev()
            .find(|s| *s != "self")
            .cloned()
            .unwrap_or_default(),
    };
    Some((target, name))
}

// ---------------------------------------------------------------------------
// Strongly connected components.

/// The strongly connected components of `graph` with more than one file
/// (Tarjan's algorithm; the graphs are a few dozen files, so recursion is
/// fine).
fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        next: usize,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<BTreeSet<String>>,
    }

    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(BTreeMap::keys) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }

    let mut tarjan = Tarjan {
        graph,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v.as_str()) {
            tarjan.visit(v);
        }
    }
    tarjan.found
}

// ---------------------------------------------------------------------------
// The ratchet.

/// Reads the committed baseline under `root`.
pub fn read_baseline(root: &Path) -> Result<Vec<Entry>, Error> {
    let path = root.join(BASELINE);
    let text = fs::read_to_string(&path).map_err(|source| Error::Read { path, source })?;
    parse_baseline(&text)
}

/// Parses the baseline: `#` comments, blank lines, and one cycle a line as
/// `crate: file file ...`.
pub fn parse_baseline(text: &str) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |message: &str| Error::Baseline {
            line: i + 1,
            message: message.to_owned(),
        };
        let (krate, files) = line
            .split_once(':')
            .ok_or_else(|| bad("expected `crate: file file ...`"))?;
        let files: BTreeSet<String> = files.split_whitespace().map(str::to_owned).collect();
        if krate.trim().is_empty() || files.len() < 2 {
            return Err(bad("a cycle names its crate and at least two files"));
        }
        entries.push(Entry {
            krate: krate.trim().to_owned(),
            files,
        });
    }
    entries.sort();
    Ok(entries)
}

/// The baseline file for `cycles`, as `cargo xtask cycles --update` writes it.
pub fn render_baseline(cycles: &[Cycle]) -> String {
    let mut text = String::from(
        "# Import cycles between the module files of each crate, as they are today.\n\
         # `cargo xtask cycles` (a step of `cargo xtask test` and `lint`) fails\n\
         # unless the cycles in the tree equal this list: no new cycle, no cycle\n\
         # that grew, and no line for a cycle that shrank or is gone. This file may\n\
         # only shrink: after taking a cycle apart, run `cargo xtask cycles --update`.\n\
         # One cycle a line: `crate: file file ...`, the files sorted.\n",
    );
    let mut entries: Vec<Entry> = cycles.iter().map(Cycle::entry).collect();
    entries.sort();
    for entry in entries {
        text.push_str(&format!("{}: {}\n", entry.krate, join(&entry.files)));
    }
    text
}

/// Every difference between the cycles found and the baseline, one message
/// each; empty when they are equal.
pub fn compare(found: &[Cycle], baseline: &[Entry]) -> Vec<String> {
    let found: Vec<Entry> = found.iter().map(Cycle::entry).collect();
    let mut problems = Vec::new();
    // Baseline entries a message about a found cycle has already named.
    let mut explained: BTreeSet<&Entry> = BTreeSet::new();
    for cycle in &found {
        if baseline.contains(cycle) {
            continue;
        }
        let related: Vec<&Entry> = baseline
            .iter()
            .filter(|b| b.krate == cycle.krate && !b.files.is_disjoint(&cycle.files))
            .collect();
        explained.extend(related.iter().copied());
        let crate_name = &cycle.krate;
        let now = join(&cycle.files);
        let message = match related.as_slice() {
            [] => format!("new import cycle in {crate_name}: {now}"),
            [was] if was.files.is_superset(&cycle.files) => format!(
                "an import cycle in {crate_name} shrank (no longer in it: {}); \
                 record the progress with `cargo xtask cycles --update`",
                diff(&was.files, &cycle.files)
            ),
            [was] if was.files.is_subset(&cycle.files) => format!(
                "an import cycle in {crate_name} grew (newly in it: {}): {now}",
                diff(&cycle.files, &was.files)
            ),
            _ => format!(
                "an import cycle in {crate_name} changed: it is now {now}, \
                 the baseline has {}",
                related
                    .iter()
                    .map(|e| join(&e.files))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        };
        problems.push(message);
    }
    for entry in baseline {
        if !found.contains(entry) && !explained.contains(entry) {
            problems.push(format!(
                "the baseline cycle `{}: {}` is gone; delete its line \
                 (`cargo xtask cycles --update`)",
                entry.krate,
                join(&entry.files)
            ));
        }
    }
    problems
}

fn diff(a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    join(&a.difference(b).cloned().collect())
}

// ---------------------------------------------------------------------------
// Reading Rust source, as far as the check needs to.

/// What one file says about modules: its `mod x;` declarations, its inline
/// `mod x { }` blocks and the paths it writes, outside test code.
#[derive(Debug, Default)]
struct Parsed {
    mods: Vec<ModDecl>,
    /// Inline module blocks, as paths below the file's own module.
    inline: Vec<ModPath>,
    refs: Vec<Ref>,
}

/// `mod name;`, inside the inline modules `scope` of its file.
#[derive(Debug)]
struct ModDecl {
    scope: ModPath,
    name: String,
    /// The value of a `#[path = "..."]` attribute on it.
    path: Option<String>,
}

/// One path: a leaf of a `use` tree or a path written in code.
#[derive(Debug, PartialEq)]
struct Ref {
    /// The inline modules it is written in, below the file's module.
    scope: ModPath,
    segs: Vec<String>,
    glob: bool,
    alias: Option<String>,
    is_use: bool,
    /// A `use` with any `pub` visibility (a re-export).
    public_use: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal's text, kept for `#[path = "..."]` only.
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A number, character or lifetime: nothing to scan, but a token, so
    /// the tokens around it stay apart.
    Lit,
}

fn parse(text: &str) -> Parsed {
    let toks = lex(text);
    let mut scanner = Scanner {
        toks: &toks,
        pos: 0,
        out: Parsed::default(),
    };
    scanner.block(&[]);
    scanner.out
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Splits source text into tokens, dropping comments (doc comments too) and
/// keeping string, character and number literals as opaque tokens.
fn lex(text: &str) -> Vec<Tok> {
    let s: Vec<char> = text.chars().collect();
    let at = |i: usize| s.get(i).copied();
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        let next = at(i + 1);
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while at(i).is_some_and(|c| c != '\n') {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if at(i) == Some('/') && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if at(i) == Some('*') && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            let (end, body) = quoted(&s, i + 1);
            toks.push(Tok::Str(body));
            i = end;
        } else if c == '\'' {
            i = char_or_lifetime(&s, i);
            toks.push(Tok::Lit);
        } else if is_ident_start(c) {
            if let Some((end, tok)) = prefixed_literal(&s, i) {
                toks.push(tok);
                i = end;
                continue;
            }
            // A raw identifier `r#type` is the identifier `type`.
            if c == 'r' && next == Some('#') && at(i + 2).is_some_and(is_ident_start) {
                i += 2;
            }
            let start = i;
            while at(i).is_some_and(is_ident_continue) {
                i += 1;
            }
            toks.push(Tok::Ident(s[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while at(i).is_some_and(is_ident_continue) {
                i += 1;
            }
            toks.push(Tok::Lit);
        } else if c == ':' && next == Some(':') {
            toks.push(Tok::PathSep);
            i += 2;
        } else {
            toks.push(Tok::Punct(c));
            i += 1;
        }
    }
    toks
}

/// The end of a `"`-quoted string whose text starts at `start`, and its text.
fn quoted(s: &[char], start: usize) -> (usize, String) {
    let mut i = start;
    while i < s.len() {
        match s[i] {
            '\\' => i += 2,
            '"' => return (i + 1, s[start..i].iter().collect()),
            _ => i += 1,
        }
    }
    (s.len(), s[start.min(s.len())..].iter().collect())
}

/// Skips a character literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime
/// (`'a`, `'static`) starting at the quote at `i`.
fn char_or_lifetime(s: &[char], i: usize) -> usize {
    match (s.get(i + 1), s.get(i + 2)) {
        (Some('\\'), _) => {
            let mut j = i + 3;
            while j < s.len() && s[j] != '\'' {
                j += 1;
            }
            j + 1
        }
        (Some(_), Some('\'')) => i + 3,
        _ => {
            let mut j = i + 1;
            while j < s.len() && is_ident_continue(s[j]) {
                j += 1;
            }
            j
        }
    }
}

/// A literal with a prefix at `i`: `b"..."`, `c"..."`, `b'x'`, raw strings
/// `r"..."`, `r#"..."#`, `br##"..."##`, `cr"..."`.
fn prefixed_literal(s: &[char], i: usize) -> Option<(usize, Tok)> {
    let at = |k: usize| s.get(k).copied();
    let (raw, after) = match (at(i)?, at(i + 1)) {
        ('b' | 'c', Some('r')) => (true, i + 2),
        ('r', _) => (true, i + 1),
        ('b', Some('\'')) => return Some((char_or_lifetime(s, i + 1), Tok::Lit)),
        ('b' | 'c', Some('"')) => {
            let (end, body) = quoted(s, i + 2);
            return Some((end, Tok::Str(body)));
        }
        _ => return None,
    };
    if !raw {
        return None;
    }
    let mut hashes = 0;
    while at(after + hashes) == Some('#') {
        hashes += 1;
    }
    if at(after + hashes) != Some('"') {
        return None;
    }
    let start = after + hashes + 1;
    let mut j = start;
    while j < s.len() {
        if s[j] == '"' && (1..=hashes).all(|h| at(j + h) == Some('#')) {
            return Some((j + 1 + hashes, Tok::Str(s[start..j].iter().collect())));
        }
        j += 1;
    }
    Some((s.len(), Tok::Str(s[start..].iter().collect())))
}

struct Scanner<'t> {
    toks: &'t [Tok],
    pos: usize,
    out: Parsed,
}

impl<'t> Scanner<'t> {
    fn tok(&self) -> Option<&'t Tok> {
        self.toks.get(self.pos)
    }

    fn at(&self, k: usize) -> Option<&'t Tok> {
        self.toks.get(self.pos + k)
    }

    fn is(&self, k: usize, c: char) -> bool {
        self.at(k) == Some(&Tok::Punct(c))
    }

    fn ident(&self, k: usize) -> Option<&'t str> {
        match self.at(k) {
            Some(Tok::Ident(name)) => Some(name),
            _ => None,
        }
    }

    /// Scans the items and code of a block in the inline modules `scope`,
    /// up to and including the `}` that closes it (or the end of the file).
    fn block(&mut self, scope: &[String]) {
        // Braces opened (and not yet closed) inside this block.
        let mut depth = 0usize;
        // What the attributes before the next item said.
        let mut test_only = false;
        let mut path_attr: Option<String> = None;
        let mut public = false;
        while let Some(tok) = self.tok() {
            if self.is(0, '#') && (self.is(1, '[') || (self.is(1, '!') && self.is(2, '['))) {
                let inner = self.is(1, '!');
                let attr = self.attribute();
                if is_test_attribute(&attr) {
                    if inner {
                        // `#![cfg(test)]`: the rest of this module is test code.
                        self.skip_to_close();
                        return;
                    }
                    test_only = true;
                }
                if let [Tok::Ident(name), Tok::Punct('='), Tok::Str(value)] = attr.as_slice()
                    && name == "path"
                {
                    path_attr = Some(value.clone());
                }
                continue;
            }
            if test_only {
                self.skip_item();
                test_only = false;
                path_attr = None;
                public = false;
                continue;
            }
            match tok {
                Tok::Ident(word) if word == "pub" => {
                    self.pos += 1;
                    public = true;
                    if self.is(0, '(') {
                        // `pub(self)` is private; any other restriction
                        // still re-exports.
                        public = !(self.ident(1) == Some("self") && self.is(2, ')'));
                        self.skip_group();
                    }
                    continue;
                }
                Tok::Ident(word) if word == "use" => {
                    self.pos += 1;
                    let mut leaves = Vec::new();
                    self.use_tree(Vec::new(), &mut leaves);
                    for (segs, glob, alias) in leaves {
                        self.out.refs.push(Ref {
                            scope: scope.to_vec(),
                            segs,
                            glob,
                            alias,
                            is_use: true,
                            public_use: public,
                        });
                    }
                }
                Tok::Ident(word) if word == "mod" && self.ident(1).is_some() => {
                    let name = self.ident(1).unwrap_or_default().to_owned();
                    if self.is(2, ';') {
                        self.out.mods.push(ModDecl {
                            scope: scope.to_vec(),
                            name,
                            path: path_attr.take(),
                        });
                        self.pos += 3;
                    } else if self.is(2, '{') {
                        self.pos += 3;
                        let inner = concat(scope, &[name]);
                        self.out.inline.push(inner.clone());
                        self.block(&inner);
                    } else {
                        self.pos += 1;
                    }
                }
                Tok::Ident(_) if self.starts_path() => self.code_path(scope),
                Tok::Punct('{') => {
                    depth += 1;
                    self.pos += 1;
                }
                Tok::Punct('}') => {
                    self.pos += 1;
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                }
                _ => self.pos += 1,
            }
            public = false;
            path_attr = None;
        }
    }

    /// True at an identifier that begins a path (`a::b`), rather than
    /// continuing one (`x::a::b`) or naming a method (`.collect::<T>()`).
    fn starts_path(&self) -> bool {
        let before = self.pos.checked_sub(1).and_then(|k| self.toks.get(k));
        let continues = matches!(before, Some(Tok::PathSep | Tok::Punct('.')));
        !continues && self.at(1) == Some(&Tok::PathSep) && self.ident(2).is_some()
    }

    /// Records the path starting here (`a::b::c`, stopping before a
    /// turbofish or anything else that is not `:: ident`).
    fn code_path(&mut self, scope: &[String]) {
        let mut segs = Vec::new();
        while let Some(name) = self.ident(0) {
            segs.push(name.to_owned());
            self.pos += 1;
            if self.tok() == Some(&Tok::PathSep) && self.ident(1).is_some() {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.out.refs.push(Ref {
            scope: scope.to_vec(),
            segs,
            glob: false,
            alias: None,
            is_use: false,
            public_use: false,
        });
    }

    /// Reads a `use` tree into its leaves as (segments, glob, alias),
    /// each leaf's segments starting with `prefix`.
    fn use_tree(
        &mut self,
        mut segs: Vec<String>,
        out: &mut Vec<(Vec<String>, bool, Option<String>)>,
    ) {
        if self.tok() == Some(&Tok::PathSep) {
            // A leading `::` names an external crate.
            if segs.is_empty() {
                segs.push("::".to_owned());
            }
            self.pos += 1;
        }
        loop {
            match self.tok() {
                Some(Tok::Ident(name)) => {
                    segs.push(name.clone());
                    self.pos += 1;
                    if self.tok() == Some(&Tok::PathSep) {
                        self.pos += 1;
                        continue;
                    }
                    let mut alias = None;
                    if self.ident(0) == Some("as") {
                        alias = self.ident(1).map(str::to_owned);
                        self.pos += 2;
                    }
                    out.push((segs, false, alias));
                    return;
                }
                Some(Tok::Punct('*')) => {
                    self.pos += 1;
                    out.push((segs, true, None));
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.pos += 1;
                    loop {
                        match self.tok() {
                            None => return,
                            Some(Tok::Punct('}')) => {
                                self.pos += 1;
                                return;
                            }
                            Some(Tok::Punct(',')) => self.pos += 1,
                            Some(_) => {
                                let before = self.pos;
                                self.use_tree(segs.clone(), out);
                                if self.pos == before {
                                    self.pos += 1;
                                }
                            }
                        }
                    }
                }
                _ => return,
            }
        }
    }

    /// Reads `#[...]` or `#![...]` at the cursor and returns what is
    /// inside the brackets.
    fn attribute(&mut self) -> Vec<Tok> {
        while !self.is(0, '[') && self.tok().is_some() {
            self.pos += 1;
        }
        let start = self.pos + 1;
        self.skip_group();
        let end = self.pos.saturating_sub(1).max(start);
        self.toks[start.min(self.toks.len())..end.min(self.toks.len())].to_vec()
    }

    /// Skips a bracketed group (`(..)`, `[..]`, `{..}`) starting at the
    /// cursor, nested groups included.
    fn skip_group(&mut self) {
        let mut depth = 0usize;
        while let Some(tok) = self.tok() {
            self.pos += 1;
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']' | '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
            if depth == 0 {
                return;
            }
        }
    }

    /// Skips to just past the `}` that closes the current block.
    fn skip_to_close(&mut self) {
        let mut depth = 0usize;
        while let Some(tok) = self.tok() {
            self.pos += 1;
            match tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') if depth == 0 => return,
                Tok::Punct('}') => depth -= 1,
                _ => {}
            }
        }
    }

    /// Skips one item (or statement) of test code: to its `;`, or to the
    /// `}` closing its body for items that have one (`fn`, `mod`, `impl`,
    /// `struct S { }`, ...). A `const`, `static`, `type`, `use` or `let`
    /// ends only at its `;`, since its value may hold braces.
    fn skip_item(&mut self) {
        let keyword = self.toks[self.pos..]
            .iter()
            .zip(self.toks[self.pos..].iter().skip(1))
            .find_map(|(tok, next)| match tok {
                Tok::Ident(word) if word == "const" => {
                    let is_fn = matches!(next, Tok::Ident(n) if matches!(n.as_str(), "fn" | "unsafe" | "async" | "extern"));
                    Some(if is_fn { "fn" } else { "const" })
                }
                Tok::Ident(word)
                    if matches!(
                        word.as_str(),
                        "fn" | "mod" | "struct" | "enum" | "union" | "trait" | "impl" | "macro_rules"
                            | "use" | "static" | "type" | "let"
                    ) =>
                {
                    Some(word.as_str())
                }
                _ => None,
            });
        let semicolon_only = matches!(keyword, Some("const" | "static" | "type" | "use" | "let"));
        let mut depth = 0usize;
        while let Some(tok) = self.tok() {
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(c @ (')' | ']' | '}')) => {
                    // A closer we did not open ends the enclosing block,
                    // not this item.
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                    if depth == 0 && *c == '}' && !semicolon_only {
                        self.pos += 1;
                        return;
                    }
                }
                Tok::Punct(';') if depth == 0 => {
                    self.pos += 1;
                    return;
                }
                _ => {}
            }
            self.pos += 1;
        }
    }
}

/// `#[cfg(test)]` (or a `cfg` that needs `test`, short of `not(test)`) and
/// `#[test]`: the item is compiled for tests only.
fn is_test_attribute(attr: &[Tok]) -> bool {
    let ident = |word: &str| Tok::Ident(word.to_owned());
    match attr.first() {
        Some(Tok::Ident(word)) if word == "test" => attr.len() == 1,
        Some(Tok::Ident(word)) if word == "cfg" => {
            attr.contains(&ident("test"))
                && !attr.contains(&ident("not"))
                && !attr.contains(&ident("any"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch crate tree under the system temp folder, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        /// A workspace with one crate `demo` holding `files` (path under
        /// `src/`, text).
        fn new(files: &[(&str, &str)]) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "xtask-cycles-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            let krate = dir.join("crates").join("demo");
            fs::create_dir_all(krate.join("src")).unwrap();
            fs::write(krate.join("Cargo.toml"), "[package]\nname = \"demo\"\n").unwrap();
            fs::create_dir_all(dir.join("xtask").join("src")).unwrap();
            fs::write(
                dir.join("xtask").join("src").join("main.rs"),
                "fn main() {}\n",
            )
            .unwrap();
            for (path, text) in files {
                let path = krate.join("src").join(path);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, text).unwrap();
            }
            Scratch(dir)
        }

        fn cycles(&self) -> Vec<Cycle> {
            find_cycles(&self.0).unwrap()
        }

        /// The cycles as sorted file lists, for short assertions.
        fn cycle_files(&self) -> Vec<Vec<String>> {
            self.cycles()
                .into_iter()
                .map(|c| c.files.into_iter().collect())
                .collect()
        }

        fn graph(&self) -> Graph {
            crate_graph(&self.0.join("crates").join("demo")).unwrap()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn a_two_file_cycle_is_found_with_its_names() {
        let tree = Scratch::new(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::Bee;\npub struct Ay;\n"),
            (
                "b.rs",
                "pub struct Bee;\nfn f() -> crate::a::Ay { crate::a::Ay }\n",
            ),
        ]);
        let cycles = tree.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].krate, "demo");
        assert_eq!(
            cycles[0].to_string(),
            "demo: cycle of 2 files: src/a.rs src/b.rs\n  src/a.rs -> src/b.rs: Bee\n  src/b.rs -> src/a.rs: Ay\n"
        );
    }

    #[test]
    fn use_super_in_a_test_module_is_no_edge() {
        let tree = Scratch::new(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "use crate::b::Bee;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::b::Other;\n}\n",
            ),
            (
                "b.rs",
                "pub struct Bee;\n#[cfg(test)]\nmod tests {\n    use crate::a::*;\n    fn f() { super::super::a::g(); }\n}\n#[test]\nfn t() { crate::a::h(); }\n#[cfg(test)]\nuse crate::a::X;\n",
            ),
        ]);
        assert!(tree.cycles().is_empty(), "{:?}", tree.cycles());
        let graph = tree.graph();
        assert_eq!(graph["src/a.rs"].keys().collect::<Vec<_>>(), ["src/b.rs"]);
        assert!(graph["src/b.rs"].is_empty(), "{graph:?}");
    }

    #[test]
    fn an_inline_module_belongs_to_its_file() {
        // `super::` inside an inline module is the file's own module.
        let tree = Scratch::new(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "mod inner {\n    use super::Ay;\n    fn f() { crate::b::g(); }\n}\npub struct Ay;\n",
            ),
            ("b.rs", "pub fn g() {}\n"),
        ]);
        let graph = tree.graph();
        assert_eq!(graph["src/a.rs"].keys().collect::<Vec<_>>(), ["src/b.rs"]);
    }

    #[test]
    fn a_facade_re_export_is_no_edge_but_a_private_use_is() {
        let tree = Scratch::new(&[
            ("lib.rs", "pub mod host;\n"),
            (
                "host/mod.rs",
                "mod queued;\nmod slots;\npub use queued::Queue;\npub(crate) use self::slots::*;\npub struct Host;\n",
            ),
            ("host/queued.rs", "use super::Host;\npub struct Queue;\n"),
            ("host/slots.rs", "use super::Host;\npub struct Slot;\n"),
        ]);
        assert!(tree.cycles().is_empty(), "{:?}", tree.cycles());

        // The same parent importing privately depends on the child.
        let tree = Scratch::new(&[
            ("lib.rs", "pub mod host;\n"),
            (
                "host.rs",
                "mod queued;\nuse queued::helper;\npub struct Host;\n",
            ),
            ("host/queued.rs", "use super::Host;\npub fn helper() {}\n"),
        ]);
        assert_eq!(
            tree.cycle_files(),
            [files(&["src/host.rs", "src/host/queued.rs"])]
        );
    }

    #[test]
    fn comments_and_strings_name_nothing() {
        let tree = Scratch::new(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::Bee;\n"),
            (
                "b.rs",
                concat!(
                    "//! Uses crate::a::X, see [`crate::a::Y`].\n",
                    "/// crate::a::Z\n",
                    "// use crate::a::W;\n",
                    "/* crate::a::V /* nested crate::a::U */ still a comment crate::a::T */\n",
                    "pub struct Bee;\n",
                    "const S: &str = \"crate::a::S \\\" crate::a::R\";\n",
                    "const Q: &str = r#\"crate::a::Q \" crate::a::P\"#;\n",
                    "const O: &[u8] = br\"crate::a::O\";\n",
                    "const C: char = '\"'; const D: char = '\\''; fn f<'a>(x: &'a str) {}\n",
                    "const N: &str = \"crate::a::N\";\n",
                ),
            ),
        ]);
        assert!(tree.cycles().is_empty(), "{:?}", tree.cycles());
        assert!(tree.graph()["src/b.rs"].is_empty());
    }

    #[test]
    fn nested_use_trees_resolve_to_the_deepest_file() {
        let tree = Scratch::new(&[
            ("lib.rs", "mod a;\nmod model;\nmod tool;\n"),
            (
                "a.rs",
                "use crate::{\n    model::{self, openai::{OpenAi as Oa, Config}, Message},\n    tool::*,\n};\nuse self::super::tool as t;\nfn f() { model::scripted::run(); t::builtin::x(); }\n",
            ),
            (
                "model/mod.rs",
                "pub mod openai;\npub mod scripted;\npub struct Message;\n",
            ),
            ("model/openai.rs", "pub struct OpenAi;\n"),
            ("model/scripted.rs", "pub fn run() {}\n"),
            ("tool.rs", "pub mod builtin;\n"),
            ("tool/builtin.rs", "pub fn x() {}\n"),
        ]);
        let graph = tree.graph();
        let names = |to: &str| -> Vec<String> { graph["src/a.rs"][to].iter().cloned().collect() };
        assert_eq!(
            graph["src/a.rs"].keys().collect::<Vec<_>>(),
            [
                "src/model/mod.rs",
                "src/model/openai.rs",
                "src/model/scripted.rs",
                "src/tool.rs",
                "src/tool/builtin.rs"
            ]
        );
        assert_eq!(names("src/model/mod.rs"), ["Message", "model"]);
        assert_eq!(names("src/model/openai.rs"), ["Config", "OpenAi"]);
        assert_eq!(names("src/model/scripted.rs"), ["run"]);
        assert_eq!(names("src/tool.rs"), ["*", "tool"]);
        assert_eq!(names("src/tool/builtin.rs"), ["x"]);
    }

    #[test]
    fn paths_in_code_and_path_attributes_count() {
        let tree = Scratch::new(&[
            (
                "lib.rs",
                "mod a;\n#[path = \"other/bee.rs\"]\nmod b;\nmod c;\nfn root() { b::g(); }\n",
            ),
            // `c::h()` is no path from a.rs: `c` is a sibling, not a child.
            (
                "a.rs",
                "pub fn f() { let v: Vec<u8> = Vec::new().into_iter().collect::<Vec<_>>(); c::h(); crate::c::h(); }\n",
            ),
            ("other/bee.rs", "pub fn g() { super::a::f(); }\n"),
            ("c.rs", "pub fn h() {}\n"),
        ]);
        let graph = tree.graph();
        let edges = |from: &str| -> Vec<(String, Vec<String>)> {
            graph[from]
                .iter()
                .map(|(to, names)| (to.clone(), names.iter().cloned().collect()))
                .collect()
        };
        assert_eq!(
            edges("src/lib.rs"),
            [("src/other/bee.rs".to_owned(), files(&["g"]))]
        );
        assert_eq!(
            edges("src/other/bee.rs"),
            [("src/a.rs".to_owned(), files(&["f"]))]
        );
        assert_eq!(edges("src/a.rs"), [("src/c.rs".to_owned(), files(&["h"]))]);
    }

    fn entry(krate: &str, list: &[&str]) -> Entry {
        Entry {
            krate: krate.to_owned(),
            files: list.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    fn cycle(krate: &str, list: &[&str]) -> Cycle {
        Cycle {
            krate: krate.to_owned(),
            files: list.iter().map(|f| (*f).to_owned()).collect(),
            ties: Vec::new(),
        }
    }

    #[test]
    fn the_ratchet_passes_only_when_the_baseline_equals_the_tree() {
        let baseline = [entry("core", &["a.rs", "b.rs", "c.rs"])];
        // Equal passes.
        assert!(compare(&[cycle("core", &["a.rs", "b.rs", "c.rs"])], &baseline).is_empty());

        // A new cycle fails.
        let problems = compare(
            &[
                cycle("core", &["a.rs", "b.rs", "c.rs"]),
                cycle("cli", &["x.rs", "y.rs"]),
            ],
            &baseline,
        );
        assert_eq!(problems, ["new import cycle in cli: x.rs y.rs"]);

        // A grown cycle fails.
        let problems = compare(
            &[cycle("core", &["a.rs", "b.rs", "c.rs", "d.rs"])],
            &baseline,
        );
        assert_eq!(
            problems,
            ["an import cycle in core grew (newly in it: d.rs): a.rs b.rs c.rs d.rs"]
        );

        // A shrunk cycle fails until the baseline records it.
        let problems = compare(&[cycle("core", &["a.rs", "b.rs"])], &baseline);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("shrank (no longer in it: c.rs)"),
            "{problems:?}"
        );
        assert!(
            problems[0].contains("cargo xtask cycles --update"),
            "{problems:?}"
        );

        // A stale line fails.
        let problems = compare(&[], &baseline);
        assert_eq!(
            problems,
            [
                "the baseline cycle `core: a.rs b.rs c.rs` is gone; delete its line (`cargo xtask cycles --update`)"
            ]
        );
    }

    #[test]
    fn the_baseline_round_trips_and_rejects_bad_lines() {
        let cycles = [
            cycle("b", &["src/y.rs", "src/x.rs"]),
            cycle("a", &["src/z.rs", "src/w.rs"]),
        ];
        let text = render_baseline(&cycles);
        assert!(text.starts_with("# "), "{text}");
        assert!(text.contains("may\n# only shrink"), "{text}");
        assert!(
            text.ends_with("a: src/w.rs src/z.rs\nb: src/x.rs src/y.rs\n"),
            "{text}"
        );
        let entries = parse_baseline(&text).unwrap();
        assert!(compare(&cycles, &entries).is_empty());

        for bad in ["no colon here", "core: one.rs", ": a.rs b.rs"] {
            let err = parse_baseline(bad).unwrap_err().to_string();
            assert!(err.contains(":1:"), "{bad}: {err}");
        }
    }

    #[test]
    fn every_workspace_file_lexes_to_balanced_brackets() {
        // A literal or comment the lexer misreads swallows or exposes code;
        // in our own tree that shows up as unbalanced brackets.
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let root = crate::workspace_root();
        let mut sources = Vec::new();
        for (_, dir) in workspace_crates(&root).unwrap() {
            walk(&dir.join("src"), &mut sources);
        }
        assert!(sources.len() > 50, "{} files", sources.len());
        for path in sources {
            let mut open = Vec::new();
            for tok in lex(&fs::read_to_string(&path).unwrap()) {
                match tok {
                    Tok::Punct(c @ ('(' | '[' | '{')) => open.push(c),
                    Tok::Punct(c @ (')' | ']' | '}')) => {
                        let want = match c {
                            ')' => '(',
                            ']' => '[',
                            _ => '{',
                        };
                        assert_eq!(open.pop(), Some(want), "{}", path.display());
                    }
                    _ => {}
                }
            }
            assert!(open.is_empty(), "{}: unclosed {open:?}", path.display());
        }
    }

    #[test]
    fn the_workspace_matches_the_committed_baseline() {
        let root = crate::workspace_root();
        let found = find_cycles(&root).unwrap();
        // Guard against a vacuous pass: the tree must have been read.
        let core = crate_graph(&root.join("crates").join("bdk-core")).unwrap();
        assert!(
            core.len() > 20,
            "bdk-core has only {} module files",
            core.len()
        );
        let baseline = read_baseline(&root).unwrap();
        let problems = compare(&found, &baseline);
        assert!(
            problems.is_empty(),
            "module cycles differ from {BASELINE}:\n{}\n\ncycles found:\n{}",
            problems.join("\n"),
            found.iter().map(ToString::to_string).collect::<String>()
        );
    }
}
