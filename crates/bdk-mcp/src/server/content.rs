//! What every resource reader shares: the read limit, text-or-blob
//! contents, media types guessed from file names, files read beneath a root
//! they may not leave, and the JSON-RPC errors of a refused read.
//!
//! A leaf: the session resources (`resources.rs`), the agent's declared
//! ones (`declared.rs`) and prompt attachments (`prompts.rs`) all use it,
//! and it names none of them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bdk_core::workspace::{Rel, TreeRoot, WorkspaceError};
use rmcp::ErrorData;
use rmcp::model::ResourceContents;
use serde_json::json;

/// The largest resource a read returns; larger ones are refused with a
/// pointer to the HTTP API. The same limit bounds what an agent folder may
/// declare, so a declared file that `bdk validate` accepted is served.
pub(crate) const MAX_READ_BYTES: u64 = bdk_core::project::MAX_RESOURCE_BYTES;

/// How a refusal names the place a file was looked for.
pub(crate) struct Place {
    /// "the path leads outside …".
    pub(crate) outside: &'static str,
    /// "no such file in …".
    pub(crate) within: &'static str,
}

/// A session's workspace.
pub(crate) const WORKSPACE: Place = Place {
    outside: "the workspace",
    within: "the session's workspace",
};

/// The agent folder (declared resources).
pub(crate) const AGENT_FOLDER: Place = Place {
    outside: "the agent folder",
    within: "the agent folder",
};

/// Why a file is not served.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Not there, not a file, or not a path inside the root.
    NotFound(String),
    /// Larger than [`MAX_READ_BYTES`].
    TooLarge,
    /// The filesystem failed for another reason (logged, not shown).
    Io(std::io::Error),
}

impl Refusal {
    pub(crate) fn into_error(self, raw: &str) -> ErrorData {
        match self {
            Refusal::NotFound(why) => not_found(raw, &why),
            Refusal::TooLarge => too_large(raw, "files this large are not served over MCP"),
            Refusal::Io(e) => internal(raw, &e),
        }
    }
}

/// Reads `rel` inside the tree `root`: its bytes and media type (guessed
/// from the name when the file says nothing, see [`guess_mime`]). The file
/// is opened beneath the root's handle (`bdk_core::workspace::Tree`), so a
/// symlink swapped in at any moment cannot lead the read out. Refused: paths
/// the workspace's front door refuses (climbing out, absolute, NUL,
/// backslashes), symlinks that lead outside (absolute, climbing out, magic,
/// looping), what is not a regular file (a FIFO, socket or device is
/// named), and files larger than [`MAX_READ_BYTES`].
pub(crate) async fn read_confined(
    root: &TreeRoot,
    rel: &str,
    place: &Place,
) -> Result<(Vec<u8>, String), Refusal> {
    let parsed = Rel::parse(rel).map_err(|e| refusal(e, place))?;
    let bytes = root
        .open(move |tree| tree.read(&parsed, MAX_READ_BYTES))
        .await
        .map_err(|e| refusal(e, place))?
        .ok_or(Refusal::TooLarge)?;
    let mime = guess_mime(rel, &bytes);
    Ok((bytes, mime))
}

/// Why a confined read was refused, in the words of `place`.
fn refusal(e: WorkspaceError, place: &Place) -> Refusal {
    match e {
        WorkspaceError::Escapes { .. } => {
            Refusal::NotFound(format!("the path leads outside {}", place.outside))
        }
        WorkspaceError::InvalidPath { reason, .. } => {
            Refusal::NotFound(format!("invalid path: {reason}"))
        }
        e @ WorkspaceError::NotAFile { .. } => Refusal::NotFound(e.to_string()),
        WorkspaceError::Io { source, .. } if is_absent(&source) => {
            Refusal::NotFound(format!("no such file in {}", place.within))
        }
        WorkspaceError::Io { source, .. } => Refusal::Io(source),
        other => Refusal::Io(std::io::Error::other(other.to_string())),
    }
}

/// The media type of a file named `name`: from its extension, else
/// `text/plain` for UTF-8 and `application/octet-stream` for the rest.
pub(crate) fn guess_mime(name: &str, bytes: &[u8]) -> String {
    mime_guess::from_path(name)
        .first_raw()
        .unwrap_or_else(|| {
            if std::str::from_utf8(bytes).is_ok() {
                "text/plain"
            } else {
                "application/octet-stream"
            }
        })
        .to_owned()
}

/// Errors that mean "there is no file there for you" rather than a failure.
fn is_absent(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::NotFound
            | ErrorKind::NotADirectory
            | ErrorKind::IsADirectory
            | ErrorKind::PermissionDenied
    )
}

