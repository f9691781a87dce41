//! Giving a lease back: the compare-and-delete every release makes (or,
//! while an `at_least` claim must stand, the compare-and-shorten), and the
//! give-back run in the background for a dropped guard or an abandoned
//! acquire, tried again until the store answers.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::{self, Labels};
use crate::store::store_ttl;
use crate::{LockStore, Result};

/// The one way a lease is given back, awaited by
/// [`LockGuard::release`](crate::LockGuard::release) and
/// run in the background for dropped guards and abandoned acquires: a
/// compare-and-delete on the token, or, while an `at_least` claim must
/// still stand (`hold`), a compare-and-expire shortening the lease to end
/// then.
pub(crate) async fn return_lease(
    store: &dyn LockStore,
    key: &str,
    token: &str,
    hold: Option<Duration>,
) -> Result<bool> {
    match hold {
        // Shortening took effect on the store even when its replicas did not
        // confirm it in time: a shorter lease needs no replica to be safe
        // (one that missed it only keeps the longer lease), and trying again
        // would only push the claim's end further out.
        Some(left) => match store.extend(key, token, left).await {
            Err(crate::Error::NotReplicated { .. }) => Ok(true),
            shortened => shortened,
        },
        None => store.release(key, token).await,
    }
}

/// [`return_lease`] without I/O, when the store can (memory).
#[inline]
pub(crate) fn released_now(
    store: &dyn LockStore,
    key: &str,
    token: &str,
    hold: Option<Duration>,
) -> Option<Result<bool>> {
    match hold {
        Some(_) => None,
        None => store.release_now(key, token),
    }
}

/// Why a lease is being given back from a place that cannot await.
#[derive(Clone, Copy)]
pub(crate) enum GiveBack {
    /// A guard dropped unreleased, after holding the lease this long.
    DroppedGuard { held_ms: u64, labels: Labels },
    /// An acquire dropped (or failed) after its request may have reached the
    /// store: the lease may be ours without anybody knowing.
    AbandonedAcquire,
    /// A release the store failed
    /// ([`LockGuard::release`](crate::LockGuard::release) returned the
    /// error, and metrics counted it), tried again.
    FailedRelease,
}

impl GiveBack {
    fn released(self, key: &str, released: Result<bool>) {
        if let GiveBack::DroppedGuard { labels, .. } = self {
            metrics::released(labels, &released);
        }
        match (self, released) {
            (GiveBack::DroppedGuard { held_ms, .. }, Ok(true)) => {
                tracing::debug!(key = %key, held_ms, "dropped lock released");
            }
            (GiveBack::DroppedGuard { held_ms, .. }, Ok(false)) => tracing::warn!(
                key = %key,
                held_ms,
                "lock overran: its lease ended before the dropped guard released it"
            ),
            (GiveBack::AbandonedAcquire, Ok(true)) => tracing::debug!(
                key = %key,
                "gave back a lease taken by an acquire that was cancelled or failed"
            ),
            // The attempt never took the lease: nothing to give back.
            (GiveBack::AbandonedAcquire, Ok(false)) => {}
            (GiveBack::FailedRelease, Ok(true)) => tracing::debug!(
                key = %key,
                "released the lock on a later try, after the store failed the first"
            ),
            // Either the failed release had in fact taken effect, or the
            // lease ended first: nothing is left either way.
            (GiveBack::FailedRelease, Ok(false)) => tracing::debug!(
                key = %key,
                "nothing left to release on a later try: the failed release took effect after all, or the lease had ended"
            ),
            (_, Err(error)) => tracing::warn!(
                key = %key,
                error = %error.chain(),
                "could not give back a lease: the store kept failing until the lease's ttl passed, so it has ended by now"
            ),
        }
    }
}

