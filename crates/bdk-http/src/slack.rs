//! Slack requests: each Slack channel of an agent (`kind = "slack"`) is
//! served at `POST /v1/channels/<name>`, the one URL a Slack app's Event
//! Subscriptions and Interactivity both point at.
//!
//! This module is the HTTP side only: it reads the raw body, checks
//! Slack's `v0` signature over it (constant time, timestamps older than
//! five minutes refused) with the channel's signing secret, refuses
//! unsigned requests unless the server runs with `--dev` and has no
//! secret, parses the body, and hands the request to the pack
//! (`bdk_slack::Slack`), which answers the URL check, ignores what does
//! not engage the bot, dedupes by `event_id` and says what to do. A
//! message is handed to the thread's session through the agent's
//! [`Channels`]; a stop word stops the session's turn; an Approve or Deny
//! click resolves the parked call with the clicking user as the principal.
//! Slack wants an answer within three seconds: nothing here waits on a turn.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use bdk_core::host::{Host, HostError};
use bdk_slack::{AcceptError, Ingress, Slack};
use schemars::JsonSchema;
use serde::Serialize;

use crate::channels::{Channels, Receive, read_body};
use crate::error::{ApiError, ErrorCode};

/// One agent's Slack channels, as the routes see them.
pub(crate) struct SlackMount {
    pub(crate) channels: Channels,
    pub(crate) host: Host,
    pub(crate) slack: Slack,
    /// `--dev`: unsigned requests are accepted when no secret is set.
    pub(crate) dev: bool,
}

/// What a request led to.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Answer {
    /// Always true.
    ok: bool,
    /// `accepted` (a session got the message), `duplicate` (Slack's retry
    /// of an event already taken), `ignored`, `stopped`, `approved`,
    /// `denied` or `refused` (a click by someone who may not decide).
    outcome: &'static str,
    /// The session concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The turn the message started; absent when it joined a running turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    turn_id: Option<String>,
    /// True when the message created the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    /// Why nothing was done.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The URL check's challenge, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    challenge: Option<String>,
}

