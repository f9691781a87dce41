//! The read side of a name through the runtime, beyond the store contract:
//! re-entry across the two sides, what a read lock reports about its
//! holders, and who gets the name when a writer lets go or gives up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Error, LockManager};

const LONG: Duration = Duration::from_secs(60);

/// Work under the write side that asks for the read side of the same name
/// (or the reverse) must neither wait for itself nor run under a lease of
/// the other side: a reader's lease never covers a writer's work, which
/// other readers would see half done.
#[tokio::test]
async fn work_under_one_side_that_asks_for_the_other_gets_the_reentry_error() {
    let locks = LockManager::memory();
    let writer = locks.lock("doc", LONG);
    let inner_locks = locks.clone();
    let outcome = writer
        .run(async move {
            let read = inner_locks.lock("doc", LONG).read();
            let inner = read.run(async { Ok::<_, Error>(()) }).await;
            assert!(
                matches!(inner, Err(Error::Reentrant { .. })),
                "a reader inside the writer's work: {inner:?}"
            );
            let same = inner_locks
                .lock("doc", LONG)
                .run(async { Ok::<_, Error>(7) })
                .await;
            assert_eq!(
                same?,
                Some(7),
                "the same side re-enters under the lease held"
            );
            Ok::<_, Error>(())
        })
        .await;
    assert!(matches!(outcome, Ok(Some(()))), "{outcome:?}");

    let reader = locks.lock("doc", LONG).read();
    let inner_locks = locks.clone();
    let outcome = reader
        .run(async move {
            let write = inner_locks.lock("doc", LONG).wait_for(LONG);
            let inner = tokio::time::timeout(
                Duration::from_secs(10),
                write.run(async { Ok::<_, Error>(()) }),
            )
            .await
            .expect("a writer inside a reader's work never waits for itself");
            assert!(
                matches!(inner, Err(Error::Reentrant { .. })),
                "a writer inside the reader's work: {inner:?}"
            );
            let acquired = inner_locks.lock("doc", LONG).read().acquire().await;
            assert!(
                matches!(acquired, Err(Error::Reentrant { .. })),
                "acquire under either side is the re-entry error: {acquired:?}"
            );
            let same = inner_locks
                .lock("doc", LONG)
                .read()
                .run(async { Ok::<_, Error>(8) })
                .await;
            assert_eq!(same?, Some(8), "a reader re-enters under its own lease");
            Ok::<_, Error>(())
        })
        .await;
    assert!(matches!(outcome, Ok(Some(()))), "{outcome:?}");
    assert!(
        locks.list().await.expect("list").is_empty(),
        "nothing left behind"
    );
}

/// Operators see every reader: `holders` lists them all, and a reader's
/// guard can tell its own lease is still there.
#[tokio::test]
async fn a_read_lock_lists_every_reader_and_each_guard_sees_its_own_lease() {
    let locks = LockManager::memory();
    let read = || locks.lock("report", LONG).read();
    let first = read().acquire().await.expect("acquire").expect("free");
    let second = read().acquire().await.expect("acquire").expect("shared");
    let holders = read().holders().await.expect("holders");
    assert_eq!(holders.len(), 2, "each reader: {holders:?}");
    assert!(holders.iter().all(|holder| holder.is_reader()));
    let mut tokens: Vec<&str> = holders.iter().map(|holder| holder.token()).collect();
    tokens.sort_unstable();
    let mut ours = vec![first.token(), second.token()];
    ours.sort_unstable();
    assert_eq!(tokens, ours, "the readers listed are ours");
    assert!(first.is_still_held().await.expect("check"));
    assert!(read().is_held().await.expect("check"));

    assert!(
        read().force_release().await.expect("force"),
        "frees every reader"
    );
    assert!(!first.is_still_held().await.expect("check"));
    assert!(!second.is_still_held().await.expect("check"));
    assert!(
        !first.release().await.expect("release"),
        "it was no longer ours"
    );
    drop(second);
}

