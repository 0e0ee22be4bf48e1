//! A/B experiments on the host: reading a session's arms back from its
//! log, applying an arm's overrides (prepared in `arms.rs`, which also
//! draws a new session's arms) to the root agent of each turn, and folding
//! the sessions into the report of `GET /v1/abs`.
//!
//! The recorded `ab.assigned` is the truth for an existing session: the draw
//! runs only when a session starts, so editing weights, restarting or
//! serving from another replica never moves a session to another arm. The
//! overrides themselves (overlay text, model, effort) come from the
//! experiment as this host loaded it; an arm the project no longer declares
//! runs the agent as it is.

use std::sync::Arc;

use bdk_events::view::assignments;
use bdk_events::{AbAssigned, SessionId};
use futures::StreamExt;

use crate::ab::{AbFold, AbReport};
use crate::agent::AgentSpec;

use super::Host;
use super::error::{HostResult, session_error};
use super::loaded::Loaded;
use super::slots::Slot;

impl Host {
    /// The arms `id` was enrolled in, cached in its slot, else read from
    /// its log. Empty, without a read, when the host declares no arms.
    pub(super) async fn session_arms(
        &self,
        slot: &Slot,
        id: &SessionId,
    ) -> HostResult<Arc<Vec<AbAssigned>>> {
        if self.inner.loaded().arms.is_empty() {
            return Ok(Arc::default());
        }
        if let Some(arms) = slot.state().arms.clone() {
            return Ok(arms);
        }
        let events = self
            .inner
            .store
            .read(id, 0)
            .await
            .map_err(session_error(id))?;
        let arms: Arc<Vec<AbAssigned>> =
            Arc::new(assignments(&events).into_iter().cloned().collect());
        slot.state().arms = Some(Arc::clone(&arms));
        Ok(arms)
    }

    /// `spec` (the root agent) with the overrides of `arms` applied, in
    /// experiment order: overlays appended to the instructions in turn, the
    /// last model and effort set winning.
    pub(super) fn with_arms(
        loaded: &Loaded,
        mut spec: AgentSpec,
        arms: &[AbAssigned],
    ) -> AgentSpec {
        let mut overlays = Vec::new();
        for a in arms {
            let Some(o) = loaded.arms.get(&(a.experiment.clone(), a.arm.clone())) else {
                tracing::debug!(experiment = %a.experiment, arm = %a.arm, "the session's arm is no longer declared; the agent runs as it is");
                continue;
            };
            overlays.extend(o.overlay.as_deref());
            if let Some((model, name)) = &o.model {
                spec.model = Arc::clone(model);
                spec.model_name = name.clone();
            }
            if let Some(effort) = &o.effort {
                spec.effort = Some(effort.clone());
            }
        }
        if !overlays.is_empty() {
            // The overlay joins the instructions, before the skill and
            // script catalogs that follow them in the system prompt.
            let split = loaded.instructions_len.min(spec.system.len());
            let (head, tail) = spec.system.split_at(split);
            let mut system = head.to_owned();
            for o in overlays {
                system.push_str("\n\n");
                system.push_str(o);
            }
            system.push_str(tail);
            spec.system = system;
        }
        spec
    }

    /// The A/B report over the sessions `principal` may see (all of them
    /// for `None`), with at most `limit` assignments listed per experiment.
    /// Reads every visible session's log; sessions are read a few at a
    /// time.
    pub async fn abs(&self, principal: Option<&str>, limit: usize) -> HostResult<AbReport> {
        let records = self.list_sessions(principal).await?;
        let store = Arc::clone(&self.inner.store);
        let mut reads = futures::stream::iter(records.into_iter().map(|r| {
            let store = Arc::clone(&store);
            async move {
                let events = store.read(&r.id, 0).await;
                (r, events)
            }
        }))
        .buffer_unordered(8);
        let loaded = self.inner.loaded();
        let mut fold = AbFold::new(&loaded.project, &loaded.prices, limit);
        while let Some((record, events)) = reads.next().await {
            match events {
                Ok(events) => fold.add(&record.id, record.created_at, &events),
                // Deleted between the listing and the read.
                Err(bdk_store::StoreError::SessionNotFound(_)) => {}
                // One damaged log does not hide every other session's
                // figures; it is left out and logged.
                Err(bdk_store::StoreError::Corrupt { path, message }) => {
                    tracing::warn!(session_id = %record.id, path = %path, error = %message, "a damaged session is left out of the A/B report");
                }
                Err(e) => return Err(session_error(&record.id)(e)),
            }
        }
        Ok(fold.finish())
    }
}
