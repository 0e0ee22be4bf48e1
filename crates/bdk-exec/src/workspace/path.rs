//! The front door: a relative path that came from outside (the model, a
//! `workspaceFiles` send, an MCP URI, a tool manifest) checked lexically
//! into a [`Rel`], or refused. Where the path leads on disk is not judged
//! here: [`Tree`](super::Tree) opens it beneath the tree's root, and the
//! kernel refuses every step that would leave it.

use std::path::{Component, Path, PathBuf};

use super::error::WorkspaceError;

/// A workspace-relative path that passed [`Rel::parse`]: no `..` above the
/// root, no `.` parts, `/`-separated UTF-8 parts. Empty names the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rel {
    /// The path as given, for messages.
    given: String,
    parts: Vec<String>,
}

impl Rel {
    /// Checks `rel` lexically; see [`resolve`] for what is refused.
    pub fn parse(rel: &str) -> Result<Self, WorkspaceError> {
        let invalid = |reason| WorkspaceError::InvalidPath {
            path: rel.to_owned(),
            reason,
        };
        if rel.is_empty() {
            return Err(invalid("the path is empty"));
        }
        if rel.contains('\0') {
            return Err(invalid("the path contains a NUL byte"));
        }
        if rel.contains('\\') {
            return Err(invalid("use '/' as the separator, not '\\'"));
        }
        let bytes = rel.as_bytes();
        if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
            return Err(invalid("drive prefixes are not allowed"));
        }
        if rel.starts_with('/') {
            return Err(invalid("the path must be relative to the workspace"));
        }
        // `a/../b` is fine, `a/../../b` is not.
        let mut parts: Vec<String> = Vec::new();
        for component in Path::new(rel).components() {
            match component {
                Component::Normal(part) => {
                    let Some(part) = part.to_str() else {
                        return Err(invalid("the path is not valid UTF-8"));
                    };
                    parts.push(part.to_owned());
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(WorkspaceError::Escapes {
                            path: rel.to_owned(),
                        });
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(invalid("the path must be relative to the workspace"));
                }
            }
        }
        Ok(Rel {
            given: rel.to_owned(),
            parts,
        })
    }

    /// The root itself.
    pub fn root() -> Self {
        Rel {
            given: ".".to_owned(),
            parts: Vec::new(),
        }
    }

    /// The path as it was given.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// The normalized path, `/`-separated; empty for the root.
    pub fn normalized(&self) -> String {
        join(&self.parts)
    }

    /// The last part, `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        self.parts.last().map(String::as_str)
    }

    /// True for the root itself.
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The parent directory, `None` for the root.
    pub(crate) fn parent(&self) -> Option<Rel> {
        let (_, parent) = self.parts.split_last()?;
        Some(Rel {
            given: join(parent),
            parts: parent.to_vec(),
        })
    }

    /// Each prefix from the first part to the whole path (`a`, `a/b`, ...).
    pub(crate) fn prefixes(&self) -> impl Iterator<Item = PathBuf> + '_ {
        (1..=self.parts.len()).map(|n| self.parts[..n].iter().collect())
    }

    /// The path to hand to a handle-relative call: `.` for the root.
    pub(crate) fn path(&self) -> PathBuf {
        if self.parts.is_empty() {
            PathBuf::from(".")
        } else {
            self.parts.iter().collect()
        }
    }
}

fn join(parts: &[String]) -> String {
    parts.join("/")
}

/// Resolves `rel` against the workspace `root` lexically, refusing anything
/// that could climb out of it.
///
/// Refused: the empty string, absolute paths, Windows drive prefixes and
/// backslashes, NUL bytes, non-UTF-8 parts and `..` that climbs above the
/// root. `.` components are dropped, so `"."` names the root itself. The
/// result may not exist yet.
///
/// This looks at no file: a path that runs through a symlink is only judged
/// when it is opened, beneath the root's handle ([`super::Tree`]), because
/// anything a tool can write may change between a check and an open. Use
/// the returned path for messages and grants, never to open a file in a
/// tree a tool can write.
pub fn resolve(root: &Path, rel: &str) -> Result<PathBuf, WorkspaceError> {
    let rel = Rel::parse(rel)?;
    let mut joined = root.to_path_buf();
    joined.extend(&rel.parts);
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_prefixes_and_parents() {
        let rel = Rel::parse("a/./b/../c/d").unwrap();
        assert_eq!(rel.normalized(), "a/c/d");
        assert_eq!(rel.given(), "a/./b/../c/d");
        assert_eq!(rel.file_name(), Some("d"));
        assert_eq!(rel.parent().unwrap().normalized(), "a/c");
        let prefixes: Vec<PathBuf> = rel.prefixes().collect();
        assert_eq!(
            prefixes,
            [
                PathBuf::from("a"),
                PathBuf::from("a/c"),
                PathBuf::from("a/c/d")
            ]
        );
        let root = Rel::parse(".").unwrap();
        assert!(root.is_root());
        assert_eq!(root.path(), PathBuf::from("."));
        assert_eq!(root.parent(), None);
    }
}
