//! The lease lifecycle suite: renewal, its cap, the lost-lease signal,
//! at-least claims, fencing, the shared requirement and contention as an
//! error, on any store.
//!
//! [`lifecycle_contract!`](crate::lifecycle_contract) generates one test per
//! behaviour, like [`store_contract!`](crate::store_contract). Time bounds are
//! hang guards; where a test checks that a lease is still held "after several
//! TTLs", the margins are whole TTLs, not milliseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use lock_core::{Error, LockManager, OnLost};

use crate::{Instrumented, longest, ms};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(20);

/// Without renewal a long job outlives its TTL and loses the lock; with it,
/// the lease is extended every ttl/3 and outlives many TTLs while the work runs.
pub async fn a_renewing_lock_outlives_several_multiples_of_its_ttl(locks: LockManager) {
    let ttl = ms(&locks, 300);
    let lock = locks.lock("renewed", ttl).renew();
    let observer = locks.lock("renewed", LONG);
    let ran = lock
        .run(async {
            for _ in 0..4 {
                // 4 x 300 ms: four TTLs in all.
                tokio::time::sleep(ttl).await;
                let held = observer.is_held().await?;
                assert!(held, "still held while the work runs");
            }
            let lease = lock_core::current().expect("inside locked work");
            assert!(!lease.is_lost(), "renewed, never lost");
            Ok::<_, Error>(())
        })
        .await
        .expect("run");
    assert_eq!(ran, Some(()), "the work ran to the end");
    assert!(
        !observer.is_held().await.expect("is_held"),
        "released after the work"
    );
}

/// Without renewal, locked work learns its lease is gone once the deadline
/// passes: `current().lost()` resolves instead of the work carrying on blind.
pub async fn the_lost_signal_fires_when_the_deadline_passes_unrenewed(locks: LockManager) {
    let ttl = ms(&locks, 200);
    let lock = locks.lock("deadline-passes", ttl);
    let started = Instant::now();
    let out = lock
        .run(async {
            let lease = lock_core::current().expect("inside locked work");
            tokio::time::timeout(HANG_GUARD, lease.lost())
                .await
                .expect("the lost signal fires at the deadline");
            Ok::<_, Error>(lease.is_lost())
        })
        .await
        .expect("run");
    assert_eq!(out, Some(true), "the lease reports itself lost");
    // The local deadline comes the store's clock margin before the ttl, so
    // the work hears of the loss before the store could hand the lease on.
    let earliest = ttl - locks.store().clock_margin(ttl);
    assert!(
        started.elapsed() >= earliest,
        "not before the ttl less the clock margin ({earliest:?}): {:?}",
        started.elapsed()
    );
}

/// A lease taken away from outside (an operator's force-release) must stop
/// the work under `on_lost = cancel`, before it runs alongside the next holder.
pub async fn a_body_whose_lease_is_taken_away_is_cancelled(locks: LockManager) {
    let lock = locks
        .lock("taken-away", ms(&locks, 300))
        .renew()
        .on_lost(OnLost::Cancel);
    let finished = Arc::new(AtomicBool::new(false));
    let operator = {
        let lock = locks.lock("taken-away", LONG);
        tokio::spawn(async move {
            tokio::time::sleep(ms(&locks, 150)).await;
            lock.force_release().await
        })
    };
    let out = tokio::time::timeout(HANG_GUARD, {
        let finished = Arc::clone(&finished);
        lock.run(async move {
            tokio::time::sleep(LONG).await;
            finished.store(true, Ordering::SeqCst);
            Ok::<_, Error>(())
        })
    })
    .await
    .expect("cancelled long before the 60 s work ends");
    assert!(
        operator.await.expect("task ran").expect("force_release"),
        "the operator removed a live lease"
    );
    assert!(
        matches!(out, Err(Error::LeaseLost { .. })),
        "the caller is told the lease was lost: {out:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body was dropped, not finished"
    );
}

