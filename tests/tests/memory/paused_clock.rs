//! Locks under tokio's paused clock, the way applications write their tests
//! (`#[tokio::test(start_paused = true)]`): waits, renewals, the lost-lease
//! signal and the memory store's TTLs must all follow the paused clock, so a
//! test that sleeps five virtual minutes finishes in milliseconds instead of
//! spinning in real time.
//!
//! Each test runs on a runtime of its own, on a thread, under a real-time
//! guard: code that reads the real clock where it should read tokio's spins
//! or hangs, and the guard turns that into a failure instead of a hung run.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockManager, MemoryStore};
use lock_test_kit::Instrumented;
use tokio::time::Instant;

/// Real time a paused-clock test may take: far more than following the
/// paused clock needs, far less than what the virtual durations below would
/// take in real time.
const REAL_GUARD: Duration = Duration::from_secs(20);

/// Runs `test` on a current-thread runtime whose clock starts paused (and
/// auto-advances whenever the runtime is idle), on its own thread, failing if
/// it takes longer than [`REAL_GUARD`] of real time.
fn paused<F>(test: impl FnOnce() -> F + Send + 'static)
where
    F: Future<Output = ()>,
{
    let (done, finished) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(test());
        let _ = done.send(());
    });
    match finished.recv_timeout(REAL_GUARD) {
        Ok(()) => thread.join().expect("test thread"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The test panicked: show its panic.
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "still running after {REAL_GUARD:?} of real time: the lock code follows the real clock, not tokio's paused one"
        ),
    }
}

fn counted() -> (Instrumented, LockManager) {
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    let locks = LockManager::new(store.clone());
    (store, locks)
}

/// A waiter whose holder keeps the lock sleeps once toward its deadline and
/// gives up there, in virtual time; it must not retry in a loop because the
/// real clock has barely moved.
#[test]
fn a_wait_on_a_held_lock_ends_at_its_deadline_on_the_paused_clock() {
    paused(|| async {
        let (store, locks) = counted();
        let _held = locks
            .lock("held", Duration::from_secs(60))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let started = Instant::now();
        let got = locks
            .lock("held", Duration::from_secs(60))
            .wait_for(Duration::from_secs(3))
            .acquire()
            .await
            .expect("acquire");
        assert!(got.is_none(), "still held at the deadline");
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "waited the full 3 s of virtual time: {:?}",
            started.elapsed()
        );
        assert!(
            store.acquires() <= 4,
            "one attempt, a sleep to the deadline, one more: {} attempts",
            store.acquires()
        );
    });
}

/// A holder whose TTL runs out in virtual time frees the lock in virtual
/// time: the memory store's clock is tokio's too, so a waiter gets in when
/// the holder's 5 s have passed, not 5 real seconds later.
#[test]
fn a_memory_lease_expires_on_the_paused_clock() {
    paused(|| async {
        let (_, locks) = counted();
        locks
            .lock("kept", Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
            .keep();
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(
            locks
                .lock("kept", Duration::from_secs(30))
                .is_held()
                .await
                .expect("is_held"),
            "still held before its 30 s"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            !locks
                .lock("kept", Duration::from_secs(30))
                .is_held()
                .await
                .expect("is_held"),
            "expired after 31 virtual seconds"
        );
        locks
            .lock("expiring", Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
            .keep();
        let started = Instant::now();
        let got = locks
            .lock("expiring", Duration::from_secs(5))
            .wait_for(Duration::from_secs(60))
            .acquire()
            .await
            .expect("acquire");
        assert!(got.is_some(), "the waiter gets the expired lease");
        assert!(
            started.elapsed() >= Duration::from_secs(5)
                && started.elapsed() < Duration::from_secs(6),
            "at the holder's expiry: {:?}",
            started.elapsed()
        );
    });
}

/// A renewed lease with a 30 s TTL around a body that sleeps five virtual
/// minutes renews every 10 virtual seconds and finishes.
#[test]
fn a_renewed_lease_follows_the_paused_clock() {
    paused(|| async {
        let (store, locks) = counted();
        let out = locks
            .lock("renewed", Duration::from_secs(30))
            .renew()
            .run(async {
                tokio::time::sleep(Duration::from_secs(300)).await;
                let lease = lock_core::current().expect("inside locked work");
                Ok::<_, Error>(lease.is_lost())
            })
            .await
            .expect("run");
        assert_eq!(out, Some(false), "renewed throughout, never lost");
        assert!(
            (25..=35).contains(&store.extends()),
            "one renewal per 10 virtual seconds: {} extends in 300 s",
            store.extends()
        );
    });
}

/// `Lease::lost()` resolves at the lease's deadline in virtual time, and
/// `is_lost()` agrees, rather than waiting for the real deadline.
#[test]
fn the_lost_signal_follows_the_paused_clock() {
    paused(|| async {
        let (_, locks) = counted();
        let started = Instant::now();
        let out = locks
            .lock("unrenewed", Duration::from_secs(120))
            .run(async {
                let lease = lock_core::current().expect("inside locked work");
                assert!(!lease.is_lost(), "held at first");
                lease.lost().await;
                Ok::<_, Error>(lease.is_lost())
            })
            .await
            .expect("run");
        assert_eq!(out, Some(true), "lost once its deadline passed");
        assert!(
            started.elapsed() >= Duration::from_secs(119),
            "not before the 120 s ttl (less the clock margin): {:?}",
            started.elapsed()
        );
    });
}
