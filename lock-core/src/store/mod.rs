//! Where leases live: the [`LockStore`] trait, its contract, and the stores.
//!
//! A store keeps, per key, at most one lease: an owner token and an expiry.
//! Everything above it ([`LockManager`](crate::LockManager), [`Lock`](crate::Lock),
//! [`LockGuard`](crate::LockGuard)) is written against this trait alone, so a
//! new backend is one implementation of it plus a run of the shared contract
//! test suite.
//!
//! # The contract
//!
//! Every store must give these guarantees; the lock semantics rest on them.
//!
//! - **Acquire is one atomic "set if absent, with TTL".** Two concurrent
//!   acquires of one free key never both succeed. An expired lease counts as
//!   absent. When the key is held, the attempt fails fast and reports the
//!   holder's remaining TTL so a waiter can sleep exactly that long.
//! - **Release is one atomic compare-and-delete** on the owner token: it
//!   removes the lease only if the token still matches, and says whether it
//!   did. A release after the lease expired and moved on never touches the new
//!   holder's lease.
//! - **Owner tokens** (`AcquireRequest::token`) come from the runtime: unique
//!   per acquisition, and not producible by another process without reading
//!   one from a store (a per-process 128-bit secret plus a count, then
//!   `@host:pid`). A store keeps the token as given and compares it whole.
//! - **Extend is one atomic compare-and-expire**: it resets the TTL only if the
//!   token still matches. Never read-then-write: between the two, the lease can
//!   expire and pass to someone else.
//! - **TTLs run on the store's clock** (a monotonic `Instant` in memory, the
//!   server's clock for Redis), never by comparing wall clocks across machines.
//! - **Waking waiters.** When asked for a [`Wakeup`] (`AcquireRequest::wake`),
//!   a store that can observe releases returns one that resolves after any
//!   release or force-release of the key that happens *after* the attempt was
//!   evaluated. It must be registered before the attempt is decided, so that a
//!   release racing with the attempt is never missed. Stores that cannot
//!   observe releases return no wakeup; waiters then sleep for the holder's
//!   remaining TTL. A waiter woken and then gone before its next attempt
//!   is answered passes its wake to another waiter of the key
//!   ([`Wakeup::new`] takes what does it), or the others sleep on while the
//!   lock is free. A waiting writer's attempt that holds new readers off
//!   (a claim on their turn) is taken back when the writer stops waiting
//!   without the lease, and the readers behind it are woken
//!   ([`Wakeup::withdrawing`]). [`observe`](LockStore::observe) returns an
//!   observer's wakeup ([`Wakeup::observer`]), which has no wake to pass on.
//! - **Fencing tokens**, from stores whose [`fencing`](LockStore::fencing) is
//!   true: every acquisition that asks for one gets a number strictly greater
//!   than any earlier acquisition of the same key got, across holders,
//!   processes and clean releases. The counter lives apart from the lease, so
//!   releasing or expiring the lease never resets it.
//! - **TTLs are kept at least as long as asked.** The runtime rounds every
//!   TTL *up* to the store's [`ttl_resolution`](LockStore::ttl_resolution)
//!   before it reaches the store, so a store never sees a TTL finer than it
//!   can keep; a store given one anyway (by a direct caller) rounds up too,
//!   never down.
//! - **Bad input is an error**, never a panic: a TTL below
//!   [`min_ttl`](LockStore::min_ttl) or above [`max_ttl`](LockStore::max_ttl)
//!   is refused before it reaches the store.
//! - **Cancellation.** Any store future may be dropped at any `.await`: by a
//!   caller's timeout, a losing `select!` arm, a task aborted mid-way. A store
//!   need not give back a lease an acquire took before it was dropped (or
//!   before it failed): the runtime does, with a compare-and-delete on that
//!   acquire's token ([`release`](LockStore::release)), spawned the moment the
//!   acquire future goes away. A store should keep that give-back from
//!   overtaking the acquire (a release sent after an acquire on the same key
//!   applied after it, as one ordered connection per key does). For stores
//!   that cannot (a pool of connections may run the give-back first), the
//!   runtime looks again when the give-back found nothing: after 20 ms,
//!   250 ms and 4 s; an acquire still in flight later than that leaves its
//!   lease to its TTL.
//! - [`is_shared`](LockStore::is_shared) is true only when leases are visible
//!   to other processes *and* acquire is atomic across them.
//!
//! The trait is object safe: managers hold an `Arc<dyn LockStore>`.

#[cfg(feature = "store-kit")]
pub mod kit;
// Without the `store-kit` feature the toolkit is the crate's own: the
// built-in stores and the runtime use it all the same.
#[cfg(not(feature = "store-kit"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
pub(crate) mod kit;
mod local;
pub(crate) mod memory;
mod request;
mod wakeup;

pub use self::memory::MemoryStore;
pub use self::request::{AcquireRequest, Attempt};
pub use self::wakeup::Wakeup;
pub(crate) use self::wakeup::{Unanswered, Woken};

