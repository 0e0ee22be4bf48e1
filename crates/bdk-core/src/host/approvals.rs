//! Approvals: calls parked until a person approves or denies them, and the
//! gate at which the agent loop parks them.

use bdk_events::SessionId;
use chrono::Utc;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::agent::{ApprovalGate, Decision};

use super::error::{HostError, HostResult};
use super::types::ApprovalView;
use super::{Host, PendingApproval};

pub(super) struct Gate {
    pub(super) host: Host,
    pub(super) session_id: SessionId,
}

impl ApprovalGate for Gate {
    fn park(&self, call_id: &str, name: &str, input: &Value) -> oneshot::Receiver<Decision> {
        let (tx, rx) = oneshot::channel();
        let mut approvals = self
            .host
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        approvals.insert(
            call_id.to_owned(),
            PendingApproval {
                session_id: self.session_id.clone(),
                name: name.to_owned(),
                input: input.clone(),
                requested_at: Utc::now(),
                tx,
            },
        );
        rx
    }

    fn unpark(&self, call_id: &str) {
        let mut approvals = self
            .host
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        approvals.remove(call_id);
    }
}

impl Host {
    /// Calls parked for approval in a session.
    pub async fn approvals(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<Vec<ApprovalView>> {
        self.session(id, principal).await?;
        let approvals = self
            .inner
            .approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ApprovalView> = approvals
            .iter()
            .filter(|(_, p)| &p.session_id == id)
            .map(|(call_id, p)| ApprovalView {
                call_id: call_id.clone(),
                name: p.name.clone(),
                input: p.input.clone(),
                requested_at: p.requested_at,
            })
            .collect();
        out.sort_by(|a, b| {
            a.requested_at
                .cmp(&b.requested_at)
                .then(a.call_id.cmp(&b.call_id))
        });
        Ok(out)
    }

    /// Approves or denies a parked call.
    pub async fn resolve_approval(
        &self,
        id: &SessionId,
        call_id: &str,
        approved: bool,
        reason: Option<String>,
        principal: Option<&str>,
    ) -> HostResult<()> {
        self.session(id, principal).await?;
        let pending = {
            let mut approvals = self
                .inner
                .approvals
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match approvals.get(call_id) {
                Some(p) if &p.session_id == id => approvals.remove(call_id),
                _ => None,
            }
        };
        let Some(pending) = pending else {
            return Err(HostError::ApprovalNotFound(call_id.to_owned()));
        };
        pending
            .tx
            .send(Decision {
                approved,
                by: principal
                    .map(str::to_owned)
                    .or_else(|| Some("local".to_owned())),
                reason,
            })
            .map_err(|_| HostError::ApprovalNotFound(call_id.to_owned()))
    }
}
