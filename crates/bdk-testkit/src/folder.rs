//! Agent folders written into a temporary directory.
//!
//! [`AgentFolder`] starts from the smallest agent the scripted model runs
//! (`agent/agent.toml` with `model = "scripted"` and
//! `agent/instructions.md`) and adds files by concern: scripted rules,
//! tools, channels, schedules, hooks, or any path. Paths are relative to the
//! project root, the directory that holds `agent/`.

use std::path::Path;

use bdk_core::{Diagnostic, Project, discover};
use tempfile::TempDir;

/// The instructions of a test agent unless a test sets its own.
pub const INSTRUCTIONS: &str = "You are a test agent.\n";

/// Writes `(path, content)` pairs under `root`, creating parent directories.
/// Files keep the default mode; a test that needs another sets it itself.
pub fn write_files<P: AsRef<str>, C: AsRef<[u8]>>(root: &Path, files: &[(P, C)]) {
    for (path, content) in files {
        let p = root.join(path.as_ref());
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content.as_ref()).unwrap();
    }
}

/// An agent folder to write: files by path, later ones replacing earlier
/// ones at the same path.
#[derive(Clone, Debug)]
pub struct AgentFolder {
    files: Vec<(String, Vec<u8>)>,
}

impl Default for AgentFolder {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentFolder {
    /// A scripted agent with the default instructions (and, until
    /// [`AgentFolder::rules`], no rules file: the scripted model's default).
    pub fn new() -> Self {
        Self::empty()
            .agent_toml("model = \"scripted\"\n")
            .instructions(INSTRUCTIONS)
    }

    /// A folder with no file at all.
    pub fn empty() -> Self {
        Self { files: Vec::new() }
    }

    /// Any file, at `path` below the project root.
    pub fn file(mut self, path: impl Into<String>, content: impl Into<Vec<u8>>) -> Self {
        let path = path.into();
        self.files.retain(|(p, _)| *p != path);
        self.files.push((path, content.into()));
        self
    }

    /// Every pair of `files`, as [`AgentFolder::file`] each.
    pub fn files<P: AsRef<str>, C: AsRef<[u8]>>(self, files: &[(P, C)]) -> Self {
        files.iter().fold(self, |folder, (p, c)| {
            folder.file(p.as_ref(), c.as_ref().to_vec())
        })
    }

    /// `agent/agent.toml`.
    pub fn agent_toml(self, text: &str) -> Self {
        self.file("agent/agent.toml", text)
    }

    /// `agent/instructions.md`.
    pub fn instructions(self, text: &str) -> Self {
        self.file("agent/instructions.md", text)
    }

    /// `agent/scripted.toml`: the scripted model's rules (see [`crate::rules`]).
    pub fn rules(self, rules: &str) -> Self {
        self.file("agent/scripted.toml", rules)
    }

    /// A tool manifest, `agent/tools/<name>.toml`.
    pub fn tool(self, name: &str, manifest: &str) -> Self {
        self.file(format!("agent/tools/{name}.toml"), manifest)
    }

    /// A tool's program beside the manifests, `agent/tools/<file>`.
    pub fn tool_script(self, file: &str, script: &str) -> Self {
        self.file(format!("agent/tools/{file}"), script)
    }

    /// A channel manifest, `agent/channels/<name>.toml`.
    pub fn channel(self, name: &str, manifest: &str) -> Self {
        self.file(format!("agent/channels/{name}.toml"), manifest)
    }

    /// A schedule, `agent/schedules/<file>` (a `.md` with front matter or a
    /// `.toml`).
    pub fn schedule(self, file: &str, text: &str) -> Self {
        self.file(format!("agent/schedules/{file}"), text)
    }

    /// A hook manifest, `agent/hooks/<name>.toml`.
    pub fn hook(self, name: &str, manifest: &str) -> Self {
        self.file(format!("agent/hooks/{name}.toml"), manifest)
    }

    /// Writes the folder under `root`.
    pub fn write_to(&self, root: &Path) {
        write_files(root, &self.files);
    }

    /// Writes the folder into a fresh temporary directory.
    pub fn write(&self) -> TempDir {
        let dir = tempfile::tempdir().unwrap();
        self.write_to(dir.path());
        dir
    }

    /// Writes the folder and discovers it, failing on any error diagnostic.
    pub fn discover(&self) -> Discovered {
        let dir = self.write();
        let d = discover(dir.path());
        assert!(!d.has_errors(), "{:#?}", d.diagnostics);
        Discovered {
            project: d.project.unwrap(),
            diagnostics: d.diagnostics,
            dir,
        }
    }
}

/// A written and discovered agent folder.
pub struct Discovered {
    /// The project root (dropping it removes the folder).
    pub dir: TempDir,
    /// What discovery read.
    pub project: Project,
    /// Its warnings (errors fail [`AgentFolder::discover`]).
    pub diagnostics: Vec<Diagnostic>,
}
