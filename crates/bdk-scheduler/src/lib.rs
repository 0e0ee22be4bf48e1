//! Time-driven work: cron schedules (`agent/schedules/*`), when they fire
//! and what a fire does, and per-conversation reminders.
//!
//! - [`clock`]: the injectable [`Clock`] (system and manual), from `bdk-core`.
//! - [`cron`]: the exact 5-field crontab matcher, UTC, minute granularity,
//!   from `bdk-core` (the one `bdk validate` uses).
//! - [`Dispatcher`]: what one fire does. A Markdown schedule starts a task
//!   session (channel `schedule`, principal `schedule:<name>`, the body as
//!   the message) that ends in `session.completed` or `session.failed`; a
//!   TOML hand-off goes to a callback the embedder supplies, so this crate
//!   knows nothing of HTTP or channels; a TOML tool schedule calls a server
//!   tool through the host's direct-call path as `schedule:<name>`. [`Dispatcher::dispatch_schedule`] is
//!   the programmatic (and dev-route) entry point.
//! - [`reminders`]: durable reminders as a host extension ([`Reminders`]:
//!   the `reminders_*` tools, the `reminders.*` endpoint operations, the
//!   timer), reaching the host only through `bdk_core::extension::Runtime`.
//! - [`Scheduler`]: the owned background task that fires every schedule on
//!   its cadence with a durable at-most-once claim per scheduled minute.
//!
//! Guarantees: a scheduled minute is claimed in the store's key-value space
//! (namespace [`CLAIMS_NAMESPACE`], key `<name>@<RFC3339 minute>`) *before*
//! anything runs, and a claim that already exists is never fired again, so a
//! restart at the boundary cannot fire twice. Fires missed while the process
//! was down are skipped (the only catch-up policy, [`CatchUp::Skip`]) with a
//! warning in the log and a durable record ([`status`]). Each fire runs in its own task, so a slow run never
//! delays the next fire of any schedule.

pub mod clock;
pub mod cron;
#[cfg(feature = "schema")]
mod json_schema;
pub mod reminders;
pub mod status;

use std::sync::Arc;

use async_trait::async_trait;
use bdk_core::handler::{HandlerCall, HandlerError};
use bdk_core::host::{CallOrigin, DirectCall, Host, HostError, StartSession};
use bdk_core::project::{HandlerSpec, Schedule, ScheduleAction};
use bdk_events::{SessionId, SessionMode};
use bdk_store::{Store, StoreError};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cron::{CronError, CronExpr};
pub use reminders::{HostReminders, Reminders};
pub use status::{
    CLAIMS_NAMESPACE, HandlerRun, LastRun, MissedFires, MissedIncident, MissedReason,
    ScheduleStatus, ToolRun, schedule_status,
};

/// The channel of sessions a Markdown schedule starts (and of the keyed
/// conversations a schedule handler sends into).
pub use bdk_core::host::SCHEDULE_CHANNEL;

/// Why a schedule could not be started or fired.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No schedule of that name was discovered.
    #[error("no schedule named `{0}`")]
    Unknown(String),
    /// The schedule's cron expression cannot be scheduled.
    #[error("schedule `{name}`: {source}")]
    Cron {
        /// The schedule.
        name: String,
        /// Why.
        source: CronError,
    },
    /// A hand-off schedule fired but the embedder supplied no hand-off.
    #[error("schedule `{0}` hands off into a channel, but no channel hand-off is configured")]
    NoHandoff(String),
    /// The hand-off callback refused the message.
    #[error("schedule `{name}`: hand-off into channel `{channel}` failed: {reason}")]
    Handoff {
        /// The schedule.
        name: String,
        /// The channel.
        channel: String,
        /// What the callback said.
        reason: String,
    },
    /// The handler program gave no answer (it crashed, hung, printed
    /// something other than one JSON object, or flooded stdout).
    #[error("schedule `{name}`: {source}")]
    Handler {
        /// The schedule.
        name: String,
        /// What went wrong.
        source: HandlerError,
    },
    /// The handler answered that its run failed (`"ok": false`).
    #[error("schedule `{name}`: the handler reported a failure: {message}")]
    HandlerFailed {
        /// The schedule.
        name: String,
        /// Its `error`, or a note that it gave none.
        message: String,
    },
    /// The session runtime refused the task session.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The claim store failed.
    #[error("schedule claim store: {0}")]
    Store(#[from] StoreError),
}

