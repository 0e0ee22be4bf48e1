#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several schedulers over one backing store, as several `bdk serve`
//! replicas (or processes sharing a state root) run them: each scheduled
//! time fires exactly once, because the claim is one atomic
//! `kv_put_if_absent` that only one of them wins.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bdk_core::project::{Schedule, ScheduleAction};
use bdk_events::SessionId;
use bdk_scheduler::{
    CLAIMS_NAMESPACE, Dispatched, ManualClock, Runner, ScheduleError, Scheduler, Trigger, claim_key,
};
use bdk_store::{FsStore, Store};
use chrono::{DateTime, TimeZone, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, h, m, 0).unwrap()
}

/// Records which replica fired which time.
struct Recorder {
    replica: usize,
    fired: mpsc::UnboundedSender<(usize, DateTime<Utc>)>,
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
        self.fired.send((self.replica, t)).unwrap();
        Ok(Dispatched {
            schedule_id: schedule.name.clone(),
            session_ids: vec![SessionId::generate()],
            tool_call: None,
            handler: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_fire_each_due_time_once() {
    const REPLICAS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at(9, 0));
    let (tx, mut fired) = mpsc::unbounded_channel();
    let schedule = Schedule {
        name: "nightly".to_owned(),
        path: PathBuf::from("agent/schedules/nightly.md"),
        cron: "* * * * *".to_owned(),
        action: ScheduleAction::Prompt {
            prompt: "Do the thing.".to_owned(),
        },
    };
    let mut schedulers = Vec::new();
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for replica in 0..REPLICAS {
        // Each replica opens the shared state on its own, as a separate
        // process would: no in-memory state is shared between them.
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
        stores.push(Arc::clone(&store));
        schedulers.push(
            Scheduler::start(
                std::slice::from_ref(&schedule),
                store,
                Arc::new(Recorder {
                    replica,
                    fired: tx.clone(),
                }),
                Arc::new(clock.clone()),
                CancellationToken::new(),
            )
            .unwrap(),
        );
    }
    for minute in 1..=10 {
        // Every replica's loop is asleep until this minute, then all wake
        // together and race for the claim.
        clock.wait_for_sleepers(at(9, minute), REPLICAS).await;
        clock.set(at(9, minute));
        let (winner, t) = tokio::time::timeout(Duration::from_secs(10), fired.recv())
            .await
            .expect("a fire within the deadline")
            .unwrap();
        assert_eq!(t, at(9, minute));
        let claim = stores[(winner + 1) % REPLICAS]
            .kv_get(CLAIMS_NAMESPACE, &claim_key("nightly", t))
            .await
            .unwrap();
        assert!(claim.is_some(), "the claim of 09:{minute:02} is recorded");
    }
    // Every replica has gone back to sleep for 09:11, so any second fire of
    // 09:01-09:10 has been sent by now.
    clock.wait_for_sleepers(at(9, 11), REPLICAS).await;
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let mut extra = Vec::new();
    while let Ok(fire) = fired.try_recv() {
        extra.push(fire);
    }
    assert!(extra.is_empty(), "times fired more than once: {extra:?}");
    for scheduler in schedulers {
        scheduler.shutdown().await;
    }
}
