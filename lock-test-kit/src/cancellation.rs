//! Cancellation at every await: futures of the lock API cut off at random
//! points must never leave a lease behind.
//!
//! A caller's `tokio::time::timeout`, a `select!` arm that loses, a request
//! handler whose client hung up: each drops a lock future wherever it happens
//! to be. If that is after the acquire reached the store but before its reply
//! was read, the store holds a lease nobody owns, and with `ttl = "10m"` the
//! job is blocked for ten minutes. These behaviours cut thousands of futures
//! off after a random number of scheduler turns and then check that every
//! name they touched is free again, long before any TTL.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockManager};

use crate::Instrumented;

/// Far longer than the test: a lease still there at the end was leaked, not
/// left to expire.
const LONG: Duration = Duration::from_secs(600);

/// Hang guard for the spawned give-backs to land.
const SETTLE: Duration = Duration::from_secs(10);

/// Polls `future` until it finishes or `yields` scheduler turns have passed,
/// whichever is first; `None` when it was cut off (and dropped).
pub async fn cut_short<F: Future>(yields: u32, future: F) -> Option<F::Output> {
    let cut = async {
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        biased;
        out = future => Some(out),
        () = cut => None,
    }
}

/// A random number of scheduler turns, spread over every scale from none to
/// about thirty thousand (a round trip to a local server takes tens of
/// turns for Redis, thousands for a PostgreSQL statement), so cut points
/// land before, during and after each request.
pub fn random_turns() -> u32 {
    let scale: u32 = rand::random_range(0..16);
    rand::random_range(0..1u32 << scale)
}

/// How many futures of each kind were cut off and how many finished.
#[derive(Debug, Default)]
pub struct Cuts {
    /// Futures dropped before they finished.
    pub cut: usize,
    /// Futures that finished first.
    pub finished: usize,
}

