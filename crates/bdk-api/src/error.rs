//! Every error code of the API, and the body an error answer has.
//!
//! Every error the API returns is `{"ok": false, "error": "<code>",
//! "message": "..."}`, plus, for a few codes, the fields of
//! [`ErrorDetails`]. Each code has exactly one HTTP status.

use serde::{Deserialize, Serialize};

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
            pub const fn status(self) -> http::StatusCode {
                match self {
                    $(ErrorCode::$variant => http::StatusCode::$status,)+
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

#[cfg(feature = "schema")]
impl schemars::JsonSchema for ErrorCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        schemars::json_schema!({
            "type": "string",
            "description": "The stable code of an error.",
            "enum": codes,
        })
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    /// A code this version does not know is an error: read the wire
    /// string with [`ErrorCode::from_wire`] to tell it apart.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        ErrorCode::from_wire(&code)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code `{code}`")))
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error answer as a client reads it: the code as sent (a newer server
/// may send one this version does not know), the message, and the fields
/// some codes add.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorAnswer {
    /// Always `false`.
    #[serde(default)]
    pub ok: crate::False,
    /// The wire code; [`ErrorAnswer::code`] reads it as an [`ErrorCode`].
    pub error: String,
    /// For people; may change between versions.
    #[serde(default)]
    pub message: String,
    /// The fields a few codes add.
    #[serde(flatten)]
    pub details: ErrorDetails,
}

impl ErrorAnswer {
    /// The code, if this version knows it.
    pub fn code(&self) -> Option<ErrorCode> {
        ErrorCode::from_wire(&self.error)
    }
}

/// The fields a few codes add beside `ok`, `error` and `message`, as a
/// client reads them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ErrorDetails {
    /// With `unknown_tool`: the tools that can be called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<Vec<String>>,
    /// With `invalid_tool_input`, `invalid_body` and `invalid_query`: one
    /// entry per violation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    /// With `invalid_evals`: the problems of the eval files, as the
    /// diagnostics of `bdk validate --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<serde_json::Value>>,
    /// With `eval_run_active`: the run in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_wire_string() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_wire(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), *code);
        }
        assert!(serde_json::from_str::<ErrorCode>("\"no_such_code\"").is_err());
    }

    #[test]
    fn an_error_answer_keeps_a_code_this_version_does_not_know() {
        let answer: ErrorAnswer = serde_json::from_str(
            r#"{"ok":false,"error":"brand_new","message":"m","available":["a"]}"#,
        )
        .unwrap();
        assert_eq!(answer.error, "brand_new");
        assert_eq!(answer.code(), None);
        assert_eq!(answer.details.available, Some(vec!["a".to_owned()]));
        assert_eq!(
            serde_json::to_value(&answer).unwrap(),
            serde_json::json!({"ok": false, "error": "brand_new", "message": "m", "available": ["a"]}),
        );
    }
}
