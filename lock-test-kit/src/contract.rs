//! The store contract suite: the behaviours every [`LockStore`](lock_core::LockStore) must give.
//!
//! Each function takes a manager over the store under test and checks one
//! behaviour. [`store_contract!`](crate::store_contract) turns the whole list
//! into one test per behaviour, so a store's test file is a single line:
//!
//! ```
//! lock_test_kit::store_contract!(async { Some(lock_core::LockManager::memory()) });
//! # fn main() {}
//! ```
//!
//! Every test runs under its own random prefix ([`isolated`]), so the suite
//! can run in parallel against one shared server without tests seeing each
//! other's keys. Time bounds here are hang guards, far above what a correct
//! store needs.
//!
//! A function can also be called on its own, on a manager built some other
//! way: [`every_call_works_without_a_time_bound`] is for a store configured
//! with no time bound on its calls, and is not in the macro's list.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::store::{AcquireRequest, Attempt};
use lock_core::{Error, LockManager};

pub use crate::cancellation::{
    a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on,
    a_waiter_cut_off_after_its_wake_passes_the_wake_on,
    lock_futures_cut_off_at_random_points_leave_no_lease_behind,
};
pub use crate::read::{
    a_reader_refuses_permits_and_fencing,
    a_readers_check_reads_its_own_lease_and_no_name_around_it,
    a_waiting_writer_is_not_starved_by_overlapping_readers,
    a_writers_fence_keeps_increasing_across_reader_phases,
    a_writers_release_lets_every_waiting_reader_in,
    cancelled_reader_and_writer_waits_leave_nothing_behind, each_reader_expires_on_its_own,
    readers_hold_a_name_together_and_a_writer_excludes_them,
    the_last_readers_release_wakes_the_writer_ahead_of_waiting_readers,
};
use crate::{Instrumented, isolated, longest, ms};

/// A TTL no test outlives, so any lease that ends early ended because the
/// behaviour under test ended it.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound for things that should happen "promptly".
const HANG_GUARD: Duration = Duration::from_secs(10);

/// Polls `check` until it returns true or `HANG_GUARD` passes.
async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + HANG_GUARD;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// Many callers race for one free lock: exactly one wins. Without an atomic
/// set-if-absent, two would both think they hold it.
pub async fn exactly_one_caller_gets_the_lock(locks: LockManager) {
    let attempts = (0..16).map(|_| {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("race", LONG).acquire().await })
    });
    let mut winners = Vec::new();
    for attempt in attempts {
        let guard = attempt.await.expect("task ran").expect("acquire succeeded");
        winners.extend(guard);
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one of 16 racing callers must win"
    );
}

/// Once the holder releases, the next caller gets the lock at once.
pub async fn releasing_lets_the_next_caller_in(locks: LockManager) {
    let lock = locks.lock("next", LONG);
    let first = lock.acquire().await.expect("acquire").expect("free lock");
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "held lock must refuse"
    );
    assert!(
        first.release().await.expect("release"),
        "release of our own live lease says true"
    );
    let second = lock.acquire().await.expect("acquire");
    assert!(second.is_some(), "a released lock is free again");
}