/// A resource's contents: text for textual media types holding UTF-8,
/// otherwise a base64 blob.
pub(crate) fn contents(uri: &str, mime: &str, bytes: Vec<u8>) -> ResourceContents {
    if is_textual(mime) {
        match String::from_utf8(bytes) {
            Ok(text) => {
                return ResourceContents::TextResourceContents {
                    uri: uri.to_owned(),
                    mime_type: Some(mime.to_owned()),
                    text,
                    meta: None,
                };
            }
            Err(e) => {
                return blob(uri, mime, &e.into_bytes());
            }
        }
    }
    blob(uri, mime, &bytes)
}

fn blob(uri: &str, mime: &str, bytes: &[u8]) -> ResourceContents {
    ResourceContents::BlobResourceContents {
        uri: uri.to_owned(),
        mime_type: Some(mime.to_owned()),
        blob: STANDARD.encode(bytes),
        meta: None,
    }
}

/// Media types whose content is text.
pub(crate) fn is_textual(mime: &str) -> bool {
    let essence = essence(mime);
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/x-ndjson"
                | "application/jsonl"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/javascript"
                | "application/x-sh"
                | "application/sql"
        )
}

/// The media type without its parameters, lowercase.
pub(crate) fn essence(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// `-32002`, as the MCP specification prescribes for a resource that is
/// not there; also for one the caller may not read.
pub(crate) fn not_found(raw: &str, why: &str) -> ErrorData {
    let shown: String = raw.chars().take(200).collect();
    ErrorData::resource_not_found(
        format!("resource not found: {shown}: {why}"),
        Some(json!({ "uri": shown })),
    )
}

/// A resource larger than a read returns; `instead` says where to get it.
pub(crate) fn too_large(raw: &str, instead: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "resource {} is larger than the {} MiB a read returns; {instead}",
            raw.chars().take(200).collect::<String>(),
            MAX_READ_BYTES / (1024 * 1024)
        ),
        None,
    )
}

/// A failure of ours: the details go to the log, not to the client.
pub(crate) fn internal(raw: &str, e: &dyn std::fmt::Display) -> ErrorData {
    tracing::warn!(uri = %raw.chars().take(200).collect::<String>(), error = %e, "mcp resource read failed");
    ErrorData::internal_error("failed to read the resource", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_types_are_text_and_the_rest_is_base64() {
        let wire = |c: ResourceContents| serde_json::to_value(c).unwrap();
        let text = wire(contents(
            "u",
            "text/markdown; charset=utf-8",
            b"# Hi".to_vec(),
        ));
        assert_eq!(text["text"], "# Hi");
        assert_eq!(text["mimeType"], "text/markdown; charset=utf-8");
        let json = wire(contents("u", "application/vnd.api+json", b"{}".to_vec()));
        assert_eq!(json["text"], "{}");
        let png = wire(contents("u", "image/png", vec![0x89, 0x50, 0x4e, 0x47]));
        assert_eq!(png["blob"], "iVBORw==");
        assert!(png.get("text").is_none());
        // A text type whose bytes are not UTF-8 still arrives intact.
        let broken = wire(contents("u", "text/plain", vec![0xff]));
        assert_eq!(broken["blob"], "/w==");
    }

    #[test]
    fn media_types_are_guessed_from_names_then_content() {
        assert_eq!(guess_mime("a.png", b"x"), "image/png");
        assert_eq!(guess_mime("notes.md", b"x"), "text/markdown");
        assert_eq!(guess_mime("README", b"plain"), "text/plain");
        assert_eq!(
            guess_mime("data", &[0xff, 0xfe]),
            "application/octet-stream"
        );
        assert_eq!(essence(" Image/PNG ; q=1"), "image/png");
    }

    #[tokio::test]
    async fn confined_reads_name_their_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("agent");
        std::fs::create_dir_all(&dir).unwrap();
        let root = bdk_core::workspace::Trees::new().root(&dir);
        let refused = |r: Result<(Vec<u8>, String), Refusal>| match r {
            Err(Refusal::NotFound(why)) => why,
            other => panic!("{other:?}"),
        };
        let why = refused(read_confined(&root, "../x", &AGENT_FOLDER).await);
        assert_eq!(why, "the path leads outside the agent folder");
        let why = refused(read_confined(&root, "x.md", &AGENT_FOLDER).await);
        assert_eq!(why, "no such file in the agent folder");
        let why = refused(read_confined(&root, "x.md", &WORKSPACE).await);
        assert_eq!(why, "no such file in the session's workspace");
    }
}
