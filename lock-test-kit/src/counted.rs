//! [`Counted`]: the store it wraps, fencing, readers and announcements
//! included, counting the reads that reach it, and on demand misreading a
//! holder or cut off from the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use lock_core::store::{AcquireRequest, Attempt, BoxFuture, Wakeup};
use lock_core::{Error, Holder, LockStore, Result};

/// A store that forwards every call to the store it wraps, counting the
/// holder reads and listings that reach it. Clones share their counts and
/// switches.
///
/// Unlike [`Instrumented`](crate::Instrumented), it is the store it wraps
/// in every respect a suite can see: fencing tokens, readers and
/// announcements to observers all pass through.
#[derive(Clone)]
pub(crate) struct Counted {
    inner: Arc<dyn LockStore>,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    reads: AtomicU32,
    lists: AtomicU32,
    /// The next holder read answers "nobody" whoever holds the key.
    miss_next: AtomicBool,
    /// Every call fails, as for a process the network cut off from the
    /// store.
    cut_off: AtomicBool,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn LockStore>) -> Counted {
        Counted {
            inner,
            state: Arc::default(),
        }
    }

    /// How many holder reads reached the store.
    pub(crate) fn reads(&self) -> u32 {
        self.state.reads.load(Ordering::SeqCst)
    }

    /// How many listings reached the store.
    pub(crate) fn lists(&self) -> u32 {
        self.state.lists.load(Ordering::SeqCst)
    }

    /// The next holder read answers `None` (nobody holds the key) whatever
    /// the store holds: a read that missed a live holder.
    pub(crate) fn miss_next_read(&self) {
        self.state.miss_next.store(true, Ordering::SeqCst);
    }

    /// From now on every call fails and reaches nothing: whatever this
    /// handle holds lives on in the store until its TTL, unrenewed and
    /// never given back, as a killed process's leases do.
    pub(crate) fn cut_off(&self) {
        self.state.cut_off.store(true, Ordering::SeqCst);
    }

    /// The error of a call made while cut off, when it is.
    fn unreachable(&self, operation: &'static str, key: &str) -> Option<Error> {
        self.state
            .cut_off
            .load(Ordering::SeqCst)
            .then(|| Error::store(operation, key, "cut off from the store"))
    }
}

/// A future that fails at once with `error`.
fn failed<'a, T: Send + 'a>(error: Error) -> BoxFuture<'a, Result<T>> {
    Box::pin(std::future::ready(Err(error)))
}

impl LockStore for Counted {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        match self.unreachable("acquire", request.key) {
            Some(error) => failed(error),
            None => self.inner.acquire(request),
        }
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        match self.unreachable("release", key) {
            Some(error) => failed(error),
            None => self.inner.release(key, token),
        }
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        match self.unreachable("extend", key) {
            Some(error) => failed(error),
            None => self.inner.extend(key, token, ttl),
        }
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        match self.unreachable("force-release", key) {
            Some(error) => failed(error),
            None => self.inner.force_release(key),
        }
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        if let Some(error) = self.unreachable("read the holder of", key) {
            return failed(error);
        }
        self.state.reads.fetch_add(1, Ordering::SeqCst);
        if self.state.miss_next.swap(false, Ordering::SeqCst) {
            return Box::pin(std::future::ready(Ok(None)));
        }
        self.inner.holder(key)
    }

    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        match self.unreachable("check the holder of", key) {
            Some(error) => failed(error),
            None => self.inner.is_held_by(key, token),
        }
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        if let Some(error) = self.unreachable("list the locks under", prefix) {
            return failed(error);
        }
        self.state.lists.fetch_add(1, Ordering::SeqCst);
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

    fn min_ttl(&self) -> Duration {
        self.inner.min_ttl()
    }

    fn ttl_resolution(&self) -> Duration {
        self.inner.ttl_resolution()
    }

    fn clock_margin(&self, ttl: Duration) -> Duration {
        self.inner.clock_margin(ttl)
    }

    fn fencing(&self) -> bool {
        self.inner.fencing()
    }

    fn read_mode(&self) -> bool {
        self.inner.read_mode()
    }

    fn observe(&self, key: &str) -> Option<Wakeup> {
        self.inner.observe(key)
    }
}
