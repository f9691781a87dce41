//! Reading the holder of a name on etcd while its holder renews: every
//! renewal moves the key onto a new etcd lease and revokes the old one, so
//! a read of the key and then of its lease can find the lease already gone.
//! A holder renewing is live all along, and must be read as live at every
//! read: `holder()`, `Election::leader()` and `is_still_held()` all rest
//! on it.
//!
//! Time bounds are hang guards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{EtcdStore, LockGuard, LockManager};
use lock_tests::etcd;

/// How many reads each test makes while the holder renews.
const READS: usize = 3_000;

/// Far above what the reads take: a hang guard.
const HANG_GUARD: Duration = Duration::from_secs(180);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

async fn manager(what: &str) -> Option<LockManager> {
    let endpoints = etcd::etcd_endpoints()?;
    let store = EtcdStore::connect(&endpoints).await.expect("connect");
    Some(LockManager::new(store).with_prefix(unique(what)))
}

/// Extends `guard` to `ttl` over and over, as fast as the store answers,
/// until `stop` is set; returns how many extends it made.
fn renew_until(
    guard: Arc<LockGuard>,
    ttl: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut extends = 0;
        while !stop.load(Ordering::SeqCst) {
            assert!(
                guard.extend(ttl).await.expect("extend"),
                "the holder's lease is still its own"
            );
            extends += 1;
        }
        extends
    })
}

/// A writer renewing as fast as it can is its name's holder at each of
/// thousands of reads, never "nobody": a read that found the key, then
/// its lease revoked by the renewal that had just moved the key, reads the
/// key again. An election's observers and `leader()` read the holder so,
/// and would say nobody leads while the leader renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_renewing_as_fast_as_it_can_is_read_as_the_holder_every_time() {
    let Some(locks) = manager("renewing-writer").await else {
        return;
    };
    let ttl = locks.store().min_ttl().max(Duration::from_secs(10));
    let lock = locks.lock("renewed", ttl);
    let guard = Arc::new(lock.acquire().await.expect("acquire").expect("free"));
    let stop = Arc::new(AtomicBool::new(false));
    let renewing = renew_until(Arc::clone(&guard), ttl, Arc::clone(&stop));
    let nobody = AtomicUsize::new(0);
    let others = AtomicUsize::new(0);
    tokio::time::timeout(HANG_GUARD, async {
        for _ in 0..READS {
            match lock.holder().await.expect("holder") {
                None => nobody.fetch_add(1, Ordering::Relaxed),
                Some(holder) if holder.token() != guard.token() => {
                    others.fetch_add(1, Ordering::Relaxed)
                }
                Some(_) => 0,
            };
        }
    })
    .await
    .expect("the reads end within the hang guard");
    stop.store(true, Ordering::SeqCst);
    let extends = renewing.await.expect("the renewing task");
    let (nobody, others) = (nobody.into_inner(), others.into_inner());
    eprintln!("{READS} holder reads during {extends} renewals: {nobody} read nobody");
    assert!(
        extends >= 10,
        "the holder renewed while it was read ({extends} renewals): otherwise nothing was tested"
    );
    assert_eq!(
        nobody, 0,
        "{nobody} of {READS} reads said nobody holds the name while its holder renewed it \
         {extends} times"
    );
    assert_eq!(others, 0, "{others} reads named another holder");
    let guard = Arc::into_inner(guard).expect("the renewing task is done with the guard");
    assert!(
        guard.release().await.expect("release"),
        "still held to the end"
    );
}

/// A reader renewing as fast as it can is still held at each of
/// thousands of checks, and is its name's holder at each read: its own key
/// moves onto a new lease at each renewal, as a writer's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_renewing_as_fast_as_it_can_is_still_held_at_every_check() {
    let Some(locks) = manager("renewing-reader").await else {
        return;
    };
    let ttl = locks.store().min_ttl().max(Duration::from_secs(10));
    let lock = locks.lock("renewed", ttl).read();
    let guard = Arc::new(lock.acquire().await.expect("acquire").expect("free"));
    let stop = Arc::new(AtomicBool::new(false));
    let renewing = renew_until(Arc::clone(&guard), ttl, Arc::clone(&stop));
    let (mut not_held, mut nobody) = (0, 0);
    tokio::time::timeout(HANG_GUARD, async {
        for read in 0..READS {
            if read % 2 == 0 {
                not_held += usize::from(!guard.is_still_held().await.expect("check"));
            } else {
                nobody += usize::from(lock.holder().await.expect("holder").is_none());
            }
        }
    })
    .await
    .expect("the reads end within the hang guard");
    stop.store(true, Ordering::SeqCst);
    let extends = renewing.await.expect("the renewing task");
    eprintln!(
        "{READS} checks and reads during {extends} renewals: {not_held} said not held, \
         {nobody} read nobody"
    );
    assert!(
        extends >= 10,
        "the reader renewed while it was read ({extends} renewals): otherwise nothing was tested"
    );
    assert_eq!(
        not_held,
        0,
        "{not_held} of {} checks said the reader no longer held its name while it renewed it",
        READS / 2
    );
    assert_eq!(
        nobody,
        0,
        "{nobody} of {} reads said nobody holds the name while its reader renewed it",
        READS / 2
    );
    let guard = Arc::into_inner(guard).expect("the renewing task is done with the guard");
    assert!(
        guard.release().await.expect("release"),
        "still held to the end"
    );
}
