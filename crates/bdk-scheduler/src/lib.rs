//! Cron schedules (`agent/schedules/*`): when they fire and what a fire does.
//!
//! - [`clock`]: the injectable [`Clock`] (system and manual).
//! - [`cron`]: the exact 5-field crontab matcher, UTC, minute granularity.
//! - [`Dispatcher`]: what one fire does. A Markdown schedule starts a task
//!   session (channel `schedule`, principal `schedule:<name>`, the body as
//!   the message) that ends in `session.completed` or `session.failed`; a
//!   TOML hand-off goes to a callback the embedder supplies, so this crate
//!   knows nothing of HTTP or channels. [`Dispatcher::dispatch_schedule`] is
//!   the programmatic (and dev-route) entry point.
//! - [`Scheduler`]: the owned background task that fires every schedule on
//!   its cadence with a durable at-most-once claim per scheduled minute.
//!
//! Guarantees: a scheduled minute is claimed in the store's key-value space
//! (namespace [`CLAIMS_NAMESPACE`], key `<name>@<RFC3339 minute>`) *before*
//! anything runs, and a claim that already exists is never fired again, so a
//! restart at the boundary cannot fire twice. Fires missed while the process
//! was down are skipped (the only catch-up policy, [`CatchUp::Skip`]) with a
//! warning in the log. Each fire runs in its own task, so a slow run never
//! delays the next fire of any schedule.

pub mod clock;
pub mod cron;

use std::sync::Arc;

use async_trait::async_trait;
use bdk_core::host::{Host, HostError, StartSession};
use bdk_core::project::{Schedule, ScheduleAction};
use bdk_events::{SessionId, SessionMode};
use bdk_store::{Store, StoreError};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cron::{CronError, CronExpr};

/// The key-value namespace holding fire claims.
pub const CLAIMS_NAMESPACE: &str = "schedules";
/// The channel of sessions a Markdown schedule starts.
pub const SCHEDULE_CHANNEL: &str = "schedule";

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
    /// The sessions the fire started or continued.
    pub session_ids: Vec<SessionId>,
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
        self.run(&schedule, Trigger::Manual).await
    }
}

#[async_trait]
impl Runner for Dispatcher {
    async fn run(
        &self,
        schedule: &Schedule,
        _trigger: Trigger,
    ) -> Result<Dispatched, ScheduleError> {
        let principal = format!("schedule:{}", schedule.name);
        let session_id = match &schedule.action {
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
                started.session_id
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
                })?
            }
        };
        Ok(Dispatched {
            schedule_id: schedule.name.clone(),
            session_ids: vec![session_id],
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
                let skipped = self.count_between(next, now);
                if skipped > 0 {
                    tracing::warn!(schedule = %self.schedule.name, skipped, "fires missed while the process was not running are skipped (catch-up policy: skip)");
                }
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
        match self.store.kv_get(CLAIMS_NAMESPACE, &key).await {
            Ok(Some(_)) => {
                tracing::info!(schedule = %name, %key, "scheduled time already claimed; not firing it again");
                return;
            }
            Ok(None) => {}
            Err(e) => {
                // Without knowing whether it fired, not firing is the side
                // that keeps the at-most-once promise.
                tracing::error!(schedule = %name, %key, error = %e, "cannot read the fire claim; this fire is skipped");
                return;
            }
        }
        let claim = serde_json::json!({
            "schedule": name,
            "scheduledFor": at.to_rfc3339_opts(SecondsFormat::Secs, true),
            "claimedAt": self.clock.now().to_rfc3339_opts(SecondsFormat::Millis, true),
        });
        if let Err(e) = self.store.kv_put(CLAIMS_NAMESPACE, &key, claim).await {
            tracing::error!(schedule = %name, %key, error = %e, "cannot record the fire claim; this fire is skipped");
            return;
        }
        let schedule = Arc::clone(&self.schedule);
        let runner = Arc::clone(&self.runner);
        // Spawned, not awaited: a slow run must not hold up the next fire.
        tokio::spawn(async move {
            match runner.run(&schedule, Trigger::Scheduled(at)).await {
                Ok(done) => {
                    tracing::info!(schedule = %schedule.name, sessions = ?done.session_ids, "schedule fired")
                }
                Err(e) => {
                    tracing::error!(schedule = %schedule.name, error = %e, "schedule fire failed")
                }
            }
        });
    }

    /// Logs the fires between the last claim on record and `started_at`.
    async fn report_missed(&self, started_at: DateTime<Utc>) {
        let prefix = format!("{}@", self.schedule.name);
        let keys = match self.store.kv_list(CLAIMS_NAMESPACE, &prefix).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(schedule = %self.schedule.name, error = %e, "cannot list past fire claims");
                return;
            }
        };
        let last = keys
            .iter()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .max();
        if let Some(last) = last {
            let missed = self.count_between(last, started_at);
            if missed > 0 {
                tracing::warn!(schedule = %self.schedule.name, missed, last = %last, "fires missed while the server was down are skipped (catch-up policy: skip)");
            }
        }
    }

    /// Scheduled minutes in `(from, to]`, counted up to a cap so a long
    /// outage of an every-minute schedule stays cheap to report.
    fn count_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
        const CAP: usize = 10_000;
        let mut count = 0;
        let mut t = from;
        while count < CAP {
            match self.expr.next_after(t) {
                Some(n) if n <= to => {
                    count += 1;
                    t = n;
                }
                _ => break,
            }
        }
        count
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