/// Declares each networked store: its folder `store/<module>/`, built with
/// its lock-core cargo feature, and its public types,
/// re-exported here and (through [`builtin`]) at the crate root. Each
/// module is `pub(crate)` so [`connect`](crate::connect)'s scheme table
/// reaches its `url::open`.
macro_rules! stores {
    ($($feature:literal => $module:ident: $($item:ident),+;)+) => {
        $(
            #[cfg(feature = $feature)]
            pub(crate) mod $module;
            #[cfg(feature = $feature)]
            pub use self::$module::{$($item),+};
        )+

        /// Every store's public types, for the crate root's one glob.
        pub(crate) mod builtin {
            pub use super::MemoryStore;
            $(
                #[cfg(feature = $feature)]
                pub use super::$module::{$($item),+};
            )+
        }
    };
}

stores! {
    "etcd" => etcd: EtcdConfig, EtcdStore;
    "memcached" => memcached: MemcachedConfig, MemcachedStore;
    "postgres" => postgres: PostgresConfig, PostgresStore;
    "redis" => redis: RedisConfig, RedisStore;
}

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{Error, Holder, Result};

pub(crate) use self::kit::{store_ttl, validate_ttl};

/// A boxed, `Send` future: what [`LockStore`] methods return, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A place leases live. See the [module docs](self) for the contract every
/// implementation must keep.
pub trait LockStore: Send + Sync + 'static {
    /// Atomically sets `request.key` to `request.token` with `request.ttl` if
    /// no unexpired lease exists; otherwise reports the holder's remaining TTL.
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>>;

    /// Atomically deletes the lease on `key` if its token is `token`.
    ///
    /// `Ok(true)`: it was ours and is gone. `Ok(false)`: it was not ours any
    /// more (expired, or taken by someone else after expiring); nothing changed.
    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Atomically resets the TTL of the lease on `key` to `ttl` if its token is
    /// `token`. `Ok(false)` when it is not ours any more.
    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Deletes the lease on `key` whoever holds it. `Ok(true)` if there was one.
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// The current unexpired lease on `key`, if any.
    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>>;

    /// Whether `token` holds an unexpired lease on `key`: as its writer,
    /// or as one of its readers. What
    /// [`LockGuard::is_still_held`](crate::LockGuard::is_still_held) asks,
    /// on every call, so it must read `key`'s own lease and readers and
    /// nothing more.
    ///
    /// The default compares [`holder`](LockStore::holder)'s token; a store
    /// that keeps readers ([`read_mode`](LockStore::read_mode)), whose
    /// `holder` names only one of them, falls back to
    /// [`list`](LockStore::list) with `key` as the prefix, which reads
    /// every key that starts with it: such a store should answer from the
    /// reader's own entry instead, as every built-in store does.
    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let holder = self.holder(key).await?;
            if holder.is_some_and(|holder| holder.token() == token) {
                return Ok(true);
            }
            if !self.read_mode() {
                return Ok(false);
            }
            let held = self.list(key).await?;
            Ok(held
                .iter()
                .any(|(held, holder)| held == key && holder.token() == token))
        })
    }

    /// Every unexpired lease whose key starts with `prefix`: its full key and
    /// its holder, in no particular order.
    ///
    /// For operators ([`LockManager::list`](crate::LockManager::list), the
    /// `locks` tool), not for deciding anything: leases come and go while the
    /// store is read, so a store that reads in batches (a Redis `SCAN`) may
    /// miss a lease taken meanwhile or show one released meanwhile. It must
    /// never block the store for others (no Redis `KEYS`).
    ///
    /// The default returns [`Error::Unsupported`]: a store that cannot list
    /// cheaply (memcached) says so instead of scanning everything.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        let _ = prefix;
        let store = self.name();
        Box::pin(async move {
            Err(Error::Unsupported {
                store,
                operation: "list locks",
                hint: "it keeps no index of its keys; inspect a lock by name (`Lock::holder`, `locks inspect NAME`)",
            })
        })
    }

    /// A short name for the kind of store (`"memory"`, `"redis"`...), for
    /// logs, metrics labels and error messages. `"custom"` unless a store
    /// says otherwise.
    fn name(&self) -> &'static str {
        "custom"
    }

    /// True when leases are visible to other processes and acquire is atomic
    /// across them.
    fn is_shared(&self) -> bool;

    /// The longest TTL the store can keep. Longer TTLs are refused with
    /// [`Error::InvalidTtl`] before reaching the store.
    fn max_ttl(&self) -> Duration;

    /// The shortest TTL the store keeps; shorter TTLs are refused with
    /// [`Error::InvalidTtl`] before reaching the
    /// store. Zero unless a store says otherwise (etcd's minimum lease TTL
    /// follows from its election timeout).
    fn min_ttl(&self) -> Duration {
        Duration::ZERO
    }

    /// The finest TTL step the store keeps: 1 ms unless a store says
    /// otherwise (a store keeping whole seconds says 1 s).
    ///
    /// The runtime rounds every TTL up to a whole multiple of it before the
    /// store sees it, so every store keeps a lease at least as long as asked,
    /// and stores agree on what a sub-millisecond TTL means.
    fn ttl_resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// How much sooner than `sent + ttl` the runtime treats a lease as ended.
    ///
    /// A store that keeps TTLs on another machine's clock counts them at that
    /// clock's rate, which may run a little faster than this process's; and
    /// timers fire a little late. Renewal, [`OnLost::Cancel`](crate::OnLost)
    /// and [`Lease::lost`](crate::Lease::lost) all work toward this earlier
    /// local deadline, so locked work stops before the store could hand the
    /// lease to someone else. The default is 1% of the TTL plus 2 ms, the
    /// margin Redlock's analysis uses. A store that keeps TTLs on this
    /// process's own clock (memory) returns zero: there is nothing to allow
    /// for.
    fn clock_margin(&self, ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    /// True when the store hands out fencing tokens (see the contract above).
    ///
    /// The default is false; such a store never sees a fenced request.
    fn fencing(&self) -> bool {
        false
    }

    /// True when the store keeps readers: an acquire with
    /// [`AcquireRequest::read`] set shares the key with other readers and
    /// excludes writers, and release and extend accept a reader's token (see
    /// the contract above).
    ///
    /// The default is false; such a store never sees a reading request.
    fn read_mode(&self) -> bool {
        false
    }

    /// Attempts an acquire without I/O and without blocking, if the store can.
    ///
    /// Stores that answer from memory return `Some` and spare the caller a
    /// boxed future per attempt; the default `None` means "use
    /// [`acquire`](LockStore::acquire)". Must behave exactly like `acquire`.
    fn acquire_now(&self, request: AcquireRequest<'_>) -> Option<Result<Attempt>> {
        let _ = request;
        None
    }

    /// Registers, at once, for the next change of the lease on `key` made
    /// by any process: an acquire, a release, a force-release. The
    /// returned [`Wakeup`] resolves after that change (or spuriously; the
    /// caller reads the store again either way).
    ///
    /// [`Election::observe`](crate::Election::observe) uses it to learn of
    /// new leaders without polling. The default `None` means the store
    /// announces no changes: observers then read again at intervals. A
    /// store that announces changes must announce every acquire and
    /// release of a fenced lease (an election's), and need announce no
    /// others.
    fn observe(&self, key: &str) -> Option<Wakeup> {
        let _ = key;
        None
    }

    /// Releases without I/O and without blocking, if the store can.
    ///
    /// Used by [`LockGuard::release`](crate::LockGuard::release) before
    /// [`release`](LockStore::release), and when a guard is dropped
    /// unreleased: a store that answers `Some` here frees the lease at once,
    /// even outside an async runtime; `None` (the default) means a release
    /// task is spawned on the current tokio runtime.
    fn release_now(&self, key: &str, token: &str) -> Option<Result<bool>> {
        let _ = (key, token);
        None
    }

    /// Opens a store over the same servers, with the same settings, on
    /// connections of its own, made on the runtime that polls the returned
    /// future; `None` (the default) when the store cannot.
    ///
    /// For giving a lease back while the runtime this store's connections
    /// run on shuts down: a guard dropped as a `#[tokio::main]` returns
    /// spawns its give-back on that runtime, which then drops the task
    /// unpolled. The runtime gives the lease back instead on a thread of
    /// its own, through the store this opens, within a short deadline,
    /// before its shutdown (and so the process) goes on. A store that
    /// answers `None` leaves such leases to their TTL, with a WARN.
    ///
    /// The future must own what it needs (it runs on another runtime, on
    /// another thread, perhaps after this store is gone) and do nothing
    /// until polled.
    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        None
    }
}

