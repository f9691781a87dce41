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
            // look again), or by the deadline itself. The clock is read on
            // every poll, before the timer: a process resumed after a
            // pause (SIGSTOP, a stalled VM) can be polled before the timer
            // driver has fired the deadline's timer (on a multi-threaded
            // runtime, another timer's waker runs the task while the driver
            // is still firing the rest), and the work must not run on then.
            let deadline = self.deadline();
            let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
            std::future::poll_fn(|cx| {
                if Instant::now() >= deadline
                    || notified.as_mut().poll(cx).is_ready()
                    || sleep.as_mut().poll(cx).is_ready()
                {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::MemoryStore;

    #[test]
    fn lost_reads_the_clock_before_the_timer_has_fired() {
        // A process resumed after a pause (SIGSTOP, a stalled VM) may poll
        // the work before the timer driver has fired the lease's deadline:
        // on a multi-threaded runtime one timer's waker can run the task
        // while the driver is still firing the others. `lost()` must go by
        // the clock then, or the work writes once more after its lease
        // could be someone else's. Here the driver never runs at all: the
        // runtime's thread is blocked past the deadline.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let _entered = runtime.enter();
        let store: Arc<dyn LockStore> = Arc::new(MemoryStore::new());
        let key: Arc<str> = Arc::from("k");
        let lease = Lease::new(
            Arc::clone(&key),
            LockId::new(&store, &key),
            Arc::from("token"),
            None,
            false,
            Instant::now() + Duration::from_millis(20),
        );
        let mut lost = pin!(lease.lost());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            lost.as_mut().poll(&mut cx).is_pending(),
            "held until the deadline"
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(
            lost.as_mut().poll(&mut cx),
            Poll::Ready(()),
            "past the deadline by the clock: lost, whatever the timer says"
        );
    }
}
