//! The Slack Web API client: one [`SlackClient`] per bot token, against a
//! configurable base (`https://slack.com/api`, a proxy, or a test fake).
//!
//! Every call is a `POST <base>/<method>` with the token as a bearer and
//! the arguments form-encoded, the encoding every Web API method accepts
//! (JSON-valued arguments such as `blocks` travel as JSON text inside the
//! form, as Slack's docs describe). Slack answers HTTP 200 with
//! `{"ok": false, "error": "..."}` for refusals; those become
//! [`ApiError::Slack`] with the code. A 429 waits for `Retry-After` and
//! tries again, within [`ClientOptions::max_attempts`] and
//! [`ClientOptions::max_wait`]; server errors and transport failures are
//! retried with backoff only for methods that are safe to repeat (reads);
//! a `chat.postMessage` is never sent twice on a guess.

use std::fmt;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How hard the client tries, and how long it waits.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Tries per call in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The longest single wait the client accepts; asked to wait longer, it
    /// fails with [`ApiError::RateLimited`].
    pub max_wait: Duration,
    /// The first backoff after a server error; it doubles on each retry.
    pub backoff: Duration,
    /// The deadline of one HTTP exchange.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            max_wait: Duration::from_secs(30),
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(30),
        }
    }
}

/// A failed Web API call, after the retries the policy allows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// Slack refused the call: `{"ok": false, "error": code}`.
    #[error("slack refused {method}: {error}{}", needed.as_ref().map(|n| format!(" (needs scope {n})")).unwrap_or_default())]
    Slack {
        /// The method called.
        method: String,
        /// Slack's error code (`channel_not_found`, `invalid_auth`, ...).
        error: String,
        /// For `missing_scope`: the scope the method needs.
        needed: Option<String>,
    },
    /// A rate limit the attempts did not outlast, or one that asked to wait
    /// longer than [`ClientOptions::max_wait`].
    #[error("slack rate limit on {method}")]
    RateLimited {
        /// The method called.
        method: String,
        /// How long Slack asked us to wait.
        retry_after: Option<Duration>,
    },
    /// An HTTP status other than 200 and 429.
    #[error("slack answered {status} to {method}")]
    Status {
        /// The method called.
        method: String,
        /// The status.
        status: u16,
    },
    /// The request did not complete (connect, TLS, timeout, I/O).
    #[error("slack request failed: {0}")]
    Transport(String),
    /// A response that is not the Web API's JSON.
    #[error("unexpected slack response: {0}")]
    Decode(String),
    /// The client's configuration is unusable (the base URL, the token).
    #[error("invalid slack client configuration: {0}")]
    Config(String),
}

impl ApiError {
    /// A stable name for the failure, for tool results, session notes and
    /// logs: `slack_<error>` for Slack's own codes (`slack_invalid_auth`,
    /// `slack_channel_not_found`, ...), `slack_rate_limited`,
    /// `slack_unavailable` (5xx and transport), `slack_status`,
    /// `slack_decode`, `slack_config`.
    pub fn code(&self) -> String {
        match self {
            ApiError::Slack { error, .. } => {
                let clean: String = error
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .take(64)
                    .collect();
                format!("slack_{clean}")
            }
            ApiError::RateLimited { .. } => "slack_rate_limited".to_owned(),
            ApiError::Status { status, .. } if *status >= 500 => "slack_unavailable".to_owned(),
            ApiError::Status { .. } => "slack_status".to_owned(),
            ApiError::Transport(_) => "slack_unavailable".to_owned(),
            ApiError::Decode(_) => "slack_decode".to_owned(),
            ApiError::Config(_) => "slack_config".to_owned(),
        }
    }

