//! `EtcdStore` at its edges, each test on an etcd member of its own: an
//! authentication token that expires, a watch stream that breaks or has
//! watches cancelled under waiters, and acquires and extends cut off at
//! every point while they hold an etcd lease.
//!
//! Time bounds are hang guards, or the behaviour under test (a TTL, a wait).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, Permission};
use lock_core::{EtcdConfig, EtcdStore, LockGuard, LockManager, LockStore};
use lock_test_kit::Instrumented;
use lock_tests::etcd::EtcdCluster;
use tokio::time::Instant;

const ROOT_PASSWORD: &str = "root-secret";
const USER: &str = "locks";
const PASSWORD: &str = "locks-secret";

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// Polls `check` every 100 ms until it is true or `within` has passed.
async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A member with authentication on: a root user, and `USER` allowed to read
/// and write every key. Simple tokens (etcd 3.4's default) live
/// `token_ttl` seconds after their last use.
async fn auth_member(token_ttl: u32) -> Option<EtcdCluster> {
    let ttl = token_ttl.to_string();
    let cluster = EtcdCluster::start_with_or_skip(
        1,
        &["--auth-token", "simple", "--auth-token-ttl", ttl.as_str()],
    )?;
    let mut client = Client::connect(cluster.urls(), None)
        .await
        .expect("connect to the new member");
    client
        .user_add("root", ROOT_PASSWORD, None)
        .await
        .expect("add root");
    let _ = client.role_add("root").await;
    client
        .user_grant_role("root", "root")
        .await
        .expect("root role");
    client.role_add(USER).await.expect("add the store's role");
    client
        .role_grant_permission(USER, Permission::read_write("").with_all_keys())
        .await
        .expect("grant every key");
    client
        .user_add(USER, PASSWORD, None)
        .await
        .expect("add the store's user");
    client
        .user_grant_role(USER, USER)
        .await
        .expect("the store's role");
    client.auth_enable().await.expect("enable authentication");
    Some(cluster)
}

async fn auth_store(cluster: &EtcdCluster) -> EtcdStore {
    let config = EtcdConfig::new()
        .timeout(Duration::from_secs(3))
        .user(USER, PASSWORD);
    EtcdStore::connect_with(&cluster.urls(), config)
        .await
        .expect("connect with the store's user")
}

/// etcd forgets a simple token once it has gone unused for
/// `--auth-token-ttl`. A store that never authenticates again fails every
/// call after an idle spell: new locks are refused and held ones cannot be
/// extended, so renewing holders lose their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_store_keeps_working_after_its_token_expires() {
    let Some(cluster) = auth_member(5).await else {
        return;
    };
    let locks = LockManager::new(auth_store(&cluster).await).with_prefix(unique("auth"));
    let first = locks
        .lock("first", Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire with a fresh token")
        .expect("the name is free");
    // Idle past the token's TTL: no call from this store uses it.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let second = locks
        .lock("second", Duration::from_secs(30))
        .acquire()
        .await
        .expect("an acquire after the token expired must authenticate again, not fail");
    assert!(second.is_some(), "the second name is free");
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        first
            .extend(Duration::from_secs(30))
            .await
            .expect("an extend after the token expired must authenticate again, not fail"),
        "the first lease is still ours"
    );
    assert!(
        first.release().await.expect("release"),
        "released our own lease"
    );
    drop(second);
}

