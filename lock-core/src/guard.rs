//! [`LockGuard`]: a held lease; releasing, extending or keeping it, and
//! giving it back when it is dropped.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::giveback::{GiveBack, give_back, released_now, return_lease};
use crate::lease::{Lease, LockId, local_deadline};
use crate::metrics::{self, Labels};
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
/// current tokio runtime, so drop never blocks there. Dropped outside any
/// runtime (kept past its runtime's `block_on`), it is given back on a
/// thread of its own, as below, before the drop returns.
///
/// A runtime that shuts down before that task has given the lease back
/// (under `#[tokio::main]`, the moment `main` returns, so a guard bound in
/// `main` with `let _guard = ...` is dropped just before it) drops the task
/// unfinished. The lease is then given back on a thread of its own, through
/// a connection of its own to the store ([`LockStore::reopen`]), and the
/// runtime's shutdown, and so the process's exit, waits for it: up to 2 s,
/// so that a store that is down cannot hold the exit up. Every built-in
/// networked store (Redis, PostgreSQL, memcached, etcd) does this, under
/// both flavors of runtime, so the next run of a cron binary finds the lock
/// free:
///
/// ```no_run
/// # use std::time::Duration;
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let locks = lock_core::connect("redis://127.0.0.1:6379").await?;
///     let export = locks.lock("nightly-export", Duration::from_secs(600));
///     let Some(_guard) = export.acquire().await? else {
///         return Ok(()); // another run holds it
///     };
///     // ... the export ...
///     Ok(()) // `_guard` is given back before the process exits
/// }
/// ```
///
/// [`release`](LockGuard::release) says whether the lease was still ours
/// and returns the store's error; prefer it where that matters. On a store
/// that cannot open itself again (the default of [`LockStore::reopen`],
/// for a store of another crate) or does not answer within those 2 s, the
/// lease ends at its TTL, and a WARN says so.
/// For a lock with [`at_least`](crate::Lock::at_least), dropping early
/// shortens the lease to its `at_least` end instead, like `release`.
///
/// A give-back the store fails is tried again in that task, with growing
/// pauses, until the store answers or the lease has ended anyway (the
/// longest TTL it was given, counted from the drop). The task holds the
/// store, so a guard dropped just before the last
/// [`LockManager`](crate::LockManager) over its store still gives its lease
/// back; it lets the store go, and its connections with it, by the time
/// the lease has ended, however the store fails: a try still waiting for
/// the store then is cut off.
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
    /// Whether this is a reader's lease ([`Lock::read`](crate::Lock::read)).
    reader: bool,
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
        reader: bool,
        started: Instant,
        ttl: Duration,
        hold_until: Option<Instant>,
        labels: Labels,
    ) -> LockGuard {
        metrics::taken(labels);
        LockGuard {
            store,
            key,
            token,
            fence,
            reader,
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
                self.reader,
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
        // Never below the store's shortest lease (etcd's follows from its
        // election timeout): the store would refuse the shortening, and the
        // claim would then last the whole TTL.
        (!left.is_zero()).then(|| store_ttl(left, store).max(store.min_ttl()))
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
        metrics::released(self.labels, &released);
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

    /// Whether the store still has this guard's lease: one read of its
    /// key's lease (a reader's: its own among the name's readers), whose
    /// cost does not grow with the keys around it.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) when the store fails.
    pub async fn is_still_held(&self) -> Result<bool> {
        // A reader's or the writer's: the store reads this key's lease
        // under this token, and no other key.
        self.store.is_held_by(&self.key, &self.token).await
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

    /// Whether this guard holds the read side of its name
    /// ([`Lock::read`](crate::Lock::read)): shared with other readers.
    pub fn is_reader(&self) -> bool {
        self.reader
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
        metrics::let_go(self.labels, self.started);
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
