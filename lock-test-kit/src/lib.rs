//! The test suites every lock-core store passes, for a store written
//! outside lock-core.
//!
//! A [`LockStore`] promises more than its method signatures say: an acquire
//! that is one atomic set-if-absent, a release that never frees another
//! holder's lease, a waiter woken by a release rather than polling, leases
//! given back when a future is dropped halfway. A store that gets one of
//! these wrong still compiles, and usually still works on a quiet day. The
//! suites here are the ones lock-core's own stores (memory, Redis, Redis
//! Cluster, memcached, PostgreSQL, etcd) are held to, behaviour by
//! behaviour, so a store kept in another crate proves itself the same way:
//!
//! - [`store_contract!`]: the [`contract`] suite, the behaviours of
//!   acquire, release, extend, waiting, listing, semaphores, bad input, and
//!   [`cancellation`] at random points (every lock future cut off at a
//!   random `.await` must leave no lease behind), and the [`read`] side of
//!   a name (or its clear refusal on a store that keeps no readers);
//! - [`lifecycle_contract!`]: the [`lifecycle`] suite, renewal and its cap,
//!   the lost-lease signal, `at_least` claims, fencing, the `shared`
//!   requirement and contention as an error.
//!
//! # Using it
//!
//! Add the kit next to lock-core as a dev-dependency:
//!
//! ```toml
//! [dev-dependencies]
//! lock-test-kit = "0.1"
//! ```
//!
//! and give each suite one line in a test file, say `tests/contract.rs`,
//! naming how to make a manager over the store under test:
//!
//! ```
//! use lock_core::LockManager;
//! # use my_store::MyStore;
//! # mod my_store {
//! #     use std::time::Duration;
//! #     use lock_core::store::{AcquireRequest, Attempt, BoxFuture};
//! #     use lock_core::{Holder, LockStore, MemoryStore, Result};
//! #     pub struct MyStore(MemoryStore);
//! #     impl MyStore {
//! #         pub fn new() -> Self { MyStore(MemoryStore::new()) }
//! #     }
//! #     impl LockStore for MyStore {
//! #         fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> { self.0.acquire(request) }
//! #         fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.release(key, token) }
//! #         fn extend<'a>(&'a self, key: &'a str, token: &'a str, ttl: Duration) -> BoxFuture<'a, Result<bool>> { self.0.extend(key, token, ttl) }
//! #         fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.force_release(key) }
//! #         fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> { self.0.holder(key) }
//! #         fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> { self.0.list(prefix) }
//! #         fn is_shared(&self) -> bool { self.0.is_shared() }
//! #         fn max_ttl(&self) -> Duration { self.0.max_ttl() }
//! #     }
//! # }
//!
//! lock_test_kit::store_contract!(async { Some(LockManager::new(MyStore::new())) });
//! lock_test_kit::lifecycle_contract!(async { Some(LockManager::new(MyStore::new())) });
//! # fn main() {}
//! ```
//!
//! `cargo test` then runs one test per behaviour, named for it
//! (`exactly_one_caller_gets_the_lock`, `a_waiter_does_not_poll_the_store`,
//! ...), so a failure names the promise the store broke, and its message
//! says how.
//!
//! The argument is an async expression yielding `Option<LockManager>`,
//! awaited anew at the start of every test, inside that test's runtime: it
//! may connect to a server, and each test then has a connection of its own.
//! Each test runs under a key prefix of its own ([`isolated`]), so the tests
//! run in parallel against one server without seeing each other's keys.
//!
//! # `None`: skipping
//!
//! `None` skips the test: it returns at once, and the test harness counts it
//! as passed. It is for a store whose server is not there to test against,
//! on a laptop without it. A skip that passes in silence hides a suite that
//! never ran, so the expression should say that it skipped, and fail where
//! the server must be there (CI):
//!
//! ```
//! use lock_core::LockManager;
//! # use my_store::MyStore;
//! # mod my_store {
//! #     use std::time::Duration;
//! #     use lock_core::store::{AcquireRequest, Attempt, BoxFuture};
//! #     use lock_core::{Holder, LockStore, MemoryStore, Result};
//! #     pub struct MyStore(MemoryStore);
//! #     impl MyStore {
//! #         pub async fn connect(_url: &str) -> Result<Self> { Ok(MyStore(MemoryStore::new())) }
//! #     }
//! #     impl LockStore for MyStore {
//! #         fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> { self.0.acquire(request) }
//! #         fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.release(key, token) }
//! #         fn extend<'a>(&'a self, key: &'a str, token: &'a str, ttl: Duration) -> BoxFuture<'a, Result<bool>> { self.0.extend(key, token, ttl) }
//! #         fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> { self.0.force_release(key) }
//! #         fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> { self.0.holder(key) }
//! #         fn is_shared(&self) -> bool { self.0.is_shared() }
//! #         fn max_ttl(&self) -> Duration { self.0.max_ttl() }
//! #     }
//! # }
//!
//! /// A manager over the server `MY_STORE_URL` names; without one, `None`
//! /// (the test is skipped), or a failure under `CI`.
//! async fn my_store() -> Option<LockManager> {
//!     let Ok(url) = std::env::var("MY_STORE_URL") else {
//!         assert!(std::env::var_os("CI").is_none(), "CI must set MY_STORE_URL");
//!         eprintln!("SKIPPED: set MY_STORE_URL to run the store contract");
//!         return None;
//!     };
//!     let store = MyStore::connect(&url).await.expect("MY_STORE_URL answers");
//!     Some(LockManager::new(store))
//! }
//!
//! lock_test_kit::store_contract!(my_store());
//! # fn main() {}
//! ```
//!
//! # What the tests need
//!
//! Nothing but the kit and lock-core: each generated test is a plain
//! `#[test]` that builds its own tokio runtime (multi-threaded, two workers,
//! all drivers on), so the crate using the macros needs no tokio features of
//! its own. The expression runs inside that runtime, so it may use tokio
//! freely; naming `tokio` in it needs tokio as a dependency like any crate.
//!
//! The suites speak in milliseconds, scaled to what the store says of its
//! clock: a store that keeps whole seconds
//! ([`LockStore::ttl_resolution`]) or has a minimum lease
//! ([`LockStore::min_ttl`]) gets every lease and sleep stretched to fit (see
//! [`ms`]). Its other reports shape the suite too: a store without fencing
//! ([`LockStore::fencing`]) must refuse fenced locks, one that cannot list
//! must say so with `Error::Unsupported`, and one that is not
//! [shared][`LockStore::is_shared`] must have `shared` locks refused. Time
//! bounds are hang guards, many times what a correct store needs.
//!
//! # Beyond the macros
//!
//! Every behaviour is a public `async fn` taking a manager, for running one
//! on its own or on a manager built some other way (such as
//! [`contract::every_call_works_without_a_time_bound`], for a store
//! configured with no time bound). [`Instrumented`] wraps any store to count
//! the calls reaching it and inject failures, and [`cancellation`] cuts lock
//! futures off at random points, for a store's own tests.
//!
//! [`LockStore`]: lock_core::LockStore
//! [`LockStore::ttl_resolution`]: lock_core::LockStore::ttl_resolution
//! [`LockStore::min_ttl`]: lock_core::LockStore::min_ttl
//! [`LockStore::fencing`]: lock_core::LockStore::fencing
//! [`LockStore::is_shared`]: lock_core::LockStore::is_shared

mod counted;
mod instrumented;
mod support;

pub mod cancellation;
pub mod contract;
pub mod election;
pub mod lifecycle;
pub mod read;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use instrumented::Instrumented;
pub use support::{isolated, longest, ms};
