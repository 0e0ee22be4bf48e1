//! Direct tool calls: a server tool called without a model turn, bound to
//! a session (recorded in its stream) or not.

use std::sync::Arc;
use std::time::Instant;

use bdk_events::ids::{new_call_id, new_direct_call_id};
use bdk_events::{
    ActionApprovalRequested, ActionApprovalResolved, ActionRequest, ActionResult, ActionsCompleted,
    ActionsRequested, Event, SessionMode, TurnId,
};
use serde_json::json;
use tracing::Instrument as _;

use crate::agent::{self, ToolEntry};
use crate::tool::{Effect, Execution, SessionInfo, ToolContext, ToolOutput, ToolSpec};
use crate::workspace;

use super::Host;
use super::error::{HostError, HostResult, check_owner};
use super::services::Services;
use super::slots::wait_done;
use super::types::{Approval, DirectCall, DirectOutcome};

/// Who approved a direct call of a `needs_approval` tool: its caller, when
/// it approved by calling (`local` for a caller without a principal).
pub(super) fn approver(spec: &ToolSpec, call: &DirectCall) -> Option<String> {
    (spec.needs_approval && call.approve)
        .then(|| call.principal.clone().unwrap_or_else(|| "local".to_owned()))
}

/// The id a model call gets when a provider supplies none.
pub fn fresh_call_id() -> String {
    new_call_id()
}

impl Host {
    /// Calls a server tool without a model turn.
    pub async fn call_tool(&self, call: DirectCall) -> HostResult<DirectOutcome> {
        let tools = self.current_tools();
        let Some(entry) = tools.get(&call.name).cloned() else {
            if let Some(spec) = self.inner.loaded().agent_tools.get(&call.name)
                && spec.execution == Execution::Agent
            {
                return Err(HostError::ToolNotCallable(call.name));
            }
            return Err(HostError::UnknownTool {
                name: call.name,
                available: self
                    .direct_tools(call.origin)
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
            });
        };
        let approval = if call.approve {
            Approval::Given
        } else {
            Approval::Missing
        };
        if let Some(refusal) =
            self.direct_refusal(&call.name, entry.tool.spec(), call.origin, approval)
        {
            return Err(refusal);
        }
        if let Some(validator) = &entry.validator
            && let Err(errors) = validator.validate(&call.input)
        {
            return Err(HostError::InvalidToolInput {
                name: call.name,
                errors,
            });
        }
        // The span starts once the tool is known, so a caller's made-up
        // names never become span or metric attributes.
        let span = tracing::info_span!(
            target: agent::TRACE_TARGET,
            "bdk.tool_call",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = tracing::field::Empty,
            gen_ai.tool.type = "function",
            gen_ai.conversation.id = call.session_id.as_ref().map(tracing::field::display),
            bdk.tool.direct = true,
            bdk.tool.status = tracing::field::Empty,
            bdk.tool.refusal = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let outcome = self.call_known(entry, call).instrument(span.clone()).await;
        match &outcome {
            Ok(done) => {
                span.record("gen_ai.tool.call.id", done.call_id.as_str());
                if done.is_error {
                    span.record("bdk.tool.status", "error");
                    span.record("error.type", "tool_error");
                    span.record("otel.status_code", "ERROR");
                } else {
                    span.record("bdk.tool.status", "ok");
                }
            }
            // Refused before the tool ran (busy, forbidden, no such
            // session): the caller's problem, not a tool error.
            Err(e) => {
                span.record("bdk.tool.status", "refused");
                span.record("bdk.tool.refusal", e.code());
            }
        }
        outcome
    }

    /// [`Host::call_tool`] once the tool is resolved and its input valid.
    pub(super) async fn call_known(
        &self,
        entry: ToolEntry,
        call: DirectCall,
    ) -> HostResult<DirectOutcome> {
        let spec = entry.tool.spec().clone();
        let call_id = new_direct_call_id(&call.name);
        let mut record = None;
        if let Some(id) = &call.session_id {
            record = Some(self.session(id, call.principal.as_deref()).await?);
        } else if let Some(token) = &call.continuation_token
            && let Some(r) = self.inner.store.find_by_token(token).await?
        {
            check_owner(&r, call.principal.as_deref())?;
            record = Some(r);
        }
        let Some(record) = record else {
            return self.call_unbound(&entry, call, call_id).await;
        };
        let id = record.id.clone();
        let slot = self.slot(&id);
        let turn_id = TurnId::generate();
        // Writes take the admission lock, so no turn starts under them; reads
        // run alongside whatever is running.
        let _admission = match spec.effect {
            Effect::Write => {
                let guard = slot.admission.lock().await;
                // A turn whose end is already being recorded settles in a
                // moment: wait for it rather than refuse a caller who has
                // just seen turn.completed or session.waiting.
                loop {
                    let settling = {
                        let state = slot.state();
                        match &state.running {
                            None => None,
                            Some(r) if state.ending => Some(r.done.clone()),
                            Some(_) => return Err(HostError::SessionBusy(id.to_string())),
                        }
                    };
                    match settling {
                        Some(done) => wait_done(done).await,
                        None => break,
                    }
                }
                // With replicas, the call also holds the session's lease, so
                // no other replica starts a turn under it.
                let lease = self.lease_call(&id, &turn_id).await?;
                Some((guard, lease))
            }
            Effect::Read => None,
        };
        let workspace = self.workspace(&id);
        let mut scratch = None;
        if let Err(e) = workspace::materialize(&workspace, &self.project()).await {
            match spec.effect {
                Effect::Write => return Err(HostError::WorkspaceUnavailable(e.to_string())),
                Effect::Read => scratch = Some(self.scratch_workspace(&call_id).await?),
            }
        }
        let approved_by = approver(&spec, &call);
        let mut requested: Vec<Event> = vec![
            ActionsRequested {
                step: 0,
                actions: vec![ActionRequest {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                }],
            }
            .into(),
        ];
        // The caller approved by calling: the record says who, the same
        // way a parked call's decision reads.
        if let Some(by) = &approved_by {
            requested.push(
                ActionApprovalRequested {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                }
                .into(),
            );
            requested.push(
                ActionApprovalResolved {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    approved: true,
                    by: Some(by.clone()),
                    reason: Some("approved by the direct caller".to_owned()),
                }
                .into(),
            );
        }
        self.record(&id, Some(&turn_id), requested).await?;
        let ctx = ToolContext {
            call_id: call_id.clone(),
            session: SessionInfo {
                id: Some(id.clone()),
                channel: record.channel.clone(),
                mode: record.mode,
                principal: record.principal.clone(),
            },
            workspace_dir: scratch
                .as_ref()
                .map_or_else(|| workspace.path(), |s| s.path())
                .to_path_buf(),
            trees: self.inner.trees.clone(),
            state_root: self.inner.store.state_root(),
            now: record.as_of.unwrap_or_else(|| self.clock().now()),
            as_of_pinned: record.as_of.is_some(),
            dry_run: record.dry_run,
            approved_by: approved_by.clone(),
            cancel: self.inner.shutdown.child_token(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: Some(id.clone()),
                principal: record.principal.clone(),
            })),
            reporter: call.reporter.clone(),
        };
        let started = Instant::now();
        let (out, stubbed) = if record.dry_run && spec.effect == Effect::Write {
            (
                ToolOutput::ok(
                    json!({"dryRun": true, "message": format!("`{}` changes state, so this dry run did not execute it", call.name)}),
                ),
                true,
            )
        } else {
            (
                agent::call_with_timeout(
                    &entry.tool,
                    call.input.clone(),
                    ctx,
                    spec.timeout(self.inner.loaded().root.tool_timeout),
                )
                .await,
                false,
            )
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let scratch_workspace = scratch.is_some();
        if let Some(dir) = scratch {
            remove_scratch(&dir, &call_id).await;
        }
        self.record(
            &id,
            Some(&turn_id),
            vec![
                ActionResult {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    is_error: out.is_error,
                    output: out.content.clone(),
                    content: out.blocks.clone(),
                    duration_ms,
                    stubbed,
                }
                .into(),
                ActionsCompleted {
                    step: 0,
                    call_ids: vec![call_id.clone()],
                }
                .into(),
            ],
        )
        .await?;
        Ok(DirectOutcome {
            tool_name: call.name,
            call_id,
            is_error: out.is_error,
            result: out.content,
            content: out.blocks,
            duration_ms,
            scratch_workspace,
            session_id: Some(id),
            approved_by,
        })
    }

