//! The host services a tool call (or a handler) may use
//! ([`ToolServices`]): skills, artifact tagging, the local endpoint, MCP
//! connections, and sending into, reading and waiting for sessions and
//! calling tools, under the reach rule of [`crate::tool::services`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bdk_events::ids::new_id;
use bdk_events::view::{self, SessionState};
use bdk_events::{ArtifactTagged, Envelope, Event, SessionId};
use bdk_store::{ArtifactRecord, SessionRecord};
use chrono::Utc;
use futures::StreamExt;
use serde_json::Value;

use crate::endpoint::EndpointGrant;
use crate::mcp::McpHub;
use crate::tool::services::TurnView;
use crate::tool::{
    Effect, NewArtifact, SendMessage, SendOutcome, ServiceError, SessionTarget, SessionView,
    ToolCalled, ToolContext, ToolServices, Waited,
};

use super::keyed::KeySession;
use super::{CallOrigin, DirectCall, FollowUp, Host, HostError, StartSession};

/// The channel of sessions schedules start, which also keys the
/// conversations schedule handlers send into.
pub const SCHEDULE_CHANNEL: &str = "schedule";

#[derive(Clone)]
pub(super) struct Services {
    pub(super) host: Host,
    /// `None` for a direct call not bound to a session.
    pub(super) session_id: Option<SessionId>,
    pub(super) principal: Option<String>,
}

#[async_trait]
impl ToolServices for Services {
    fn skill(&self, name: &str) -> Option<String> {
        self.host.inner.loaded().skills.get(name).cloned()
    }

    fn mcp(&self) -> Option<Arc<dyn McpHub>> {
        self.host.inner.mcp.clone()
    }

    fn extensions(&self) -> Vec<Arc<dyn std::any::Any + Send + Sync>> {
        self.host
            .inner
            .extensions
            .iter()
            .map(|e| Arc::clone(e).into_any())
            .collect()
    }

    async fn tag_artifact(
        &self,
        _ctx: &ToolContext,
        artifact: NewArtifact,
    ) -> Result<String, String> {
        let Some(session_id) = &self.session_id else {
            return Err("artifacts need a call bound to a session".to_owned());
        };
        let NewArtifact {
            kind,
            name,
            path,
            content,
            content_type,
            metadata,
        } = artifact;
        let id = new_id("art");
        let record = ArtifactRecord {
            id: id.clone(),
            session_id: Some(session_id.clone()),
            principal: self.principal.clone(),
            kind: kind.clone(),
            name,
            content_type,
            size: content.len() as u64,
            metadata: metadata.clone(),
            created_at: Utc::now(),
        };
        self.host
            .inner
            .store
            .artifact_put(record, content)
            .await
            .map_err(|e| e.to_string())?;
        let turn = self
            .host
            .inner
            .slots
            .with(session_id, |slot| {
                slot.state().running.as_ref().map(|r| r.turn_id.clone())
            })
            .flatten();
        self.host
            .record(
                session_id,
                turn.as_ref(),
                vec![
                    ArtifactTagged {
                        artifact_id: id.clone(),
                        kind,
                        path,
                        metadata,
                    }
                    .into(),
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(id)
    }

    async fn endpoint(&self, ctx: &ToolContext) -> Option<EndpointGrant> {
        match self
            .host
            .inner
            .endpoint
            .grant(ctx, Arc::new(self.clone()))
            .await
        {
            Ok(grant) => Some(grant),
            Err(e) => {
                tracing::warn!(call_id = %ctx.call_id, error = %e, "host endpoint unavailable; the tool runs without it");
                None
            }
        }
    }

    async fn send(
        &self,
        ctx: &ToolContext,
        send: SendMessage,
    ) -> Result<SendOutcome, ServiceError> {
        self.send_message(ctx, send).await
    }

    async fn session_get(
        &self,
        ctx: &ToolContext,
        target: SessionTarget,
    ) -> Result<SessionView, ServiceError> {
        let record = self.resolve(ctx, target, "session.get").await?;
        self.view(&record, "session.get").await
    }

    async fn session_wait(
        &self,
        ctx: &ToolContext,
        target: SessionTarget,
        timeout: Duration,
    ) -> Result<Waited, ServiceError> {
        const OP: &str = "session.wait";
        let record = self.resolve(ctx, target, OP).await?;
        not_own(ctx, &record.id, OP)?;
        let store = &self.host.inner.store;
        let events = store
            .read(&record.id, 0)
            .await
            .map_err(|e| service_error(OP, e.into()))?;
        if view::session_state(&events) != SessionState::Running {
            return Ok(Waited {
                session: session_view(&record, &events),
                timed_out: false,
            });
        }
        let from = events.last().map_or(0, |e| e.index + 1);
        let mut stream = store
            .subscribe(&record.id, from)
            .await
            .map_err(|e| service_error(OP, e.into()))?;
        let rested = tokio::time::timeout(timeout, async {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(env) if rests(&env.event) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(service_error(OP, e.into())),
                }
            }
            Ok(())
        })
        .await;
        let timed_out = match rested {
            Ok(result) => {
                result?;
                false
            }
            Err(_) => true,
        };
        Ok(Waited {
            session: self.view(&record, OP).await?,
            timed_out,
        })
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        tool: &str,
        input: Value,
        session: Option<SessionId>,
    ) -> Result<ToolCalled, ServiceError> {
        const OP: &str = "tools.call";
        if let Some(id) = &session {
            not_own(ctx, id, OP)?;
            self.resolve(ctx, SessionTarget::Id(id.clone()), OP).await?;
        }
        if ctx.dry_run
            && self
                .host
                .tools()
                .iter()
                .any(|t| t.name == tool && t.effect == Effect::Write)
        {
            return Err(ServiceError::new(
                "dry_run",
                format!("`{tool}` changes state and this call runs in a dry-run session"),
            ));
        }
        let outcome = self
            .host
            .call_tool(DirectCall {
                name: tool.to_owned(),
                input,
                session_id: session,
                principal: self.principal.clone(),
                origin: CallOrigin::Agent,
                ..DirectCall::default()
            })
            .await
            .map_err(|e| service_error(OP, e))?;
        Ok(ToolCalled {
            tool_name: outcome.tool_name,
            call_id: outcome.call_id,
            is_error: outcome.is_error,
            result: outcome.result,
            duration_ms: outcome.duration_ms,
            session_id: outcome.session_id,
        })
    }
}

