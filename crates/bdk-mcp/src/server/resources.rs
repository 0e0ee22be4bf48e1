//! What an MCP caller may read, as resources (URIs in `uri.rs`): a
//! session's events as NDJSON, its artifacts, and files of its workspace.
//!
//! Ownership is the session API's: the session must be one the caller may
//! read (`Host::session` with the caller's read scope), and an artifact is
//! shown to its owner or to a caller that sees every session, as
//! `GET /v1/artifacts` does. Whatever the caller may not read answers exactly
//! like what does not exist, `-32002` "resource not found", so ids cannot be
//! probed. Workspace paths go through `bdk_core::workspace::resolve` (no
//! climbing out, no symlink that leads outside), and the file actually
//! opened is checked again, so a link swapped in after that check is caught
//! too.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bdk_core::host::{Host, HostError};
use bdk_core::workspace;
use bdk_events::SessionId;
use bdk_store::{ArtifactFilter, SessionRecord, StoreError};
use rmcp::ErrorData;
use rmcp::model::{CompletionInfo, Resource, ResourceContents, ResourceTemplate};
use serde_json::json;
use tokio::io::AsyncReadExt;

use super::completion;
use super::principal::Principal;
use super::uri::{self, ARTIFACT_TEMPLATE, EVENTS_TEMPLATE, ResourceUri, WORKSPACE_TEMPLATE};

/// How many sessions one `resources/list` page names.
pub(crate) const PAGE_SIZE: usize = 50;
/// The largest resource a read returns; larger ones are refused with a
/// pointer to the HTTP API.
pub(crate) const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

const NDJSON: &str = "application/x-ndjson";

/// The resource templates, for `resources/templates/list`.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(EVENTS_TEMPLATE, "session-events")
            .with_title("Session events")
            .with_description(
                "Every recorded event of a session you may read, one JSON envelope per line.",
            )
            .with_mime_type(NDJSON),
        ResourceTemplate::new(ARTIFACT_TEMPLATE, "session-artifact")
            .with_title("Session artifact")
            .with_description(
                "An artifact a session tagged; text as text, anything else as a base64 blob.",
            ),
        ResourceTemplate::new(WORKSPACE_TEMPLATE, "session-workspace-file")
            .with_title("Workspace file")
            .with_description(
                "A file in a session's workspace, by its path relative to the workspace.",
            ),
    ]
}

/// One page of `resources/list`: the events of the sessions the caller may
/// read, newest first, and the cursor of the next page.
pub(crate) async fn list(
    host: &Host,
    principal: &Principal,
    cursor: Option<&str>,
) -> Result<(Vec<Resource>, Option<String>), ErrorData> {
    let after = match cursor {
        None => None,
        Some(raw) => Some(SessionId::parse(raw).ok_or_else(|| {
            ErrorData::invalid_params("invalid cursor: pass back a nextCursor unchanged", None)
        })?),
    };
    let mut sessions = visible_sessions(host, principal).await?;
    // Ids sort by creation time, so this is newest first and a cursor (the
    // last id of a page) stays valid while sessions come and go.
    sessions.sort_by(|a, b| b.id.cmp(&a.id));
    let mut page: Vec<SessionRecord> = sessions
        .into_iter()
        .filter(|r| after.as_ref().is_none_or(|after| r.id < *after))
        .take(PAGE_SIZE + 1)
        .collect();
    let next = if page.len() > PAGE_SIZE {
        page.truncate(PAGE_SIZE);
        page.last().map(|r| r.id.to_string())
    } else {
        None
    };
    Ok((page.iter().map(events_resource).collect(), next))
}

fn events_resource(record: &SessionRecord) -> Resource {
    let title = record
        .title
        .clone()
        .unwrap_or_else(|| format!("Session {}", record.id));
    Resource::new(uri::events_uri(&record.id), format!("{} events", record.id))
        .with_title(title)
        .with_description(format!(
            "The events of session {} (channel {}, started {}) as NDJSON.",
            record.id,
            record.channel,
            record.created_at.to_rfc3339()
        ))
        .with_mime_type(NDJSON)
}

/// `resources/read`.
pub(crate) async fn read(
    host: &Host,
    principal: &Principal,
    raw: &str,
) -> Result<ResourceContents, ErrorData> {
    let parsed = uri::parse(raw).map_err(|uri::Refused(why)| not_found(raw, why))?;
    // The session first: nothing below may tell a caller anything about a
    // session it cannot read.
    readable(host, principal, parsed.session())
        .await?
        .ok_or_else(|| not_found(raw, "no such session"))?;
    match parsed {
        ResourceUri::Events(id) => events(host, principal, &id, raw).await,
        ResourceUri::Artifact { session, artifact } => {
            artifact_contents(host, principal, &session, &artifact, raw).await
        }
        ResourceUri::Workspace { session, path } => {
            let root = host.store().workspace_dir(&session);
            let (bytes, mime) = workspace_file(&root, &path)
                .await
                .map_err(|refusal| refusal.into_error(raw))?;
            Ok(contents(raw, &mime, bytes))
        }
    }
}

