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
/// the store answers or `lasts` (the longest the lease can still last) has
/// passed: after that there is nothing left to give back.
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
        // Past this, the lease has ended whatever the store did.
        let ended = Instant::now().checked_add(lasts);
        // The acquire may still be on its way: a store with a pool of
        // connections can run this give-back before it. The token is this
        // attempt's alone, so looking again can only ever remove our own
        // lease.
        let mut rechecks = match why {
            GiveBack::AbandonedAcquire => &ABANDONED_RECHECKS[..],
            _ => &[],
        }
        .iter();
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
            let released = return_lease(&*store, &key, &token, hold).await;
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
                    match ended {
                        Some(ended) if Instant::now() + pause >= ended => break released,
                        _ => pause,
                    }
                }
            };
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