/// A holder that overran its TTL must not free the lease that has since
/// passed to someone else; otherwise a third caller would get in alongside
/// the second.
pub async fn a_release_after_the_lock_moved_on_does_not_take_it_from_the_new_holder(
    locks: LockManager,
) {
    let short = locks.lock("moved-on", ms(&locks, 100));
    let stale = short.acquire().await.expect("acquire").expect("free lock");
    tokio::time::sleep(ms(&locks, 250)).await;
    let current = locks
        .lock("moved-on", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("the expired lease is free again");
    assert!(
        !stale.release().await.expect("release"),
        "a stale release must say it was no longer ours"
    );
    let third = locks
        .lock("moved-on", LONG)
        .acquire()
        .await
        .expect("acquire");
    assert!(
        third.is_none(),
        "the new holder still holds it, so a third caller stays locked out"
    );
    assert!(
        current.is_still_held().await.expect("is_still_held"),
        "the new holder's lease is untouched"
    );
}

/// Owner tokens tell holders apart; equal tokens would let one holder
/// release another's lease.
pub async fn two_holders_get_different_tokens(locks: LockManager) {
    let lock = locks.lock("tokens", LONG);
    let first = lock.acquire().await.expect("acquire").expect("free");
    let first_token = first.token().to_owned();
    first.release().await.expect("release");
    let second = lock.acquire().await.expect("acquire").expect("free");
    assert_ne!(
        first_token,
        second.token(),
        "each acquisition gets its own token"
    );
}

/// A holder that vanished without releasing must not block the lock forever.
pub async fn an_expired_lock_is_available_again(locks: LockManager) {
    let lock = locks.lock("expiring", ms(&locks, 100));
    lock.acquire().await.expect("acquire").expect("free").keep();
    assert!(lock.is_held().await.expect("is_held"), "held right after");
    tokio::time::sleep(ms(&locks, 250)).await;
    assert!(
        !lock.is_held().await.expect("is_held"),
        "expired after its ttl"
    );
    assert!(
        lock.acquire().await.expect("acquire").is_some(),
        "an expired lock can be taken"
    );
}

/// `run` gives the lock back when the work succeeds.
pub async fn run_releases_on_success(locks: LockManager) {
    let lock = locks.lock("run-ok", LONG);
    let out = lock
        .run(async { Ok::<_, Error>(7) })
        .await
        .expect("run succeeded");
    assert_eq!(out, Some(7), "the work's value comes back");
    assert!(
        !lock.is_held().await.expect("is_held"),
        "released after success"
    );
}

/// `run` gives the lock back when the work fails, and returns the work's error.
pub async fn run_releases_on_failure(locks: LockManager) {
    #[derive(Debug)]
    enum AppError {
        Work,
        Lock,
    }
    impl From<Error> for AppError {
        fn from(_: Error) -> Self {
            AppError::Lock
        }
    }
    let lock = locks.lock("run-err", LONG);
    let out: Result<Option<()>, AppError> = lock.run(async { Err(AppError::Work) }).await;
    assert!(
        matches!(out, Err(AppError::Work)),
        "the work's own error comes back, got {out:?}"
    );
    assert!(
        !lock.is_held().await.expect("is_held"),
        "released after failure"
    );
}

/// When somebody else holds the lock, `run` returns `None` without running
/// the work.
pub async fn run_skips_the_work_when_somebody_else_holds_it(locks: LockManager) {
    let lock = locks.lock("run-skip", LONG);
    let _held = lock.acquire().await.expect("acquire").expect("free");
    let ran = AtomicUsize::new(0);
    let out = lock
        .run(async {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(())
        })
        .await
        .expect("run");
    assert_eq!(out, None, "contended run says None");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the work must not run");
}

/// A waiter gets the lock once the holder releases it, well before the
/// holder's TTL would have freed it.
pub async fn waiting_gets_the_lock_once_it_is_released(locks: LockManager) {
    let holder = locks
        .lock("wait-release", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock("wait-release", LONG)
                .wait_for(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the lock is held"
    );
    holder.release().await.expect("release");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("the waiter wakes on release, not at the holder's 60 s ttl")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the released lock");
}

/// A waiter wakes when the holder's lease runs out, even though nobody
/// releases it.
pub async fn waiting_gets_the_lock_once_the_holders_ttl_runs_out(locks: LockManager) {
    locks
        .lock("wait-expiry", ms(&locks, 200))
        .acquire()
        .await
        .expect("acquire")
        .expect("free")
        .keep();
    let got = tokio::time::timeout(
        HANG_GUARD,
        locks
            .lock("wait-expiry", LONG)
            .wait_for(Duration::from_secs(30))
            .acquire(),
    )
    .await
    .expect("the waiter wakes at the holder's expiry, not at its own deadline")
    .expect("acquire");
    assert!(got.is_some(), "the waiter got the expired lock");
}

/// A waiter gives up at its deadline and says `None`.
pub async fn waiting_gives_up_at_the_deadline(locks: LockManager) {
    let _held = locks
        .lock("deadline", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let started = Instant::now();
    let got = tokio::time::timeout(
        HANG_GUARD,
        locks
            .lock("deadline", LONG)
            .wait_for(Duration::from_millis(200))
            .acquire(),
    )
    .await
    .expect("the waiter must give up at its deadline, not wait for the holder")
    .expect("acquire");
    assert!(got.is_none(), "still held at the deadline: None");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited the full 200 ms first, waited {:?}",
        started.elapsed()
    );
}

/// A waiter does not poll: while the lock stays held, it makes one attempt,
/// sleeps until a release or the holder's expiry, and tries once more.
pub async fn a_waiter_does_not_poll_the_store(locks: LockManager) {
    let counted = Instrumented::new(Arc::clone(locks.store()));
    let counted_locks = LockManager::new(counted.clone()).with_prefix(locks.prefix());
    let holder = locks
        .lock("no-poll", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = tokio::spawn(async move {
        counted_locks
            .lock("no-poll", LONG)
            .wait_for(Duration::from_secs(30))
            .acquire()
            .await
    });
    // Long enough for a 100 ms (or even 50 ms) poller to have tried many times.
    tokio::time::sleep(Duration::from_millis(600)).await;
    holder.release().await.expect("release");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("woken by the release")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the lock");
    assert!(
        counted.acquires() <= 3,
        "a waiter must wake on release, not poll: {} attempts in 600 ms",
        counted.acquires()
    );
}

/// Extending keeps a job's lock past its original TTL.
pub async fn extending_keeps_a_long_jobs_lock(locks: LockManager) {
    let lock = locks.lock("extend", ms(&locks, 300));
    let guard = lock.acquire().await.expect("acquire").expect("free");
    for _ in 0..3 {
        tokio::time::sleep(ms(&locks, 150)).await;
        assert!(
            guard.extend(ms(&locks, 300)).await.expect("extend"),
            "our live lease extends"
        );
    }
    // 450 ms in: the original 300 ms ttl has passed, the extensions kept it.
    assert!(
        guard.is_still_held().await.expect("is_still_held"),
        "extended past the original ttl"
    );
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "nobody else gets in"
    );
}

/// Extending a lease that expired and passed on says `false` and leaves the
/// new holder's lease alone.
pub async fn extending_a_lock_that_moved_on_says_so(locks: LockManager) {
    let stale = locks
        .lock("extend-moved", ms(&locks, 100))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(ms(&locks, 250)).await;
    let current = locks
        .lock("extend-moved", ms(&locks, 500))
        .acquire()
        .await
        .expect("acquire")
        .expect("expired, so free");
    assert!(
        !stale.extend(LONG).await.expect("extend"),
        "a stale extend says false"
    );
    let holder = locks
        .lock("extend-moved", LONG)
        .holder()
        .await
        .expect("holder")
        .expect("held by current");
    assert_eq!(
        holder.token(),
        current.token(),
        "the lease is still the new holder's"
    );
    assert!(
        holder.remaining_ttl() <= longest(&locks, ms(&locks, 500)),
        "the stale extend must not have pushed the new holder's ttl to 60 s: {:?}",
        holder.remaining_ttl()
    );
}

/// `keep` leaves the claim standing after the guard is gone, until its TTL.
pub async fn keep_leaves_the_claim_standing_until_its_ttl_and_it_then_expires(locks: LockManager) {
    let lock = locks.lock("keep", ms(&locks, 300));
    lock.acquire().await.expect("acquire").expect("free").keep();
    tokio::time::sleep(ms(&locks, 50)).await;
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "a kept claim still excludes others"
    );
    tokio::time::sleep(ms(&locks, 400)).await;
    assert!(
        lock.acquire().await.expect("acquire").is_some(),
        "and it expires at its ttl"
    );
}

/// Locks with different names are independent.
pub async fn different_names_do_not_contend(locks: LockManager) {
    let _a = locks
        .lock("name-a", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let b = locks.lock("name-b", LONG).acquire().await.expect("acquire");
    assert!(b.is_some(), "another name is not blocked");
}

/// The manager's prefix is part of the key: managers with different prefixes
/// over one store do not contend, and the guard reports the full key.
pub async fn the_prefix_is_part_of_the_key(locks: LockManager) {
    let other = locks
        .clone()
        .with_prefix(format!("{}other:", locks.prefix()));
    let lock = locks.lock("prefixed", LONG);
    assert_eq!(lock.key(), format!("{}prefixed", locks.prefix()));
    assert_eq!(lock.name(), "prefixed");
    let guard = lock.acquire().await.expect("acquire").expect("free");
    assert_eq!(guard.key(), lock.key(), "the guard reports the full key");
    let elsewhere = other
        .lock("prefixed", LONG)
        .acquire()
        .await
        .expect("acquire");
    assert!(elsewhere.is_some(), "another prefix is another key");
}

/// `holder` says who holds a lock and for how long.
pub async fn the_holder_is_described_with_its_remaining_ttl(locks: LockManager) {
    let lock = locks.lock("who", LONG);
    assert!(
        lock.holder().await.expect("holder").is_none(),
        "free: no holder"
    );
    let guard = lock.acquire().await.expect("acquire").expect("free");
    let holder = lock.holder().await.expect("holder").expect("held");
    assert_eq!(
        holder.token(),
        guard.token(),
        "the holder's token is the guard's"
    );
    assert_eq!(
        holder.owner(),
        guard.owner(),
        "and both read as the same owner"
    );
    assert!(
        holder
            .owner()
            .ends_with(&format!(":{}", std::process::id())),
        "the readable owner names this process: {:?}",
        holder.owner()
    );
    assert!(
        holder.remaining_ttl() > Duration::from_secs(50)
            && holder.remaining_ttl() <= longest(&locks, LONG),
        "remaining ttl is about 60 s: {:?}",
        holder.remaining_ttl()
    );
}

/// `list` shows the held locks under the manager's prefix, by name, sorted,
/// with their holders; not released or expired ones, nor another prefix's.
/// A store that cannot list says so with `Error::Unsupported`.
pub async fn listing_shows_the_held_locks_by_name_with_their_holders(locks: LockManager) {
    // A prefix that shares all but its last characters with ours: its keys
    // must not show up.
    let sibling = locks
        .clone()
        .with_prefix(format!("{}-sibling:", locks.prefix().trim_end_matches(':')));
    let _elsewhere = sibling
        .lock("a", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let listed = locks.list().await;
    if let Err(Error::Unsupported { store, .. }) = &listed {
        assert_eq!(*store, locks.store().name(), "the error names the store");
        let text = listed.expect_err("unsupported").to_string();
        assert!(
            text.contains("inspect a lock by name"),
            "says what to do instead: {text}"
        );
        return;
    }
    assert_eq!(
        listed.expect("list"),
        Vec::new(),
        "nothing held under our prefix yet"
    );

    let fenced = locks.store().fencing();
    let mut guards = Vec::new();
    for name in ["b", "a", "c:{x}%}"] {
        let mut lock = locks.lock(name, LONG);
        if fenced {
            lock = lock.fenced();
        }
        guards.push(lock.acquire().await.expect("acquire").expect("free"));
    }
    let expiring = locks.lock("expiring", ms(&locks, 100));
    expiring
        .acquire()
        .await
        .expect("acquire")
        .expect("free")
        .keep();
    tokio::time::sleep(ms(&locks, 250)).await;

    let listed = locks.list().await.expect("list");
    let names: Vec<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["a", "b", "c:{x}%}"],
        "sorted names, prefix removed, expired left out"
    );
    for (name, holder) in &listed {
        let guard = guards
            .iter()
            .find(|guard| guard.key() == format!("{}{name}", locks.prefix()))
            .expect("a guard for every listed name");
        assert_eq!(
            holder.token(),
            guard.token(),
            "{name}: the holder is the guard"
        );
        assert!(
            holder.remaining_ttl() > Duration::from_secs(50)
                && holder.remaining_ttl() <= longest(&locks, LONG),
            "{name}: remaining ttl is about 60 s: {:?}",
            holder.remaining_ttl()
        );
        if let Some(fence) = holder.fence() {
            assert_eq!(
                Some(fence),
                guard.fence(),
                "{name}: a listed fence is the holder's"
            );
        }
    }

    let b = guards.remove(0);
    assert!(b.release().await.expect("release"));
    let names: Vec<String> = locks
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["a", "c:{x}%}"], "a released lock is gone");
}

/// `force_release` frees a lock whoever holds it, and the holder can tell.
pub async fn force_release_frees_a_lock_and_its_holder_can_tell(locks: LockManager) {
    let lock = locks.lock("forced", LONG);
    let guard = lock.acquire().await.expect("acquire").expect("free");
    assert!(
        lock.force_release().await.expect("force_release"),
        "there was a lease to remove"
    );
    assert!(
        !guard.is_still_held().await.expect("is_still_held"),
        "the holder sees it lost the lease"
    );
    assert!(
        !lock.force_release().await.expect("force_release"),
        "nothing left to remove"
    );
    assert!(
        !guard.release().await.expect("release"),
        "its release then says false"
    );
}

/// A guard dropped without release gives the lease back promptly, not at its
/// TTL, and through a spawned task when the store needs I/O.
pub async fn dropping_an_unreleased_guard_releases_it(locks: LockManager) {
    // The instrumented store has no synchronous release, like a network store.
    let spawned =
        LockManager::new(Instrumented::new(Arc::clone(locks.store()))).with_prefix(locks.prefix());
    for manager in [locks.clone(), spawned] {
        let lock = manager.lock("dropped", LONG);
        drop(lock.acquire().await.expect("acquire").expect("free"));
        assert!(
            eventually(|| async { !lock.is_held().await.expect("is_held") }).await,
            "a dropped guard is released long before its 60 s ttl"
        );
    }
}

/// A `run` cancelled mid-work (here by a timeout) leaves the lock free long
/// before its TTL.
pub async fn a_cancelled_run_leaves_the_lock_free(locks: LockManager) {
    let lock = locks.lock("cancelled", LONG);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        lock.run(async {
            tokio::time::sleep(LONG).await;
            Ok::<_, Error>(())
        }),
    )
    .await;
    assert!(cancelled.is_err(), "the run was cancelled by the timeout");
    assert!(
        eventually(|| async { !lock.is_held().await.expect("is_held") }).await,
        "a cancelled run's lock is free long before its 60 s ttl"
    );
}