/// Gives a lease back from `drop`, where nothing can be awaited: at once when
/// the store can release without I/O, otherwise in a task spawned on the
/// current tokio runtime. `hold` shortens the lease to end then (an
/// `at_least` claim) instead of deleting it.
///
/// A give-back the store fails is tried again, after growing pauses, until
/// the store answers or the lease has ended anyway: `lasts` (the longest
/// the lease can still last) from now, or, for an acquire abandoned with
/// its request perhaps still on its way, from the last moment that request
/// is looked for ([`ABANDONED_RECHECKS`]). A try still in flight then is
/// cut off: past that moment there is nothing left to give back.
///
/// The task holds the store (and so its connections), so that a guard
/// dropped just before the last handle to its store still gives its lease
/// back; never past that moment, however the store fails (at once, at its
/// call bound, or never answering), so a store dropped by the application
/// is let go, connections and all, by the time its leases have ended.
///
/// When no task can run the give-back (no runtime here, or the runtime is
/// shutting down and drops new tasks unpolled), the lease ends at its TTL and
/// a WARN says so: a lease is never left behind silently.
pub(crate) fn give_back(
    store: &Arc<dyn LockStore>,
    key: &Arc<str>,
    token: &Arc<str>,
    hold: Option<Duration>,
    lasts: Duration,
    why: GiveBack,
) {
    if let Some(released) = released_now(&**store, key, token, hold) {
        why.released(key, released);
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            key = %key,
            "a lock future was dropped outside a tokio runtime, so its store cannot be reached: the lease ends at its ttl"
        );
        return;
    };
    let store = Arc::clone(store);
    let key = Arc::clone(key);
    let token = Arc::clone(token);
    let unfinished = Unfinished(Some(Arc::clone(&key)));
    runtime.spawn(async move {
        let unfinished = unfinished;
        // The acquire may still be on its way: a store with a pool of
        // connections can run this give-back before it. The token is this
        // attempt's alone, so looking again can only ever remove our own
        // lease.
        let rechecks = match why {
            GiveBack::AbandonedAcquire => &ABANDONED_RECHECKS[..],
            _ => &[],
        };
        // Past this, the lease has ended whatever the store did: its TTL as
        // the store keeps it, in whole steps of its resolution and up to one
        // step more (a store keeping whole seconds may keep a 1.5 s lease
        // for 3). One that overflows never ends (`Duration::MAX`, "no
        // bound").
        let lasts = store_ttl(lasts, &*store).saturating_add(store.ttl_resolution());
        let landed_by: Duration = rechecks.iter().sum();
        let ended = Instant::now()
            .checked_add(landed_by)
            .and_then(|landed| landed.checked_add(lasts));
        let mut rechecks = rechecks.iter();
        let mut retry = RETRY_FIRST;
        // An `at_least` claim ends at a fixed instant: each try shortens the
        // lease to what is left of it (and, once it has passed, releases),
        // never to the whole hold again.
        let hold_until = hold.and_then(|hold| Instant::now().checked_add(hold));
        let released = loop {
            let hold = hold_until
                .map(|until| until.saturating_duration_since(Instant::now()))
                .filter(|left| !left.is_zero())
                .map(|left| store_ttl(left, &*store));
            let trying = return_lease(&*store, &key, &token, hold);
            // A safety deadline is raced against the call in flight, not
            // checked only between calls: a store that never answers, or
            // answers only at a call bound longer than the lease, would
            // otherwise keep the task, and the store, past it.
            let released = match ended {
                Some(ended) => tokio::time::timeout_at(ended, trying)
                    .await
                    .unwrap_or_else(|_| {
                        Err(crate::Error::store(
                            "release",
                            &*key,
                            "no answer before the lease's ttl passed",
                        ))
                    }),
                None => trying.await,
            };
            let pause = match &released {
                Ok(false) => match rechecks.next() {
                    Some(pause) => *pause,
                    None => break released,
                },
                Ok(true) => break released,
                // The store failed, so the lease may still be there: try
                // again while it can be.
                Err(_) => {
                    let pause = retry;
                    retry = (retry * 2).min(RETRY_MOST);
                    pause
                }
            };
            if ended.is_some_and(|ended| Instant::now() + pause >= ended) {
                break released;
            }
            tokio::time::sleep(pause).await;
        };
        why.released(&key, released);
        unfinished.finish();
    });
}