/// What one fire started.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatched {
    /// The schedule name.
    pub schedule_id: String,
    /// The sessions the fire started or continued (none for a tool schedule).
    pub session_ids: Vec<SessionId>,
    /// The call a tool schedule made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolRun>,
    /// What a handler schedule's program answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<HandlerRun>,
}

/// A hand-off a TOML schedule asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// The schedule name.
    pub schedule: String,
    /// The target channel.
    pub channel: String,
    /// The message.
    pub message: String,
    /// The conversation key, when the hand-off continues a conversation.
    pub continuation_key: Option<String>,
    /// The schedule-scoped principal, `schedule:<name>`.
    pub principal: String,
}

/// The embedder's hand-off: delivers the message into the channel and
/// returns the session it reached, or why it could not.
pub type HandoffFn =
    Arc<dyn Fn(Handoff) -> BoxFuture<'static, Result<SessionId, String>> + Send + Sync>;

/// When a fire happens: a scheduled minute, or on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The cadence reached this scheduled minute.
    Scheduled(DateTime<Utc>),
    /// A programmatic or dev-route dispatch.
    Manual,
}

/// Runs one fire of a schedule. [`Dispatcher`] is the production runner;
/// the seam exists so the cadence can be tested without a model.
#[async_trait]
pub trait Runner: Send + Sync + 'static {
    /// Performs the schedule's action once.
    async fn run(&self, schedule: &Schedule, trigger: Trigger)
    -> Result<Dispatched, ScheduleError>;
}

/// The production runner over one agent's host.
#[derive(Clone)]
pub struct Dispatcher {
    host: Host,
    handoff: Option<HandoffFn>,
}

impl Dispatcher {
    /// A dispatcher starting task sessions on `host`; hand-off schedules fail
    /// with [`ScheduleError::NoHandoff`] until [`Dispatcher::with_handoff`].
    pub fn new(host: Host) -> Self {
        Self {
            host,
            handoff: None,
        }
    }

    /// Sets the channel hand-off used by TOML schedules.
    pub fn with_handoff(mut self, handoff: HandoffFn) -> Self {
        self.handoff = Some(handoff);
        self
    }

    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Fires the discovered schedule `name` once, now, through the same path
    /// a cadence fire takes (no claim: it is not a scheduled minute).
    pub async fn dispatch_schedule(&self, name: &str) -> Result<Dispatched, ScheduleError> {
        let schedule = self
            .host
            .project()
            .schedules
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| ScheduleError::Unknown(name.to_owned()))?;
        let result = self.run(&schedule, Trigger::Manual).await;
        let run = last_run(self.host.clock().now(), None, &result);
        status::record_last_run(self.host.store(), name, &run).await;
        result
    }
}

