//! Durable per-conversation reminders: the schedule grammar (`delay`,
//! `every`, `cron`, `at`), next-fire computation and the stored reminder
//! records (store kv namespace `reminders`), all in [`records`], the
//! built-in `reminders_*` tools ([`tools`]), and the engine here: the
//! reminder table and the single timer task that fires due reminders on the
//! host's [`Clock`] (`cron` schedules use [`crate::cron::CronExpr`]).
//!
//! [`Reminders`] is a host extension (see [`bdk_core::extension`]): build a
//! host with `HostBuilder::extension(Arc::new(Reminders::new()))` and it
//! adds the tools (when `agent.toml` has `[builtin_tools] reminders =
//! true`) and the `reminders.*` host-endpoint operations, loads and arms the
//! stored reminders when the host starts, runs the timer (unless
//! [`Reminders::timers`] turned it off), and disarms a deleted session's
//! reminders. It reaches the host only through the runtime's narrow
//! [`Runtime`] port: wake a session with a coalesced message, or call a
//! handler tool as the agent's own machinery. [`HostReminders`] offers the
//! API as methods of `Host`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bdk_core::extension::{HostExtension, OperationCall, OperationError, Runtime, RuntimeLink};
use bdk_core::host::Host;
use bdk_core::project::Project;
use bdk_core::tool::{Tool, ToolContext, ToolSpec};
use bdk_events::ids::new_id;
use bdk_events::{SessionId, SessionMode};
use bdk_store::Store;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub mod records;
pub mod tools;

use crate::clock::Clock;
pub use records::{
    CLAIMS_NAMESPACE, FireOutcome, HANDLER_LOST, KV_NAMESPACE, NewReminder, Reminder,
    ReminderError, ReminderResult, ReminderStatus, SESSION_DELETED, ScheduleKind, SessionReminders,
    claim_key, parse_at, parse_duration,
};
use records::{SessionLookup, next_fire, parse_cron};

/// The key-value namespaces reminders keep their state in (the records and
/// the fire claims), which the host endpoint refuses to tools and handlers:
/// a planted record would arm a reminder on any session, a planted claim
/// would swallow a fire.
pub const NAMESPACES: &[&str] = &[KV_NAMESPACE, CLAIMS_NAMESPACE];

/// The shortest accepted `every` period.
const MIN_EVERY: TimeDelta = TimeDelta::minutes(1);
/// How often a replica re-reads the reminder table for reminders that other
/// replicas created.
const RESYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The host port

/// What the engine's functions need: the engine, and the host's store,
/// tools and sessions. [`Bound`] implements it over the runtime's
/// [`Runtime`] port.
#[async_trait]
pub(crate) trait ReminderHost: Send + Sync + 'static {
    /// The host's reminder table and timer channel.
    fn reminder_engine(&self) -> Arc<Engine>;
    /// The host's store.
    fn store(&self) -> &Arc<dyn Store>;
    /// True when replicas share the store (a coordination is configured):
    /// the stored record, not this host's copy, decides.
    fn shares_store(&self) -> bool;
    /// The tools the agent has (a handler must be one of them).
    fn tools(&self) -> Vec<ToolSpec>;
    /// The mode of a session; `SessionNotFound` when there is none.
    async fn session_mode(&self, session: &SessionId) -> ReminderResult<SessionMode>;
    /// Sends `message` into the session with `coalesce` admission; the turn
    /// it started, if it started one.
    async fn send_coalesced(
        &self,
        session: &SessionId,
        message: String,
    ) -> Result<Option<bdk_events::TurnId>, String>;
    /// Calls the handler tool, bound to the session, as the agent's own
    /// machinery; whether the tool failed, and its result.
    async fn call_handler(
        &self,
        session: &SessionId,
        handler: &str,
        args: Value,
    ) -> Result<(bool, Value), String>;
}

// ---------------------------------------------------------------------------
// Engine

/// The reminder table and the timer's wake-up channel. One per host.
pub(crate) struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    state: Mutex<EngineState>,
    wake: Notify,
}

#[derive(Default)]
struct EngineState {
    reminders: HashMap<String, Reminder>,
    /// Next fires by time; entries whose reminder moved on are skipped.
    heap: BinaryHeap<Reverse<(DateTime<Utc>, String)>>,
    /// Reminders whose timer fire is in flight. A fire reinstalls its
    /// reminder (reloading the stored record) before it has moved on, which
    /// pushes its due time again; without this the timer would fire it a
    /// second time, and that fire, losing the claim, would move this host's
    /// copy past the due time while the first was still delivering.
    firing: HashSet<String>,
}

impl Engine {
    pub(crate) fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            state: Mutex::new(EngineState::default()),
            wake: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, EngineState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    async fn persist(&self, r: &Reminder) -> ReminderResult<()> {
        let value = serde_json::to_value(r)
            .map_err(|e| ReminderError::Delivery(format!("cannot encode reminder: {e}")))?;
        self.store.kv_put(KV_NAMESPACE, &r.id, value).await?;
        Ok(())
    }

