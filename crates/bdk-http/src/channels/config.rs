//! The typed form of a channel manifest (`agent/channels/<name>.toml`).
//!
//! Discovery already reports every problem it can see with a diagnostic;
//! this module turns the manifest's JSON (`ChannelManifest::raw`) into what
//! the router and the event delivery run on: compiled schemas and templates,
//! parsed methods and auth settings. Anything that still fails here (a
//! manifest that bypassed discovery) is a [`ConfigError`]: the route or the
//! channel is left out and the reason logged, never a panic at startup.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use axum::http::{HeaderName, Method};
use bdk_core::project::ChannelManifest;
use bdk_core::tool::schema::InputValidator;
use bdk_events::{Admission, SessionMode};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Deserialize;
use serde_json::Value;

/// Delivery attempts per event when `attempts` is not set.
pub(crate) const DEFAULT_ATTEMPTS: u32 = 3;
/// The most attempts an `[[events]]` entry may ask for.
pub(crate) const MAX_ATTEMPTS: u32 = 10;
/// The wait before the second attempt; it doubles for each further one.
pub(crate) const DEFAULT_BACKOFF: Duration = Duration::from_millis(500);

/// Why a manifest (or one of its routes) cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The manifest does not have the expected shape.
    #[error("channel `{channel}` has an invalid manifest: {message}")]
    Shape {
        /// The channel.
        channel: String,
        /// What is wrong.
        message: String,
    },
    /// One route is unusable.
    #[error("channel `{channel}` route {index} is invalid: {message}")]
    Route {
        /// The channel.
        channel: String,
        /// The route's position in `[[routes]]`.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// How a route authenticates its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RouteAuth {
    /// The server's auth chain.
    Default,
    /// `Authorization: Bearer <token>`, the token read from `token_env`.
    Bearer {
        /// The variable holding the token.
        token_env: String,
    },
    /// HMAC-SHA256 of the raw body, `sha256=<hex>` in `signature_header`.
    Hmac {
        /// The variable holding the shared secret.
        secret_env: String,
        /// The header carrying the signature.
        signature_header: HeaderName,
    },
}

/// One declared route, ready to serve.
#[derive(Debug)]
pub(crate) struct RouteConfig {
    pub(crate) method: Method,
    /// The path as declared (`/`, `/github`, `/items/{id}`).
    pub(crate) path: String,
    pub(crate) auth: RouteAuth,
    pub(crate) body_schema: Option<InputValidator>,
    pub(crate) query_schema: Option<InputValidator>,
    /// Template names in the channel's environment.
    pub(crate) message: Option<String>,
    pub(crate) continuation_key: Option<String>,
    pub(crate) delivery_id: Option<String>,
    pub(crate) admission: Admission,
    pub(crate) mode: SessionMode,
}

/// Where matching events of the channel's sessions go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// POST the JSON payload.
    Url {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// Start the program in the manifest's folder; the payload is one JSON
    /// line on its stdin.
    Command { argv: Vec<String> },
}

/// One `[[events]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventRule {
    /// Event types (`*` for all).
    pub(crate) types: BTreeSet<String>,
    pub(crate) target: Target,
    pub(crate) attempts: u32,
    pub(crate) backoff: Duration,
}

impl EventRule {
    pub(crate) fn wants(&self, kind: &str) -> bool {
        self.types.contains("*") || self.types.contains(kind)
    }

    /// A short description of the target for logs (never a header value).
    pub(crate) fn describe(&self) -> String {
        match &self.target {
            Target::Url { url, .. } => format!("POST {url}"),
            Target::Command { argv } => argv.first().cloned().unwrap_or_default(),
        }
    }
}

/// A channel ready to serve.
pub(crate) struct ChannelConfig {
    pub(crate) name: String,
    /// The folder of the manifest: event commands run there.
    pub(crate) dir: PathBuf,
    pub(crate) routes: Vec<RouteConfig>,
    pub(crate) events: Vec<EventRule>,
    /// The channel's compiled templates, named `routes[<i>].<key>`.
    pub(crate) templates: Environment<'static>,
}

impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("name", &self.name)
            .field("routes", &self.routes)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// Keys shared by the channel level and each route: the channel's values
