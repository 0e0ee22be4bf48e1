//! Time as a service: the [`Clock`] the scheduler reads and sleeps on.
//!
//! Production uses [`SystemClock`]; tests use [`ManualClock`], whose time
//! only moves when the test calls [`ManualClock::advance`], so cadence can be
//! checked without real sleeps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Duration, Utc};
use futures::future::BoxFuture;
use tokio::sync::watch;

/// A source of "now" and a way to wait for a later instant.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
    /// Resolves once [`Clock::now`] has reached `t` (at once when it already has).
    fn sleep_until(&self, t: DateTime<Utc>) -> BoxFuture<'static, ()>;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, t: DateTime<Utc>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            // The wall clock can jump (NTP, suspend), so a long wait is cut
            // into slices of at most a minute and re-checked against it.
            loop {
                let left = t - Utc::now();
                if left <= Duration::zero() {
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
    pub fn advance(&self, dt: Duration) {
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

    fn sleep_until(&self, t: DateTime<Utc>) -> BoxFuture<'static, ()> {
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
                futures::future::pending::<()>().await;
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
        let sleeper = tokio::spawn(clock.sleep_until(start + Duration::minutes(2)));
        clock
            .wait_for_sleepers(start + Duration::minutes(2), 1)
            .await;
        clock.advance(Duration::minutes(1));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::minutes(1));
        sleeper.await.unwrap();
        assert_eq!(clock.now(), start + Duration::minutes(2));
        // A deadline in the past resolves at once.
        clock.sleep_until(start).await;
    }
}