/// The routes of one agent's Slack channels, relative to `/v1/channels`.
pub(crate) fn channel_routes(mount: &Arc<SlackMount>) -> Router {
    let mut router = Router::new();
    for name in mount.slack.channels() {
        let m = Arc::clone(mount);
        router = router.route(
            &format!("/{name}"),
            post(move |req: Request| {
                let m = Arc::clone(&m);
                let name = name.clone();
                async move {
                    let headers = req.headers().clone();
                    let body = match read_body(req).await {
                        Ok(b) => b,
                        Err(e) => return e.into_response(),
                    };
                    match handle(&m, &name, &headers, &body).await {
                        Ok(answer) => (StatusCode::OK, Json(answer)).into_response(),
                        Err(e) => e.into_response(),
                    }
                }
            }),
        );
    }
    router
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn answer(outcome: &'static str) -> Answer {
    Answer {
        ok: true,
        outcome,
        ..Answer::default()
    }
}

/// One request to one Slack channel.
async fn handle(
    mount: &SlackMount,
    channel: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Answer, ApiError> {
    match mount.slack.signing_secret(channel) {
        Some(secret) => {
            let now = chrono::Utc::now().timestamp();
            bdk_slack::ingress::verify(
                secret.as_bytes(),
                header(headers, "x-slack-request-timestamp"),
                header(headers, "x-slack-signature"),
                body,
                now,
            )
            .map_err(|reason| {
                tracing::debug!(channel, reason = %reason, "Slack request refused");
                ApiError::new(ErrorCode::Unauthorized, reason.to_string())
            })?;
        }
        None if mount.dev => {
            tracing::warn!(
                channel,
                "accepting an unsigned Slack request: no signing secret is set and the server runs with --dev"
            );
        }
        None => {
            let variable = mount
                .slack
                .settings(channel)
                .map_or("SLACK_SIGNING_SECRET", |s| s.signing_secret_env.as_str());
            tracing::error!(
                channel,
                variable,
                "a Slack channel refuses every request because its signing secret is not set; set the variable"
            );
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                format!(
                    "this Slack channel has no signing secret; set {variable} on the server (unsigned requests are accepted only with --dev)"
                ),
            ));
        }
    }
    let content_type = header(headers, "content-type").unwrap_or("application/json");
    let request = bdk_slack::ingress::parse(content_type, body).map_err(|e| match e {
        bdk_slack::ingress::ParseError::Json(_) => {
            ApiError::new(ErrorCode::InvalidJson, e.to_string())
        }
        bdk_slack::ingress::ParseError::ContentType(_) => {
            ApiError::new(ErrorCode::UnsupportedMediaType, e.to_string())
        }
        bdk_slack::ingress::ParseError::Shape(_) => {
            ApiError::new(ErrorCode::InvalidRequest, e.to_string())
        }
    })?;
    if let Some(retry) = header(headers, "x-slack-retry-num") {
        tracing::debug!(
            channel,
            retry,
            reason = header(headers, "x-slack-retry-reason").unwrap_or(""),
            "a Slack retry"
        );
    }
    let ingress = mount
        .slack
        .accept(channel, request)
        .await
        .map_err(|e| match e {
            AcceptError::UnknownChannel(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            AcceptError::Identity(_) => {
                tracing::warn!(channel, error = %e, "a Slack event cannot be classified; Slack will retry it");
                ApiError::new(ErrorCode::UpstreamUnavailable, e.to_string())
            }
            AcceptError::Store(e) => ApiError::internal(&e),
            other => ApiError::internal(&other),
        })?;
    match ingress {
        Ingress::Challenge(challenge) => Ok(Answer {
            challenge: Some(challenge),
            ..answer("challenge")
        }),
        Ingress::Ignored(reason) => {
            tracing::debug!(channel, %reason, "Slack request ignored");
            Ok(Answer {
                reason: Some(reason),
                ..answer("ignored")
            })
        }
        Ingress::Duplicate { session_id } => Ok(Answer {
            session_id,
            ..answer("duplicate")
        }),
        Ingress::Engage {
            engage,
            event_id,
            admission,
        } => {
            let receive = Receive {
                message: engage.message.clone(),
                continuation_key: Some(engage.key()),
                admission,
                delivery_id: Some(event_id.clone()),
                ..Receive::default()
            };
            match mount.channels.receive(channel, receive).await {
                Ok(accepted) => {
                    mount
                        .slack
                        .woke(
                            channel,
                            &engage,
                            &event_id,
                            &accepted.session_id,
                            accepted.created,
                        )
                        .await;
                    Ok(Answer {
                        session_id: Some(accepted.session_id.to_string()),
                        turn_id: accepted.turn_id.map(|t| t.to_string()),
                        created: Some(accepted.created),
                        ..answer("accepted")
                    })
                }
                Err(e) => {
                    // Without the claim, Slack's retry runs it.
                    mount.slack.release(channel, &event_id).await;
                    Err(e.into())
                }
            }
        }
        Ingress::Stop { session_id, user } => {
            let Some(id) = session_id else {
                return Ok(Answer {
                    reason: Some("no session in this thread to stop".to_owned()),
                    ..answer("ignored")
                });
            };
            let stopped = mount.host.stop(&id, None).await?;
            tracing::info!(channel, session_id = %id, user, stopped, "a Slack stop word");
            Ok(Answer {
                session_id: Some(id.to_string()),
                reason: (!stopped).then(|| "no turn was running".to_owned()),
                ..answer("stopped")
            })
        }
        Ingress::Decision {
            session_id,
            call_id,
            approved,
            principal,
        } => {
            match mount
                .host
                .resolve_approval(&session_id, &call_id, approved, None, Some(&principal))
                .await
            {
                Ok(()) => Ok(Answer {
                    session_id: Some(session_id.to_string()),
                    ..answer(if approved { "approved" } else { "denied" })
                }),
                // A second click, or a card whose call ended: nothing to do.
                Err(HostError::ApprovalNotFound(_) | HostError::SessionNotFound(_)) => Ok(Answer {
                    session_id: Some(session_id.to_string()),
                    reason: Some("the call is no longer waiting for a decision".to_owned()),
                    ..answer("ignored")
                }),
                Err(e) => Err(e.into()),
            }
        }
        Ingress::Refused(reason) => Ok(Answer {
            reason: Some(reason),
            ..answer("refused")
        }),
    }
}
