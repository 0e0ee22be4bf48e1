//! The key-value, file and artifact areas of the file-system engine:
//! `kv/<namespace>/<key>.json`, `files/<path>` and
//! `artifacts/<id>.json` + `artifacts/<id>.bin`.
//!
//! Every write is atomic (temp file under `tmp/`, fsync, rename), so a reader
//! sees the old or the new content, never a mix, and a crash leaves at worst
//! an orphaned temp file that [`super::FsStore::open`] sweeps. These functions
//! block; the store calls them from blocking tasks.

use std::cmp::Reverse;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::paths::{
    self, MAX_KEY_LEN, MAX_NAMESPACE_LEN, chunked_path, encode, invalid, is_missing,
    prune_empty_parents, safe_id, walk_chunked, write_atomic, write_new,
};
use crate::{ArtifactFilter, ArtifactRecord, Result, StoreError};

/// The roots of the three areas.
pub(crate) struct Areas {
    pub(crate) kv: PathBuf,
    pub(crate) files: PathBuf,
    pub(crate) artifacts: PathBuf,
    pub(crate) tmp: PathBuf,
}

fn corrupt(path: &Path, e: impl ToString) -> StoreError {
    StoreError::Corrupt {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Reads a file, `None` when it (or a parent) does not exist or is a directory.
fn read_opt(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if is_missing(&e) || e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes a file, `false` when there was none.
fn remove_opt(path: &Path) -> io::Result<bool> {
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if is_missing(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates the parent directories of `target`, reporting a path
/// that runs through an existing file as invalid rather than as an I/O error.
fn make_parents(target: &Path) -> Result<()> {
    let Some(parent) = target.parent() else {
        return Ok(());
    };
    match fs::create_dir_all(parent) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::NotADirectory
                || e.kind() == io::ErrorKind::AlreadyExists =>
        {
            Err(invalid("path", "a parent of the path is a file"))
        }
        Err(e) => Err(e.into()),
    }
}

impl Areas {
    fn kv_path(&self, namespace: &str, key: &str) -> Result<(PathBuf, PathBuf)> {
        paths::kv_name("namespace", namespace, MAX_NAMESPACE_LEN)?;
        paths::kv_name("key", key, MAX_KEY_LEN)?;
        let ns_dir = self.kv.join(encode(namespace));
        let path = chunked_path(&ns_dir, &encode(key), ".json");
        Ok((ns_dir, path))
    }

    pub(crate) fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<Value>> {
        let (_, path) = self.kv_path(namespace, key)?;
        match read_opt(&path)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| corrupt(&path, e)),
        }
    }

    pub(crate) fn kv_put(&self, namespace: &str, key: &str, value: &Value) -> Result<()> {
        let (_, path) = self.kv_path(namespace, key)?;
        let bytes = serde_json::to_vec(value)?;
        make_parents(&path)?;
        write_atomic(&self.tmp, &path, &bytes)?;
        Ok(())
    }

    pub(crate) fn kv_put_if_absent(
        &self,
        namespace: &str,
        key: &str,
        value: &Value,
    ) -> Result<bool> {
        let (_, path) = self.kv_path(namespace, key)?;
        let bytes = serde_json::to_vec(value)?;
        make_parents(&path)?;
        Ok(write_new(&self.tmp, &path, &bytes)?)
    }

    pub(crate) fn kv_delete(&self, namespace: &str, key: &str) -> Result<bool> {
        let (ns_dir, path) = self.kv_path(namespace, key)?;
        let existed = remove_opt(&path)?;
        if existed {
            prune_empty_parents(&path, &ns_dir);
        }
        Ok(existed)
    }

    pub(crate) fn kv_list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>> {
        paths::kv_name("namespace", namespace, MAX_NAMESPACE_LEN)?;
        if prefix.contains('\0') {
            return Err(invalid("key prefix", "contains a NUL byte"));
        }
        let mut keys = walk_chunked(&self.kv.join(encode(namespace)), ".json")?;
        keys.retain(|k| k.starts_with(prefix));
        keys.sort();
        Ok(keys)
    }

    fn file_path(&self, path: &str) -> Result<PathBuf> {
        let mut out = self.files.clone();
        out.extend(paths::file_segments(path)?);
        Ok(out)
    }

    pub(crate) fn file_put(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let target = self.file_path(path)?;
        make_parents(&target)?;
        if target.is_dir() {
            return Err(invalid("path", format!("{path:?} is a directory")));
        }
        write_atomic(&self.tmp, &target, bytes)?;
        Ok(())
    }

    pub(crate) fn file_get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let target = self.file_path(path)?;
        Ok(read_opt(&target)?)
    }

    pub(crate) fn file_delete(&self, path: &str) -> Result<bool> {
        let target = self.file_path(path)?;
        let existed = remove_opt(&target)?;
        if existed {
            prune_empty_parents(&target, &self.files);
        }
        Ok(existed)
    }

    pub(crate) fn file_list(&self, prefix: &str) -> Result<Vec<String>> {
        let dir_segments = paths::file_prefix_dir(prefix)?;
        let mut start = self.files.clone();
        start.extend(&dir_segments);
        let mut out = Vec::new();
        let base = dir_segments.join("/");
        let mut stack = vec![(start, base)];
        while let Some((dir, rel)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if is_missing(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            for entry in entries {
                let entry = entry?;
                // Names that are not UTF-8 were not written through the store.
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let path = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    stack.push((entry.path(), path));
                } else if kind.is_file() && path.starts_with(prefix) {
                    out.push(path);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn artifact_paths(&self, id: &str) -> Result<(PathBuf, PathBuf)> {
        let id = safe_id("artifact id", id)?;
        Ok((
            self.artifacts.join(format!("{id}.json")),
            self.artifacts.join(format!("{id}.bin")),
        ))
    }

    pub(crate) fn artifact_put(&self, record: &ArtifactRecord, content: &[u8]) -> Result<()> {
        let (meta, bin) = self.artifact_paths(&record.id)?;
        let json = serde_json::to_vec_pretty(record)?;
        // Content first, record last: the record is the commit point, so a
        // crash in between leaves no record pointing at missing content.
        write_atomic(&self.tmp, &bin, content)?;
        write_atomic(&self.tmp, &meta, &json)?;
        Ok(())
    }

    pub(crate) fn artifact_get(&self, id: &str) -> Result<Option<ArtifactRecord>> {
        let (meta, _) = self.artifact_paths(id)?;
        match read_opt(&meta)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| corrupt(&meta, e)),
        }
    }

    pub(crate) fn artifact_content(&self, id: &str) -> Result<Option<Vec<u8>>> {
        let (meta, bin) = self.artifact_paths(id)?;
        if !meta.is_file() {
            return Ok(None);
        }
        Ok(read_opt(&bin)?)
    }

    pub(crate) fn artifact_list(&self, filter: &ArtifactFilter) -> Result<Vec<ArtifactRecord>> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(&self.artifacts) {
            Ok(entries) => entries,
            Err(e) if is_missing(&e) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let is_record = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .is_some_and(bdk_events::ids::is_safe_segment);
            if !is_record {
                continue;
            }
            let record: ArtifactRecord = match fs::read(&path)
                .map_err(StoreError::from)
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| corrupt(&path, e)))
            {
                Ok(record) => record,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "skipping unreadable artifact record");
                    continue;
                }
            };
            let keep = filter
                .session_id
                .as_ref()
                .is_none_or(|s| record.session_id.as_ref() == Some(s))
                && filter.kind.as_ref().is_none_or(|k| &record.kind == k)
                && filter
                    .principal
                    .as_ref()
                    .is_none_or(|p| record.principal.as_ref() == Some(p));
            if keep {
                out.push(record);
            }
        }
        out.sort_by(|a, b| {
            (Reverse(a.created_at), Reverse(&a.id)).cmp(&(Reverse(b.created_at), Reverse(&b.id)))
        });
        if let Some(limit) = filter.limit {
            out.truncate(limit);
        }
        Ok(out)
    }
}
