//! The store as a worker sees it, with its renewals counted: every call
//! goes straight through, and each extend the store accepted is counted
//! against the owner token it was made for, so a call can say how many
//! renewals kept its lease alive.
//!
//! A renewal that answers yes without extending anything still counts
//! here: that one is caught by what follows it (a section that outlived
//! its lease overlaps the next holder's), not by this number. What this
//! number catches is a renewal that never happens.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::store::{AcquireRequest, Attempt, BoxFuture, Wakeup};
use lock_core::{Holder, LockStore, Result};

tokio::task_local! {
    /// The acquire attempts the call being counted has sent the store.
    static ATTEMPTS: Cell<u32>;
}

/// Runs `call`, counting the acquire attempts it sends through a
/// [`Counted`] store (in its own task: the work it spawns is not counted);
/// returns its output and the count. A waiter wakes on a release, on its
/// holder's expiry or at its deadline: a count far above those is a waiter
/// that polls.
pub async fn counting_attempts<F: Future>(call: F) -> (F::Output, u32) {
    ATTEMPTS
        .scope(Cell::new(0), async {
            let output = call.await;
            (output, ATTEMPTS.with(Cell::get))
        })
        .await
}

fn attempted() {
    let _ = ATTEMPTS.try_with(|attempts| attempts.set(attempts.get().saturating_add(1)));
}

/// A store forwarding every call to another, counting accepted extends by
/// owner token, and acquire attempts by call ([`counting_attempts`]).
/// Clones share the counts.
#[derive(Clone)]
pub struct Counted {
    inner: Arc<dyn LockStore>,
    extends: Arc<Mutex<HashMap<String, u32>>>,
}

impl Counted {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LockStore>) -> Counted {
        Counted {
            inner,
            extends: Arc::default(),
        }
    }

    /// How many extends the store accepted for `token`, forgetting them.
    pub fn take(&self, token: &str) -> u32 {
        self.extends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token)
            .unwrap_or(0)
    }
}

impl LockStore for Counted {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        attempted();
        self.inner.acquire(request)
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.inner.release(key, token)
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let extended = self.inner.extend(key, token, ttl).await;
            if let Ok(true) = extended {
                *self
                    .extends
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(token.to_owned())
                    .or_insert(0) += 1;
            }
            extended
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.inner.force_release(key)
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
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

    fn acquire_now(&self, request: AcquireRequest<'_>) -> Option<Result<Attempt>> {
        let answered = self.inner.acquire_now(request);
        if answered.is_some() {
            attempted();
        }
        answered
    }

    fn observe(&self, key: &str) -> Option<Wakeup> {
        self.inner.observe(key)
    }

    fn release_now(&self, key: &str, token: &str) -> Option<Result<bool>> {
        self.inner.release_now(key, token)
    }
}
