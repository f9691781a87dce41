//! The toolkit for writing a store: what every store needs, written once.
//!
//! The built-in networked stores (Redis, memcached, PostgreSQL, etcd) are
//! written with this module and the public [`LockStore`](crate::LockStore)
//! trait alone, as a store in another crate would be. A new store uses
//! these pieces instead of its own copies, so the edges fixed here are
//! fixed for it too:
//!
//! - [`Deadline`]: one time bound on a whole call, retries included, so a
//!   silent server fails the call instead of hanging its caller.
//! - [`Waiters`]: the process-local registry of waiters that a store's
//!   release notifications wake, registered *before* the attempt so a
//!   release racing with it is never missed; [`Interest`] is one waiter's
//!   registration, ready to become a [`Wakeup`](crate::store::Wakeup).
//! - [`Backoff`]: the growing pause between reconnect attempts, grown
//!   whether the last connection failed or came up and dropped at once.
//! - [`Background`]: a store's listener and watch tasks, aborted with it.
//! - [`Reopen`]: what a store was opened from, kept so it can open itself
//!   again ([`LockStore::reopen`](crate::LockStore::reopen)) when the
//!   runtime its connections run on shuts down with a lease still to give
//!   back.
//! - [`Tls`]: the CA and client certificate of a store's TLS connections,
//!   given the same way (and with the same URL words) to every store.
//! - [`check_lease`] ([`check_key`] and [`validate_ttl`]), [`store_ttl`],
//!   [`MAX_TTL`]: the checks on a request's key and TTL, with the
//!   runtime's messages and rounding.
//! - [`StoreUrl`] ([`scheme`], [`percent_decode`]): the one reading of a
//!   store URL, which every built-in store reads its URL with.
//! - [`redacted`], [`scrub`], [`invalid_url`]: keeping a URL's passwords
//!   out of every error and log line, by reading the URL with the same
//!   readers the stores use (and libpq's `key=value` form with the
//!   PostgreSQL store's), never by a pattern beside them.
//! - [`owner_of`]: the readable `host:pid` in an owner token, for a store
//!   that keeps it beside the token.
//!
//! It is public with the `store-kit` feature. The test suites every store
//! must pass are in the `lock-test-kit` crate; `CONTRIBUTING.md` lists the
//! steps to add a store to this repository.
//!
//! # A store in a few lines
//!
// The examples here run with the `store-kit` feature, which makes this
// module public; without it they cannot reach it, and are left out.
#![cfg_attr(feature = "store-kit", doc = "```")]
#![cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_core::store::kit::{Deadline, check_key};
//! use lock_core::store::{AcquireRequest, Attempt, BoxFuture, LockStore};
//! use lock_core::{Holder, LockManager, MemoryStore, Result};
//!
//! /// A store that bounds every call of an inner store by one deadline.
//! struct Bounded(MemoryStore);
//!
//! impl LockStore for Bounded {
//!     fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
//!         Box::pin(async move {
//!             check_key(request.key)?;
//!             Deadline::after(Duration::from_secs(3), "the timeout")
//!                 .bound(self.0.acquire(request))
//!                 .await
//!                 .map_err(|e| lock_core::Error::store("acquire", request.key, e))
//!         })
//!     }
//!     # fn release<'a>(&'a self, k: &'a str, t: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.release(k, t) }
//!     # fn extend<'a>(&'a self, k: &'a str, t: &'a str, ttl: Duration) -> BoxFuture<'a, Result<bool>> { self.0.extend(k, t, ttl) }
//!     # fn force_release<'a>(&'a self, k: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.force_release(k) }
//!     # fn holder<'a>(&'a self, k: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> { self.0.holder(k) }
//!     // ... release, extend, force_release, holder likewise.
//!     fn is_shared(&self) -> bool {
//!         false
//!     }
//!     fn max_ttl(&self) -> Duration {
//!         lock_core::store::kit::MAX_TTL
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<()> {
//! let locks = LockManager::new(Arc::new(Bounded(MemoryStore::new())));
//! let guard = locks.lock("reports", Duration::from_secs(30)).acquire().await?;
//! assert!(guard.is_some());
//! # Ok(()) }
//! ```

mod backoff;
mod checks;
pub(crate) mod conninfo;
mod deadline;
pub(crate) mod redact;
mod reopen;
mod tasks;
mod tls;
mod url;
mod waiters;

pub use self::backoff::Backoff;
pub use self::checks::{MAX_TTL, check_key, check_lease, store_ttl, validate_ttl};
pub use self::deadline::{BoxError, CallError, Deadline};
pub use self::redact::{invalid_url, redacted, scrub};
#[allow(unused_imports)]
pub(crate) use self::redact::{scrub_all, secrets};
pub use self::reopen::Reopen;
pub use self::tasks::Background;
#[cfg(any(feature = "postgres-tls", feature = "memcached-tls"))]
pub(crate) use self::tls::Reloading;
pub use self::tls::Tls;
#[cfg(any(
    feature = "postgres-tls",
    feature = "memcached-tls",
    feature = "etcd-tls"
))]
pub(crate) use self::tls::{Verify, client_config};
#[allow(unused_imports)]
pub(crate) use self::tls::{WORDS as TLS_WORDS, explained as tls_explained, hint as tls_hint};
pub use self::url::{Host, StoreUrl, percent_decode, scheme};
pub use self::waiters::{Interest, Waiters, Watch};

/// The readable `host:pid` part of an owner token the runtime made (see
/// [`AcquireRequest::token`](crate::store::AcquireRequest::token)); the
/// whole value for any other text.
///
/// A store that keeps the holder's description in a column of its own
/// (PostgreSQL's `owner`) fills it from here.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::owner_of;
///
/// assert_eq!(owner_of("not a runtime token"), "not a runtime token");
/// ```
pub fn owner_of(token: &str) -> &str {
    crate::token::owner_of(token)
}
