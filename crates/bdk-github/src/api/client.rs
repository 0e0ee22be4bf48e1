//! [`GithubClient`]: the request loop (headers, retries, waits), App
//! installation tokens, pagination and the convenience calls built on them.

use std::collections::HashSet;
use std::error::Error as _;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Url, redirect};
use serde_json::Value;

use super::app::{App, Minted, REFRESH_BEFORE};
use super::policy::{self, Decision};
use super::{ApiError, ApiRequest, ApiResponse, ClientOptions, Credentials, Method, page};

/// The media type GitHub recommends for JSON.
const JSON_MEDIA_TYPE: &str = "application/vnd.github+json";
/// The REST API version every request pins.
const API_VERSION: &str = "2022-11-28";
/// How long establishing a connection may take; the whole exchange is
/// bounded by [`ClientOptions::timeout`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed per request (same origin only).
const MAX_REDIRECTS: usize = 10;

/// A GitHub REST API client. Cheap to clone: clones share the connection
/// pool, the App's token cache and the learnt login.
#[derive(Clone)]
pub struct GithubClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// The API base without a trailing slash.
    base: String,
    base_url: Url,
    http: reqwest::Client,
    auth: Auth,
    options: ClientOptions,
    login: Mutex<Option<String>>,
}

enum Auth {
    Token(String),
    App(Box<App>),
}

/// Which credential a request goes out with.
#[derive(Clone, Copy)]
enum Identity<'a> {
    /// The token, or with App credentials the installation token for this
    /// repository.
    Acting(Option<&'a str>),
    /// The App itself (a JWT): `/app`, installation lookup, token minting.
    App,
}

/// A request ready to send.
struct Prepared {
    method: Method,
    url: Url,
    body: Option<Value>,
    accept: HeaderValue,
}

/// A response, before it is judged.
struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl fmt::Debug for GithubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.inner.auth {
            Auth::Token(_) => "token".to_owned(),
            Auth::App(app) => format!("app {}", app.app_id),
        };
        f.debug_struct("GithubClient")
            .field("api_url", &self.inner.base)
            .field("auth", &auth)
            .finish()
    }
}

