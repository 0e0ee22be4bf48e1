//! GitHub webhook deliveries: each GitHub channel of an agent
//! (`kind = "github"`) is served at `POST /v1/channels/<name>`, and the
//! local-only `POST /v1/webhooks/github` (the local-only rule of the default
//! auth policy, applied whatever the policy) hands one delivery to every
//! GitHub channel the server mounts (what `bdk github replay` and
//! `bdk github forward` post to).
//!
//! This module is the HTTP side only: it reads the raw body, checks
//! `X-Hub-Signature-256` over it (constant time) with the channel's secret,
//! refuses unsigned deliveries unless the server runs with `--dev`, parses
//! the JSON, and hands the delivery to the pack (`bdk_github::Github`),
//! which answers pings, ignores what wakes nothing, dedupes by
//! `X-GitHub-Delivery` and says which session to wake. The session is then
//! woken through the agent's [`Channels`], like any channel message, so it
//! gets the same one-session-per-key guarantee and event delivery.

use std::sync::Arc;

use aide::axum::ApiRouter;
use aide::axum::routing::post_with;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bdk_github::{AcceptError, Delivery, Github, Ingress};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::api::{Describe, schema_of};
use crate::auth;
use crate::channels::verify::{self, Refused};
use crate::channels::{Channels, Receive, parse_body, read_body};
use crate::error::{ApiError, ErrorCode};

/// The signature header GitHub sends.
const SIGNATURE: HeaderName = HeaderName::from_static("x-hub-signature-256");

/// One agent's GitHub channels, as the routes see them.
pub(crate) struct GithubMount {
    /// The agent's slug, or its name in a single-agent server.
    pub(crate) agent: String,
    pub(crate) channels: Channels,
    pub(crate) github: Github,
    /// `--dev`: unsigned deliveries are accepted when no secret is set.
    pub(crate) dev: bool,
}

/// What a delivery led to.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Answer {
    /// Always true.
    ok: bool,
    /// The agent (its slug) and the channel that took the delivery.
    agent: String,
    /// The GitHub channel.
    channel: String,
    /// `accepted` (a session was woken), `duplicate` (this delivery id was
    /// handled before), `ignored` (nothing to do) or `pong` (a `ping`).
    outcome: &'static str,
    /// The delivery id (`X-GitHub-Delivery`).
    delivery_id: String,
    /// The session the delivery reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// Its continuation token, `<channel>:<owner/repo#number>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    continuation_token: Option<String>,
    /// The turn it started; absent when it joined a running turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    turn_id: Option<String>,
    /// True when the delivery created the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    /// Why nothing was done (`ignored`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// GitHub's zen line (`pong`).
    #[serde(skip_serializing_if = "Option::is_none")]
    zen: Option<String>,
}

/// The answer of the fan-out route.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FanOut {
    /// Always true.
    ok: bool,
    /// One entry per GitHub channel that took the delivery.
    deliveries: Vec<Answer>,
}

/// The routes of one agent's GitHub channels, relative to `/v1/channels`.
pub(crate) fn channel_routes(mount: &Arc<GithubMount>) -> Router {
    let mut router = Router::new();
    for name in mount.github.channels() {
        let m = Arc::clone(mount);
        router = router.route(
            &format!("/{name}"),
            post(move |req: Request| {
                let m = Arc::clone(&m);
                let name = name.clone();
                async move {
                    let (headers, body) = match read(req).await {
                        Ok(r) => r,
                        Err(e) => return e.into_response(),
                    };
                    match deliver(&m, &name, &headers, &body).await {
                        Ok(answer) => answered(answer),
                        Err(e) => e.into_response(),
                    }
                }
            }),
        );
    }
    router
}

