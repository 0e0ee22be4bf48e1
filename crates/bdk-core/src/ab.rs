//! A/B experiments: what the durable event streams say about them.
//!
//! The declaration is [`crate::project::Experiment`]; the host draws a new
//! session's arms and records them as `ab.assigned` (see
//! `host/ab.rs`). This module folds the other way, from recorded events
//! to figures: per experiment, each arm's weight and totals (sessions,
//! turns, failed turns, tokens, estimated cost, turn durations) and the
//! per-session assignments. There is no separate store: [`AbFold`] reads
//! only `ab.assigned` (through [`bdk_events::view::assignments`]) and each
//! turn's end (through [`bdk_models::prices::session_cost`], the same
//! pricing as the cost route), so `GET /v1/abs` and a fold computed by hand
//! over the session files agree.
//!
//! Sessions whose arm was pinned (an eval case running one arm) are listed
//! among the assignments but kept out of the arm totals: they were not
//! drawn, so counting them would bend the comparison.

use std::collections::BTreeMap;

use bdk_events::view::assignments;
use bdk_events::{AbUnit, Envelope, SessionId};
use bdk_models::prices::{PriceTable, session_cost};
use chrono::{DateTime, Utc};
use serde::Serialize;

use sha2::{Digest, Sha256};

use crate::project::{Arm, Experiment, ExperimentUnit, Project, WEIGHT_TOTAL};

/// The arm of `experiment` that `unit_key` draws: its bucket (see [`bucket`]) against the
/// arms' cumulative weights, in manifest order. `None` only when the
/// weights do not add up, which discovery never lets through.
pub fn draw<'a>(experiment: &'a Experiment, unit_key: &str) -> Option<&'a Arm> {
    let b = bucket(&experiment.name, unit_key);
    let mut upper = 0;
    for arm in &experiment.arms {
        upper += arm.weight;
        if b < upper {
            return Some(arm);
        }
    }
    None
}

/// The bucket (0 to [`WEIGHT_TOTAL`] - 1) of `unit_key` in `experiment`:
/// the first 8 bytes of SHA-256 over `<experiment>\0<unit key>`, as a
/// big-endian integer, modulo [`WEIGHT_TOTAL`]. The experiment's name is
/// part of the input so two experiments split the same sessions
/// independently; renaming an experiment redraws every new session.
pub fn bucket(experiment: &str, unit_key: &str) -> u32 {
    let mut hash = Sha256::new();
    hash.update(experiment.as_bytes());
    hash.update([0u8]);
    hash.update(unit_key.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let n = u64::from_be_bytes(first) % u64::from(WEIGHT_TOTAL);
    // Below WEIGHT_TOTAL, so it fits.
    u32::try_from(n).unwrap_or(0)
}

/// Totals over the turns of a set of sessions.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AbTotals {
    /// Sessions counted.
    pub sessions: u64,
    /// Ended turns (`turn.completed` and `turn.failed`).
    pub turns: u64,
    /// Turns that ended in `turn.failed`, whatever the status (failed,
    /// cancelled, interrupted).
    pub failed_turns: u64,
    /// Input tokens of the turns that reported usage.
    pub input_tokens: u64,
    /// Output tokens of the turns that reported usage.
    pub output_tokens: u64,
    /// Turns whose provider reported no usage (their tokens are not in the
    /// sums above).
    pub turns_without_usage: u64,
    /// The estimated cost in USD of the turns with a known price.
    pub estimated_cost_usd: f64,
    /// Turns without a known cost (unpriced model or unknown usage).
    pub unpriced_turns: u64,
    /// Summed duration of the turns with a known duration.
    pub duration_ms: u64,
    /// `duration_ms` over the turns with a known duration; `None` before
    /// the first.
    pub mean_turn_duration_ms: Option<f64>,
    /// Turns with a known duration (the divisor of the mean).
    #[serde(skip)]
    timed_turns: u64,
}

impl AbTotals {
    /// Adds `other`.
    pub fn add(&mut self, other: &AbTotals) {
        self.sessions += other.sessions;
        self.turns += other.turns;
        self.failed_turns += other.failed_turns;
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.turns_without_usage += other.turns_without_usage;
        self.estimated_cost_usd += other.estimated_cost_usd;
        self.unpriced_turns += other.unpriced_turns;
        self.duration_ms = self.duration_ms.saturating_add(other.duration_ms);
        self.timed_turns += other.timed_turns;
        self.mean_turn_duration_ms =
            (self.timed_turns > 0).then(|| self.duration_ms as f64 / self.timed_turns as f64);
    }

    /// The totals of one session's events.
    pub fn of_session(events: &[Envelope], prices: &PriceTable) -> AbTotals {
        let cost = session_cost(events, prices);
        let mut t = AbTotals {
            sessions: 1,
            ..AbTotals::default()
        };
        for turn in &cost.turns {
            t.turns += 1;
            if turn.status != "completed" {
                t.failed_turns += 1;
            }
            match &turn.usage {
                Some(u) => {
                    t.input_tokens = t.input_tokens.saturating_add(u.input_tokens);
                    t.output_tokens = t.output_tokens.saturating_add(u.output_tokens);
                }
                None => t.turns_without_usage += 1,
            }
            match turn.estimated_cost_usd {
                Some(c) => t.estimated_cost_usd += c,
                None => t.unpriced_turns += 1,
            }
            if let Some(d) = turn.duration_ms {
                t.duration_ms = t.duration_ms.saturating_add(d);
                t.timed_turns += 1;
            }
        }
        t.mean_turn_duration_ms =
            (t.timed_turns > 0).then(|| t.duration_ms as f64 / t.timed_turns as f64);
        t
    }
}