/// A writer lets go while a reader, then a writer, wait for the name: one of
/// them must have it at once. Were the reader only woken, it would find the
/// writer queued behind it and wait behind that writer in turn, on a name
/// nobody holds, and both would sleep out their whole wait.
#[tokio::test(start_paused = true)]
async fn a_free_name_is_not_left_idle_while_a_writer_and_a_reader_wait() {
    let locks = LockManager::memory();
    let (ttl, wait) = (Duration::from_secs(30), Duration::from_secs(20));
    let holder = locks
        .lock("k", ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let started = tokio::time::Instant::now();
    let reader = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks.lock("k", ttl).wait_for(wait).read().acquire().await;
            (guard.expect("acquire").is_some(), started.elapsed())
        }
    });
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks.lock("k", ttl).wait_for(wait).acquire().await;
            (guard.expect("acquire").is_some(), started.elapsed())
        }
    });
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert!(holder.release().await.expect("release"));
    let (read, read_at) = reader.await.expect("reader task");
    let (wrote, wrote_at) = writer.await.expect("writer task");
    assert!(read && wrote, "both get the name within their wait");
    assert!(
        wrote_at < Duration::from_secs(1),
        "the writer got the name after {wrote_at:?} (the reader after {read_at:?}), though it was free from the start"
    );
}

/// A writer that gives up waiting lets in the reader it stood in front of.
/// A writer, then a reader, wait while an old writer holds the name for
/// 30 s. The old writer lets go before a handover is due (the clock is
/// paused), so the release wakes the waiting writer rather than handing it
/// the name, and a reader that never waited gets in first: no writer is
/// queued. The writer, held off by that reader, queues again, behind the
/// waiting reader this time, and its 2 s wait runs out. The waiting reader
/// must then be let in, not left queued until the old writer's TTL: only
/// readers hold the name. (The networked stores' version of this, a reader
/// of another process getting in first, is in their own tests.)
#[tokio::test(start_paused = true)]
async fn a_writer_that_gives_up_lets_in_the_reader_it_stood_in_front_of() {
    let locks = LockManager::memory();
    let old_ttl = Duration::from_secs(30);
    let old_writer = locks
        .lock("k", old_ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = tokio::spawn({
        let lock = locks.lock("k", LONG).wait_for(Duration::from_secs(2));
        async move {
            let guard = lock.acquire().await.expect("acquire");
            guard.is_some()
        }
    });
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    let reader = tokio::spawn({
        let lock = locks.lock("k", LONG).read().wait_for(LONG);
        async move { lock.acquire().await.expect("acquire") }
    });
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert!(old_writer.release().await.expect("release"));
    let other_reader = locks
        .lock("k", old_ttl)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("the release woke the writer and handed it nothing: a reader gets in first");
    let got = writer.await.expect("writer task");
    assert!(!got, "the other reader holds the name");
    let admitted = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the reader is still waiting 5 s after the writer in front of it gave up (the \
                 old writer's TTL was 30 s)"
            )
        })
        .expect("reader task")
        .expect("only readers hold the name: the reader gets in");
    drop((admitted, other_reader));
}

/// Readers wait behind a short writer whose release lands at a varying
/// moment around the end of their naps, on four threads: every reader's
/// guard must stand for a lease the store has. (A lease handed to a
/// reader's last round, unseen, once took its new round's lease with it as
/// it was given back, and a writer then got in beside that reader.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_reader_guard_stands_for_a_lease_when_handovers_race_retries() {
    let locks = LockManager::memory();
    let missing = Arc::new(AtomicUsize::new(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut rounds = 0u64;
    while std::time::Instant::now() < deadline {
        rounds += 1;
        let writer = locks
            .lock("k", Duration::from_millis(3))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let readers: Vec<_> = (0..12)
            .map(|_| {
                let (locks, missing) = (locks.clone(), Arc::clone(&missing));
                tokio::spawn(async move {
                    let guard = locks
                        .lock("k", Duration::from_secs(10))
                        .wait_for(Duration::from_secs(2))
                        .read()
                        .acquire()
                        .await
                        .expect("acquire")
                        .expect("a reader gets in within its wait");
                    if !guard.is_still_held().await.expect("check") {
                        missing.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.expect("release");
                })
            })
            .collect();
        let jitter = Duration::from_micros(2500 + (rounds * 7919 % 2500));
        let writer = tokio::task::spawn_blocking(move || {
            let until = std::time::Instant::now() + jitter;
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            writer
        })
        .await
        .expect("releasing thread");
        let _released = writer.release().await.expect("release");
        for reader in readers {
            reader.await.expect("reader task");
        }
    }
    let missing = missing.load(Ordering::SeqCst);
    eprintln!("{rounds} rounds, {missing} reader guards without a lease");
    assert_eq!(
        missing, 0,
        "reader guards without a lease in {rounds} rounds"
    );
}
