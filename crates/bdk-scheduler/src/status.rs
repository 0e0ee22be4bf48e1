//! What the cadence leaves behind for people to read: the fires it skipped
//! under the catch-up policy and the outcome of each schedule's last run.
//!
//! Both are durable records in the claims namespace ([`CLAIMS_NAMESPACE`],
//! `schedules`), beside the claims, under keys no claim can take (schedule
//! names never contain `:`): `missed:<name>` ([`MissedFires`]) and
//! `last:<name>` ([`LastRun`]). [`schedule_status`] gathers them per
//! schedule with the next fire time; `GET /v1/dev/schedules` serves it.
//!
//! A missed fire is not a session event: it belongs to no session (nothing
//! ran), and the session event vocabulary is closed. The record plus a
//! `warn` log line (which `/v1/logs` shows) are how it is reported.

use std::sync::Arc;

use bdk_core::cron::CronExpr;
use bdk_core::project::{Schedule, ScheduleAction};
use bdk_events::SessionId;
use bdk_store::{Store, StoreError};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key-value namespace holding fire claims (and, under their own
/// keys, the missed-fire and last-run records).
pub const CLAIMS_NAMESPACE: &str = "schedules";

/// How many incidents a [`MissedFires`] record keeps (the newest).
pub const MAX_INCIDENTS: usize = 20;
/// How many skipped minutes one [`MissedIncident`] lists.
pub const MAX_LISTED: usize = 60;

/// The key of `name`'s missed-fires record.
pub fn missed_key(name: &str) -> String {
    format!("missed:{name}")
}

/// The key of `name`'s last-run record.
pub fn last_run_key(name: &str) -> String {
    format!("last:{name}")
}

/// Why fires were skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissedReason {
    /// They fell due while the server was not running (counted at startup
    /// from the last claim on record).
    ServerDown,
    /// The running process woke late (suspended, or the clock jumped) and
    /// jumped over them.
    LateWake,
}

impl MissedReason {
    /// The wire name (`server_down`, `late_wake`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServerDown => "server_down",
            Self::LateWake => "late_wake",
        }
    }
}

/// One stretch of skipped fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissedIncident {
    /// When the scheduler noticed.
    pub detected_at: DateTime<Utc>,
    /// Why they were skipped.
    pub reason: MissedReason,
    /// How many scheduled minutes were skipped (counting stops at 10,000).
    pub count: usize,
    /// The first skipped minutes, oldest first (at most [`MAX_LISTED`]).
    pub skipped: Vec<DateTime<Utc>>,
}

/// The `missed:<name>` record: every skip of a schedule under the catch-up
/// policy, newest incident last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissedFires {
    /// The schedule.
    pub schedule: String,
    /// The catch-up policy that skipped them (`skip`).
    pub policy: String,
    /// Skipped fires over all incidents, including those no longer listed.
    pub total: u64,
    /// The newest incidents (at most [`MAX_INCIDENTS`]).
    pub incidents: Vec<MissedIncident>,
}

/// The outcome of a tool schedule's call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRun {
    /// The tool.
    pub tool_name: String,
    /// The call id (`tool_<name>_...`).
    pub call_id: String,
    /// True when the tool reported an error.
    pub is_error: bool,
    /// What the tool returned.
    pub result: Value,
    /// How long it ran.
    pub duration_ms: u64,
}

/// The `last:<name>` record: how the schedule's latest fire ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastRun {
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// The scheduled minute, or `None` for a dispatch by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<DateTime<Utc>>,
    /// True when the action ran (for a tool schedule: the call happened, even
    /// if the tool answered an error; see `toolCall.isError`).
    pub ok: bool,
    /// Sessions the fire started or continued.
    pub session_ids: Vec<SessionId>,
    /// The tool call of a tool schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolRun>,
    /// What a handler schedule's program answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<HandlerRun>,
    /// Why the fire failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The failure's code, for a handler's (`handler_timeout`,
    /// `handler_exited`, `handler_bad_answer`, ...,
    /// `handler_reported_failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Fires that failed in a row up to this one (0 after a success).
    #[serde(default)]
    pub failures: u64,
    /// The latest failed fire, kept across later successes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Failure>,
}

/// A failed fire, as the last-run record remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// When it finished.
    pub at: DateTime<Utc>,
    /// Why it failed.
    pub error: String,
}

/// What a handler schedule's program answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandlerRun {
    /// Its answer (replaced by a note when larger than
    /// [`MAX_ANSWER_BYTES`]).
    pub answer: Value,
    /// How long it ran.
    pub duration_ms: u64,
    /// The sessions its answer listed (`sessionIds`).
    pub session_ids: Vec<SessionId>,
}

