//! Request extractors whose rejections use the API's error shape.
//!
//! axum's own extractors answer bad input with plain-text bodies; these
//! wrap them (or replace them) so that a malformed body, a wrong content
//! type, an oversized body, a bad path segment or a bad query string each get
//! their documented JSON error.

use std::time::Duration;

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::{MediaType, Operation, RequestBody, SchemaObject};
use aide::operation::{ParamLocation, add_parameters, parameters_from_schema, set_body};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header;
use axum::http::request::Parts;
use bdk_events::SessionId;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use crate::api::add_errors;
use crate::error::{ApiError, ErrorCode};

/// The default body limit: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How much of an oversized body is read and thrown away before answering
/// 413, as a multiple of the limit. Answering while the client is still
/// sending makes the kernel reset the connection, and the client then often
/// sees the reset instead of the 413; draining a bounded amount avoids that
/// without letting a client stream unbounded data at the server.
const DRAIN_FACTOR: usize = 8;
/// How long draining an oversized body may take at most.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// A JSON request body.
///
/// Wrong content type: 415 `unsupported_media_type`. Larger than the
/// configured limit: 413 `payload_too_large`. Not complete within the body
/// timeout: 408 `request_timeout`. Not JSON: 400 `invalid_json`.
/// JSON of the wrong shape: 400 `invalid_request`. An empty body with no
/// content type reads as `{}`, so `curl -X POST` works on routes whose
/// fields are all optional.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(DEFAULT_MAX_BODY_BYTES, |l| l.0);
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("").to_owned());
        if let Some(ct) = &content_type
            && !is_json(ct)
        {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "send the body as application/json",
            ));
        }
        let bytes = read_limited(req.into_body(), limit).await?;
        if content_type.is_none() {
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return parse(b"{}").map(JsonBody);
            }
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "send the body as application/json (the content-type header is missing)",
            ));
        }
        parse(&bytes).map(JsonBody)
    }
}

/// The body's schema, as optional JSON (an empty body reads as `{}`), and
/// the errors reading it can give.
impl<T: JsonSchema> OperationInput for JsonBody<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        let json_schema = ctx.schema.subschema_for::<T>();
        let media = MediaType {
            schema: Some(SchemaObject {
                json_schema,
                example: None,
                external_docs: None,
            }),
            ..MediaType::default()
        };
        let body = RequestBody {
            content: [("application/json".to_owned(), media)]
                .into_iter()
                .collect(),
            ..RequestBody::default()
        };
        set_body(ctx, operation, body);
        add_errors(
            operation,
            &[
                ErrorCode::InvalidJson,
                ErrorCode::InvalidRequest,
                ErrorCode::RequestTimeout,
                ErrorCode::PayloadTooLarge,
                ErrorCode::UnsupportedMediaType,
            ],
        );
    }
}

/// The body limit in force, put into request extensions by the app.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimit(pub(crate) usize);

fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        Category::Data => ApiError::new(ErrorCode::InvalidRequest, format!("invalid body: {e}")),
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        ),
    })
}

/// Reads a body up to `limit` bytes; beyond it, drains a bounded amount and
/// answers 413. A body that does not arrive in time is 408.
pub(crate) async fn read_limited(
    mut body: axum::body::Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    loop {
        match body.frame().await {
            None => return Ok(buf.freeze()),
            Some(Err(e)) => return Err(ApiError::body_unreadable(&e)),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if buf.len() + data.len() > limit {
                    let seen = buf.len() + data.len();
                    drop(buf);
                    drain(body, seen, limit.saturating_mul(DRAIN_FACTOR)).await;
                    let mut err = ApiError::new(
                        ErrorCode::PayloadTooLarge,
                        format!("the body is larger than the limit of {limit} bytes"),
                    );
                    err.close = true;
                    return Err(err);
                }
                buf.extend_from_slice(&data);
            }
        }
    }
}

async fn drain(mut body: axum::body::Body, mut seen: usize, cap: usize) {
    let read_rest = async {
        while seen < cap {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        seen += data.len();
                    }
                }
                _ => break,
            }
        }
    };
    // Either the body ended, the cap was reached, or the time ran out; in
    // every case the 413 goes out now and the connection closes after it.
    let _ = tokio::time::timeout(DRAIN_TIME, read_rest).await;
}