/// A waiter's watch is created on the store's one watch stream, which
/// carries the token it was opened with. After that token expires etcd
/// refuses new watches on the stream (etcd 3.4 cancels them under watch ID
/// -1, "invalid auth token"): a store that
/// then wakes its waiters at once spins them through attempts (each two
/// raft writes) for as long as they wait, and one that does not reopen the
/// stream never wakes them on a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_after_the_watch_stream_token_expired() {
    let Some(cluster) = auth_member(3).await else {
        return;
    };
    let prefix = unique("auth-watch");
    let holder = LockManager::new(auth_store(&cluster).await).with_prefix(prefix.clone());
    let counted = Instrumented::new(Arc::new(auth_store(&cluster).await));
    let waiter = LockManager::new(counted.clone()).with_prefix(prefix);
    // Opens the waiter store's watch stream while its token is fresh.
    let early = holder
        .lock("early", Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let none = waiter
        .lock("early", Duration::from_secs(60))
        .wait_for(Duration::from_millis(500))
        .acquire()
        .await
        .expect("a wait that ends contended");
    assert!(none.is_none(), "held by the holder");
    // Idle well past the token's TTL (the holder's too).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held = holder
        .lock("late", Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire after the token expired")
        .expect("free");
    let before = counted.acquires();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("late", Duration::from_secs(60))
            .wait_for(Duration::from_secs(40))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = counted.acquires() - before;
    assert!(
        spent <= 2,
        "a waiter whose watch was refused must not spin through attempts: {spent} in 3 s"
    );
    assert!(held.release().await.expect("release"), "ours to release");
    let released = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("hang guard: the waiter's wait ends")
        .expect("the waiter task")
        .expect("the wait ends without an error");
    assert!(got.is_some(), "the waiter gets the released lock");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the release woke the waiter (its watch works), instead of its 60 s nap ending: {:?}",
        released.elapsed()
    );
    drop(early);
}

