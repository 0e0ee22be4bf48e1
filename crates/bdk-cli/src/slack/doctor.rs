//! `bdk slack doctor`: the checks, in order, each a [`Check`]:
//!
//! 1. `token`: the token variable is set and holds a bot token (`xoxb-`);
//! 2. `auth`: `auth.test` accepts it (against the channel's Web API base);
//! 3. `scopes`: it holds every scope `bdk_slack::manifest::required_scopes`
//!    names;
//! 4. `signing_secret`: the secret variable is set and looks like Slack's
//!    (32 hexadecimal characters);
//! 5. `request_url`: the public request URL answers a signed
//!    `url_verification` with its challenge, as Slack checks it.
//!
//! A check that depends on an earlier one is skipped when that one cannot
//! give it what it needs. The variables are read through an [`Env`], so the
//! checks that need no network are plain functions.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bdk_core::project::SlackChannel;
use bdk_core::project::slack::{SLACK_API_URL, SLACK_API_URL_ENV};
use bdk_slack::api::{ApiError, ClientOptions, Identity, SlackClient};
use bdk_slack::manifest::{required_scopes, scope_purpose};
use serde_json::{Value, json};

use super::command::{self, DoctorArgs, Exit, PUBLIC_URL_ENV};
use super::report::{Check, Report};
use crate::support::{FAILED, OK};

/// How variables are read: `None` for unset (or empty).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// How long one HTTP exchange of a check may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long Slack waits for the answer to a request (its docs: three
/// seconds).
const SLACK_PATIENCE: Duration = Duration::from_secs(3);
/// The most of a response body the request URL check reads.
const MAX_BODY: usize = 64 * 1024;

/// Where the Bot User OAuth Token is, for fixes.
const WHERE_TOKEN: &str =
    "api.slack.com/apps → your app → OAuth & Permissions → Bot User OAuth Token";
/// Where the signing secret is, for fixes.
const WHERE_SECRET: &str =
    "api.slack.com/apps → your app → Basic Information → App Credentials → Signing Secret";

/// Runs the checks and prints them; exit 0 without a problem, 1 with one,
/// 2 for a bad project or arguments.
pub(super) async fn run(args: &DoctorArgs) -> Result<u8, Exit> {
    let target = &args.target;
    let project = command::load(&target.dir)?;
    let (name, settings) = command::pick(&project, target.channel.as_deref())?;
    let env = command::env;
    let public = command::public_url(target.url.as_deref(), settings, env(PUBLIC_URL_ENV))?;
    let place = Place {
        channel: name,
        public: public.as_deref(),
        slug: command::slug(&project),
    };
    let checks = checks(settings, &place, &env).await;
    let report = Report::new(checks);
    if args.json {
        crate::support::print_json(&report)
            .map_err(|e| Exit::unusable(format!("failed to print the report: {e}")))?;
    } else {
        outln!(
            "Slack channel `{name}` of agent `{}` ({})",
            project.name,
            project.root.display()
        );
        out!("{}", report.text());
    }
    Ok(if report.ok { OK } else { FAILED })
}

/// Where the channel is served.
struct Place<'a> {
    /// The channel's name.
    channel: &'a str,
    /// The server's public base URL, when one is known.
    public: Option<&'a str>,
    /// The agent's slug on a multi-agent server.
    slug: String,
}

/// Every check, in order.
async fn checks(settings: &SlackChannel, place: &Place<'_>, env: Env<'_>) -> Vec<Check> {
    let token = env(&settings.token_env);
    let secret = env(&settings.signing_secret_env);
    let mut out = vec![token_check(&settings.token_env, token.as_deref())];
    let base = api_base(settings, env);
    let (auth, identity) = auth_check(settings, token.as_deref(), &base).await;
    out.push(auth);
    out.push(match identity {
        Some(identity) => scopes_check(settings, &identity.scopes),
        None => Check::skipped("scopes", "needs a token that works (see auth)"),
    });
    out.push(secret_check(
        &settings.signing_secret_env,
        secret.as_deref(),
    ));
    out.push(match (place.public, secret.as_deref()) {
        (None, _) => Check::skipped("request_url", "no public URL known: pass --url to check it"),
        (Some(_), None) => Check::skipped(
            "request_url",
            format!(
                "needs the signing secret (`{}`) to sign the check",
                settings.signing_secret_env
            ),
        ),
        (Some(public), Some(secret)) => request_url_check(settings, place, public, secret).await,
    });
    out
}

