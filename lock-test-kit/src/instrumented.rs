//! A store wrapper that counts and breaks things on purpose.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::store::{AcquireRequest, Attempt, BoxFuture};
use lock_core::{Error, Holder, LockStore, Result};

/// A [`LockStore`] that forwards to another while counting and injecting faults.
///
/// Wraps any store and forwards to it, while counting the calls that reach
/// it, recording the TTLs it is asked for, and failing releases on demand
/// ([`fail_releases`](Instrumented::fail_releases)) or holding acquires back
/// ([`hold_acquires`](Instrumented::hold_acquires)). It never offers the
/// synchronous [`LockStore::release_now`] path, so a dropped guard must go
/// through the spawned-task release, as it does on a networked store, and it
/// does not hand out fencing tokens. Clones share their counts.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::{LockManager, MemoryStore};
/// use lock_test_kit::Instrumented;
///
/// let counted = Instrumented::new(Arc::new(MemoryStore::new()));
/// let locks = LockManager::new(counted.clone());
/// let guard = locks.lock("report", Duration::from_secs(30)).acquire().await?;
/// assert!(guard.is_some());
/// assert_eq!(counted.acquires(), 1, "one attempt reached the store");
/// assert_eq!(counted.ttls(), [Duration::from_secs(30)]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Instrumented {
    inner: Arc<dyn LockStore>,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    acquires: AtomicUsize,
    releases: AtomicUsize,
    extends: AtomicUsize,
    holders: AtomicUsize,
    fail_releases: AtomicBool,
    /// Acquires wait before reaching the store while this is set.
    hold_acquires: AtomicBool,
    /// The acquires waiting at that gate now, in arrival order: a number
    /// of their own and their TTL.
    held: Mutex<Vec<(u64, Duration)>>,
    /// The number the next acquire at the gate gets.
    next_held: AtomicU64,
    /// Told when the gate opens.
    gate: tokio::sync::Notify,
    /// Every TTL that reached the store, from acquires and extends, in order.
    ttls: Mutex<Vec<Duration>>,
}

impl Instrumented {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LockStore>) -> Self {
        Instrumented {
            inner,
            state: Arc::default(),
        }
    }

    /// How many acquire attempts reached the store.
    pub fn acquires(&self) -> usize {
        self.state.acquires.load(Ordering::SeqCst)
    }

    /// How many releases reached the store (failed ones included).
    pub fn releases(&self) -> usize {
        self.state.releases.load(Ordering::SeqCst)
    }

    /// How many extends reached the store.
    pub fn extends(&self) -> usize {
        self.state.extends.load(Ordering::SeqCst)
    }

    /// How many holder reads reached the store.
    pub fn holders(&self) -> usize {
        self.state.holders.load(Ordering::SeqCst)
    }

    /// Every TTL that reached the store so far (acquires and extends), in order.
    pub fn ttls(&self) -> Vec<Duration> {
        self.state
            .ttls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record_ttl(&self, ttl: Duration) {
        self.state
            .ttls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ttl);
    }

    /// From now on, every release fails with a store error (and releases nothing).
    pub fn fail_releases(&self, fail: bool) {
        self.state.fail_releases.store(fail, Ordering::SeqCst);
    }

    /// While `hold` is set, every acquire waits before it reaches the store
    /// (a slow link, frozen at will): a test can then cut off a waiter whose
    /// attempt is under way, telling whose it is by its TTL
    /// ([`held_ttls`](Instrumented::held_ttls)).
    pub fn hold_acquires(&self, hold: bool) {
        self.state.hold_acquires.store(hold, Ordering::SeqCst);
        if !hold {
            self.state.gate.notify_waiters();
        }
    }

    /// The TTLs of the acquires waiting at the gate of
    /// [`hold_acquires`](Instrumented::hold_acquires) now, first come first.
    pub fn held_ttls(&self) -> Vec<Duration> {
        let held = self
            .state
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.iter().map(|(_, ttl)| *ttl).collect()
    }
}

/// An acquire waiting at the gate: listed while it waits there, and taken
/// off the list when it passes or is dropped.
struct AtGate<'a> {
    state: &'a State,
    number: u64,
}

impl<'a> AtGate<'a> {
    fn enter(state: &'a State, ttl: Duration) -> Self {
        let number = state.next_held.fetch_add(1, Ordering::SeqCst);
        let mut held = state.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.push((number, ttl));
        AtGate { state, number }
    }

    async fn pass(self) {
        loop {
            let opened = self.state.gate.notified();
            let mut opened = std::pin::pin!(opened);
            opened.as_mut().enable();
            if !self.state.hold_acquires.load(Ordering::SeqCst) {
                return;
            }
            opened.await;
        }
    }
}

impl Drop for AtGate<'_> {
    fn drop(&mut self) {
        let mut held = self
            .state
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.retain(|(number, _)| *number != self.number);
    }
}

impl LockStore for Instrumented {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        self.record_ttl(request.ttl);
        if self.state.hold_acquires.load(Ordering::SeqCst) {
            let at_gate = AtGate::enter(&self.state, request.ttl);
            return Box::pin(async move {
                at_gate.pass().await;
                self.state.acquires.fetch_add(1, Ordering::SeqCst);
                self.inner.acquire(request).await
            });
        }
        self.state.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire(request)
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.state.releases.fetch_add(1, Ordering::SeqCst);
        if self.state.fail_releases.load(Ordering::SeqCst) {
            return Box::pin(async move {
                Err(Error::store("release", key, "injected release failure"))
            });
        }
        self.inner.release(key, token)
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        self.state.extends.fetch_add(1, Ordering::SeqCst);
        self.record_ttl(ttl);
        self.inner.extend(key, token, ttl)
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.inner.force_release(key)
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        self.state.holders.fetch_add(1, Ordering::SeqCst);
        self.inner.holder(key)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        self.inner.list(prefix)
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    fn max_ttl(&self) -> Duration {
        self.inner.max_ttl()
    }

    fn ttl_resolution(&self) -> Duration {
        self.inner.ttl_resolution()
    }

    fn min_ttl(&self) -> Duration {
        self.inner.min_ttl()
    }

    fn clock_margin(&self, ttl: Duration) -> Duration {
        self.inner.clock_margin(ttl)
    }
}
