//! Behaviours of the runtime on the memory store that go beyond the shared
//! store contract: bounded memory, exclusion under real parallelism, result
//! precedence in `run`, prompt handoff, and the events it traces.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockManager, MemoryStore};
use lock_test_kit::Instrumented;
use lock_test_kit::contract::increment_under_one_lock;
use lock_tests::logs::Captured;

const LONG: Duration = Duration::from_secs(60);

/// A memory store excludes one process only; the manager must not claim
/// otherwise, or boot-time checks would wave through a setup where two servers
/// both run the "exclusive" job. An operator who knows better can vouch for it.
#[test]
fn a_memory_manager_is_not_shared_and_says_so() {
    let locks = LockManager::memory();
    assert!(!locks.is_shared(), "a memory manager is per process");
    assert!(
        !locks.store().is_shared(),
        "and so is its store, whatever the manager says"
    );
    let vouched = locks.declared_shared();
    assert!(vouched.is_shared(), "declared_shared overrides");
    assert!(
        format!("{vouched:?}").contains("shared: true"),
        "Debug shows it: {vouched:?}"
    );
}

/// Released leases must leave nothing behind, or a long-running process that
/// locks per-request names (`order:{id}`) leaks memory forever.
#[tokio::test(flavor = "current_thread")]
async fn a_million_acquire_release_cycles_over_distinct_names_leave_the_store_empty() {
    let store = MemoryStore::new();
    let locks = LockManager::new(store.clone());
    for i in 0..1_000_000u32 {
        let guard = locks
            .lock(format!("order:{i}"), LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("a fresh name is free");
        assert!(guard.release().await.expect("release"), "our own lease");
    }
    assert_eq!(store.len(), 0, "every released lease is gone");
}

/// Leases that are never released (kept, or their holder died) must still be
/// reclaimed once expired, by the store's own sweeping, without anyone calling
/// a cleanup method.
#[tokio::test(flavor = "current_thread")]
async fn expired_but_unreleased_leases_are_swept_as_new_ones_arrive() {
    const BATCH: usize = 10_000;
    let store = MemoryStore::new();
    let locks = LockManager::new(store.clone());
    for i in 0..BATCH {
        let lock = locks.lock(format!("short:{i}"), Duration::from_millis(400));
        lock.acquire().await.expect("acquire").expect("free").keep();
    }
    assert_eq!(store.len(), BATCH, "kept leases stay until they expire");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..BATCH {
        let lock = locks.lock(format!("long:{i}"), LONG);
        lock.acquire().await.expect("acquire").expect("free").keep();
    }
    let len = store.len();
    assert!(
        len < BATCH + BATCH / 5,
        "the expired batch was swept while the new one arrived: {len} keys tracked for {BATCH} live leases"
    );
}

/// The core promise, under real parallelism: 64 tasks on a multi-thread
/// runtime each do 200 read-yield-write increments of a counter that is not
/// atomic across the read and the write. Any overlap loses an update.
#[test]
fn sixty_four_tasks_incrementing_under_one_lock_end_at_exactly_12800() {
    const TASKS: usize = 64;
    const ROUNDS: usize = 200;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let locks = LockManager::memory();
    let total = runtime.block_on(increment_under_one_lock(&locks, TASKS, ROUNDS));
    assert_eq!(total, TASKS * ROUNDS, "no increment may be lost");
}

#[derive(Debug, PartialEq)]
enum AppError {
    Work(&'static str),
    Lock(String),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error.to_string())
    }
}

/// When both the work and the release fail, the caller needs the work's
/// error: it says what went wrong with their job. A release error in its place
/// would hide the real failure.
#[tokio::test(flavor = "current_thread")]
async fn a_work_error_is_never_replaced_by_a_release_error() {
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    store.fail_releases(true);
    let locks = LockManager::new(store.clone());
    let out: Result<Option<()>, AppError> = locks
        .lock("fails-twice", LONG)
        .run(async { Err(AppError::Work("disk full")) })
        .await;
    assert_eq!(
        out,
        Err(AppError::Work("disk full")),
        "the work's error wins"
    );
    assert_eq!(
        store.releases(),
        1,
        "the release was attempted (and failed)"
    );
}

/// Work that succeeded must be reported as done even if giving the lease back
/// fails: the lease then ends at its TTL, which deserves a warning, not an
/// error that would make the caller retry finished work.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_release_after_successful_work_is_a_warning_not_an_error() {
    let (logs, _guard) = Captured::start();
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    store.fail_releases(true);
    let locks = LockManager::new(store.clone());
    let out: Result<Option<u32>, AppError> = locks
        .lock("release-fails", LONG)
        .run(async { Ok(42) })
        .await;
    assert_eq!(out, Ok(Some(42)), "the work's value comes back");
    let warnings = logs.matching("WARN", "could not release");
    assert_eq!(
        warnings.len(),
        1,
        "one WARN about the failed release, got {:?}",
        logs.lines()
    );
    assert!(
        warnings[0].contains("lock:release-fails"),
        "the warning names the key: {}",
        warnings[0]
    );
}