impl Dispatcher {
    /// One run of a handler schedule's program: the fire's facts in, its
    /// answer read back. The answer is any JSON object; `"ok": false` (with
    /// an `error`) fails the fire, and `sessionIds` lists the sessions it
    /// started or woke.
    async fn run_handler(
        &self,
        schedule: &Schedule,
        handler: &HandlerSpec,
        trigger: Trigger,
        principal: String,
    ) -> Result<HandlerRun, ScheduleError> {
        let fired_at = self.host.clock().now();
        let scheduled_for = match trigger {
            Trigger::Scheduled(minute) => Some(minute),
            Trigger::Manual => None,
        };
        let mut request = serde_json::Map::new();
        request.insert("schedule".to_owned(), schedule.name.clone().into());
        request.insert("cron".to_owned(), schedule.cron.clone().into());
        request.insert(
            "trigger".to_owned(),
            match trigger {
                Trigger::Scheduled(_) => "scheduled",
                Trigger::Manual => "manual",
            }
            .into(),
        );
        request.insert("firedAt".to_owned(), rfc3339(fired_at).into());
        request.insert("scheduledFor".to_owned(), scheduled_for.map(rfc3339).into());
        let started = std::time::Instant::now();
        let answer = self
            .host
            .run_handler(
                handler,
                HandlerCall {
                    kind: "schedule",
                    request,
                    principal: Some(principal),
                    channel: SCHEDULE_CHANNEL.to_owned(),
                    session: None,
                    cancel: CancellationToken::new(),
                },
            )
            .await
            .map_err(|source| ScheduleError::Handler {
                name: schedule.name.clone(),
                source,
            })?;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let session_ids = match answer.get("sessionIds") {
            Some(serde_json::Value::Array(ids)) => ids
                .iter()
                .filter_map(serde_json::Value::as_str)
                .filter(|id| !id.is_empty())
                .map(SessionId::from_string)
                .collect(),
            _ => Vec::new(),
        };
        if answer.get("ok") == Some(&serde_json::Value::Bool(false)) {
            let message = match answer.get("error") {
                Some(serde_json::Value::String(e)) if !e.trim().is_empty() => e.clone(),
                _ => "it answered `\"ok\": false` without an `error`".to_owned(),
            };
            return Err(ScheduleError::HandlerFailed {
                name: schedule.name.clone(),
                message,
            });
        }
        tracing::info!(schedule = %schedule.name, duration_ms, sessions = session_ids.len(), "schedule handler finished");
        Ok(HandlerRun {
            answer: status::capped_answer(serde_json::Value::Object(answer)),
            duration_ms,
            session_ids,
        })
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[async_trait]
impl Runner for Dispatcher {
    async fn run(
        &self,
        schedule: &Schedule,
        trigger: Trigger,
    ) -> Result<Dispatched, ScheduleError> {
        let principal = format!("schedule:{}", schedule.name);
        let mut tool_call = None;
        let mut handler_run = None;
        let session_ids = match &schedule.action {
            ScheduleAction::Prompt { prompt } => {
                let started = self
                    .host
                    .start_session(StartSession {
                        message: Some(prompt.clone()),
                        mode: SessionMode::Task,
                        channel: SCHEDULE_CHANNEL.to_owned(),
                        principal: Some(principal),
                        title: Some(format!("schedule {}", schedule.name)),
                        ..StartSession::default()
                    })
                    .await?;
                vec![started.session_id]
            }
            ScheduleAction::Handoff {
                channel,
                message,
                continuation_key,
            } => {
                let handoff = self
                    .handoff
                    .as_ref()
                    .ok_or_else(|| ScheduleError::NoHandoff(schedule.name.clone()))?;
                handoff(Handoff {
                    schedule: schedule.name.clone(),
                    channel: channel.clone(),
                    message: message.clone(),
                    continuation_key: continuation_key.clone(),
                    principal,
                })
                .await
                .map_err(|reason| ScheduleError::Handoff {
                    name: schedule.name.clone(),
                    channel: channel.clone(),
                    reason,
                })
                .map(|id| vec![id])?
            }
            ScheduleAction::Tool { tool, input } => {
                // Unbound: the call belongs to no conversation, and its
                // principal is the schedule's own.
                let out = self
                    .host
                    .call_tool(DirectCall {
                        name: tool.clone(),
                        input: input.clone(),
                        principal: Some(principal),
                        origin: CallOrigin::Agent,
                        ..DirectCall::default()
                    })
                    .await?;
                if out.is_error {
                    tracing::warn!(schedule = %schedule.name, tool = %tool, call_id = %out.call_id, result = %out.result, "scheduled tool call returned an error");
                } else {
                    tracing::info!(schedule = %schedule.name, tool = %tool, call_id = %out.call_id, duration_ms = out.duration_ms, "scheduled tool call finished");
                }
                tool_call = Some(ToolRun {
                    tool_name: out.tool_name,
                    call_id: out.call_id,
                    is_error: out.is_error,
                    result: out.result,
                    duration_ms: out.duration_ms,
                });
                out.session_id.into_iter().collect()
            }
            ScheduleAction::Handler { handler } => {
                let run = self
                    .run_handler(schedule, handler, trigger, principal)
                    .await?;
                let ids = run.session_ids.clone();
                handler_run = Some(run);
                ids
            }
        };
        Ok(Dispatched {
            schedule_id: schedule.name.clone(),
            session_ids,
            tool_call,
            handler: handler_run,
        })
    }
}

/// What happens to fires missed while the process was down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// They are not run; a warning names how many were skipped.
    #[default]
    Skip,
}

/// The last-run record of a fire that ended with `result`.
fn last_run(
    finished_at: DateTime<Utc>,
    scheduled_for: Option<DateTime<Utc>>,
    result: &Result<Dispatched, ScheduleError>,
) -> LastRun {
    match result {
        Ok(done) => LastRun {
            finished_at,
            scheduled_for,
            ok: true,
            session_ids: done.session_ids.clone(),
            tool_call: done.tool_call.clone(),
            handler: done.handler.clone(),
            error: None,
            error_code: None,
            failures: 0,
            last_failure: None,
        },
        Err(e) => LastRun {
            finished_at,
            scheduled_for,
            ok: false,
            session_ids: Vec::new(),
            tool_call: None,
            handler: None,
            error: Some(e.to_string()),
            error_code: match e {
                ScheduleError::Handler { source, .. } => Some(source.code().to_owned()),
                ScheduleError::HandlerFailed { .. } => Some("handler_reported_failure".to_owned()),
                _ => None,
            },
            failures: 0,
            last_failure: None,
        },
    }
}

/// How long a fire claim is kept. A claim only has to outlive every
/// replica's chance to try the same minute again (a late wake, a restart at
/// the boundary) and to mark where the last run was for the missed-fire
/// report; a day is far past both, and bounds an every-minute schedule to
/// 1,440 claims.
pub const CLAIM_RETENTION: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// Deletes `name`'s claims older than [`CLAIM_RETENTION`] before `now`
/// (the minute just claimed, which is always kept). Best effort: a claim
/// left behind costs space, never a second fire.
async fn prune_claims(store: &Arc<dyn Store>, name: &str, now: DateTime<Utc>) {
    let prefix = format!("{name}@");
    let keys = match store.kv_list(CLAIMS_NAMESPACE, &prefix).await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::debug!(schedule = %name, error = %e, "cannot list fire claims to prune");
            return;
        }
    };
    let cutoff = now - CLAIM_RETENTION;
    for key in keys {
        let old = key
            .strip_prefix(&prefix)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t.with_timezone(&Utc) < cutoff);
        if old && let Err(e) = store.kv_delete(CLAIMS_NAMESPACE, &key).await {
            tracing::debug!(schedule = %name, %key, error = %e, "cannot prune a fire claim");
        }
    }
}

