//! Authentication as GitHub does it: tokens (a user's, or an App
//! installation's with its expiry and repositories), App JWTs verified
//! against the App's RSA public key, and the App endpoints that mint
//! installation tokens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use super::server::{Reply, Req};
use super::state::{Principal, State};
use super::text::sha1_hex;

impl State {
    /// Checks a token (`Authorization: Bearer ...` or `token ...`).
    pub(super) fn authenticate(&self, req: &Req<'_>) -> Result<Principal, Reply> {
        let Some(token) = bearer(req) else {
            return Err(Reply::error(401, "Requires authentication"));
        };
        match self.tokens.get(token) {
            Some(Principal::Installation { expires_at, .. }) if *expires_at <= Utc::now() => {
                Err(Reply::error(401, "Bad credentials"))
            }
            Some(principal) => Ok(principal.clone()),
            None => Err(Reply::error(401, "Bad credentials")),
        }
    }

    /// Checks an App's JWT: RS256 over `header.claims` with the App's key,
    /// `iss` a registered App, `iat` not in the future (a minute of drift
    /// allowed), `exp` in the future and at most ten minutes ahead.
    pub(super) fn authenticate_app(&self, req: &Req<'_>) -> Result<u64, Reply> {
        let undecodable = || Reply::error(401, "A JSON web token could not be decoded");
        let Some(jwt) = bearer(req) else {
            return Err(Reply::error(401, "Requires authentication"));
        };
        let parts: Vec<&str> = jwt.split('.').collect();
        let [header, claims, signature] = parts.as_slice() else {
            return Err(undecodable());
        };
        let decode = |part: &str| -> Option<Value> {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
        };
        let (Some(header_json), Some(claims_json)) = (decode(header), decode(claims)) else {
            return Err(undecodable());
        };
        if header_json["alg"] != "RS256" {
            return Err(undecodable());
        }
        let issuer = match &claims_json["iss"] {
            Value::Number(number) => number.as_u64(),
            Value::String(text) => text.parse().ok(),
            _ => None,
        };
        let Some(app) = issuer.and_then(|id| self.apps.get(&id).map(|app| (id, app))) else {
            return Err(Reply::error(401, "Integration not found"));
        };
        let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else {
            return Err(undecodable());
        };
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            &app.1.public_key_der,
        );
        if key
            .verify(format!("{header}.{claims}").as_bytes(), &signature)
            .is_err()
        {
            return Err(undecodable());
        }
        let now = Utc::now().timestamp();
        let Some(iat) = claims_json["iat"].as_i64() else {
            return Err(Reply::error(
                401,
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued.",
            ));
        };
        let Some(exp) = claims_json["exp"].as_i64() else {
            return Err(Reply::error(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires.",
            ));
        };
        if iat > now + 60 {
            return Err(Reply::error(
                401,
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued.",
            ));
        }
        if exp <= now {
            return Err(Reply::error(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires.",
            ));
        }
        if exp > now + 600 {
            return Err(Reply::error(
                401,
                "'Expiration time' claim ('exp') is too far in the future",
            ));
        }
        Ok(app.0)
    }

    pub(super) fn can_access(&self, caller: &Principal, repo: &str) -> bool {
        match caller {
            Principal::User(_) => true,
            Principal::Installation {
                app_id,
                installation_id,
                ..
            } => self.apps.get(app_id).is_some_and(|app| {
                app.installations
                    .iter()
                    .any(|(id, covered)| id == installation_id && covered == repo)
            }),
        }
    }

    /// The `user` object of what `caller` creates.
    pub(super) fn author(&self, caller: &Principal) -> Value {
        match caller {
            Principal::User(login) => json!({"login": login, "id": 1, "type": "User"}),
            Principal::Installation { app_id, .. } => {
                let slug = self
                    .apps
                    .get(app_id)
                    .map(|app| app.slug.as_str())
                    .unwrap_or("app");
                json!({"login": format!("{slug}[bot]"), "id": app_id + 100_000, "type": "Bot"})
            }
        }
    }

    pub(super) fn get_app(&self, app_id: u64) -> Reply {
        let Some(app) = self.apps.get(&app_id) else {
            return Reply::not_found();
        };
        Reply::json(
            200,
            json!({
                "id": app_id,
                "slug": app.slug,
                "node_id": format!("A_fake{app_id}"),
                "name": app.slug,
                "owner": {"login": "octo-org", "type": "Organization"},
                "html_url": format!("https://github.com/apps/{}", app.slug),
                "permissions": {"contents": "read", "issues": "write", "pull_requests": "write", "statuses": "write"},
                "events": ["pull_request", "issue_comment"],
            }),
        )
    }

    pub(super) fn get_installation(&self, app_id: u64, repo: &str) -> Reply {
        let Some(app) = self.apps.get(&app_id) else {
            return Reply::not_found();
        };
        let Some((id, _)) = app
            .installations
            .iter()
            .find(|(_, covered)| covered == repo)
        else {
            return Reply::not_found();
        };
        let owner = repo.split('/').next().unwrap_or(repo);
        Reply::json(
            200,
            json!({
                "id": id,
                "app_id": app_id,
                "app_slug": app.slug,
                "account": {"login": owner, "type": "User"},
                "target_type": "User",
                "repository_selection": "selected",
                "access_tokens_url": format!("{}/app/installations/{id}/access_tokens", self.base),
                "repositories_url": format!("{}/installation/repositories", self.base),
                "html_url": format!("https://github.com/settings/installations/{id}"),
                "permissions": {"contents": "read", "issues": "write", "pull_requests": "write", "statuses": "write"},
                "events": ["pull_request", "issue_comment"],
            }),
        )
    }

    pub(super) fn mint_token(&mut self, app_id: u64, installation: &str) -> Reply {
        let Ok(installation_id) = installation.parse::<u64>() else {
            return Reply::not_found();
        };
        let owns = self.apps.get(&app_id).is_some_and(|app| {
            app.installations
                .iter()
                .any(|(id, _)| *id == installation_id)
        });
        if !owns {
            return Reply::not_found();
        }
        let serial = self.id();
        let token = format!(
            "ghs_{}",
            &sha1_hex(format!("installation token {serial}").as_bytes())[..36]
        );
        let expires_at = Utc::now() + self.token_lifetime;
        self.tokens.insert(
            token.clone(),
            Principal::Installation {
                app_id,
                installation_id,
                expires_at,
            },
        );
        Reply::json(
            201,
            json!({
                "token": token,
                "expires_at": expires_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                "permissions": {"contents": "read", "issues": "write", "pull_requests": "write", "statuses": "write"},
                "repository_selection": "selected",
            }),
        )
    }
}

/// The token of `Authorization: Bearer <t>` (or GitHub's older `token <t>`).
pub(super) fn bearer<'a>(req: &Req<'a>) -> Option<&'a str> {
    let value = req.headers.get("authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}
