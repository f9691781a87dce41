//! `#[locked]` with the lease lifecycle options: `renew`, `max_hold`,
//! `on_lost`, `at_least`, `fenced`, `shared` and `contended`.
//!
//! The runtime suite (`lock_test_kit::lifecycle`) shows what each option does
//! on the `Lock` builder; these tests show that the attribute's keys reach
//! it, through the declared return and error types. Behaviours that matter
//! across processes run on Redis too (`on_memory` / `on_redis` pairs).
//!
//! Time bounds are hang guards; where a lease must still be held "after
//! several TTLs", the margins are whole TTLs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Error, LockManager, locked, registry};
use lock_test_kit::isolated;
use lock_tests::harness;
use tokio::sync::Notify;

/// A TTL no test outlives: a lease that ends early was ended by the option
/// under test.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound on anything that should end well before it.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// An application error type, to show lock errors arrive converted into it.
#[derive(Debug)]
enum AppError {
    Lock(Error),
    Work(&'static str),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

type AppResult<T> = Result<T, AppError>;

/// Runs `behaviour` once on a memory manager and once on Redis, each under
/// a prefix of its own, as `<behaviour>::on_memory` and `<behaviour>::on_redis`.
macro_rules! on_both_stores {
    ($($behaviour:ident),* $(,)?) => {
        $(
            mod $behaviour {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn on_memory() {
                    super::$behaviour(lock_test_kit::isolated(
                        lock_core::LockManager::memory(),
                    ))
                    .await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn on_redis() {
                    let Some(manager) = lock_tests::harness::redis_manager().await else {
                        return;
                    };
                    super::$behaviour(lock_test_kit::isolated(manager)).await;
                }
            }
        )*
    };
}

on_both_stores!(
    a_renewing_function_outlives_several_multiples_of_its_ttl_while_it_runs,
    on_lost_cancel_stops_a_body_whose_lease_is_taken_away_and_returns_lease_lost_as_its_error,
    by_default_a_body_whose_lease_is_lost_runs_to_the_end,
    max_hold_stops_renewal_so_a_stuck_body_lets_the_lock_go,
    at_least_keeps_the_claim_after_an_early_return,
    fenced_gives_every_call_a_strictly_increasing_fence,
);

/// Whether `name` is held in the manager the calling task uses.
async fn is_held(name: &str) -> Result<bool, Error> {
    registry::manager().lock(name, LONG).is_held().await
}

#[locked(name = "life:renew", ttl = "300ms", renew)]
async fn long_job() -> Result<bool, Error> {
    for ttl in 1..=4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            is_held("life:renew").await?,
            "still held after {ttl} x ttl, while the body runs"
        );
    }
    let lease = lock_core::current().expect("a locked body has a lease");
    Ok(lease.is_lost())
}

/// Jobs longer than any TTL one dares to set need `renew`: the lease must
/// stay held for as long as the body runs, here four TTLs.
async fn a_renewing_function_outlives_several_multiples_of_its_ttl_while_it_runs(
    locks: LockManager,
) {
    registry::with_manager(locks, async {
        let lost = tokio::time::timeout(HANG_GUARD, long_job())
            .await
            .expect("hang guard")
            .expect("no lock error");
        assert_eq!(lost, Some(false), "ran to the end, never lost");
        assert!(
            !is_held("life:renew").await.expect("store"),
            "released after the body"
        );
    })
    .await;
}

#[locked(name = "life:cancel", ttl = "300ms", renew, on_lost = "cancel")]
async fn cancellable(started: &Notify, finished: &AtomicBool) -> Result<(), AppError> {
    started.notify_one();
    tokio::time::sleep(LONG).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// A body that goes on after its lease is gone can run alongside the next
/// holder; `on_lost = "cancel"` must stop it at the next renewal and say why
/// through the function's own error type.
async fn on_lost_cancel_stops_a_body_whose_lease_is_taken_away_and_returns_lease_lost_as_its_error(
    locks: LockManager,
) {
    let started = Notify::new();
    let finished = AtomicBool::new(false);
    let operator = async {
        started.notified().await;
        locks.lock("life:cancel", LONG).force_release().await
    };
    let call = registry::with_manager(locks.clone(), cancellable(&started, &finished));
    let (out, removed) = tokio::time::timeout(HANG_GUARD, async { tokio::join!(call, operator) })
        .await
        .expect("cancelled long before the 60 s body ends");
    assert!(
        removed.expect("force_release"),
        "the operator removed a live lease"
    );
    assert!(
        matches!(out, Err(AppError::Lock(Error::LeaseLost { .. }))),
        "the caller gets LeaseLost as an AppError: {out:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body was dropped, not finished"
    );
}

#[locked(name = "life:continue", ttl = "300ms", renew)]
async fn keeps_going(started: &Notify) -> AppResult<&'static str> {
    started.notify_one();
    let lease = lock_core::current().expect("a locked body has a lease");
    tokio::time::timeout(HANG_GUARD, lease.lost())
        .await
        .map_err(|_| AppError::Work("the loss was never noticed"))?;
    Ok("finished anyway")
}

/// Without `on_lost`, losing the lease is logged but does not cut the work
/// short: work that cannot be interrupted safely still finishes.
async fn by_default_a_body_whose_lease_is_lost_runs_to_the_end(locks: LockManager) {
    let started = Notify::new();
    let operator = async {
        started.notified().await;
        locks.lock("life:continue", LONG).force_release().await
    };
    let call = registry::with_manager(locks.clone(), keeps_going(&started));
    let (out, removed) = tokio::join!(call, operator);
    assert!(removed.expect("force_release"), "the lease was taken away");
    assert!(
        matches!(out, Ok(Some("finished anyway"))),
        "the body saw the loss and still returned its value: {out:?}"
    );
}

#[locked(
    name = "life:stuck",
    ttl = "500ms",
    renew,
    max_hold = "1500ms",
    on_lost = "cancel"
)]
async fn stuck() -> AppResult<()> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    if !is_held("life:stuck").await? {
        return Err(AppError::Work(
            "lost at two ttls: the lease was not renewed",
        ));
    }
    tokio::time::sleep(LONG).await;
    Ok(())
}

