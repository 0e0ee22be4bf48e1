//! OAuth for HTTP MCP connections, as the MCP authorization spec lays it
//! out: the MCP server names its authorization server in its
//! protected-resource metadata (RFC 9728, found through the
//! `WWW-Authenticate` header of a 401 or at the well-known path); the
//! authorization server describes itself (RFC 8414, or OpenID discovery);
//! a client without a registered id registers itself (RFC 7591); the user
//! signs in through the authorization-code flow with PKCE (S256, required)
//! and a loopback redirect; every request names the MCP server as the
//! `resource` (RFC 8707); and an expired access token is refreshed.
//!
//! [`begin`] and [`finish`] are the two halves of `bdk mcp login`;
//! [`TokenStore`] keeps the result under the state root, readable by its
//! owner only, and [`fresh_token`] is what a connection calls before it
//! connects.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bdk_core::project::McpOAuth;
use chrono::{DateTime, Duration, Utc};
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// An access token this close to its expiry is refreshed before use.
const EXPIRY_MARGIN_SECS: i64 = 30;

/// What went wrong in the flow, for a person.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OAuthError(String);

fn err(message: impl Into<String>) -> OAuthError {
    OAuthError(message.into())
}

type Result<T> = std::result::Result<T, OAuthError>;

/// The tokens of one connection, as stored.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Tokens {
    /// Sent as `Authorization: Bearer`.
    pub access_token: String,
    /// Exchanged for a new access token when this one expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The granted scope, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Where tokens are refreshed.
    pub token_endpoint: String,
    /// The client the tokens were issued to.
    pub client_id: String,
    /// The MCP server the tokens are for (the `resource` of every request).
    pub resource: String,
}

impl Tokens {
    fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at
            .is_some_and(|at| at - Duration::seconds(EXPIRY_MARGIN_SECS) <= now)
    }
}

/// Tokens on disk: `<state root>/mcp-auth/<connection>.json`, mode 0600.
#[derive(Clone, Debug)]
pub struct TokenStore {
    dir: PathBuf,
}

impl TokenStore {
    /// The store under `state_root`.
    pub fn under(state_root: &Path) -> Self {
        Self {
            dir: state_root.join("mcp-auth"),
        }
    }

    /// Where the tokens of `connection` live.
    pub fn path(&self, connection: &str) -> PathBuf {
        self.dir.join(format!("{connection}.json"))
    }