    /// Re-reads a reminder's stored record (another host sharing the store
    /// may have changed it) and installs it.
    async fn reload(&self, id: &str) -> ReminderResult<Option<Reminder>> {
        let Some(value) = self.store.kv_get(KV_NAMESPACE, id).await? else {
            return Ok(None);
        };
        let r: Reminder = serde_json::from_value(value).map_err(|e| {
            ReminderError::Delivery(format!("stored reminder {id} is unreadable: {e}"))
        })?;
        self.install(r.clone());
        Ok(Some(r))
    }

    /// Drops a reminder's older fire claims, keeping `keep`: a claim only
    /// matters until its due time has been handed on.
    async fn prune_claims(&self, id: &str, keep: &str) {
        let prefix = format!("{id}@");
        match self.store.kv_list(CLAIMS_NAMESPACE, &prefix).await {
            Ok(keys) => {
                for key in keys.iter().filter(|k| k.as_str() != keep) {
                    if let Err(e) = self.store.kv_delete(CLAIMS_NAMESPACE, key).await {
                        tracing::debug!(key = %key, error = %e, "could not prune a reminder claim");
                    }
                }
            }
            Err(e) => {
                tracing::debug!(reminder_id = %id, error = %e, "could not list reminder claims")
            }
        }
    }

    /// Puts `r` in the table (and the heap when armed) and wakes the timer.
    fn install(&self, r: Reminder) {
        let mut state = self.state();
        if r.status == ReminderStatus::Armed
            && let Some(at) = r.next_fire_at
        {
            state.heap.push(Reverse((at, r.id.clone())));
        }
        state.reminders.insert(r.id.clone(), r);
        drop(state);
        self.wake.notify_one();
    }

    fn get(&self, id: &str) -> Option<Reminder> {
        self.state().reminders.get(id).cloned()
    }

    fn list(&self, session: Option<&SessionId>) -> Vec<Reminder> {
        let mut all: Vec<Reminder> = self
            .state()
            .reminders
            .values()
            .filter(|r| session.is_none_or(|s| &r.session_id == s))
            .cloned()
            .collect();
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        all
    }

    /// The earliest live heap entry, dropping stale ones.
    fn next_due(&self) -> Option<DateTime<Utc>> {
        let mut state = self.state();
        loop {
            let Reverse((at, id)) = state.heap.peek()?.clone();
            let live = state
                .reminders
                .get(&id)
                .is_some_and(|r| r.status == ReminderStatus::Armed && r.next_fire_at == Some(at));
            if live {
                return Some(at);
            }
            state.heap.pop();
        }
    }

    /// Removes and returns the ids of live entries due at `now`.
    fn take_due(&self, now: DateTime<Utc>) -> Vec<String> {
        let mut state = self.state();
        let mut due = Vec::new();
        while let Some(Reverse((at, id))) = state.heap.peek().cloned() {
            if at > now {
                break;
            }
            state.heap.pop();
            let live = state
                .reminders
                .get(&id)
                .is_some_and(|r| r.status == ReminderStatus::Armed && r.next_fire_at == Some(at));
            if live && state.firing.insert(id.clone()) {
                due.push(id);
            }
        }
        due
    }

    /// Ends the in-flight timer fire of `id` (see `EngineState::firing`).
    fn fired(&self, id: &str) {
        self.state().firing.remove(id);
        self.wake.notify_one();
    }
}

/// The single timer task of a host: sleeps on the clock until the earliest
/// next fire (or a change), then fires what is due, each fire in its own
/// task so a slow handler never holds up the others.
pub(crate) async fn run_timer<H: ReminderHost>(
    host: impl Fn() -> Option<H> + Send + Sync + 'static,
    cancel: CancellationToken,
) {
    // Replicas pick up reminders created elsewhere on this cadence (real
    // time: it bounds how stale a replica's table is, not when fires happen).
    let shared = host().is_some_and(|h| h.shares_store());
    let mut resync = tokio::time::interval(RESYNC_EVERY);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resync.tick().await;
    loop {
        let Some(engine) = host().map(|h| h.reminder_engine()) else {
            return;
        };
        let next = engine.next_due();
        let sleep = next.map(|at| engine.clock().sleep_until(at));
        tokio::select! {
            () = cancel.cancelled() => return,
            () = engine.wake.notified() => continue,
            _ = resync.tick(), if shared => {
                drop(engine);
                if let Some(h) = host()
                    && let Err(e) = resync_reminders(&h).await
                {
                    tracing::warn!(error = %e, "could not resync reminders from the store");
                }
                continue;
            }
            () = async {
                match sleep {
                    Some(s) => s.await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        let now = engine.clock().now();
        drop(engine);
        for id in host()
            .map(|h| h.reminder_engine().take_due(now))
            .unwrap_or_default()
        {
            let Some(h) = host() else { return };
            // The fire is owned by the timer's token: shutdown abandons a
            // delivery still in flight, which then fires again on the next
            // start because its record still names the missed time.
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    fired = fire_reminder(&h, &id, true) => {
                        if let Err(e) = fired {
                            tracing::warn!(reminder_id = %id, error = %e, "reminder fire failed");
                        }
                    }
                }
                h.reminder_engine().fired(&id);
            });
        }
    }
}

