//! The promises at the edges that hold in the runtime, whatever the store:
//! TTLs rounded to what a store can keep, and guards dropped while their
//! runtime shuts down.
//!
//! [`Instrumented`] stands in for a networked store here: it has no
//! synchronous release, so a dropped guard must go through a spawned task,
//! exactly as on Redis.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockManager, MemoryStore};
use lock_test_kit::Instrumented;
use lock_tests::logs::Captured;

const LONG: Duration = Duration::from_secs(60);

/// A TTL finer than a store keeps is rounded *up* to the store's
/// resolution, never down: 1.5 ms must not become the 1 ms Redis would
/// keep after truncation, and 0.5 ms must not expire at once on one store
/// and last 1 ms on another. Every store gets whole milliseconds.
///
/// On tokio's paused clock, which the memory store keeps its leases by: on
/// the real one, a busy machine can take longer than a 1 ms lease to answer
/// its acquire, which then fails as a late reply (as it must).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_ttl_finer_than_the_store_keeps_is_rounded_up_to_its_resolution() {
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    let locks = LockManager::new(store.clone());
    for (given, kept) in [
        (Duration::from_micros(500), Duration::from_millis(1)),
        (Duration::from_micros(1500), Duration::from_millis(2)),
        (Duration::from_nanos(1), Duration::from_millis(1)),
        (Duration::from_millis(7), Duration::from_millis(7)),
    ] {
        let guard = locks
            .lock(format!("fine-{}", given.as_nanos()), given)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let extended = guard.extend(given).await.expect("extend");
        assert!(extended, "still ours: the lease lasted at least {kept:?}");
        drop(guard);
        let ttls = store.ttls();
        assert_eq!(
            &ttls[ttls.len() - 2..],
            [kept, kept],
            "acquire and extend of {given:?} reach the store as {kept:?}"
        );
    }
}

/// A guard dropped while its runtime shuts down cannot be released (the
/// release task is never run); the lease then ends at its TTL, and the
/// operator must be told, as when a guard is dropped outside any runtime.
#[test]
fn a_guard_dropped_while_its_runtime_shuts_down_says_its_lease_ends_at_its_ttl() {
    let (captured, _logging) = Captured::start();
    let memory = MemoryStore::new();
    let locks = LockManager::new(Instrumented::new(Arc::new(memory.clone())));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let guard = locks
            .lock("shutdown", LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        // A task holding the guard forever: the shutdown drops it.
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
    });
    drop(runtime);
    let warned = captured.matching("WARN", "lock:shutdown");
    assert!(
        warned.iter().any(|line| line.contains("ttl")),
        "a WARN names the lock and says it ends at its ttl: {:?}",
        captured.lines()
    );
    assert_eq!(memory.len(), 1, "the lease was indeed left to its ttl");
}

/// The same for a guard dropped outside any runtime, of a store that needs
/// I/O and cannot open a connection of its own (this wrapper cannot; Redis
/// can, and gives the lease back: see the Redis edges): the operator is
/// told at WARN.
#[test]
fn a_guard_dropped_outside_a_runtime_says_its_lease_ends_at_its_ttl() {
    let (captured, _logging) = Captured::start();
    let locks = LockManager::new(Instrumented::new(Arc::new(MemoryStore::new())));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let guard = runtime
        .block_on(locks.lock("outside", LONG).acquire())
        .expect("acquire")
        .expect("free");
    drop(guard);
    let warned = captured.matching("WARN", "lock:outside");
    assert!(
        warned.iter().any(|line| line.contains("ttl")),
        "a WARN names the lock and says it ends at its ttl: {:?}",
        captured.lines()
    );
}