/// By default (`on_lost = continue`) losing the lease does not cut the work
/// short: it finishes and its result comes back.
pub async fn by_default_a_lost_lease_lets_the_work_finish(locks: LockManager) {
    let lock = locks.lock("continue", ms(&locks, 300)).renew();
    let operator = {
        let lock = locks.lock("continue", LONG);
        tokio::spawn(async move {
            tokio::time::sleep(ms(&locks, 150)).await;
            lock.force_release().await
        })
    };
    let out = lock
        .run(async {
            let lease = lock_core::current().expect("inside locked work");
            tokio::time::timeout(HANG_GUARD, lease.lost())
                .await
                .expect("the next renewal finds the lease gone");
            Ok::<_, Error>("finished anyway")
        })
        .await
        .expect("run");
    operator.await.expect("task ran").expect("force_release");
    assert_eq!(out, Some("finished anyway"), "the work's result comes back");
}

/// `max_hold` stops renewal, so a stuck body cannot hold the lock forever:
/// after it, the lease runs out and the next caller gets in.
pub async fn max_hold_stops_renewal_so_a_stuck_body_lets_go(locks: LockManager) {
    let ttl = ms(&locks, 300);
    let max_hold = ms(&locks, 600);
    let lock = locks
        .lock("stuck", ttl)
        .renew()
        .max_hold(max_hold)
        .on_lost(OnLost::Cancel);
    let started = Instant::now();
    let out = tokio::time::timeout(
        HANG_GUARD,
        lock.run(async {
            tokio::time::sleep(LONG).await;
            Ok::<_, Error>(())
        }),
    )
    .await
    .expect("the stuck body is cut off at max_hold, not after 60 s");
    assert!(
        matches!(out, Err(Error::LeaseLost { .. })),
        "lost at max_hold: {out:?}"
    );
    // The last renewal's lease ends at max_hold, and the work stops its
    // clock margin before that.
    let earliest = max_hold - locks.store().clock_margin(ttl);
    assert!(
        started.elapsed() >= earliest,
        "renewed up to max_hold (less the clock margin, {earliest:?}) first: {:?}",
        started.elapsed()
    );
    let next = locks.lock("stuck", LONG).acquire().await.expect("acquire");
    assert!(next.is_some(), "the next caller gets in");
}

/// `at_least`: a body that ends early leaves the claim standing until
/// acquisition + at_least (a scheduler's "one run per minute"), then the
/// store's own expiry frees it, long before the TTL.
pub async fn at_least_keeps_the_claim_after_an_early_end(locks: LockManager) {
    let at_least = ms(&locks, 500);
    let lock = locks.lock("at-least", LONG).at_least(at_least);
    let ran = lock.run(async { Ok::<_, Error>(()) }).await.expect("run");
    assert_eq!(ran, Some(()));
    let holder = lock
        .holder()
        .await
        .expect("holder")
        .expect("the claim still stands after the body ended");
    assert!(
        holder.remaining_ttl() <= longest(&locks, at_least),
        "shortened to the at_least end, not left at the 60 s ttl: {:?}",
        holder.remaining_ttl()
    );
    assert!(
        locks
            .lock("at-least", LONG)
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "nobody runs it again before at_least"
    );
    tokio::time::sleep(longest(&locks, at_least) + ms(&locks, 200)).await;
    assert!(
        locks
            .lock("at-least", LONG)
            .acquire()
            .await
            .expect("acquire")
            .is_some(),
        "free once at_least has passed"
    );
}

/// A body that fails still leaves an `at_least` claim standing: the run
/// happened, and running it again at once is what the claim prevents.
pub async fn at_least_holds_after_a_failed_body_too(locks: LockManager) {
    let lock = locks
        .lock("at-least-err", LONG)
        .at_least(Duration::from_secs(5));
    let out: Result<Option<()>, Error> = lock
        .run(async { Err(Error::store("work", "x", "failed on purpose")) })
        .await;
    assert!(out.is_err(), "the work's error comes back");
    assert!(
        lock.is_held().await.expect("is_held"),
        "the claim stands after the failure"
    );
}