impl GithubClient {
    /// A client for the API at `api_url` (`https://api.github.com`, or
    /// `https://host/api/v3` on GitHub Enterprise Server). Checks the URL
    /// (http or https, no query, no user info) and parses an App's key up
    /// front, so misconfiguration fails at start-up.
    pub fn new(
        api_url: &str,
        credentials: Credentials,
        options: ClientOptions,
    ) -> Result<Self, ApiError> {
        let base = api_url.trim().trim_end_matches('/').to_owned();
        let base_url = Url::parse(&base)
            .map_err(|e| ApiError::Config(format!("the API URL {base:?} does not parse: {e}")))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(ApiError::Config(format!(
                "the API URL {base:?} is not http or https"
            )));
        }
        if base_url.query().is_some() || base_url.fragment().is_some() {
            return Err(ApiError::Config(format!(
                "the API URL {base:?} has a query or fragment"
            )));
        }
        if !base_url.username().is_empty() || base_url.password().is_some() {
            return Err(ApiError::Config(
                "the API URL carries user info; give credentials separately".into(),
            ));
        }
        if base_url.host_str().is_none_or(str::is_empty) {
            return Err(ApiError::Config(format!(
                "the API URL {base:?} has no host"
            )));
        }
        HeaderValue::from_str(&options.user_agent).map_err(|_| {
            ApiError::Config(format!(
                "the user agent {:?} is not a valid header value",
                options.user_agent
            ))
        })?;
        let auth = match credentials {
            Credentials::Token(token) => {
                let token = token.trim().to_owned();
                if token.is_empty() {
                    return Err(ApiError::Config("the token is empty".into()));
                }
                if HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                    return Err(ApiError::Config(
                        "the token holds characters a header cannot carry".into(),
                    ));
                }
                Auth::Token(token)
            }
            Credentials::App {
                app_id,
                private_key_pem,
                installation_id,
            } => Auth::App(Box::new(App::new(
                app_id,
                &private_key_pem,
                installation_id,
            )?)),
        };

        bdk_models::net::install_crypto_provider();
        // Follow redirects (a renamed repository answers 301) only within the
        // API's origin: the token must never reach another host.
        let origin = base_url.origin();
        let redirects = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if attempt.url().origin() == origin {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(redirects)
            .build()
            .map_err(|e| ApiError::Config(format!("failed to build the http client: {e}")))?;

        Ok(GithubClient {
            inner: Arc::new(Inner {
                base,
                base_url,
                http,
                auth,
                options,
                login: Mutex::new(None),
            }),
        })
    }

    /// The API base URL, without a trailing slash.
    pub fn api_url(&self) -> &str {
        &self.inner.base
    }

    /// Sends `req`, retrying as the policy allows, and returns the first
    /// success (any 2xx).
    pub async fn request(&self, req: ApiRequest) -> Result<ApiResponse, ApiError> {
        let prepared = self.prepare(req.method, &req.path, req.body, req.accept.as_deref())?;
        let raw = self
            .execute(&prepared, Identity::Acting(req.repo.as_deref()))
            .await?;
        into_response(raw)
    }

    /// `GET path`: the JSON body.
    pub async fn get(&self, path: &str, repo: Option<&str>) -> Result<Value, ApiError> {
        let mut req = ApiRequest::new(Method::Get, path);
        req.repo = repo.map(str::to_owned);
        Ok(self.request(req).await?.body)
    }

    /// `method path` with a JSON `body`: the JSON answer (`Null` for 204).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Value,
        repo: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut req = ApiRequest::new(method, path).with_body(body);
        req.repo = repo.map(str::to_owned);
        Ok(self.request(req).await?.body)
    }

    /// `GET path` in another media type, as text: `application/vnd.github.diff`
    /// for a pull request's unified diff, `application/vnd.github.raw+json`
    /// for a file's raw content.
    pub async fn text(
        &self,
        path: &str,
        accept: &str,
        repo: Option<&str>,
    ) -> Result<String, ApiError> {
        let prepared = self.prepare(Method::Get, path, None, Some(accept))?;
        let raw = self.execute(&prepared, Identity::Acting(repo)).await?;
        Ok(String::from_utf8_lossy(&raw.body).into_owned())
    }

    /// Every item of a list endpoint, following `Link: rel="next"` with
    /// pages of 100, until the list ends or `max_items` are in hand (the
    /// rest is not fetched). A link off the API's origin is an error.
    pub async fn paginate(
        &self,
        path: &str,
        repo: Option<&str>,
        max_items: usize,
    ) -> Result<Vec<Value>, ApiError> {
        let mut items = Vec::new();
        if max_items == 0 {
            return Ok(items);
        }
        let mut next = Some(page::with_per_page(path));
        let mut seen = HashSet::new();
        while let Some(path) = next.take() {
            if !seen.insert(path.clone()) {
                // A server that links a page to itself would loop forever.
                break;
            }
            let mut req = ApiRequest::new(Method::Get, path);
            req.repo = repo.map(str::to_owned);
            let response = self.request(req).await?;
            items.extend(page::items(response.body)?);
            if items.len() >= max_items {
                items.truncate(max_items);
                break;
            }
            next = response.next;
        }
        Ok(items)
    }

    /// The login the client acts as, as GitHub shows it on comments: a
    /// token's user (`GET /user`), or an App's `<slug>[bot]` (`GET /app`).
    /// Learnt once per client.
    pub async fn login(&self) -> Result<String, ApiError> {
        if let Some(login) = lock(&self.inner.login).clone() {
            return Ok(login);
        }
        let login = match &self.inner.auth {
            Auth::Token(_) => {
                let user = self.get("/user", None).await?;
                string_field(&user, "login", "GET /user")?
            }
            Auth::App(_) => {
                let prepared = self.prepare(Method::Get, "/app", None, None)?;
                let raw = self.execute(&prepared, Identity::App).await?;
                let app = into_response(raw)?.body;
                format!("{}[bot]", string_field(&app, "slug", "GET /app")?)
            }
        };
        *lock(&self.inner.login) = Some(login.clone());
        Ok(login)
    }

    /// The bearer token requests for `repo` go out with: the configured
    /// token, or the App's installation token for that repository (minted
    /// or refreshed as needed). For handing to a tool such as `gh` or
    /// `git` that talks to GitHub itself.
    pub async fn token(&self, repo: Option<&str>) -> Result<String, ApiError> {
        match &self.inner.auth {
            Auth::Token(token) => Ok(token.clone()),
            Auth::App(app) => Ok(self.installation_token(app, repo).await?.token),
        }
    }

    /// Checks the path and headers and resolves the URL.
    fn prepare(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        accept: Option<&str>,
    ) -> Result<Prepared, ApiError> {
        let base = &self.inner.base;
        let full = if path.starts_with('/') {
            format!("{base}{path}")
        } else if path.starts_with(&format!("{base}/")) {
            path.to_owned()
        } else {
            return Err(ApiError::Request(format!(
                "refusing {path:?}: a path starts with '/' and a URL must be under {base}"
            )));
        };
        let url = Url::parse(&full)
            .map_err(|e| ApiError::Request(format!("{path:?} is not a valid URL path: {e}")))?;
        if url.origin() != self.inner.base_url.origin() {
            return Err(ApiError::Request(format!(
                "refusing {path:?}: it leaves {base}"
            )));
        }
        let accept = HeaderValue::from_str(accept.unwrap_or(JSON_MEDIA_TYPE)).map_err(|_| {
            ApiError::Request(format!("the media type {accept:?} is not a header value"))
        })?;
        Ok(Prepared {
            method,
            url,
            body,
            accept,
        })
    }

    /// Sends `req` until it succeeds or the policy gives up.
    async fn execute(&self, req: &Prepared, identity: Identity<'_>) -> Result<Raw, ApiError> {
        let options = &self.inner.options;
        let max_attempts = options.max_attempts.max(1);
        let mut attempt = 0;
        let mut reauthenticated = false;
        let mut secondary_seen = 0;
        loop {
            attempt += 1;
            let token = self.bearer(identity).await?;
            let raw = match self.send_once(req, &token).await {
                Ok(raw) => raw,
                Err(error) => {
                    if error.is_builder() {
                        return Err(ApiError::Request(describe(&error)));
                    }
                    // A request that never connected was never processed,
                    // so even a POST may go again.
                    let retryable = req.method.is_idempotent() || error.is_connect();
                    if !retryable || attempt >= max_attempts {
                        return Err(ApiError::Transport(describe(&error)));
                    }
                    let wait = policy::backoff(options.backoff, attempt, options.max_wait);
                    tracing::warn!(
                        method = %req.method,
                        path = %req.url.path(),
                        error = %describe(&error),
                        wait_ms = millis(wait),
                        attempt,
                        "github request failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            if (200..300).contains(&raw.status) {
                return Ok(raw);
            }
            let error = ApiError::from_body(raw.status, &raw.body);
            let message = match &error {
                ApiError::Status { message, .. } => message.clone(),
                other => other.to_string(),
            };
            let now_ms = chrono::Utc::now().timestamp_millis();
            let wait =
                match policy::decide(raw.status, &raw.headers, &message, now_ms, secondary_seen) {
                    Decision::Fail => return Err(error),
                    Decision::Reauthenticate => {
                        let (Auth::App(app), Identity::Acting(repo), Some(token)) =
                            (&self.inner.auth, identity, token)
                        else {
                            return Err(error);
                        };
                        if reauthenticated || attempt >= max_attempts {
                            return Err(error);
                        }
                        // GitHub revoked or expired the token before we expected:
                        // drop it so the next try mints a fresh one.
                        reauthenticated = true;
                        self.forget_token(app, repo, &token).await;
                        tracing::warn!(
                            method = %req.method,
                            path = %req.url.path(),
                            status = raw.status,
                            attempt,
                            "github refused the installation token; minting a new one"
                        );
                        continue;
                    }
                    Decision::Wait(wait) => {
                        if wait >= policy::SECONDARY_WAIT
                            && policy::retry_after(&raw.headers, now_ms).is_none()
                            && policy::header_u64(&raw.headers, "x-ratelimit-remaining") != Some(0)
                        {
                            secondary_seen += 1;
                        }
                        if wait > options.max_wait || attempt >= max_attempts {
                            return Err(ApiError::RateLimited {
                                message,
                                retry_after: Some(wait),
                            });
                        }
                        wait
                    }
                    Decision::Backoff => {
                        if !req.method.is_idempotent() || attempt >= max_attempts {
                            return Err(error);
                        }
                        policy::backoff(options.backoff, attempt, options.max_wait)
                    }
                };
            tracing::warn!(
                method = %req.method,
                path = %req.url.path(),
                status = raw.status,
                wait_ms = millis(wait),
                attempt,
                "github refused the request; retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// [`Self::execute`] boxed, for the App's own calls made while choosing
    /// a token (an async call cycle needs one boxed step).
    fn execute_boxed<'a>(
        &'a self,
        req: &'a Prepared,
        identity: Identity<'a>,
    ) -> BoxFuture<'a, Result<Raw, ApiError>> {
        Box::pin(self.execute(req, identity))
    }

    /// One HTTP exchange.
    async fn send_once(
        &self,
        req: &Prepared,
        token: &Option<String>,
    ) -> Result<Raw, reqwest::Error> {
        let method = match req.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Patch => reqwest::Method::PATCH,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut builder = self
            .inner
            .http
            .request(method, req.url.clone())
            .timeout(self.inner.options.timeout)
            .header(header::ACCEPT, req.accept.clone())
            .header("x-github-api-version", API_VERSION)
            .header(header::USER_AGENT, self.inner.options.user_agent.as_str());
        if let Some(token) = token {
            builder = builder.bearer_auth(token);
        }
        if let Some(body) = &req.body {
            builder = builder.json(body);
        }
        let response = builder.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await?.to_vec();
        Ok(Raw {
            status,
            headers,
            body,
        })
    }

    /// The bearer token for `identity`.
    async fn bearer(&self, identity: Identity<'_>) -> Result<Option<String>, ApiError> {
        match (&self.inner.auth, identity) {
            (Auth::Token(token), _) => Ok(Some(token.clone())),
            (Auth::App(app), Identity::App) => Ok(Some(app.jwt(chrono::Utc::now())?)),
            (Auth::App(app), Identity::Acting(repo)) => {
                Ok(Some(self.installation_token(app, repo).await?.token))
            }
        }
    }

    /// The cached installation token for `repo`, minted when there is none
    /// or it has less than [`REFRESH_BEFORE`] left.
    async fn installation_token(&self, app: &App, repo: Option<&str>) -> Result<Minted, ApiError> {
        let id = self.installation_for(app, repo).await?;
        let slot = app.slot(id);
        let mut cached = slot.lock().await;
        if let Some(minted) = cached.as_ref()
            && minted.expires_at - chrono::Utc::now() > REFRESH_BEFORE
        {
            return Ok(minted.clone());
        }
        let minted = self.mint(id).await?;
        *cached = Some(minted.clone());
        Ok(minted)
    }

    /// Drops `token` from the cache of `repo`'s installation, unless another
    /// caller already replaced it.
    async fn forget_token(&self, app: &App, repo: Option<&str>, token: &str) {
        let Ok(id) = self.installation_for(app, repo).await else {
            return;
        };
        let slot = app.slot(id);
        let mut cached = slot.lock().await;
        if cached.as_ref().is_some_and(|minted| minted.token == token) {
            *cached = None;
        }
    }

    /// The installation to act in for `repo`: the configured one, or the one
    /// GitHub reports for the repository (learnt once).
    async fn installation_for(&self, app: &App, repo: Option<&str>) -> Result<u64, ApiError> {
        if let Some(id) = app.installation_id {
            return Ok(id);
        }
        let Some(repo) = repo else {
            return Err(ApiError::Auth(
                "a GitHub App without an installation id needs the request's repository (owner/name) to find its installation"
                    .into(),
            ));
        };
        check_repo(repo)?;
        if let Some(id) = app.known_installation(repo) {
            return Ok(id);
        }
        let prepared = self.prepare(
            Method::Get,
            &format!("/repos/{repo}/installation"),
            None,
            None,
        )?;
        let raw = self.execute_boxed(&prepared, Identity::App).await.map_err(
            |error| match error.status() {
                Some(404) => ApiError::Auth(format!("the GitHub App is not installed on {repo}")),
                Some(401 | 403) => ApiError::Auth(format!(
                    "GitHub refused the App's JWT looking up the installation for {repo}: {error}"
                )),
                _ => error,
            },
        )?;
        let body = into_response(raw)?.body;
        let id = body.get("id").and_then(Value::as_u64).ok_or_else(|| {
            ApiError::Decode(format!("the installation of {repo} has no numeric id"))
        })?;
        app.remember_installation(repo, id);
        Ok(id)
    }

    /// A new installation token (`POST /app/installations/{id}/access_tokens`).
    async fn mint(&self, id: u64) -> Result<Minted, ApiError> {
        let prepared = self.prepare(
            Method::Post,
            &format!("/app/installations/{id}/access_tokens"),
            None,
            None,
        )?;
        let raw =
            self.execute_boxed(&prepared, Identity::App)
                .await
                .map_err(|error| match error.status() {
                    Some(401 | 403 | 404 | 422) => ApiError::Auth(format!(
                        "failed to mint a token for installation {id}: {error}"
                    )),
                    _ => error,
                })?;
        let body = into_response(raw)?.body;
        let token = string_field(&body, "token", "the access token response")?;
        let expires_at = string_field(&body, "expires_at", "the access token response")?;
        let expires_at = chrono::DateTime::parse_from_rfc3339(&expires_at)
            .map_err(|e| ApiError::Decode(format!("the token's expires_at {expires_at:?}: {e}")))?
            .with_timezone(&chrono::Utc);
        Ok(Minted { token, expires_at })
    }
}

/// A 2xx response as the caller sees it.
fn into_response(raw: Raw) -> Result<ApiResponse, ApiError> {
    let next = raw
        .headers
        .get(header::LINK)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| page::link(value, "next"));
    let rate_remaining = policy::header_u64(&raw.headers, "x-ratelimit-remaining");
    let content_type = raw
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_ascii_lowercase);
    let body = if raw.body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match content_type {
            Some(kind) if kind.contains("json") => {
                serde_json::from_slice(&raw.body).map_err(|e| {
                    ApiError::Decode(format!(
                        "the {} response says JSON but does not parse: {e}",
                        raw.status
                    ))
                })?
            }
            Some(_) => Value::String(String::from_utf8_lossy(&raw.body).into_owned()),
            None => serde_json::from_slice(&raw.body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw.body).into_owned())),
        }
    };
    Ok(ApiResponse {
        status: raw.status,
        body,
        next,
        rate_remaining,
    })
}