/// The note appended to a prompt that carries an `until` condition.
fn prompt_text(prompt: &str, until: Option<&str>) -> String {
    match until {
        Some(until) => format!(
            "{prompt}\n\n(Reminder note: this reminder repeats until the following holds; cancel it with reminders_cancel once it does: {until})"
        ),
        None => prompt.to_owned(),
    }
}

/// Creates a reminder bound to the chat session `session`.
pub(crate) async fn create_reminder<H: ReminderHost>(
    host: &H,
    session: &SessionId,
    req: NewReminder,
) -> ReminderResult<Reminder> {
    if host.session_mode(session).await? == SessionMode::Task {
        return Err(ReminderError::TaskSession(session.to_string()));
    }
    let now = host.reminder_engine().clock().now();
    let given: Vec<(ScheduleKind, &String)> = [
        (ScheduleKind::Delay, &req.delay),
        (ScheduleKind::Every, &req.every),
        (ScheduleKind::Cron, &req.cron),
        (ScheduleKind::At, &req.at),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    .collect();
    let [(kind, spec)] = given.as_slice() else {
        return Err(ReminderError::InvalidRequest(
            "give exactly one of delay, every, cron or at".into(),
        ));
    };
    let first = match kind {
        ScheduleKind::Delay => now + parse_duration(spec)?,
        ScheduleKind::Every => {
            let period = parse_duration(spec)?;
            if period < MIN_EVERY {
                return Err(ReminderError::InvalidSchedule(format!(
                    "every `{spec}` is shorter than 1 minute"
                )));
            }
            now + period
        }
        ScheduleKind::Cron => parse_cron(spec)?
            .next_after(now)
            .ok_or_else(|| ReminderError::InvalidSchedule(format!("cron `{spec}` never fires")))?,
        ScheduleKind::At => {
            let at = parse_at(spec)?;
            if at <= now {
                return Err(ReminderError::InvalidSchedule(format!(
                    "at `{spec}` is not in the future"
                )));
            }
            at
        }
    };
    let prompt = req.prompt.filter(|p| !p.trim().is_empty());
    match (&prompt, &req.handler) {
        (Some(_), None) | (None, Some(_)) => {}
        _ => {
            return Err(ReminderError::InvalidRequest(
                "give exactly one of prompt or handler".into(),
            ));
        }
    }
    if let Some(handler) = &req.handler {
        match host.tools().iter().find(|t| &t.name == handler) {
            None => return Err(ReminderError::UnknownHandler(handler.clone())),
            // Nobody is there to approve a call when a reminder fires:
            // an approval tool as handler would either never run or run
            // unapproved.
            Some(tool) if tool.needs_approval => {
                return Err(ReminderError::InvalidRequest(format!(
                    "handler `{handler}` needs approval, which a reminder cannot get when it fires; use the prompt form so the model calls it in a turn"
                )));
            }
            Some(_) => {}
        }
    }
    let reminder = Reminder {
        id: new_id("rem"),
        session_id: session.clone(),
        kind: kind.clone(),
        schedule: (*spec).clone(),
        prompt,
        until: req.until.filter(|u| !u.trim().is_empty()),
        handler: req.handler,
        args: req.args.unwrap_or_else(|| json!({})),
        status: ReminderStatus::Armed,
        reason: None,
        fire_count: 0,
        next_fire_at: Some(first),
        last_fired_at: None,
        last_error: None,
        created_at: now,
    };
    let engine = host.reminder_engine();
    engine.persist(&reminder).await?;
    engine.install(reminder.clone());
    Ok(reminder)
}

/// All reminders, or those of one session, oldest first.
pub(crate) fn list_reminders<H: ReminderHost>(
    host: &H,
    session: Option<&SessionId>,
) -> Vec<Reminder> {
    host.reminder_engine().list(session)
}

/// Cancels an armed reminder (scoped to `session` when given).
pub(crate) async fn cancel_reminder<H: ReminderHost>(
    host: &H,
    id: &str,
    session: Option<&SessionId>,
) -> ReminderResult<Reminder> {
    let engine = host.reminder_engine();
    let mut r = current_reminder(host, id)
        .await?
        .filter(|r| session.is_none_or(|s| &r.session_id == s))
        .ok_or_else(|| ReminderError::NotFound(id.to_owned()))?;
    if r.status != ReminderStatus::Armed {
        return Err(ReminderError::NotArmed(id.to_owned()));
    }
    r.status = ReminderStatus::Cancelled;
    r.next_fire_at = None;
    engine.persist(&r).await?;
    engine.install(r.clone());
    Ok(r)
}

/// A reminder as this host should act on it: its own copy, or, when
/// replicas share the store, the stored record (another replica may have
/// created, fired or cancelled it since).
async fn current_reminder<H: ReminderHost>(host: &H, id: &str) -> ReminderResult<Option<Reminder>> {
    let engine = host.reminder_engine();
    if host.shares_store() {
        return engine.reload(id).await;
    }
    Ok(engine.get(id))
}

/// Arms the reminders that other hosts sharing the store (replicas)
/// created since this host loaded its table, so that a reminder still
/// fires when the replica that created it is gone. Returns how many it
/// added. `bdk serve` runs it periodically on replicas.
pub(crate) async fn resync_reminders<H: ReminderHost>(host: &H) -> ReminderResult<usize> {
    let engine = host.reminder_engine();
    let mut added = 0;
    for key in engine.store.kv_list(KV_NAMESPACE, "").await? {
        if engine.get(&key).is_some() {
            continue;
        }
        match engine.reload(&key).await {
            Ok(Some(_)) => added += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "skipping an unreadable stored reminder")
            }
        }
    }
    Ok(added)
}