/// A store is a public type: a caller can reach it without a
/// [`LockManager`] in front, and must get the same clear errors, never a
/// panic (an expiry computed from `Duration::MAX` overflows) and never a
/// lease the store cannot keep.
pub async fn a_store_called_directly_refuses_bad_input(locks: LockManager) {
    let store = locks.store();
    let key = locks.lock("direct", LONG).key().to_owned();
    let token = "direct-caller-token";
    for ttl in [
        Duration::ZERO,
        store.max_ttl() + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let acquired = store.acquire(AcquireRequest::new(&key, token, ttl)).await;
        assert!(
            matches!(acquired, Err(Error::InvalidTtl { .. })),
            "acquire for {ttl:?}: {acquired:?}"
        );
    }
    let empty = store.acquire(AcquireRequest::new("", token, LONG)).await;
    assert!(
        matches!(empty, Err(Error::InvalidName { .. })),
        "acquire of an empty key: {empty:?}"
    );
    let held = store.acquire(AcquireRequest::new(&key, token, LONG)).await;
    assert!(
        matches!(held, Ok(Attempt::Acquired { .. })),
        "a good request still works: {held:?}"
    );
    for ttl in [Duration::ZERO, Duration::MAX] {
        let extended = store.extend(&key, token, ttl).await;
        assert!(
            matches!(extended, Err(Error::InvalidTtl { .. })),
            "extend to {ttl:?}: {extended:?}"
        );
    }
    let holder = store
        .holder(&key)
        .await
        .expect("holder")
        .expect("still held");
    // Within its TTL, give or take a store's rounding (memcached keeps
    // whole seconds, plus one).
    assert!(
        holder.remaining_ttl() <= LONG + Duration::from_secs(2),
        "a refused extend left the lease as it was: {holder:?}"
    );
    assert!(
        store.release(&key, token).await.expect("release"),
        "released"
    );
}

