#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The cadence loop under a manual clock: fires, claims, restarts, catch-up
//! and slow runs. The runner is a recorder, so no model is involved.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bdk_core::project::{Schedule, ScheduleAction};
use bdk_events::SessionId;
use bdk_scheduler::{
    CLAIMS_NAMESPACE, Clock, CronError, Dispatched, ManualClock, MissedFires, MissedReason, Runner,
    ScheduleError, Scheduler, Trigger, claim_key, schedule_status,
};
use bdk_store::{FsStore, Store};
use bdk_testkit::{PATIENCE, poll};
use chrono::{DateTime, TimeZone, Utc};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, h, m, s).unwrap()
}

fn schedule(name: &str, cron: &str) -> Schedule {
    Schedule {
        name: name.to_owned(),
        path: PathBuf::from(format!("agent/schedules/{name}.md")),
        cron: cron.to_owned(),
        action: ScheduleAction::Prompt {
            prompt: "Do the thing.".to_owned(),
        },
    }
}

/// Records every fire; runs of the schedule named `slow` wait for a permit
/// on `gate` after recording, which the test hands out.
struct Recorder {
    fired: mpsc::UnboundedSender<(String, DateTime<Utc>)>,
    gate: Arc<Semaphore>,
}

#[async_trait]
impl Runner for Recorder {
    async fn run(
        &self,
        schedule: &Schedule,
        trigger: Trigger,
    ) -> Result<Dispatched, ScheduleError> {
        let Trigger::Scheduled(t) = trigger else {
            panic!("the cadence only fires scheduled minutes");
        };
        self.fired.send((schedule.name.clone(), t)).unwrap();
        if schedule.name == "slow" {
            let _permit = self.gate.acquire().await.unwrap();
        }
        Ok(Dispatched {
            schedule_id: schedule.name.clone(),
            session_ids: vec![SessionId::generate()],
            tool_call: None,
            handler: None,
        })
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: ManualClock,
    fired: mpsc::UnboundedReceiver<(String, DateTime<Utc>)>,
    runner: Arc<Recorder>,
    gate: Arc<Semaphore>,
}

fn rig(start: DateTime<Utc>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(0));
    Rig {
        _dir: dir,
        store,
        clock: ManualClock::new(start),
        fired: rx,
        runner: Arc::new(Recorder {
            fired: tx,
            gate: Arc::clone(&gate),
        }),
        gate,
    }
}

impl Rig {
    fn start(&self, schedules: &[Schedule]) -> Result<Scheduler, ScheduleError> {
        Scheduler::start(
            schedules,
            Arc::clone(&self.store),
            self.runner.clone(),
            Arc::new(self.clock.clone()),
            CancellationToken::new(),
        )
    }

    async fn next_fire(&mut self) -> (String, DateTime<Utc>) {
        tokio::time::timeout(std::time::Duration::from_secs(10), self.fired.recv())
            .await
            .expect("a fire within the deadline")
            .unwrap()
    }

    /// Lets every ready task run, then checks that nothing else fired.
    async fn assert_quiet(&mut self) {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(self.fired.try_recv().is_err(), "unexpected fire");
    }
}

#[tokio::test]
async fn fires_on_cadence_and_claims_each_minute() {
    let mut rig = rig(at(9, 2, 0));
    let scheduler = rig.start(&[schedule("report", "*/5 * * * *")]).unwrap();
    for minute in [5, 10, 15] {
        rig.clock.wait_for_sleepers(at(9, minute, 0), 1).await;
        rig.clock.set(at(9, minute, 0));
        assert_eq!(
            rig.next_fire().await,
            ("report".to_owned(), at(9, minute, 0))
        );
        let claim = rig
            .store
            .kv_get(CLAIMS_NAMESPACE, &claim_key("report", at(9, minute, 0)))
            .await
            .unwrap();
        assert!(claim.is_some(), "claim for 09:{minute}");
    }
    assert_eq!(
        claim_key("report", at(9, 5, 0)),
        "report@2026-03-10T09:05:00Z"
    );
    rig.clock.wait_for_sleepers(at(9, 20, 0), 1).await;
    rig.clock.set(at(9, 19, 59));
    rig.assert_quiet().await;
    scheduler.shutdown().await;
    // Stopped: the clock passing 09:20 fires nothing.
    rig.clock.set(at(9, 20, 0));
    rig.assert_quiet().await;
}