/// `renew` alone lets a stuck body hold the lock forever; `max_hold` must end
/// renewal, so the lease runs out and the next caller gets in.
async fn max_hold_stops_renewal_so_a_stuck_body_lets_the_lock_go(locks: LockManager) {
    let out = tokio::time::timeout(HANG_GUARD, registry::with_manager(locks.clone(), stuck()))
        .await
        .expect("cut off at max_hold, not after the 60 s body");
    assert!(
        matches!(out, Err(AppError::Lock(Error::LeaseLost { .. }))),
        "renewed past the ttl, then lost at max_hold: {out:?}"
    );
    let next = locks
        .lock("life:stuck", LONG)
        .acquire()
        .await
        .expect("store");
    assert!(next.is_some(), "the next caller gets in");
}

#[locked(name = "life:at-least:{slot}", ttl = "1m", at_least = "500ms")]
async fn once_per_slot(slot: u32, runs: &AtomicUsize) -> Result<u32, Error> {
    runs.fetch_add(1, Ordering::SeqCst);
    if slot > 0 {
        return Ok(slot);
    }
    Ok(0)
}

/// A scheduler's "once per slot, across the fleet": a body that returns early
/// must leave its claim standing until `at_least`, or a second server whose
/// tick comes a moment later runs the slot again. After it, the store's
/// expiry (not the one-minute ttl) frees the name.
async fn at_least_keeps_the_claim_after_an_early_return(locks: LockManager) {
    let runs = AtomicUsize::new(0);
    registry::with_manager(locks, async {
        let first = once_per_slot(7, &runs).await.expect("store");
        assert_eq!(first, Some(7), "the first call runs");
        assert!(
            is_held("life:at-least:7").await.expect("store"),
            "the claim stands after the body returned"
        );
        let second = once_per_slot(7, &runs).await.expect("store");
        assert_eq!(second, None, "a second call in the same slot does not run");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for the slot");
        tokio::time::timeout(HANG_GUARD, async {
            while is_held("life:at-least:7").await.expect("store") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("freed by at_least's expiry, long before the ttl");
        let third = once_per_slot(7, &runs).await.expect("store");
        assert_eq!(third, Some(7), "once the claim ends, the name is free");
    })
    .await;
}

#[locked(name = "life:fenced", ttl = "1m", fenced)]
async fn fenced_write() -> Option<u64> {
    lock_core::current().and_then(|lease| lease.fence())
}

#[locked(name = "life:unfenced", ttl = "1m")]
async fn unfenced_write() -> (String, Option<u64>) {
    let lease = lock_core::current().expect("a locked body has a lease");
    (lease.key().to_owned(), lease.fence())
}

/// A storage system rejects writes whose token is older than one it has
/// seen; that is only safe if every call's token is newer than the last.
async fn fenced_gives_every_call_a_strictly_increasing_fence(locks: LockManager) {
    registry::with_manager(locks.clone(), async {
        let mut last = 0;
        for call in 0..20 {
            let fence = fenced_write()
                .await
                .expect("this store fences")
                .expect("free")
                .expect("a fenced function's lease has a token");
            assert!(fence > last, "call {call}: {fence} must exceed {last}");
            last = fence;
        }
        let (key, fence) = unfenced_write().await.expect("store").expect("free");
        assert_eq!(
            key,
            format!("{}life:unfenced", locks.prefix()),
            "the body's lease is its own lock's"
        );
        assert_eq!(fence, None, "no token unless `fenced` asks for one");
    })
    .await;
}

#[locked(name = "life:shared", ttl = "1m", shared)]
async fn fleet_wide(runs: &AtomicUsize) -> AppResult<usize> {
    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

/// A fleet that forgot to configure Redis gives every process its own memory
/// lock, so "once across the fleet" silently becomes "once per process";
/// `shared` must refuse to run instead, through the function's error type.
#[tokio::test]
async fn shared_refuses_to_run_on_a_memory_manager() {
    let runs = AtomicUsize::new(0);
    let out = registry::with_manager(LockManager::memory(), fleet_wide(&runs)).await;
    assert!(
        matches!(out, Err(AppError::Lock(Error::NotShared { .. }))),
        "a per-process store is refused: {out:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body did not run");
}

/// The same `shared` function runs normally where the lock reaches every
/// process.
#[tokio::test]
async fn shared_runs_on_a_redis_manager() {
    let Some(redis) = harness::redis_manager().await else {
        return;
    };
    let runs = AtomicUsize::new(0);
    let out = registry::with_manager(isolated(redis), fleet_wide(&runs))
        .await
        .expect("Redis is shared");
    assert_eq!(out, Some(1), "the body ran once");
}

#[locked(name = "life:charge:{order}", ttl = "1m", contended = "error")]
async fn charge(order: u32, runs: &AtomicUsize) -> Result<u32, AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    if order == 0 {
        return Err(AppError::Work("nothing to charge"));
    }
    Ok(order * 100)
}

#[locked(
    name = "life:charge-alias:{order}",
    ttl = "1m",
    wait = "20ms",
    contended = "error"
)]
async fn charge_alias(order: u32) -> AppResult<u32> {
    Ok(order)
}