/// Bad input is an error that says what to do, never a panic.
pub async fn bad_input_is_an_error_not_a_panic(locks: LockManager) {
    let empty = locks.lock("", LONG).acquire().await;
    assert!(
        matches!(empty, Err(Error::InvalidName { .. })),
        "empty name: {empty:?}"
    );
    let zero = locks.lock("zero", Duration::ZERO).acquire().await;
    assert!(
        matches!(zero, Err(Error::InvalidTtl { .. })),
        "zero ttl: {zero:?}"
    );
    let too_long = locks.store().max_ttl() + Duration::from_secs(1);
    let beyond = locks.lock("beyond", too_long).acquire().await;
    assert!(
        matches!(beyond, Err(Error::InvalidTtl { .. })),
        "ttl beyond range: {beyond:?}"
    );
    let huge = locks.lock("huge", Duration::MAX).acquire().await;
    assert!(
        matches!(huge, Err(Error::InvalidTtl { .. })),
        "Duration::MAX: {huge:?}"
    );
    let guard = locks
        .lock("extend-bad", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    assert!(
        matches!(
            guard.extend(Duration::ZERO).await,
            Err(Error::InvalidTtl { .. })
        ),
        "extend by zero is refused"
    );
    let message = zero.expect_err("checked above").to_string();
    assert!(
        message.contains("30s"),
        "the message suggests a fix: {message}"
    );
}

/// Many tasks doing read-yield-write on a non-atomic counter under one lock
/// lose no update: the lock really excludes.
pub async fn concurrent_increments_under_the_lock_lose_nothing(locks: LockManager) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 25;
    let total = increment_under_one_lock(&locks, TASKS, ROUNDS).await;
    assert_eq!(total, TASKS * ROUNDS, "every increment survived");
}

