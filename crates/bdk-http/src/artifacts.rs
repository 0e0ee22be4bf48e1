//! Artifact routes: list (`GET /v1/artifacts`) and download
//! (`GET /v1/artifacts/{id}/content`).
//!
//! Ownership follows the session list: a caller sees its own artifacts, or
//! every artifact when it sees every session. An artifact the caller may
//! not see answers 404, exactly like one that does not exist, so ids cannot
//! be probed.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bdk_events::SessionId;
use bdk_events::ids::is_safe_segment;
use bdk_store::{ArtifactFilter, ArtifactRecord, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::True;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{PathParams, QueryParams};
use crate::state::Agent;

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// Query of the list route.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
pub(crate) struct ListQuery {
    /// Only artifacts of this kind.
    kind: Option<String>,
    /// Only artifacts of this session.
    session_id: Option<String>,
    /// At most this many artifacts (1-1000, default 100).
    #[schemars(range(min = 1, max = 1000), extend("default" = 100))]
    limit: Option<usize>,
}

/// The path of an artifact.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct ArtifactPath {
    /// The artifact id (`art_…`).
    id: String,
}

/// The artifacts the caller may see, newest first.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ArtifactsResponse")]
pub(crate) struct Artifacts {
    ok: True,
    artifacts: Vec<ArtifactRecord>,
}

/// `GET /v1/artifacts?kind=&sessionId=&limit=`: newest first.
pub(crate) async fn list(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Artifacts>, ApiError> {
    let limit = match query.limit {
        None => DEFAULT_LIMIT,
        Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("limit must be between 1 and {MAX_LIMIT}"),
            ));
        }
    };
    let session_id = match query.session_id.as_deref() {
        None => None,
        Some(raw) => match SessionId::parse(raw) {
            Some(id) => Some(id),
            // A malformed id matches no artifact.
            None => {
                return Ok(Json(Artifacts {
                    ok: True,
                    artifacts: Vec::new(),
                }));
            }
        },
    };
    let filter = ArtifactFilter {
        session_id,
        kind: query.kind,
        principal: caller.read_scope().map(str::to_owned),
        limit: Some(limit),
    };
    let artifacts = agent
        .host
        .store()
        .artifact_list(&filter)
        .await
        .map_err(store_error)?;
    Ok(Json(Artifacts {
        ok: True,
        artifacts,
    }))
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Invalid { .. } => ApiError::new(ErrorCode::NotFound, "no such artifact"),
        other => ApiError::internal(&other),
    }
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such artifact")
}

fn visible(record: &ArtifactRecord, caller: &Caller) -> bool {
    caller.sees_all || record.principal.as_deref() == Some(caller.principal.as_str())
}

/// `GET /v1/artifacts/{id}/content`: the bytes, as an attachment.
pub(crate) async fn content(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    PathParams(ArtifactPath { id }): PathParams<ArtifactPath>,
) -> Result<Response, ApiError> {
    if !is_safe_segment(&id) {
        return Err(not_found());
    }
    let store = agent.host.store();
    let record = store
        .artifact_get(&id)
        .await
        .map_err(store_error)?
        .filter(|r| visible(r, &caller))
        .ok_or_else(not_found)?;
    let bytes = store
        .artifact_content(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    let content_type = HeaderValue::from_str(&record.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    let disposition = format!("attachment; filename=\"{}\"", safe_filename(&record.name));
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    // Artifact bytes come from tools and models: never let a browser run
    // them as a page of this origin.
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    Ok(response)
}

/// A file name safe inside a quoted header parameter: the last path segment,
/// ASCII letters, digits and `._-` only.
fn safe_filename(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let cleaned: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    if cleaned.trim_matches('.').is_empty() {
        "artifact".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_are_sanitized() {
        assert_eq!(safe_filename("report.md"), "report.md");
        assert_eq!(safe_filename("../../etc/passwd"), "passwd");
        assert_eq!(safe_filename("a\"b\r\nc.txt"), "a_b__c.txt");
        assert_eq!(safe_filename(".."), "artifact");
        assert_eq!(safe_filename(""), "artifact");
    }
}
