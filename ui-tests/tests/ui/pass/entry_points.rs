//! #[locked] above #[tokio::test], the order that works: tests that share a
//! resource (a database, a port) take turns across the test threads of one
//! binary. The lock is taken before the test body runs, before anything
//! could be installed, so it names the manager every process has,
//! `manager = "process"`. Compiled, linted and run by `cargo test`, like
//! the other pass programs.

use lock_core::locked;

// Each test holds the same lock while it runs, waiting for the other; the
// body sees its lease, so the lock really was taken.
#[locked(
    name = "ui-tests:db",
    ttl = "30s",
    wait = "30s",
    contended = "error",
    manager = "process"
)]
#[tokio::test]
async fn the_first_test_of_the_database_runs_under_the_lock() -> Result<(), lock_core::Error> {
    let lease = lock_core::current().expect("the test body runs under its lock");
    assert_eq!(lease.key(), "lock:ui-tests:db");
    tokio::task::yield_now().await;
    Ok(())
}

#[locked(
    name = "ui-tests:db",
    ttl = "30s",
    wait = "30s",
    contended = "error",
    manager = "process"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_test_of_the_database_takes_its_turn() -> Result<(), lock_core::Error> {
    assert!(
        lock_core::current().is_some(),
        "the test body runs under its lock"
    );
    Ok(())
}