/// A semaphore of 3 permits under 64 tasks: the number of concurrent
/// holders observed never exceeds 3, every task gets its permits, 3 can
/// be held at once and a fourth is refused, a release and an expiry each give a permit back, and
/// `holders` lists every holder. 200 runs per task where one costs a
/// fraction of a millisecond (memory, Redis), 20 on the stores whose
/// every acquire is several requests (memcached, PostgreSQL, etcd).
pub async fn a_semaphore_admits_exactly_its_permits(locks: LockManager) {
    const PERMITS: u32 = 3;
    const TASKS: usize = 64;
    let runs = match locks.store().name() {
        "memory" | "redis" => 200,
        _ => 20,
    };
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..TASKS)
        .map(|_| {
            let lock = locks
                .lock("semaphore", Duration::from_secs(30))
                .permits(PERMITS)
                .wait_for(Duration::from_secs(120));
            let (now, most) = (Arc::clone(&now), Arc::clone(&most));
            tokio::spawn(async move {
                for _ in 0..runs {
                    let (now, most) = (Arc::clone(&now), Arc::clone(&most));
                    lock.run(async move {
                        let holding = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(holding, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Error>(())
                    })
                    .await
                    .expect("run")
                    .expect("the wait is long enough to always get a permit");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("every task got all its permits");
    }
    // How many holders overlap under load depends on the scheduler and
    // the store's latency (a holder here keeps its permit for one yield),
    // so only the bound is asserted; that all permits can be held at once
    // is shown deterministically below.
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=PERMITS as usize).contains(&most),
        "at most {PERMITS} holders at once under load ({TASKS} tasks x {runs} runs), saw {most}"
    );

    // All permits can be held at once, and no more; release gives a
    // permit back; holders lists every holder.
    let lock = locks.lock("held-permits", LONG).permits(PERMITS);
    let mut guards = Vec::new();
    for _ in 0..PERMITS {
        guards.push(
            lock.acquire()
                .await
                .expect("acquire")
                .expect("a free permit"),
        );
    }
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "all permits taken"
    );
    let holders = lock.holders().await.expect("holders");
    let mut tokens: Vec<&str> = holders.iter().map(|holder| holder.token()).collect();
    let mut expected: Vec<&str> = guards.iter().map(|guard| guard.token()).collect();
    tokens.sort_unstable();
    expected.sort_unstable();
    assert_eq!(tokens, expected, "holders lists every holder");
    assert!(
        guards
            .pop()
            .expect("a guard")
            .release()
            .await
            .expect("release")
    );
    let again = lock.acquire().await.expect("acquire");
    assert!(again.is_some(), "a released permit is free again");

    // Expiry gives a permit back.
    let short = locks.lock("expiring-permits", ms(&locks, 100)).permits(2);
    for _ in 0..2 {
        short
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
            .keep();
    }
    assert!(
        short.acquire().await.expect("acquire").is_none(),
        "both taken"
    );
    tokio::time::sleep(ms(&locks, 250)).await;
    assert!(
        short.acquire().await.expect("acquire").is_some(),
        "an expired permit is free again"
    );

    // Bad counts, and fencing a semaphore, are errors that say why.
    let zero = locks.lock("zero-permits", LONG).permits(0).acquire().await;
    assert!(
        matches!(zero, Err(Error::InvalidOptions { .. })),
        "{zero:?}"
    );
    let fenced = locks
        .lock("fenced-permits", LONG)
        .permits(2)
        .fenced()
        .acquire()
        .await;
    assert!(
        matches!(fenced, Err(Error::InvalidOptions { .. })),
        "{fenced:?}"
    );
}

/// Every call on `locks`, built on a store configured with
/// `timeout(Duration::MAX)` (no time bound at all), works as with any other
/// bound: a bound too long to add to the clock must mean "no bound", never
/// a panic on the first call.
pub async fn every_call_works_without_a_time_bound(locks: LockManager) {
    let locks = isolated(locks);
    let ttl = ms(&locks, 3000);
    let lock = locks.lock("unbounded", ttl);
    let guard = lock.acquire().await.expect("acquire").expect("free");
    assert!(guard.extend(ttl).await.expect("extend"), "extended");
    let holder = lock.holder().await.expect("holder").expect("held");
    assert_eq!(holder.token(), guard.token(), "the holder is us");
    let waiter = {
        let lock = locks.lock("unbounded", ttl).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.expect("release"), "released");
    let next = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("the waiter returns")
        .expect("task ran")
        .expect("acquire")
        .expect("the waiter got it");
    assert!(lock.force_release().await.expect("force release"), "freed");
    drop(next);
}

/// `tasks` tasks each do `rounds` read-yield-write increments of a counter
/// that is not atomic across the read and the write, each under the lock
/// `counter` (waiting for it); returns the final count. Any overlap between
/// two holders loses an update.
pub async fn increment_under_one_lock(locks: &LockManager, tasks: usize, rounds: usize) -> usize {
    let counter = Arc::new(std::sync::Mutex::new(0usize));
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let lock = locks
                .lock("counter", Duration::from_secs(30))
                .wait_for(Duration::from_secs(120));
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let counter = Arc::clone(&counter);
                    lock.run(async move {
                        let read = *counter.lock().expect("unpoisoned");
                        tokio::task::yield_now().await;
                        *counter.lock().expect("unpoisoned") = read + 1;
                        Ok::<_, Error>(())
                    })
                    .await
                    .expect("run")
                    .expect("the wait is long enough to always get it");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("task ran");
    }
    *counter.lock().expect("unpoisoned")
}