/// The Web API base: the channel's `api_url`, else `SLACK_API_URL`, else
/// Slack's, as the pack uses it.
fn api_base(settings: &SlackChannel, env: Env<'_>) -> String {
    settings
        .api_url
        .clone()
        .or_else(|| env(SLACK_API_URL_ENV))
        .unwrap_or_else(|| SLACK_API_URL.to_owned())
        .trim()
        .trim_end_matches('/')
        .to_owned()
}

/// Check 1: the token variable is set and holds a bot token.
fn token_check(var: &str, token: Option<&str>) -> Check {
    let fix = format!(
        "copy the Bot User OAuth Token ({WHERE_TOKEN}; it starts with xoxb-), then `export {var}=xoxb-…`"
    );
    let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
        return Check::problem("token", format!("`{var}` is not set"), fix);
    };
    if token.starts_with("xoxb-") {
        return Check::ok("token", format!("`{var}` holds a bot token (xoxb-…)"));
    }
    let kind = if token.starts_with("xoxp-") {
        "a user token (xoxp-…), not the bot token"
    } else if token.starts_with("xapp-") {
        "an app-level token (xapp-…), not the bot token"
    } else {
        "no bot token: it does not start with xoxb-"
    };
    Check::problem("token", format!("`{var}` holds {kind}"), fix)
}

/// Check 2: `auth.test` accepts the token; the identity it answers, when it did.
async fn auth_check(
    settings: &SlackChannel,
    token: Option<&str>,
    base: &str,
) -> (Check, Option<Identity>) {
    let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
        return (Check::skipped("auth", "no token to test"), None);
    };
    let options = ClientOptions {
        max_attempts: 2,
        max_wait: Duration::from_secs(5),
        backoff: Duration::from_millis(300),
        timeout: TIMEOUT,
    };
    let answer = match SlackClient::new(base, token, options) {
        Ok(client) => client.auth_test().await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(identity) => {
            let team = match &identity.url {
                Some(url) => format!("{} ({url})", identity.team_id),
                None => identity.team_id.clone(),
            };
            let bot = identity
                .bot_id
                .as_deref()
                .map(|b| format!(", bot {b}"))
                .unwrap_or_default();
            let check = Check::ok(
                "auth",
                format!(
                    "auth.test: bot user {}{bot} in team {team}",
                    identity.user_id
                ),
            );
            (check, Some(identity))
        }
        Err(e) => (auth_failure(&e, &settings.token_env, base), None),
    }
}