/// The claim key of `name` at the scheduled minute `at`.
pub fn claim_key(name: &str, at: DateTime<Utc>) -> String {
    format!("{name}@{}", at.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// The running schedule loops. Dropping it does not stop them: call
/// [`Scheduler::shutdown`] (or cancel the token given to
/// [`Scheduler::start`]).
pub struct Scheduler {
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Scheduler {
    /// Checks every schedule's cron expression and starts one loop per
    /// schedule, counting cadence from `clock.now()` as of this call. An
    /// expression that is malformed or can never fire is an error and
    /// nothing starts. Must be called inside a Tokio runtime.
    pub fn start(
        schedules: &[Schedule],
        store: Arc<dyn Store>,
        runner: Arc<dyn Runner>,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
    ) -> Result<Self, ScheduleError> {
        let mut parsed = Vec::with_capacity(schedules.len());
        for schedule in schedules {
            let expr = CronExpr::parse(&schedule.cron).map_err(|source| ScheduleError::Cron {
                name: schedule.name.clone(),
                source,
            })?;
            parsed.push((schedule.clone(), expr));
        }
        // Read once, before any task runs, so that a test (or a slow
        // runtime) moving the clock right after start cannot make a loop
        // begin counting past the first fire.
        let started_at = clock.now();
        let mut tasks = JoinSet::new();
        for (schedule, expr) in parsed {
            let run = Loop {
                schedule: Arc::new(schedule),
                expr,
                store: Arc::clone(&store),
                runner: Arc::clone(&runner),
                clock: Arc::clone(&clock),
                cancel: cancel.clone(),
            };
            tasks.spawn(run.run(started_at));
        }
        Ok(Self { cancel, tasks })
    }

    /// Stops every loop and waits for them to end. Fires already running
    /// continue in their own tasks; the host's shutdown settles them.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

struct Loop {
    schedule: Arc<Schedule>,
    expr: CronExpr,
    store: Arc<dyn Store>,
    runner: Arc<dyn Runner>,
    clock: Arc<dyn Clock>,
    cancel: CancellationToken,
}

impl Loop {
    async fn run(self, started_at: DateTime<Utc>) {
        self.report_missed(started_at).await;
        let mut cursor = started_at;
        loop {
            let Some(next) = self.expr.next_after(cursor) else {
                // `CronExpr::parse` refuses expressions without a next fire,
                // so this is only reached past the search horizon.
                tracing::error!(schedule = %self.schedule.name, "schedule has no next fire time; it stops");
                return;
            };
            tokio::select! {
                () = self.cancel.cancelled() => return,
                () = self.clock.sleep_until(next) => {}
            }
            let now = self.clock.now();
            self.fire(next).await;
            // Woken late (the process was suspended, or the clock jumped):
            // the minutes between are skipped rather than run in a burst.
            if now > next {
                self.skip(next, now, MissedReason::LateWake).await;
                cursor = now;
            } else {
                cursor = next;
            }
        }
    }

    /// Claims `at` and, when the claim is new, spawns the fire.
    async fn fire(&self, at: DateTime<Utc>) {
        let name = &self.schedule.name;
        let key = claim_key(name, at);
        let claim = serde_json::json!({
            "schedule": name,
            "scheduledFor": at.to_rfc3339_opts(SecondsFormat::Secs, true),
            "claimedAt": self.clock.now().to_rfc3339_opts(SecondsFormat::Millis, true),
        });
        // One atomic write decides the fire: of several replicas (or
        // processes) claiming the same scheduled time, exactly one wins.
        match self
            .store
            .kv_put_if_absent(CLAIMS_NAMESPACE, &key, claim)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(schedule = %name, %key, "scheduled time already claimed; not firing it again");
                return;
            }
            Err(e) => {
                // Without knowing whether the claim landed, not firing is
                // the side that keeps the at-most-once promise.
                tracing::error!(schedule = %name, %key, error = %e, "cannot record the fire claim; this fire is skipped");
                return;
            }
        }
        let schedule = Arc::clone(&self.schedule);
        let runner = Arc::clone(&self.runner);
        let store = Arc::clone(&self.store);
        let clock = Arc::clone(&self.clock);
        prune_claims(&self.store, name, at).await;
        // Spawned, not awaited: a slow run must not hold up the next fire.
        tokio::spawn(async move {
            let result = runner.run(&schedule, Trigger::Scheduled(at)).await;
            match &result {
                Ok(done) => {
                    tracing::info!(schedule = %schedule.name, sessions = ?done.session_ids, "schedule fired")
                }
                Err(e) => {
                    tracing::error!(schedule = %schedule.name, error = %e, "schedule fire failed")
                }
            }
            let run = last_run(clock.now(), Some(at), &result);
            status::record_last_run(&store, &schedule.name, &run).await;
        });
    }

    /// Skips (logs and records) the fires between the last claim on record
    /// and `started_at`: they fell due while the server was down.
    async fn report_missed(&self, started_at: DateTime<Utc>) {
        match status::last_claim(&self.store, &self.schedule.name).await {
            Ok(Some(last)) => self.skip(last, started_at, MissedReason::ServerDown).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(schedule = %self.schedule.name, error = %e, "cannot list past fire claims");
            }
        }
    }

    /// Applies the catch-up policy to the scheduled minutes in `(from, to]`:
    /// none of them runs; a warning and a [`MissedFires`] record say so.
    async fn skip(&self, from: DateTime<Utc>, to: DateTime<Utc>, reason: MissedReason) {
        let (count, skipped) = self.skipped_between(from, to);
        let (Some(first), Some(last)) = (skipped.first(), skipped.last()) else {
            return;
        };
        let name = &self.schedule.name;
        tracing::warn!(
            schedule = %name,
            missed = count,
            first = %status::minute(*first),
            last_listed = %status::minute(*last),
            reason = reason.as_str(),
            "scheduled fires were missed and are skipped (catch-up policy: skip)"
        );
        let incident = MissedIncident {
            detected_at: self.clock.now(),
            reason,
            count,
            skipped,
        };
        if let Err(e) = status::record_missed(&self.store, name, incident).await {
            tracing::warn!(schedule = %name, error = %e, "cannot record the skipped fires");
        }
    }

    /// Scheduled minutes in `(from, to]`: how many (counted up to a cap, so
    /// a long outage of an every-minute schedule stays cheap) and the first
    /// [`status::MAX_LISTED`] of them. `to` is included because the cadence
    /// resumes strictly after it.
    fn skipped_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> (usize, Vec<DateTime<Utc>>) {
        const CAP: usize = 10_000;
        let mut count = 0;
        let mut listed = Vec::new();
        let mut t = from;
        while count < CAP {
            match self.expr.next_after(t) {
                Some(n) if n <= to => {
                    count += 1;
                    if listed.len() < status::MAX_LISTED {
                        listed.push(n);
                    }
                    t = n;
                }
                _ => break,
            }
        }
        (count, listed)
    }
}

/// Checks that every schedule's cron expression parses and can fire; the
/// first that cannot is the error. [`Scheduler::start`] runs the same check.
pub fn check_schedules(schedules: &[Schedule]) -> Result<(), ScheduleError> {
    for schedule in schedules {
        CronExpr::parse(&schedule.cron).map_err(|source| ScheduleError::Cron {
            name: schedule.name.clone(),
            source,
        })?;
    }
    Ok(())
}