/// One test per contract behaviour, each on a fresh manager from `$make`.
///
/// `$make` is an async expression yielding `Option<LockManager>`. Each test
/// awaits it anew inside its own runtime, so it may connect to a server
/// (each test then has its own connection). `Some(manager)` runs the
/// behaviour on [`isolated(manager)`](crate::isolated); `None` skips the
/// test: it returns at once and counts as passed, so the expression should
/// say why (no server to test against), and panic instead where a skip must
/// not pass as success, such as CI.
///
/// ```
/// use lock_core::LockManager;
///
/// lock_test_kit::store_contract!(async { Some(LockManager::memory()) });
/// # fn main() {}
/// ```
///
/// # Equivalent code
///
/// Every test is a plain `#[test]` on a tokio runtime of its own, so the
/// crate using the macro needs no tokio features of its own. Each is the
/// same as this, with `behaviour` standing for one name of the list below:
///
/// ```text
/// #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// async fn behaviour() {
///     let Some(manager) = $make.await else { return };
///     lock_test_kit::contract::behaviour(lock_test_kit::isolated(manager)).await;
/// }
/// ```
///
/// # The tests it generates
///
/// One per behaviour function of [`contract`](crate::contract), named as the
/// function is: every `pub async fn` there that takes only a manager, which
/// is all of them but [`every_call_works_without_a_time_bound`] (for a store
/// built with no time bound on its calls) and [`increment_under_one_lock`]
/// (a workload, not a behaviour). [`a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on`]
/// takes two managers over two connections to the store: a store's own
/// tests call it.
///
/// [`every_call_works_without_a_time_bound`]: crate::contract::every_call_works_without_a_time_bound
/// [`increment_under_one_lock`]: crate::contract::increment_under_one_lock
/// [`a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on`]: crate::contract::a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on
#[macro_export]
macro_rules! store_contract {
    ($make:expr $(,)?) => {
        $crate::__behaviours!(contract, $make;
            exactly_one_caller_gets_the_lock,
            releasing_lets_the_next_caller_in,
            a_release_after_the_lock_moved_on_does_not_take_it_from_the_new_holder,
            two_holders_get_different_tokens,
            an_expired_lock_is_available_again,
            run_releases_on_success,
            run_releases_on_failure,
            run_skips_the_work_when_somebody_else_holds_it,
            waiting_gets_the_lock_once_it_is_released,
            waiting_gets_the_lock_once_the_holders_ttl_runs_out,
            waiting_gives_up_at_the_deadline,
            a_waiter_does_not_poll_the_store,
            extending_keeps_a_long_jobs_lock,
            extending_a_lock_that_moved_on_says_so,
            keep_leaves_the_claim_standing_until_its_ttl_and_it_then_expires,
            different_names_do_not_contend,
            the_prefix_is_part_of_the_key,
            the_holder_is_described_with_its_remaining_ttl,
            listing_shows_the_held_locks_by_name_with_their_holders,
            force_release_frees_a_lock_and_its_holder_can_tell,
            dropping_an_unreleased_guard_releases_it,
            a_cancelled_run_leaves_the_lock_free,
            bad_input_is_an_error_not_a_panic,
            a_store_called_directly_refuses_bad_input,
            concurrent_increments_under_the_lock_lose_nothing,
            a_semaphore_admits_exactly_its_permits,
            lock_futures_cut_off_at_random_points_leave_no_lease_behind,
            a_waiter_cut_off_after_its_wake_passes_the_wake_on,
            readers_hold_a_name_together_and_a_writer_excludes_them,
            each_reader_expires_on_its_own,
            a_waiting_writer_is_not_starved_by_overlapping_readers,
            cancelled_reader_and_writer_waits_leave_nothing_behind,
            a_writers_release_lets_every_waiting_reader_in,
            the_last_readers_release_wakes_the_writer_ahead_of_waiting_readers,
            a_writers_fence_keeps_increasing_across_reader_phases,
            a_reader_refuses_permits_and_fencing,
            a_readers_check_reads_its_own_lease_and_no_name_around_it,
        );
    };
}
