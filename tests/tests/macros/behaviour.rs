//! `#[locked]` at run time: the body runs only under the lock, and the lock
//! is given back on every way out of the body.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockManager, locked, registry};
use tokio::sync::{Notify, Semaphore, mpsc};

/// Generous bound on anything that should finish at once: a hang guard, not
/// a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(20);

const TTL: Duration = Duration::from_secs(60);

async fn is_held(locks: &LockManager, name: &str) -> bool {
    locks
        .lock(name, TTL)
        .is_held()
        .await
        .expect("the memory store does not fail")
}

/// An error type that takes lock errors, as the attribute requires.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[locked(name = "behaviour:contended", ttl = "1m")]
async fn count_run(runs: &AtomicUsize) -> usize {
    runs.fetch_add(1, Ordering::SeqCst) + 1
}

// The core promise: while someone else holds the lock, the body never runs
// and the caller is told so with `Ok(None)`.
#[tokio::test]
async fn a_call_while_the_lock_is_held_elsewhere_returns_none_and_never_runs_the_body() {
    let locks = LockManager::memory();
    let runs = AtomicUsize::new(0);
    registry::with_manager(locks.clone(), async {
        let held = locks
            .lock("behaviour:contended", TTL)
            .acquire()
            .await
            .expect("memory store")
            .expect("nobody holds it yet");
        for _ in 0..3 {
            let outcome = count_run(&runs).await;
            assert!(
                matches!(outcome, Ok(None)),
                "contended call must return Ok(None), got {outcome:?}"
            );
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "the body ran while the lock was held elsewhere"
        );
        held.release().await.expect("memory store");
        let outcome = count_run(&runs).await.expect("memory store");
        assert_eq!(outcome, Some(1), "once free, the body runs");
    })
    .await;
}

#[locked(name = "behaviour:ok", ttl = "1h")]
async fn succeeds() -> Result<&'static str, BoxError> {
    Ok("done")
}

#[locked(name = "behaviour:err", ttl = "1h")]
async fn fails() -> Result<&'static str, BoxError> {
    Err("the body's own error".into())
}

// A lock kept after the body returns would block every later call until the
// TTL (here an hour): release must happen on success and on failure alike.
#[tokio::test]
async fn the_lock_is_released_after_the_body_returns_ok_or_err() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let ok = succeeds().await.expect("memory store");
        assert_eq!(ok, Some("done"), "the body's value, wrapped in Some");
        assert!(!is_held(&locks, "behaviour:ok").await, "released after Ok");

        let err = fails().await.expect_err("the body failed");
        assert_eq!(
            err.to_string(),
            "the body's own error",
            "the body's own error comes back unchanged"
        );
        assert!(
            !is_held(&locks, "behaviour:err").await,
            "released after Err"
        );
        let again = fails().await.expect_err("the body failed again");
        assert_eq!(
            again.to_string(),
            "the body's own error",
            "the next call runs the body again instead of finding the lock held"
        );
    })
    .await;
}

#[locked(name = "behaviour:panics", ttl = "1h")]
async fn panics() {
    panic!("the body's own panic message");
}

// A panicking job must neither leave the lock held for its whole TTL nor
// have its panic swallowed or replaced.
#[tokio::test]
async fn a_panic_in_the_body_releases_the_lock_and_reaches_the_caller_unchanged() {
    let locks = LockManager::memory();
    let outcome = tokio::spawn(registry::with_manager(locks.clone(), panics())).await;
    let error = outcome.expect_err("the task must end in the body's panic");
    assert!(
        error.is_panic(),
        "the task panicked rather than being cancelled"
    );
    let payload = error.into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the body's own panic message"),
        "the panic payload is the body's own"
    );
    assert!(
        !is_held(&locks, "behaviour:panics").await,
        "the lock must be free long before its one-hour ttl"
    );
}

#[locked(name = "behaviour:cancelled", ttl = "1h")]
async fn never_finishes(started: &Notify) {
    started.notify_one();
    std::future::pending::<()>().await;
}

