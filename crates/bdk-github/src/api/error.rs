//! What can go wrong talking to the REST API, and the stable codes the
//! rest of the pack (tool results, session notes, logs) reports them by.

use std::time::Duration;

/// A failed GitHub API call, after the retries the policy allows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// GitHub answered with an error status; the fields are its error body
    /// (`{"message", "documentation_url", "errors"}`), or the status text
    /// when the body was not JSON.
    #[error("github answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// GitHub's `message`.
        message: String,
        /// GitHub's `documentation_url`, when it gave one.
        documentation_url: Option<String>,
        /// GitHub's `errors` (validation details on a 422), as given.
        errors: Vec<serde_json::Value>,
    },
    /// A rate limit that the attempts did not outlast, or one that asked to
    /// wait longer than `ClientOptions::max_wait`.
    #[error("github rate limit: {message}")]
    RateLimited {
        /// GitHub's `message`.
        message: String,
        /// How long GitHub asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// The App credentials did not yield a token: a bad key, an App that is
    /// not installed on the repository, or GitHub refusing the JWT.
    #[error("github app authentication failed: {0}")]
    Auth(String),
    /// The request did not complete (connect, TLS, timeout, I/O), after the
    /// retries the method allows.
    #[error("github request failed: {0}")]
    Transport(String),
    /// A successful response whose body is not what was asked for.
    #[error("unexpected github response: {0}")]
    Decode(String),
    /// The client's configuration is unusable (the API URL).
    #[error("invalid github client configuration: {0}")]
    Config(String),
    /// The request itself is unusable: a path that is neither `/...` nor a
    /// URL under the API base (for instance a pagination link to another
    /// host, which must never receive our token), or a bad header value.
    #[error("invalid github request: {0}")]
    Request(String),
}

impl ApiError {
    /// A stable, machine-readable name for the failure, for tool results and
    /// logs: `github_unauthorized` (401), `github_forbidden` (403),
    /// `github_not_found` (404), `github_invalid` (422), `github_status`
    /// (any other status below 500), `github_unavailable` (5xx and transport
    /// failures), `github_rate_limited`, `github_auth`, `github_decode`,
    /// `github_config`, `github_request`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Status { status, .. } => match status {
                401 => "github_unauthorized",
                403 => "github_forbidden",
                404 => "github_not_found",
                422 => "github_invalid",
                500.. => "github_unavailable",
                _ => "github_status",
            },
            ApiError::RateLimited { .. } => "github_rate_limited",
            ApiError::Auth(_) => "github_auth",
            ApiError::Transport(_) => "github_unavailable",
            ApiError::Decode(_) => "github_decode",
            ApiError::Config(_) => "github_config",
            ApiError::Request(_) => "github_request",
        }
    }

    /// The HTTP status GitHub answered with, for [`ApiError::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// GitHub's error body, or the start of a non-JSON one, as an error.
    pub(crate) fn from_body(status: u16, body: &[u8]) -> ApiError {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let message = parsed
            .as_ref()
            .and_then(|value| value.get("message"))
            .and_then(|value| value.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    text.chars().take(200).collect()
                }
            });
        let documentation_url = parsed
            .as_ref()
            .and_then(|value| value.get("documentation_url"))
            .and_then(|value| value.as_str())
            .map(str::to_owned);
        let errors = parsed
            .as_ref()
            .and_then(|value| value.get("errors"))
            .and_then(|value| value.as_array())
            .cloned()
            .unwrap_or_default();
        ApiError::Status {
            status,
            message,
            documentation_url,
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_status() {
        let code = |status| ApiError::from_body(status, b"{}").code();
        assert_eq!(code(401), "github_unauthorized");
        assert_eq!(code(403), "github_forbidden");
        assert_eq!(code(404), "github_not_found");
        assert_eq!(code(422), "github_invalid");
        assert_eq!(code(409), "github_status");
        assert_eq!(code(502), "github_unavailable");
        assert_eq!(ApiError::Transport("x".into()).code(), "github_unavailable");
    }

    #[test]
    fn a_github_error_body_is_kept_and_a_foreign_one_summarised() {
        let error = ApiError::from_body(
            422,
            br#"{"message":"Validation Failed","errors":[{"resource":"Status","field":"state","code":"invalid"}],"documentation_url":"https://docs.github.com/rest"}"#,
        );
        let ApiError::Status {
            message,
            documentation_url,
            errors,
            ..
        } = error
        else {
            unreachable!("from_body always builds a status error")
        };
        assert_eq!(message, "Validation Failed");
        assert_eq!(
            documentation_url.as_deref(),
            Some("https://docs.github.com/rest")
        );
        assert_eq!(errors[0]["field"], "state");

        let error = ApiError::from_body(502, b"<html>Bad gateway</html>");
        assert_eq!(
            error.to_string(),
            "github answered 502: <html>Bad gateway</html>"
        );
        assert_eq!(
            ApiError::from_body(500, b"").to_string(),
            "github answered 500: HTTP 500"
        );
    }
}
