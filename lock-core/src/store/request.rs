//! One acquire attempt and its outcome: [`AcquireRequest`] and [`Attempt`].

use std::time::Duration;

use tokio::time::Instant;

use super::local::Local;
use super::wakeup::Wakeup;

/// One acquire attempt, as handed to [`LockStore::acquire`](super::LockStore::acquire).
///
/// Built by [`Lock`](crate::Lock); stores read it. It is `Copy`, so a store
/// that wraps another can pass it on unchanged.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The full key (manager prefix + lock name).
    pub key: &'a str,
    /// The owner token to store as the lease's value.
    pub token: &'a str,
    /// How long the lease lasts unless released or extended first. Never zero,
    /// never above [`LockStore::max_ttl`](super::LockStore::max_ttl).
    pub ttl: Duration,
    /// Whether the caller will wait: when the key is held, return a [`Wakeup`]
    /// if the store can observe releases.
    pub wake: bool,
    /// When the caller sent this attempt, on tokio's clock (this process's
    /// monotonic clock, or the paused test clock). A store that keeps time on
    /// that same clock (memory) may start the lease here instead of reading
    /// the clock again: it is never later than its own reading would be, so
    /// the lease never lasts longer than `ttl`.
    pub sent: Instant,
    /// Whether the caller wants a fencing token: on success, return the next
    /// value of the key's fencing counter in [`Attempt::Acquired`]. Only set
    /// when [`LockStore::fencing`](super::LockStore::fencing) is true.
    pub fenced: bool,
    /// Whether this is a reader: on success the key is held by this token
    /// among any number of readers, and by no writer. Only set when
    /// [`LockStore::read_mode`](super::LockStore::read_mode) is true.
    pub read: bool,
    /// Whether the caller is an election's candidate (with
    /// [`fenced`](AcquireRequest::fenced) set): a store that announces
    /// changes ([`LockStore::observe`](super::LockStore::observe)) announces
    /// this lease's holder when it is taken and when it is released, and
    /// may skip that for every other lease.
    pub announce: bool,
    /// What only an in-process store (memory) reads: the key shared, and
    /// leave to hand the lease straight over. The default, as every request
    /// built outside this crate carries, asks for neither.
    pub(crate) local: Local<'a>,
}

impl<'a> AcquireRequest<'a> {
    /// A request for `key`, stored under `token`, for `ttl`, not waiting.
    ///
    /// Mostly for store tests; [`Lock`](crate::Lock) builds these itself.
    pub fn new(key: &'a str, token: &'a str, ttl: Duration) -> Self {
        AcquireRequest::sent_at(key, token, ttl, Instant::now())
    }

    /// A request sent at `sent`, which the caller read from the clock just
    /// before (no second reading).
    pub(crate) fn sent_at(key: &'a str, token: &'a str, ttl: Duration, sent: Instant) -> Self {
        AcquireRequest {
            key,
            token,
            ttl,
            sent,
            wake: false,
            fenced: false,
            read: false,
            announce: false,
            local: Local::default(),
        }
    }

    /// The same request, asking for a [`Wakeup`] when the key is held.
    pub fn waking(mut self) -> Self {
        self.wake = true;
        self
    }

    /// The same request, asking for a fencing token on success.
    pub fn fencing(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// The same request, for a reader (see [`read`](AcquireRequest::read)).
    pub fn reading(mut self) -> Self {
        self.read = true;
        self
    }

    /// The same request, from an election's candidate (see
    /// [`announce`](AcquireRequest::announce)).
    pub fn announcing(mut self) -> Self {
        self.announce = true;
        self
    }
}

/// The outcome of one acquire attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Attempt {
    /// The lease is ours.
    Acquired {
        /// The fencing token, when the request asked for one.
        fence: Option<u64>,
    },
    /// Somebody else holds the key.
    Held {
        /// How long the holder's lease has left, as the store sees it.
        ///
        /// Required when the request waits (`wake`): the waiter sleeps that
        /// long when no release wakes it first. A store may leave it out
        /// (`None`) for a request that does not wait, when reading it would
        /// cost extra work on the uncontended path.
        remaining: Option<Duration>,
        /// Resolves once the key is released, when the request asked for it and
        /// the store can observe releases.
        wakeup: Option<Wakeup>,
    },
}