/// `POST /v1/webhooks/github` over every mounted GitHub channel.
pub(crate) fn host_route(mounts: Vec<Arc<GithubMount>>) -> Router {
    let mounts = Arc::new(mounts);
    Router::new().route(
        bdk_api::paths::GITHUB_WEBHOOKS,
        post(move |req: Request| {
            let mounts = Arc::clone(&mounts);
            async move {
                match fan_out(&mounts, req).await {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            }
        }),
    )
}

/// The fan-out route for the OpenAPI document.
pub(crate) fn documented() -> ApiRouter {
    ApiRouter::new().api_route(
        bdk_api::paths::GITHUB_WEBHOOKS,
        post_with(
            |_: Request| async { StatusCode::NOT_FOUND },
            |op| {
                op.doc(
                    "githubWebhookFanOut",
                    "channels",
                    "Hand a GitHub delivery to every GitHub channel",
                    "Local only, whatever the server's auth policy: the caller must be a direct loopback client, and a request carrying a proxy header (`Forwarded`, `Via`, `X-Real-IP`, any `X-Forwarded-*`) or not naming exactly one loopback `Host` is refused with `401 unauthorized`, as the default local-only auth refuses it on every route. Takes a delivery exactly as GitHub sends it (the JSON payload with `X-GitHub-Event`, `X-GitHub-Delivery` and `X-Hub-Signature-256`) and hands it to every GitHub channel of every agent the server mounts, each checking the signature with its own secret. `bdk github replay` and `bdk github forward` post here. The answer lists what each channel did; when no channel took the delivery, the first refusal is the answer.",
                )
                .raw_response(
                    202,
                    json!({
                        "description": "At least one channel took the delivery.",
                        "content": {"application/json": {"schema": schema_of::<FanOut>()}},
                    }),
                )
                .errors(&[
                    ErrorCode::InvalidJson,
                    ErrorCode::InvalidRequest,
                    ErrorCode::Unauthorized,
                    ErrorCode::Forbidden,
                    ErrorCode::NotFound,
                    ErrorCode::TaskSession,
                    ErrorCode::RequestTimeout,
                    ErrorCode::PayloadTooLarge,
                    ErrorCode::UnsupportedMediaType,
                ])
            },
        ),
    )
}

/// The status a delivery's answer goes out with: 200 for a ping and a
/// duplicate (nothing new happened), 202 otherwise.
fn answered(answer: Answer) -> Response {
    let status = match answer.outcome {
        "pong" | "duplicate" => StatusCode::OK,
        _ => StatusCode::ACCEPTED,
    };
    (status, Json(answer)).into_response()
}

async fn read(req: Request) -> Result<(HeaderMap, Bytes), ApiError> {
    let headers = req.headers().clone();
    Ok((headers, read_body(req).await?))
}

async fn fan_out(mounts: &[Arc<GithubMount>], req: Request) -> Result<Response, ApiError> {
    // Local only whatever the server's auth policy, by the same rule, status
    // and code as the default policy: issue 43 found it checking the peer
    // alone, so a reverse proxy on this machine (or a page that rebound its
    // name to 127.0.0.1) reached it as if local.
    if let Err(not_local) = auth::check_local(req.headers(), req.uri(), auth::peer_of(&req)) {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            format!(
                "{}; the GitHub fan-out route answers direct loopback clients only, whatever the server's auth (GitHub itself posts to /v1/channels/<name>)",
                not_local.what()
            ),
        ));
    }
    if mounts.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "no GitHub channel is mounted: add agent/channels/<name>.toml with kind = \"github\"",
        ));
    }
    let (headers, body) = read(req).await?;
    let mut deliveries = Vec::new();
    let mut first_error = None;
    for mount in mounts {
        for name in mount.github.channels() {
            match deliver(mount, &name, &headers, &body).await {
                Ok(answer) => deliveries.push(answer),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    match (deliveries.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok((
            StatusCode::ACCEPTED,
            Json(FanOut {
                ok: true,
                deliveries,
            }),
        )
            .into_response()),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Where the server was reached, as the request shows it (for links).
fn origin(headers: &HeaderMap) -> Option<String> {
    let host = header(headers, "host")?;
    let clean = host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b));
    if !clean {
        return None;
    }
    let https =
        header(headers, "x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"));
    Some(format!("{}://{host}", if https { "https" } else { "http" }))
}

/// One delivery to one GitHub channel.
async fn deliver(
    mount: &GithubMount,
    channel: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Answer, ApiError> {
    match mount.github.secret(channel) {
        Some(secret) => {
            verify::hmac_with(headers, body, &secret, &SIGNATURE).map_err(|reason| {
                tracing::debug!(channel, reason = %reason, "GitHub delivery refused");
                ApiError::new(
                    ErrorCode::Unauthorized,
                    match reason {
                        Refused::Missing => "the delivery is not signed (X-Hub-Signature-256)",
                        _ => "the delivery's signature (X-Hub-Signature-256) does not match the webhook secret",
                    },
                )
            })?;
        }
        None if mount.dev => {
            tracing::warn!(
                channel,
                "accepting an unsigned GitHub delivery: no webhook secret is set and the server runs with --dev"
            );
        }
        None => {
            let variable = mount
                .github
                .settings(channel)
                .map_or("GITHUB_WEBHOOK_SECRET", |s| s.secret_env.as_str());
            tracing::error!(
                channel,
                variable,
                "a GitHub channel refuses every delivery because its webhook secret is not set; set the variable (or run with --dev to accept unsigned deliveries)"
            );
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                format!(
                    "this GitHub channel has no webhook secret; set {variable} on the server (unsigned deliveries are accepted only with --dev)"
                ),
            ));
        }
    }
    let event = header(headers, "x-github-event").ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "the delivery has no X-GitHub-Event header",
        )
    })?;
    let id = header(headers, "x-github-delivery").ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "the delivery has no X-GitHub-Delivery header",
        )
    })?;
    if id.len() > 200 || id.chars().any(char::is_control) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "X-GitHub-Delivery is not a delivery id",
        ));
    }
    let payload = parse_body(headers, body)?;
    let origin = origin(headers);
    let delivery = Delivery {
        event,
        id,
        payload: &payload,
        origin: origin.as_deref(),
    };
    let answer = |outcome: &'static str| Answer {
        ok: true,
        agent: mount.agent.clone(),
        channel: channel.to_owned(),
        outcome,
        delivery_id: id.to_owned(),
        session_id: None,
        continuation_token: None,
        turn_id: None,
        created: None,
        reason: None,
        zen: None,
    };
    let ingress = mount
        .github
        .accept(channel, &delivery)
        .await
        .map_err(|e| match e {
            AcceptError::Ingress(e) => ApiError::new(ErrorCode::InvalidRequest, e.to_string()),
            AcceptError::UnknownChannel(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            AcceptError::Store(e) => ApiError::internal(&e),
        })?;
    match ingress {
        Ingress::Pong { zen, .. } => Ok(Answer {
            zen,
            ..answer("pong")
        }),
        Ingress::Duplicate { session_id } => Ok(Answer {
            session_id,
            ..answer("duplicate")
        }),
        Ingress::Ignored(reason) => {
            tracing::debug!(channel, event, delivery = id, %reason, "GitHub delivery ignored");
            Ok(Answer {
                reason: Some(reason),
                ..answer("ignored")
            })
        }
        Ingress::Wake(wake) => {
            let receive = Receive {
                message: wake.message.clone(),
                continuation_key: Some(wake.key.clone()),
                admission: wake.admission,
                delivery_id: Some(wake.delivery.clone()),
                ..Receive::default()
            };
            match mount.channels.receive(channel, receive).await {
                Ok(accepted) => {
                    mount
                        .github
                        .woke(channel, &wake, &accepted.session_id, accepted.created)
                        .await;
                    Ok(Answer {
                        session_id: Some(accepted.session_id.to_string()),
                        continuation_token: Some(accepted.continuation_token),
                        turn_id: accepted.turn_id.map(|t| t.to_string()),
                        created: Some(accepted.created),
                        ..answer("accepted")
                    })
                }
                Err(e) => {
                    // Without the claim, GitHub's redelivery runs it.
                    mount.github.release(channel, &wake.delivery).await;
                    Err(e.into())
                }
            }
        }
    }
}