/// Path parameters, deserialized by name into `T` (whose fields name the
/// route's `{parameters}` and describe them), with JSON rejections: a
/// segment that does not decode names nothing, `404 not_found`.
pub(crate) struct PathParams<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(t)) => Ok(PathParams(t)),
            Err(e) => Err(path_error(&e)),
        }
    }
}

impl<T: JsonSchema> OperationInput for PathParams<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        let schema = ctx.schema.subschema_for::<T>();
        let params = parameters_from_schema(ctx, schema, ParamLocation::Path);
        add_parameters(ctx, operation, params);
        add_errors(operation, &[ErrorCode::NotFound]);
    }
}

/// The parameters of a session route.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
struct SessionParams {
    /// The session. A malformed id is `404 invalid_session_id`.
    #[schemars(with = "bdk_events::SessionId")]
    #[expect(
        dead_code,
        reason = "a description of the path; the extractor parses the id itself"
    )]
    session_id: String,
}

/// The parameters of a parked call's route.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
struct CallParams {
    /// The session. A malformed id is `404 invalid_session_id`.
    #[schemars(with = "bdk_events::SessionId")]
    #[expect(
        dead_code,
        reason = "a description of the path; the extractor parses the id itself"
    )]
    session_id: String,
    /// The parked call, as listed by the approvals route.
    #[expect(
        dead_code,
        reason = "a description of the path; the extractor reads it itself"
    )]
    call_id: String,
}

fn describe_path<T: JsonSchema>(ctx: &mut GenContext, operation: &mut Operation) {
    let schema = ctx.schema.subschema_for::<T>();
    let params = parameters_from_schema(ctx, schema, ParamLocation::Path);
    add_parameters(ctx, operation, params);
}

/// A session id from the path (`{sessionId}`). Anything that is not a well-formed
/// session id, including segments that do not decode, names no session:
/// 404 `invalid_session_id`.
pub(crate) struct SessionPath(pub(crate) SessionId);

impl<S: Send + Sync> FromRequestParts<S> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(raw)) => session_id(&raw).map(SessionPath),
            Err(_) => Err(invalid_session_id()),
        }
    }
}

impl OperationInput for SessionPath {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        describe_path::<SessionParams>(ctx, operation);
        add_errors(operation, &[ErrorCode::InvalidSessionId]);
    }
}

/// A session id and a call id from the path
/// (`{sessionId}/approvals/{callId}`).
pub(crate) struct CallPath(pub(crate) SessionId, pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for CallPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((raw, call_id))) => Ok(CallPath(session_id(&raw)?, call_id)),
            Err(e) => Err(path_error(&e)),
        }
    }
}

impl OperationInput for CallPath {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        describe_path::<CallParams>(ctx, operation);
        add_errors(
            operation,
            &[ErrorCode::InvalidSessionId, ErrorCode::NotFound],
        );
    }
}

fn path_error(e: &PathRejection) -> ApiError {
    // Path segments that do not decode (bad percent-encoding, invalid
    // UTF-8) cannot name anything that exists.
    ApiError::new(ErrorCode::NotFound, format!("no such resource: {e}"))
}

/// A query string, with JSON rejections (400 `invalid_request`).
pub(crate) struct QueryParams<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(q)) => Ok(QueryParams(q)),
            Err(e) => Err(query_error(&e)),
        }
    }
}

impl<T: JsonSchema> OperationInput for QueryParams<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        let schema = ctx.schema.subschema_for::<T>();
        let params = parameters_from_schema(ctx, schema, ParamLocation::Query);
        add_parameters(ctx, operation, params);
        add_errors(operation, &[ErrorCode::InvalidRequest]);
    }
}

fn query_error(e: &QueryRejection) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("invalid query string: {e}"),
    )
}

/// Parses a session id from a path; a malformed one names no session.
fn session_id(raw: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(raw).ok_or_else(invalid_session_id)
}

fn invalid_session_id() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidSessionId,
        "no such session (session ids look like ses_…)",
    )
}
