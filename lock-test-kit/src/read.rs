//! The read side of a name ([`Lock::read`](lock_core::Lock::read)): the
//! behaviours of a store that keeps readers, and the refusal of one that
//! does not.
//!
//! Part of [`store_contract!`](crate::store_contract). On a store whose
//! [`read_mode`](lock_core::LockStore::read_mode) is false, each behaviour
//! checks instead that a reader is refused with
//! [`Error::ReadUnsupported`], at once and with nothing left behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::{Error, LockManager};

use crate::counted::Counted;
use crate::ms;

/// A TTL no test outlives.
const LONG: Duration = Duration::from_secs(60);

/// Far above what a correct store needs: a hang guard.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// True when the store keeps readers; otherwise checks that it refuses one
/// clearly, and returns false.
async fn keeps_readers(locks: &LockManager) -> bool {
    if locks.store().read_mode() {
        return true;
    }
    match locks.lock("reader", LONG).read().acquire().await {
        Err(Error::ReadUnsupported { store, .. }) => {
            assert_eq!(store, locks.store().name(), "the refusal names the store");
        }
        other => panic!("a store without read mode must refuse a reader: {other:?}"),
    }
    assert!(
        locks.list().await.map_or(true, |held| held.is_empty()),
        "a refused reader leaves nothing behind"
    );
    false
}