/// are the default of every route that sets no `auth` itself.
#[derive(Clone, Debug, Default, Deserialize)]
struct RawAuth {
    auth: Option<String>,
    secret_env: Option<String>,
    signature_header: Option<String>,
    token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawChannel {
    #[serde(flatten)]
    auth: RawAuth,
    #[serde(default)]
    routes: Vec<Value>,
    #[serde(default)]
    events: Vec<RawEvents>,
}

#[derive(Debug, Deserialize)]
struct RawRoute {
    method: String,
    path: String,
    #[serde(flatten)]
    auth: RawAuth,
    body_schema: Option<Value>,
    query_schema: Option<Value>,
    message: Option<String>,
    continuation_key: Option<String>,
    delivery_id: Option<String>,
    admission: Option<String>,
    mode: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawEvents {
    types: Vec<String>,
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    attempts: Option<u32>,
    backoff_ms: Option<u64>,
}

/// The variable a bearer route reads its token from when the manifest names
/// none: `BDK_CHANNEL_<NAME>_TOKEN`, the name upper-cased with `-` as `_`.
pub(crate) fn default_token_env(channel: &str) -> String {
    let name: String = channel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("BDK_CHANNEL_{name}_TOKEN")
}

/// The template environment every channel uses. Printing an undefined value
/// is an error (a key rendered from a missing field would silently merge
/// unrelated conversations), while `is defined` tests and the `default`
/// filter still work on missing fields. Output is plain text, never HTML.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env
}

/// Parses one manifest. Returns the channel and the problems of the routes
/// that were left out (logged by the caller); an error means the whole
/// channel is unusable.
pub(crate) fn parse(
    manifest: &ChannelManifest,
) -> Result<(ChannelConfig, Vec<ConfigError>), ConfigError> {
    let name = manifest.name.clone();
    let shape = |message: String| ConfigError::Shape {
        channel: name.clone(),
        message,
    };
    if !is_channel_name(&name) {
        return Err(shape(
            "the name must be letters, digits, `_` or `-`, starting with a letter or digit".into(),
        ));
    }
    let raw: RawChannel =
        serde_json::from_value(manifest.raw.clone()).map_err(|e| shape(e.to_string()))?;
    let mut templates = environment();
    let mut routes = Vec::new();
    let mut skipped = Vec::new();
    let mut shapes = Vec::new();
    for (index, value) in raw.routes.into_iter().enumerate() {
        match parse_route(&name, index, value, &raw.auth, &mut templates) {
            Ok(route) => {
                if let Err(message) = check_conflicts(&mut shapes, &route) {
                    skipped.push(ConfigError::Route {
                        channel: name.clone(),
                        index,
                        message,
                    });
                } else {
                    routes.push(route);
                }
            }
            Err(message) => skipped.push(ConfigError::Route {
                channel: name.clone(),
                index,
                message,
            }),
        }
    }
    let mut events = Vec::new();
    for (i, e) in raw.events.into_iter().enumerate() {
        events.push(parse_events(e).map_err(|m| shape(format!("events[{i}]: {m}")))?);
    }
    let dir = manifest
        .path
        .parent()
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf);
    Ok((
        ChannelConfig {
            name,
            dir,
            routes,
            events,
            templates,
        },
        skipped,
    ))
}

