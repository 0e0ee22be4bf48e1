//! Who may call the agent routes: the [`Auth`] an app is configured with
//! and the [`Policy`] prepared from it once, which the auth chain
//! (`auth.rs`) applies and `/v1/meta` names. Names nothing else of the
//! crate, so the app's shared state can hold it.

use std::fmt;

use sha2::{Digest, Sha256};

/// Who may call the agent routes, and as which principal.
#[derive(Clone, Debug, Default)]
pub enum Auth {
    /// Default: only direct loopback peers. A request carrying a
    /// proxy-forwarding header (`Forwarded`, `Via`, `X-Real-IP`, any
    /// `X-Forwarded-*`) is refused with 401, since it was relayed from
    /// somewhere else; so is one that does not name exactly one well-formed
    /// loopback host (a missing, repeated, malformed or foreign `Host`),
    /// since it may come from a page that rebound a foreign name to
    /// 127.0.0.1. Principal `local`.
    #[default]
    LocalDevStrict,
    /// `Authorization: Bearer <token>`, compared in constant time; each token
    /// is its own principal. Missing or wrong: 401.
    Bearer(Vec<BearerToken>),
    /// Anyone; principal `anonymous`.
    Anonymous,
}

/// One accepted bearer token and the principal it authenticates.
#[derive(Clone)]
pub struct BearerToken {
    /// The principal name sessions created with this token belong to.
    pub principal: String,
    /// The secret.
    pub token: String,
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never reaches a log line.
        f.debug_struct("BearerToken")
            .field("principal", &self.principal)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The auth policy, prepared once: bearer secrets are kept as SHA-256
/// digests so every comparison runs over 32 bytes, whatever the lengths of
/// the presented and expected tokens.
pub(crate) enum Policy {
    LocalDevStrict,
    Bearer(Vec<(String, [u8; 32])>),
    Anonymous,
}

/// The name of an auth policy, as `/v1/meta` reports it.
#[derive(Clone, Copy, Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum PolicyName {
    /// Loopback clients only (the default).
    LocalDevStrict,
    /// `--bearer-token`.
    Bearer,
    /// `--allow-anonymous`.
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
    pub(crate) fn name(&self) -> PolicyName {
        match self {
            Policy::LocalDevStrict => PolicyName::LocalDevStrict,
            Policy::Bearer(_) => PolicyName::Bearer,
            Policy::Anonymous => PolicyName::Anonymous,
        }
    }

    /// True when callers cannot come through a proxy (so forwarded-scheme
    /// headers are never trusted).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Policy::LocalDevStrict)
    }
}

pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&Sha256::digest(bytes));
    out
}
