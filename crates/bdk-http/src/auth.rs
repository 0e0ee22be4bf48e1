//! The auth chain of the agent routes: who is calling, and what they may see.
//!
//! [`authenticate`] runs before every protected route. It admits or refuses
//! the request by the app's [`Policy`] and records the [`Caller`] in the
//! request extensions; handlers take it as an extractor.

pub(crate) mod policy;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::auth::policy::{Policy, digest};
use crate::error::{ApiError, ErrorCode};
use crate::state::Shared;

/// Headers that mean a proxy relayed the request.
const PROXY_HEADERS: &[&str] = &["forwarded", "via", "x-real-ip"];

/// The authenticated caller of a request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// The principal: owner of the sessions it creates.
    pub(crate) principal: String,
    /// Sees every session and artifact (dev mode on loopback, or anonymous
    /// auth), not only its own.
    pub(crate) sees_all: bool,
}

/// The caller adds nothing to an operation's description: the auth chain
/// around the protected routes answers `401` (see `api::protected`).
impl aide::OperationInput for Caller {}

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
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::new(ErrorCode::Unauthorized, "the request was not authenticated")
        })
    }
}

/// The middleware: admit the request and record its caller, or answer 401.
pub(crate) async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = peer_of(&req);
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

/// Why a request is not a direct local one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NotLocal {
    /// The peer is not on a loopback address (or is unknown).
    Peer,
    /// The request carries this proxy-forwarding header.
    ProxyHeader(String),
    /// The authority the request names is not one loopback host.
    Host(HostProblem),
}

impl NotLocal {
    /// What is wrong, as a fragment a caller words its refusal around.
    pub(crate) fn what(&self) -> String {
        match self {
            NotLocal::Peer => "the client is not on a loopback address".to_owned(),
            NotLocal::ProxyHeader(name) => {
                format!("the request carries the proxy header `{name}`")
            }
            NotLocal::Host(problem) => problem.what().to_owned(),
        }
    }
}

/// The local-only rule, which the default policy applies to every agent
/// route and the local-only routes (`POST /v1/webhooks/github`) apply
/// whatever the policy: the peer is on a loopback address, the request
/// carries no header a proxy adds (it was not relayed from somewhere else),
/// and it names exactly one well-formed loopback host (it does not come
/// from a page that rebound a foreign name to 127.0.0.1).
pub(crate) fn check_local(
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    peer: Option<SocketAddr>,
) -> Result<(), NotLocal> {
    if !peer.is_some_and(|p| is_loopback(p.ip())) {
        return Err(NotLocal::Peer);
    }
    if let Some(name) = proxy_header(headers) {
        return Err(NotLocal::ProxyHeader(name));
    }
    check_local_authority(headers, uri).map_err(NotLocal::Host)
}

