//! Name rules of the file-system engine: which names from outside are
//! accepted, how they map to paths under the state root, and the atomic
//! write used for every small record file.
//!
//! Session ids, call ids and artifact ids must already be safe path segments
//! and are used verbatim. File paths are relative `/`-separated paths whose
//! every segment is checked. Key-value namespaces and keys are opaque strings,
//! so they are percent-encoded into names that can never traverse, never
//! collide on a case-insensitive file system, and never exceed a file-name
//! limit (long encodings are split into nested directories).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bdk_events::ids::is_safe_segment;

use crate::{Result, StoreError};

/// Longest accepted key-value key, in bytes. Encoded, a key grows up to three
/// times, and the whole path must stay under the usual 4096-byte path limit.
pub(crate) const MAX_KEY_LEN: usize = 1024;
/// Longest accepted key-value namespace, in bytes (it is one directory name).
pub(crate) const MAX_NAMESPACE_LEN: usize = 64;
/// Longest accepted file path, in bytes.
pub(crate) const MAX_FILE_PATH_LEN: usize = 1024;
/// Longest segment of a file path: the common file-name limit.
const MAX_SEGMENT_LEN: usize = 255;
/// Encoded names longer than this are split into directories of this length,
/// which keeps every component under the 255-byte file-name limit with room
/// for the `.json` suffix.
const CHUNK: usize = 200;

pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        what,
        reason: reason.into(),
    }
}

/// Accepts an id that is used verbatim as one path segment.
pub(crate) fn safe_id<'a>(what: &'static str, id: &'a str) -> Result<&'a str> {
    if is_safe_segment(id) {
        Ok(id)
    } else {
        Err(invalid(
            what,
            format!("{id:?} is not a safe name (1-128 of A-Z a-z 0-9 _ - ., not . or ..)"),
        ))
    }
}

/// Checks a relative file path and returns its segments.
pub(crate) fn file_segments(path: &str) -> Result<Vec<&str>> {
    const WHAT: &str = "path";
    if path.is_empty() {
        return Err(invalid(WHAT, "empty path"));
    }
    if path.len() > MAX_FILE_PATH_LEN {
        return Err(invalid(
            WHAT,
            format!("longer than {MAX_FILE_PATH_LEN} bytes"),
        ));
    }
    if path.starts_with('/') {
        return Err(invalid(WHAT, format!("{path:?} is absolute")));
    }
    if path.contains('\\') {
        return Err(invalid(WHAT, format!("{path:?} contains a backslash")));
    }
    if path.contains('\0') {
        return Err(invalid(WHAT, "contains a NUL byte"));
    }
    let segments: Vec<&str> = path.split('/').collect();
    for seg in &segments {
        match *seg {
            "" => return Err(invalid(WHAT, format!("{path:?} has an empty segment"))),
            "." | ".." => {
                return Err(invalid(WHAT, format!("{path:?} has a {seg:?} segment")));
            }
            s if s.len() > MAX_SEGMENT_LEN => {
                return Err(invalid(
                    WHAT,
                    format!("a segment is longer than {MAX_SEGMENT_LEN} bytes"),
                ));
            }
            _ => {}
        }
    }
    Ok(segments)
}

/// Splits a file-list prefix into the directory to walk (checked like a file
/// path) and the whole prefix to match.
pub(crate) fn file_prefix_dir(prefix: &str) -> Result<Vec<&str>> {
    if prefix.contains('\0') {
        return Err(invalid("path prefix", "contains a NUL byte"));
    }
    if prefix.contains('\\') || prefix.starts_with('/') {
        return Err(invalid(
            "path prefix",
            format!("{prefix:?} is absolute or contains a backslash"),
        ));
    }
    match prefix.rfind('/') {
        None => Ok(Vec::new()),
        Some(cut) => file_segments(&prefix[..cut]).map_err(|e| match e {
            StoreError::Invalid { reason, .. } => invalid("path prefix", reason),
            other => other,
        }),
    }
}

/// Checks a key-value namespace or key: any UTF-8 text except empty, NUL, or
/// longer than `max` bytes. NUL is refused so every engine can store the same
/// keys (PostgreSQL text cannot hold it).
pub(crate) fn kv_name(what: &'static str, s: &str, max: usize) -> Result<()> {
    if s.is_empty() {
        return Err(invalid(what, "empty"));
    }
    if s.contains('\0') {
        return Err(invalid(what, "contains a NUL byte"));
    }
    if s.len() > max {
        return Err(invalid(what, format!("longer than {max} bytes")));
    }
    Ok(())
}

/// Percent-encodes every byte outside `a-z 0-9 _ -`. Upper-case letters are
/// encoded too, so two keys differing only in case never share a file on a
/// case-insensitive file system; escapes use upper-case hex digits, which
/// keeps the encoding unambiguous under case folding.
pub(crate) fn encode(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

/// Reverses [`encode`]; `None` for a name this engine did not write.
pub(crate) fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                if !hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
                {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// The path of an encoded name under `dir`, split into directories of
/// [`CHUNK`] bytes when long, with `suffix` on the last component.
pub(crate) fn chunked_path(dir: &Path, encoded: &str, suffix: &str) -> PathBuf {
    let mut path = dir.to_path_buf();
    let mut rest = encoded;
    // The encoding is ASCII, so any byte offset is a char boundary.
    while rest.len() > CHUNK {
        let (head, tail) = rest.split_at(CHUNK);
        path.push(head);
        rest = tail;
    }
    path.push(format!("{rest}{suffix}"));
    path
}

/// Collects every name written by [`chunked_path`] under `dir` whose last
/// component ends with `suffix`, decoded. Names this engine did not write are
/// skipped.
pub(crate) fn walk_chunked(dir: &Path, suffix: &str) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, acc)) = stack.pop() {
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let kind = entry.file_type()?;
            if kind.is_dir() && name.len() == CHUNK {
                stack.push((entry.path(), format!("{acc}{name}")));
            } else if kind.is_file()
                && let Some(stem) = name.strip_suffix(suffix)
                && let Some(decoded) = decode(&format!("{acc}{stem}"))
            {
                out.push(decoded);
            }
        }
    }
    Ok(out)
}