/// A release the store fails may not have happened, and the guard that
/// asked is gone once `release` returns: unless the give-back is tried
/// again, the lease stays until its TTL with nobody left to free it. Here
/// the store fails one release, then recovers: the lease must be freed
/// without waiting out its 60 s.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_release_the_store_failed_is_tried_again_until_it_answers() {
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    let locks = LockManager::new(store.clone());
    let lock = locks.lock("flaky-release", LONG);
    let guard = lock.acquire().await.expect("acquire").expect("free");
    store.fail_releases(true);
    assert!(
        guard.release().await.is_err(),
        "the store failed the release"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        lock.is_held().await.expect("is_held"),
        "still held while the store keeps failing"
    );
    store.fail_releases(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !lock.is_held().await.expect("is_held"),
        "freed once the store answers again, long before its 60 s TTL"
    );
    assert!(
        store.releases() >= 3,
        "the release was tried again ({} tries)",
        store.releases()
    );
}

/// Handoff must not wait for a timer. With tokio's clock paused, time only
/// moves when every task sleeps; a waiter woken by the release acquires at the
/// very instant of the release, while a poller (or a waiter sleeping until the
/// holder's TTL) would acquire later on the virtual clock.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_waiter_gets_a_released_lock_at_the_instant_of_release() {
    let locks = LockManager::memory();
    let holder = locks
        .lock("handoff", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks
                .lock("handoff", LONG)
                .wait_for(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, tokio::time::Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    let released_at = tokio::time::Instant::now();
    holder.release().await.expect("release");
    let (guard, acquired_at) = waiter.await.expect("waiter ran");
    assert!(guard.expect("acquire").is_some(), "the waiter got it");
    assert_eq!(
        acquired_at - released_at,
        Duration::ZERO,
        "no timer may run between release and handoff"
    );
}

/// Polls `acquire` once, where nothing will wake it: it finds the lock held
/// and queues.
fn queued<F: std::future::Future>(acquire: &mut std::pin::Pin<Box<F>>) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        acquire.as_mut().poll(&mut cx).is_pending(),
        "the lock is held: the acquire waits"
    );
}

/// A release hands the lease straight to the first waiter in line. If that
/// waiter's acquire is dropped (cancelled: a timeout, a `select!` that took
/// another branch) after the handoff but before it ran again, nobody would
/// ever release the lease it was handed; it must go on to the next waiter,
/// and with nobody left, back to the store, at once rather than at its TTL.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_waiter_cancelled_after_the_release_handed_it_the_lease_passes_it_on() {
    let store = MemoryStore::new();
    let locks = LockManager::new(store.clone());
    let lock = || locks.lock("handed", LONG).wait_for(LONG);
    let acquire_free = || async { locks.lock("handed", LONG).acquire().await.expect("acquire") };
    for next_in_line in [true, false] {
        let holder = acquire_free().await.expect("free");
        let (first, second) = (lock(), lock());
        let mut first_acquire = Box::pin(first.acquire());
        queued(&mut first_acquire);
        let mut second_acquire = next_in_line.then(|| Box::pin(second.acquire()));
        if let Some(second_acquire) = &mut second_acquire {
            queued(second_acquire);
        }
        // Past the first turn, so the release hands the lease over rather
        // than waking the waiter to try again.
        tokio::time::advance(Duration::from_millis(10)).await;
        let released_at = tokio::time::Instant::now();
        holder.release().await.expect("release");
        assert!(
            locks.lock("handed", LONG).is_held().await.expect("is_held"),
            "the release handed the lease to the first waiter"
        );
        drop(first_acquire);
        match second_acquire {
            Some(second_acquire) => {
                let guard = second_acquire
                    .await
                    .expect("acquire")
                    .expect("passed on to the next in line");
                assert_eq!(
                    tokio::time::Instant::now(),
                    released_at,
                    "handed on at once, not after the lease's TTL"
                );
                guard.release().await.expect("release");
            }
            None => {
                assert!(
                    store.is_empty(),
                    "with nobody else waiting, the lease went back"
                );
            }
        }
        acquire_free()
            .await
            .expect("nothing is left held afterwards")
            .release()
            .await
            .expect("release");
    }
}