/// The peer address axum recorded for a request, when it was served with
/// connect info.
pub(crate) fn peer_of(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

fn admit(
    shared: &Shared,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    peer: Option<SocketAddr>,
) -> Result<Caller, ApiError> {
    match &shared.auth {
        Policy::LocalDevStrict => {
            let refused = |message: String| ApiError::new(ErrorCode::Unauthorized, message);
            match check_local(headers, uri, peer) {
                Ok(()) => {}
                Err(NotLocal::Peer) => {
                    return Err(refused(
                        "only direct loopback clients are admitted by the default local-only auth; serve with --bearer-token or --allow-anonymous to accept others".to_owned(),
                    ));
                }
                Err(e @ NotLocal::ProxyHeader(_)) => {
                    return Err(refused(format!(
                        "{}; the default local-only auth admits direct loopback clients only (use --bearer-token behind a proxy)",
                        e.what()
                    )));
                }
                Err(NotLocal::Host(problem)) => return Err(refused(problem.message())),
            }
            Ok(Caller {
                principal: "local".into(),
                sees_all: shared.dev,
            })
        }
        Policy::Bearer(tokens) => {
            let presented = bearer_token(headers).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Unauthorized,
                    "send the token as `Authorization: Bearer <token>`",
                )
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
            let principal = found
                .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "the token is not valid"))?;
            Ok(Caller {
                principal: principal.to_owned(),
                // Seeing every session is for the developer at this
                // machine, judged by the same rule as the local-only
                // policy: a reverse proxy on this machine is a loopback
                // peer too, and would otherwise give it to every remote
                // token holder.
                sees_all: shared.dev && check_local(headers, uri, peer).is_ok(),
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

/// Why the local-only rule refuses the authority a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostProblem {
    /// No `Host` header and no authority in the request target.
    Missing,
    /// More than one `Host` header: which one a client meant is anyone's guess.
    Duplicate,
    /// Not `host[:port]` by the strict grammar of [`parse_host`].
    Malformed,
    /// Well-formed, but not a loopback name or address.
    NotLoopback,
}

impl HostProblem {
    /// What is wrong, as a fragment.
    fn what(self) -> &'static str {
        match self {
            HostProblem::Missing => "the request names no host (no Host header)",
            HostProblem::Duplicate => "the request carries more than one Host header",
            HostProblem::Malformed => "the Host header is not a valid host[:port]",
            HostProblem::NotLoopback => "the Host header does not name a loopback address",
        }
    }

    /// The default policy's refusal.
    fn message(self) -> String {
        let rule = match self {
            HostProblem::Missing => {
                "the default local-only auth admits requests addressed to a loopback name or address only"
            }
            HostProblem::Duplicate => "the default local-only auth admits exactly one",
            HostProblem::Malformed => {
                "the default local-only auth admits loopback names and addresses only"
            }
            HostProblem::NotLoopback => "the default local-only auth admits local clients only",
        };
        format!("{}; {rule}", self.what())
    }
}

/// The local-only policy's check of what the client addressed: exactly one
/// `Host` header, or none with an authority in the request target (HTTP/2's
/// `:authority`, an absolute-form HTTP/1.1 target); and every authority the
/// request names is a well-formed loopback name or address. A page on a
/// foreign domain rebound to 127.0.0.1 sends that domain as its Host, so
/// anything but a loopback name is refused, and so is anything a lenient
/// parser could read as a loopback name while a browser or proxy reads it
/// as another (`[::1]evil.com`, bytes above 0x7f).
fn check_local_authority(headers: &HeaderMap, uri: &axum::http::Uri) -> Result<(), HostProblem> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(HostProblem::Duplicate);
    }
    let target = uri.authority().map(|a| a.as_str().as_bytes());
    if host.is_none() && target.is_none() {
        return Err(HostProblem::Missing);
    }
    for value in host.map(|h| h.as_bytes()).into_iter().chain(target) {
        match parse_host(value) {
            None => return Err(HostProblem::Malformed),
            Some(name) if !name.is_loopback() => return Err(HostProblem::NotLoopback),
            Some(_) => {}
        }
    }
    Ok(())
}

/// The host part of a well-formed authority.
#[derive(Debug, PartialEq, Eq)]
enum HostName {
    Ip(IpAddr),
    /// A registered name, lower-cased.
    Name(String),
}

impl HostName {
    fn is_loopback(&self) -> bool {
        match self {
            HostName::Ip(ip) => is_loopback(*ip),
            HostName::Name(name) => name == "localhost" || name.ends_with(".localhost"),
        }
    }
}

/// Parses `host[:port]` by a strict reading of RFC 9110's `Host` (RFC 3986
/// `host` and `port`, no user info): a bracketed IPv6 address with nothing
/// after the `]` but a port, a dotted-quad IPv4 address (no octal, hex or
/// shortened forms), or a DNS name of letters, digits and inner hyphens in
/// non-empty labels of at most 63 bytes; a port, when present, of 1 to 5
/// digits up to 65535. Anything else, including every byte outside visible
/// ASCII, is `None`.
fn parse_host(value: &[u8]) -> Option<HostName> {
    if value.is_empty() || value.len() > 260 || !value.iter().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    // Visible ASCII only, so this cannot fail; the check above is what
    // refuses bytes above 0x7f.
    let value = std::str::from_utf8(value).ok()?;
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip = inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (HostName::Ip(IpAddr::V6(ip)), port)
    } else {
        let (name, port) = match value.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (value, None),
        };
        if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
            (HostName::Ip(IpAddr::V4(ip)), port)
        } else if is_dns_name(name) {
            (HostName::Name(name.to_ascii_lowercase()), port)
        } else {
            return None;
        }
    };
    if let Some(port) = port {
        let digits =
            !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
        if !digits || port.parse::<u32>().ok()? > 65535 {
            return None;
        }
    }
    Some(host)
}

fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn loopback(host: &str) -> Option<bool> {
        parse_host(host.as_bytes()).map(|h| h.is_loopback())
    }

    #[test]
    fn loopback_hosts_are_admitted() {
        for ok in [
            "127.0.0.1:3000",
            "127.0.0.1",
            "localhost",
            "LOCALHOST:80",
            "[::1]:8080",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
            "127.9.9.9",
            "app.localhost:1",
            "a-b.App.LocalHost:65535",
        ] {
            assert_eq!(loopback(ok), Some(true), "{ok}");
        }
    }

    #[test]
    fn well_formed_foreign_hosts_are_not_loopback() {
        for foreign in [
            "evil.com",
            "evil.com:3000",
            "10.0.0.1:3000",
            "[::2]:1",
            "localhost.evil.com",
            "notlocalhost",
            // Numeric forms that some resolvers read as 127.0.0.1 are names
            // here, and foreign ones.
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
        ] {
            assert_eq!(loopback(foreign), Some(false), "{foreign}");
        }
    }

    #[test]
    fn malformed_hosts_are_refused() {
        // Regression (issue 13): `[::1]evil.com` was admitted because the
        // old parser split at `]` and dropped the rest.
        for bad in [
            "",
            "[::1]evil.com",
            "[::1]evil.com:80",
            "[::1]:",
            "[::1]:80:80",
            "[::1]x:80",
            "[::1",
            "[127.0.0.1]",
            "[fe80::1%25lo]",
            "::1",
            "localhost:",
            "localhost:abc",
            "localhost:65536",
            "localhost:000080",
            "localhost.",
            ".localhost",
            "app..localhost",
            "-a.localhost",
            "user@localhost",
            "local host",
            "localhost\t",
            "localhost/evil",
            "evil.com#.localhost",
            "a_b.localhost",
        ] {
            assert_eq!(parse_host(bad.as_bytes()), None, "{bad:?}");
        }
        // Bytes above 0x7f (Latin-1 or UTF-8 look-alikes of `localhost`).
        assert_eq!(parse_host(b"localhost\xff"), None);
        assert_eq!(parse_host("lоcalhost".as_bytes()), None);
        assert_eq!(parse_host(&[b'a'; 300]), None);
    }

    fn check(hosts: &[&[u8]], uri: &str) -> Result<(), HostProblem> {
        let mut h = HeaderMap::new();
        for host in hosts {
            h.append(header::HOST, HeaderValue::from_bytes(host).unwrap());
        }
        check_local_authority(&h, &uri.parse().unwrap())
    }

    #[test]
    fn the_request_must_name_exactly_one_loopback_authority() {
        assert_eq!(check(&[b"127.0.0.1:3000"], "/v1/sessions"), Ok(()));
        assert_eq!(check(&[], "/v1/sessions"), Err(HostProblem::Missing));
        assert_eq!(
            check(&[b"localhost", b"localhost"], "/v1/sessions"),
            Err(HostProblem::Duplicate)
        );
        assert_eq!(
            check(&[b"localhost", b"evil.com"], "/v1/sessions"),
            Err(HostProblem::Duplicate)
        );
        assert_eq!(
            check(&[b"[::1]evil.com"], "/v1/sessions"),
            Err(HostProblem::Malformed)
        );
        assert_eq!(
            check(&[b"localh\xc3\xb6st"], "/v1/sessions"),
            Err(HostProblem::Malformed)
        );
        assert_eq!(
            check(&[b"evil.com"], "/v1/sessions"),
            Err(HostProblem::NotLoopback)
        );
        // HTTP/2 names the authority in the target; so may HTTP/1.1.
        assert_eq!(check(&[], "http://localhost:3000/v1/sessions"), Ok(()));
        assert_eq!(
            check(&[], "http://evil.com/v1/sessions"),
            Err(HostProblem::NotLoopback)
        );
        // Both must be loopback when both are given.
        assert_eq!(
            check(&[b"localhost"], "http://evil.com/v1/sessions"),
            Err(HostProblem::NotLoopback)
        );
        assert_eq!(
            check(&[b"evil.com"], "http://localhost/v1/sessions"),
            Err(HostProblem::NotLoopback)
        );
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
