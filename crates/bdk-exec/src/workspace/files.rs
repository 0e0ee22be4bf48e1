//! A send's `workspaceFiles`: checked before the send is accepted, written
//! before its turn, all or nothing as far as the paths go.

use std::collections::BTreeMap;

use super::error::WorkspaceError;
use super::path::Rel;
use super::trees::TreeRoot;

/// Checks every path of a send's `workspaceFiles` without writing anything,
/// so a send can be refused before it is accepted: lexically (see
/// [`super::resolve`]), then against the workspace as it is now (a path
/// whose existing part leads out through a symlink is refused). The writes
/// themselves open beneath the workspace whatever changes in between.
pub async fn check_files(
    root: &TreeRoot,
    files: &BTreeMap<String, String>,
) -> Result<(), WorkspaceError> {
    let rels = parse_all(files.keys())?;
    if rels.is_empty() {
        return Ok(());
    }
    root.blocking(move |path, owner| {
        // No workspace yet: nothing in it can lead anywhere.
        let Ok(tree) = super::Tree::open(path, owner) else {
            return Ok(());
        };
        rels.iter().try_for_each(|rel| tree.check_beneath(rel))
    })
    .await
}

/// Writes a send's `workspaceFiles` (relative path -> UTF-8 content) into the
/// workspace, creating it and parent directories.
///
/// Every path is checked (as [`check_files`] does) before anything is
/// written, so one bad path leaves the workspace untouched.
pub async fn write_files(
    root: &TreeRoot,
    files: &BTreeMap<String, String>,
) -> Result<(), WorkspaceError> {
    let rels = parse_all(files.keys())?;
    if rels.is_empty() {
        return Ok(());
    }
    let contents: Vec<(Rel, Vec<u8>)> = rels
        .into_iter()
        .zip(files.values().map(|c| c.clone().into_bytes()))
        .collect();
    root.create(move |tree| {
        contents
            .iter()
            .try_for_each(|(rel, _)| tree.check_beneath(rel))?;
        contents
            .iter()
            .try_for_each(|(rel, bytes)| tree.write(rel, bytes))
    })
    .await
}

fn parse_all<'a>(paths: impl Iterator<Item = &'a String>) -> Result<Vec<Rel>, WorkspaceError> {
    paths.map(|rel| Rel::parse(rel)).collect()
}