async fn events(
    host: &Host,
    principal: &Principal,
    id: &SessionId,
    raw: &str,
) -> Result<ResourceContents, ErrorData> {
    let envelopes = host
        .events(id, 0, principal.read_scope())
        .await
        .map_err(|e| host_error(e, raw, "no such session"))?;
    let mut buf = Vec::new();
    for envelope in &envelopes {
        bdk_events::ndjson::encode_into(envelope, &mut buf).map_err(|e| internal(raw, &e))?;
        if buf.len() as u64 > MAX_READ_BYTES {
            return Err(too_large(
                raw,
                "read it with GET /v1/session/:sessionId/events",
            ));
        }
    }
    let text = String::from_utf8(buf).map_err(|e| internal(raw, &e))?;
    Ok(ResourceContents::TextResourceContents {
        uri: raw.to_owned(),
        mime_type: Some(NDJSON.to_owned()),
        text,
        meta: None,
    })
}

async fn artifact_contents(
    host: &Host,
    principal: &Principal,
    session: &SessionId,
    artifact: &str,
    raw: &str,
) -> Result<ResourceContents, ErrorData> {
    let missing = || not_found(raw, "no such artifact in this session");
    let store = host.store();
    let record = store
        .artifact_get(artifact)
        .await
        .map_err(|e| store_error(e, raw, "no such artifact in this session"))?
        .filter(|r| {
            r.session_id.as_ref() == Some(session) && principal.owns(r.principal.as_deref())
        })
        .ok_or_else(missing)?;
    if record.size > MAX_READ_BYTES {
        return Err(too_large(
            raw,
            "download it with GET /v1/artifacts/:id/content",
        ));
    }
    let bytes = store
        .artifact_content(artifact)
        .await
        .map_err(|e| store_error(e, raw, "no such artifact in this session"))?
        .ok_or_else(missing)?;
    Ok(contents(raw, &record.content_type, bytes))
}

/// Why a workspace file is not served.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Not there, not a file, or not a path inside the workspace.
    NotFound(String),
    /// Larger than [`MAX_READ_BYTES`].
    TooLarge,
    /// The filesystem failed for another reason (logged, not shown).
    Io(std::io::Error),
}

impl Refusal {
    fn into_error(self, raw: &str) -> ErrorData {
        match self {
            Refusal::NotFound(why) => not_found(raw, &why),
            Refusal::TooLarge => too_large(raw, "files this large are not served over MCP"),
            Refusal::Io(e) => internal(raw, &e),
        }
    }
}

/// Reads `rel` inside the workspace `root`: its bytes and media type.
/// Refused: paths the workspace resolver refuses (climbing out, absolute,
/// NUL, backslashes, symlinks that lead outside), what is not a regular
/// file, and a file that turns out to live outside the workspace once open.
pub(crate) async fn workspace_file(root: &Path, rel: &str) -> Result<(Vec<u8>, String), Refusal> {
    let path = workspace::resolve(root, rel).map_err(|e| Refusal::NotFound(path_refusal(&e)))?;
    let no_file = || Refusal::NotFound("no such file in the session's workspace".to_owned());
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(e) if is_absent(&e) => return Err(no_file()),
        Err(e) => return Err(Refusal::Io(e)),
    };
    if !opened_inside(&file, root) {
        return Err(Refusal::NotFound(
            "the path leads outside the workspace".to_owned(),
        ));
    }
    let meta = file.metadata().await.map_err(Refusal::Io)?;
    if !meta.is_file() {
        return Err(no_file());
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(Refusal::TooLarge);
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(Refusal::Io)?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(Refusal::TooLarge);
    }
    let mime = mime_guess::from_path(rel).first_raw().unwrap_or_else(|| {
        if std::str::from_utf8(&bytes).is_ok() {
            "text/plain"
        } else {
            "application/octet-stream"
        }
    });
    Ok((bytes, mime.to_owned()))
}

/// Errors that mean "there is no file there for you" rather than a failure.
fn is_absent(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::PermissionDenied
    )
}

/// True when the open file lives inside `root`. The resolver checked the
/// path before it was opened; asking the kernel which file the descriptor
/// names closes the window in which a link could be swapped in. Where
/// `/proc` cannot answer, the resolver's check stands.
fn opened_inside(file: &tokio::fs::File, root: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if let (Ok(real), Ok(root)) = (std::fs::read_link(&link), root.canonicalize()) {
            return real.starts_with(root);
        }
    }
    let _ = (file, root);
    true
}