fn is_channel_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The methods a route may declare (the OpenAPI document lists each one
/// under the generic channel paths).
pub(crate) const METHODS: &[Method] = &[
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

fn parse_route(
    channel: &str,
    index: usize,
    value: Value,
    defaults: &RawAuth,
    templates: &mut Environment<'static>,
) -> Result<RouteConfig, String> {
    let raw: RawRoute = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let Some(method) = METHODS.iter().find(|m| m.as_str() == raw.method) else {
        return Err(format!("unsupported method `{}`", raw.method));
    };
    let method = method.clone();
    check_path(&raw.path)?;
    // A route without its own `auth` takes the channel's whole auth block,
    // so a secret set beside the channel's `auth` is never mixed with a
    // route's different scheme.
    let auth = if raw.auth.auth.is_some() {
        &raw.auth
    } else {
        defaults
    };
    let auth = parse_auth(channel, auth)?;
    let schema = |key: &str, value: Option<Value>| -> Result<Option<InputValidator>, String> {
        value
            .map(|s| InputValidator::new(&s).map_err(|e| format!("`{key}`: {e}")))
            .transpose()
    };
    let body_schema = schema("body_schema", raw.body_schema)?;
    let query_schema = schema("query_schema", raw.query_schema)?;
    let mut template = |key: &str, source: Option<String>| -> Result<Option<String>, String> {
        let Some(source) = source else {
            return Ok(None);
        };
        let name = format!("routes[{index}].{key}");
        templates
            .add_template_owned(name.clone(), source)
            .map_err(|e| format!("`{key}` is not a valid template: {e}"))?;
        Ok(Some(name))
    };
    let message = template("message", raw.message)?;
    let continuation_key = template("continuation_key", raw.continuation_key)?;
    let delivery_id = template("delivery_id", raw.delivery_id)?;
    let admission = match raw.admission.as_deref() {
        None | Some("preempt") => Admission::Preempt,
        Some("coalesce") => Admission::Coalesce,
        Some(other) => return Err(format!("unknown admission `{other}`")),
    };
    let mode = match raw.mode.as_deref() {
        None | Some("chat") => SessionMode::Chat,
        Some("task") => SessionMode::Task,
        Some(other) => return Err(format!("unknown mode `{other}`")),
    };
    Ok(RouteConfig {
        method,
        path: raw.path,
        auth,
        body_schema,
        query_schema,
        message,
        continuation_key,
        delivery_id,
        admission,
        mode,
    })
}

fn parse_auth(channel: &str, raw: &RawAuth) -> Result<RouteAuth, String> {
    match raw.auth.as_deref() {
        None | Some("default") => Ok(RouteAuth::Default),
        Some("bearer") => Ok(RouteAuth::Bearer {
            token_env: raw
                .token_env
                .clone()
                .unwrap_or_else(|| default_token_env(channel)),
        }),
        Some("hmac") => {
            let secret_env = raw
                .secret_env
                .clone()
                .filter(|s| !s.trim().is_empty())
                .ok_or("`auth = \"hmac\"` needs `secret_env`")?;
            let header = raw
                .signature_header
                .as_deref()
                .ok_or("`auth = \"hmac\"` needs `signature_header`")?;
            let signature_header = HeaderName::try_from(header.to_ascii_lowercase())
                .map_err(|_| format!("`signature_header` `{header}` is not a header name"))?;
            Ok(RouteAuth::Hmac {
                secret_env,
                signature_header,
            })
        }
        Some(other) => Err(format!("unknown auth `{other}`")),
    }
}

/// The path rules the router can serve without refusing the route: `/`, or
/// segments that are literal (`[A-Za-z0-9._~-]+`) or one whole `{param}`.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    if path == "/" {
        return Ok(());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("path `{path}` must start with `/`"));
    };
    let mut names = BTreeSet::new();
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err(format!("path `{path}` has an empty segment"));
        }
        match param_name(segment) {
            Some(name) => {
                let mut chars = name.chars();
                let ident = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ident || !names.insert(name) {
                    return Err(format!(
                        "path `{path}` has an invalid parameter `{segment}`"
                    ));
                }
            }
            None => {
                let literal = segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-'));
                if !literal {
                    return Err(format!("path `{path}` has an invalid segment `{segment}`"));
                }
            }
        }
    }
    Ok(())
}

fn param_name(segment: &str) -> Option<&str> {
    segment.strip_prefix('{')?.strip_suffix('}')
}

/// Refuses a route the router would reject: the same method and path
/// twice, or a parameter named differently from another route's parameter
/// at the same position (`/a/{x}` beside `/a/{y}`).
fn check_conflicts(seen: &mut Vec<(Method, String)>, route: &RouteConfig) -> Result<(), String> {
    let segments: Vec<&str> = route.path.split('/').filter(|s| !s.is_empty()).collect();
    for (method, path) in seen.iter() {
        if *method == route.method && *path == route.path {
            return Err(format!(
                "`{} {}` is declared twice",
                route.method, route.path
            ));
        }
        let other: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        for (a, b) in segments.iter().zip(other.iter()) {
            match (param_name(a), param_name(b)) {
                (Some(x), Some(y)) if x != y => {
                    return Err(format!(
                        "parameter `{{{x}}}` sits where `{path}` has `{{{y}}}`"
                    ));
                }
                (Some(_), Some(_)) => {}
                _ if a == b => {}
                // The paths part here, so nothing further can conflict.
                _ => break,
            }
        }
    }
    seen.push((route.method.clone(), route.path.clone()));
    Ok(())
}

