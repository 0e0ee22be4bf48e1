//! The auth chain of the agent routes: who is calling, and what they may see.
//!
//! [`authenticate`] runs before every protected route. It admits or refuses
//! the request by the app's [`Policy`] and records the [`Caller`] in the
//! request extensions; handlers take it as an extractor.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::{Auth, Shared};

/// Headers that mean a proxy relayed the request.
const PROXY_HEADERS: &[&str] = &["forwarded", "via", "x-real-ip"];

/// The auth policy, prepared once: bearer secrets are kept as SHA-256
/// digests so every comparison runs over 32 bytes, whatever the lengths of
/// the presented and expected tokens.
pub(crate) enum Policy {
    LocalDevStrict,
    Bearer(Vec<(String, [u8; 32])>),
    Anonymous,
}

impl Policy {
    pub(crate) fn new(auth: &Auth) -> Self {
        match auth {
            Auth::LocalDevStrict => Policy::LocalDevStrict,
            Auth::Bearer(tokens) => Policy::Bearer(
                tokens
                    .iter()
                    .map(|t| (t.principal.clone(), digest(t.token.as_bytes())))
                    .collect(),
            ),
            Auth::Anonymous => Policy::Anonymous,
        }
    }

    /// The policy's name as `/v1/meta` reports it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Policy::LocalDevStrict => "localDevStrict",
            Policy::Bearer(_) => "bearer",
            Policy::Anonymous => "anonymous",
        }
    }

    /// True when callers cannot come through a proxy (so forwarded-scheme
    /// headers are never trusted).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Policy::LocalDevStrict)
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&Sha256::digest(bytes));
    out
}

/// The authenticated caller of a request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// The principal: owner of the sessions it creates.
    pub(crate) principal: String,
    /// Sees every session and artifact (dev mode on loopback, or anonymous
    /// auth), not only its own.
    pub(crate) sees_all: bool,
}

impl Caller {
    /// The principal to check reads against: `None` (see everything) for a
    /// caller that sees all sessions.
    pub(crate) fn read_scope(&self) -> Option<&str> {
        (!self.sees_all).then_some(self.principal.as_str())
    }

    /// The principal to check changes against: always the caller's own.
    /// Seeing every session does not mean driving every session.
    pub(crate) fn owner(&self) -> Option<&str> {
        Some(self.principal.as_str())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("the request was not authenticated"))
    }
}

/// The middleware: admit the request and record its caller, or answer 401.
pub(crate) async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    match admit(&shared, req.headers(), req.uri(), peer) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

fn admit(
    shared: &Shared,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    peer: Option<SocketAddr>,
) -> Result<Caller, ApiError> {
    let loopback_peer = peer.is_some_and(|p| is_loopback(p.ip()));
    match &shared.auth {
        Policy::LocalDevStrict => {
            if !loopback_peer {
                return Err(ApiError::unauthorized(
                    "only direct loopback clients are admitted by the default local-only auth; serve with --bearer-token or --allow-anonymous to accept others",
                ));
            }
            if let Some(name) = proxy_header(headers) {
                return Err(ApiError::unauthorized(format!(
                    "the request carries the proxy header `{name}`; the default local-only auth admits direct loopback clients only (use --bearer-token behind a proxy)"
                )));
            }
            if let Some(host) = request_host(headers, uri)
                && !is_loopback_host(&host)
            {
                return Err(ApiError::unauthorized(
                    "the Host header does not name a loopback address; the default local-only auth admits local clients only",
                ));
            }
            Ok(Caller {
                principal: "local".into(),
                sees_all: shared.dev,
            })
        }
        Policy::Bearer(tokens) => {
            let presented = bearer_token(headers).ok_or_else(|| {
                ApiError::unauthorized("send the token as `Authorization: Bearer <token>`")
            })?;
            let presented = digest(presented.as_bytes());
            let mut found: Option<&str> = None;
            // Every configured token is compared, so the time taken does
            // not tell which one (if any) came close.
            for (principal, expected) in tokens {
                if bool::from(presented.ct_eq(expected)) && found.is_none() {
                    found = Some(principal);
                }
            }
            let principal =
                found.ok_or_else(|| ApiError::unauthorized("the token is not valid"))?;
            Ok(Caller {
                principal: principal.to_owned(),
                sees_all: shared.dev && loopback_peer,
            })
        }
        Policy::Anonymous => Ok(Caller {
            principal: "anonymous".into(),
            sees_all: true,
        }),
    }
}

fn proxy_header(headers: &HeaderMap) -> Option<String> {
    headers
        .keys()
        .map(|k| k.as_str())
        .find(|k| PROXY_HEADERS.contains(k) || k.starts_with("x-forwarded-"))
        .map(str::to_owned)
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The host the client addressed: the `Host` header, or the URI authority
/// (HTTP/2).
pub(crate) fn request_host(headers: &HeaderMap, uri: &axum::http::Uri) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
}

fn is_loopback_host(host: &str) -> bool {
    let name = host_without_port(host);
    if name.eq_ignore_ascii_case("localhost") || name.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok_and(is_loopback)
}

fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // `[::1]:8080` or `[::1]`.
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "127.0.0.1:3000",
            "localhost",
            "LOCALHOST:80",
            "[::1]:8080",
            "[::1]",
            "127.9.9.9",
            "app.localhost:1",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["evil.com", "evil.com:3000", "10.0.0.1:3000", "[::2]:1", ""] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn bearer_header_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer   abc  ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn proxy_headers_are_found() {
        let mut h = HeaderMap::new();
        h.insert("x-custom", "1".parse().unwrap());
        assert_eq!(proxy_header(&h), None);
        h.insert("X-Forwarded-Proto", "https".parse().unwrap());
        assert_eq!(proxy_header(&h).as_deref(), Some("x-forwarded-proto"));
    }
}