/// Holds `name` on `locks` and starts `count` waiters for it, each waiting
/// up to `wait`; returns the guard and the waiters once every waiter has
/// made its first attempt (counted by `counted`).
async fn waiters_for(
    holder: &LockManager,
    waiters: &LockManager,
    counted: &Instrumented,
    name: &str,
    count: usize,
    wait: Duration,
) -> (
    LockGuard,
    Vec<tokio::task::JoinHandle<lock_core::Result<bool>>>,
) {
    let held = holder
        .lock(name, Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let before = counted.acquires();
    let tasks = (0..count)
        .map(|_| {
            let lock = waiters.lock(name, Duration::from_secs(60)).wait_for(wait);
            tokio::spawn(async move {
                let guard = lock.acquire().await?;
                Ok(guard.is_some())
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(20), || async {
            counted.acquires() >= before + count
        })
        .await,
        "hang guard: every waiter makes its first attempt"
    );
    (held, tasks)
}

/// A waiter that gives up has its key's watch cancelled (within 5 s). That
/// cancellation is no news for the waiters of other keys: waking them all
/// sends each into an attempt (two raft writes) every few seconds, for
/// nothing, however many waiters there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaving_does_not_wake_the_waiters_of_other_keys() {
    let Some(cluster) = EtcdCluster::start_or_skip(1) else {
        return;
    };
    let store = EtcdStore::connect(&cluster.urls()).await.expect("connect");
    let prefix = unique("leaving");
    let holder = LockManager::new(EtcdStore::connect(&cluster.urls()).await.expect("connect"))
        .with_prefix(prefix.clone());
    let on_a = Instrumented::new(Arc::new(store.clone()));
    let waiters_a = LockManager::new(on_a.clone()).with_prefix(prefix.clone());
    let (held_a, tasks) =
        waiters_for(&holder, &waiters_a, &on_a, "a", 50, Duration::from_secs(60)).await;
    let held_b = holder
        .lock("b", Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let before = on_a.acquires();
    let gave_up = LockManager::new(store.clone())
        .with_prefix(prefix)
        .lock("b", Duration::from_secs(60))
        .wait_for(Duration::from_secs(1))
        .acquire()
        .await
        .expect("a wait that ends contended");
    assert!(gave_up.is_none(), "b is held");
    // Two rounds of the watch tidying at least.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let spent = on_a.acquires() - before;
    assert_eq!(
        spent, 0,
        "nothing happened to a: its 50 waiters must not be woken into attempts"
    );
    assert!(
        tasks.iter().all(|task| !task.is_finished()),
        "every waiter on a still waits"
    );
    for task in &tasks {
        task.abort();
    }
    drop((held_a, held_b));
}

/// An etcd member restarts (a deploy, a crash) while 20 waiters wait for a
/// held lock. The watch stream breaks; waking the waiters then sends them
/// into attempts that fail during the outage, ending their waits in errors
/// although the lock they wait for is still held. They must keep waiting,
/// and the watch, back after the restart, must still deliver the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_keep_waiting_through_a_restart_of_the_member_and_a_release_still_wakes_one() {
    let Some(mut cluster) = EtcdCluster::start_with_or_skip(1, &[]) else {
        return;
    };
    let config = EtcdConfig::new().timeout(Duration::from_secs(2));
    let urls = cluster.urls();
    let connect = || EtcdStore::connect_with(&urls, config.clone());
    let prefix = unique("restart");
    let holder_store = connect().await.expect("connect");
    let holder = LockManager::new(holder_store.clone()).with_prefix(prefix.clone());
    let counted = Instrumented::new(Arc::new(connect().await.expect("connect")));
    let waiters = LockManager::new(counted.clone()).with_prefix(prefix);
    let (held, mut tasks) = waiters_for(
        &holder,
        &waiters,
        &counted,
        "a",
        20,
        Duration::from_secs(120),
    )
    .await;
    let before = counted.acquires();
    cluster.members[0].kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster
        .restart(0)
        .expect("restart the member with its data");
    // The watch stream is opened again after its pause.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let spent = counted.acquires() - before;
    assert!(
        spent <= 2,
        "the restart released nothing: its waiters must not be woken into attempts ({spent})"
    );
    let ended: Vec<_> = tasks.iter().filter(|task| task.is_finished()).collect();
    assert!(
        ended.is_empty(),
        "{} waits ended during the restart instead of waiting on",
        ended.len()
    );
    // The holder's own connection comes back on its next call.
    let mut released = false;
    for _ in 0..20 {
        match holder_store.release(held.key(), held.token()).await {
            Ok(true) => {
                released = true;
                break;
            }
            Ok(false) => panic!("the lease survived the restart and is ours"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    assert!(released, "the holder releases after the restart");
    held.keep();
    let woken = Instant::now();
    let first = loop {
        if let Some(index) = tasks.iter().position(|task| task.is_finished()) {
            break tasks.swap_remove(index);
        }
        assert!(
            woken.elapsed() < Duration::from_secs(15),
            "the release after the restart must wake a waiter (their naps last a minute)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let outcome = first.await.expect("the waiter task");
    assert!(
        matches!(outcome, Ok(true)),
        "the woken waiter holds the lock: {outcome:?}"
    );
    for task in &tasks {
        task.abort();
    }
}

/// Every lease the cluster has now.
async fn leases(client: &mut Client) -> Vec<i64> {
    client
        .leases()
        .await
        .expect("list the cluster's leases")
        .leases()
        .iter()
        .map(|lease| lease.id())
        .collect()
}

/// Runs `future` for at most `polls` polls; `None` when cut off.
async fn cut_after<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut left = polls;
    std::future::poll_fn(move |cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending if left <= 1 => Poll::Ready(None),
        Poll::Pending => {
            left -= 1;
            Poll::Pending
        }
    })
    .await
}

/// Cuts `future` off at step `step` of a run: after `step + 1` polls for
/// the first 30 steps, then at growing fractions of `full` (how long the
/// same call takes uncut here), from nothing to a little past it. Fixed
/// time bounds would cut a call on a slow disk early and one on a fast disk
/// late, or not at all.
async fn bound<F: Future>(step: usize, full: Duration, future: F) -> Option<F::Output> {
    if step < 30 {
        cut_after(future, step + 1).await
    } else {
        let after = full.mul_f64((step - 30) as f64 / 25.0);
        tokio::time::timeout(after, future).await.ok()
    }
}

/// The shortest of three uncut runs of `call`.
async fn shortest<F, Fut>(mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future,
{
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        call().await;
        best = best.min(started.elapsed());
    }
    best
}

/// Each acquire and extend grants an etcd lease before its transaction. A
/// call cut off after that grant (a caller's timeout, a lost `select!`, a
/// reply lost in transit) must not leave the lease in the cluster for its
/// whole TTL: thousands of cancelled calls would leave thousands of leases,
/// each kept and checked by every member. Here acquires of free and of held
/// names, and extends, are cut off after each number of polls and at
/// growing fractions of the time the same call takes uncut; afterwards
/// (the give-backs run in the background, and a grant cut off in flight is
/// blocked by a lease that lives the store's timeout) the cluster has
/// exactly the leases of the guards still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_and_extends_leave_no_etcd_lease_behind() {
    let Some(cluster) = EtcdCluster::start_or_skip(1) else {
        return;
    };
    let mut admin = Client::connect(cluster.urls(), None::<ConnectOptions>)
        .await
        .expect("connect");
    let store = EtcdStore::connect(&cluster.urls()).await.expect("connect");
    let locks = LockManager::new(store.clone()).with_prefix(unique("cut"));
    let ttl = Duration::from_secs(120);
    let held = locks
        .lock("held", ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let full_acquire = shortest(|| async {
        let name = unique("uncut");
        let guard = locks.lock(name, ttl).acquire().await.expect("acquire");
        let guard = guard.expect("a fresh name is free");
        assert!(guard.release().await.expect("release"), "ours");
    })
    .await;
    let full_extend = shortest(|| async {
        assert!(held.extend(ttl).await.expect("extend"), "ours");
    })
    .await;
    let mut live: Vec<LockGuard> = Vec::new();
    let mut cut = 0;
    for step in 0..60_usize {
        let free = locks.lock(format!("free-{step}"), ttl);
        match bound(step, full_acquire, free.acquire()).await {
            Some(Ok(Some(guard))) => live.push(guard),
            Some(Ok(None)) => panic!("nobody else takes free-{step}"),
            Some(Err(e)) => panic!("acquire: {e}"),
            None => cut += 1,
        }
        let contended = locks.lock("held", ttl);
        match bound(step, full_acquire, contended.acquire()).await {
            Some(Ok(None)) | None => {}
            Some(outcome) => panic!("held is held: {outcome:?}"),
        }
        if bound(step, full_extend, held.extend(ttl)).await.is_none() {
            cut += 1;
        }
    }
    assert!(cut > 20, "most calls were cut off somewhere: {cut}");
    let expected = live.len() + 1;
    // The give-backs run in the background: give them time.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (settled, left) = loop {
        let left = leases(&mut admin).await;
        if left.len() == expected || Instant::now() >= deadline {
            break (left.len() == expected, left);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        settled,
        "the cluster keeps {} leases; the {expected} held guards account for {expected}",
        left.len()
    );
    assert!(
        held.is_still_held().await.expect("check"),
        "cut-off extends never cost the holder its lease"
    );
    for guard in live {
        assert!(guard.release().await.expect("release"), "ours");
    }
    assert!(held.release().await.expect("release"), "ours");
    assert!(
        eventually(Duration::from_secs(10), || async {
            leases(
                &mut Client::connect(cluster.urls(), None)
                    .await
                    .expect("connect"),
            )
            .await
            .is_empty()
        })
        .await,
        "releases hand every lease back"
    );
    let _ = store.name();
}

/// A release from another process reaches this one only through its watch,
/// which wakes one of its waiters; cut off before its next attempt is
/// answered, that waiter must pass the wake on to the other. (With the
/// holder in this process, the release also wakes a waiter at once, and
/// two wakes hide a lost one: the contract case alone cannot tell.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_off_after_a_watched_release_passes_the_wake_on() {
    let (Some(holders), Some(waiters)) = (
        lock_tests::etcd::etcd_manager().await,
        lock_tests::etcd::etcd_manager().await,
    ) else {
        return;
    };
    lock_test_kit::contract::a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on(
        holders, waiters,
    )
    .await;
}