/// What an `auth.test` failure means, and its fix.
fn auth_failure(e: &ApiError, var: &str, base: &str) -> Check {
    let url = format!("{base}/auth.test");
    let reinstall = format!(
        "reinstall the app (api.slack.com/apps → your app → OAuth & Permissions → Reinstall to Workspace), then export the new Bot User OAuth Token as `{var}`"
    );
    let (detail, fix) = match e {
        ApiError::Slack { error, .. } => match error.as_str() {
            "invalid_auth" => (
                "Slack does not accept the token (invalid_auth)".to_owned(),
                format!(
                    "the token is mistyped or belongs to another app or workspace: copy it again ({WHERE_TOKEN}) and `export {var}=xoxb-…`"
                ),
            ),
            "not_authed" => (
                "no token reached Slack (not_authed)".to_owned(),
                format!(
                    "set `{var}` to the bot token; if a proxy sits in front of the API ({url}), let it pass the Authorization header"
                ),
            ),
            "account_inactive" => (
                "the token's bot user or workspace is deactivated (account_inactive)".to_owned(),
                reinstall,
            ),
            "token_revoked" => (
                "the token was revoked (token_revoked): the app was uninstalled or the token reset"
                    .to_owned(),
                reinstall,
            ),
            other => (
                format!("Slack refused auth.test ({other})"),
                "see the errors of https://api.slack.com/methods/auth.test".to_owned(),
            ),
        },
        ApiError::Transport(reason) => (
            format!("cannot reach the Slack API at {url}: {reason}"),
            format!(
                "check the network (and proxy) and the API address: the channel's `api_url`, else `{SLACK_API_URL_ENV}`, else {SLACK_API_URL}"
            ),
        ),
        ApiError::Status { status, .. } => (
            format!("the Slack API at {url} answered HTTP {status}"),
            format!(
                "check the API address (the channel's `api_url`, else `{SLACK_API_URL_ENV}`); if it is Slack's, see https://slack-status.com"
            ),
        ),
        ApiError::RateLimited { .. } => (
            "Slack rate-limited auth.test".to_owned(),
            "run the doctor again in a minute".to_owned(),
        ),
        ApiError::Decode(reason) => (
            format!("{url} did not answer as Slack's Web API: {reason}"),
            format!("check the API address (the channel's `api_url`, else `{SLACK_API_URL_ENV}`)"),
        ),
        other => (
            format!("cannot call auth.test: {other}"),
            format!(
                "check `{var}` and the API address (the channel's `api_url`, else `{SLACK_API_URL_ENV}`)"
            ),
        ),
    };
    Check::problem("auth", detail, fix)
}

/// Check 3: the token holds every scope the channel needs.
fn scopes_check(settings: &SlackChannel, granted: &[String]) -> Check {
    let needed = required_scopes(settings);
    if granted.is_empty() {
        return Check::skipped(
            "scopes",
            "auth.test did not report the token's scopes (no x-oauth-scopes header)",
        );
    }
    let granted: BTreeSet<&str> = granted.iter().map(String::as_str).collect();
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|s| !granted.contains(s))
        .collect();
    if missing.is_empty() {
        return Check::ok(
            "scopes",
            format!(
                "the token has the {} scopes the channel needs",
                needed.len()
            ),
        );
    }
    let listed = missing
        .iter()
        .map(|s| format!("`{s}` ({})", scope_purpose(s)))
        .collect::<Vec<_>>()
        .join(", ");
    let (noun, them) = if missing.len() == 1 {
        ("scope", "it")
    } else {
        ("scopes", "them")
    };
    Check::problem(
        "scopes",
        format!("missing {noun} {listed}"),
        format!(
            "add {them} under OAuth & Permissions → Scopes → Bot Token Scopes, then reinstall the app to the workspace (and export the token again if it changed)"
        ),
    )
}

/// Check 4: the secret variable is set and looks like Slack's signing secret.
fn secret_check(var: &str, secret: Option<&str>) -> Check {
    let fix = format!("copy the Signing Secret ({WHERE_SECRET}), then `export {var}=…`");
    // Not trimmed: the server checks signatures with the variable as it is.
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return Check::problem(
            "signing_secret",
            format!("`{var}` is not set: `bdk serve` refuses every Slack request without it"),
            fix,
        );
    };
    if secret.len() == 32 && secret.chars().all(|c| c.is_ascii_hexdigit()) {
        return Check::ok(
            "signing_secret",
            format!("`{var}` is set (32 hexadecimal characters)"),
        );
    }
    Check::problem(
        "signing_secret",
        format!(
            "`{var}` does not look like a signing secret (32 hexadecimal characters; it has {} characters{})",
            secret.chars().count(),
            if secret.chars().all(|c| c.is_ascii_hexdigit()) {
                ""
            } else {
                ", not all hexadecimal"
            }
        ),
        format!("{fix} (not the Client Secret or the Verification Token from the same page)"),
    )
}