/// "This must happen, just not twice at once": a held lock is a failure the
/// caller handles with its other errors, not an `Option` to unwrap, and the
/// function keeps the return type it was declared with.
#[tokio::test]
async fn contended_error_returns_contended_through_the_declared_error_type() {
    let locks = isolated(LockManager::memory());
    let runs = AtomicUsize::new(0);
    registry::with_manager(locks.clone(), async {
        // The annotations are the point: no `Option` in the types.
        let free: Result<u32, AppError> = charge(2, &runs).await;
        assert!(matches!(free, Ok(200)), "free: the value itself: {free:?}");
        let failed: Result<u32, AppError> = charge(0, &runs).await;
        assert!(
            matches!(failed, Err(AppError::Work("nothing to charge"))),
            "the body's own error comes back unchanged: {failed:?}"
        );

        let _held = locks
            .lock("life:charge:3", LONG)
            .acquire()
            .await
            .expect("memory")
            .expect("free");
        let before = runs.load(Ordering::SeqCst);
        let contended = charge(3, &runs).await;
        assert!(
            matches!(&contended, Err(AppError::Lock(Error::Contended { key, .. })) if key.ends_with("life:charge:3")),
            "contention is an AppError naming the key: {contended:?}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), before, "the body did not run");

        let _held = locks
            .lock("life:charge-alias:4", LONG)
            .acquire()
            .await
            .expect("memory")
            .expect("free");
        let waited: AppResult<u32> = tokio::time::timeout(HANG_GUARD, charge_alias(4))
            .await
            .expect("a 20 ms wait ends");
        assert!(
            matches!(waited, Err(AppError::Lock(Error::Contended { .. }))),
            "held for the whole wait, through an alias: {waited:?}"
        );
        let other: AppResult<u32> = charge_alias(5).await;
        assert!(matches!(other, Ok(5)), "another order runs: {other:?}");
    })
    .await;
}
