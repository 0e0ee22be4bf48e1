//! The one place where failures become HTTP responses.
//!
//! Every error the API returns is `{"ok": false, "error": "<code>",
//! "message": "..."}` (plus `available` for unknown tools and `errors` for
//! rejected tool input). Core errors map through [`HostError::code`]; the
//! codes that only the HTTP layer knows (malformed bodies, auth, routing)
//! are built here too. Internal failures answer with a generic message; the
//! details go to the log.

use std::any::Any;
use std::borrow::Cow;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bdk_core::Diagnostic;
use bdk_core::host::HostError;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;

use crate::described;
use crate::literal::False;

/// Declares [`ErrorCode`]: per code its variant, wire string, HTTP status
/// and one-line meaning, written once.
macro_rules! error_codes {
    ($($(#[$attr:meta])* $variant:ident = ($code:literal, $status:ident, $meaning:literal),)+) => {
        /// Every `error` code of the API. Each code has exactly one status
        /// and a one-line meaning; the OpenAPI document's `ErrorCode` enum
        /// and each operation's error answers are built from this table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$attr])* #[doc = $meaning] $variant,)+
        }

        impl ErrorCode {
            /// Every code, in the order of the table.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The stable code on the wire (`session_not_found`, ...).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)+
                }
            }

            /// The HTTP status every answer with this code has.
            pub const fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::$status,)+
                }
            }

            /// What the code means, in one line (for the OpenAPI document).
            pub const fn meaning(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $meaning,)+
                }
            }
        }
    };
}

error_codes! {
    InvalidJson = ("invalid_json", BAD_REQUEST, "the body is not valid JSON"),
    InvalidRequest = ("invalid_request", BAD_REQUEST, "a field or query parameter has the wrong type or value (a blank message, a workspace path that leaves the workspace, a template that cannot be rendered)"),
    InvalidAsOf = ("invalid_as_of", BAD_REQUEST, "`asOf` is not an RFC 3339 instant with a zone"),
    InvalidContinuationToken = ("invalid_continuation_token", BAD_REQUEST, "the token is not `<channelId>:<key>` with both parts non-empty, or came together with `sessionId`"),
    InvalidToolInput = ("invalid_tool_input", BAD_REQUEST, "the input fails the tool's schema; `errors` lists the violations"),
    ToolNotCallable = ("tool_not_callable", BAD_REQUEST, "an agent-execution tool, which only runs as a script inside the session workspace"),
    InvalidBody = ("invalid_body", BAD_REQUEST, "the body fails the channel route's `body_schema`; see `errors`"),
    InvalidQuery = ("invalid_query", BAD_REQUEST, "the query parameters fail the channel route's `query_schema`; see `errors`"),
    InvalidEvals = ("invalid_evals", BAD_REQUEST, "the eval files have errors; `diagnostics` lists them with their fixes"),
    Unauthorized = ("unauthorized", UNAUTHORIZED, "no auth policy admitted the request"),
    Forbidden = ("forbidden", FORBIDDEN, "the session belongs to another principal"),
    ToolNotExposed = ("tool_not_exposed", FORBIDDEN, "a built-in tool the agent does not expose to direct callers (`[builtin_tools] direct` in agent.toml)"),
    ApprovalRequired = ("approval_required", FORBIDDEN, "a `needs_approval` tool called without `\"approve\": true` (over MCP it can never be approved)"),
    NotFound = ("not_found", NOT_FOUND, "no route, artifact, documentation page or resource by this name"),
    SessionNotFound = ("session_not_found", NOT_FOUND, "no session has this id"),
    InvalidSessionId = ("invalid_session_id", NOT_FOUND, "the id is malformed, so it names no session"),
    UnknownTool = ("unknown_tool", NOT_FOUND, "no callable tool has this name; `available` lists those that do"),
    ApprovalNotFound = ("approval_not_found", NOT_FOUND, "no call with this id is waiting for a decision"),
    NoMatchingEvals = ("no_matching_evals", NOT_FOUND, "the selection matches no eval case, or the agent has no `evals/` folder"),
    EvalRunNotFound = ("eval_run_not_found", NOT_FOUND, "no eval run in the history has this id"),
    MethodNotAllowed = ("method_not_allowed", METHOD_NOT_ALLOWED, "the path exists, but not with this method"),
    RequestTimeout = ("request_timeout", REQUEST_TIMEOUT, "the body did not arrive in full within the body timeout of its headers (30 s by default); the connection is closed"),
    StaleContinuationToken = ("stale_continuation_token", CONFLICT, "the continuation token is not the current one"),
    TaskSession = ("task_session", CONFLICT, "task sessions take no follow-up messages"),
    SessionBusy = ("session_busy", CONFLICT, "a session-bound write call while a turn runs, a follow-up or stop whose turn another replica did not give up in time, or a tokenless follow-up that lost a race to another replica; retry"),
    // A damaged session is a state of the resource that no retry of the
    // request changes (hence not 5xx) and that only this session has; 409
    // says "not in this state", like the other conflicts.
    SessionCorrupt = ("session_corrupt", CONFLICT, "the session's stored data (its event log or record) is damaged, for example a line of its log does not parse; no retry helps until an operator repairs or deletes the session, and other sessions are unaffected"),
    EvalRunActive = ("eval_run_active", CONFLICT, "another eval run is still running; `activeRunId` names it"),
    EvalRunFinished = ("eval_run_finished", CONFLICT, "the eval run already ended"),
    HandlerFailed = ("handler_failed", FAILED_DEPENDENCY, "the author's handler program gave no usable answer: it could not start, exited with a failure, ran past its timeout, wrote more than its output cap, printed something other than one JSON object, or answered with an invalid response; the message says which"),
    PayloadTooLarge = ("payload_too_large", PAYLOAD_TOO_LARGE, "the body is over the server's limit (1 MiB by default)"),
    UnsupportedMediaType = ("unsupported_media_type", UNSUPPORTED_MEDIA_TYPE, "the body is not sent as `application/json`"),
    UpstreamUnavailable = ("upstream_unavailable", SERVICE_UNAVAILABLE, "a platform API a channel needs to classify the request (Slack's `auth.test`) did not answer; the platform retries the request"),
    WorkspaceUnavailable = ("workspace_unavailable", INTERNAL_SERVER_ERROR, "the session workspace cannot be created for a session-bound write call"),
    Internal = ("internal", INTERNAL_SERVER_ERROR, "a failure inside the server; the details are in the server log"),
}