    /// The stored tokens of `connection`, if any (unreadable or malformed
    /// files count as none, with a warning).
    pub fn load(&self, connection: &str) -> Option<Tokens> {
        let path = self.path(connection);
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(tokens) => Some(tokens),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring a malformed MCP token file");
                None
            }
        }
    }

    /// Stores the tokens of `connection`: written to a private temporary
    /// file, then renamed over the old one.
    pub fn save(&self, connection: &str, tokens: &Tokens) -> std::io::Result<PathBuf> {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(connection);
        let tmp = self.dir.join(format!(".{connection}.json.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(tokens).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }
}

/// The authorization server of an MCP server, as discovered.
#[derive(Clone, Debug)]
pub struct AuthServer {
    /// The MCP server's resource identifier.
    pub resource: String,
    /// Where the user signs in.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// Where a client registers itself, when the server offers it.
    pub registration_endpoint: Option<String>,
    /// Scopes the resource says it supports.
    pub scopes_supported: Vec<String>,
}

/// A sign-in started by [`begin`]: open `authorize_url`, then hand the code
/// the redirect brings to [`finish`].
#[derive(Clone, Debug)]
pub struct Pending {
    /// The URL the user opens in a browser.
    pub authorize_url: String,
    /// Must come back unchanged on the redirect.
    pub state: String,
    verifier: String,
    redirect_uri: String,
    client_id: String,
    server: AuthServer,
}

/// Finds the authorization server of the MCP server at `mcp_url`.
pub async fn discover(client: &reqwest::Client, mcp_url: &str) -> Result<AuthServer> {
    let url = Url::parse(mcp_url).map_err(|e| err(format!("`{mcp_url}` is not a URL: {e}")))?;
    // The server answers an unauthenticated request with 401 and names its
    // metadata in WWW-Authenticate; the well-known paths are the fallback.
    let probe = client
        .post(url.clone())
        .header("accept", "application/json, text/event-stream")
        .json(&serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bdk", "version": env!("CARGO_PKG_VERSION")}}
        }))
        .send()
        .await
        .map_err(|e| err(format!("cannot reach the MCP server at {mcp_url}: {e}")))?;
    let mut candidates = Vec::new();
    if let Some(named) = probe
        .headers()
        .get_all("www-authenticate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(resource_metadata_param)
    {
        candidates.push(named);
    }
    candidates.extend(well_known(&url, "oauth-protected-resource"));
    let mut metadata = None;
    for candidate in &candidates {
        if let Some(v) = get_json(client, candidate).await {
            metadata = Some(v);
            break;
        }
    }
    let metadata = metadata.ok_or_else(|| {
        err(format!(
            "the MCP server at {mcp_url} publishes no OAuth protected-resource metadata (looked at {})",
            candidates.join(", ")
        ))
    })?;
    let resource = metadata["resource"].as_str().unwrap_or(mcp_url).to_owned();
    let issuer = metadata["authorization_servers"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .ok_or_else(|| err("the protected-resource metadata names no authorization server"))?;
    let issuer_url =
        Url::parse(issuer).map_err(|e| err(format!("authorization server `{issuer}`: {e}")))?;
    let mut server_meta = None;
    let mut tried = Vec::new();
    for suffix in ["oauth-authorization-server", "openid-configuration"] {
        for candidate in well_known(&issuer_url, suffix) {
            if let Some(v) = get_json(client, &candidate).await {
                server_meta = Some(v);
                break;
            }
            tried.push(candidate);
        }
        if server_meta.is_some() {
            break;
        }
    }
    let meta = server_meta.ok_or_else(|| {
        err(format!(
            "the authorization server {issuer} publishes no metadata (looked at {})",
            tried.join(", ")
        ))
    })?;
    let field = |name: &str| meta[name].as_str().map(str::to_owned);
    let methods: Vec<&str> = meta["code_challenge_methods_supported"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !methods.contains(&"S256") {
        return Err(err(format!(
            "the authorization server {issuer} does not offer PKCE with S256 (code_challenge_methods_supported: {methods:?}); bdk will not sign in without it"
        )));
    }
    Ok(AuthServer {
        resource,
        authorization_endpoint: field("authorization_endpoint")
            .ok_or_else(|| err("the authorization server names no authorization_endpoint"))?,
        token_endpoint: field("token_endpoint")
            .ok_or_else(|| err("the authorization server names no token_endpoint"))?,
        registration_endpoint: field("registration_endpoint"),
        scopes_supported: metadata["scopes_supported"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Starts a sign-in for the connection: discovers the servers, registers a
/// client when none is configured, and builds the authorization URL with a
/// fresh PKCE pair and state.
pub async fn begin(
    client: &reqwest::Client,
    mcp_url: &str,
    settings: &McpOAuth,
    redirect_uri: &str,
) -> Result<Pending> {
    let server = discover(client, mcp_url).await?;
    let client_id = match &settings.client_id {
        Some(id) => id.clone(),
        None => register(client, &server, redirect_uri).await?,
    };
    let verifier = random_token();
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let state = random_token();
    let mut url = Url::parse(&server.authorization_endpoint)
        .map_err(|e| err(format!("authorization_endpoint: {e}")))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &server.resource);
        let scopes = if settings.scopes.is_empty() {
            &server.scopes_supported
        } else {
            &settings.scopes
        };
        if !scopes.is_empty() {
            q.append_pair("scope", &scopes.join(" "));
        }
    }
    Ok(Pending {
        authorize_url: url.to_string(),
        state,
        verifier,
        redirect_uri: redirect_uri.to_owned(),
        client_id,
        server,
    })
}

/// Exchanges the code the redirect brought for tokens.
pub async fn finish(client: &reqwest::Client, pending: &Pending, code: &str) -> Result<Tokens> {
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", pending.redirect_uri.as_str()),
        ("client_id", pending.client_id.as_str()),
        ("code_verifier", pending.verifier.as_str()),
        ("resource", pending.server.resource.as_str()),
    ];
    let answer = token_request(client, &pending.server.token_endpoint, &form).await?;
    tokens_from(
        &answer,
        &pending.server.token_endpoint,
        &pending.client_id,
        &pending.server.resource,
        None,
    )
}

/// Exchanges the refresh token for a new access token.
pub async fn refresh(client: &reqwest::Client, tokens: &Tokens) -> Result<Tokens> {
    let Some(refresh_token) = &tokens.refresh_token else {
        return Err(err(
            "the access token expired and there is no refresh token",
        ));
    };
    let form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token.as_str()),
        ("client_id", tokens.client_id.as_str()),
        ("resource", tokens.resource.as_str()),
    ];
    let answer = token_request(client, &tokens.token_endpoint, &form).await?;
    tokens_from(
        &answer,
        &tokens.token_endpoint,
        &tokens.client_id,
        &tokens.resource,
        Some(refresh_token),
    )
}

/// The access token to connect with: the stored one, refreshed (and stored
/// again) first when it has expired or `force` says the server refused it.
pub async fn fresh_token(
    client: &reqwest::Client,
    store: &TokenStore,
    connection: &str,
    force: bool,
) -> Result<String> {
    let login = format!("run `bdk mcp login {connection}` to sign in");
    let Some(tokens) = store.load(connection) else {
        return Err(err(format!(
            "connection `{connection}` needs an OAuth sign-in and has none stored ({}); {login}",
            store.path(connection).display()
        )));
    };
    if !force && !tokens.expired(Utc::now()) {
        return Ok(tokens.access_token);
    }
    let renewed = refresh(client, &tokens)
        .await
        .map_err(|e| err(format!("connection `{connection}`: {e}; {login}")))?;
    store
        .save(connection, &renewed)
        .map_err(|e| err(format!("cannot store the refreshed token: {e}")))?;
    Ok(renewed.access_token)
}

async fn register(
    client: &reqwest::Client,
    server: &AuthServer,
    redirect_uri: &str,
) -> Result<String> {
    let Some(endpoint) = &server.registration_endpoint else {
        return Err(err(
            "the authorization server offers no dynamic client registration; register a client with it and set `client_id` under `[oauth]`",
        ));
    };
    let resp = client
        .post(endpoint)
        .json(&serde_json::json!({
            "client_name": "bdk",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }))
        .send()
        .await
        .map_err(|e| err(format!("client registration at {endpoint} failed: {e}")))?;
    let status = resp.status();
    let body: Value = resp.json().await.map_err(|e| {
        err(format!(
            "client registration at {endpoint}: the answer is not JSON: {e}"
        ))
    })?;
    if !status.is_success() {
        return Err(err(format!(
            "client registration at {endpoint} answered {status}: {}",
            oauth_error_text(&body)
        )));
    }
    body["client_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| {
            err(format!(
                "client registration at {endpoint} returned no client_id"
            ))
        })
}

async fn token_request(
    client: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
) -> Result<Value> {
    let body = form
        .iter()
        .fold(
            Url::parse("x:/").map_err(|e| err(e.to_string()))?,
            |mut u, (k, v)| {
                u.query_pairs_mut().append_pair(k, v);
                u
            },
        )
        .query()
        .unwrap_or_default()
        .to_owned();
    let resp = client
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| err(format!("the token request to {endpoint} failed: {e}")))?;
    let status = resp.status();
    let answer: Value = resp.json().await.map_err(|e| {
        err(format!(
            "the token endpoint {endpoint} did not answer JSON: {e}"
        ))
    })?;
    if !status.is_success() {
        return Err(err(format!(
            "the token endpoint {endpoint} answered {status}: {}",
            oauth_error_text(&answer)
        )));
    }
    Ok(answer)
}

