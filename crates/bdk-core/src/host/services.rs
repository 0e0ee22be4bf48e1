//! The host services a tool call may use ([`ToolServices`]): skills,
//! artifact tagging, the local endpoint and MCP connections.

use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::ids::new_id;
use bdk_events::{ArtifactTagged, SessionId};
use bdk_store::ArtifactRecord;
use chrono::Utc;

use crate::endpoint::EndpointGrant;
use crate::mcp::McpHub;
use crate::tool::{NewArtifact, ToolContext, ToolServices};

use super::Host;

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
        self.host.inner.skills.get(name).cloned()
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
}