/// Fires a reminder now through the production path (the dev route).
/// A recurring reminder keeps its next scheduled fire.
pub(crate) async fn dispatch_reminder<H: ReminderHost>(
    host: &H,
    id: &str,
) -> ReminderResult<FireOutcome> {
    fire_reminder(host, id, false).await
}

/// Delivers one fire. `scheduled` fires advance the schedule; manual
/// ones leave a recurring reminder's next fire where it was.
pub(crate) async fn fire_reminder<H: ReminderHost>(
    host: &H,
    id: &str,
    scheduled: bool,
) -> ReminderResult<FireOutcome> {
    let engine = host.reminder_engine();
    let mut r = if scheduled {
        engine.get(id)
    } else {
        current_reminder(host, id).await?
    }
    .ok_or_else(|| ReminderError::NotFound(id.to_owned()))?;
    if r.status != ReminderStatus::Armed {
        return Err(ReminderError::NotArmed(id.to_owned()));
    }
    // A reminder outlives nothing: when its conversation is gone (the
    // session was deleted, through the host or straight from the store),
    // firing could only fail, again on every cadence, so it is disarmed.
    if host.store().get_session(&r.session_id).await?.is_none() {
        let r = disarm(host, r, SESSION_DELETED).await?;
        return Ok(FireOutcome {
            reminder: r,
            result: "disarmed".to_owned(),
            turn_id: None,
        });
    }
    // A scheduled fire claims its due time first, durably: of several
    // hosts sharing the store (replicas), exactly one delivers it. The
    // losers take the winner's record, which has moved on.
    if scheduled && let Some(due) = r.next_fire_at {
        let key = claim_key(&r.id, due);
        let claim = serde_json::json!({ "claimedAt": engine.clock().now() });
        if !engine
            .store
            .kv_put_if_absent(CLAIMS_NAMESPACE, &key, claim)
            .await?
        {
            let mut current = engine.reload(id).await?.unwrap_or(r);
            // The winner may still be delivering and not have recorded
            // the next fire yet: move this host's copy past the claimed
            // time so its timer does not spin on it.
            if current.next_fire_at == Some(due) {
                current.next_fire_at = next_fire(&current.kind, &current.schedule, due)
                    .ok()
                    .flatten();
                engine.install(current.clone());
            }
            return Ok(FireOutcome {
                reminder: current,
                result: "skip".to_owned(),
                turn_id: None,
            });
        }
        engine.prune_claims(&r.id, &key).await;
        // Replicas: this host's copy may be stale (cancelled, or moved
        // on, by another replica since this host loaded it). The stored
        // record decides.
        if host.shares_store() {
            match engine.reload(id).await? {
                Some(current)
                    if current.status == ReminderStatus::Armed
                        && current.next_fire_at == Some(due) =>
                {
                    r = current;
                }
                Some(current) => {
                    return Ok(FireOutcome {
                        reminder: current,
                        result: "skip".to_owned(),
                        turn_id: None,
                    });
                }
                None => return Err(ReminderError::NotFound(id.to_owned())),
            }
        }
    }
    let now = engine.clock().now();
    let delivered = deliver(host, &r).await;
    // Re-read: the reminder may have been cancelled while delivering.
    let mut r = engine.get(id).unwrap_or(r);
    r.fire_count += 1;
    r.last_fired_at = Some(now);
    let (result, turn_id) = match delivered {
        Ok(ok) => {
            r.last_error = None;
            ok
        }
        Err(e) => {
            tracing::warn!(reminder_id = %id, error = %e, "reminder delivery failed");
            r.last_error = Some(e);
            ("failed".to_owned(), None)
        }
    };
    if r.status == ReminderStatus::Armed {
        if result == "stop" {
            r.status = ReminderStatus::Completed;
            r.next_fire_at = None;
        } else if scheduled || matches!(r.kind, ScheduleKind::Delay | ScheduleKind::At) {
            // A recurring reminder keeps its cadence from the scheduled
            // time; one that fell behind (the host was down) resumes
            // from now instead of firing a burst of catch-ups.
            let base = r.next_fire_at.filter(|at| *at <= now).unwrap_or(now);
            let next = next_fire(&r.kind, &r.schedule, base).map(|next| {
                next.map(|n| {
                    if n <= now {
                        next_fire(&r.kind, &r.schedule, now)
                            .ok()
                            .flatten()
                            .unwrap_or(n)
                    } else {
                        n
                    }
                })
            });
            match next {
                Ok(Some(next)) => r.next_fire_at = Some(next),
                Ok(None) => {
                    r.status = ReminderStatus::Completed;
                    r.next_fire_at = None;
                }
                // A stored schedule that no longer parses (an edited
                // record) is disarmed visibly rather than left armed
                // with no timer behind it.
                Err(e) => {
                    tracing::warn!(reminder_id = %id, error = %e, "disarming a reminder with a broken schedule");
                    r.status = ReminderStatus::Disarmed;
                    r.reason = Some(e.to_string());
                    r.next_fire_at = None;
                }
            }
        }
    }
    engine.persist(&r).await?;
    engine.install(r.clone());
    Ok(FireOutcome {
        reminder: r,
        result,
        turn_id,
    })
}