impl ErrorCode {
    /// The code with this wire string, if there is one.
    pub fn from_wire(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == code)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl JsonSchema for ErrorCode {
    fn schema_name() -> Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        json_schema!({
            "type": "string",
            "description": "The stable code of an error.",
            "enum": codes,
        })
    }
}

/// An error response.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// Fields some codes add to the body (boxed: most errors have none,
    /// and the error travels in every handler's `Result`).
    pub(crate) extra: Option<Box<ErrorExtra>>,
    /// Close the connection after answering (an unread body is drained first).
    pub(crate) close: bool,
}

/// The fields a few codes add beside `ok`, `error` and `message`.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ErrorExtra {
    /// With `unknown_tool`: the tools that can be called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) available: Option<Vec<String>>,
    /// With `invalid_tool_input`, `invalid_body` and `invalid_query`: one
    /// entry per violation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) errors: Option<Vec<String>>,
    /// With `invalid_evals`: the problems of the eval files.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<described::Diagnostic>>")]
    pub(crate) diagnostics: Option<Vec<Diagnostic>>,
    /// With `eval_run_active`: the run in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) active_run_id: Option<String>,
}

/// The body of every error answer.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub(crate) struct ErrorBody<'a> {
    ok: False,
    error: ErrorCode,
    /// For people; may change between versions.
    message: &'a str,
    #[serde(flatten)]
    extra: Option<&'a ErrorExtra>,
}

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            extra: None,
            close: false,
        }
    }

    /// The status this error answers with.
    pub(crate) fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// A request body that could not be read. One that did not arrive
    /// within the body timeout is `408 request_timeout`, and the connection
    /// closes after the answer (the rest of the body is not waited for);
    /// any other failure is `400 invalid_request`.
    pub(crate) fn body_unreadable(e: &(dyn std::error::Error + 'static)) -> Self {
        if crate::server::is_body_timeout(e) {
            let mut err = Self::new(
                ErrorCode::RequestTimeout,
                "the request body did not arrive within the server's body timeout",
            );
            err.close = true;
            err
        } else {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("failed to read the request body: {e}"),
            )
        }
    }

    /// Adds the tools that can be called (`unknown_tool`).
    pub(crate) fn with_available(mut self, available: Vec<String>) -> Self {
        self.extra.get_or_insert_default().available = Some(available);
        self
    }

    /// Adds one entry per violation (`invalid_body`, `invalid_query`).
    pub(crate) fn with_errors(mut self, errors: Vec<String>) -> Self {
        self.extra.get_or_insert_default().errors = Some(errors);
        self
    }

    /// Adds the eval files' problems (`invalid_evals`).
    #[cfg(feature = "evals")]
    pub(crate) fn with_diagnostics(mut self, diagnostics: Vec<Diagnostic>) -> Self {
        self.extra.get_or_insert_default().diagnostics = Some(diagnostics);
        self
    }

    /// Adds the run in progress (`eval_run_active`).
    #[cfg(feature = "evals")]
    pub(crate) fn with_active_run(mut self, run_id: String) -> Self {
        self.extra.get_or_insert_default().active_run_id = Some(run_id);
        self
    }

    /// A failure whose details must not reach the client.
    pub(crate) fn internal(detail: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "request failed");
        Self::new(
            ErrorCode::Internal,
            "internal error; the server log has the details",
        )
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        // The core names its error kinds with the wire codes; a code this
        // table does not know (and `internal`) answers as an internal error.
        let code = match ErrorCode::from_wire(e.code()) {
            Some(ErrorCode::Internal) | None => return ApiError::internal(&e),
            Some(code) => code,
        };
        let mut err = ApiError::new(code, e.to_string());
        match e {
            HostError::UnknownTool { available, .. } => err = err.with_available(available),
            HostError::InvalidToolInput { errors, .. } => err = err.with_errors(errors),
            HostError::WorkspaceUnavailable(detail) => {
                // The detail names paths on the server; keep it in the log.
                tracing::error!(error = %detail, "session workspace unavailable");
                err.message = "the session workspace cannot be created for a write call".into();
            }
            _ => {}
        }
        err
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody {
            ok: False,
            error: self.code,
            message: &self.message,
            extra: self.extra.as_deref(),
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The fallback for paths no route matches.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no route for this path")
}

/// The fallback for a known path with a method it does not accept.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not accept this method",
    )
}

/// The answer of the catch-panic layer.
pub(crate) fn panicked(payload: Box<dyn Any + Send + 'static>) -> Response {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_owned());
    ApiError::internal(&format!("handler panicked: {detail}")).into_response()
}
