//! Named leases across tasks, processes and machines.
//!
//! A lease is a lock with an expiry: whoever holds the name `reports:acme`
//! runs the work, everyone else is told `None` (or waits a while), and if the
//! holder dies the store lets the lease go when its TTL runs out. Use it for
//! work that must not run twice at once: a nightly export, a cache rebuild,
//! a payment batch, a scheduled job on a fleet of servers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! use std::time::Duration;
//! use lock_core::LockManager;
//!
//! let locks = LockManager::memory();
//! let lock = locks
//!     .lock("reports:acme", Duration::from_secs(600))
//!     .wait_for(Duration::from_secs(2));
//!
//! match lock.run(async { Ok::<_, lock_core::Error>(build_report()) }).await? {
//!     Some(report) => println!("built {report}"),
//!     None => println!("someone else is building it"),
//! }
//! # Ok(()) }
//! # fn build_report() -> &'static str { "report" }
//! ```
//!
//! That manager keeps its leases in this process's memory. Across processes
//! and machines, give it a shared store instead, from a URL whose scheme
//! picks it ([`connect`]), and install it once at startup for the
//! `#[locked]` functions and library code that ask the [`registry`]:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // redis://..., postgres://..., etcd://..., memcache://... (each behind its feature);
//! // LOCK_URL is the variable the `locks` operator tool reads too.
//! let url = std::env::var("LOCK_URL")?;
//! lock_core::registry::install(lock_core::connect(&url).await?)?;
//! lock_core::registry::verify()?; // every declared lock has the manager it needs
//! # Ok(()) }
//! ```
//!
//! # The pieces
//!
//! - `#[locked]` (the `locked` attribute, default feature `macros`): runs an
//!   `async fn`'s body only while holding a named lease. Its keys, return
//!   types and equivalent code are in its own docs.
//! - [`LockManager`]: a store plus a key prefix; hands out [`Lock`]s and
//!   [`Election`]s ([`LockManager::election`]).
//! - [`Lock`]: a named lease not yet held; [`Lock::acquire`], [`Lock::run`]
//!   (which also re-enters a lock its task already holds), and the lifecycle
//!   options ([`Lock::renew`], [`Lock::at_least`], [`Lock::fenced`],
//!   [`OnLost`]...); [`Lock::permits`] makes it a semaphore of n holders,
//!   [`Lock::read`] takes a name's read side.
//! - [`LockGuard`]: a held lease; release, extend, keep. Dropping it releases.
//! - [`current`]: `Some(`[`Lease`]`)` inside locked work, the lease that work
//!   holds (its key, token, fence and deadline, and the lost-lease signal
//!   [`Lease::lost`]); `None` elsewhere.
//! - [`Election`]: one leader per name across a fleet, with terms that fence
//!   ([`Leadership`]; [`Term`], the view of one that [`Election::lead`]
//!   hands its work) and a stream of who leads.
//! - [`LockStore`]: where leases live, and the contract every store keeps
//!   ([`store`]). [`MemoryStore`] is built in; `RedisStore` (feature `redis`)
//!   covers one Redis server, Redis Cluster and Redis behind Sentinel;
//!   `MemcachedStore` (feature `memcached`) keeps leases in memcached;
//!   `PostgresStore` (feature `postgres`) in a PostgreSQL table;
//!   `EtcdStore` (feature `etcd`) by consensus, with fencing tokens that
//!   survive failover. Each store's docs say what it adds to the guarantee
//!   below, and what it needs.
//! - [`connect`]: any store from a URL (`redis://...`, `postgres://...`,
//!   `memory://`...), the scheme picking the store; [`connect_with`] and
//!   [`ConnectOptions`] set it up; [`Tls`] gives every store its CA and
//!   client certificate the same way.
//! - [`registry`]: the application-wide manager, every lock the binary
//!   declares ([`registry::declared`]), and the boot-time check of both
//!   ([`registry::verify`]). With no manager installed, locks fail with
//!   [`Error::NoManager`] rather than lock one process only.
//! - [`testing`]: a guide to testing code that takes locks (a memory
//!   manager per test, `shared` locks, the paused clock, spawned tasks).
//! - [`LockManager::list`] and the `locks` command (crate `lock-cli`): which
//!   locks are held, by whom, for how long; `metrics` (feature `metrics`):
//!   acquisitions, waits, hold times and lost leases, through the `metrics`
//!   facade.
//!
//! # Feature flags
//!
//! | feature | what it adds |
//! |---|---|
//! | `macros` (default) | the `#[locked]` attribute, re-exported as `lock_core::locked` |
//! | `redis`, `redis-tls` | `RedisStore` and `RedisConfig`; `rediss://` URLs |
//! | `memcached`, `memcached-tls` | `MemcachedStore` and `MemcachedConfig`; `memcaches://` URLs |
//! | `postgres`, `postgres-tls` | `PostgresStore` and `PostgresConfig`; `sslmode` other than `disable` |
//! | `etcd`, `etcd-tls` | `EtcdStore` and `EtcdConfig`; `https://` members |
//! | `metrics` | the `metrics` module: every operation counted and timed through the `metrics` facade |
//! | `store-kit` | `store::kit`, the toolkit the built-in stores are written with, for a store kept in another crate |
//!
//! The memory store is always built. With a store's feature off,
//! [`connect`] refuses its URLs with [`Error::StoreNotBuilt`], naming the
//! feature.
//!
//! # What goes wrong without this
//!
//! Jobs that must not overlap (a nightly export, a cache rebuild, a payment
//! batch) run twice when two servers, two workers or two retries start them
//! at once. A process-local mutex cannot see the other servers; a lock without
//! an expiry stays locked forever when its holder crashes; a lock released
//! without checking its owner frees someone else's lease after an overrun.
//!
//! # The guarantee, stated honestly
//!
//! This is the one statement of what the library guarantees; the stores and
//! the attribute link here and add only what is theirs.
//!
//! **A lease, not a mutex.** While a holder's lease is live, nobody else
//! acquires it, and release and extend only ever act on the caller's own
//! lease (they compare its owner token). But a holder that overruns its TTL
//! loses the lease, and the next holder can run alongside it:
//!
//! ```text
//! t=0s   A acquires (ttl 10s)       A works...
//! t=10s  lease expires              B acquires, B works...   A still working
//! t=12s  A releases -> Ok(false)    B's lease is untouched (compare-and-delete)
//! ```
//!
//! Choose TTLs above the work's longest run, or renew them
//! ([`Lock::renew`], capped by [`Lock::max_hold`]). [`LockGuard::release`]
//! returning `Ok(false)` says an overrun happened.
//!
//! **Lost means stopped, before the next holder, where the work lets it.**
//! Renewal and [`OnLost::Cancel`] narrow the window: a renewing holder keeps
//! its lease while it is alive and can reach the store, and cancelled work
//! is dropped at the lease's local deadline, whatever renewal is in flight.
//! That deadline is counted from just before the acquire (or the last
//! renewal) was sent, less the store's clock margin
//! ([`LockStore::clock_margin`]: 1% of the TTL plus 2 ms on the networked
//! stores, zero in memory), so it passes before the store could let anyone
//! else in. For the same reason an acquire whose answer arrives after that
//! deadline (replies queued on a slow link) hands out no guard: it fails
//! with [`Error::Store`], saying so, and the lease is given back. None of
//! this closes the window: under [`OnLost::Continue`], or when a store's
//! clock runs faster than the margin allows, two holders can run at once.
//! Only [fencing tokens](Lock::fenced), checked by the storage the work
//! writes to, reject a stale holder's writes.
//!
//! **Readers never overlap a writer.** On a store that keeps readers
//! ([`LockStore::read_mode`]), a writer's lease and a reader's are never
//! both live. A reader's lease, like any lease, can run out under an
//! overrunning reader, and then a writer can run alongside it, as above.
//!
//! **Cancellation gives leases back.** An acquire, a `run` or a guard
//! dropped at any `.await` (a timeout, a lost `select!`, an aborted task)
//! has whatever lease it took given back: a compare-and-delete on its
//! token, by a task spawned as it goes away. An acquire dropped while its
//! request may still be on its way is looked at again after 20 ms, 250 ms
//! and 4 s when the give-back found nothing, since a store with a pool of
//! connections may run the give-back first. The give-back lands a moment
//! after the drop, not before the drop returns. In memory it is
//! synchronous, even outside a runtime. A runtime that shuts down first
//! (`#[tokio::main]` returning) drops that task unfinished: the lease is
//! then given back on a thread of its own, over a connection of its own
//! ([`LockStore::reopen`]), and the shutdown waits for it, up to 2 s (see
//! [`LockGuard`'s drop](LockGuard#dropped-unreleased)). A guard dropped
//! outside a tokio runtime is given back the same way, before its drop
//! returns (up to 2 s). A store that cannot open a connection of its own
//! leaves the lease to its TTL then, and a WARN says so. The cancellation
//! behaviours of `lock-test-kit`'s store suites check this on every store:
//! they cut thousands of acquires, waiting acquires and `run`s off after a
//! random number of scheduler turns, then check that every name they
//! touched is free again, long before any TTL.
//!
//! **A failed give-back is tried again.** A release the store fails (after
//! `run`'s work, a dropped guard's, an abandoned acquire's) is tried again in
//! the background, after 50 ms and then doubling pauses up to 2 s, until
//! the store answers or the lease's TTL has passed: a store that is down for
//! a moment does not strand the lease for its whole TTL. [`Lock::run`]
//! returns the work's own result all the same: a lock error never replaces
//! the work's error, and a failed release after successful work is logged
//! at WARN.
//!
//! **TTLs are kept at least as long as asked.** Every TTL is rounded up to
//! the store's resolution ([`LockStore::ttl_resolution`]), never down:
//! whole milliseconds in memory, on Redis and on PostgreSQL (`250us` is kept
//! for 1 ms); whole seconds on etcd and memcached. Memcached adds a second
//! more, its clock ticking once a second (a 1500 ms lease lasts between 2
//! and 3 s), and etcd refuses TTLs below its shortest lease, about 2 s with
//! its default settings ([`LockStore::min_ttl`]). A TTL beyond what the store
//! can keep is an [`Error::InvalidTtl`], never silently shortened.
//!
//! **Time is the store's.** A lease's TTL runs on the clock of the store
//! that keeps it: tokio's monotonic clock in memory, the server's on Redis,
//! memcached and etcd, the database's `clock_timestamp()` on PostgreSQL
//! (a wall clock: see `PostgresStore` on clock steps). No decision compares
//! wall clocks across machines; the local deadline above is on this
//! process's monotonic clock.
//!
//! **Tests on a paused clock.** Every deadline the runtime sleeps toward is
//! on tokio's clock, and the memory store keeps TTLs on it too: under
//! `#[tokio::test(start_paused = true)]`, waits, renewals, [`Lease::lost`]
//! and in-memory expiry all run in virtual time. [`testing`] shows it.
//!
//! **Shared only where it says so.** A [`MemoryStore`] excludes tasks of one
//! process only; [`LockManager::is_shared`] says whether a manager's locks
//! reach other processes, [`Lock::shared`] refuses the others, and
//! [`registry::verify`] reports `shared` declarations on a per-process
//! manager at boot. A networked store is exactly as durable as its server:
//! see each store's own notes.
//!
//! # Events
//!
//! Every operation is traced with [`tracing`](https://docs.rs/tracing),
//! `key` being the store key (prefix and name); each message says what
//! happened and, when something went wrong, what to do:
//!
//! | message | level | fields |
//! |---|---|---|
//! | `lock acquired` | DEBUG | `key`, `waited_us`, `fence` |
//! | `lock contended` (held for the whole wait) | DEBUG | `key`, `waited_us`, `holder_remaining_ms` |
//! | `lock released` | DEBUG | `key`, `held_ms` |
//! | `lock overran: ...` (release found the lease gone) | WARN | `key`, `held_ms` |
//! | `could not release the lock after the work finished; ...` | WARN | `key`, `error` |
//! | `could not renew the lock; retrying until its deadline` | WARN | `key`, `error` |
//! | `lock reached its max_hold: no longer renewing` | WARN | `key` |
//! | `lock lease lost: cancelled the work`, or `... while the work runs on; ...` | ERROR | `key`, `held_ms` |
//! | `a dropped lock could not be given back on a tokio runtime ...` (no runtime, or it had shut down, and the store could not be reached on a connection of its own) | WARN | `key` |
//!
//! With the `metrics` feature the same operations are counted and timed
//! (the `metrics` module lists each metric and its labels).
//!
//! # Examples
//!
//! In `lock-core/examples/` of the repository:
//!
//! - `quickstart`: five workers race for one report, one builds it, and a
//!   waiter gets the lock the moment it is released (`cargo run -p
//!   lock-core --example quickstart`; with `REDIS_URL` and `--features
//!   redis`, across processes).
//! - `scheduler`: a scheduler's "one server per minute" with
//!   `#[locked(..., at_least = "50s", shared)]`, run in two terminals
//!   against one Redis (`REDIS_URL=redis://127.0.0.1:6379 cargo run -p
//!   lock-core --features redis --example scheduler -- 2 5`): every slot is
//!   reported by exactly one process.
//! - `leader`: a fleet of three on the memory store, its leader crashing
//!   twice (`cargo run -p lock-core --example leader`; with `LOCK_URL`, one
//!   instance per process).
//!
//! The repository's `docs/performance.md` and `docs/reliability.md` give
//! every measured figure with the command, commit and date it comes from.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
/// The property checks of the fuzz targets in the repository's `fuzz/`
/// folder: not part of the API.
#[cfg(feature = "__fuzz")]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::fuzzing::*;
}
mod acquire;
mod connect;
mod election;
mod error;
#[cfg(any(test, feature = "__fuzz"))]
mod fuzzing;
mod giveback;
mod guard;
mod holder;
mod inspect;
mod key;
mod lease;
mod lock;
mod manager;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
mod options;
pub mod registry;
pub mod store;
mod supervise;
pub mod testing;
mod token;

pub use connect::{ConnectOptions, connect, connect_with};
pub use election::{Election, Leader, Leadership, Observe, Term};
pub use error::{Chain, Error, Result};
pub use guard::LockGuard;
pub use holder::Holder;
pub use lease::{Lease, current};
pub use lock::Lock;
#[cfg(feature = "macros")]
pub use lock_macros::locked;
pub use manager::{DEFAULT_PREFIX, LockManager};
pub use options::{LockOptions, OnContended, OnLost};
pub use store::LockStore;
pub use store::kit::Tls;
// MemoryStore, and each store its feature builds (RedisStore, RedisConfig...).
pub use store::builtin::*;

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn the_handles_cross_threads_and_tasks() {
        // Guards are held across `.await` points in spawned tasks, and
        // managers live in statics: all of them must be Send + Sync.
        assert_send_sync::<crate::LockManager>();
        assert_send_sync::<crate::Lock>();
        assert_send_sync::<crate::LockGuard>();
        assert_send_sync::<crate::Lease>();
        assert_send_sync::<crate::Leadership>();
        assert_send_sync::<crate::Term>();
        assert_send_sync::<crate::Holder>();
        assert_send_sync::<crate::MemoryStore>();
    }
}
