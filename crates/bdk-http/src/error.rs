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
use bdk_core::host::HostError;
use serde_json::{Map, Value, json};

/// An error response.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// Extra top-level fields (`available`, `errors`).
    pub(crate) extra: Map<String, Value>,
    /// Close the connection after answering (an unread body is drained first).
    pub(crate) close: bool,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: Map::new(),
            close: false,
        }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A request body that could not be read. One that did not arrive
    /// within the body timeout is `408 request_timeout`, and the connection
    /// closes after the answer (the rest of the body is not waited for);
    /// any other failure is `400 invalid_request`.
    pub(crate) fn body_unreadable(e: &(dyn std::error::Error + 'static)) -> Self {
        if crate::server::is_body_timeout(e) {
            let mut err = Self::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive within the server's body timeout",
            );
            err.close = true;
            err
        } else {
            ApiError::bad_request(
                "invalid_request",
                format!("failed to read the request body: {e}"),
            )
        }
    }

    /// A failure whose details must not reach the client.
    pub(crate) fn internal(detail: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the server log has the details",
        )
    }

    pub(crate) fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        let code = e.code();
        let status = match code {
            "session_not_found" | "unknown_tool" | "approval_not_found" => StatusCode::NOT_FOUND,
            "forbidden" | "tool_not_exposed" | "approval_required" => StatusCode::FORBIDDEN,
            // A damaged session is a state of the resource that no retry of
            // the request changes (hence not 5xx) and that only this session
            // has; 409 says "not in this state", like the other conflicts.
            "stale_continuation_token" | "task_session" | "session_busy" | "session_corrupt" => {
                StatusCode::CONFLICT
            }
            "tool_not_callable" | "invalid_tool_input" | "invalid_request" => {
                StatusCode::BAD_REQUEST
            }
            "workspace_unavailable" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => return ApiError::internal(&e),
        };
        let mut err = ApiError::new(status, code, e.to_string());
        match e {
            HostError::UnknownTool { available, .. } => {
                err = err.with("available", json!(available));
            }
            HostError::InvalidToolInput { errors, .. } => {
                err = err.with("errors", json!(errors));
            }
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
        let mut body = Map::new();
        body.insert("ok".into(), Value::Bool(false));
        body.insert("error".into(), Value::String(self.code.to_owned()));
        body.insert("message".into(), Value::String(self.message));
        body.extend(self.extra);
        let mut response = (self.status, Json(Value::Object(body))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
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
    ApiError::not_found("not_found", "no route for this path")
}

/// The fallback for a known path with a method it does not accept.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
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
