//! The continuation-token index of the file-system engine:
//! `token-index/<token>.tok` is a symbolic link whose target is the id of the
//! session that holds the token (the name percent-encoded and split like
//! key-value keys; the suffix keeps a name from ever equalling a split
//! directory's).
//!
//! The index lives on disk so that memory does not grow with the number of
//! sessions a state root has ever had. It is a hint: a lookup reads the
//! record it points to and believes it only when the record still holds the
//! token, so stale entries (a rotation interrupted by a crash, a removal that
//! failed) are harmless. What must never happen is a current token without
//! its entry, so an entry is made durable before the record that makes its
//! token current: a link carries its target in the inode, so one `fsync` of
//! its directory makes it durable, and a token is one entry in one directory
//! unless it is very long.
//!
//! A token that names its own session (the `http:<session id>.<random>`
//! tokens the host issues, see [`bdk_events::ids::new_http_token`]) gets no
//! entry: a lookup reads the record of the session it names instead. That
//! saves a directory `fsync` on every create and every rotation of such a
//! token. Tokens of any other shape (channel tokens, tokens a caller pinned,
//! tokens issued before this rule) are indexed as before.
//!
//! The same tokens, once rotated, are kept in a link beside the session's
//! record (`sessions/<id>/token`, see [`read_current`]) instead of in the
//! record, so a rotation is one directory `fsync` rather than two.
//!
//! State roots written before the index existed get it built once, on the
//! first lookup, from the records; `.built` marks it complete. These
//! functions block; the store calls them from blocking tasks.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bdk_events::ids::http_token_session;

use super::paths::{chunked_path, encode, is_missing, sync_dir, temp_name};

/// Longest indexed token, in bytes: like a key-value key, so its path stays
/// under the usual path limit. Longer tokens are refused on create and
/// rotation, and never found.
pub(crate) const MAX_TOKEN_LEN: usize = 1024;

/// The marker of a complete index.
const BUILT: &str = ".built";

/// True when `token` names session `id` itself, so a lookup finds the session
/// from the token alone and the index keeps no entry for it.
pub(crate) fn names_its_session(token: &str, id: &str) -> bool {
    http_token_session(token).is_some_and(|named| named.as_str() == id)
}

/// The name of the link beside a session's record that holds its current
/// token when that token names the session.
const CURRENT: &str = "token";

/// The current token of the session in `dir`, when it is kept in the link
/// beside the record rather than in the record: `token` is a symbolic link
/// whose target is the token's random part and the time of the rotation,
/// `<32 hex>@<unix ms>`. Short enough to live in the link's inode, so one
/// `fsync` of the directory makes a rotation durable, where rewriting
/// `session.json` takes two (the temp file and the directory). Returns the
/// token and when it was set; `None` without a link. A link of another shape
/// is an error: the store never writes one, and ignoring it could bring back
/// an older token.
pub(crate) fn read_current(dir: &Path, id: &str) -> io::Result<Option<(String, i64)>> {
    let target = match fs::read_link(current_path(dir)) {
        Ok(target) => target,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let malformed = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the token link of session {id} is malformed"),
        )
    };
    let target = target.to_str().ok_or_else(malformed)?;
    let (random, millis) = target.split_once('@').ok_or_else(malformed)?;
    let token = format!("http:{id}.{random}");
    let millis = millis.parse::<i64>().map_err(|_| malformed())?;
    if !names_its_session(&token, id) {
        return Err(malformed());
    }
    Ok(Some((token, millis)))
}

/// The token link of the session in `dir`.
pub(crate) fn current_path(dir: &Path) -> PathBuf {
    dir.join(CURRENT)
}

