//! [`Lease`]: the lease held by the running locked work, and [`current`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{LockStore, token};

tokio::task_local! {
    static CURRENT: Lease;
}

/// The lease held by the locked work that is running now.
///
/// Returned by [`current`]. Cheap to clone; clones watch the same lease.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::LockManager;
///
/// let locks = LockManager::memory();
/// let imported = locks
///     .lock("import", Duration::from_secs(30))
///     .renew()
///     .run(async {
///         let lease = lock_core::current().expect("inside locked work");
///         for batch in 0..3 {
///             if lease.is_lost() {
///                 // Someone else may hold the lock now: stop writing.
///                 return Ok(batch);
///             }
///             import_batch(batch).await;
///         }
///         Ok::<_, lock_core::Error>(3)
///     })
///     .await?;
/// assert_eq!(imported, Some(3));
/// # Ok(()) }
/// # async fn import_batch(_: u32) {}
/// ```
#[derive(Clone)]
pub struct Lease {
    state: Arc<State>,
}

struct State {
    key: Arc<str>,
    /// Which lock this lease is of: for re-entry (see [`Lock::run`](crate::Lock::run)).
    lock: LockId,
    /// The lease this task held when it took this one, if any: the chain
    /// re-entry walks.
    outer: Option<Lease>,
    token: Arc<str>,
    fence: Option<u64>,
    /// Whether this is a reader's lease ([`Lock::read`](crate::Lock::read)).
    reader: bool,
    deadline: Mutex<Instant>,
    lost: AtomicBool,
    notify: Notify,
}

/// The lease held by the locked work running in this task, if any.
///
/// Inside [`Lock::run`](crate::Lock::run) (and so inside every `#[locked]`
/// function body) this is the lease that run holds; elsewhere it is `None`.
/// Tasks spawned from the work do not inherit it.
pub fn current() -> Option<Lease> {
    CURRENT.try_with(Lease::clone).ok()
}

/// Which lock a lease is of: its manager's store (by address) and the
/// lock's key (a semaphore's, not the permit's).
#[derive(Clone)]
pub(crate) struct LockId {
    pub(crate) store: usize,
    pub(crate) key: Arc<str>,
}

impl LockId {
    /// The lock keyed `key` on `store`.
    pub(crate) fn new(store: &Arc<dyn LockStore>, key: &Arc<str>) -> LockId {
        LockId {
            store: address(store),
            key: Arc::clone(key),
        }
    }
}

/// A store by address: one store, one lock namespace.
fn address(store: &Arc<dyn LockStore>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// Whether this task runs under a lease of the lock keyed `key` on `store`:
/// inside its `run` or `#[locked]` body, at any depth of nesting.
pub(crate) fn held_by_this_task(store: &Arc<dyn LockStore>, key: &str) -> Option<Side> {
    let store = address(store);
    CURRENT
        .try_with(|lease| {
            let mut next = Some(lease);
            while let Some(lease) = next {
                if lease.state.lock.store == store && *lease.state.lock.key == *key {
                    return Some(Side {
                        reader: lease.state.reader,
                    });
                }
                next = lease.state.outer.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// The side of a name a task holds it on ([`held_by_this_task`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Side {
    /// The read side ([`Lock::read`](crate::Lock::read)), or else the write side.
    pub(crate) reader: bool,
}

impl Lease {
    pub(crate) fn new(
        key: Arc<str>,
        lock: LockId,
        token: Arc<str>,
        fence: Option<u64>,
        reader: bool,
        deadline: Instant,
    ) -> Lease {
        Lease {
            state: Arc::new(State {
                key,
                lock,
                outer: current(),
                token,
                fence,
                reader,
                deadline: Mutex::new(deadline),
                lost: AtomicBool::new(false),
                notify: Notify::new(),
            }),
        }
    }

    /// `future`, run with this lease as [`current`]. A plain function, not
    /// an `async fn`, so `future` is held once, inside the task-local scope.
    pub(crate) fn scope<F: Future>(
        &self,
        future: F,
    ) -> tokio::task::futures::TaskLocalFuture<Lease, F> {
        CURRENT.scope(self.clone(), future)
    }

    /// The store key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The lease's owner token: the proof of ownership the store checks (see
    /// [`LockGuard::token`](crate::LockGuard::token)).
    pub fn token(&self) -> &str {
        &self.state.token
    }

    /// Who holds the lease, readably: `host:pid`.
    pub fn owner(&self) -> &str {
        token::owner_of(&self.state.token)
    }

    /// The fencing token, for locks that asked for one.
    pub fn fence(&self) -> Option<u64> {
        self.state.fence
    }

    /// When the lease ends unless renewed: a conservative local estimate on
    /// tokio's clock, counted from just before the acquire (or the last
    /// renewal) was sent, less the store's
    /// [clock margin](crate::LockStore::clock_margin), so it passes before
    /// the store could let anyone else have the lease.
    pub fn deadline(&self) -> Instant {
        *self
            .state
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// True once the lease is known to be lost: a renewal found it gone, or
    /// its deadline passed without a renewal.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::Acquire) || Instant::now() >= self.deadline()
    }

    /// Resolves as soon as the lease is known lost: a renewal found it gone,
    /// or its deadline passed without a renewal. Never resolves while the
    /// lease is held.
    pub async fn lost(&self) {
        loop {
            let notified = self.state.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            // Woken by a loss, or by a renewal moving the deadline (then
            // look again), or by the deadline itself.
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(self.deadline()) => {}
            }
        }
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        *self
            .state
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = deadline;
        self.state.notify.notify_waiters();
    }

    pub(crate) fn mark_lost(&self) {
        self.state.lost.store(true, Ordering::Release);
        self.state.notify.notify_waiters();
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key())
            .field("fence", &self.fence())
            .field("deadline", &self.deadline())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// The local deadline of a lease the store started at or after `sent` and
/// keeps for `ttl`: `sent + ttl`, less the store's
/// [clock margin](LockStore::clock_margin). An instant too far out to
/// represent is a deadline that never comes.
pub(crate) fn local_deadline(sent: Instant, ttl: Duration, store: &dyn LockStore) -> Instant {
    let lasts = ttl.saturating_sub(store.clock_margin(ttl));
    sent.checked_add(lasts).unwrap_or_else(far_future)
}

/// An instant no lease reaches: used when a deadline overflows.
fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(100 * 365 * 24 * 60 * 60))
        .unwrap_or(now)
}