#[tokio::test]
async fn a_claim_found_after_a_restart_at_the_boundary_is_not_fired_again() {
    let mut rig = rig(at(8, 59, 30));
    let first = rig.start(&[schedule("hourly", "0 * * * *")]).unwrap();
    rig.clock.wait_for_sleepers(at(9, 0, 0), 1).await;
    rig.clock.set(at(9, 0, 0));
    assert_eq!(rig.next_fire().await.1, at(9, 0, 0));
    first.shutdown().await;

    // The process comes back with its clock still just before the boundary
    // (a restart racing the minute, or a clock stepped back): the 09:00
    // claim is on disk, so 09:00 must not fire a second time.
    rig.clock.set(at(8, 59, 50));
    let second = rig.start(&[schedule("hourly", "0 * * * *")]).unwrap();
    rig.clock.wait_for_sleepers(at(9, 0, 0), 1).await;
    rig.clock.set(at(9, 0, 0));
    // Once the loop waits for 10:00 it has dealt with 09:00.
    rig.clock.wait_for_sleepers(at(10, 0, 0), 1).await;
    rig.assert_quiet().await;
    rig.clock.set(at(10, 0, 0));
    assert_eq!(rig.next_fire().await.1, at(10, 0, 0));
    second.shutdown().await;
    rig.assert_quiet().await;
}

