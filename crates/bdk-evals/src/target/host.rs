//! The agent in this process: eval turns through a [`Host`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use bdk_core::host::{FollowUp, Host, StartSession};
use bdk_events::{Envelope, SessionId, SessionMode, TurnId};
use futures::StreamExt;

use super::{EVAL_PURPOSE, Opened, Settled, Target, TargetError, host_err, settles};

/// The agent in this process.
#[derive(Clone)]
pub struct HostTarget {
    host: Host,
    principal: Option<String>,
}

impl HostTarget {
    /// Runs evals against `host`.
    pub fn new(host: Host) -> HostTarget {
        HostTarget {
            host,
            principal: None,
        }
    }

    /// Opens eval sessions as `principal` (so that caller sees them in its
    /// session list).
    pub fn with_principal(mut self, principal: impl Into<String>) -> HostTarget {
        self.principal = Some(principal.into());
        self
    }

    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }
}

#[async_trait]
impl Target for HostTarget {
    async fn start(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        self.start_pinned(title, message, files, &BTreeMap::new())
            .await
    }

    async fn start_pinned(
        &self,
        title: &str,
        message: &str,
        files: &BTreeMap<String, String>,
        arms: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let started = self
            .host
            .start_session(StartSession {
                arms: arms.clone(),
                message: Some(message.to_owned()),
                mode: SessionMode::Chat,
                channel: "eval".into(),
                title: Some(title.to_owned()),
                purpose: Some(EVAL_PURPOSE.into()),
                workspace_files: files.clone(),
                principal: self.principal.clone(),
                ..StartSession::default()
            })
            .await
            .map_err(host_err)?;
        let turn_id = started
            .turn_id
            .ok_or_else(|| TargetError("the session started without a turn".into()))?;
        Ok(Opened {
            session_id: started.session_id,
            token: started.continuation_token,
            turn_id,
        })
    }

    async fn follow_up(
        &self,
        session: &Opened,
        message: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<Opened, TargetError> {
        let sent = self
            .host
            .send(
                &session.session_id,
                FollowUp {
                    message: message.to_owned(),
                    continuation_token: Some(session.token.clone()),
                    workspace_files: files.clone(),
                    principal: self.principal.clone(),
                    ..FollowUp::default()
                },
            )
            .await
            .map_err(host_err)?;
        let turn_id = sent.turn_id.ok_or_else(|| {
            TargetError("the follow-up was queued instead of starting a turn".into())
        })?;
        Ok(Opened {
            session_id: sent.session_id,
            token: sent.continuation_token,
            turn_id,
        })
    }

    async fn wait_turn(&self, session: &SessionId, turn: &TurnId) -> Result<(), TargetError> {
        self.host.wait_turn(session, turn).await.map_err(host_err)?;
        self.host.wait_idle(session).await;
        Ok(())
    }

    async fn events(&self, session: &SessionId) -> Result<Vec<Envelope>, TargetError> {
        self.host.store().read(session, 0).await.map_err(host_err)
    }

    async fn stop(&self, session: &SessionId) {
        if let Err(e) = self.host.stop(session, None).await {
            tracing::debug!(session_id = %session, error = %e, "failed to stop an eval turn");
        }
    }

    async fn wait_settled(
        &self,
        session: &SessionId,
        turn: &TurnId,
        from: u64,
    ) -> Result<Settled, TargetError> {
        let mut events = self
            .host
            .subscribe(session, from, self.principal.as_deref())
            .await
            .map_err(host_err)?;
        while let Some(env) = events.next().await {
            let env = env.map_err(host_err)?;
            match settles(env.turn_id.as_ref().map(TurnId::as_str), env.kind(), turn) {
                Some(Settled::Ended) => {
                    drop(events);
                    self.wait_turn(session, turn).await?;
                    return Ok(Settled::Ended);
                }
                // The host parks a call before it records the request, so
                // the call can be resolved from here on.
                Some(Settled::Parked) => return Ok(Settled::Parked),
                None => {}
            }
        }
        Err(TargetError(
            "the session's events ended before the turn finished".into(),
        ))
    }

    async fn resolve_approval(
        &self,
        session: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<(), TargetError> {
        self.host
            .resolve_approval(
                session,
                call_id,
                approved,
                reason.map(str::to_owned),
                self.principal.as_deref(),
            )
            .await
            .map_err(host_err)
    }
}
