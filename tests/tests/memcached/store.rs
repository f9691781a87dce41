//! `MemcachedStore` on a real memcached: what the contract suite cannot show
//! from inside one process — other processes, a killed holder, a memcached
//! that dies and comes back, awkward names, and whole-second TTLs.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::time::Duration;

use lock_core::{Error, LockManager, MemcachedConfig, MemcachedStore};
use lock_tests::children::{self, Children, read_line};
use lock_tests::memcached;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

async fn manager(url: &str, prefix: &str) -> LockManager {
    LockManager::new(MemcachedStore::connect(url).await.expect("connect")).with_prefix(prefix)
}

/// The core promise across processes: 4 processes x 8 tasks x 25 rounds of
/// read-yield-write on a counter in a file, each under one lock in
/// memcached. Any overlap of two holders loses an update. (Waiters in other
/// processes are not told of releases, so the lock's TTL is short: they
/// nap at most that long.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_contending_for_one_lock_lose_no_update() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let total = children::file_increments_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &url,
        &unique("contend"),
        &[],
        (4, 8, 25),
        2000,
    );
    assert_eq!(total, 800, "no update lost across 4 processes");
}

/// A holder killed with SIGKILL never releases: the lease must still end
/// at its TTL (at most a second later, memcached's clock tick), so the lock
/// is not held forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_once_its_ttl_passes() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let prefix = unique("killed");
    let mut holder = Children(vec![children::spawn(
        env!("CARGO_BIN_EXE_lock-child"),
        &["hold", &url, &prefix, "job", "2000"],
    )]);
    assert_eq!(read_line(&mut holder.0[0], HANG_GUARD), "held");
    holder.0[0].kill().expect("SIGKILL");
    let _ = holder.0[0].wait();
    let killed_at = Instant::now();
    let locks = manager(&url, &prefix).await;
    let lock = locks.lock("job", LONG);
    assert!(
        lock.is_held().await.expect("is_held"),
        "still held right after the holder died"
    );
    let got = tokio::time::timeout(
        HANG_GUARD,
        lock.clone().wait_for(Duration::from_secs(30)).acquire(),
    )
    .await
    .expect("the waiter gets it once the TTL passes")
    .expect("acquire");
    assert!(
        got.is_some(),
        "the lock is free after the dead holder's TTL"
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "a 2 s lease ends within 3 s of being taken (plus a nap): {:?}",
        killed_at.elapsed()
    );
}

/// The TTL in whole seconds, honestly: a 1500 ms lease is still held 1.4 s
/// after it was taken (never shorter than asked), and free again within 4 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1500_ms_lease_is_held_at_1400_ms_and_free_within_4_s() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let locks = manager(&url, &unique("seconds")).await;
    let lock = locks.lock("short", Duration::from_millis(1500));
    let taken = Instant::now();
    lock.acquire().await.expect("acquire").expect("free").keep();
    tokio::time::sleep_until(taken + Duration::from_millis(1400)).await;
    assert!(
        lock.is_held().await.expect("is_held"),
        "held 1.4 s after it was taken"
    );
    let free = tokio::time::timeout(Duration::from_secs(4), async {
        while lock.is_held().await.expect("is_held") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        free.is_ok(),
        "free again within 4 s (it took more than {:?})",
        taken.elapsed()
    );
}