#[tokio::test]
async fn fires_missed_while_down_are_skipped() {
    let mut rig = rig(at(9, 3, 30));
    // The last fire on record is 09:00; 09:01..09:03 passed while down.
    rig.store
        .kv_put(
            CLAIMS_NAMESPACE,
            &claim_key("tick", at(9, 0, 0)),
            serde_json::json!({}),
        )
        .await
        .unwrap();
    let scheduler = rig.start(&[schedule("tick", "* * * * *")]).unwrap();
    rig.clock.wait_for_sleepers(at(9, 4, 0), 1).await;
    rig.clock.set(at(9, 4, 0));
    assert_eq!(rig.next_fire().await.1, at(9, 4, 0));
    rig.clock.wait_for_sleepers(at(9, 5, 0), 1).await;
    rig.assert_quiet().await;

    // Woken late while running (the clock jumped three minutes): the due
    // fire runs once, the minutes jumped over are skipped, not burst.
    rig.clock.set(at(9, 7, 0));
    assert_eq!(rig.next_fire().await.1, at(9, 5, 0));
    rig.clock.wait_for_sleepers(at(9, 8, 0), 1).await;
    rig.assert_quiet().await;
    rig.clock.set(at(9, 8, 0));
    assert_eq!(rig.next_fire().await.1, at(9, 8, 0));
    scheduler.shutdown().await;

    // Both skips are on record for people to read, oldest first.
    let missed: MissedFires = serde_json::from_value(
        rig.store
            .kv_get(CLAIMS_NAMESPACE, "missed:tick")
            .await
            .unwrap()
            .expect("a missed-fires record"),
    )
    .unwrap();
    assert_eq!(missed.schedule, "tick");
    assert_eq!(missed.policy, "skip");
    assert_eq!(missed.total, 5);
    let [down, late] = missed.incidents.as_slice() else {
        panic!("two incidents: {missed:?}");
    };
    assert_eq!(down.reason, MissedReason::ServerDown);
    assert_eq!(down.count, 3);
    assert_eq!(down.skipped, vec![at(9, 1, 0), at(9, 2, 0), at(9, 3, 0)]);
    assert_eq!(down.detected_at, at(9, 3, 30));
    assert_eq!(late.reason, MissedReason::LateWake);
    assert_eq!(late.skipped, vec![at(9, 6, 0), at(9, 7, 0)]);
    assert_eq!(late.detected_at, at(9, 7, 0));

    // The status view shows it with the latest claim and the next fire.
    // The last-run record is written when the run ends, after the runner
    // reported the fire, so wait (bounded) for the 09:08 run's record.
    let schedules = [schedule("tick", "* * * * *")];
    let status = poll::until_ok_within("the 09:08 run's record", PATIENCE, || async {
        let status = schedule_status(&rig.store, &schedules, at(9, 8, 0))
            .await
            .unwrap();
        let last = status[0].last_run.as_ref().and_then(|r| r.scheduled_for);
        if last == Some(at(9, 8, 0)) {
            Ok(status)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].kind, "prompt");
    assert_eq!(status[0].last_claimed_for, Some(at(9, 8, 0)));
    assert_eq!(status[0].next_fire_at, Some(at(9, 9, 0)));
    assert_eq!(status[0].missed.as_ref(), Some(&missed));
    let last = status[0].last_run.as_ref().unwrap();
    assert!(last.ok);
    assert_eq!(last.session_ids.len(), 1);
    assert_eq!(last.error, None);
}

#[tokio::test]
async fn a_first_start_with_no_claims_records_no_misses() {
    let mut rig = rig(at(9, 3, 30));
    let scheduler = rig.start(&[schedule("fresh", "* * * * *")]).unwrap();
    rig.clock.wait_for_sleepers(at(9, 4, 0), 1).await;
    rig.clock.set(at(9, 4, 0));
    assert_eq!(rig.next_fire().await.1, at(9, 4, 0));
    rig.clock.wait_for_sleepers(at(9, 5, 0), 1).await;
    scheduler.shutdown().await;
    assert_eq!(
        rig.store
            .kv_get(CLAIMS_NAMESPACE, "missed:fresh")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn missed_fire_records_stay_bounded() {
    let mut rig = rig(at(9, 0, 0));
    rig.store
        .kv_put(
            CLAIMS_NAMESPACE,
            &claim_key("busy", at(9, 0, 0)),
            serde_json::json!({}),
        )
        .await
        .unwrap();
    // A week down for an every-minute schedule.
    rig.clock.set(at(9, 0, 30) + chrono::Duration::days(7));
    let scheduler = rig.start(&[schedule("busy", "* * * * *")]).unwrap();
    let next = at(9, 1, 0) + chrono::Duration::days(7);
    rig.clock.wait_for_sleepers(next, 1).await;
    scheduler.shutdown().await;
    rig.assert_quiet().await;
    let missed: MissedFires = serde_json::from_value(
        rig.store
            .kv_get(CLAIMS_NAMESPACE, "missed:busy")
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let incident = &missed.incidents[0];
    // Counting stops at 10,000; the list keeps the first 60.
    assert_eq!(incident.count, 10_000);
    assert_eq!(incident.skipped.len(), bdk_scheduler::status::MAX_LISTED);
    assert_eq!(incident.skipped[0], at(9, 1, 0));
}

#[tokio::test]
async fn a_slow_run_does_not_block_the_next_fire() {
    let mut rig = rig(at(9, 0, 0));
    let scheduler = rig
        .start(&[
            schedule("slow", "* * * * *"),
            schedule("other", "*/2 * * * *"),
        ])
        .unwrap();
    rig.clock.wait_for_sleepers(at(9, 1, 0), 1).await;
    rig.clock.set(at(9, 1, 0));
    assert_eq!(rig.next_fire().await, ("slow".to_owned(), at(9, 1, 0)));
    rig.clock.wait_for_sleepers(at(9, 2, 0), 2).await;
    // The 09:01 run is still waiting on the gate; 09:02 fires regardless,
    // for this schedule and for the other one.
    rig.clock.set(at(9, 2, 0));
    let mut got = vec![rig.next_fire().await, rig.next_fire().await];
    got.sort();
    assert_eq!(
        got,
        vec![
            ("other".to_owned(), at(9, 2, 0)),
            ("slow".to_owned(), at(9, 2, 0))
        ]
    );
    assert_eq!(rig.gate.available_permits(), 0);
    rig.gate.add_permits(2);
    scheduler.shutdown().await;
}

#[tokio::test]
async fn impossible_and_invalid_expressions_refuse_to_start() {
    let rig = rig(at(9, 0, 0));
    let err = rig
        .start(&[schedule("ok", "* * * * *"), schedule("never", "0 0 31 2 *")])
        .err()
        .unwrap();
    assert!(
        matches!(&err, ScheduleError::Cron { name, source: CronError::Never(_) } if name == "never"),
        "{err}"
    );
    assert!(err.to_string().contains("never fires"), "{err}");
    let err = rig.start(&[schedule("bad", "* * *")]).err().unwrap();
    assert!(err.to_string().contains("expected 5 fields"), "{err}");
    assert_eq!(rig.clock.now(), at(9, 0, 0));
}

/// Claims older than a day are pruned as new minutes are claimed, so a
/// frequent schedule does not grow the store without bound, and pruning
/// never lets a minute fire twice.
#[tokio::test]
async fn old_claims_are_pruned_after_a_day() {
    let mut rig = rig(at(0, 30, 0));
    let scheduler = rig.start(&[schedule("hourly", "0 * * * *")]).unwrap();
    let first = at(1, 0, 0);
    for h in 0..30i64 {
        let t = first + chrono::TimeDelta::hours(h);
        rig.clock.wait_for_sleepers(t, 1).await;
        rig.clock.set(t);
        assert_eq!(rig.next_fire().await, ("hourly".to_owned(), t));
    }
    let last = first + chrono::TimeDelta::hours(29);
    let claims = rig
        .store
        .kv_list(CLAIMS_NAMESPACE, "hourly@")
        .await
        .unwrap();
    // The newest claim and the 24 hours before it (inclusive) remain.
    assert_eq!(claims.len(), 25, "{claims:?}");
    assert!(claims.contains(&claim_key("hourly", last)));
    assert!(claims.contains(&claim_key("hourly", last - bdk_scheduler::CLAIM_RETENTION)));
    assert!(!claims.contains(&claim_key("hourly", first)));
    rig.assert_quiet().await;
    scheduler.shutdown().await;
}