/// One arm in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArmReport {
    /// The arm.
    pub name: String,
    /// Its weight in percent; `None` for an arm the experiment no longer
    /// declares (sessions recorded it earlier).
    pub weight: Option<u32>,
    /// Totals over the sessions drawn into it (pinned ones excluded).
    pub totals: AbTotals,
}

/// One session's enrollment in an experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    /// The session.
    pub session_id: SessionId,
    /// Its arm.
    pub arm: String,
    /// What the arm was chosen by; `None` for records written before units
    /// were recorded.
    pub unit: Option<AbUnit>,
    /// The value the arm was drawn from.
    pub unit_key: Option<String>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// The session's own totals.
    pub totals: AbTotals,
}

/// One experiment in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentReport {
    /// The experiment.
    pub name: String,
    /// From the manifest.
    pub description: Option<String>,
    /// False for an experiment only the recorded sessions still name (its
    /// manifest is gone).
    pub declared: bool,
    /// Whether new sessions are enrolled (false when not declared).
    pub enabled: bool,
    /// What it draws by, when declared.
    pub unit: Option<ExperimentUnit>,
    /// Declared arms in manifest order, then arms only recorded sessions
    /// name, by name.
    pub arms: Vec<ArmReport>,
    /// Totals over every drawn session of the experiment.
    pub totals: AbTotals,
    /// Sessions with a pinned arm (evals); not in the totals.
    pub pinned_sessions: u64,
    /// Enrollments, newest first, at most the fold's limit.
    pub sessions: Vec<Assignment>,
    /// Enrollments left out of `sessions` by the limit.
    pub sessions_omitted: u64,
}

/// The fold behind `GET /v1/abs`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AbReport {
    /// Declared experiments and the ones only recorded sessions still
    /// name, by name.
    pub experiments: Vec<ExperimentReport>,
}

/// Folds sessions into an [`AbReport`], one session at a time.
pub struct AbFold<'a> {
    prices: &'a PriceTable,
    limit: usize,
    experiments: BTreeMap<String, ExperimentReport>,
}

impl<'a> AbFold<'a> {
    /// A fold over `project`'s declared experiments (each listed even before
    /// its first session), pricing turns with `prices` and keeping at most
    /// `limit` assignments per experiment in the report.
    pub fn new(project: &Project, prices: &'a PriceTable, limit: usize) -> AbFold<'a> {
        let experiments = project
            .experiments
            .iter()
            .map(|e| {
                let report = ExperimentReport {
                    name: e.name.clone(),
                    description: e.description.clone(),
                    declared: true,
                    enabled: e.enabled,
                    unit: Some(e.unit),
                    arms: e
                        .arms
                        .iter()
                        .map(|a| ArmReport {
                            name: a.name.clone(),
                            weight: Some(a.weight),
                            totals: AbTotals::default(),
                        })
                        .collect(),
                    totals: AbTotals::default(),
                    pinned_sessions: 0,
                    sessions: Vec::new(),
                    sessions_omitted: 0,
                };
                (e.name.clone(), report)
            })
            .collect();
        AbFold {
            prices,
            limit,
            experiments,
        }
    }

    /// Adds one session: its id, creation time and every event of it.
    pub fn add(&mut self, session_id: &SessionId, created_at: DateTime<Utc>, events: &[Envelope]) {
        let enrolled = assignments(events);
        if enrolled.is_empty() {
            return;
        }
        let totals = AbTotals::of_session(events, self.prices);
        for a in enrolled {
            let report = self
                .experiments
                .entry(a.experiment.clone())
                .or_insert_with(|| ExperimentReport {
                    name: a.experiment.clone(),
                    description: None,
                    declared: false,
                    enabled: false,
                    unit: None,
                    arms: Vec::new(),
                    totals: AbTotals::default(),
                    pinned_sessions: 0,
                    sessions: Vec::new(),
                    sessions_omitted: 0,
                });
            if a.unit == Some(AbUnit::Pinned) {
                report.pinned_sessions += 1;
            } else {
                let arm = match report.arms.iter_mut().position(|r| r.name == a.arm) {
                    Some(i) => &mut report.arms[i],
                    None => {
                        report.arms.push(ArmReport {
                            name: a.arm.clone(),
                            weight: None,
                            totals: AbTotals::default(),
                        });
                        let last = report.arms.len() - 1;
                        &mut report.arms[last]
                    }
                };
                arm.totals.add(&totals);
                report.totals.add(&totals);
            }
            report.sessions.push(Assignment {
                session_id: session_id.clone(),
                arm: a.arm.clone(),
                unit: a.unit,
                unit_key: a.unit_key.clone(),
                created_at,
                totals: totals.clone(),
            });
        }
    }

    /// The report: arms no longer declared sorted after the declared ones,
    /// assignments newest first and cut at the limit.
    pub fn finish(self) -> AbReport {
        let limit = self.limit;
        let experiments = self
            .experiments
            .into_values()
            .map(|mut e| {
                let declared = e.arms.iter().take_while(|a| a.weight.is_some()).count();
                e.arms[declared..].sort_by(|a, b| a.name.cmp(&b.name));
                e.sessions.sort_by(|a, b| {
                    b.created_at
                        .cmp(&a.created_at)
                        .then_with(|| b.session_id.as_str().cmp(a.session_id.as_str()))
                });
                let total = e.sessions.len();
                e.sessions.truncate(limit);
                e.sessions_omitted = (total - e.sessions.len()) as u64;
                e
            })
            .collect();
        AbReport { experiments }
    }
}
