//! A background thread that runs a pass a while after work is scheduled,
//! and again while the pass says work is left. A leaf of the file store: it
//! knows nothing of what the pass does (the store writes deferred session
//! records back to their files with it).
//!
//! The thread starts on the first [`Ticker::schedule`] and sleeps on a
//! condition variable between passes, without a timer while nothing is
//! scheduled. It ends when the ticker is dropped or the pass says its owner
//! is gone; from then on [`Ticker::schedule`] returns false.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What a pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Nothing is left: sleep until the next [`Ticker::schedule`].
    Done,
    /// Work is left (not ready yet, or it failed): run again after the
    /// interval.
    More,
    /// The owner is gone: the thread ends, and the ticker schedules
    /// nothing more.
    Gone,
}

pub(crate) struct Ticker {
    shared: Arc<Shared>,
    name: &'static str,
    interval: Duration,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    running: bool,
    stop: bool,
    /// When the next pass runs; `None` while nothing is scheduled.
    due: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ticker {
    /// A ticker whose passes run `interval` after work is scheduled. No
    /// thread runs until the first [`Ticker::schedule`].
    pub(crate) fn new(name: &'static str, interval: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
            name,
            interval,
        }
    }

    /// Schedules a pass within the interval (an earlier schedule is kept),
    /// starting the thread with `pass` if none runs. False when no thread
    /// runs and none could be started: the caller then does the work itself.
    pub(crate) fn schedule<F>(&self, pass: F) -> bool
    where
        F: FnMut() -> Pass + Send + 'static,
    {
        let mut st = self.shared.lock();
        if st.stop {
            return false;
        }
        if st.due.is_none() {
            st.due = Some(Instant::now() + self.interval);
            self.shared.changed.notify_all();
        }
        if st.running {
            return true;
        }
        let shared = self.shared.clone();
        let interval = self.interval;
        let spawned = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || run(&shared, interval, pass));
        match spawned {
            Ok(_) => {
                st.running = true;
                true
            }
            Err(e) => {
                tracing::warn!(thread = self.name, error = %e, "could not start a background thread; doing its work in place");
                st.due = None;
                false
            }
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
    }
}

fn run(shared: &Shared, interval: Duration, mut pass: impl FnMut() -> Pass) {
    let mut st = shared.lock();
    loop {
        if st.stop {
            break;
        }
        let Some(due) = st.due else {
            st = shared
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        let now = Instant::now();
        if now < due {
            st = shared
                .changed
                .wait_timeout(st, due - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        st.due = None;
        drop(st);
        let found = pass();
        st = shared.lock();
        match found {
            Pass::Done => {}
            Pass::More => {
                if st.due.is_none() {
                    st.due = Some(Instant::now() + interval);
                }
            }
            Pass::Gone => {
                st.stop = true;
                break;
            }
        }
    }
    st.running = false;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn a_pass_runs_after_a_schedule_and_again_while_work_is_left() {
        let ticker = Ticker::new("test-ticker", Duration::from_millis(1));
        let (tx, rx) = mpsc::channel();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        assert!(ticker.schedule(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            tx.send(n).unwrap();
            if n < 3 { Pass::More } else { Pass::Done }
        }));
        for expected in 1..=3 {
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), expected);
        }
        // Done: no pass until the next schedule, which reuses the thread
        // (the closure given here is not used).
        assert!(ticker.schedule(|| unreachable!("the running thread keeps its pass")));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 4);
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn a_gone_owner_ends_the_thread_and_later_work_is_the_callers() {
        let ticker = Ticker::new("test-ticker", Duration::from_millis(1));
        let (tx, rx) = mpsc::channel();
        assert!(ticker.schedule(move || {
            tx.send(()).unwrap();
            Pass::Gone
        }));
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticker.shared.lock().running {
            assert!(Instant::now() < deadline, "the thread did not end");
            std::thread::yield_now();
        }
        assert!(!ticker.schedule(|| Pass::Done));
    }

    #[test]
    fn a_stopped_ticker_schedules_nothing() {
        let ticker = Ticker::new("test-ticker", Duration::from_secs(3600));
        let shared = ticker.shared.clone();
        assert!(ticker.schedule(|| Pass::Done));
        drop(ticker);
        // The thread sees the stop at once, not after the hour.
        let deadline = Instant::now() + Duration::from_secs(10);
        while shared.lock().running {
            assert!(Instant::now() < deadline, "the thread did not end");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
