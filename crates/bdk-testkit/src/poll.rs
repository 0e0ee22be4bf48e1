//! The one bounded poll, for what no event announces: a process that starts
//! or dies, a file a hook or a subprocess writes, a port that opens, a gauge
//! or a record outside the event log. What a session records is awaited
//! through [`crate::wait`] instead.
//!
//! Both forms check, then pause [`STEP`] between checks, and fail after a
//! limit ([`PATIENCE`] unless a test names its own) with what they waited
//! for.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a waiter waits before the test fails. Generous: on a loaded
/// machine a slow pass is still a pass, and a failure still ends.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The pause between two checks.
pub const STEP: Duration = Duration::from_millis(20);

/// Checks `check` until it yields a value, and returns it.
pub async fn until_some<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(STEP).await;
    }
}

/// Checks `check` until it holds.
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_some(what, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await;
}

/// The blocking form of [`until_some`], for synchronous tests and threads,
/// with its own `limit`.
pub fn blocking_until_some<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(STEP);
    }
}

/// The blocking form of [`until`], waiting up to [`PATIENCE`].
pub fn blocking_until(what: &str, mut check: impl FnMut() -> bool) {
    blocking_until_some(what, PATIENCE, || check().then_some(()));
}