fn tokens_from(
    answer: &Value,
    token_endpoint: &str,
    client_id: &str,
    resource: &str,
    previous_refresh: Option<&String>,
) -> Result<Tokens> {
    let access_token = answer["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| err("the token endpoint returned no access_token"))?;
    if let Some(kind) = answer["token_type"].as_str()
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(err(format!(
            "the token endpoint returned a `{kind}` token, not a bearer token"
        )));
    }
    Ok(Tokens {
        access_token: access_token.to_owned(),
        refresh_token: answer["refresh_token"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| previous_refresh.cloned()),
        expires_at: answer["expires_in"]
            .as_i64()
            .map(|s| Utc::now() + Duration::seconds(s.max(0))),
        scope: answer["scope"].as_str().map(str::to_owned),
        token_endpoint: token_endpoint.to_owned(),
        client_id: client_id.to_owned(),
        resource: resource.to_owned(),
    })
}

fn oauth_error_text(body: &Value) -> String {
    match (body["error"].as_str(), body["error_description"].as_str()) {
        (Some(code), Some(text)) => format!("{code}: {text}"),
        (Some(code), None) => code.to_owned(),
        _ => body.to_string(),
    }
}

async fn get_json(client: &reqwest::Client, url: &str) -> Option<Value> {
    let resp = client
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json::<Value>().await.ok().filter(Value::is_object)
}

