//! Channel-owned credentials: bearer tokens and HMAC body signatures.
//!
//! Both compare in constant time. Secrets come from a [`Secrets`] lookup
//! (the process environment unless an embedder supplies another source)
//! at request time, so a rotated secret applies without a restart. A secret
//! that is not set fails closed: every request is refused, and the log names
//! the variable to set.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName, header};
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Looks up a secret by the variable name a manifest gives (`secret_env`,
/// `token_env`). The default reads the process environment.
pub type Secrets = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The default [`Secrets`]: the process environment.
pub fn env_secrets() -> Secrets {
    Arc::new(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// Why a request was refused. The client only ever learns "unauthorized";
/// the variants exist for the log.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refused {
    #[error("the secret variable `{0}` is not set")]
    NoSecret(String),
    #[error("the request carries no credential")]
    Missing,
    #[error("the credential does not match")]
    Mismatch,
}

/// Checks `Authorization: Bearer <token>` against the token in `token_env`.
pub(crate) fn bearer(
    headers: &HeaderMap,
    secrets: &Secrets,
    token_env: &str,
) -> Result<(), Refused> {
    let expected = secrets(token_env).ok_or_else(|| Refused::NoSecret(token_env.to_owned()))?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or(Refused::Missing)?;
    // Comparing digests keeps the comparison constant-time even when the
    // lengths differ, so the token's length does not leak either.
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    if bool::from(a.as_slice().ct_eq(b.as_slice())) {
        Ok(())
    } else {
        Err(Refused::Mismatch)
    }
}

/// Checks `<signature_header>: sha256=<hex>` against HMAC-SHA256 of `body`
/// keyed with the secret in `secret_env` (GitHub's `X-Hub-Signature-256`
/// scheme).
pub(crate) fn hmac(
    headers: &HeaderMap,
    body: &[u8],
    secrets: &Secrets,
    secret_env: &str,
    signature_header: &HeaderName,
) -> Result<(), Refused> {
    let secret = secrets(secret_env).ok_or_else(|| Refused::NoSecret(secret_env.to_owned()))?;
    hmac_with(headers, body, &secret, signature_header)
}

/// Checks `<signature_header>: sha256=<hex>` against HMAC-SHA256 of `body`
/// keyed with `secret`.
pub(crate) fn hmac_with(
    headers: &HeaderMap,
    body: &[u8],
    secret: &str,
    signature_header: &HeaderName,
) -> Result<(), Refused> {
    let value = headers
        .get(signature_header)
        .and_then(|v| v.to_str().ok())
        .ok_or(Refused::Missing)?;
    let hex = value
        .trim()
        .strip_prefix("sha256=")
        .ok_or(Refused::Mismatch)?;
    let tag = ::hex::decode(hex).map_err(|_| Refused::Mismatch)?;
    let mut mac =
        hmac::Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| Refused::Mismatch)?;
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&tag).map_err(|_| Refused::Mismatch)
}

/// The `sha256=<hex>` signature of `body` under `secret`, as a sender
/// computes it. Public so that embedders and tests can sign requests.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut out = String::from("sha256=");
    // HMAC accepts keys of any length, so this cannot fail; an empty string
    // would only ever fail verification.
    if let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(secret) {
        mac.update(body);
        out.push_str(&::hex::encode(mac.finalize().into_bytes()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn secrets() -> Secrets {
        Arc::new(|name| (name == "S").then(|| "It's a Secret to Everybody".to_owned()))
    }

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn github_documented_signature() {
        // The example from GitHub's webhook validation guide.
        let sig = sign(b"It's a Secret to Everybody", b"Hello, World!");
        assert_eq!(
            sig,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        let name = HeaderName::from_static("x-hub-signature-256");
        let h = with("x-hub-signature-256", &sig);
        assert_eq!(hmac(&h, b"Hello, World!", &secrets(), "S", &name), Ok(()));
        assert_eq!(
            hmac(&h, b"Hello, World?", &secrets(), "S", &name),
            Err(Refused::Mismatch)
        );
        let upper = with(
            "x-hub-signature-256",
            &sig.to_uppercase().replace("SHA256=", "sha256="),
        );
        assert_eq!(
            hmac(&upper, b"Hello, World!", &secrets(), "S", &name),
            Ok(())
        );
        for bad in ["757107", "sha256=zz", "sha256=abc", "sha1=757107ea"] {
            let h = with("x-hub-signature-256", bad);
            assert_eq!(
                hmac(&h, b"Hello, World!", &secrets(), "S", &name),
                Err(Refused::Mismatch),
                "{bad}"
            );
        }
        assert_eq!(
            hmac(&HeaderMap::new(), b"", &secrets(), "S", &name),
            Err(Refused::Missing)
        );
        assert_eq!(
            hmac(&h, b"Hello, World!", &secrets(), "UNSET", &name),
            Err(Refused::NoSecret("UNSET".into()))
        );
    }

    #[test]
    fn bearer_tokens() {
        let s = secrets();
        let ok = with("authorization", "Bearer It's a Secret to Everybody");
        assert_eq!(bearer(&ok, &s, "S"), Ok(()));
        let lower = with("authorization", "bearer It's a Secret to Everybody");
        assert_eq!(bearer(&lower, &s, "S"), Ok(()));
        let wrong = with("authorization", "Bearer It's a Secret");
        assert_eq!(bearer(&wrong, &s, "S"), Err(Refused::Mismatch));
        let basic = with("authorization", "Basic abc");
        assert_eq!(bearer(&basic, &s, "S"), Err(Refused::Missing));
        assert_eq!(bearer(&HeaderMap::new(), &s, "S"), Err(Refused::Missing));
        assert_eq!(
            bearer(&ok, &s, "NOPE"),
            Err(Refused::NoSecret("NOPE".into()))
        );
    }
}