// Dropping a call mid-body (a timeout, a select, a shutdown) is the most
// common way out of async work; it must free the lock, not leave it for an hour.
#[tokio::test]
async fn cancelling_a_call_mid_body_releases_the_lock_long_before_its_ttl() {
    let locks = LockManager::memory();
    let started = Notify::new();
    registry::with_manager(locks.clone(), async {
        let call = never_finishes(&started);
        tokio::select! {
            outcome = call => panic!("the body never finishes, got {outcome:?}"),
            () = started.notified() => {}
        }
        // `call` was dropped by `select!` mid-body.
        assert!(
            !is_held(&locks, "behaviour:cancelled").await,
            "the cancelled call's lock must be free now, not in an hour"
        );
    })
    .await;
}

#[locked(name = "behaviour:wait", ttl = "1m", wait = "1m")]
async fn patient(runs: Arc<AtomicUsize>) -> usize {
    runs.fetch_add(1, Ordering::SeqCst) + 1
}

#[locked(name = "behaviour:wait-short", ttl = "1m", wait = "20ms")]
async fn impatient(runs: Arc<AtomicUsize>) -> usize {
    runs.fetch_add(1, Ordering::SeqCst) + 1
}

// `wait` turns "someone else is on it" into "run once they are done":
// the call must wait for the holder, then run the body.
#[tokio::test]
async fn a_call_with_wait_waits_for_the_holder_then_runs() {
    let locks = LockManager::memory();
    let runs = Arc::new(AtomicUsize::new(0));
    let held = locks
        .lock("behaviour:wait", TTL)
        .acquire()
        .await
        .expect("memory store")
        .expect("nobody holds it yet");
    let call = tokio::spawn(registry::with_manager(
        locks.clone(),
        patient(Arc::clone(&runs)),
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!call.is_finished(), "the call must still be waiting");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no run while held");
    held.release().await.expect("memory store");
    let outcome = tokio::time::timeout(HANG_GUARD, call)
        .await
        .expect("hang guard: the waiter must wake on release")
        .expect("no panic")
        .expect("memory store");
    assert_eq!(outcome, Some(1), "ran once the holder let go");
}

// A wait is bounded: a holder that keeps the lock past it gets the caller
// `Ok(None)`, not an endless wait.
#[tokio::test]
async fn a_call_whose_wait_runs_out_returns_none() {
    let locks = LockManager::memory();
    let runs = Arc::new(AtomicUsize::new(0));
    let _held = locks
        .lock("behaviour:wait-short", TTL)
        .acquire()
        .await
        .expect("memory store")
        .expect("nobody holds it yet");
    let outcome = tokio::time::timeout(
        HANG_GUARD,
        registry::with_manager(locks.clone(), impatient(Arc::clone(&runs))),
    )
    .await
    .expect("hang guard: a 20ms wait must end");
    assert!(
        matches!(outcome, Ok(None)),
        "held for the whole wait, got {outcome:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body did not run");
}

#[locked(name = "behaviour:once", ttl = "1m")]
async fn exclusive(runs: Arc<AtomicUsize>, gate: Arc<Semaphore>) -> usize {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _open = gate.acquire().await.expect("the gate is never closed");
    run
}

// Fifty workers start the same job at once: exactly one runs it, the other
// forty-nine are told it is taken while that one is still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_calls_without_wait_run_the_body_exactly_once() {
    const CALLS: usize = 50;
    let locks = LockManager::memory();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (results, mut received) = mpsc::unbounded_channel();
    for _ in 0..CALLS {
        let call = registry::with_manager(
            locks.clone(),
            exclusive(Arc::clone(&runs), Arc::clone(&gate)),
        );
        let results = results.clone();
        tokio::spawn(async move {
            let _ = results.send(call.await);
        });
    }
    drop(results);
    // The one holder is parked at the gate, so every other call must finish
    // while it still holds the lock.
    for _ in 0..CALLS - 1 {
        let outcome = tokio::time::timeout(HANG_GUARD, received.recv())
            .await
            .expect("hang guard: contended calls return at once")
            .expect("every task reports");
        assert!(
            matches!(outcome, Ok(None)),
            "a call made while the lock was held ran or failed: {outcome:?}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "exactly one body is running"
    );
    gate.add_permits(1);
    let last = tokio::time::timeout(HANG_GUARD, received.recv())
        .await
        .expect("hang guard: the holder finishes once the gate opens")
        .expect("every task reports");
    assert!(
        matches!(last, Ok(Some(1))),
        "the holder ran the body once, got {last:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran exactly once");
}