/// Cuts `rounds` plain acquires, `rounds` runs, `rounds / 2` runs on a
/// semaphore of two permits and `rounds / 4` waiting acquires off at random
/// points, over the names `cut:0..names` (many
/// futures per name, so an orphan on one name also blocks later rounds),
/// and returns the names and the counts. Panics on any lock error.
pub async fn cut_lock_futures_at_random_points(
    locks: &LockManager,
    rounds: usize,
    names: usize,
) -> (Vec<String>, Cuts) {
    let mut cuts = Cuts::default();
    let names: Vec<String> = (0..names).map(|i| format!("cut:{i}")).collect();
    let semaphores: Vec<String> = (0..2).map(|i| format!("cut-sem:{i}")).collect();
    let mut tally = |finished: bool| {
        if finished {
            cuts.finished += 1;
        } else {
            cuts.cut += 1;
        }
    };
    for round in 0..rounds {
        let name = &names[round % names.len()];
        // An acquire that does not wait.
        let yields = random_turns();
        match cut_short(yields, locks.lock(name, LONG).acquire()).await {
            Some(Ok(Some(guard))) => {
                guard.release().await.expect("release");
                tally(true);
            }
            // Held by an orphan whose give-back has not landed yet.
            Some(Ok(None)) => tally(true),
            Some(Err(error)) => panic!("acquire failed: {error}"),
            None => tally(false),
        }
        // A run, cut in its acquire, its work or its release.
        let yields = random_turns();
        let lock = locks.lock(name, LONG);
        let run = lock.run(async {
            tokio::task::yield_now().await;
            Ok::<_, Error>(())
        });
        match cut_short(yields, run).await {
            Some(Ok(_)) => tally(true),
            Some(Err(error)) => panic!("run failed: {error}"),
            None => tally(false),
        }
        // Every other round, a run on a semaphore of two permits: its
        // acquire tries both permit keys, each attempt a cut point.
        if round % 2 == 0 {
            let name = &semaphores[round / 2 % semaphores.len()];
            let yields = random_turns();
            let lock = locks.lock(name, LONG).permits(2);
            let run = lock.run(async {
                tokio::task::yield_now().await;
                Ok::<_, Error>(())
            });
            match cut_short(yields, run).await {
                Some(Ok(_)) => tally(true),
                Some(Err(error)) => panic!("semaphore run failed: {error}"),
                None => tally(false),
            }
        }
    }
    // Waiting acquires: a holder lets go at a random moment while a waiter
    // is cut off at another, so some waiters win the lease just before
    // they are dropped.
    for round in 0..rounds / 4 {
        let name = format!("cut-wait:{round}");
        let holder = locks
            .lock(&name, LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("a fresh name is free");
        let release_after = random_turns();
        let releaser = tokio::spawn(async move {
            for _ in 0..release_after {
                tokio::task::yield_now().await;
            }
            holder.release().await
        });
        let lock = locks.lock(&name, LONG).wait_for(Duration::from_secs(30));
        match cut_short(random_turns(), lock.acquire()).await {
            Some(Ok(Some(guard))) => {
                guard.release().await.expect("release");
                tally(true);
            }
            Some(Ok(None)) => panic!("a 30 s wait cannot run out here"),
            Some(Err(error)) => panic!("waiting acquire failed: {error}"),
            None => tally(false),
        }
        releaser
            .await
            .expect("task ran")
            .expect("the holder's release");
    }
    let mut all = names;
    all.extend((0..rounds / 4).map(|round| format!("cut-wait:{round}")));
    // A semaphore's permits are leases under the lock's key and
    // `<key>#permit-<i>` (see `Lock::permits`): each must be free too.
    for name in semaphores {
        all.push(format!("{name}#permit-1"));
        all.push(name);
    }
    (all, cuts)
}

/// Waits until none of `names` is held (or the settle guard passes) and
/// returns the names still held.
pub async fn still_held(locks: &LockManager, names: &[String]) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let mut held = Vec::new();
        for name in names {
            if locks.lock(name, LONG).is_held().await.expect("is_held") {
                held.push(name.clone());
            }
        }
        if held.is_empty() || tokio::time::Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Thousands of acquires, runs and waiting acquires cut off at random points
/// leave no lease behind: every name is free again (once the background
/// give-backs land, far inside the ten-minute TTL) and can be taken at once.
pub async fn lock_futures_cut_off_at_random_points_leave_no_lease_behind(locks: LockManager) {
    let (names, cuts) = cut_lock_futures_at_random_points(&locks, 1200, 6).await;
    assert!(
        cuts.cut > 100 && cuts.finished > 100,
        "the random cut points must both cut futures off and let others finish: {cuts:?}"
    );
    let held = still_held(&locks, &names).await;
    assert!(
        held.is_empty(),
        "{} of {} names still held by leases nobody owns ({cuts:?}): {held:?}",
        held.len(),
        names.len()
    );
    for name in &names[..6] {
        assert!(
            locks
                .lock(name, LONG)
                .acquire()
                .await
                .expect("acquire")
                .is_some(),
            "{name} can be taken at once"
        );
    }
}

/// A waiter woken by a release and cut off before its next attempt is
/// answered (its caller's timeout fired, its client hung up) passes the
/// wake on: another waiter of the same process gets the free lock at once.
///
/// A release wakes one waiter of a process, the one that would get in.
/// If that one leaves without trying, and keeps the wake, the others sleep
/// on while the lock is free: until the old holder's TTL would have ended
/// (ten minutes for `ttl = "10m"`), or until their own wait runs out and
/// they report the lock taken.
///
/// The holder here is of the same process. A store that wakes its own
/// process's waiters at once on a release and again when the server
/// announces it wakes two waiters here, which hides a lost wake: run
/// [`a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on`]
/// too, with the holder on a connection of its own.
pub async fn a_waiter_cut_off_after_its_wake_passes_the_wake_on(locks: LockManager) {
    a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on(locks.clone(), locks).await;
}

/// [`a_waiter_cut_off_after_its_wake_passes_the_wake_on`], with the lock
/// held and released through `holders` (another connection to the same
/// store, as another process would), so the waiting process hears of the
/// release only from the store. Both run under one fresh prefix
/// ([`isolated`](crate::isolated)).
pub async fn a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on(
    holders: LockManager,
    locks: LockManager,
) {
    let locks = crate::isolated(locks);
    let holders = holders.with_prefix(locks.prefix());
    let gated = Instrumented::new(Arc::clone(locks.store()));
    let locks = LockManager::new(gated.clone()).with_prefix(locks.prefix());
    let name = "woken-then-cut";
    let holder = holders
        .lock(name, LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    // Two waiters told apart by their TTLs, as the gate records them.
    let ttls = [Duration::from_secs(300), Duration::from_secs(301)];
    let mut waiters = Vec::new();
    for ttl in ttls {
        let locks = locks.clone();
        let attempts = gated.acquires();
        waiters.push(tokio::spawn(async move {
            locks.lock(name, ttl).wait_for(LONG).acquire().await
        }));
        // Its first attempt found the lock held: it now waits for a release.
        let tried = tokio::time::timeout(SETTLE, async {
            while gated.acquires() == attempts {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        tried
            .await
            .expect("the waiter's first attempt reached the store");
    }
    // A store that starts listening for a key wakes its waiters once, in
    // case a release came first: both are asleep once 300 ms pass without
    // an attempt. (Held at the gate below, that wake would hold both.)
    let quiet = tokio::time::timeout(SETTLE, async {
        loop {
            let attempts = gated.acquires();
            tokio::time::sleep(Duration::from_millis(300)).await;
            if gated.acquires() == attempts {
                return;
            }
        }
    });
    quiet.await.expect("the waiters fell asleep");
    gated.hold_acquires(true);
    holder.release().await.expect("release");
    // The woken waiter's next attempt now waits at the gate; cut it off
    // there. (A store that hands the lease over on release needs no
    // attempt: that waiter holds the lock, and lets it go. A store that
    // wakes twice, as above, wakes both: the first to try is cut off.)
    let woken = tokio::time::timeout(SETTLE, async {
        loop {
            if let Some(ttl) = gated.held_ttls().first() {
                let index = ttls.iter().position(|t| t == ttl);
                return index.expect("a held attempt is one of the waiters'");
            }
            if let Some(index) = waiters
                .iter()
                .position(tokio::task::JoinHandle::is_finished)
            {
                return index;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the release woke one waiter");
    let cut = waiters.remove(woken);
    cut.abort();
    if let Ok(got) = cut.await {
        drop(got.expect("acquire").expect("handed over"));
    }
    gated.hold_acquires(false);
    let other = waiters.pop().expect("the other waiter");
    let got = tokio::time::timeout(SETTLE, other)
        .await
        .expect("the other waiter got the free lock long before its wait or the old ttl ran out")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the other waiter holds the lock");
}