/// `resource_metadata="…"` of a `WWW-Authenticate: Bearer …` header.
fn resource_metadata_param(header: &str) -> Option<String> {
    let at = header.find("resource_metadata=")?;
    let rest = &header[at + "resource_metadata=".len()..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// The well-known URLs for `url` (RFC 8414 section 3 and RFC 9728 section
/// 3): the suffix inserted before the path, then at the root, then (for
/// OpenID) appended to the path.
fn well_known(url: &Url, suffix: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!("{origin}/.well-known/{suffix}{path}"));
    }
    out.push(format!("{origin}/.well-known/{suffix}"));
    if suffix == "openid-configuration" && !path.is_empty() {
        out.push(format!("{origin}{path}/.well-known/{suffix}"));
    }
    out
}

/// 32 random bytes, base64url: a PKCE verifier (43 characters) or a state.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_is_read_from_www_authenticate() {
        assert_eq!(
            resource_metadata_param(
                r#"Bearer error="invalid_token", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp""#
            )
            .as_deref(),
            Some("https://mcp.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata_param("Bearer resource_metadata=https://x/m, scope=a").as_deref(),
            Some("https://x/m")
        );
        assert_eq!(resource_metadata_param("Bearer realm=\"x\""), None);
        assert_eq!(
            resource_metadata_param("Bearer resource_metadata=\"\""),
            None
        );
    }

    #[test]
    fn well_known_urls_follow_the_rfcs() {
        let url = Url::parse("https://as.example/tenant/one").unwrap();
        assert_eq!(
            well_known(&url, "oauth-authorization-server"),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant/one",
                "https://as.example/.well-known/oauth-authorization-server"
            ]
        );
        assert_eq!(
            well_known(&url, "openid-configuration")[2],
            "https://as.example/tenant/one/.well-known/openid-configuration"
        );
        let root = Url::parse("https://as.example/").unwrap();
        assert_eq!(
            well_known(&root, "oauth-protected-resource"),
            ["https://as.example/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn verifiers_are_long_enough_and_url_safe() {
        let v = random_token();
        assert_eq!(v.len(), 43);
        assert!(
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(v, random_token());
    }

    #[test]
    fn a_token_near_its_expiry_counts_as_expired() {
        let now = Utc::now();
        let mut t = Tokens {
            access_token: "a".into(),
            refresh_token: None,
            expires_at: Some(now + Duration::seconds(10)),
            scope: None,
            token_endpoint: "https://as/token".into(),
            client_id: "c".into(),
            resource: "https://mcp".into(),
        };
        assert!(t.expired(now));
        t.expires_at = Some(now + Duration::seconds(3600));
        assert!(!t.expired(now));
        t.expires_at = None;
        assert!(!t.expired(now));
    }

    #[test]
    fn the_store_keeps_tokens_private() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::under(dir.path());
        assert!(store.load("remote").is_none());
        let t = Tokens {
            access_token: "secret".into(),
            refresh_token: Some("r".into()),
            expires_at: None,
            scope: None,
            token_endpoint: "https://as/token".into(),
            client_id: "c".into(),
            resource: "https://mcp".into(),
        };
        let path = store.save("remote", &t).unwrap();
        assert_eq!(store.load("remote"), Some(t));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, b"not json").unwrap();
        assert!(store.load("remote").is_none());
    }
}