/// Removes the token link of the session in `dir`, so the record's own token
/// counts again. Not synced: true when there was one, and the caller then
/// syncs `dir` (or lets the record's own write do it).
pub(crate) fn remove_current(dir: &Path) -> io::Result<bool> {
    match fs::remove_file(current_path(dir)) {
        Ok(()) => Ok(true),
        Err(e) if is_missing(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The index directory of a state root and its temp area (same file system).
pub(crate) struct TokenIndex {
    pub(crate) dir: PathBuf,
    pub(crate) tmp: PathBuf,
}

impl TokenIndex {
    fn path(&self, token: &str) -> PathBuf {
        chunked_path(&self.dir, &encode(token), ".tok")
    }

    /// True once the index holds every stored session's token.
    pub(crate) fn is_built(&self) -> bool {
        fs::symlink_metadata(self.dir.join(BUILT)).is_ok()
    }

    /// Points `token` at session `id`, replacing any entry, durably: when
    /// this returns, a crash cannot lose the entry. A token that names its
    /// own session needs no entry and gets none.
    pub(crate) fn link(&self, token: &str, id: &str) -> io::Result<()> {
        if names_its_session(token, id) {
            return Ok(());
        }
        let target = self.path(token);
        let created = self.place(&target, id, true)?;
        // A new chunk directory of a long token must survive too.
        for dir in created.iter().map(PathBuf::as_path).chain(target.parent()) {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// Puts an entry in place; `replace = false` keeps an existing one.
    /// Returns the directories it had to create.
    fn place(&self, target: &Path, id: &str, replace: bool) -> io::Result<Vec<PathBuf>> {
        let mut created = Vec::new();
        if let Some(parent) = target.parent() {
            let mut missing = Vec::new();
            let mut dir = Some(parent);
            while let Some(d) = dir {
                if d == self.dir || d.exists() {
                    break;
                }
                missing.push(d.to_path_buf());
                dir = d.parent();
            }
            fs::create_dir_all(parent)?;
            // Each new directory's own entry lives in its parent.
            created.extend(
                missing
                    .iter()
                    .filter_map(|d| d.parent().map(Path::to_path_buf)),
            );
        }
        if !replace {
            return match std::os::unix::fs::symlink(id, target) {
                Ok(()) => Ok(created),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(created),
                Err(e) => Err(e),
            };
        }
        // Made beside the target's name in the temp area, then renamed over
        // it: a lookup sees the old entry or the new one, never none.
        let temp = self.tmp.join(temp_name("token"));
        std::os::unix::fs::symlink(id, &temp)?;
        if let Err(e) = fs::rename(&temp, target) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        Ok(created)
    }

    /// The session id `token` points at, if any.
    pub(crate) fn lookup(&self, token: &str) -> io::Result<Option<String>> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Ok(None);
        }
        match fs::read_link(self.path(token)) {
            Ok(target) => Ok(target.into_os_string().into_string().ok()),
            Err(e) if is_missing(&e) || e.kind() == io::ErrorKind::InvalidInput => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes the entry of `token` if it points at `id`. Not made durable:
    /// an entry that comes back after a crash is only a stale hint.
    pub(crate) fn unlink(&self, token: &str, id: &str) -> io::Result<()> {
        if names_its_session(token, id) || self.lookup(token)?.as_deref() != Some(id) {
            return Ok(());
        }
        let path = self.path(token);
        match fs::remove_file(&path) {
            Ok(()) => {
                super::paths::prune_empty_parents(&path, &self.dir);
                Ok(())
            }
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Builds the index of a state root written before it existed: one entry
    /// per record, never replacing an entry (those were written since, by
    /// creates and rotations, and are newer), then the marker. Durable once
    /// the marker is: every directory written is synced first.
    pub(crate) fn build(&self, records: &[(String, String)]) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let mut dirs = BTreeSet::new();
        for (token, id) in records {
            if token.is_empty() || token.len() > MAX_TOKEN_LEN || names_its_session(token, id) {
                continue;
            }
            let target = self.path(token);
            dirs.extend(self.place(&target, id, false)?);
            dirs.extend(target.parent().map(Path::to_path_buf));
        }
        for dir in &dirs {
            sync_dir(dir)?;
        }
        fs::write(self.dir.join(BUILT), b"")?;
        fs::File::open(self.dir.join(BUILT))?.sync_all()?;
        sync_dir(&self.dir)
    }
}