/// Fencing tokens strictly increase per name across holders, clean releases
/// and expiry, and the running work sees its own.
pub async fn fencing_tokens_strictly_increase_across_holders_and_releases(locks: LockManager) {
    if !locks.store().fencing() {
        // A store that cannot keep a counter safe (memcached evicts) says
        // so instead; the next behaviour checks that.
        let refused = locks.lock("fenced", LONG).fenced().acquire().await;
        assert!(
            matches!(refused, Err(Error::FencingUnsupported { .. })),
            "a store without fencing refuses a fenced lock: {refused:?}"
        );
        return;
    }
    let lock = locks.lock("fenced", LONG).fenced();
    let mut last = 0;
    for round in 0..50 {
        let guard = lock.acquire().await.expect("acquire").expect("free");
        let fence = guard.fence().expect("a fenced lock has a token");
        assert!(fence > last, "round {round}: {fence} must exceed {last}");
        last = fence;
        guard.release().await.expect("release");
    }
    let seen = lock
        .run(async {
            let lease = lock_core::current().expect("inside locked work");
            Ok::<_, Error>(lease.fence())
        })
        .await
        .expect("run")
        .expect("free")
        .expect("fenced");
    assert!(seen > last, "the work sees a newer token: {seen} > {last}");
    let expiring = locks.lock("fenced", ms(&locks, 100)).fenced();
    let kept = expiring.acquire().await.expect("acquire").expect("free");
    let kept_fence = kept.fence().expect("fenced");
    kept.keep();
    tokio::time::sleep(ms(&locks, 250)).await;
    let after = lock
        .acquire()
        .await
        .expect("acquire")
        .expect("expired, so free");
    assert!(
        after.fence().expect("fenced") > kept_fence,
        "expiry does not reset the counter"
    );
    let unfenced = locks
        .lock("unfenced", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(unfenced.fence(), None, "no token unless asked for");
}

/// A store that cannot fence must say so, rather than hand out guards whose
/// `fence()` is silently `None`.
pub async fn fencing_on_a_store_that_cannot_fence_is_an_error(locks: LockManager) {
    let plain = LockManager::new(Instrumented::new(Arc::clone(locks.store())));
    let out = plain.lock("fenced", LONG).fenced().acquire().await;
    assert!(
        matches!(out, Err(Error::FencingUnsupported { .. })),
        "got {out:?}"
    );
}

/// `shared` refuses to run on a per-process store: the work must not
/// run twice across the fleet because a Redis setup was forgotten.
pub async fn shared_matches_the_manager(locks: LockManager) {
    let out = locks
        .lock("shared-only", LONG)
        .shared()
        .run(async { Ok::<_, Error>(()) })
        .await;
    if locks.is_shared() {
        assert_eq!(out.expect("a shared store runs it"), Some(()));
    } else {
        assert!(
            matches!(out, Err(Error::NotShared { .. })),
            "a per-process store is refused: {out:?}"
        );
        let vouched = locks.clone().declared_shared();
        let out = vouched
            .lock("shared-only", LONG)
            .shared()
            .run(async { Ok::<_, Error>(()) })
            .await
            .expect("declared shared runs it");
        assert_eq!(out, Some(()));
    }
}

/// `run_or_contended`: for work that must happen, just not twice at once,
/// contention is an error and the body does not run.
pub async fn contention_can_be_an_error(locks: LockManager) {
    let lock = locks.lock("must-run", LONG);
    let value = lock
        .run_or_contended(async { Ok::<_, Error>(5) })
        .await
        .expect("free, so it runs");
    assert_eq!(value, 5);
    let _held = lock.acquire().await.expect("acquire").expect("free");
    let ran = AtomicBool::new(false);
    let out = lock
        .run_or_contended(async {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, Error>(6)
        })
        .await;
    assert!(
        matches!(out, Err(Error::Contended { .. })),
        "contended: {out:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "the body did not run");
}

/// Options that contradict each other are refused with a message that says
/// the fix, before anything is acquired.
pub async fn contradictory_options_are_errors(locks: LockManager) {
    let no_renew = locks.lock("opts", LONG).max_hold(LONG).acquire().await;
    assert!(
        matches!(&no_renew, Err(Error::InvalidOptions { reason, .. }) if reason.contains("renew")),
        "max_hold without renew: {no_renew:?}"
    );
    let too_long = locks
        .lock("opts", ms(&locks, 1000))
        .at_least(ms(&locks, 2000))
        .acquire()
        .await;
    assert!(
        matches!(&too_long, Err(Error::InvalidOptions { reason, .. }) if reason.contains("ttl")),
        "at_least beyond ttl: {too_long:?}"
    );
    assert!(
        !locks.lock("opts", LONG).is_held().await.expect("is_held"),
        "nothing was acquired"
    );
}

/// `current()` is the running work's lease, and nothing outside locked work.
pub async fn current_is_the_running_works_lease(locks: LockManager) {
    assert!(
        lock_core::current().is_none(),
        "no lease outside locked work"
    );
    let lock = locks.lock("current", LONG);
    let before = Instant::now();
    let (key, owner, deadline) = lock
        .run(async {
            let lease = lock_core::current().expect("inside locked work");
            let holder = lock_core::LockManager::clone(&locks)
                .lock("current", LONG)
                .holder()
                .await?
                .expect("held");
            assert_eq!(lease.token(), holder.token(), "the lease's token holds it");
            assert_eq!(lease.owner(), holder.owner(), "and reads as its owner");
            Ok::<_, Error>((
                lease.key().to_owned(),
                lease.token().to_owned(),
                lease.deadline(),
            ))
        })
        .await
        .expect("run")
        .expect("free");
    assert_eq!(key, lock.key());
    assert!(!owner.is_empty());
    assert!(
        deadline > before && deadline <= Instant::now() + LONG,
        "the deadline is about ttl after acquisition"
    );
}

/// One test per lifecycle behaviour, each on a fresh manager from `$make`.
///
/// The same shape as [`store_contract!`](crate::store_contract): `$make` is
/// an async expression yielding `Option<LockManager>`, awaited anew inside
/// each test's own tokio runtime; `None` skips the test (it returns at once
/// and counts as passed, so the expression should say why). One test per
/// `pub async fn` of [`lifecycle`](crate::lifecycle), named as the function
/// is, each the same as:
///
/// ```text
/// #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// async fn behaviour() {
///     let Some(manager) = $make.await else { return };
///     lock_test_kit::lifecycle::behaviour(lock_test_kit::isolated(manager)).await;
/// }
/// ```
///
/// ```
/// use lock_core::LockManager;
///
/// lock_test_kit::lifecycle_contract!(async { Some(LockManager::memory()) });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! lifecycle_contract {
    ($make:expr $(,)?) => {
        $crate::__behaviours!(lifecycle, $make;
            a_renewing_lock_outlives_several_multiples_of_its_ttl,
            the_lost_signal_fires_when_the_deadline_passes_unrenewed,
            a_body_whose_lease_is_taken_away_is_cancelled,
            by_default_a_lost_lease_lets_the_work_finish,
            max_hold_stops_renewal_so_a_stuck_body_lets_go,
            at_least_keeps_the_claim_after_an_early_end,
            at_least_holds_after_a_failed_body_too,
            fencing_tokens_strictly_increase_across_holders_and_releases,
            fencing_on_a_store_that_cannot_fence_is_an_error,
            shared_matches_the_manager,
            contention_can_be_an_error,
            contradictory_options_are_errors,
            current_is_the_running_works_lease,
        );
    };
}