fn path_refusal(e: &workspace::WorkspaceError) -> String {
    match e {
        workspace::WorkspaceError::Escapes { .. } => {
            "the path leads outside the workspace".to_owned()
        }
        workspace::WorkspaceError::InvalidPath { reason, .. } => {
            format!("invalid workspace path: {reason}")
        }
        other => other.to_string(),
    }
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
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
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

// ---------------------------------------------------------------------------
// Completion of the templates' arguments.

/// `completion/complete` for an argument of one of the templates.
pub(crate) async fn complete(
    host: &Host,
    principal: &Principal,
    template: &str,
    argument: &str,
    prefix: &str,
    session: Option<&str>,
) -> Result<CompletionInfo, ErrorData> {
    let known = [EVENTS_TEMPLATE, ARTIFACT_TEMPLATE, WORKSPACE_TEMPLATE];
    if !known.contains(&template) {
        return Err(ErrorData::invalid_params(
            format!(
                "no resource template {template:?}; resources/templates/list names them ({})",
                known.join(", ")
            ),
            None,
        ));
    }
    match (template, argument) {
        (_, "sessionId") => {
            let mut sessions = visible_sessions(host, principal).await?;
            sessions.sort_by(|a, b| b.id.cmp(&a.id));
            Ok(completion::info(
                sessions
                    .into_iter()
                    .map(|r| r.id.to_string())
                    .filter(|id| completion::matches(id, prefix)),
            ))
        }
        (ARTIFACT_TEMPLATE, "artifactId") => {
            let Some(session) = readable_id(host, principal, session).await? else {
                return Ok(completion::info([]));
            };
            let filter = ArtifactFilter {
                session_id: Some(session),
                principal: principal.read_scope().map(str::to_owned),
                ..ArtifactFilter::default()
            };
            let artifacts = host
                .store()
                .artifact_list(&filter)
                .await
                .map_err(|e| store_error(e, template, "no such session"))?;
            Ok(completion::info(
                artifacts
                    .into_iter()
                    .filter(|r| principal.owns(r.principal.as_deref()))
                    .map(|r| r.id)
                    .filter(|id| completion::matches(id, prefix)),
            ))
        }
        (WORKSPACE_TEMPLATE, "path") => {
            let Some(session) = readable_id(host, principal, session).await? else {
                return Ok(completion::info([]));
            };
            let root = host.store().workspace_dir(&session);
            Ok(completion::info(workspace_entries(&root, prefix).await))
        }
        _ => Err(ErrorData::invalid_params(
            format!(
                "the template {template} has no argument `{}`",
                argument.chars().take(80).collect::<String>()
            ),
            None,
        )),
    }
}

/// The entries of the folder `prefix` names up to its last `/`, whose names
/// start with the rest, as paths relative to the workspace (folders end in
/// `/`), sorted. A prefix the resolver refuses completes to nothing.
pub(crate) async fn workspace_entries(root: &Path, prefix: &str) -> Vec<String> {
    let (folder, stem) = match prefix.rfind('/') {
        Some(i) => (&prefix[..=i], &prefix[i + 1..]),
        None => ("", prefix),
    };
    let dir = if folder.is_empty() {
        root.to_path_buf()
    } else {
        match workspace::resolve(root, folder.trim_end_matches('/')) {
            Ok(dir) => dir,
            Err(_) => return Vec::new(),
        }
    };
    let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !completion::matches(&name, stem) {
            continue;
        }
        let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
        out.push(format!("{folder}{name}{}", if is_dir { "/" } else { "" }));
        // Enough to fill an answer and know there were more.
        if out.len() > 4 * CompletionInfo::MAX_VALUES {
            break;
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// Sessions and errors.

async fn visible_sessions(
    host: &Host,
    principal: &Principal,
) -> Result<Vec<SessionRecord>, ErrorData> {
    host.list_sessions(principal.read_scope())
        .await
        .map_err(|e| host_error(e, "bdk://sessions/", "no such session"))
}

/// The session's record when the caller may read it, `None` when it does
/// not exist or belongs to someone else.
async fn readable(
    host: &Host,
    principal: &Principal,
    id: &SessionId,
) -> Result<Option<SessionRecord>, ErrorData> {
    match host.session(id, principal.read_scope()).await {
        Ok(record) => Ok(Some(record)),
        Err(HostError::SessionNotFound(_) | HostError::Forbidden(_)) => Ok(None),
        Err(e) => Err(host_error(e, id.as_str(), "no such session")),
    }
}

/// The session a completion's context names, when the caller may read it.
async fn readable_id(
    host: &Host,
    principal: &Principal,
    raw: Option<&str>,
) -> Result<Option<SessionId>, ErrorData> {
    let Some(id) = raw.and_then(SessionId::parse) else {
        return Ok(None);
    };
    Ok(readable(host, principal, &id).await?.map(|r| r.id))
}

/// `-32002`, as the MCP specification prescribes for a resource that is
/// not there; also for one the caller may not read.
fn not_found(raw: &str, why: &str) -> ErrorData {
    let shown: String = raw.chars().take(200).collect();
    ErrorData::resource_not_found(
        format!("resource not found: {shown}: {why}"),
        Some(json!({ "uri": shown })),
    )
}

fn too_large(raw: &str, instead: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "resource {} is larger than the {} MiB a read returns; {instead}",
            raw.chars().take(200).collect::<String>(),
            MAX_READ_BYTES / (1024 * 1024)
        ),
        None,
    )
}

fn host_error(e: HostError, raw: &str, missing: &str) -> ErrorData {
    match e {
        HostError::SessionNotFound(_) | HostError::Forbidden(_) => not_found(raw, missing),
        other => internal(raw, &other),
    }
}

fn store_error(e: StoreError, raw: &str, missing: &str) -> ErrorData {
    match e {
        StoreError::Invalid { .. } | StoreError::SessionNotFound(_) => not_found(raw, missing),
        other => internal(raw, &other),
    }
}

/// A failure of ours: the details go to the log, not to the client.
fn internal(raw: &str, e: &dyn std::fmt::Display) -> ErrorData {
    tracing::warn!(uri = %raw.chars().take(200).collect::<String>(), error = %e, "mcp resource read failed");
    ErrorData::internal_error("failed to read the resource", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<(Vec<u8>, String), Refusal>) -> String {
        match result {
            Err(Refusal::NotFound(why)) => why,
            Err(other) => panic!("unexpected refusal {other:?}"),
            Ok((bytes, _)) => panic!("served {}", String::from_utf8_lossy(&bytes)),
        }
    }

    #[tokio::test]
    async fn workspace_reads_stay_inside_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("notes")).unwrap();
        std::fs::write(root.join("notes/today.md"), "# Today\n").unwrap();
        std::fs::write(root.join("image.png"), [0x89, b'P', b'N', b'G', 0xff]).unwrap();
        std::fs::write(root.join("data"), [0xff, 0xfe]).unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret.txt"), root.join("out")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink("notes/today.md", root.join("inside")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();

        let (bytes, mime) = workspace_file(&root, "notes/today.md").await.unwrap();
        assert_eq!(
            (bytes.as_slice(), mime.as_str()),
            (&b"# Today\n"[..], "text/markdown")
        );
        let (_, mime) = workspace_file(&root, "image.png").await.unwrap();
        assert_eq!(mime, "image/png");
        let (_, mime) = workspace_file(&root, "data").await.unwrap();
        assert_eq!(mime, "application/octet-stream");
        // A link that stays inside is followed; `a/../b` that stays inside is fine.
        let (bytes, _) = workspace_file(&root, "inside").await.unwrap();
        assert_eq!(bytes, b"# Today\n");
        assert!(
            workspace_file(&root, "notes/../notes/today.md")
                .await
                .is_ok()
        );

        for (rel, why) in [
            ("../secret.txt", "outside"),
            ("notes/../../secret.txt", "outside"),
            ("/etc/passwd", "relative"),
            ("out", "outside"),
            ("up/secret.txt", "outside"),
            ("loop", "outside"),
            ("a\\..\\secret.txt", "separator"),
            ("x\0y", "NUL"),
            ("C:/x", "drive"),
            ("notes", "no such file"),
            ("missing.txt", "no such file"),
            ("notes/today.md/x", "no such file"),
        ] {
            let got = refused(workspace_file(&root, rel).await);
            assert!(got.contains(why), "{rel:?}: {got}");
        }
        // A workspace that was never created has no files.
        let got = refused(workspace_file(&tmp.path().join("none"), "a.txt").await);
        assert!(got.contains("no such file"), "{got}");
    }

    #[tokio::test]
    async fn completion_lists_workspace_entries_by_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("notes/deep")).unwrap();
        std::fs::write(root.join("notes/today.md"), "x").unwrap();
        std::fs::write(root.join("notes/tomorrow.md"), "x").unwrap();
        std::fs::write(root.join("readme.txt"), "x").unwrap();
        assert_eq!(workspace_entries(&root, "").await, ["notes/", "readme.txt"]);
        assert_eq!(
            workspace_entries(&root, "notes/to").await,
            ["notes/today.md", "notes/tomorrow.md"]
        );
        assert_eq!(workspace_entries(&root, "notes/d").await, ["notes/deep/"]);
        assert!(workspace_entries(&root, "../").await.is_empty());
        assert!(workspace_entries(&root, "/etc/").await.is_empty());
        assert!(workspace_entries(&root, "missing/").await.is_empty());
    }

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
}