/// A guard dropped where no runtime exists (a panic unwinding a plain thread,
/// say) is still released at once by the memory store, which needs no I/O.
#[test]
fn a_guard_dropped_outside_any_runtime_is_released_at_once_in_memory() {
    let locks = LockManager::memory();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let guard = runtime
        .block_on(locks.lock("no-runtime", LONG).acquire())
        .expect("acquire")
        .expect("free");
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("the drop must not panic");
    let held = runtime
        .block_on(locks.lock("no-runtime", LONG).is_held())
        .expect("is_held");
    assert!(!held, "released by the drop itself");
}

/// Operators diagnose lock trouble from logs: each acquisition, contention,
/// release and overrun must be traced with the key and the time involved, the
/// overrun at WARN.
#[tokio::test(flavor = "current_thread")]
async fn acquiring_contending_releasing_and_overrunning_are_traced() {
    let (logs, _guard) = Captured::start();
    let locks = LockManager::memory();
    let guard = locks
        .lock("traced", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    assert!(
        locks
            .lock("traced", LONG)
            .acquire()
            .await
            .expect("acquire")
            .is_none()
    );
    guard.release().await.expect("release");
    let short = locks
        .lock("overrun", Duration::from_millis(5))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !short.release().await.expect("release"),
        "the lease had ended"
    );

    for (level, message, field) in [
        ("DEBUG", "lock acquired", "waited_us="),
        ("DEBUG", "lock contended", "holder_remaining_ms="),
        ("DEBUG", "lock released", "held_ms="),
        ("WARN", "lock overran", "held_ms="),
    ] {
        let found = logs.matching(level, message);
        assert!(
            found.iter().any(|line| line.contains(field)),
            "expected a {level} `{message}` event with {field}, got {:#?}",
            logs.lines()
        );
    }
    assert!(
        logs.matching("WARN", "lock overran")[0].contains("key=lock:overrun"),
        "the overrun names its key"
    );
}

/// Extend must be one compare-and-expire in the store, not a read followed by
/// a write: between the two, the lease could expire and pass to someone else,
/// and the write would then extend (or overwrite) the new holder's lease.
#[tokio::test(flavor = "current_thread")]
async fn extend_is_one_store_operation() {
    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    let locks = LockManager::new(store.clone());
    let guard = locks
        .lock("extend-once", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let before = (store.acquires(), store.releases(), store.holders());
    assert!(
        guard.extend(LONG).await.expect("extend"),
        "our lease extends"
    );
    assert_eq!(store.extends(), 1, "exactly one store operation");
    assert_eq!(
        (store.acquires(), store.releases(), store.holders()),
        before,
        "and no read or write besides it"
    );
}

/// Under the default `on_lost = continue`, a lost lease must not pass
/// silently: operators need an ERROR naming the key.
#[tokio::test(flavor = "current_thread")]
async fn a_lost_lease_under_continue_is_logged_at_error() {
    let (logs, _guard) = Captured::start();
    let locks = LockManager::memory();
    let out = locks
        .lock("lost-continue", Duration::from_millis(50))
        .run(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, Error>(())
        })
        .await
        .expect("run");
    assert_eq!(out, Some(()), "the work finished");
    let errors = logs.matching("ERROR", "lease lost");
    assert_eq!(errors.len(), 1, "one ERROR: {:#?}", logs.lines());
    assert!(
        errors[0].contains("lock:lost-continue"),
        "it names the key: {}",
        errors[0]
    );
}

/// A semaphore's permits are leases under `<key>#permit-<n>`. A plain lock
/// of that name would be the same lease as one of them: the two would hold
/// each other off, and the semaphore's `force_release` would free the plain
/// lock's holder. Acquiring such a name is refused; reading it (an
/// operator looking at one permit) is not.
#[tokio::test(flavor = "current_thread")]
async fn a_lock_named_like_a_semaphore_permit_is_refused_not_shared_with_it() {
    let locks = LockManager::memory();
    let pool = locks.lock("pool", LONG).permits(2);
    let first = pool.acquire().await.expect("acquire").expect("a permit");
    let second = pool.acquire().await.expect("acquire").expect("a permit");
    let clash = locks.lock("pool#permit-1", LONG).acquire().await;
    match clash {
        Err(Error::InvalidName { name, reason }) => {
            assert_eq!(name, "pool#permit-1", "the error names the lock");
            assert!(reason.contains("permit"), "and says why: {reason}");
        }
        other => panic!("a permit's key taken as a plain lock: {other:?}"),
    }
    assert!(
        locks
            .lock("pool#permit-1", LONG)
            .is_held()
            .await
            .expect("reading a permit by its key works"),
        "the permit is held, by the semaphore"
    );
    for fine in [
        "pool#permit-",
        "pool#permit-1x",
        "pool#permits-1",
        "pool#permit_1",
    ] {
        let guard = locks
            .lock(fine, LONG)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{fine:?} is an ordinary name: {e}"));
        assert!(guard.is_some(), "{fine:?} is free");
    }
    drop((first, second));
}
