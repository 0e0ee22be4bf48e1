//! What an MCP caller may read, as resources (URIs in `uri.rs`): a
//! session's events as NDJSON, its artifacts, and files of its workspace.
//!
//! Ownership is the session API's: the session must be one the caller may
//! read (`Host::session` with the caller's read scope), and an artifact is
//! shown to its owner or to a caller that sees every session, as
//! `GET /v1/artifacts` does. Whatever the caller may not read answers exactly
//! like what does not exist, `-32002` "resource not found", so ids cannot be
//! probed. Workspace paths pass the workspace's front door
//! (`bdk_core::workspace::Rel`: no climbing out) and are opened beneath the
//! workspace's handle (`bdk_core::workspace::Tree`), so no symlink, even one
//! swapped in at the last moment, leads a read or a listing outside.

use bdk_core::host::{Host, HostError};
use bdk_core::workspace::{Kind, Rel, TreeRoot};
use bdk_events::SessionId;
use bdk_store::{ArtifactFilter, SessionRecord, StoreError};
use rmcp::ErrorData;
use rmcp::model::{CompletionInfo, Resource, ResourceContents, ResourceTemplate};

use super::completion;
use super::content::{
    self, MAX_READ_BYTES, Refusal, WORKSPACE, contents, internal, not_found, too_large,
};
use super::principal::Principal;
use super::uri::{self, ARTIFACT_TEMPLATE, EVENTS_TEMPLATE, ResourceUri, WORKSPACE_TEMPLATE};

/// How many sessions one `resources/list` page names.
pub(crate) const PAGE_SIZE: usize = 50;

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
            let root = host.workspace(&session);
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

/// Reads `rel` inside the workspace `root`: its bytes and media type,
/// confined as `content::read_confined` confines every read.
pub(crate) async fn workspace_file(
    root: &TreeRoot,
    rel: &str,
) -> Result<(Vec<u8>, String), Refusal> {
    content::read_confined(root, rel, &WORKSPACE).await
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
            let root = host.workspace(&session);
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
pub(crate) async fn workspace_entries(root: &TreeRoot, prefix: &str) -> Vec<String> {
    let (folder, stem) = match prefix.rfind('/') {
        Some(i) => (&prefix[..=i], &prefix[i + 1..]),
        None => ("", prefix),
    };
    let dir = if folder.is_empty() {
        Rel::root()
    } else {
        match Rel::parse(folder.trim_end_matches('/')) {
            Ok(dir) => dir,
            Err(_) => return Vec::new(),
        }
    };
    let (folder, stem) = (folder.to_owned(), stem.to_owned());
    // Listed beneath the workspace's handle; an entry is reported as it is
    // (a symlink to a folder is not shown as one), never followed.
    let listed = root
        .open(move |tree| {
            let entries =
                tree.dir(&dir)?
                    .entries()
                    .map_err(|e| bdk_core::workspace::WorkspaceError::Io {
                        action: "list",
                        path: tree.root().to_path_buf(),
                        source: e,
                    })?;
            let mut out = Vec::new();
            for entry in entries {
                let Ok(name) = entry.name.into_string() else {
                    continue;
                };
                if !completion::matches(&name, &stem) {
                    continue;
                }
                let slash = if entry.kind == Kind::Dir { "/" } else { "" };
                out.push(format!("{folder}{name}{slash}"));
                // Enough to fill an answer and know there were more.
                if out.len() > 4 * CompletionInfo::MAX_VALUES {
                    break;
                }
            }
            Ok(out)
        })
        .await;
    let mut out = listed.unwrap_or_default();
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

    fn tree(path: &std::path::Path) -> TreeRoot {
        bdk_core::workspace::Trees::new().root(path)
    }

    #[tokio::test]
    async fn workspace_reads_stay_inside_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        let root = tree(&dir);
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        std::fs::write(dir.join("notes/today.md"), "# Today\n").unwrap();
        std::fs::write(dir.join("image.png"), [0x89, b'P', b'N', b'G', 0xff]).unwrap();
        std::fs::write(dir.join("data"), [0xff, 0xfe]).unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret.txt"), dir.join("out")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.join("up")).unwrap();
        std::os::unix::fs::symlink("notes/today.md", dir.join("inside")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());

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
            (
                "pipe",
                "pipe is a FIFO (named pipe); only regular files can be read",
            ),
        ] {
            let got = refused(workspace_file(&root, rel).await);
            assert!(got.contains(why), "{rel:?}: {got}");
        }
        // A workspace that was never created has no files.
        let got = refused(workspace_file(&tree(&tmp.path().join("none")), "a.txt").await);
        assert!(got.contains("no such file"), "{got}");
    }

    #[tokio::test]
    async fn completion_lists_workspace_entries_by_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        let root = tree(&dir);
        std::fs::create_dir_all(dir.join("notes/deep")).unwrap();
        std::fs::write(dir.join("notes/today.md"), "x").unwrap();
        std::fs::write(dir.join("notes/tomorrow.md"), "x").unwrap();
        std::fs::write(dir.join("readme.txt"), "x").unwrap();
        // A link out is not entered, even when it names a folder.
        std::os::unix::fs::symlink(tmp.path(), dir.join("notes/up")).unwrap();
        assert_eq!(workspace_entries(&root, "").await, ["notes/", "readme.txt"]);
        assert_eq!(
            workspace_entries(&root, "notes/to").await,
            ["notes/today.md", "notes/tomorrow.md"]
        );
        assert_eq!(workspace_entries(&root, "notes/d").await, ["notes/deep/"]);
        assert!(workspace_entries(&root, "../").await.is_empty());
        assert!(workspace_entries(&root, "/etc/").await.is_empty());
        assert!(workspace_entries(&root, "missing/").await.is_empty());
        assert_eq!(workspace_entries(&root, "notes/u").await, ["notes/up"]);
        assert!(workspace_entries(&root, "notes/up/").await.is_empty());
    }
}