/// The caller's session, refused as a target: a call that sends into (or
/// waits for, or records a call in) the session running it would wait on
/// itself.
fn not_own(ctx: &ToolContext, id: &SessionId, op: &str) -> Result<(), ServiceError> {
    if ctx.session.id.as_ref() == Some(id) {
        return Err(ServiceError::invalid(format!(
            "`{op}` cannot target the session this call runs in ({id}); answer through the call's result instead"
        )));
    }
    Ok(())
}

/// A host error as the caller sees it; storage failures stay in the log.
fn service_error(op: &str, e: HostError) -> ServiceError {
    match e.code() {
        "internal" => {
            tracing::warn!(op, error = %e, "a host service failed");
            ServiceError::new("internal", "the host failed; its log has the details")
        }
        code => ServiceError::new(code, e.to_string()),
    }
}

impl Services {
    /// Whether the caller reaches `record`: it owns it, or nobody does.
    fn reach(&self, record: &SessionRecord) -> Result<(), ServiceError> {
        match (&record.principal, &self.principal) {
            (None, _) => Ok(()),
            (Some(owner), Some(caller)) if owner == caller => Ok(()),
            _ => Err(ServiceError::new(
                "forbidden",
                format!("session {} belongs to another principal", record.id),
            )),
        }
    }

    /// The channel a key lives on: the one named, else the caller's own. It
    /// must be a channel with keyed conversations: one of the agent's
    /// channels, or `schedule`.
    fn key_channel(
        &self,
        ctx: &ToolContext,
        channel: Option<String>,
    ) -> Result<String, ServiceError> {
        let named = channel.is_some();
        let channel = channel.unwrap_or_else(|| ctx.session.channel.clone());
        let project = self.host.project();
        let known =
            channel == SCHEDULE_CHANNEL || project.channels.iter().any(|c| c.name == channel);
        if known {
            return Ok(channel);
        }
        let channels: Vec<&str> = std::iter::once(SCHEDULE_CHANNEL)
            .chain(project.channels.iter().map(|c| c.name.as_str()))
            .collect();
        Err(ServiceError::invalid(if named {
            format!(
                "channel `{channel}` has no keyed conversations; name one of: {}",
                channels.join(", ")
            )
        } else {
            format!(
                "this call's channel `{channel}` has no keyed conversations; give `channel` (one of: {})",
                channels.join(", ")
            )
        }))
    }