fn parse_events(raw: RawEvents) -> Result<EventRule, String> {
    let target = match (raw.url, raw.command) {
        (Some(url), None) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "`url` must start with http:// or https://: `{url}`"
                ));
            }
            Target::Url {
                url,
                headers: raw.headers,
            }
        }
        (None, Some(argv)) => {
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                return Err("`command` must start with a program".into());
            }
            Target::Command { argv }
        }
        (Some(_), Some(_)) => return Err("set only one of `url` and `command`".into()),
        (None, None) => return Err("set `url` or `command`".into()),
    };
    let attempts = raw.attempts.unwrap_or(DEFAULT_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&attempts) {
        return Err(format!("`attempts` must be between 1 and {MAX_ATTEMPTS}"));
    }
    let backoff = match raw.backoff_ms {
        Some(0) => return Err("`backoff_ms` must be greater than 0".into()),
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_BACKOFF,
    };
    Ok(EventRule {
        types: raw.types.into_iter().collect(),
        target,
        attempts,
        backoff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(raw: Value) -> ChannelManifest {
        ChannelManifest {
            name: "gh".into(),
            path: PathBuf::from("/p/agent/channels/gh.toml"),
            routes: Vec::new(),
            raw,
        }
    }

    #[test]
    fn routes_inherit_the_channel_auth_block() {
        let (c, skipped) = parse(&manifest(json!({
            "auth": "hmac", "secret_env": "S", "signature_header": "X-Hub-Signature-256",
            "routes": [
                {"method": "POST", "path": "/"},
                {"method": "GET", "path": "/status", "auth": "bearer"},
                {"method": "PUT", "path": "/open", "auth": "default"},
            ],
        })))
        .unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(
            c.routes[0].auth,
            RouteAuth::Hmac {
                secret_env: "S".into(),
                signature_header: HeaderName::from_static("x-hub-signature-256"),
            }
        );
        assert_eq!(
            c.routes[1].auth,
            RouteAuth::Bearer {
                token_env: "BDK_CHANNEL_GH_TOKEN".into()
            }
        );
        assert_eq!(c.routes[2].auth, RouteAuth::Default);
        assert_eq!(c.dir, PathBuf::from("/p/agent/channels"));
    }

    #[test]
    fn bad_routes_are_left_out_and_reported() {
        let (c, skipped) = parse(&manifest(json!({
            "routes": [
                {"method": "POST", "path": "/ok", "message": "{{ body.x }}"},
                {"method": "POST", "path": "/ok"},
                {"method": "POST", "path": "/bad/:id"},
                {"method": "POST", "path": "/t", "message": "{{ unclosed"},
                {"method": "GET", "path": "/a/{x}"},
                {"method": "POST", "path": "/a/{y}/b"},
                {"method": "POST", "path": "/m", "mode": "batch"},
            ],
        })))
        .unwrap();
        let kept: Vec<&str> = c.routes.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(kept, ["/ok", "/a/{x}"]);
        let messages: Vec<String> = skipped.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 5, "{messages:#?}");
        assert!(messages[0].contains("declared twice"), "{}", messages[0]);
        assert!(messages[1].contains("invalid segment"), "{}", messages[1]);
        assert!(
            messages[2].contains("not a valid template"),
            "{}",
            messages[2]
        );
        assert!(messages[3].contains("sits where"), "{}", messages[3]);
        assert!(messages[4].contains("unknown mode"), "{}", messages[4]);
    }

    #[test]
    fn paths() {
        for ok in ["/", "/github", "/a/{id}/b", "/v1.2/x_y~z-"] {
            assert!(check_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "x", "//", "/a/", "/{1x}", "/{a}/{a}", "/pr-{id}", "/*rest", "/a b",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn events_defaults_and_limits() {
        let (c, _) = parse(&manifest(json!({
            "routes": [{"method": "POST", "path": "/"}],
            "events": [
                {"types": ["message.completed"], "url": "http://127.0.0.1:1/h"},
                {"types": ["*"], "command": ["./n.sh"], "attempts": 5, "backoff_ms": 20},
            ],
        })))
        .unwrap();
        assert_eq!(c.events[0].attempts, DEFAULT_ATTEMPTS);
        assert_eq!(c.events[0].backoff, DEFAULT_BACKOFF);
        assert!(c.events[0].wants("message.completed"));
        assert!(!c.events[0].wants("turn.failed"));
        assert!(c.events[1].wants("turn.failed"));
        assert_eq!(c.events[1].backoff, Duration::from_millis(20));

        let err = parse(&manifest(json!({
            "routes": [{"method": "POST", "path": "/"}],
            "events": [{"types": ["*"], "url": "ftp://x", "attempts": 3}],
        })))
        .unwrap_err();
        assert!(err.to_string().contains("events[0]"), "{err}");
    }

    #[test]
    fn token_env_names() {
        assert_eq!(default_token_env("drive"), "BDK_CHANNEL_DRIVE_TOKEN");
        assert_eq!(default_token_env("pr-bot_2"), "BDK_CHANNEL_PR_BOT_2_TOKEN");
    }
}
