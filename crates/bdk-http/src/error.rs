//! The one place where failures become HTTP responses.
//!
//! Every error the API returns is `{"ok": false, "error": "<code>",
//! "message": "..."}` (plus `available` for unknown tools and `errors` for
//! rejected tool input). Core errors map through [`HostError::code`]; the
//! codes that only the HTTP layer knows (malformed bodies, auth, routing)
//! are built here too. Internal failures answer with a generic message; the
//! details go to the log.

use std::any::Any;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
pub use bdk_api::ErrorCode;
use bdk_core::Diagnostic;
use bdk_core::host::HostError;
use schemars::JsonSchema;
use serde::Serialize;

use bdk_api::False;

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
