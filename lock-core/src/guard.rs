//! [`LockGuard`]: a held lease, and every way of giving it back.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lock::validate_ttl;
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
/// current tokio runtime, so drop never blocks. Outside a runtime, a store
/// that needs I/O cannot be reached from `drop`, and the lease ends at its TTL.
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
        // Stay armed until the store answers: if this future is dropped
        // mid-release, the guard's drop still gives the lease back.
        let released = match self.hold_remaining() {
            Some(left) => self.store.extend(&self.key, &self.token, left).await,
            None => match self.store.release_now(&self.key, &self.token) {
                Some(released) => released,
                None => self.store.release(&self.key, &self.token).await,
            },
        };
        self.armed = false;
        let released = released?;
        self.log_release(released);
        Ok(released)
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
        let hold = self.hold_remaining();
        if hold.is_none()
            && let Some(released) = self.store.release_now(&self.key, &self.token)
        {
            match released {
                Ok(released) => self.log_release(released),
                Err(error) => {
                    tracing::warn!(key = %self.key, %error, "could not release a dropped lock guard; it ends at its ttl");
                }
            }
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "lock guard dropped outside a tokio runtime; the lease ends at its ttl");
            return;
        };
        let store = Arc::clone(&self.store);
        let key = Arc::clone(&self.key);
        let token = Arc::clone(&self.token);
        let held_ms = self.held_for().as_millis() as u64;
        runtime.spawn(async move {
            let released = match hold {
                Some(left) => store.extend(&key, &token, left).await,
                None => store.release(&key, &token).await,
            };
            match released {
                Ok(true) => tracing::debug!(key = %key, held_ms, "dropped lock released"),
                Ok(false) => tracing::warn!(
                    key = %key,
                    held_ms,
                    "lock overran: its lease ended before the dropped guard released it"
                ),
                Err(error) => tracing::warn!(
                    key = %key,
                    %error,
                    "could not release a dropped lock guard; it ends at its ttl"
                ),
            }
        });
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
