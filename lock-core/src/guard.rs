//! [`LockGuard`]: a held lease, and every way of giving it back.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::{store_ttl, validate_ttl};
use crate::{LockStore, Result};

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
/// # The guarantee, stated honestly
///
/// A guard is a lease, not a mutex. If the work outlives the TTL, the store
/// lets the lease go and the next caller runs alongside the overrunning one:
///
/// ```text
/// t=0s   A acquires (ttl 10s)       A works...
/// t=10s  lease expires              B acquires, B works...   A still working
/// t=12s  A releases -> Ok(false)    B's lease is untouched (compare-and-delete)
/// ```
///
/// Release and extend compare the owner token, so A can never free or prolong
/// B's lease; [`release`](LockGuard::release) returning `Ok(false)` tells A it
/// overran. Choose a TTL well above the work's longest run, or extend it.
#[must_use = "dropping a guard releases the lock at once; bind it (`let _guard = ...`) for as long as the work runs"]
pub struct LockGuard {
    store: Arc<dyn LockStore>,
    key: Arc<str>,
    token: Arc<str>,
    fence: Option<u64>,
    /// Just before the acquire was sent: the lease started at or after this.
    started: Instant,
    /// `at_least`: releasing before this shortens the lease to end here
    /// instead of deleting it.
    hold_until: Option<Instant>,
    /// False once released or kept: then drop does nothing.
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(
        store: Arc<dyn LockStore>,
        key: Arc<str>,
        token: Arc<str>,
        fence: Option<u64>,
        started: Instant,
        hold_until: Option<Instant>,
    ) -> LockGuard {
        LockGuard {
            store,
            key,
            token,
            fence,
            started,
            hold_until,
            armed: true,
        }
    }

    /// How long the claim must still stand (`at_least`), if at all.
    fn hold_remaining(&self) -> Option<Duration> {
        self.hold_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Gives the lease back.
    ///
    /// `Ok(true)`: it was still ours and is now free. `Ok(false)`: it was no
    /// longer ours (the work overran the TTL and the store let it go, perhaps
    /// to someone else); nothing was changed, and a WARN is logged.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) when the store cannot be reached;
    /// the lease then ends at its TTL.
    ///
    /// For a lock with [`at_least`](crate::Lock::at_least), a release before
    /// that time shortens the lease to end then instead of deleting it, and
    /// the store's expiry ends the claim.
    pub async fn release(mut self) -> Result<bool> {
        let released = self.give_back().await?;
        self.log_release(released);
        Ok(released)
    }

    /// Gives the lease back (or shortens it to its `at_least` end), without
    /// logging the outcome; `Ok(false)` when it was no longer ours.
    pub(crate) async fn give_back(&mut self) -> Result<bool> {
        // Stay armed until the store answers: if this future is dropped
        // mid-release, the guard's drop still gives the lease back.
        let released = match self.hold_remaining() {
            Some(left) => {
                let left = store_ttl(left, &*self.store);
                self.store.extend(&self.key, &self.token, left).await
            }
            None => match self.store.release_now(&self.key, &self.token) {
                Some(released) => released,
                None => self.store.release(&self.key, &self.token).await,
            },
        };
        self.armed = false;
        released
    }

    /// Resets the lease's TTL to `ttl` from now, if it is still ours.
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
        validate_ttl(&self.key, ttl, self.store.max_ttl())?;
        let ttl = store_ttl(ttl, &*self.store);
        let extended = self.store.extend(&self.key, &self.token, ttl).await?;
        if !extended {
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
    pub async fn is_still_held(&self) -> Result<bool> {
        let holder = self.store.holder(&self.key).await?;
        Ok(holder.is_some_and(|holder| holder.token() == &*self.token))
    }

    /// The owner token: 128 random bits and `host:pid`.
    pub fn owner(&self) -> &str {
        &self.token
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

    /// The owner token, shared.
    pub(crate) fn token(&self) -> &Arc<str> {
        &self.token
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
        if !self.armed {
            return;
        }
        self.armed = false;
        let hold = self
            .hold_remaining()
            .map(|left| store_ttl(left, &*self.store));
        let held_ms = self.held_for().as_millis() as u64;
        give_back(
            &self.store,
            &self.key,
            &self.token,
            hold,
            GiveBack::DroppedGuard { held_ms },
        );
    }
}

/// Why a lease is being given back from a place that cannot await.
#[derive(Clone, Copy)]
pub(crate) enum GiveBack {
    /// A guard dropped unreleased, after holding the lease this long.
    DroppedGuard { held_ms: u64 },
    /// An acquire dropped (or failed) after its request may have reached the
    /// store: the lease may be ours without anybody knowing.
    AbandonedAcquire,
}

impl GiveBack {
    fn released(self, key: &str, released: Result<bool>) {
        match (self, released) {
            (GiveBack::DroppedGuard { held_ms }, Ok(true)) => {
                tracing::debug!(key = %key, held_ms, "dropped lock released");
            }
            (GiveBack::DroppedGuard { held_ms }, Ok(false)) => tracing::warn!(
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
            (_, Err(error)) => tracing::warn!(
                key = %key,
                %error,
                "could not give back a lease from a dropped lock future; it ends at its ttl"
            ),
        }
    }
}

/// Gives a lease back from `drop`, where nothing can be awaited: at once when
/// the store can release without I/O, otherwise in a task spawned on the
/// current tokio runtime. `hold` shortens the lease to end then (an
/// `at_least` claim) instead of deleting it.
///
/// When no task can run the give-back (no runtime here, or the runtime is
/// shutting down and drops new tasks unpolled), the lease ends at its TTL and
/// a WARN says so: a lease is never left behind silently.
pub(crate) fn give_back(
    store: &Arc<dyn LockStore>,
    key: &Arc<str>,
    token: &Arc<str>,
    hold: Option<Duration>,
    why: GiveBack,
) {
    if hold.is_none()
        && let Some(released) = store.release_now(key, token)
    {
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
        let released = match hold {
            Some(left) => store.extend(&key, &token, left).await,
            None => store.release(&key, &token).await,
        };
        why.released(&key, released);
        unfinished.finish();
    });
}

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