/// Disarms `r` with `reason`, durably, and logs it.
async fn disarm<H: ReminderHost>(
    host: &H,
    mut r: Reminder,
    reason: &str,
) -> ReminderResult<Reminder> {
    tracing::warn!(reminder_id = %r.id, session_id = %r.session_id, reason, "disarming a reminder");
    r.status = ReminderStatus::Disarmed;
    r.reason = Some(reason.to_owned());
    r.next_fire_at = None;
    let engine = host.reminder_engine();
    engine.persist(&r).await?;
    engine.install(r.clone());
    Ok(r)
}

/// Disarms every armed reminder of `session` with [`SESSION_DELETED`];
/// called when the host deletes the session. Returns how many it disarmed.
pub(crate) async fn disarm_session_reminders<H: ReminderHost>(
    host: &H,
    session: &SessionId,
) -> ReminderResult<usize> {
    let armed: Vec<Reminder> = host
        .reminder_engine()
        .list(Some(session))
        .into_iter()
        .filter(|r| r.status == ReminderStatus::Armed)
        .collect();
    let n = armed.len();
    for r in armed {
        disarm(host, r, SESSION_DELETED).await?;
    }
    Ok(n)
}

/// Sends the prompt, or calls the handler and acts on its answer.
async fn deliver<H: ReminderHost>(
    host: &H,
    r: &Reminder,
) -> Result<(String, Option<bdk_events::TurnId>), String> {
    let send = |message: String| async move {
        host.send_coalesced(&r.session_id, message)
            .await
            .map(|turn_id| ("delivered".to_owned(), turn_id))
    };
    if let Some(prompt) = &r.prompt {
        return send(prompt_text(prompt, r.until.as_deref())).await;
    }
    let Some(handler) = &r.handler else {
        return Err("reminder has neither prompt nor handler".into());
    };
    let (is_error, result) = host
        .call_handler(&r.session_id, handler, r.args.clone())
        .await?;
    if is_error {
        return Err(format!("handler `{handler}` failed: {result}"));
    }
    match HandlerAnswer::read(&result)? {
        HandlerAnswer::Followup(message) => send(message).await,
        HandlerAnswer::Plain(result) => Ok((result, None)),
    }
}

/// Loads stored reminders and arms the armed ones; a handler that is no
/// longer a tool disarms its reminder with [`HANDLER_LOST`], a session
/// that no longer exists with [`SESSION_DELETED`].
pub(crate) async fn rearm_reminders<H: ReminderHost>(host: &H) -> ReminderResult<()> {
    let engine = host.reminder_engine();
    let tools: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    // Read lazily, once: only armed reminders need their session checked.
    let mut sessions: Option<std::collections::HashSet<SessionId>> = None;
    for key in engine.store.kv_list(KV_NAMESPACE, "").await? {
        let Some(value) = engine.store.kv_get(KV_NAMESPACE, &key).await? else {
            continue;
        };
        let mut r: Reminder = match serde_json::from_value(value) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "skipping an unreadable stored reminder");
                continue;
            }
        };
        if r.status == ReminderStatus::Armed
            && let Some(h) = &r.handler
            && !tools.contains(h)
        {
            tracing::warn!(reminder_id = %r.id, handler = %h, "disarming a reminder whose handler is gone");
            r.status = ReminderStatus::Disarmed;
            r.reason = Some(HANDLER_LOST.to_owned());
            r.next_fire_at = None;
            engine.persist(&r).await?;
        }
        if r.status == ReminderStatus::Armed {
            let known = match &sessions {
                Some(known) => known,
                None => sessions.insert(
                    engine
                        .store
                        .list_sessions()
                        .await?
                        .into_iter()
                        .map(|s| s.id)
                        .collect(),
                ),
            };
            if !known.contains(&r.session_id) {
                tracing::warn!(reminder_id = %r.id, session_id = %r.session_id, "disarming a reminder whose session is gone");
                r.status = ReminderStatus::Disarmed;
                r.reason = Some(SESSION_DELETED.to_owned());
                r.next_fire_at = None;
                engine.persist(&r).await?;
            }
        }
        engine.install(r);
    }
    Ok(())
}

/// A handler's answer: a string or `{"action": ...}` with `stop`, `skip`,
/// `delivered`, or `followup` (plus `message`, which is sent into the
/// conversation and starts a model turn).
enum HandlerAnswer {
    Followup(String),
    Plain(String),
}

