//! The GitHub REST client: one [`GithubClient`] per set of credentials (a
//! token, or a GitHub App whose installation tokens it mints and refreshes),
//! against a configurable API base (`https://api.github.com`, a GitHub
//! Enterprise Server's `https://host/api/v3`, or a test fake).
//!
//! Every request carries GitHub's media type, API version, a User-Agent
//! and the bearer token. Failures are retried within bounds, as GitHub's
//! "Rate limits for the REST API" and "Best practices" pages ask:
//! rate-limit refusals wait for `retry-after` or `x-ratelimit-reset` (and a
//! minute for a secondary limit that names no time), server errors and
//! transport failures back off exponentially for idempotent methods only,
//! and a 401 with App credentials mints a new installation token once. A
//! wait longer than [`ClientOptions::max_wait`] fails at once with
//! [`ApiError::RateLimited`]: a session is never blocked for an hour.
//!
//! The token only ever goes to the API base's origin: a pagination link or
//! redirect to another host is refused.

mod app;
mod client;
mod error;
mod page;
mod policy;

use std::fmt;
use std::time::Duration;

pub use client::GithubClient;
pub use error::ApiError;

/// Who the client acts as.
#[derive(Clone)]
pub enum Credentials {
    /// A personal access or installation token (`GITHUB_TOKEN`).
    Token(String),
    /// A GitHub App: its id and PEM private key (PKCS#1 "BEGIN RSA PRIVATE KEY"
    /// as GitHub issues them, or PKCS#8 "BEGIN PRIVATE KEY"); installation tokens are minted
    /// per installation and refreshed before they expire.
    App {
        /// The App's id (or its client id).
        app_id: String,
        /// The App's private key, PEM.
        private_key_pem: String,
        /// The installation to act in; when `None`, the installation is looked
        /// up for each request's repository.
        installation_id: Option<u64>,
    },
}

/// Secrets stay out of logs and panics: only the kind and the App id show.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::App {
                app_id,
                installation_id,
                ..
            } => f
                .debug_struct("App")
                .field("app_id", app_id)
                .field("private_key_pem", &"<redacted>")
                .field("installation_id", installation_id)
                .finish(),
        }
    }
}

/// How hard the client tries, and how it introduces itself.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Tries per request in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The longest single wait the client accepts; asked to wait longer
    /// (an exhausted hourly limit), it fails with [`ApiError::RateLimited`].
    pub max_wait: Duration,
    /// The first backoff after a server error; it doubles on each retry.
    pub backoff: Duration,
    /// The deadline of one HTTP exchange.
    pub timeout: Duration,
    /// The User-Agent header; GitHub refuses requests without one.
    pub user_agent: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            max_attempts: 4,
            max_wait: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
            timeout: Duration::from_secs(30),
            user_agent: concat!("bdk-github/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// The HTTP methods the REST API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Read.
    Get,
    /// Create (not idempotent: never retried after a server error).
    Post,
    /// Update.
    Patch,
    /// Replace or set.
    Put,
    /// Remove.
    Delete,
}

impl Method {
    /// The method's name as on the wire (`"GET"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    /// Whether repeating the request is harmless if the first one was
    /// processed after all; only these are retried after a server error.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One REST call.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// The method.
    pub method: Method,
    /// The path under the API base with its query (`/repos/o/r/pulls/1?x=y`),
    /// starting with `/`; or a full URL under the API base, as
    /// [`ApiResponse::next`] gives it.
    pub path: String,
    /// A JSON body.
    pub body: Option<serde_json::Value>,
    /// The `Accept` media type, when not `application/vnd.github+json`
    /// (`application/vnd.github.diff` for a pull request's diff).
    pub accept: Option<String>,
    /// The repository (`owner/name`) the call concerns; with App
    /// credentials it selects the installation whose token is used.
    pub repo: Option<String>,
}

impl ApiRequest {
    /// A request without body, media type or repository.
    pub fn new(method: Method, path: impl Into<String>) -> ApiRequest {
        ApiRequest {
            method,
            path: path.into(),
            body: None,
            accept: None,
            repo: None,
        }
    }

    /// The same request with a JSON body.
    pub fn with_body(mut self, body: serde_json::Value) -> ApiRequest {
        self.body = Some(body);
        self
    }

    /// The same request for the repository `owner/name`.
    pub fn with_repo(mut self, repo: impl Into<String>) -> ApiRequest {
        self.repo = Some(repo.into());
        self
    }

    /// The same request asking for another media type.
    pub fn with_accept(mut self, accept: impl Into<String>) -> ApiRequest {
        self.accept = Some(accept.into());
        self
    }
}

/// A successful response.
#[derive(Debug, Clone)]
pub struct ApiResponse {
    /// The HTTP status (2xx).
    pub status: u16,
    /// The JSON body; `Value::String` for a non-JSON body (a diff), `Null`
    /// for an empty one (204).
    pub body: serde_json::Value,
    /// The `Link` header's `rel="next"` URL: the next page of a list, to be
    /// passed back as [`ApiRequest::path`].
    pub next: Option<String>,
    /// `x-ratelimit-remaining`: requests left in the current window.
    pub rate_remaining: Option<u64>,
}