/// Readers hold a name together; a writer excludes readers and writers.
/// Without this a read lock is only a slower plain lock, or no lock at all.
pub async fn readers_hold_a_name_together_and_a_writer_excludes_them(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let read = || locks.lock("catalog", LONG).read();
    let first = read().acquire().await.expect("acquire").expect("free");
    let second = read()
        .acquire()
        .await
        .expect("acquire")
        .expect("readers share the name");
    assert!(first.is_reader() && second.is_reader());
    assert_ne!(
        first.token(),
        second.token(),
        "each reader has its own lease"
    );
    let held = locks.list().await.expect("list");
    let readers = held
        .iter()
        .filter(|(name, holder)| name == "catalog" && holder.is_reader())
        .count();
    assert_eq!(readers, 2, "listing shows each reader: {held:?}");
    assert!(
        locks
            .lock("catalog", LONG)
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "a writer is held off while readers hold the name"
    );

    assert!(first.release().await.expect("release"));
    assert!(
        second.is_still_held().await.expect("check"),
        "releasing one reader leaves the other's lease alone"
    );
    assert!(
        locks
            .lock("catalog", LONG)
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "one reader is enough to hold a writer off"
    );
    assert!(second.release().await.expect("release"));

    let writer = locks
        .lock("catalog", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("the readers gone, the writer gets in");
    assert!(!writer.is_reader());
    assert!(
        read().acquire().await.expect("acquire").is_none(),
        "a writer holds readers off"
    );
    assert!(writer.release().await.expect("release"));
}

/// A reader that dies holds writers off until its own TTL runs out, and no
/// longer; the other readers' leases are untouched by its expiry.
pub async fn each_reader_expires_on_its_own(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let short = ms(&locks, 300);
    let crashed = locks
        .lock("expiring", short)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    crashed.keep();
    let alive = locks
        .lock("expiring", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("readers share");
    tokio::time::sleep(short * 2).await;
    assert!(
        alive.is_still_held().await.expect("check"),
        "the other reader's lease outlives the one that expired"
    );
    assert!(alive.release().await.expect("release"));
    let writer = locks
        .lock("expiring", LONG)
        .wait_for(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    assert!(writer.is_some(), "the expired reader holds nobody off");
}

/// Writer preference: 8 tasks keep overlapping reads going, each 50 ms, and
/// a writer that waits still gets the name after a few reads, not after the
/// readers happen to pause (they never do). Prints the writer's wait and
/// how many reads began while it waited.
pub async fn a_waiting_writer_is_not_starved_by_overlapping_readers(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let hold = ms(&locks, 50);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let (locks, stop, reads) = (locks.clone(), Arc::clone(&stop), Arc::clone(&reads));
            tokio::spawn(async move {
                // Staggered, so some read is always under way.
                tokio::time::sleep(hold * i / 8).await;
                while !stop.load(Ordering::SeqCst) {
                    let lock = locks.lock("busy", LONG).read().wait_for(LONG);
                    if let Some(guard) = lock.acquire().await.expect("read") {
                        reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                        guard.release().await.expect("release");
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(hold * 3).await;
    assert!(reads.load(Ordering::SeqCst) > 0, "the readers are reading");

    let before = reads.load(Ordering::SeqCst);
    let started = Instant::now();
    let writer = locks
        .lock("busy", LONG)
        .wait_for(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    let waited = started.elapsed();
    let during = reads.load(Ordering::SeqCst) - before;
    eprintln!(
        "writer waited {waited:?} behind 8 overlapping {hold:?} readers; {during} reads began meanwhile"
    );
    let writer = writer.expect("a waiting writer gets the name within its 2 s wait");
    // Each reader task can have had one read under way, or just admitted,
    // when the writer began to wait, and on a networked store another may
    // begin before the writer's first attempt reaches the store (on a
    // loaded machine, that can take a read's length): two per task at
    // most. Without writer preference, hundreds begin.
    assert!(
        during <= 16,
        "new readers went ahead of the waiting writer: {during} reads began while it waited"
    );
    stop.store(true, Ordering::SeqCst);
    assert!(writer.release().await.expect("release"));
    for reader in readers {
        reader.await.expect("reader task");
    }
}

/// A writer's release lets in every reader waiting for the name, in this
/// process as in others: each is woken, none is left to sleep out the
/// writer's TTL or its own wait. A store that wakes one waiter per release
/// (right for writers, who exclude each other) must pass the wake on from
/// a reader that gets in.
pub async fn a_writers_release_lets_every_waiting_reader_in(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let writer = locks
        .lock("shelf", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let waiting = locks.lock("shelf", LONG).read().wait_for(LONG);
                let guard = waiting.acquire().await.expect("read").expect("admitted");
                let admitted = Instant::now();
                // Held until every reader is in, so each is let in beside
                // the others rather than after them.
                (guard, admitted)
            })
        })
        .collect();
    // Every reader has made its first attempt and is asleep.
    tokio::time::sleep(ms(&locks, 300)).await;
    let released = Instant::now();
    assert!(writer.release().await.expect("release"));
    let mut slowest = Duration::ZERO;
    let mut guards = Vec::new();
    for reader in readers {
        let within = tokio::time::timeout(HANG_GUARD, reader).await;
        let (guard, admitted) = within
            .expect("every waiting reader is let in long before its wait or the writer's TTL ends")
            .expect("reader task");
        slowest = slowest.max(admitted.saturating_duration_since(released));
        guards.push(guard);
    }
    eprintln!("4 waiting readers let in by one writer's release; the last after {slowest:?}");
    assert!(
        slowest < Duration::from_secs(2),
        "a reader slept on after the writer released: let in after {slowest:?}"
    );
    for guard in guards {
        assert!(guard.release().await.expect("release"));
    }
}

/// The last reader's release wakes the writer waiting for the readers at
/// once, even with new readers waiting behind that writer in the same
/// process: a release that woke one of those readers instead (held off by
/// the writer, it can only wait again) would leave the writer asleep until
/// its nap ends. Prints how long after the release the writer got in.
pub async fn the_last_readers_release_wakes_the_writer_ahead_of_waiting_readers(
    locks: LockManager,
) {
    if !keeps_readers(&locks).await {
        return;
    }
    let mut readers = Vec::new();
    for _ in 0..4 {
        let reader = locks.lock("doc", LONG).read().acquire().await;
        readers.push(reader.expect("acquire").expect("readers share"));
    }
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks.lock("doc", LONG).wait_for(LONG).acquire().await;
            (guard.expect("acquire"), Instant::now())
        })
    };
    // The writer is waiting, then new readers queue behind it.
    tokio::time::sleep(ms(&locks, 100)).await;
    let late: Vec<_> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let lock = locks.lock("doc", LONG).read().wait_for(LONG);
                lock.acquire().await.expect("acquire").is_some()
            })
        })
        .collect();
    tokio::time::sleep(ms(&locks, 100)).await;
    let mut last = Instant::now();
    for reader in readers {
        last = Instant::now();
        assert!(reader.release().await.expect("release"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (guard, admitted) = tokio::time::timeout(HANG_GUARD, writer)
        .await
        .expect("the writer gets the name")
        .expect("writer task");
    let guard = guard.expect("the writer gets the name, ahead of the waiting readers");
    let waited = admitted.saturating_duration_since(last);
    eprintln!("the writer got the name {waited:?} after the last reader's release");
    assert!(
        waited < Duration::from_millis(500),
        "the writer slept {waited:?} through the last reader's release"
    );
    assert!(guard.release().await.expect("release"));
    for reader in late {
        let admitted = tokio::time::timeout(HANG_GUARD, reader).await;
        assert!(
            admitted.expect("in").expect("reader task"),
            "the late readers get in after the writer"
        );
    }
}

/// A reader or writer whose acquire is dropped while it waits leaves
/// nothing behind: no lease, and no place in a queue holding others off.
pub async fn cancelled_reader_and_writer_waits_leave_nothing_behind(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let reader = locks
        .lock("queue", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    // A writer waits behind the reader, then gives up: cut off mid-wait.
    let writer = locks.lock("queue", LONG).wait_for(LONG);
    let cut = tokio::time::timeout(ms(&locks, 200), writer.acquire()).await;
    assert!(cut.is_err(), "the writer was still waiting when cut off");
    // Had it stayed queued, it would hold every new reader off.
    let second = locks
        .lock("queue", LONG)
        .read()
        .wait_for(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    assert!(
        second.is_some(),
        "the cancelled writer no longer holds readers off"
    );
    drop(second);
    // A reader waits behind a writer, then gives up.
    assert!(reader.release().await.expect("release"));
    let writer = locks
        .lock("queue", LONG)
        .wait_for(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire")
        .expect("the readers gone, the writer gets in");
    let waiting = locks.lock("queue", LONG).read().wait_for(LONG);
    let cut = tokio::time::timeout(ms(&locks, 200), waiting.acquire()).await;
    assert!(cut.is_err(), "the reader was still waiting when cut off");
    assert!(writer.release().await.expect("release"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = locks.list().await.expect("list");
        if held.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "leases left behind: {held:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A writer's fencing token keeps increasing across reader phases: readers
/// between two writers never set the name's counter back (on a store
/// that hands out fencing tokens).
pub async fn a_writers_fence_keeps_increasing_across_reader_phases(locks: LockManager) {
    if !keeps_readers(&locks).await || !locks.store().fencing() {
        return;
    }
    let mut last = 0;
    for round in 0..3 {
        let writer = locks
            .lock("ledger", LONG)
            .fenced()
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let fence = writer.fence().expect("a fenced writer has a token");
        assert!(
            fence > last,
            "round {round}: the writer's token {fence} is not above the last, {last}"
        );
        last = fence;
        assert!(writer.release().await.expect("release"));
        let mut readers = Vec::new();
        for _ in 0..2 {
            let reader = locks.lock("ledger", LONG).read().acquire().await;
            readers.push(reader.expect("acquire").expect("readers share"));
        }
        for reader in readers {
            assert!(reader.release().await.expect("release"));
        }
    }
}

/// `read` with more than one permit or with fencing is refused: readers
/// already share, and a fencing token orders writers.
pub async fn a_reader_refuses_permits_and_fencing(locks: LockManager) {
    let permits = locks
        .lock("options", LONG)
        .read()
        .permits(2)
        .acquire()
        .await;
    assert!(
        matches!(permits, Err(Error::InvalidOptions { .. })),
        "read with permits: {permits:?}"
    );
    let fenced = locks.lock("options", LONG).read().fenced().acquire().await;
    assert!(
        matches!(fenced, Err(Error::InvalidOptions { .. })),
        "read with fenced: {fenced:?}"
    );
}

/// A reader's [`is_still_held`](lock_core::LockGuard::is_still_held)
/// reads its own lease on its own name, and nothing else: not a listing of
/// every key its name is a prefix of (on Redis a `SCAN` of the keyspace
/// per call, on the memory store a pass over every shard), nor a read that
/// mistakes a neighbour for it. Released, `a`'s reader is no longer held,
/// though a writer holds `ab` and readers hold `a:b`, `a*` and a name that
/// starts with `a` and is too long for some stores to keep as written
/// (PostgreSQL keeps names over 2,600 bytes as a digest).
pub async fn a_readers_check_reads_its_own_lease_and_no_name_around_it(locks: LockManager) {
    if !keeps_readers(&locks).await {
        return;
    }
    let counted = Counted::new(Arc::clone(locks.store()));
    let checked = LockManager::new(counted.clone()).with_prefix(locks.prefix());
    let read = |name: &str| checked.lock(name, LONG).read();
    let released = read("a").acquire().await.expect("acquire").expect("free");
    let staying = read("a")
        .acquire()
        .await
        .expect("acquire")
        .expect("readers share the name");
    let writer = checked
        .lock("ab", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("another name, free");
    let long = format!("a{}", "b".repeat(3_000));
    let mut around = Vec::new();
    for name in ["a:b", "a*", long.as_str()] {
        around.push(read(name).acquire().await.expect("acquire").expect("free"));
    }
    assert!(
        released.is_still_held().await.expect("check"),
        "a reader holds its name until released"
    );
    assert!(
        checked
            .store()
            .release(released.key(), released.token())
            .await
            .expect("release"),
        "the reader's lease is released"
    );
    assert!(
        !released.is_still_held().await.expect("check"),
        "a released reader is no longer held, though names starting with its own are"
    );
    // Released already: nothing for the guard to give back.
    released.keep();
    assert!(
        staying.is_still_held().await.expect("check"),
        "the name's other reader still holds it"
    );
    assert!(
        writer.is_still_held().await.expect("check"),
        "the writer of `ab` still holds it"
    );
    for reader in &around {
        assert!(
            reader.is_still_held().await.expect("check"),
            "the reader of {:.40}... still holds it",
            reader.key()
        );
    }
    assert_eq!(
        counted.lists(),
        0,
        "checking whether a lease is held lists no keys"
    );
    assert!(staying.release().await.expect("release"));
    assert!(writer.release().await.expect("release"));
    for reader in around {
        assert!(reader.release().await.expect("release"));
    }
}