impl<S: LockStore + ?Sized> LockStore for Arc<S> {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        (**self).acquire(request)
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        (**self).release(key, token)
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        (**self).extend(key, token, ttl)
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        (**self).force_release(key)
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        (**self).holder(key)
    }

    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        (**self).is_held_by(key, token)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        (**self).list(prefix)
    }

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }

    fn max_ttl(&self) -> Duration {
        (**self).max_ttl()
    }

    fn fencing(&self) -> bool {
        (**self).fencing()
    }

    fn read_mode(&self) -> bool {
        (**self).read_mode()
    }

    fn ttl_resolution(&self) -> Duration {
        (**self).ttl_resolution()
    }

    fn min_ttl(&self) -> Duration {
        (**self).min_ttl()
    }

    fn clock_margin(&self, ttl: Duration) -> Duration {
        (**self).clock_margin(ttl)
    }

    fn acquire_now(&self, request: AcquireRequest<'_>) -> Option<Result<Attempt>> {
        (**self).acquire_now(request)
    }

    fn release_now(&self, key: &str, token: &str) -> Option<Result<bool>> {
        (**self).release_now(key, token)
    }

    fn observe(&self, key: &str) -> Option<Wakeup> {
        (**self).observe(key)
    }

    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        (**self).reopen()
    }
}
