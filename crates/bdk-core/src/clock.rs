//! Time as a service: the one [`Clock`] the host, its tools, the reminder
//! timer and the schedule cadence all read and sleep on.
//!
//! Production uses [`SystemClock`]; tests use [`ManualClock`], whose time
//! only moves when the test moves it, so cadence and timers are checked
//! without real sleeps. A host takes its clock from
//! [`crate::host::HostBuilder::clock`] and hands the same one to
//! [`crate::tool::ToolContext::now`] (unless the session pins `asOf`) and to
//! the reminder timer; `bdk-scheduler` re-exports these types.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;

/// A boxed future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of "now" and a way to wait for a later instant.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
    /// Resolves once [`Clock::now`] has reached `t` (at once when it already has).
    fn sleep_until(&self, t: DateTime<Utc>) -> Sleep;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, t: DateTime<Utc>) -> Sleep {
        Box::pin(async move {
            // The wall clock can jump (NTP, suspend), so a long wait is cut
            // into slices of at most a minute and re-checked against it.
            loop {
                let left = t - Utc::now();
                if left <= TimeDelta::zero() {
                    return;
                }
                let slice = left
                    .to_std()
                    .unwrap_or_default()
                    .min(std::time::Duration::from_secs(60));
                tokio::time::sleep(slice).await;
            }
        })
    }
}

/// A clock that moves only when told to; sleepers wake when it passes their
/// deadline. Cheap to clone (clones share the time and the sleepers).
///
/// It also knows who is asleep and until when, so a test can wait until the
/// code under test has reached its next wait ([`ManualClock::wait_for_sleepers`])
/// before it moves the clock, instead of guessing with sleeps or yields.
#[derive(Clone, Debug)]
pub struct ManualClock {
    time: Arc<watch::Sender<DateTime<Utc>>>,
    /// The deadlines of pending sleeps, by sleep id.
    sleepers: Arc<watch::Sender<BTreeMap<u64, DateTime<Utc>>>>,
    next_id: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            time: Arc::new(watch::Sender::new(start)),
            sleepers: Arc::new(watch::Sender::new(BTreeMap::new())),
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Waits until at least `n` pending sleeps have the deadline `t`.
    pub async fn wait_for_sleepers(&self, t: DateTime<Utc>, n: usize) {
        let mut rx = self.sleepers.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx
            .wait_for(|s| s.values().filter(|d| **d == t).count() >= n)
            .await;
    }

    /// Moves the clock forward by `dt` and wakes every sleeper whose deadline
    /// has been reached.
    pub fn advance(&self, dt: TimeDelta) {
        self.time.send_modify(|t| *t += dt);
    }

    /// Sets the clock to `t` (forward or backward) and wakes due sleepers.
    pub fn set(&self, t: DateTime<Utc>) {
        self.time.send_replace(t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.time.borrow()
    }

    fn sleep_until(&self, t: DateTime<Utc>) -> Sleep {
        let mut rx = self.time.subscribe();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sleepers.send_modify(|s| {
            s.insert(id, t);
        });
        let registered = Registered {
            id,
            sleepers: Arc::clone(&self.sleepers),
        };
        Box::pin(async move {
            let _registered = registered;
            // `wait_for` checks the current value first, then every change;
            // it only errs when the sender is gone, and then nothing will
            // ever move this clock again, so the sleeper never wakes.
            if rx.wait_for(|now| *now >= t).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// Removes a sleep from [`ManualClock`]'s list when it ends or is dropped.
struct Registered {
    id: u64,
    sleepers: Arc<watch::Sender<BTreeMap<u64, DateTime<Utc>>>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.sleepers.send_modify(|s| {
            s.remove(&self.id);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_on_advance() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        let sleeper = tokio::spawn(clock.sleep_until(start + TimeDelta::minutes(2)));
        clock
            .wait_for_sleepers(start + TimeDelta::minutes(2), 1)
            .await;
        clock.advance(TimeDelta::minutes(1));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(TimeDelta::minutes(1));
        sleeper.await.unwrap();
        assert_eq!(clock.now(), start + TimeDelta::minutes(2));
        // A deadline in the past resolves at once.
        clock.sleep_until(start).await;
    }

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_as_it_passes_them() {
        let start = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        let handle = tokio::spawn(clock.sleep_until(start + TimeDelta::minutes(10)));
        clock.advance(TimeDelta::minutes(5));
        tokio::task::yield_now().await;
        assert!(!handle.is_finished());
        // Jumping past the deadline wakes it too.
        clock.set(start + TimeDelta::hours(1));
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_sleep_is_no_longer_listed() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        let t = start + TimeDelta::minutes(1);
        let sleep = clock.sleep_until(t);
        clock.wait_for_sleepers(t, 1).await;
        drop(sleep);
        assert!(clock.sleepers.borrow().is_empty());
    }
}
