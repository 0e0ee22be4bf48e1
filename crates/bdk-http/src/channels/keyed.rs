//! An async mutex per string key, for serializing work on one continuation
//! token without a global lock.
//!
//! Entries live only while someone holds or waits for the key: the last
//! participant to leave removes the entry, so a server that sees millions of
//! distinct keys keeps only the ones in flight.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// A map of per-key async locks.
#[derive(Default)]
pub(crate) struct KeyedLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One participant (holder or waiter) of a key. Every participant owns
/// exactly one reference to the key's mutex and the map owns one more, so
/// the reference count says exactly how many participants remain.
struct Participant<'a> {
    locks: &'a KeyedLocks,
    key: &'a str,
    mutex: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Participant<'_> {
    fn drop(&mut self) {
        let mut map = self
            .locks
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // References are only cloned under the map lock, so this count
        // cannot grow while it is read.
        if Arc::strong_count(&self.mutex) <= 2 {
            map.remove(self.key);
        }
    }
}

impl KeyedLocks {
    /// Runs `work` while holding `key`; other work on the same key waits,
    /// work on other keys does not. Dropping the returned future (while
    /// waiting or working) releases the key.
    pub(crate) async fn run<T>(&self, key: &str, work: impl Future<Output = T>) -> T {
        let participant = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            Participant {
                locks: self,
                key,
                mutex: Arc::clone(map.entry(key.to_owned()).or_default()),
            }
        };
        // The guard borrows the participant, so it is always released
        // before the participant leaves the map.
        let _guard = participant.mutex.lock().await;
        work.await
    }

    /// How many keys are held or waited for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::oneshot;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_holder_per_key_and_entries_are_cleaned_up() {
        let locks = Arc::new(KeyedLocks::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (locks, inside, max) = (locks.clone(), inside.clone(), max.clone());
            tasks.push(tokio::spawn(async move {
                locks
                    .run("k", async {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 1);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn other_keys_do_not_wait_and_cancelled_waiters_clean_up() {
        let locks = Arc::new(KeyedLocks::default());
        let (release, released) = oneshot::channel::<()>();
        let (entered, is_entered) = oneshot::channel::<()>();
        let holder = {
            let locks = locks.clone();
            tokio::spawn(async move {
                locks
                    .run("a", async {
                        entered.send(()).unwrap();
                        released.await.unwrap();
                    })
                    .await;
            })
        };
        is_entered.await.unwrap();
        // Another key runs while "a" is held.
        assert_eq!(locks.run("b", async { 7 }).await, 7);
        assert_eq!(locks.len(), 1);
        // A waiter on "a" that is dropped before it gets the lock leaves
        // the entry to the holder.
        {
            let mut waiting = Box::pin(locks.run("a", async {}));
            assert!(futures::poll!(waiting.as_mut()).is_pending());
        }
        assert_eq!(locks.len(), 1);
        release.send(()).unwrap();
        holder.await.unwrap();
        assert_eq!(locks.len(), 0);
    }
}