/// Check 5: the request URL answers a signed `url_verification` with its
/// challenge.
async fn request_url_check(
    settings: &SlackChannel,
    place: &Place<'_>,
    public: &str,
    secret: &str,
) -> Check {
    let url = command::request_url(public, place.channel);
    let challenge = uuid::Uuid::new_v4().simple().to_string();
    let body =
        json!({"token": "doctor", "challenge": challenge, "type": "url_verification"}).to_string();
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let signature = bdk_slack::ingress::sign(secret.as_bytes(), &timestamp, body.as_bytes());
    bdk_models::net::install_crypto_provider();
    let client = match reqwest::Client::builder()
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        // Slack does not follow redirects; neither does the check.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("bdk/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return Check::problem(
                "request_url",
                format!("failed to build the HTTP client: {e}"),
                "run the doctor again",
            );
        }
    };
    let started = Instant::now();
    let sent = client
        .post(&url)
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", &timestamp)
        .header("x-slack-signature", signature)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            let detail = if e.is_timeout() {
                format!("{url} did not answer within {} s", TIMEOUT.as_secs())
            } else {
                format!("cannot reach {url}: {}", chain(&e))
            };
            return Check::problem(
                "request_url",
                detail,
                format!(
                    "start `bdk serve` (and the tunnel in front of it) and check that {public} is the address it is reached at"
                ),
            );
        }
    };
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = read_limited(response).await;
    let answer = Answer {
        status,
        text: &text,
        location: location.as_deref(),
        elapsed: started.elapsed(),
    };
    verification_outcome(settings, place, public, &url, &challenge, &answer)
}

/// What the request URL answered.
struct Answer<'a> {
    status: u16,
    text: &'a str,
    location: Option<&'a str>,
    elapsed: Duration,
}

/// What the answer to the URL check means.
fn verification_outcome(
    settings: &SlackChannel,
    place: &Place<'_>,
    public: &str,
    url: &str,
    challenge: &str,
    answer: &Answer<'_>,
) -> Check {
    let json: Option<Value> = serde_json::from_str(answer.text).ok();
    let message = json
        .as_ref()
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str)
        .map_or_else(|| snippet(answer.text), str::to_owned);
    let var = &settings.signing_secret_env;
    match answer.status {
        200 => {
            let echoed = json
                .as_ref()
                .and_then(|v| v.get("challenge"))
                .and_then(Value::as_str)
                .map_or_else(|| answer.text.trim() == challenge, |c| c == challenge);
            if !echoed {
                return Check::problem(
                    "request_url",
                    format!("{url} answered 200 without echoing the challenge"),
                    format!(
                        "something other than `bdk serve` answers there (a proxy, a login page?): the request URL must reach the server's /v1/channels/{}",
                        place.channel
                    ),
                );
            }
            if answer.elapsed > SLACK_PATIENCE {
                return Check::problem(
                    "request_url",
                    format!(
                        "{url} echoed the challenge but took {:.1} s; Slack gives up after {} s",
                        answer.elapsed.as_secs_f64(),
                        SLACK_PATIENCE.as_secs()
                    ),
                    "check the server's load and the tunnel or proxy in front of it",
                );
            }
            Check::ok(
                "request_url",
                format!("{url} answered the signed URL check with its challenge"),
            )
        }
        401 => {
            let (detail, fix) = if message.contains("no signing secret") {
                (
                    format!("{url} refused the check (401): the server has no signing secret"),
                    format!(
                        "set `{var}` on the server to the Signing Secret ({WHERE_SECRET}) and restart `bdk serve`"
                    ),
                )
            } else if message.contains("timestamp") {
                (
                    format!("{url} refused the check (401: {message})"),
                    "this machine's clock and the server's differ by more than five minutes: set both by NTP".to_owned(),
                )
            } else {
                (
                    format!(
                        "{url} refused the signature (401): the server has another signing secret than `{var}` here"
                    ),
                    format!(
                        "give the server and this shell the same Signing Secret ({WHERE_SECRET}) in `{var}`, and restart `bdk serve`"
                    ),
                )
            };
            Check::problem("request_url", detail, fix)
        }
        404 => {
            let hint = if public
                .trim_end_matches('/')
                .ends_with(&format!("/{}", place.slug))
            {
                String::new()
            } else {
                format!(
                    "; `bdk serve` mounts each agent under its slug unless run with --mode single: try --url {}/{}",
                    public.trim_end_matches('/'),
                    place.slug
                )
            };
            Check::problem(
                "request_url",
                format!(
                    "{url} answered 404: the channel `{}` is not served there",
                    place.channel
                ),
                format!(
                    "check that `bdk serve` runs this agent (with this channel) behind {public}{hint}"
                ),
            )
        }
        300..=399 => Check::problem(
            "request_url",
            format!(
                "{url} redirects ({}) to {}; Slack does not follow redirects",
                answer.status,
                answer.location.unwrap_or("elsewhere")
            ),
            "pass the address the redirect ends at as --url (often https:// instead of http://)",
        ),
        status => Check::problem(
            "request_url",
            format!("{url} answered {status}: {message}"),
            format!(
                "check that {public} reaches `bdk serve` (a proxy or tunnel in between may be answering) and read the server's log"
            ),
        ),
    }
}