/// A string field of a response object.
fn string_field(value: &Value, field: &str, what: &str) -> Result<String, ApiError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::Decode(format!("{what} has no string {field:?}")))
}

/// `owner/name`, as GitHub allows them, and nothing that could reshape a
/// path.
fn check_repo(repo: &str) -> Result<(), ApiError> {
    let valid_part = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if valid_part(owner) && valid_part(name) => Ok(()),
        _ => Err(ApiError::Request(format!(
            "{repo:?} is not a repository (owner/name)"
        ))),
    }
}

/// A reqwest error with its causes ("error sending request: connection
/// refused"); reqwest's own message names only the outermost.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str) -> Result<GithubClient, ApiError> {
        GithubClient::new(
            url,
            Credentials::Token("t".into()),
            ClientOptions::default(),
        )
    }

    #[test]
    fn the_api_url_is_checked() {
        assert_eq!(
            client("https://api.github.com/").unwrap().api_url(),
            "https://api.github.com"
        );
        assert_eq!(
            client("https://ghe.example.com/api/v3").unwrap().api_url(),
            "https://ghe.example.com/api/v3"
        );
        for bad in [
            "ftp://x",
            "https://x/?a=b",
            "https://u:p@x",
            "not a url",
            "",
        ] {
            assert!(
                matches!(client(bad), Err(ApiError::Config(_))),
                "{bad:?} was accepted"
            );
        }
        let empty = GithubClient::new(
            "https://x",
            Credentials::Token(" ".into()),
            ClientOptions::default(),
        );
        assert!(matches!(empty, Err(ApiError::Config(_))));
    }

    #[test]
    fn paths_stay_under_the_api_base() {
        let client = client("https://ghe.example.com/api/v3").unwrap();
        let url = |path: &str| {
            client
                .prepare(Method::Get, path, None, None)
                .map(|p| p.url.to_string())
        };
        assert_eq!(
            url("/repos/o/r").unwrap(),
            "https://ghe.example.com/api/v3/repos/o/r"
        );
        assert_eq!(
            url("https://ghe.example.com/api/v3/repos/o/r?page=2").unwrap(),
            "https://ghe.example.com/api/v3/repos/o/r?page=2"
        );
        for bad in [
            "repos/o/r",
            "https://evil.example.com/api/v3/repos/o/r",
            "https://ghe.example.com.evil.example.com/api/v3/x",
            "http://ghe.example.com/api/v3/repos/o/r",
        ] {
            assert!(
                matches!(url(bad), Err(ApiError::Request(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn repositories_are_owner_and_name() {
        assert!(check_repo("octo-org/hello.world_1").is_ok());
        for bad in ["octo", "/r", "o/", "o/r/x", "o/..", "o/r?x", "o/r#1"] {
            assert!(check_repo(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn debug_output_hides_secrets() {
        let credentials = Credentials::App {
            app_id: "1".into(),
            private_key_pem: "SECRET".into(),
            installation_id: None,
        };
        assert!(!format!("{credentials:?}").contains("SECRET"));
        assert!(!format!("{:?}", Credentials::Token("ghp_SECRET".into())).contains("SECRET"));
        assert!(!format!("{:?}", client("https://x").unwrap()).contains("\"t\""));
    }
}