/// Memcached dies and comes back empty: calls fail within the timeout while
/// it is down (never hang), and the same store works again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memcached_restart_gives_errors_during_the_outage_and_the_same_store_recovers() {
    let Some(mut server) = memcached::start() else {
        return;
    };
    let config = MemcachedConfig::new().timeout(Duration::from_secs(1));
    let store = MemcachedStore::connect_with(&memcached::url(&server), config)
        .await
        .expect("connect");
    let locks = LockManager::new(store);
    let guard = locks
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    guard.release().await.expect("release");
    server.kill();
    let started = Instant::now();
    let down = locks.lock("job", LONG).acquire().await;
    assert!(
        matches!(down, Err(Error::Store { .. })),
        "an error while memcached is down: {down:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "within the timeout, not a hang: {:?}",
        started.elapsed()
    );
    server.restart(memcached::ready).expect("restart");
    let back = tokio::time::timeout(HANG_GUARD, async {
        loop {
            if let Ok(Some(guard)) = locks.lock("job", LONG).acquire().await {
                return guard;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the same store works again once memcached is back");
    assert!(back.release().await.expect("release"), "and releases");
}

/// Every name that works on Redis works here: spaces, newlines, unicode,
/// braces and a kilobyte of text (hashed into a key memcached accepts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_names_lock_and_release() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let locks = manager(&url, &unique("awkward")).await;
    let long = format!(
        "a name with a space,\na newline and {}",
        "text ".repeat(205)
    );
    assert!(long.len() > 1024, "a kilobyte of text");
    for name in [
        "with space",
        "with\nnewline\r\n",
        "ünïcödé ✓",
        "{braces}}{",
        "%25 and %7D",
        long.as_str(),
    ] {
        let lock = locks.lock(name, LONG);
        let guard = lock
            .acquire()
            .await
            .expect("acquire")
            .unwrap_or_else(|| panic!("{name:?} is free"));
        let holder = lock.holder().await.expect("holder").expect("held");
        assert_eq!(holder.token(), guard.token(), "{name:?}: the holder is us");
        assert!(
            lock.acquire().await.expect("acquire").is_none(),
            "{name:?}: held means held"
        );
        assert!(
            guard.release().await.expect("release"),
            "{name:?}: released"
        );
        assert!(!lock.is_held().await.expect("is_held"), "{name:?}: free");
    }
    // Two long names that differ only at the end are two locks.
    let first = locks
        .lock(format!("{long}1"), LONG)
        .acquire()
        .await
        .expect("acquire");
    let second = locks
        .lock(format!("{long}2"), LONG)
        .acquire()
        .await
        .expect("acquire");
    assert!(first.is_some() && second.is_some(), "distinct long names");
}

/// A memcached store is shared across processes, offers no fencing (an
/// evicted counter could start again), refuses what it cannot keep, and
/// never shows credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memcached_store_is_shared_refuses_fencing_and_long_ttls_and_hides_credentials() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let store = MemcachedStore::connect(&url).await.expect("connect");
    let shown = format!("{store:?}");
    assert!(
        shown.contains("127.0.0.1"),
        "Debug shows the server: {shown}"
    );
    let locks = LockManager::new(store).with_prefix(unique("shared"));
    assert!(
        locks.is_shared(),
        "visible to every process that reaches it"
    );
    let fenced = locks.lock("fenced", LONG).fenced().acquire().await;
    assert!(
        matches!(fenced, Err(Error::FencingUnsupported { .. })),
        "no fencing: {fenced:?}"
    );
    let month = locks
        .lock("long", Duration::from_secs(31 * 24 * 3600))
        .acquire()
        .await;
    assert!(
        matches!(month, Err(Error::InvalidTtl { .. })),
        "more than 30 days is refused, not read as a date: {month:?}"
    );
    let with_password = MemcachedStore::connect("memcache://user:hunter2@127.0.0.1:1").await;
    let message = with_password
        .expect_err("credentials refused")
        .chain()
        .to_string();
    assert!(!message.contains("hunter2"), "never shown: {message}");
    assert!(message.contains("authentication"), "says why: {message}");
}

/// An acquire that times out may still land: its request sits in a stalled
/// network and reaches the server later. The give-back that follows the
/// failed acquire fails too while the network is stalled (on memcached it
/// is two calls, a read of the item's CAS and a delete on it). It must be
/// tried again until the store answers, or the lease the late acquire
/// wrote is stranded for its whole TTL (60 s here) with nobody to release
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_fails_is_retried_until_the_store_answers() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let upstream = url.trim_start_matches("memcache://").to_owned();
    let proxy = lock_tests::proxy::Proxy::start(&upstream)
        .await
        .expect("proxy");
    let prefix = unique("give-back-retry");
    let slow = LockManager::new(
        MemcachedStore::connect_with(
            &proxy.url("memcache"),
            MemcachedConfig::new().timeout(Duration::from_millis(500)),
        )
        .await
        .expect("connect through the proxy"),
    )
    .with_prefix(prefix.clone());
    let direct = manager(&url, &prefix).await;

    proxy.stall();
    let acquired = slow.lock("job", LONG).acquire().await;
    assert!(
        acquired.is_err(),
        "no answer within 500 ms: the acquire fails ({acquired:?})"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.resume();
    let resumed = Instant::now();
    // The stalled acquire lands now; the give-back must follow it.
    let lock = direct.lock("job", LONG);
    loop {
        let holder = lock.holder().await.expect("holder");
        if holder.is_none() && resumed.elapsed() > Duration::from_secs(1) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(10),
            "the lease the timed-out acquire took is still held {:?} after the \
             network came back ({holder:?}): its give-back was not retried",
            resumed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `timeout(Duration::MAX)` is how a user asks for no time bound: every
/// call must work, not panic adding it to the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_no_time_bound_works_instead_of_panicking() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    let config = MemcachedConfig::new().timeout(Duration::MAX);
    let store = MemcachedStore::connect_with(&url, config)
        .await
        .expect("connect with no time bound");
    lock_test_kit::contract::every_call_works_without_a_time_bound(LockManager::new(store)).await;
}

/// A guard dropped as `#[tokio::main]` returns (`let _guard = ...` in a cron
/// binary's `main`) is given back before the process exits, under both
/// flavors of runtime: the next run must not find the lock held for the
/// rest of its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_tokio_main_returns_is_given_back_before_the_process_exits() {
    let Some(url) = memcached::memcached_url() else {
        return;
    };
    children::main_returning_with_a_guard_gives_it_back(
        env!("CARGO_BIN_EXE_exit-child"),
        &url,
        &manager(&url, "").await,
        &[],
        HANG_GUARD,
    )
    .await;
}