/// When the give-back of an abandoned acquire found nothing, it looks again
/// after these pauses: long enough for a request already sent to land, the
/// last beyond the stores' default 3 s call timeout.
const ABANDONED_RECHECKS: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(250),
    Duration::from_secs(4),
];

/// The pause before a give-back the store failed is tried again; each
/// failure doubles it, up to [`RETRY_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between tries of a give-back the store keeps failing.
const RETRY_MOST: Duration = Duration::from_secs(2);

/// Carried by a give-back task: if the task is dropped before it finishes
/// (the runtime shut down), says so at WARN.
struct Unfinished(Option<Arc<str>>);

impl Unfinished {
    fn finish(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(key) = self.0.take() {
            tracing::warn!(
                key = %key,
                "the tokio runtime shut down before a dropped lock could be given back: the lease ends at its ttl"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::store::{AcquireRequest, Attempt, BoxFuture};
    use crate::{Error, Holder};

    /// A store that fails every call: after `fails_after`, or never
    /// answering at all (`None`), as a server that is gone does, a call
    /// bound or none. It says when the last handle to it goes, and its
    /// connections with it.
    struct Failing {
        fails_after: Option<Duration>,
        gone: Arc<AtomicBool>,
    }

    impl Drop for Failing {
        fn drop(&mut self) {
            self.gone.store(true, Ordering::SeqCst);
        }
    }

    impl Failing {
        fn fail<T: Send + 'static>(
            &self,
            operation: &'static str,
        ) -> BoxFuture<'static, Result<T>> {
            let fails_after = self.fails_after;
            Box::pin(async move {
                match fails_after {
                    Some(after) => {
                        tokio::time::sleep(after).await;
                        Err(Error::store(operation, "k", "the server is gone"))
                    }
                    None => std::future::pending().await,
                }
            })
        }
    }

    impl LockStore for Failing {
        fn acquire<'a>(&'a self, _: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
            self.fail("acquire")
        }
        fn release<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            self.fail("release")
        }
        fn extend<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool>> {
            self.fail("extend")
        }
        fn force_release<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            self.fail("force release")
        }
        fn holder<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
            self.fail("read the holder of")
        }
        fn is_shared(&self) -> bool {
            true
        }
        fn max_ttl(&self) -> Duration {
            Duration::from_secs(3600)
        }
    }

    // A give-back holds its store, so a guard dropped just before its
    // manager still gives its lease back. A store that fails forever
    // must not be kept that way, with its connections, past the moment the
    // lease has ended anyway: whether each call fails at once, fails only
    // at a call bound longer than the lease, or never answers.
    #[tokio::test(start_paused = true)]
    async fn a_give_back_whose_store_fails_forever_lets_the_store_go_by_the_leases_ttl() {
        let ttl = Duration::from_secs(2);
        for fails_after in [
            Some(Duration::from_millis(10)),
            Some(Duration::from_secs(3)),
            None,
        ] {
            let gone = Arc::new(AtomicBool::new(false));
            let store: Arc<dyn LockStore> = Arc::new(Failing {
                fails_after,
                gone: Arc::clone(&gone),
            });
            let (key, token): (Arc<str>, Arc<str>) = (Arc::from("k"), Arc::from("t"));
            give_back(&store, &key, &token, None, ttl, GiveBack::FailedRelease);
            let kept_for = ttl + store.ttl_resolution();
            drop(store);
            tokio::time::sleep(kept_for).await;
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(
                gone.load(Ordering::SeqCst),
                "a store whose calls fail after {fails_after:?} (None: never answer) is let go \
                 by the lease's {ttl:?} ttl"
            );
        }
    }
}