    /// The session `target` names, if the caller reaches it.
    async fn resolve(
        &self,
        ctx: &ToolContext,
        target: SessionTarget,
        op: &str,
    ) -> Result<SessionRecord, ServiceError> {
        let store = &self.host.inner.store;
        let found = match target {
            SessionTarget::Id(id) => store.get_session(&id).await,
            SessionTarget::Key { channel, key } => {
                let channel = self.key_channel(ctx, channel)?;
                store.find_by_token(&format!("{channel}:{key}")).await
            }
        };
        let record = found
            .map_err(|e| service_error(op, e.into()))?
            .ok_or_else(|| ServiceError::new("session_not_found", "no such session"))?;
        self.reach(&record)?;
        Ok(record)
    }

    /// What a caller sees of a session.
    async fn view(&self, record: &SessionRecord, op: &str) -> Result<SessionView, ServiceError> {
        let events = self
            .host
            .inner
            .store
            .read(&record.id, 0)
            .await
            .map_err(|e| service_error(op, e.into()))?;
        Ok(session_view(record, &events))
    }
}

/// `record` with the facts its `events` give.
fn session_view(record: &SessionRecord, events: &[Envelope]) -> SessionView {
    let mut turns = 0;
    let mut last_turn = None;
    let mut last_reply = None;
    for env in events {
        if let Some(end) = view::turn_end(&env.event) {
            turns += 1;
            if end.ok {
                last_reply = Some(end.text.to_owned());
            }
            last_turn = Some(TurnView {
                turn_id: env.turn_id.clone(),
                ok: end.ok,
                status: end.status_str().to_owned(),
                text: end.text.to_owned(),
            });
        }
    }
    SessionView {
        id: record.id.clone(),
        status: view::session_state(events).as_str().to_owned(),
        mode: record.mode,
        channel: record.channel.clone(),
        principal: record.principal.clone(),
        continuation_token: record.continuation_token.clone(),
        turns,
        last_turn,
        last_reply,
    }
}

/// True for the events after which a session rests.
fn rests(event: &Event) -> bool {
    matches!(
        event,
        Event::SessionWaiting(_) | Event::SessionCompleted(_) | Event::SessionFailed(_)
    )
}

impl Services {
    pub(super) async fn send_message(
        &self,
        ctx: &ToolContext,
        send: SendMessage,
    ) -> Result<SendOutcome, ServiceError> {
        const OP: &str = "send";
        if ctx.dry_run {
            return Err(ServiceError::new(
                "dry_run",
                "`send` changes state and this call runs in a dry-run session",
            ));
        }
        let SendMessage {
            target,
            message,
            admission,
            delivery_id,
            mode,
        } = send;
        let record = match target {
            SessionTarget::Id(id) => {
                not_own(ctx, &id, OP)?;
                self.resolve(ctx, SessionTarget::Id(id), OP).await?
            }
            SessionTarget::Key { channel, key } => {
                let channel = self.key_channel(ctx, channel)?;
                let start = StartSession {
                    message: Some(message.clone()),
                    mode,
                    principal: self.principal.clone(),
                    delivery_id: delivery_id.clone(),
                    ..StartSession::default()
                };
                match self
                    .host
                    .session_for_key(&channel, &key, start)
                    .await
                    .map_err(|e| service_error(OP, e))?
                {
                    KeySession::Started(started) => {
                        return Ok(SendOutcome {
                            session_id: started.session_id,
                            continuation_token: started.continuation_token,
                            delivery_id: started.delivery_id.unwrap_or_default(),
                            turn_id: started.turn_id,
                            created: true,
                        });
                    }
                    KeySession::Found(record) => {
                        not_own(ctx, &record.id, OP)?;
                        self.reach(&record)?;
                        record
                    }
                }
            }
        };
        let sent = self
            .host
            .send(
                &record.id,
                FollowUp {
                    message,
                    admission,
                    delivery_id,
                    // Reach is settled above, by this module's rule.
                    principal: record.principal.clone(),
                    ..FollowUp::default()
                },
            )
            .await
            .map_err(|e| service_error(OP, e))?;
        Ok(SendOutcome {
            session_id: sent.session_id,
            continuation_token: sent.continuation_token,
            delivery_id: sent.delivery_id,
            turn_id: sent.turn_id,
            created: false,
        })
    }
}
