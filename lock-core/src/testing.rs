//! Testing code that takes locks: a guide.
//!
//! Code under test takes its locks from the [`registry`](crate::registry)
//! (`#[locked]` functions, `registry::manager()`), whose default manager is
//! one per process. Tests in one binary run in parallel threads of one
//! process, so a manager [`install`](crate::registry::install)ed by one test
//! is every test's, and two tests that take the same lock name contend with
//! each other. And with nothing installed every lock fails with
//! [`Error::NoManager`](crate::Error::NoManager): locks fail closed. What
//! follows gives each test a manager of its own, without globals.
//!
//! # A memory manager per test
//!
//! [`registry::with_manager`](crate::registry::with_manager) runs a future
//! with its own manager: inside it, every `#[locked]` function and every
//! `registry::manager()` call of the task uses that manager, whatever is
//! installed (named managers, `manager = "..."`, included). A fresh
//! [`LockManager::memory()`](crate::LockManager::memory) per test needs no
//! server and shares nothing with the other tests.
//!
//! ```rust,standalone_crate
//! use lock_core::{LockManager, locked, registry};
//!
//! #[locked(name = "invoices:{customer}", ttl = "30s")]
//! async fn send_invoice(customer: u64) -> Result<&'static str, lock_core::Error> {
//!     Ok("sent")
//! }
//!
//! // #[tokio::test]
//! async fn a_second_send_while_the_first_holds_the_lock_is_skipped() {
//!     let locks = LockManager::memory();
//!     registry::with_manager(locks.clone(), async {
//!         assert_eq!(send_invoice(7).await.unwrap(), Some("sent"));
//!
//!         // Hold the lock as another worker would, then call again.
//!         let _held = locks
//!             .lock("invoices:7", std::time::Duration::from_secs(30))
//!             .acquire()
//!             .await
//!             .unwrap()
//!             .expect("free");
//!         assert_eq!(send_invoice(7).await.unwrap(), None, "skipped, not run");
//!     })
//!     .await;
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() { a_second_send_while_the_first_holds_the_lock_is_skipped().await }
//! ```
//!
//! Tests of one binary that share a resource (a database, a port) can take
//! turns with `#[locked]` above `#[tokio::test]`. That lock is taken before
//! the test's body, so before any `with_manager`: it names the manager
//! every process has, `manager = "process"`
//! ([`registry::PROCESS`](crate::registry::PROCESS)), and excludes the
//! tests of this binary only.
//!
//! Keep `registry::install` for `main`. A test binary that must exercise
//! `main`'s own setup (say, `registry::verify()` on the installed
//! managers) is a binary of its own (a file in `tests/`), where that
//! install is the only one.
//!
//! # `shared` locks: `declared_shared()`
//!
//! A [`shared`](crate::Lock::shared) lock (`#[locked(shared)]`) refuses a
//! per-process store with [`Error::NotShared`](crate::Error::NotShared):
//! in production that catches a fleet whose processes would each lock
//! their own memory. A test on one process vouches for its memory manager
//! with [`declared_shared`](crate::LockManager::declared_shared):
//!
//! ```rust,standalone_crate
//! use lock_core::{LockManager, locked, registry};
//!
//! #[locked(name = "payouts", ttl = "1m", shared)]
//! async fn pay_out() -> Result<u32, lock_core::Error> {
//!     Ok(3)
//! }
//!
//! // #[tokio::test]
//! async fn a_payout_runs_on_a_memory_manager_declared_shared() {
//!     let refused = registry::with_manager(LockManager::memory(), pay_out()).await;
//!     assert!(matches!(refused, Err(lock_core::Error::NotShared { .. })));
//!
//!     let locks = LockManager::memory().declared_shared();
//!     assert_eq!(registry::with_manager(locks, pay_out()).await.unwrap(), Some(3));
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() { a_payout_runs_on_a_memory_manager_declared_shared().await }
//! ```
//!
//! # Time: the paused clock
//!
//! The memory store keeps TTLs on tokio's clock, and every wait, renewal
//! and lost-lease deadline of the runtime is on it too. Under
//! `#[tokio::test(start_paused = true)]` (tokio's `test-util` feature), a
//! test of a ten-minute TTL or a thirty-second wait takes no real time:
//! the clock jumps ahead whenever every task is waiting, or when the test
//! calls `tokio::time::advance`.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::LockManager;
//!
//! // #[tokio::test(start_paused = true)]
//! async fn a_lease_whose_holder_died_is_free_after_its_ttl() {
//!     let locks = LockManager::memory();
//!     let ttl = Duration::from_secs(600);
//!     let dead = locks.lock("import", ttl).acquire().await.unwrap().expect("free");
//!     dead.keep(); // a holder that dies never releases
//!
//!     assert!(locks.lock("import", ttl).acquire().await.unwrap().is_none());
//!     tokio::time::advance(ttl).await;
//!     assert!(locks.lock("import", ttl).acquire().await.unwrap().is_some());
//! }
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() { a_lease_whose_holder_died_is_free_after_its_ttl().await }
//! ```
//!
//! A networked store keeps TTLs on its server's clock, which a paused
//! tokio clock does not move: test expiry there in real time, with short
//! TTLs.
//!
//! # Spawned tasks
//!
//! `with_manager`'s override belongs to the task that runs it: tokio does
//! not pass task-locals on to tasks spawned from it, and no task knows
//! which scope spawned it. A task spawned from inside `with_manager` sees
//! the installed default manager instead, and with none installed its
//! locks fail with `NoManager`, saying "this task runs outside
//! registry::with_manager (a spawned task does not inherit it)". Give the
//! spawned future the override as well, or hand the task the manager:
//!
//! ```rust,standalone_crate
//! use std::time::Duration;
//! use lock_core::{LockManager, locked, registry};
//!
//! #[locked(name = "thumbnails:{id}", ttl = "30s")]
//! async fn render(id: u64) -> Result<u64, lock_core::Error> {
//!     Ok(id)
//! }
//!
//! // #[tokio::test]
//! async fn renders_spawned_by_the_code_under_test_use_the_tests_manager() {
//!     registry::with_manager(LockManager::memory(), async {
//!         // Taken inside the scope: this test's manager.
//!         let locks = registry::manager();
//!         let spawned = tokio::spawn(registry::with_manager(locks.clone(), render(1)));
//!         assert_eq!(spawned.await.unwrap().unwrap(), Some(1));
//!
//!         let handed = tokio::spawn(async move {
//!             let lock = locks.lock("thumbnails:2", Duration::from_secs(30));
//!             lock.run(async { Ok::<_, lock_core::Error>(2) }).await
//!         });
//!         assert_eq!(handed.await.unwrap().unwrap(), Some(2));
//!     })
//!     .await;
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() { renders_spawned_by_the_code_under_test_use_the_tests_manager().await }
//! ```
//!
//! Code that spawns deep inside the application is easiest to test when it
//! takes its manager as an argument (or in a struct), built from
//! `registry::manager()` by its caller: the test then passes its own.
//!
//! # A real store: one prefix per test
//!
//! Tests that run against a real server (a Redis in CI, to check what a
//! memory store cannot show) share that server with every other test and
//! with earlier runs, whose leases may still be alive if a run was killed.
//! Give each test a [prefix](crate::LockManager::with_prefix) of its own,
//! so its names meet no other test's:
//!
//! ```no_run
//! use lock_core::registry;
//!
//! // #[tokio::test]
//! async fn nightly_export_runs_once_across_two_workers() -> Result<(), Box<dyn std::error::Error>> {
//!     let url = std::env::var("REDIS_URL")?;
//!     let prefix = format!("test:nightly-export:{}:", std::process::id());
//!     let locks = lock_core::connect(&url).await?.with_prefix(prefix);
//!     registry::with_manager(locks, async {
//!         // ... run two workers against the same Redis ...
//!     })
//!     .await;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! The test's name keeps tests apart; the process id keeps a run apart
//! from a killed earlier run's leftovers.
