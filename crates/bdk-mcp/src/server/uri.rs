//! The URIs of the resources the agent's MCP server offers, published as
//! RFC 6570 templates:
//!
//! - `bdk://sessions/{sessionId}/events`: the session's events as NDJSON;
//! - `bdk://sessions/{sessionId}/artifacts/{artifactId}`: an artifact;
//! - `bdk://sessions/{sessionId}/workspace/{+path}`: a workspace file.
//!
//! Parsing is purely lexical: it names a resource or refuses the URI. Who
//! may read it, and whether a workspace path stays inside the workspace, is
//! decided by the reader (`resources.rs`), which checks the session first.

use bdk_events::SessionId;
use bdk_events::ids::is_safe_segment;

/// What every resource URI starts with.
pub(crate) const PREFIX: &str = "bdk://sessions/";
/// The template of a session's events.
pub(crate) const EVENTS_TEMPLATE: &str = "bdk://sessions/{sessionId}/events";
/// The template of a session's artifacts.
pub(crate) const ARTIFACT_TEMPLATE: &str = "bdk://sessions/{sessionId}/artifacts/{artifactId}";
/// The template of a session's workspace files (reserved expansion, so the
/// path keeps its slashes).
pub(crate) const WORKSPACE_TEMPLATE: &str = "bdk://sessions/{sessionId}/workspace/{+path}";

/// Longer URIs name nothing this server offers.
const MAX_URI_BYTES: usize = 4096;

/// A resource this server offers, as named by its URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ResourceUri {
    /// `…/events`.
    Events(SessionId),
    /// `…/artifacts/{artifactId}`.
    Artifact {
        /// The session the artifact belongs to.
        session: SessionId,
        /// The artifact id, a safe path segment.
        artifact: String,
    },
    /// `…/workspace/{+path}`.
    Workspace {
        /// The session whose workspace it is.
        session: SessionId,
        /// The percent-decoded path, not yet confined to the workspace.
        path: String,
    },
}

impl ResourceUri {
    /// The session the resource belongs to.
    pub(crate) fn session(&self) -> &SessionId {
        match self {
            ResourceUri::Events(session)
            | ResourceUri::Artifact { session, .. }
            | ResourceUri::Workspace { session, .. } => session,
        }
    }
}

/// Why a URI names no resource of this server; a fragment for a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) &'static str);

/// The events URI of a session.
pub(crate) fn events_uri(session: &SessionId) -> String {
    format!("{PREFIX}{session}/events")
}

/// Reads a resource URI.
pub(crate) fn parse(uri: &str) -> Result<ResourceUri, Refused> {
    if uri.len() > MAX_URI_BYTES {
        return Err(Refused("the URI is too long"));
    }
    let Some(rest) = uri.strip_prefix(PREFIX) else {
        return Err(Refused(
            "the agent declares no such resource, and session resources start with bdk://sessions/",
        ));
    };
    let (session, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let session = SessionId::parse(session).ok_or(Refused("not a session id"))?;
    if tail == "events" {
        return Ok(ResourceUri::Events(session));
    }
    if let Some(artifact) = tail.strip_prefix("artifacts/") {
        if !is_safe_segment(artifact) {
            return Err(Refused("not an artifact id"));
        }
        return Ok(ResourceUri::Artifact {
            session,
            artifact: artifact.to_owned(),
        });
    }
    if let Some(raw) = tail.strip_prefix("workspace/") {
        if raw.contains(['?', '#']) {
            return Err(Refused("a workspace path takes no query or fragment"));
        }
        let path = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| Refused("the workspace path is not UTF-8 once decoded"))?;
        if path.is_empty() {
            return Err(Refused("the workspace path is empty"));
        }
        return Ok(ResourceUri::Workspace {
            session,
            path: path.into_owned(),
        });
    }
    Err(Refused(
        "a session offers events, artifacts/{artifactId} and workspace/{+path}",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SES: &str = "ses_01jabcdefghjkmnpqrstvwxyz0";

    fn session() -> SessionId {
        SessionId::parse(SES).unwrap()
    }

    fn workspace(path: &str) -> ResourceUri {
        ResourceUri::Workspace {
            session: session(),
            path: path.to_owned(),
        }
    }

    #[test]
    fn names_each_kind_of_resource() {
        assert_eq!(
            parse(&format!("bdk://sessions/{SES}/events")),
            Ok(ResourceUri::Events(session()))
        );
        assert_eq!(
            events_uri(&session()),
            format!("bdk://sessions/{SES}/events")
        );
        assert_eq!(
            parse(&format!("bdk://sessions/{SES}/artifacts/art_1")),
            Ok(ResourceUri::Artifact {
                session: session(),
                artifact: "art_1".to_owned()
            })
        );
        assert_eq!(
            parse(&format!("bdk://sessions/{SES}/workspace/notes/today.md")),
            Ok(workspace("notes/today.md"))
        );
        assert_eq!(
            parse(&format!("bdk://sessions/{SES}/events"))
                .unwrap()
                .session(),
            &session()
        );
    }

    #[test]
    fn workspace_paths_are_percent_decoded_once() {
        let uri = |p: &str| format!("bdk://sessions/{SES}/workspace/{p}");
        assert_eq!(parse(&uri("a%20b.txt")), Ok(workspace("a b.txt")));
        assert_eq!(parse(&uri("caf%C3%A9.md")), Ok(workspace("café.md")));
        // Decoded, an encoded climb is a climb: the workspace resolver
        // refuses it after the session check.
        assert_eq!(parse(&uri("%2e%2e/secret")), Ok(workspace("../secret")));
        assert_eq!(parse(&uri("%2Fetc%2Fpasswd")), Ok(workspace("/etc/passwd")));
        // Decoding happens once: `%252e` is a file literally named `%2e`.
        assert_eq!(parse(&uri("%252e%252e")), Ok(workspace("%2e%2e")));
    }

    #[test]
    fn refuses_what_names_no_resource() {
        let long = format!("bdk://sessions/{SES}/workspace/{}", "a".repeat(5000));
        let cases = [
            ("", "start with"),
            ("file:///etc/passwd", "start with"),
            ("bdk://sessions/", "not a session id"),
            ("bdk://sessions/ses_/events", "not a session id"),
            ("bdk://sessions/../events", "not a session id"),
            ("bdk://sessions/tool_abc/events", "not a session id"),
            (&format!("bdk://sessions/{SES}"), "a session offers"),
            (&format!("bdk://sessions/{SES}/"), "a session offers"),
            (
                &format!("bdk://sessions/{SES}/events/x"),
                "a session offers",
            ),
            (
                &format!("bdk://sessions/{SES}/artifacts/"),
                "not an artifact id",
            ),
            (
                &format!("bdk://sessions/{SES}/artifacts/.."),
                "not an artifact id",
            ),
            (
                &format!("bdk://sessions/{SES}/artifacts/a/b"),
                "not an artifact id",
            ),
            (
                &format!("bdk://sessions/{SES}/artifacts/%2e%2e"),
                "not an artifact id",
            ),
            (&format!("bdk://sessions/{SES}/workspace/"), "empty"),
            (&format!("bdk://sessions/{SES}/workspace/a?b"), "query"),
            (&format!("bdk://sessions/{SES}/workspace/a#b"), "query"),
            (&format!("bdk://sessions/{SES}/workspace/%ff"), "UTF-8"),
            (&long, "too long"),
        ];
        for (uri, reason) in cases {
            let Err(Refused(why)) = parse(uri) else {
                panic!("{uri} was accepted");
            };
            assert!(why.contains(reason), "{uri}: {why}");
        }
    }
}
