//! What a host knows: its parts (project, store, clock, containment, MCP),
//! the tool listings each caller sees, and reads of sessions and their
//! events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bdk_events::{Envelope, Event, SessionId, TurnId};
use bdk_store::coord::{Control, ControlKind, Coordination};
use bdk_store::{EventStream, NewEvent, SessionRecord, Store};

use crate::agent::{AgentSpec, ToolEntry};
use crate::clock::Clock;
use crate::containment::Containment;
use crate::hooks::Undelivered;
use crate::mcp::{ConnectionError, McpHub};
use crate::project::Project;
use crate::tool::{ToolSource, ToolSpec};
use bdk_models::prices::PriceTable;
use bdk_models::replay::Recording;

use super::build::merged_tools;
use super::error::{HostError, HostResult, check_owner, session_error};
use super::loaded::Loaded;
use super::slots::{MemoryStats, REASON_PREEMPT, REASON_STOP, SlotRef};
use super::types::{Approval, CallOrigin};
use super::{Host, WeakHost};

impl Host {
    pub(crate) fn downgrade(&self) -> WeakHost {
        WeakHost(Arc::downgrade(&self.inner))
    }

    /// The host's clock: "now" for tools and extensions' timers.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.inner.clock)
    }

    /// The coordination shared with other replicas, when there are any.
    pub(crate) fn coordination(&self) -> Option<&Arc<dyn Coordination>> {
        self.inner.coordination.as_ref()
    }

    /// The bounded wait for a turn running on another replica.
    pub(crate) fn coordination_wait(&self) -> Duration {
        self.inner.coordination_wait
    }

    /// Applies a control from another replica to the local turn it names;
    /// a control for a turn that no longer runs here is ignored.
    pub(crate) fn apply_control(&self, control: &Control) {
        self.inner.slots.with(&control.session_id, |slot| {
            let mut state = slot.state();
            let Some(running) = state.running.as_ref() else {
                return;
            };
            if running.turn_id != control.turn_id {
                return;
            }
            let reason = match control.kind {
                ControlKind::Stop => REASON_STOP,
                ControlKind::Preempt => REASON_PREEMPT,
            };
            running.reason.store(reason, Ordering::SeqCst);
            running.cancel.cancel();
            if control.kind == ControlKind::Stop {
                let keys: Vec<String> = state.pending.drain(..).filter_map(|q| q.key).collect();
                if !keys.is_empty() {
                    let host = self.clone();
                    tokio::spawn(async move { host.forget_queued(keys).await });
                }
            }
        });
    }

    /// How the agent's programs run: channels and handlers run theirs
    /// through it too (see [`crate::containment`]).
    pub fn containment(&self) -> Containment {
        self.inner.loaded().containment.clone()
    }

    /// The project served, as the current version of the agent read it
    /// (see [`Host::reload`]).
    pub fn project(&self) -> Arc<Project> {
        Arc::clone(&self.inner.loaded().project)
    }

    /// The agent's MCP connections (`host.mcp`), when it has any.
    pub fn mcp(&self) -> Option<&Arc<dyn McpHub>> {
        self.inner.mcp.as_ref()
    }

    /// MCP connections that failed to start or to list their tools.
    pub fn connection_errors(&self) -> Vec<ConnectionError> {
        self.inner
            .mcp
            .as_ref()
            .map(|m| m.connection_errors())
            .unwrap_or_default()
    }

    /// The current tool map, rebuilt first when the MCP catalog changed
    /// since the last look (a listing finished or a server sent
    /// `tools/list_changed`).
    pub(super) fn current_tools(&self) -> Arc<BTreeMap<String, ToolEntry>> {
        self.tools_of(&self.inner.loaded())
    }

    /// The tool map of version `loaded` of the agent, rebuilt first when
    /// the MCP catalog changed since the last look.
    pub(super) fn tools_of(&self, loaded: &Loaded) -> Arc<BTreeMap<String, ToolEntry>> {
        let mcp = self.inner.mcp.as_deref();
        {
            let current = loaded.tools.read().unwrap_or_else(|p| p.into_inner());
            match mcp {
                Some(mcp) if mcp.generation() != current.0 => {}
                _ => return Arc::clone(&current.1),
            }
        }
        let (generation, tools) = merged_tools(&loaded.base_tools, mcp);
        let tools = Arc::new(tools);
        let mut current = loaded.tools.write().unwrap_or_else(|p| p.into_inner());
        *current = (generation, Arc::clone(&tools));
        tools
    }

    /// The root agent of version `loaded` with its current tool map
    /// (subagents included), so a turn sees MCP tools listed after the
    /// version was built.
    pub(super) fn root_of(&self, loaded: &Loaded) -> AgentSpec {
        let tools = self.tools_of(loaded);
        let root = &loaded.root;
        if Arc::ptr_eq(&root.tools, &tools) {
            return root.clone();
        }
        let task = root.task.as_ref().map(|(spec, subs)| {
            let subs = subs
                .iter()
                .map(|(name, sub)| {
                    let mut sub = sub.clone();
                    sub.tools = Arc::clone(&tools);
                    (name.clone(), sub)
                })
                .collect();
            (spec.clone(), Arc::new(subs))
        });
        AgentSpec {
            tools,
            task,
            ..root.clone()
        }
    }

    /// The specs of the Rust result gates registered with
    /// [`HostBuilder::gate`](super::HostBuilder::gate); the agent's `gates/`
    /// programs are in [`Host::project`].
    pub fn gates(&self) -> Vec<crate::gate::GateSpec> {
        self.inner.native_gates.clone()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The trees the host's tools write: open a session workspace through
    /// `trees().root(store().workspace_dir(id))`, never by path.
    pub fn trees(&self) -> &crate::workspace::Trees {
        &self.inner.trees
    }

    /// A session's workspace, as a tree.
    pub fn workspace(&self, id: &bdk_events::SessionId) -> crate::workspace::TreeRoot {
        self.inner.trees.root(self.inner.store.workspace_dir(id))
    }

    /// Specs of the tools callable on the host, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.current_tools()
            .values()
            .map(|e| e.tool.spec().clone())
            .collect()
    }

    /// Specs of the tools a caller from `origin` may call directly, sorted
    /// by name (see [`CallOrigin`]).
    pub fn direct_tools(&self, origin: CallOrigin) -> Vec<ToolSpec> {
        self.direct_tool_sources(origin)
            .into_iter()
            .map(|(spec, _)| spec)
            .collect()
    }

    /// Like [`Host::direct_tools`], each with where it comes from.
    pub fn direct_tool_sources(&self, origin: CallOrigin) -> Vec<(ToolSpec, ToolSource)> {
        self.current_tools()
            .iter()
            .filter(|(name, e)| {
                self.direct_refusal(name, e.tool.spec(), origin, Approval::Listing)
                    .is_none()
            })
            .map(|(_, e)| (e.tool.spec().clone(), e.tool.source()))
            .collect()
    }

    /// Every tool callable on the host (built-ins, manifests, native tools,
    /// advertised MCP tools listed by now), each with where it comes from,
    /// sorted by name.
    pub fn tool_sources(&self) -> Vec<(ToolSpec, ToolSource)> {
        self.current_tools()
            .values()
            .map(|e| (e.tool.spec().clone(), e.tool.source()))
            .collect()
    }

    /// Why a caller from `origin` may not call `name` directly; `None`
    /// when it may.
    pub(super) fn direct_refusal(
        &self,
        name: &str,
        spec: &ToolSpec,
        origin: CallOrigin,
        approval: Approval,
    ) -> Option<HostError> {
        let remote = origin != CallOrigin::Agent;
        let loaded = self.inner.loaded();
        if remote && loaded.builtins.contains(name) && !loaded.exposed.contains(name) {
            return Some(HostError::ToolNotExposed(name.to_owned()));
        }
        if spec.needs_approval {
            if origin == CallOrigin::Mcp {
                return Some(HostError::ApprovalRequired {
                    name: name.to_owned(),
                    how: "MCP callers cannot approve it; call it over the HTTP API with \"approve\": true, or let the model call it in a session where a person approves it",
                });
            }
            if approval == Approval::Missing {
                return Some(HostError::ApprovalRequired {
                    name: name.to_owned(),
                    how: "send \"approve\": true with the call to approve it yourself (recorded with your principal), or let the model call it in a session where a person approves it",
                });
            }
        }
        None
    }

    /// Specs of agent-execution tools (workspace scripts).
    pub fn agent_tools(&self) -> Vec<ToolSpec> {
        self.inner.loaded().agent_tools.values().cloned().collect()
    }

    /// The root agent's system prompt.
    pub fn system_prompt(&self) -> String {
        self.inner.loaded().root.system.clone()
    }

    /// The root agent's model id.
    pub fn model_id(&self) -> String {
        self.inner.loaded().root.model.id().to_owned()
    }

    /// Prices for cost estimates: the built-in table with the project's
    /// `[prices]` overrides.
    pub fn prices(&self) -> PriceTable {
        self.inner.loaded().prices.clone()
    }

    /// The recording model steps go to, when the host was built with
    /// [`HostBuilder::record_to`](crate::host::HostBuilder::record_to).
    pub fn recording(&self) -> Option<&Arc<Recording>> {
        self.inner.recording.as_ref()
    }

    /// Failed hook deliveries since start.
    pub fn hook_failures(&self) -> u64 {
        self.inner.hooks.failures()
    }

    /// Waits until the hooks have handled every event recorded so far, at
    /// most `timeout`. A process that is about to exit calls it last (after
    /// [`Host::shutdown`] when it shuts down), so its final events reach
    /// the hooks instead of dying with the runtime.
    pub async fn drain_hooks(&self, timeout: Duration) -> Result<(), Undelivered> {
        self.inner.hooks.drain(timeout).await
    }

    /// A hold on the slot of `id`, created on first use.
    pub(super) fn slot(&self, id: &SessionId) -> SlotRef {
        self.inner.slots.get(id)
    }

    /// What this host holds in memory for sessions: slots of sessions in
    /// use, cached conversations of resting ones, and the store's own
    /// per-session state.
    pub fn memory(&self) -> MemoryStats {
        let (active, cached, bytes, budget, evicted) = self.inner.slots.stats();
        let (store_resident, store_evicted) = self.inner.store.resident_sessions();
        MemoryStats {
            active_sessions: active,
            cached_transcripts: cached,
            cached_transcript_bytes: bytes,
            transcript_budget_bytes: budget,
            evicted_transcripts: evicted,
            store_resident_sessions: store_resident,
            store_evicted_sessions: store_evicted,
        }
    }

    pub(crate) async fn record(
        &self,
        id: &SessionId,
        turn: Option<&TurnId>,
        events: Vec<Event>,
    ) -> HostResult<Vec<Envelope>> {
        let batch = events
            .into_iter()
            .map(|event| NewEvent {
                turn_id: turn.cloned(),
                event,
            })
            .collect();
        self.record_batch(id, batch).await
    }

    /// Appends events (recorded before anyone sees them), then hands them to hooks.
    pub(super) async fn record_batch(
        &self,
        id: &SessionId,
        batch: Vec<NewEvent>,
    ) -> HostResult<Vec<Envelope>> {
        let recorded = self
            .inner
            .store
            .append(id, batch)
            .await
            .map_err(session_error(id))?;
        self.inner.hooks.publish(&recorded);
        Ok(recorded)
    }

    /// Reads a session, checking ownership. `principal = None` is a trusted
    /// local caller that may see every session.
    pub async fn session(
        &self,
        id: &SessionId,
        principal: Option<&str>,
    ) -> HostResult<SessionRecord> {
        let record = self
            .inner
            .store
            .get_session(id)
            .await
            .map_err(session_error(id))?
            .ok_or_else(|| HostError::SessionNotFound(id.to_string()))?;
        check_owner(&record, principal)?;
        Ok(record)
    }

    /// Sessions visible to `principal` (all of them for `None`), oldest first.
    pub async fn list_sessions(&self, principal: Option<&str>) -> HostResult<Vec<SessionRecord>> {
        let all = self.inner.store.list_sessions().await?;
        Ok(all
            .into_iter()
            .filter(|r| check_owner(r, principal).is_ok())
            .collect())
    }

    /// Recorded events from `from`.
    pub async fn events(
        &self,
        id: &SessionId,
        from: u64,
        principal: Option<&str>,
    ) -> HostResult<Vec<Envelope>> {
        self.session(id, principal).await?;
        self.inner
            .store
            .read(id, from)
            .await
            .map_err(session_error(id))
    }

    /// Replay from `from`, then follow live.
    pub async fn subscribe(
        &self,
        id: &SessionId,
        from: u64,
        principal: Option<&str>,
    ) -> HostResult<EventStream> {
        self.session(id, principal).await?;
        self.inner
            .store
            .subscribe(id, from)
            .await
            .map_err(session_error(id))
    }

    /// True when a turn is running in the session.
    pub fn is_busy(&self, id: &SessionId) -> bool {
        self.inner
            .slots
            .with(id, |slot| slot.state().running.is_some())
            .unwrap_or(false)
    }
}
