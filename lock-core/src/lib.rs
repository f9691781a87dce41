//! Named leases across tasks, processes and machines.
//!
//! A lease is a lock with an expiry: whoever holds the name `reports:acme`
//! runs the work, everyone else is told `None` (or waits a while), and if the
//! holder dies the store lets the lease go when its TTL runs out.
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
//! # The pieces
//!
//! - `#[locked]` (the `locked` attribute, default feature `macros`): runs an
//!   `async fn`'s body only while holding a named lease.
//! - [`LockManager`]: a store plus a key prefix; hands out [`Lock`]s.
//! - [`Lock`]: a named lease not yet held; [`Lock::acquire`], [`Lock::run`],
//!   and the lifecycle options ([`Lock::renew`], [`Lock::at_least`],
//!   [`Lock::fenced`], [`OnLost`]...).
//! - [`LockGuard`]: a held lease; release, extend, keep. Dropping it releases.
//! - [`current`]: the [`Lease`] held by the locked work running now, with its
//!   lost-lease signal.
//! - [`LockStore`]: where leases live. [`MemoryStore`] is built in;
//!   `EtcdStore` (feature `etcd`) keeps them by consensus, with fencing
//!   tokens that survive failover;
//!   `PostgresStore` (feature `postgres`) keeps them in a PostgreSQL table;
//!   `MemcachedStore` (feature `memcached`) keeps leases in memcached; `RedisStore`
//!   (feature `redis`) covers Redis and Redis Cluster.
//! - [`connect`]: any store from a URL (`redis://...`, `postgres://...`,
//!   `memory://`...), the scheme picking the store; [`connect_with`] and
//!   [`ConnectOptions`] set it up.
//! - [`registry`]: the application-wide manager, and every lock the binary
//!   declares.
//! - [`LockManager::list`] and the `locks` command (crate `lock-cli`): which
//!   locks are held, by whom, for how long; `metrics` (feature `metrics`):
//!   acquisitions, waits, hold times and lost leases, through the `metrics`
//!   facade.
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
//! A lease, not a mutex. While a holder's lease is live, nobody else
//! acquires it, and release and extend only ever act on the caller's own
//! lease. But a holder that overruns its TTL loses the lease, and the next
//! holder can run alongside it:
//!
//! ```text
//! t=0s   A acquires (ttl 10s)       A works...
//! t=10s  lease expires              B acquires, B works...   A still working
//! t=12s  A releases -> Ok(false)    B's lease is untouched (compare-and-delete)
//! ```
//!
//! Choose TTLs above the work's longest run, or renew them
//! ([`Lock::renew`], capped by [`Lock::max_hold`]). Renewal and
//! [`OnLost::Cancel`] narrow the window: a renewing holder keeps its lease
//! while it is alive and can reach the store, and cancelled work stops at the
//! lease's local deadline, which passes a clock margin before the store's
//! (see [`LockStore::clock_margin`]), whatever renewal is in flight. They do
//! not close it: under [`OnLost::Continue`], or when a store's clock runs
//! faster than the margin allows, two holders can run at once. Only
//! [fencing tokens](Lock::fenced), checked by the storage the work writes
//! to, reject a stale holder's writes.
//!
//! Cancellation gives leases back: an acquire, a `run` or a guard dropped at
//! any `.await` (a timeout, a lost `select!`, an aborted task) has whatever
//! lease it took given back by a task spawned as it goes away. Outside a
//! tokio runtime, or while the runtime shuts down, no such task can run; the
//! lease then ends at its TTL, and a WARN says so.
//!
//! A [`MemoryStore`] excludes tasks of one process only;
//! [`LockManager::is_shared`] says whether a manager's locks reach other
//! processes, and [`Lock::shared`] refuses the others. A networked store is
//! exactly as durable as its server: see each store's own notes.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod acquire;
mod connect;
mod election;
mod error;
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
mod token;

pub use connect::{ConnectOptions, connect, connect_with};
pub use election::{Election, Leader, Leadership, Observe};
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
        assert_send_sync::<crate::Holder>();
        assert_send_sync::<crate::MemoryStore>();
    }
}
