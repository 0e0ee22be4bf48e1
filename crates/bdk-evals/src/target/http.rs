//! A running `bdk serve`, reached over its public session API through
//! bdk-api's client.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bdk_api::Client;
use bdk_api::sessions::{Decision, FollowUpRequest, StartSessionRequest};
use bdk_events::{Envelope, SessionId, TurnId};
use futures::StreamExt;

use super::{EVAL_PURPOSE, Opened, Settled, Target, TargetError, host_err, settles};

/// A running `bdk serve`, reached over its public session API.
#[derive(Clone)]
pub struct HttpTarget {
    client: Client,
}

impl HttpTarget {
    /// `base` is the agent's base URL (`http://127.0.0.1:3000/weather`, or
    /// the server root in single mode); `token` a bearer token, if the
    /// server wants one.
    pub fn new(base: &str, token: Option<String>) -> Result<HttpTarget, TargetError> {
        let http = bdk_models::net::http_client().map_err(host_err)?;
        let client = Client::new(base, http)
            .map_err(|_| {
                TargetError(format!(
                    "--url must be an http:// or https:// URL, got {base}"
                ))
            })?
            .bearer(token);
        Ok(HttpTarget { client })
    }

    /// Follows the session's stream from `from` until `turn` ends or (with
    /// `parks`) parks a call for approval.
    async fn follow(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
        parks: bool,
    ) -> Result<Settled, TargetError> {
        let mut events = self.client.stream(session, from);
        while let Some(env) = events.next().await {
            let env = env.map_err(target_err)?;
            match settles(env.turn_id.as_ref().map(TurnId::as_str), env.kind(), turn) {
                Some(Settled::Ended) => return Ok(Settled::Ended),
                Some(Settled::Parked) if parks => return Ok(Settled::Parked),
                _ => {}
            }
        }
        Err(TargetError(
            "the event stream ended before the turn finished".into(),
        ))
    }

    fn opened(
        session_id: SessionId,
        token: String,
        turn_id: Option<TurnId>,
    ) -> Result<Opened, TargetError> {
        let turn_id = turn_id.ok_or_else(|| {
            TargetError("the server's answer has no turnId: the message started no turn".into())
        })?;
        Ok(Opened {
            session_id,
            token,
            turn_id,
        })
    }
}

fn target_err(e: bdk_api::ClientError) -> TargetError {
    TargetError(e.to_string())
}

#[async_trait]
impl Target for HttpTarget {
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let body = StartSessionRequest {
            title: Some(title.to_owned()),
            purpose: Some(EVAL_PURPOSE.to_owned()),
            workspace_files: files.clone(),
            ..StartSessionRequest::message(message)
        };
        let a = self.client.start_session(&body).await.map_err(target_err)?;
        Self::opened(a.session_id, a.continuation_token, a.turn_id)
    }

    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let body = FollowUpRequest {
            workspace_files: files.clone(),
            ..FollowUpRequest::message(message, Some(session.token.clone()))
        };
        let a = self
            .client
            .follow_up(&session.session_id, &body)
            .await
            .map_err(target_err)?;
        Self::opened(a.session_id, a.continuation_token, a.turn_id)
    }

    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError> {
        self.follow(session, turn, 0, false).await.map(|_| ())
    }

    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        self.follow(session, turn, from, true).await
    }

    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        let decision = if approved {
            Decision::Approve
        } else {
            Decision::Deny
        };
        self.client
            .decide(session, call_id, decision, reason.map(str::to_owned))
            .await
            .map(|_| ())
            .map_err(target_err)
    }

    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError> {
        self.client.events(session).await.map_err(target_err)
    }

    async fn stop(&self, session: &SessionId) {
        if let Err(e) = self.client.stop(session).await {
            tracing::debug!(session_id = %session, error = %e, "failed to stop an eval turn");
        }
    }
}