    /// Slack's error code, for [`ApiError::Slack`].
    pub fn slack_error(&self) -> Option<&str> {
        match self {
            ApiError::Slack { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// What `auth.test` says about the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The bot's user id (`U…`): mentions of it engage the bot.
    pub user_id: String,
    /// The bot id (`B…`) its messages carry.
    pub bot_id: Option<String>,
    /// The workspace.
    pub team_id: String,
    /// The workspace's URL.
    pub url: Option<String>,
    /// The scopes granted to the token (`x-oauth-scopes`), sorted.
    pub scopes: Vec<String>,
}

/// A Web API client. Cheap to clone.
#[derive(Clone)]
pub struct SlackClient {
    base: String,
    token: String,
    http: reqwest::Client,
    options: ClientOptions,
}

impl fmt::Debug for SlackClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackClient")
            .field("base", &self.base)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Methods that only read: safe to repeat after a server error.
fn idempotent(method: &str) -> bool {
    method == "auth.test"
        || method.ends_with(".info")
        || method.ends_with(".list")
        || method == "conversations.replies"
        || method == "conversations.history"
}

impl SlackClient {
    /// A client for the Web API at `base` with `token`. Checks the URL
    /// (http or https, no query, no user info) and the token up front.
    pub fn new(base: &str, token: &str, options: ClientOptions) -> Result<Self, ApiError> {
        let base = base.trim().trim_end_matches('/').to_owned();
        let url = Url::parse(&base)
            .map_err(|e| ApiError::Config(format!("the API URL {base:?} does not parse: {e}")))?;
        if !matches!(url.scheme(), "http" | "https")
            || url.query().is_some()
            || url.fragment().is_some()
            || !url.username().is_empty()
            || url.password().is_some()
            || url.host_str().is_none_or(str::is_empty)
        {
            return Err(ApiError::Config(format!(
                "the API URL {base:?} must be http(s)://host[/path] without a query or user info"
            )));
        }
        let token = token.trim().to_owned();
        if token.is_empty() {
            return Err(ApiError::Config("the bot token is empty".into()));
        }
        if HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return Err(ApiError::Config(
                "the bot token holds characters a header cannot carry".into(),
            ));
        }
        bdk_models::net::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // The token must never follow a redirect to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("bdk/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ApiError::Config(format!("failed to build the http client: {e}")))?;
        Ok(Self {
            base,
            token,
            http,
            options,
        })
    }

    /// The API base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Calls `method` with `args` (a JSON object; strings, numbers and
    /// booleans are sent as they are, arrays and objects as JSON text) and
    /// returns Slack's answer when it is `ok`.
    pub async fn call(&self, method: &str, args: Value) -> Result<Value, ApiError> {
        self.call_with_headers(method, args).await.map(|(v, _)| v)
    }

    /// `auth.test`: who the token is, and the scopes it holds.
    pub async fn auth_test(&self) -> Result<Identity, ApiError> {
        let (v, scopes) = self
            .call_with_headers("auth.test", Value::Object(Map::new()))
            .await?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let user_id = text("user_id")
            .ok_or_else(|| ApiError::Decode("auth.test answered without user_id".into()))?;
        let mut scopes: Vec<String> = scopes
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        scopes.sort();
        scopes.dedup();
        Ok(Identity {
            user_id,
            bot_id: text("bot_id"),
            team_id: text("team_id").unwrap_or_default(),
            url: text("url"),
            scopes,
        })
    }

    /// Sends a file's bytes to the `upload_url` that
    /// `files.getUploadURLExternal` gave. The URL is Slack's own
    /// pre-authorized address: the token is not sent there.
    pub async fn upload(&self, url: &str, bytes: Vec<u8>) -> Result<(), ApiError> {
        let parsed = Url::parse(url)
            .map_err(|e| ApiError::Decode(format!("the upload URL does not parse: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ApiError::Decode("the upload URL is not http(s)".into()));
        }
        let response = self
            .http
            .post(parsed)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes)
            .timeout(self.options.timeout)
            .send()
            .await
            .map_err(|e| ApiError::Transport(e.to_string()))?;
        let status = response.status().as_u16();
        if status == 200 {
            Ok(())
        } else {
            Err(ApiError::Status {
                method: "file upload".to_owned(),
                status,
            })
        }
    }

    /// A call and the granted scopes (`x-oauth-scopes`) it reported.
    async fn call_with_headers(
        &self,
        method: &str,
        args: Value,
    ) -> Result<(Value, Option<String>), ApiError> {
        if method.is_empty()
            || !method
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
        {
            return Err(ApiError::Config(format!(
                "`{method}` is not a Web API method name"
            )));
        }
        let form = {
            let mut body = form_urlencoded::Serializer::new(String::new());
            for (k, v) in form_fields(&args)? {
                body.append_pair(&k, &v);
            }
            body.finish()
        };
        let url = format!("{}/{method}", self.base);
        let attempts = self.options.max_attempts.max(1);
        let mut backoff = self.options.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = attempt >= attempts;
            let sent = self
                .http
                .post(&url)
                .header(AUTHORIZATION, format!("Bearer {}", self.token))
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form.clone())
                .timeout(self.options.timeout)
                .send()
                .await;
            let response = match sent {
                Ok(r) => r,
                Err(e) => {
                    if !last && idempotent(method) {
                        tokio::time::sleep(backoff).await;
                        backoff = backoff.saturating_mul(2);
                        continue;
                    }
                    return Err(ApiError::Transport(e.to_string()));
                }
            };
            let status = response.status().as_u16();
            if status == 429 {
                let retry_after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                // A 429 means Slack did not act: repeating is safe for any
                // method.
                if last || wait > self.options.max_wait {
                    return Err(ApiError::RateLimited {
                        method: method.to_owned(),
                        retry_after,
                    });
                }
                tracing::debug!(
                    method,
                    wait_secs = wait.as_secs(),
                    "slack rate limit; waiting"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            if status >= 500 && !last && idempotent(method) {
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
                continue;
            }
            if status != 200 {
                return Err(ApiError::Status {
                    method: method.to_owned(),
                    status,
                });
            }
            let scopes = response
                .headers()
                .get("x-oauth-scopes")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body: Value = response
                .json()
                .await
                .map_err(|e| ApiError::Decode(format!("{method}: {e}")))?;
            if body.get("ok").and_then(Value::as_bool) == Some(true) {
                return Ok((body, scopes));
            }
            let error = body
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("unknown_error")
                .to_owned();
            if error == "ratelimited" && !last {
                tokio::time::sleep(Duration::from_secs(1).min(self.options.max_wait)).await;
                continue;
            }
            return Err(ApiError::Slack {
                method: method.to_owned(),
                needed: body
                    .get("needed")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                error,
            });
        }
    }
}

/// The form fields of `args`: scalars as text, arrays and objects as JSON
/// text, nulls left out.
fn form_fields(args: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let Some(object) = args.as_object() else {
        return Err(ApiError::Config(
            "the arguments must be a JSON object".into(),
        ));
    };
    Ok(object
        .iter()
        .filter_map(|(k, v)| {
            let text = match v {
                Value::Null => return None,
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                other => other.to_string(),
            };
            Some((k.clone(), text))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_become_form_fields() {
        let fields = form_fields(&json!({
            "channel": "C1", "thread_ts": null, "unfurl_links": false, "limit": 5,
            "blocks": [{"type": "divider"}]
        }))
        .unwrap();
        assert_eq!(
            fields,
            [
                ("blocks".to_owned(), r#"[{"type":"divider"}]"#.to_owned()),
                ("channel".to_owned(), "C1".to_owned()),
                ("limit".to_owned(), "5".to_owned()),
                ("unfurl_links".to_owned(), "false".to_owned()),
            ]
        );
        assert!(form_fields(&json!([1])).is_err());
    }

    #[test]
    fn codes_are_stable_and_clean() {
        let e = ApiError::Slack {
            method: "chat.postMessage".into(),
            error: "channel_not_found".into(),
            needed: None,
        };
        assert_eq!(e.code(), "slack_channel_not_found");
        let hostile = ApiError::Slack {
            method: "m".into(),
            error: "a b\n<script>".into(),
            needed: None,
        };
        assert_eq!(hostile.code(), "slack_abscript");
        assert_eq!(
            ApiError::Status {
                method: "m".into(),
                status: 503
            }
            .code(),
            "slack_unavailable"
        );
    }

    #[test]
    fn bad_configuration_is_refused_up_front() {
        for (base, token) in [
            ("ftp://slack.com/api", "xoxb-1"),
            ("https://slack.com/api?x=1", "xoxb-1"),
            ("https://user:pw@slack.com/api", "xoxb-1"),
            ("https://slack.com/api", "  "),
            ("https://slack.com/api", "xoxb\n1"),
        ] {
            assert!(
                SlackClient::new(base, token, ClientOptions::default()).is_err(),
                "{base} {token:?}"
            );
        }
        let c =
            SlackClient::new("https://slack.com/api/", "xoxb-1", ClientOptions::default()).unwrap();
        assert_eq!(c.base(), "https://slack.com/api");
        assert!(!format!("{c:?}").contains("xoxb"));
    }
}
