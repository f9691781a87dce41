//! The read side of a name through the runtime, beyond the store contract:
//! re-entry across the two sides, and what a read lock reports about its
//! holders.

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
