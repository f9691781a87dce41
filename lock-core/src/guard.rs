//! [`LockGuard`]: a held lease, and every way of giving it back.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Lease, LockId, local_deadline};
use crate::lock::Labels;
use crate::store::{store_ttl, validate_ttl};
use crate::{LockStore, Result, token};

/// A held lease. Proof that [`Lock::acquire`](crate::Lock::acquire) succeeded.
///
/// Give it back with [`release`](LockGuard::release), keep the claim standing
/// until its TTL with [`keep`](LockGuard::keep), or push the TTL out with
/// [`extend`](LockGuard::extend).
///
/// # Dropped unreleased
///
/// A guard dropped without `release` or `keep` (an early return, a `?`, a
/// panic, a cancelled future) gives the lease back by itself: at once when the
/// store can release without I/O (memory), otherwise in a task spawned on the
/// current tokio runtime, so drop never blocks. Outside a runtime, or while
/// the runtime shuts down (its tasks no longer run), a store that needs I/O
/// cannot be reached from `drop`: the lease ends at its TTL, and a WARN says
/// so.
/// For a lock with [`at_least`](crate::Lock::at_least), dropping early
/// shortens the lease to its `at_least` end instead, like `release`.
///
/// # Overrunning
///
/// A guard is a lease, not a mutex (see [the
/// guarantee](crate#the-guarantee-stated-honestly)): if the work outlives the
/// TTL, the next caller may run alongside it. Release and extend compare the
/// owner token, so an overrunning holder can never free or prolong the next
/// holder's lease, and [`release`](LockGuard::release) returning `Ok(false)`
/// tells it that it overran.
#[must_use = "dropping a guard releases the lock at once; bind it (`let _guard = ...`) for as long as the work runs"]
pub struct LockGuard {
    store: Arc<dyn LockStore>,
    key: Arc<str>,
    token: Arc<str>,
    fence: Option<u64>,
    /// Just before the acquire was sent: the lease started at or after this.
    started: Instant,
    /// The lease as the running work sees it, once `run` watches it: the
    /// guard moves its deadline on every successful extend.
    lease: Option<Lease>,
    /// `at_least`: releasing before this shortens the lease to end here
    /// instead of deleting it.
    hold_until: Option<Instant>,
    /// The longest TTL the store has kept this lease for (the acquire's,
    /// or a longer extend's), in milliseconds: from any moment, the lease
    /// ends within this long, which bounds how long a give-back that keeps
    /// failing is worth trying again.
    longest_ttl_ms: AtomicU64,
    /// False once released or kept: then drop does nothing.
    armed: bool,
    /// A release was tried and the store failed: drop tries again, in the
    /// background, without counting the failure twice.
    release_failed: bool,
    /// The lock's metrics labels (nothing without the `metrics` feature).
    labels: Labels,
}