impl HandlerAnswer {
    fn read(value: &Value) -> Result<Self, String> {
        let (action, message) = match value {
            Value::String(s) => (s.as_str(), None),
            Value::Object(o) => (
                o.get("action").and_then(Value::as_str).unwrap_or(""),
                o.get("message").and_then(Value::as_str),
            ),
            _ => ("", None),
        };
        match action {
            "stop" | "skip" | "delivered" => Ok(Self::Plain(action.to_owned())),
            "followup" => match message {
                Some(m) if !m.trim().is_empty() => Ok(Self::Followup(m.to_owned())),
                _ => Err("handler answered followup without a message".into()),
            },
            _ => Err(format!(
                "handler answer must be stop, skip, delivered or {{\"action\":\"followup\",\"message\":...}}, got {value}"
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// Session-scoped access for tools

/// [`SessionReminders`] over a host.
pub(crate) struct Scoped<H> {
    pub(crate) host: H,
    pub(crate) session: SessionId,
}

#[async_trait]
impl<H: ReminderHost> SessionReminders for Scoped<H> {
    async fn create(&self, req: NewReminder) -> ReminderResult<Reminder> {
        create_reminder(&self.host, &self.session, req).await
    }

    async fn list(&self) -> ReminderResult<Vec<Reminder>> {
        Ok(list_reminders(&self.host, Some(&self.session)))
    }

    async fn cancel(&self, id: &str) -> ReminderResult<Reminder> {
        cancel_reminder(&self.host, id, Some(&self.session)).await
    }
}

// ---------------------------------------------------------------------------
// The extension

/// The engine bound to a live host: what the engine's functions run over.
#[derive(Clone)]
pub(crate) struct Bound {
    engine: Arc<Engine>,
    runtime: Arc<dyn Runtime>,
    store: Arc<dyn Store>,
}

#[async_trait]
impl ReminderHost for Bound {
    fn reminder_engine(&self) -> Arc<Engine> {
        Arc::clone(&self.engine)
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn shares_store(&self) -> bool {
        self.runtime.shares_store()
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.runtime.tools()
    }

    async fn session_mode(&self, session: &SessionId) -> ReminderResult<SessionMode> {
        self.runtime
            .session_mode(session)
            .await?
            .ok_or_else(|| ReminderError::SessionNotFound(session.to_string()))
    }

    async fn send_coalesced(
        &self,
        session: &SessionId,
        message: String,
    ) -> Result<Option<bdk_events::TurnId>, String> {
        self.runtime
            .wake(session, message)
            .await
            .map_err(|e| e.to_string())
    }

    async fn call_handler(
        &self,
        session: &SessionId,
        handler: &str,
        args: Value,
    ) -> Result<(bool, Value), String> {
        self.runtime
            .call_tool(session, handler, args)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The engine over the live host, or why there is none.
fn bound(attached: &std::sync::OnceLock<Attached>) -> ReminderResult<Bound> {
    let attached = attached.get().ok_or(ReminderError::Detached)?;
    let runtime = attached.runtime.get().ok_or(ReminderError::Detached)?;
    Ok(Bound {
        engine: Arc::clone(&attached.engine),
        store: runtime.store(),
        runtime,
    })
}

/// Durable reminders as a host extension (see the module docs). Cheap to
/// share; one per host.
pub struct Reminders {
    timers: bool,
    /// Set when the host starts the extension; shared with the tools.
    attached: Arc<std::sync::OnceLock<Attached>>,
}

struct Attached {
    engine: Arc<Engine>,
    runtime: RuntimeLink,
}

/// The host endpoint operations reminders answer.
const OPERATIONS: &[&str] = &["reminders.create", "reminders.list", "reminders.cancel"];

impl Default for Reminders {
    fn default() -> Self {
        Self::new()
    }
}

impl Reminders {
    /// Reminders that fire on their own (the timer runs).
    pub fn new() -> Self {
        Self {
            timers: true,
            attached: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// Turns automatic firing on (default) or off; when off, reminders stay
    /// armed and fire only through [`Reminders::dispatch`] (`bdk serve
    /// --dev`, tests).
    pub fn timers(mut self, on: bool) -> Self {
        self.timers = on;
        self
    }

    /// The reminders of `host`, when it was built with this extension.
    pub fn of(host: &Host) -> Option<Arc<Reminders>> {
        host.extension::<Reminders>()
    }

    /// The reminders of the session a tool call runs in, when the call is
    /// bound to a session of a host built with this extension: what native
    /// Rust tools use.
    pub fn for_call(ctx: &ToolContext) -> Option<Arc<dyn SessionReminders>> {
        let session = ctx.session.id.clone()?;
        let reminders = ctx
            .services
            .as_ref()?
            .extensions()
            .into_iter()
            .find_map(|e| e.downcast::<Reminders>().ok())?;
        (reminders.lookup())(session)
    }

    /// The engine over the live host, or why there is none.
    fn bound(&self) -> ReminderResult<Bound> {
        bound(&self.attached)
    }

    /// Finds a session's reminders, for the tools and the operations.
    fn lookup(&self) -> SessionLookup {
        let attached = Arc::clone(&self.attached);
        Arc::new(move |session| {
            let host = bound(&attached).ok()?;
            Some(Arc::new(Scoped { host, session }) as Arc<dyn SessionReminders>)
        })
    }

    /// Whether a call acting as `principal` reaches `session` (the host
    /// services' rule: it owns it, or nobody does).
    async fn reachable(
        &self,
        session: &SessionId,
        principal: Option<&str>,
    ) -> Result<(), OperationError> {
        let runtime = self
            .attached
            .get()
            .and_then(|a| a.runtime.get())
            .ok_or_else(|| OperationError::Unavailable("the host is shutting down".to_owned()))?;
        let record = runtime
            .store()
            .get_session(session)
            .await
            .map_err(OperationError::Storage)?
            .ok_or_else(|| OperationError::SessionNotFound(session.to_string()))?;
        match (&record.principal, principal) {
            (None, _) => Ok(()),
            (Some(owner), Some(caller)) if owner == caller => Ok(()),
            _ => Err(OperationError::Forbidden(session.to_string())),
        }
    }

    /// Creates a reminder bound to the chat session `session`.
    pub async fn create(&self, session: &SessionId, req: NewReminder) -> ReminderResult<Reminder> {
        create_reminder(&self.bound()?, session, req).await
    }

    /// The time the timer wakes next: the earliest armed fire, dropping
    /// stale entries on the way. This is the lookup the timer does after
    /// every change, exposed so the runtime benchmark can time it with many
    /// reminders armed.
    #[doc(hidden)]
    pub fn next_fire(&self) -> Option<DateTime<Utc>> {
        self.attached.get().and_then(|a| a.engine.next_due())
    }

    /// All reminders, or those of one session, oldest first.
    pub fn list(&self, session: Option<&SessionId>) -> Vec<Reminder> {
        self.attached
            .get()
            .map(|a| a.engine.list(session))
            .unwrap_or_default()
    }

    /// One reminder.
    pub fn get(&self, id: &str) -> Option<Reminder> {
        self.attached.get().and_then(|a| a.engine.get(id))
    }

    /// Cancels an armed reminder (scoped to `session` when given).
    pub async fn cancel(&self, id: &str, session: Option<&SessionId>) -> ReminderResult<Reminder> {
        cancel_reminder(&self.bound()?, id, session).await
    }

    /// Arms the reminders that other hosts sharing the store (replicas)
    /// created since this host loaded its table, so that a reminder still
    /// fires when the replica that created it is gone. Returns how many it
    /// added. The timer runs it every 30 seconds on replicas.
    pub async fn resync(&self) -> ReminderResult<usize> {
        resync_reminders(&self.bound()?).await
    }

    /// Fires a reminder now through the production path (the dev route).
    /// A recurring reminder keeps its next scheduled fire.
    pub async fn dispatch(&self, id: &str) -> ReminderResult<FireOutcome> {
        dispatch_reminder(&self.bound()?, id).await
    }
}

#[async_trait]
impl HostExtension for Reminders {
    fn name(&self) -> &'static str {
        "reminders"
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn tools(&self, project: &Project) -> Vec<Arc<dyn Tool>> {
        if project.config.builtin_tools.reminders {
            tools::reminder_tools(&self.lookup())
        } else {
            Vec::new()
        }
    }

    fn operations(&self) -> &'static [&'static str] {
        OPERATIONS
    }

    fn reserved_namespaces(&self) -> &'static [&'static str] {
        NAMESPACES
    }

    async fn operation(&self, mut call: OperationCall<'_>) -> Result<Value, OperationError> {
        // A call bound to no session (a handler) names the session whose
        // reminders it manages, which its principal must reach: one it
        // owns, or one nobody owns.
        let named = match &mut call.args {
            Value::Object(args) => args.remove("sessionId"),
            _ => None,
        };
        let session = match (call.ctx.session.id.clone(), named) {
            (Some(own), None) => Some(own),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(OperationError::InvalidArgs(
                    "`sessionId` is for calls bound to no session; this call manages its own session's reminders".to_owned(),
                ));
            }
            (None, Some(Value::String(id))) if !id.trim().is_empty() => {
                let id = SessionId::from_string(&id);
                self.reachable(&id, call.ctx.session.principal.as_deref())
                    .await?;
                Some(id)
            }
            (None, Some(_)) => {
                return Err(OperationError::InvalidArgs(
                    "`sessionId` must be a session id".to_owned(),
                ));
            }
        };
        let scoped = session.and_then(|s| (self.lookup())(s));
        tools::operation(scoped, call).await
    }

    async fn start(
        &self,
        runtime: RuntimeLink,
        shutdown: CancellationToken,
    ) -> bdk_core::host::HostResult<()> {
        let unavailable = || {
            bdk_core::host::HostError::InvalidRequest(
                "cannot load reminders: the host is gone".to_owned(),
            )
        };
        let live = runtime.get().ok_or_else(unavailable)?;
        let engine = Arc::new(Engine::new(live.store(), live.clock()));
        let attached = Attached {
            engine: Arc::clone(&engine),
            runtime: runtime.clone(),
        };
        if self.attached.set(attached).is_err() {
            return Err(bdk_core::host::HostError::InvalidRequest(
                "one Reminders extension cannot serve two hosts; give each host its own".to_owned(),
            ));
        }
        let bound = Bound {
            engine: Arc::clone(&engine),
            store: live.store(),
            runtime: live,
        };
        rearm_reminders(&bound).await.map_err(|e| {
            bdk_core::host::HostError::InvalidRequest(format!("cannot load reminders: {e}"))
        })?;
        drop(bound);
        if self.timers {
            tokio::spawn(run_timer(
                move || {
                    let runtime = runtime.get()?;
                    Some(Bound {
                        engine: Arc::clone(&engine),
                        store: runtime.store(),
                        runtime,
                    })
                },
                shutdown,
            ));
        }
        Ok(())
    }

    async fn session_deleted(&self, session: &SessionId) {
        let Ok(bound) = self.bound() else { return };
        if let Err(e) = disarm_session_reminders(&bound, session).await {
            // The fire-time check disarms them later if this fails.
            tracing::warn!(session_id = %session, error = %e, "cannot disarm the reminders of a deleted session");
        }
    }
}

/// The reminder API as methods of a [`Host`] built with [`Reminders`]. On
/// a host without it, reads are empty and changes fail with
/// [`ReminderError::Detached`].
#[async_trait]
pub trait HostReminders {
    /// Creates a reminder bound to the chat session `session`.
    async fn create_reminder(
        &self,
        session: &SessionId,
        req: NewReminder,
    ) -> ReminderResult<Reminder>;
    /// All reminders, or those of one session, oldest first.
    fn list_reminders(&self, session: Option<&SessionId>) -> Vec<Reminder>;
    /// One reminder.
    fn reminder(&self, id: &str) -> Option<Reminder>;
    /// Cancels an armed reminder (scoped to `session` when given).
    async fn cancel_reminder(
        &self,
        id: &str,
        session: Option<&SessionId>,
    ) -> ReminderResult<Reminder>;
    /// See [`Reminders::resync`].
    async fn resync_reminders(&self) -> ReminderResult<usize>;
    /// See [`Reminders::dispatch`].
    async fn dispatch_reminder(&self, id: &str) -> ReminderResult<FireOutcome>;
    /// See [`Reminders::next_fire`].
    #[doc(hidden)]
    fn next_reminder_fire(&self) -> Option<DateTime<Utc>>;
}

#[async_trait]
impl HostReminders for Host {
    async fn create_reminder(
        &self,
        session: &SessionId,
        req: NewReminder,
    ) -> ReminderResult<Reminder> {
        Reminders::of(self)
            .ok_or(ReminderError::Detached)?
            .create(session, req)
            .await
    }

    fn list_reminders(&self, session: Option<&SessionId>) -> Vec<Reminder> {
        Reminders::of(self)
            .map(|r| r.list(session))
            .unwrap_or_default()
    }

    fn reminder(&self, id: &str) -> Option<Reminder> {
        Reminders::of(self)?.get(id)
    }

    async fn cancel_reminder(
        &self,
        id: &str,
        session: Option<&SessionId>,
    ) -> ReminderResult<Reminder> {
        Reminders::of(self)
            .ok_or(ReminderError::Detached)?
            .cancel(id, session)
            .await
    }

    async fn resync_reminders(&self) -> ReminderResult<usize> {
        Reminders::of(self)
            .ok_or(ReminderError::Detached)?
            .resync()
            .await
    }

    async fn dispatch_reminder(&self, id: &str) -> ReminderResult<FireOutcome> {
        Reminders::of(self)
            .ok_or(ReminderError::Detached)?
            .dispatch(id)
            .await
    }

    fn next_reminder_fire(&self) -> Option<DateTime<Utc>> {
        Reminders::of(self)?.next_fire()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        parse_at(s).unwrap()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m").unwrap(), TimeDelta::minutes(10));
        assert_eq!(parse_duration("90s").unwrap(), TimeDelta::seconds(90));
        assert_eq!(parse_duration("2h").unwrap(), TimeDelta::hours(2));
        assert_eq!(parse_duration("365d").unwrap(), TimeDelta::days(365));
        for bad in ["-5m", "10y", "0m", "366d", "m", "10", "1.5h", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cron_schedules_use_the_shared_matcher() {
        assert_eq!(
            next_fire(
                &ScheduleKind::Cron,
                "30 9 * * 1-5",
                t("2026-11-28T10:00:00Z")
            )
            .unwrap(),
            Some(t("2026-11-30T09:30:00Z"))
        );
        for bad in ["0 0 31 2 *", "61 * * * *", "* * *"] {
            assert!(
                matches!(parse_cron(bad), Err(ReminderError::InvalidSchedule(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn at_needs_a_zone() {
        assert!(parse_at("2027-01-01T00:00:00Z").is_ok());
        assert!(parse_at("2027-01-01T09:00:00+02:00").is_ok());
        assert!(parse_at("2027-01-01T00:00:00").is_err());
    }

    #[test]
    fn every_advances_by_its_period() {
        let now = t("2026-11-30T00:00:00Z");
        assert_eq!(
            next_fire(&ScheduleKind::Every, "90s", now).unwrap(),
            Some(now + TimeDelta::seconds(90))
        );
        assert_eq!(next_fire(&ScheduleKind::Delay, "10m", now).unwrap(), None);
    }

    #[test]
    fn handler_answers() {
        assert!(
            matches!(HandlerAnswer::read(&json!("skip")), Ok(HandlerAnswer::Plain(s)) if s == "skip")
        );
        assert!(matches!(
            HandlerAnswer::read(&json!({"action": "followup", "message": "hi"})),
            Ok(HandlerAnswer::Followup(m)) if m == "hi"
        ));
        assert!(HandlerAnswer::read(&json!({"action": "followup"})).is_err());
        assert!(HandlerAnswer::read(&json!(42)).is_err());
    }
}
