//! The typed form of a custom channel manifest (`channels/<name>.toml`).
//!
//! Discovery builds these values once and checks them with its diagnostics
//! (keys, methods, path syntax, path-parameter conflicts, auth settings,
//! schemas, template syntax, the events map); a manifest with an error is
//! left out of the [`Project`](super::Project). So whoever serves a channel
//! (`bdk_http::channels`) and whoever delivers its events (the hooks engine,
//! `crate::hooks::channel`) read settled values: defaults applied, the
//! channel's auth block inherited by routes without their own, and nothing
//! left to parse or check again.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bdk_events::{Admission, SessionMode};

use super::HandlerSpec;
use serde::Serialize;
use serde_json::Value;

/// Delivery attempts per event when an `[[events]]` entry sets no `attempts`.
pub const DEFAULT_EVENT_ATTEMPTS: u32 = 3;
/// The most attempts an `[[events]]` entry may ask for.
pub const MAX_EVENT_ATTEMPTS: u32 = 10;
/// The wait before the second attempt when no `backoff_ms` is set; it
/// doubles for each further one.
pub const DEFAULT_EVENT_BACKOFF: Duration = Duration::from_millis(500);

/// A custom channel manifest, typed and checked by discovery. Only
/// discovery builds one (the type is `#[non_exhaustive]`), so a value in a
/// [`Project`](super::Project) has passed every check.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChannelManifest {
    /// The channel id (file stem); routes live under `/v1/channels/<name>`.
    pub name: String,
    /// The manifest.
    pub path: PathBuf,
    /// The channel's `description`.
    pub description: Option<String>,
    /// The declared routes, in manifest order; no two share a method and a
    /// path, and path parameters at one position share their name.
    pub routes: Vec<ChannelRoute>,
    /// The events map (`[[events]]`), in manifest order.
    pub events: Vec<ChannelEvents>,
    /// A GitHub channel's settings (`kind = "github"`); such a channel
    /// declares no routes: the pack serves its webhook.
    pub github: Option<super::GithubChannel>,
    /// A Slack channel's settings (`kind = "slack"`); such a channel
    /// declares no routes: the pack serves Slack's requests.
    pub slack: Option<super::SlackChannel>,
}

impl ChannelManifest {
    /// The folder of the manifest: event commands run there.
    pub fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }
}

/// The methods a channel route may declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RouteMethod {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
    /// `DELETE`
    Delete,
}

impl RouteMethod {
    /// Every method, in the order the docs list them.
    pub const ALL: [RouteMethod; 5] = [
        RouteMethod::Get,
        RouteMethod::Post,
        RouteMethod::Put,
        RouteMethod::Patch,
        RouteMethod::Delete,
    ];

    /// The upper-case name (`POST`).
    pub fn as_str(self) -> &'static str {
        match self {
            RouteMethod::Get => "GET",
            RouteMethod::Post => "POST",
            RouteMethod::Put => "PUT",
            RouteMethod::Patch => "PATCH",
            RouteMethod::Delete => "DELETE",
        }
    }

    /// The method named exactly `name` (upper case).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for RouteMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a route authenticates its caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RouteAuth {
    /// The server's auth chain.
    Default,
    /// `Authorization: Bearer <token>`, the token read from `token_env`.
    Bearer {
        /// The variable holding the token (`BDK_CHANNEL_<NAME>_TOKEN` when
        /// the manifest names none, see [`default_token_env`]).
        token_env: String,
    },
    /// HMAC-SHA256 of the raw body, `sha256=<hex>` in `signature_header`.
    Hmac {
        /// The variable holding the shared secret.
        secret_env: String,
        /// The header carrying the signature, as declared.
        signature_header: String,
    },
}

/// One `[[routes]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChannelRoute {
    /// The method.
    pub method: RouteMethod,
    /// The path as declared (`/`, `/github`, `/items/{id}`), relative to
    /// the channel.
    pub path: String,
    /// The route's `description`.
    pub description: Option<String>,
    /// How callers authenticate: the route's own `auth` block, else the
    /// channel's.
    pub auth: RouteAuth,
    /// The JSON schema the body must match.
    pub body_schema: Option<Value>,
    /// The JSON schema the query (an object of strings) must match.
    pub query_schema: Option<Value>,
    /// The `message` template (minijinja source).
    pub message: Option<String>,
    /// The `continuation_key` template.
    pub continuation_key: Option<String>,
    /// The `delivery_id` template.
    pub delivery_id: Option<String>,
    /// How a message joins a busy session.
    pub admission: Admission,
    /// The mode of a session the route creates.
    pub mode: SessionMode,
    /// The program that answers the request instead of the templates.
    pub handler: Option<RouteHandler>,
}

/// A route's handler program: it gets the checked request and answers the
/// HTTP response, and optionally what to deliver.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RouteHandler {
    /// The program (run in the channels folder), or the native handler.
    pub handler: HandlerSpec,
    /// The request headers it is shown, lower-case (`pass_headers`); no
    /// other header reaches it.
    pub pass_headers: Vec<String>,
}

impl fmt::Display for ChannelRoute {
    /// `METHOD path`, as `bdk info` lists a route.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl PartialEq<&str> for ChannelRoute {
    /// Compares with `METHOD path`.
    fn eq(&self, other: &&str) -> bool {
        other
            .split_once(' ')
            .is_some_and(|(m, p)| m == self.method.as_str() && p == self.path)
    }
}

/// One `[[events]]` entry: which events of the channel's sessions go where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChannelEvents {
    /// Event types; `*` stands for every type.
    pub types: Vec<String>,
    /// Where they go.
    pub target: ChannelEventTarget,
    /// Attempts per event, 1 to [`MAX_EVENT_ATTEMPTS`].
    pub attempts: u32,
    /// The wait before the second attempt; it doubles for each further one.
    pub backoff: Duration,
}

impl ChannelEvents {
    /// True when events of type `kind` are delivered.
    pub fn wants(&self, kind: &str) -> bool {
        self.types.iter().any(|t| t == "*" || t == kind)
    }

    /// A short description of the target for logs (never a header value).
    pub fn describe(&self) -> String {
        match &self.target {
            ChannelEventTarget::Url { url, .. } => format!("POST {url}"),
            ChannelEventTarget::Command { argv } => argv.first().cloned().unwrap_or_default(),
        }
    }
}

/// Where an `[[events]]` entry delivers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ChannelEventTarget {
    /// POST the JSON payload.
    Url {
        /// The endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
    },
    /// Start the program in the manifest's folder; the payload is one JSON
    /// line on its stdin.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
    },
}

/// The variable a bearer route reads its token from when the manifest names
/// none: `BDK_CHANNEL_<NAME>_TOKEN`, the name upper-cased with every other
/// character as `_`.
pub fn default_token_env(channel: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_env_names() {
        assert_eq!(default_token_env("drive"), "BDK_CHANNEL_DRIVE_TOKEN");
        assert_eq!(default_token_env("pr-bot_2"), "BDK_CHANNEL_PR_BOT_2_TOKEN");
    }

    #[test]
    fn methods_round_trip() {
        for m in RouteMethod::ALL {
            assert_eq!(RouteMethod::parse(m.as_str()), Some(m));
        }
        assert_eq!(RouteMethod::parse("post"), None);
    }
}
