//! GitHub App authentication, the parts that need no network: the private
//! key (PEM, PKCS#1 or PKCS#8), the RS256 JWT an App authenticates with, and
//! the caches of installation ids and installation tokens. The client
//! (`super::client`) does the requests that fill the caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

use super::ApiError;

/// How far back `iat` is set, against clock drift between us and GitHub
/// (GitHub's docs recommend 60 seconds).
const ISSUED_BEFORE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);
/// How long a JWT lives; GitHub refuses more than 10 minutes.
const JWT_LIFETIME: chrono::TimeDelta = chrono::TimeDelta::minutes(9);
/// An installation token with less than this left is minted anew, so a
/// request never goes out with a token that expires on the way.
pub(crate) const REFRESH_BEFORE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// An installation token and when GitHub said it expires.
#[derive(Clone)]
pub(crate) struct Minted {
    pub(crate) token: String,
    pub(crate) expires_at: DateTime<Utc>,
}

/// One installation's token slot. The async mutex is held while minting, so
/// concurrent callers wait for one refresh instead of each minting a token.
pub(crate) type TokenSlot = Arc<tokio::sync::Mutex<Option<Minted>>>;

/// A GitHub App's key and what has been learnt with it.
pub(crate) struct App {
    pub(crate) app_id: String,
    key: RsaKeyPair,
    rng: SystemRandom,
    /// The installation configured up front, used for every repository.
    pub(crate) installation_id: Option<u64>,
    /// `owner/name` -> installation id, from `GET /repos/{o}/{r}/installation`.
    installations: Mutex<HashMap<String, u64>>,
    tokens: Mutex<HashMap<u64, TokenSlot>>,
}

impl App {
    /// Parses the key up front, so a bad one fails at start-up rather than on
    /// the first delivery.
    pub(crate) fn new(
        app_id: String,
        private_key_pem: &str,
        installation_id: Option<u64>,
    ) -> Result<App, ApiError> {
        if app_id.trim().is_empty() {
            return Err(ApiError::Auth("the app id is empty".into()));
        }
        Ok(App {
            app_id: app_id.trim().to_owned(),
            key: parse_private_key(private_key_pem)?,
            rng: SystemRandom::new(),
            installation_id,
            installations: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
        })
    }

    /// A fresh JWT for the App's own endpoints (`/app`, installation lookup
    /// and token minting).
    pub(crate) fn jwt(&self, now: DateTime<Utc>) -> Result<String, ApiError> {
        // GitHub takes the App id (a number) or its client id (a string).
        let issuer = match self.app_id.parse::<u64>() {
            Ok(id) => serde_json::Value::from(id),
            Err(_) => serde_json::Value::from(self.app_id.clone()),
        };
        let claims = serde_json::json!({
            "iat": (now - ISSUED_BEFORE).timestamp(),
            "exp": (now + JWT_LIFETIME).timestamp(),
            "iss": issuer,
        });
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| ApiError::Auth("failed to sign the app jwt".into()))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }

    /// The installation id learnt for `repo`, if any.
    pub(crate) fn known_installation(&self, repo: &str) -> Option<u64> {
        lock(&self.installations).get(repo).copied()
    }

    /// Remembers the installation that covers `repo`.
    pub(crate) fn remember_installation(&self, repo: &str, id: u64) {
        lock(&self.installations).insert(repo.to_owned(), id);
    }

    /// The token slot of installation `id`.
    pub(crate) fn slot(&self, id: u64) -> TokenSlot {
        Arc::clone(lock(&self.tokens).entry(id).or_default())
    }
}

/// A std mutex whose data stays usable after a panic elsewhere: the caches
/// hold no invariant a half-done update could break.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads an RSA private key from PEM: PKCS#1 (`BEGIN RSA PRIVATE KEY`, what
/// GitHub hands out) or PKCS#8 (`BEGIN PRIVATE KEY`, what `openssl pkcs8`
/// and many secret stores produce). A key pasted into an environment
/// variable with literal `\n` sequences is accepted too.
pub(crate) fn parse_private_key(pem: &str) -> Result<RsaKeyPair, ApiError> {
    let pem = pem.replace("\\n", "\n");
    let (label, der) = decode_pem(&pem)?;
    match label.as_str() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der)
            .map_err(|e| ApiError::Auth(format!("the PKCS#1 private key is unusable: {e}"))),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| ApiError::Auth(format!("the PKCS#8 private key is unusable: {e}"))),
        "ENCRYPTED PRIVATE KEY" => Err(ApiError::Auth(
            "the private key is encrypted; give the key GitHub issued, unencrypted".into(),
        )),
        other => Err(ApiError::Auth(format!(
            "expected an RSA private key in PEM, found a \"{other}\" block"
        ))),
    }
}

/// The label and decoded body of the first PEM block in `pem`.
fn decode_pem(pem: &str) -> Result<(String, Vec<u8>), ApiError> {
    let mut lines = pem.lines().map(str::trim);
    let label = lines
        .find_map(|line| {
            line.strip_prefix("-----BEGIN ")
                .and_then(|rest| rest.strip_suffix("-----"))
        })
        .ok_or_else(|| ApiError::Auth("the private key is not PEM (no BEGIN line)".into()))?
        .to_owned();
    let end = format!("-----END {label}-----");
    let mut body = String::new();
    let mut ended = false;
    for line in lines {
        if line == end {
            ended = true;
            break;
        }
        if line.contains(':') {
            // RFC 1421 headers ("Proc-Type: 4,ENCRYPTED") mean an encrypted key.
            return Err(ApiError::Auth(
                "the private key is encrypted; give the key GitHub issued, unencrypted".into(),
            ));
        }
        body.push_str(line);
    }
    if !ended {
        return Err(ApiError::Auth(format!(
            "the private key PEM has no \"{end}\" line"
        )));
    }
    let der = STANDARD
        .decode(body.as_bytes())
        .map_err(|e| ApiError::Auth(format!("the private key PEM is not valid base64: {e}")))?;
    Ok((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_that_is_not_a_key_is_refused_with_a_reason() {
        let reason = |pem: &str| match parse_private_key(pem) {
            Err(ApiError::Auth(reason)) => reason,
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(_) => panic!("accepted {pem:?}"),
        };
        assert!(reason("").contains("no BEGIN line"));
        assert!(
            reason("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
                .contains("CERTIFICATE")
        );
        assert!(reason("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n").contains("no \"-----END"));
        assert!(
            reason("-----BEGIN RSA PRIVATE KEY-----\n!!!!\n-----END RSA PRIVATE KEY-----")
                .contains("base64")
        );
        assert!(
            reason("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----")
                .contains("PKCS#1")
        );
        assert!(
            reason("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nAAAA\n-----END RSA PRIVATE KEY-----")
                .contains("encrypted")
        );
        assert!(
            reason(
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----"
            )
            .contains("encrypted")
        );
    }
}