/// The largest handler answer a last-run record keeps.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// `answer`, or a note saying how large it was when it is too large to keep.
pub(crate) fn capped_answer(answer: Value) -> Value {
    let size = answer.to_string().len();
    if size <= MAX_ANSWER_BYTES {
        answer
    } else {
        serde_json::json!({"truncated": true, "bytes": size})
    }
}

/// Adds an incident to `name`'s missed-fires record.
pub(crate) async fn record_missed(
    store: &Arc<dyn Store>,
    name: &str,
    incident: MissedIncident,
) -> Result<(), StoreError> {
    let key = missed_key(name);
    let mut record = match store.kv_get(CLAIMS_NAMESPACE, &key).await? {
        Some(v) => serde_json::from_value::<MissedFires>(v).ok(),
        None => None,
    }
    .unwrap_or_else(|| MissedFires {
        schedule: name.to_owned(),
        policy: "skip".to_owned(),
        total: 0,
        incidents: Vec::new(),
    });
    record.total += incident.count as u64;
    record.incidents.push(incident);
    let excess = record.incidents.len().saturating_sub(MAX_INCIDENTS);
    record.incidents.drain(..excess);
    let value = serde_json::to_value(&record).unwrap_or(Value::Null);
    store.kv_put(CLAIMS_NAMESPACE, &key, value).await
}

/// Writes `name`'s last-run record, logging (not failing) on a store error.
/// A scheduled run that ends after a run of a later minute (a slow one)
/// leaves the later record in place. The failure count and the latest
/// failure carry over from the record it replaces.
pub(crate) async fn record_last_run(store: &Arc<dyn Store>, name: &str, run: &LastRun) {
    let old = match store.kv_get(CLAIMS_NAMESPACE, &last_run_key(name)).await {
        Ok(Some(old)) => serde_json::from_value::<LastRun>(old).ok(),
        _ => None,
    };
    if let Some(mine) = run.scheduled_for
        && let Some(old) = &old
        && old.scheduled_for.is_some_and(|theirs| theirs > mine)
    {
        return;
    }
    let mut run = run.clone();
    if run.ok {
        run.failures = 0;
        run.last_failure = old.and_then(|o| o.last_failure);
    } else {
        run.failures = old.map_or(0, |o| o.failures) + 1;
        run.last_failure = Some(Failure {
            at: run.finished_at,
            error: run.error.clone().unwrap_or_default(),
        });
    }
    let value = serde_json::to_value(&run).unwrap_or(Value::Null);
    if let Err(e) = store
        .kv_put(CLAIMS_NAMESPACE, &last_run_key(name), value)
        .await
    {
        tracing::warn!(schedule = %name, error = %e, "cannot record the schedule's last run");
    }
}

/// A schedule as `GET /v1/dev/schedules` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// The schedule name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// `prompt`, `handoff`, `tool` or `handler`.
    pub kind: &'static str,
    /// The next scheduled minute after now (whether or not the cadence runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The latest scheduled minute claimed (fired) on record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_claimed_for: Option<DateTime<Utc>>,
    /// How the latest fire ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Fires skipped under the catch-up policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<MissedFires>,
}

/// The kind label of a schedule's action.
pub fn kind_of(schedule: &Schedule) -> &'static str {
    match schedule.action {
        ScheduleAction::Prompt { .. } => "prompt",
        ScheduleAction::Handoff { .. } => "handoff",
        ScheduleAction::Tool { .. } => "tool",
        ScheduleAction::Handler { .. } => "handler",
    }
}

/// The latest claimed minute of `name`, from the claim keys.
pub(crate) async fn last_claim(
    store: &Arc<dyn Store>,
    name: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let prefix = format!("{name}@");
    Ok(store
        .kv_list(CLAIMS_NAMESPACE, &prefix)
        .await?
        .iter()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .max())
}

/// Every schedule's status at `now`, in discovery order. A record that does
/// not read back is left out rather than failing the whole answer.
pub async fn schedule_status(
    store: &Arc<dyn Store>,
    schedules: &[Schedule],
    now: DateTime<Utc>,
) -> Result<Vec<ScheduleStatus>, StoreError> {
    let mut out = Vec::with_capacity(schedules.len());
    for s in schedules {
        let read = |key: String| async move { store.kv_get(CLAIMS_NAMESPACE, &key).await };
        let last_run = read(last_run_key(&s.name))
            .await?
            .and_then(|v| serde_json::from_value(v).ok());
        let missed = read(missed_key(&s.name))
            .await?
            .and_then(|v| serde_json::from_value(v).ok());
        out.push(ScheduleStatus {
            name: s.name.clone(),
            cron: s.cron.clone(),
            kind: kind_of(s),
            next_fire_at: CronExpr::parse(&s.cron)
                .ok()
                .and_then(|e| e.next_after(now)),
            last_claimed_for: last_claim(store, &s.name).await?,
            last_run,
            missed,
        });
    }
    Ok(out)
}

/// A minute as claim keys and logs write it.
pub(crate) fn minute(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}