/// Up to [`MAX_BODY`] bytes of a response, as text.
async fn read_limited(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < MAX_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(MAX_BODY);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The start of a body, on one line, for a detail.
fn snippet(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "an empty body".to_owned();
    }
    let mut cut: String = line.chars().take(120).collect();
    if cut.len() < line.len() {
        cut.push('…');
    }
    cut
}

/// An error with its sources, which is where reqwest says what went wrong
/// ("connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::report::Status;
    use super::*;

    fn statuses(checks: &[Check]) -> Vec<(&'static str, Status)> {
        checks.iter().map(|c| (c.name, c.status)).collect()
    }

    fn place() -> Place<'static> {
        Place {
            channel: "slack",
            public: Some("https://h"),
            slug: "helper".to_owned(),
        }
    }

    fn answer(status: u16, text: &str) -> Answer<'_> {
        Answer {
            status,
            text,
            location: None,
            elapsed: Duration::from_millis(10),
        }
    }

    fn outcome(status: u16, text: &str) -> Check {
        verification_outcome(
            &SlackChannel::default(),
            &place(),
            "https://h",
            "https://h/v1/channels/slack",
            "abc",
            &answer(status, text),
        )
    }

    #[test]
    fn the_token_must_be_a_bot_token() {
        assert_eq!(token_check("T", Some("xoxb-1")).status, Status::Ok);
        for (token, says) in [
            (None, "is not set"),
            (Some(" "), "is not set"),
            (Some("xoxp-1"), "user token"),
            (Some("xapp-1"), "app-level token"),
            (Some("hunter2"), "does not start with xoxb-"),
        ] {
            let c = token_check("T", token);
            assert_eq!(c.status, Status::Problem, "{token:?}");
            assert!(c.detail.contains(says), "{token:?}: {}", c.detail);
            assert!(!c.detail.contains("hunter2"), "the token leaked");
            assert!(c.fix.unwrap().contains("Bot User OAuth Token"));
        }
    }

    #[test]
    fn the_secret_must_be_32_hexadecimal_characters() {
        let good = "0123456789abcdef0123456789ABCDEF";
        assert_eq!(secret_check("S", Some(good)).status, Status::Ok);
        for bad in [None, Some("short"), Some(&"g".repeat(32)[..])] {
            let c = secret_check("S", bad);
            assert_eq!(c.status, Status::Problem, "{bad:?}");
            assert!(c.fix.unwrap().contains("Signing Secret"));
        }
    }

    #[test]
    fn each_missing_scope_is_named_with_its_purpose() {
        let all: Vec<String> = required_scopes(&SlackChannel::default())
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            scopes_check(&SlackChannel::default(), &all).status,
            Status::Ok
        );
        let without: Vec<String> = all.iter().filter(|s| *s != "im:history").cloned().collect();
        let c = scopes_check(&SlackChannel::default(), &without);
        assert_eq!(c.status, Status::Problem);
        assert_eq!(c.detail, "missing scope `im:history` (direct messages)");
        assert!(c.fix.unwrap().contains("Bot Token Scopes"));
        let mut no_dms = SlackChannel::default();
        no_dms.direct_messages = false;
        assert_eq!(scopes_check(&no_dms, &without).status, Status::Ok);
        assert_eq!(
            scopes_check(&no_dms, &[]).status,
            Status::Skipped,
            "no reported scopes"
        );
    }

    #[test]
    fn auth_failures_say_what_to_do() {
        for (code, says) in [
            ("invalid_auth", "invalid_auth"),
            ("not_authed", "not_authed"),
            ("account_inactive", "account_inactive"),
            ("token_revoked", "token_revoked"),
            ("team_added_to_org", "team_added_to_org"),
        ] {
            let e = ApiError::Slack {
                method: "auth.test".into(),
                error: code.into(),
                needed: None,
            };
            let c = auth_failure(&e, "T", "https://api");
            assert_eq!(c.status, Status::Problem);
            assert!(c.detail.contains(says), "{}", c.detail);
            assert!(c.fix.is_some());
        }
        let c = auth_failure(&ApiError::Transport("refused".into()), "T", "http://x/api");
        assert!(c.detail.contains("http://x/api/auth.test"), "{}", c.detail);
    }

    #[test]
    fn the_url_check_reads_the_answer() {
        assert_eq!(
            outcome(
                200,
                r#"{"ok":true,"outcome":"challenge","challenge":"abc"}"#
            )
            .status,
            Status::Ok
        );
        assert_eq!(outcome(200, "abc\n").status, Status::Ok);
        assert_eq!(
            outcome(200, r#"{"challenge":"xyz"}"#).status,
            Status::Problem
        );
        let c = outcome(
            401,
            r#"{"ok":false,"error":"unauthorized","message":"X-Slack-Signature does not match the body"}"#,
        );
        assert!(c.detail.contains("another signing secret"), "{}", c.detail);
        let c = outcome(
            401,
            r#"{"message":"this Slack channel has no signing secret; set X"}"#,
        );
        assert!(c.detail.contains("no signing secret"), "{}", c.detail);
        let c = outcome(404, "");
        assert!(c.detail.contains("not served there"), "{}", c.detail);
        assert!(c.fix.unwrap().contains("https://h/helper"));
        let c = outcome(502, "<html>Bad gateway</html>");
        assert!(c.detail.contains("502"), "{}", c.detail);
        let slow = Answer {
            elapsed: Duration::from_secs(4),
            ..answer(200, "abc")
        };
        let c = verification_outcome(
            &SlackChannel::default(),
            &place(),
            "https://h",
            "https://h/v1/channels/slack",
            "abc",
            &slow,
        );
        assert_eq!(c.status, Status::Problem);
    }

    #[tokio::test]
    async fn without_variables_everything_after_the_first_failure_is_skipped() {
        let env = |_: &str| None;
        let place = Place {
            public: None,
            ..place()
        };
        let checks = checks(&SlackChannel::default(), &place, &env).await;
        assert_eq!(
            statuses(&checks),
            [
                ("token", Status::Problem),
                ("auth", Status::Skipped),
                ("scopes", Status::Skipped),
                ("signing_secret", Status::Problem),
                ("request_url", Status::Skipped),
            ]
        );
    }
}
