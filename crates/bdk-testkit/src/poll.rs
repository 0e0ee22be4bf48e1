//! The one bounded poll, for what no event announces: a process that starts
//! or dies, a file a hook or a subprocess writes, a port that opens, a gauge
//! or a record outside the event log. What a session records is awaited
//! through [`crate::wait`] instead.
//!
//! Every form checks, then pauses [`STEP`] between checks (or a step of its
//! own), and fails after a
//! limit ([`PATIENCE`] unless a test names its own) with what it waited
//! for. The `_ok` forms take a check that answers `Err(state)` while it
//! waits, and the failure shows the last state it saw.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a waiter waits before the test fails. Generous: on a loaded
/// machine a slow pass is still a pass, and a failure still ends.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The pause between two checks.
pub const STEP: Duration = Duration::from_millis(20);

/// Checks `check` until it yields `Ok`, for up to `limit`, and returns the
/// value. While it answers `Err(state)` it keeps waiting; the failure
/// message ends with the last such state.
pub async fn until_ok_within<T, E, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    until_ok_paced(what, limit, STEP, check).await
}

/// [`until_ok_within`] with `step` between checks instead of [`STEP`], for
/// a check that is itself a load on what it watches (several requests to
/// servers that are busy with the thing awaited).
pub async fn until_ok_paced<T, E, F, Fut>(
    what: &str,
    limit: Duration,
    step: Duration,
    mut check: F,
) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) => assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; last seen: {state}"
            ),
        }
        tokio::time::sleep(step).await;
    }
}

/// Checks `check` until it yields a value, and returns it.
pub async fn until_some<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until_ok_within(what, PATIENCE, || {
        let value = check();
        async move { value.await.ok_or("nothing yet") }
    })
    .await
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

/// The blocking form of [`until_ok_within`], for synchronous tests and
/// threads.
pub fn blocking_until_ok<T, E: Display>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(value) => return value,
            Err(state) => assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; last seen: {state}"
            ),
        }
        std::thread::sleep(STEP);
    }
}

/// The blocking form of [`until_some`], with its own `limit`.
pub fn blocking_until_some<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    blocking_until_ok(what, limit, || check().ok_or("nothing yet"))
}

/// The blocking form of [`until`], waiting up to [`PATIENCE`].
pub fn blocking_until(what: &str, mut check: impl FnMut() -> bool) {
    blocking_until_some(what, PATIENCE, || check().then_some(()));
}