/// Removes the now-empty directories between `path`'s parent and `stop`
/// (exclusive). Failures are ignored: a leftover empty directory is harmless.
pub(crate) fn prune_empty_parents(path: &Path, stop: &Path) {
    let mut cur = path.parent();
    while let Some(dir) = cur {
        if dir == stop || !dir.starts_with(stop) || fs::remove_dir(dir).is_err() {
            break;
        }
        cur = dir.parent();
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temp-file name unique within this process and among processes sharing
/// the state root.
pub(crate) fn temp_name(stem: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{stem}.{}.{n}.tmp", std::process::id())
}

/// Writes `bytes` to `target` atomically: a temp file in `temp_dir` (which
/// must be on the same file system), fsynced, renamed over the target, and the
/// target's directory fsynced so the rename itself survives a power cut.
pub(crate) fn write_atomic(temp_dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(temp_dir, target, bytes, true)
}

/// [`write_atomic`] without any sync: a reader still sees the old content or
/// the new, but nothing is durable. For files whose durability the journal
/// provides (see `journal`).
pub(crate) fn replace_unsynced(temp_dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(temp_dir, target, bytes, false)
}

fn replace(temp_dir: &Path, target: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let stem = target
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.len() <= 64)
        .unwrap_or("write");
    let temp = temp_dir.join(temp_name(stem));
    let result = write_temp(&temp, bytes, durable).and_then(|()| {
        fs::rename(&temp, target)?;
        match target.parent() {
            Some(parent) if durable => sync_dir(parent),
            _ => Ok(()),
        }
    });
    if result.is_err() {
        // Best effort: the temp file is garbage either way and `open` sweeps
        // old ones, so a failed removal changes nothing.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Creates `temp` (which must not exist) holding `bytes`, fsynced when `sync`.
fn write_temp(temp: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(temp)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_all()?;
    }
    Ok(())
}

/// Writes `bytes` to `target` only if nothing is there yet; false when the
/// target already existed (then nothing changes). The content is written and
/// fsynced in a temp file first and then hard-linked into place: `link(2)`
/// refuses an existing name atomically, across threads and processes, so of
/// several concurrent writers exactly one succeeds, and a reader never sees a
/// half-written file.
pub(crate) fn write_new(temp_dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<bool> {
    let temp = temp_dir.join(temp_name("new"));
    let result = (|| {
        write_temp(&temp, bytes, true)?;
        match fs::hard_link(&temp, target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        if let Some(parent) = target.parent() {
            sync_dir(parent)?;
        }
        Ok(true)
    })();
    // The temp name is only a staging link: it goes whatever happened.
    let _ = fs::remove_file(&temp);
    result
}

/// Fsyncs a directory so entries created or renamed in it are durable. Only
/// meaningful (and only possible) on Unix; elsewhere the rename is trusted.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// True when the error says a path component is missing or is not a directory.
pub(crate) fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_stays_one_safe_name() {
        for key in [
            "plain",
            "../x",
            "/etc/passwd",
            "a/../../b",
            "Mixed Case",
            "%41",
            "ünï ✓",
            ".",
            "..",
        ] {
            let enc = encode(key);
            assert!(
                enc.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b"_-%ABCDEF".contains(&b)),
                "{enc}"
            );
            assert_eq!(decode(&enc).as_deref(), Some(key));
        }
        assert_ne!(encode("A"), encode("a"));
        assert_eq!(decode("A"), None);
        assert_eq!(decode("%4"), None);
        assert_eq!(decode("%4a"), None);
        assert_eq!(decode("a.json"), None);
    }

    #[test]
    fn long_names_split_into_directories() {
        let key = "x".repeat(450);
        let path = chunked_path(Path::new("/r"), &encode(&key), ".json");
        let parts: Vec<_> = path.iter().skip(2).map(|p| p.len()).collect();
        assert_eq!(parts, vec![200, 200, 55]);
    }

    #[test]
    fn file_paths() {
        assert_eq!(file_segments("a/b.txt").unwrap(), vec!["a", "b.txt"]);
        assert_eq!(file_segments("..x/y").unwrap(), vec!["..x", "y"]);
        for bad in [
            "",
            "/a",
            "../x",
            "a/../../b",
            "a//b",
            "a/",
            "./a",
            "a/./b",
            "a\\b",
            "a\0b",
            "..",
        ] {
            assert!(file_segments(bad).is_err(), "{bad:?}");
        }
        assert_eq!(file_prefix_dir("").unwrap(), Vec::<&str>::new());
        assert_eq!(file_prefix_dir("docs/re").unwrap(), vec!["docs"]);
        assert!(file_prefix_dir("../").is_err());
        assert!(file_prefix_dir("/etc").is_err());
    }
}