    /// A direct call's own scratch workspace, `tool-calls/<callId>/`:
    /// created (and given to the trees' owner) through the call's tree.
    async fn scratch_workspace(&self, call_id: &str) -> HostResult<workspace::TreeRoot> {
        let dir = self
            .inner
            .trees
            .root(self.inner.store.tool_call_dir(call_id)?);
        dir.create(|_| Ok(()))
            .await
            .map_err(|e| HostError::WorkspaceUnavailable(e.to_string()))?;
        Ok(dir)
    }

    pub(super) async fn call_unbound(
        &self,
        entry: &ToolEntry,
        call: DirectCall,
        call_id: String,
    ) -> HostResult<DirectOutcome> {
        let dir = self.scratch_workspace(&call_id).await?;
        let (channel, principal) = match call
            .continuation_token
            .as_deref()
            .and_then(|t| t.split_once(':'))
        {
            Some((channel, key)) => (
                channel.to_owned(),
                call.principal.clone().or_else(|| Some(key.to_owned())),
            ),
            None => ("direct".to_owned(), call.principal.clone()),
        };
        let approved_by = approver(entry.tool.spec(), &call);
        if let Some(by) = &approved_by {
            // No session to record it in: the log keeps the approval.
            tracing::info!(tool = %call.name, call_id = %call_id, approved_by = %by, "direct call of an approval tool approved by its caller");
        }
        let ctx = ToolContext {
            call_id: call_id.clone(),
            session: SessionInfo {
                id: None,
                channel,
                mode: SessionMode::Chat,
                principal: principal.clone(),
            },
            workspace_dir: dir.path().to_path_buf(),
            trees: self.inner.trees.clone(),
            state_root: self.inner.store.state_root(),
            now: self.clock().now(),
            as_of_pinned: false,
            dry_run: false,
            approved_by: approved_by.clone(),
            cancel: self.inner.shutdown.child_token(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: None,
                principal,
            })),
            reporter: call.reporter.clone(),
        };
        let timeout = entry
            .tool
            .spec()
            .timeout(self.inner.loaded().root.tool_timeout);
        let started = Instant::now();
        let out = agent::call_with_timeout(&entry.tool, call.input, ctx, timeout).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        remove_scratch(&dir, &call_id).await;
        Ok(DirectOutcome {
            tool_name: call.name,
            call_id,
            is_error: out.is_error,
            result: out.content,
            content: out.blocks,
            duration_ms,
            scratch_workspace: false,
            session_id: None,
            approved_by,
        })
    }
}

/// Removes a direct call's scratch workspace once the call is over.
async fn remove_scratch(dir: &workspace::TreeRoot, call_id: &str) {
    if let Err(e) = dir.remove().await {
        tracing::warn!(call_id = %call_id, error = %e, "failed to remove a scratch workspace");
    }
}