impl LockGuard {
    #[expect(
        clippy::too_many_arguments,
        reason = "built in one place, from the parts of the acquire that took the lease"
    )]
    pub(crate) fn new(
        store: Arc<dyn LockStore>,
        key: Arc<str>,
        token: Arc<str>,
        fence: Option<u64>,
        started: Instant,
        ttl: Duration,
        hold_until: Option<Instant>,
        labels: Labels,
    ) -> LockGuard {
        #[cfg(feature = "metrics")]
        crate::metrics::taken(labels);
        LockGuard {
            store,
            key,
            token,
            fence,
            started,
            lease: None,
            hold_until,
            longest_ttl_ms: AtomicU64::new(millis(ttl)),
            armed: true,
            release_failed: false,
            labels,
        }
    }

    /// The lease as locked work sees it ([`current`](crate::current)), for a
    /// store TTL of `ttl`, a lease of `lock`: made on first use, then kept
    /// up to date by this guard's extends.
    pub(crate) fn lease(&mut self, ttl: Duration, lock: LockId) -> Lease {
        let lease = self.lease.get_or_insert_with(|| {
            Lease::new(
                Arc::clone(&self.key),
                lock,
                Arc::clone(&self.token),
                self.fence,
                local_deadline(self.started, ttl, &*self.store),
            )
        });
        lease.clone()
    }

    /// How long the claim must still stand (`at_least`), if at all, rounded
    /// up to what `store` keeps.
    #[inline]
    fn hold_remaining(&self, store: &dyn LockStore) -> Option<Duration> {
        let until = self.hold_until?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| store_ttl(left, store))
    }

    /// Gives the lease back.
    ///
    /// `Ok(true)`: it was still ours and is now free. `Ok(false)`: it was no
    /// longer ours (the work overran the TTL and the store let it go, perhaps
    /// to someone else); nothing was changed, and a WARN is logged.
    ///
    /// For a lock with [`at_least`](crate::Lock::at_least), a release before
    /// that time shortens the lease to end then instead of deleting it, and
    /// the store's expiry ends the claim.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) when the store cannot be
    /// reached. The give-back is then tried again in the background (on the
    /// current tokio runtime), with growing pauses, until the store answers
    /// or the lease's TTL has passed: a store that is down for a moment
    /// does not strand the lease until its TTL.
    pub async fn release(mut self) -> Result<bool> {
        let released = self.give_back().await;
        #[cfg(feature = "metrics")]
        crate::metrics::released(self.labels, &released);
        let released = released?;
        self.log_release(released);
        Ok(released)
    }

    /// Gives the lease back (or shortens it to its `at_least` end), without
    /// logging the outcome; `Ok(false)` when it was no longer ours.
    pub(crate) async fn give_back(&mut self) -> Result<bool> {
        let hold = self.hold_remaining(&*self.store);
        // Stay armed until the store answers: if this future is dropped
        // mid-release, the guard's drop still gives the lease back.
        let released = match released_now(&*self.store, &self.key, &self.token, hold) {
            Some(released) => released,
            None => return_lease(&*self.store, &self.key, &self.token, hold).await,
        };
        // A store that failed may not have released it: the guard stays
        // armed, and its drop tries again.
        match released {
            Ok(_) => self.armed = false,
            Err(_) => self.release_failed = true,
        }
        released
    }

    /// Resets the lease's TTL to `ttl` from now, if it is still ours.
    ///
    /// The TTL is rounded up to the store's resolution (whole milliseconds
    /// unless the store keeps coarser ones), never down.
    ///
    /// `Ok(false)` when it is not: the lease already expired and may belong to
    /// someone else, whose lease is left untouched. The check and the reset are
    /// one atomic store operation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`](crate::Error::InvalidTtl) for a zero TTL or one
    /// beyond the store's range; [`Error::Store`](crate::Error::Store) when the
    /// store fails.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        validate_ttl(&self.key, ttl, &*self.store)?;
        let ttl = store_ttl(ttl, &*self.store);
        let sent = Instant::now();
        // Before the request: an extend that fails or is cut off may still
        // have taken effect, and a later give-back must keep trying for as
        // long as the lease may then last.
        self.longest_ttl_ms
            .fetch_max(millis(ttl), Ordering::Relaxed);
        let extended = self.store.extend(&self.key, &self.token, ttl).await?;
        if extended {
            if let Some(lease) = &self.lease {
                lease.set_deadline(local_deadline(sent, ttl, &*self.store));
            }
        } else {
            tracing::warn!(
                key = %self.key,
                held_ms = self.held_for().as_millis() as u64,
                "could not extend the lock: its lease already ended"
            );
        }
        Ok(extended)
    }

    /// Leaves the claim standing until its TTL runs out, and forgets the guard.
    ///
    /// For claims that must outlive the work: "this ran in the last ten
    /// minutes, nobody run it again until then".
    pub fn keep(mut self) {
        self.armed = false;
        tracing::debug!(key = %self.key, "lock kept until its ttl");
    }

    /// Whether the store still has this guard's lease.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) when the store fails.
    pub async fn is_still_held(&self) -> Result<bool> {
        let holder = self.store.holder(&self.key).await?;
        Ok(holder.is_some_and(|holder| holder.token() == &*self.token))
    }

    /// The owner token: 128 bits (this process's secret plus a count) and `host:pid`, the proof of
    /// ownership the store checks on release and extend. Compare it with
    /// [`Holder::token`](crate::Holder::token); do not publish it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Who holds the lease, readably: `host:pid` of this process, as
    /// [`Holder::owner`](crate::Holder::owner) shows it to others.
    pub fn owner(&self) -> &str {
        token::owner_of(&self.token)
    }

    /// The store key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of this acquisition, for stores that keep one.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// How long ago the lease was acquired.
    pub fn held_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// When the acquire that won the lease was sent: the lease started at or
    /// after this instant, so `started() + ttl` is a safe local deadline.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The lock's metrics labels.
    #[cfg(feature = "metrics")]
    pub(crate) fn labels(&self) -> Labels {
        self.labels
    }

    fn log_release(&self, released: bool) {
        if released {
            tracing::debug!(
                key = %self.key,
                held_ms = self.held_for().as_millis() as u64,
                "lock released"
            );
        } else {
            tracing::warn!(
                key = %self.key,
                held_ms = self.held_for().as_millis() as u64,
                "lock overran: its lease ended before release, so another holder may have run alongside; use a longer ttl or extend it"
            );
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Released, kept or dropped: this process holds the lease no more.
        #[cfg(feature = "metrics")]
        crate::metrics::let_go(self.labels, self.held_for());
        if !self.armed {
            return;
        }
        self.armed = false;
        let hold = self.hold_remaining(&*self.store);
        let why = if self.release_failed {
            GiveBack::FailedRelease
        } else {
            GiveBack::DroppedGuard {
                held_ms: self.held_for().as_millis() as u64,
                labels: self.labels,
            }
        };
        let lasts = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        give_back(&self.store, &self.key, &self.token, hold, lasts, why);
    }
}

/// Whole milliseconds of `ttl`, rounded up (a lease of 1.5 ms may last 2),
/// in 64-bit arithmetic: this runs on every acquire.
#[inline]
fn millis(ttl: Duration) -> u64 {
    let sub = ttl.subsec_nanos().div_ceil(1_000_000);
    ttl.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(sub))
}

/// The one way a lease is given back, awaited by [`LockGuard::release`] and
/// run in the background for dropped guards and abandoned acquires: a
/// compare-and-delete on the token, or, while an `at_least` claim must
/// still stand (`hold`), a compare-and-expire shortening the lease to end
/// then.
async fn return_lease(
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
fn released_now(
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
    DroppedGuard {
        held_ms: u64,
        #[cfg_attr(
            not(feature = "metrics"),
            expect(dead_code, reason = "only metrics read the labels")
        )]
        labels: Labels,
    },
    /// An acquire dropped (or failed) after its request may have reached the
    /// store: the lease may be ours without anybody knowing.
    AbandonedAcquire,
    /// A release the store failed ([`LockGuard::release`] returned the
    /// error, and metrics counted it), tried again.
    FailedRelease,
}

impl GiveBack {
    fn released(self, key: &str, released: Result<bool>) {
        #[cfg(feature = "metrics")]
        if let GiveBack::DroppedGuard { labels, .. } = self {
            crate::metrics::released(labels, &released);
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

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is the proof of ownership: never print it.
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("held_for", &self.held_for())
            .finish_non_exhaustive()
    }
}
