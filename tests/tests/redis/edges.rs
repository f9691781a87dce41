//! The promises at the edges, on Redis: futures cut off mid-request, a
//! holder whose connection stalls, a server that drops subscriptions, a slow
//! server and a runtime shutting down.
//!
//! Each test reproduces a way the promise once broke; time bounds are hang
//! guards unless the bound itself is the behaviour under test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Error, LockManager, OnLost, RedisConfig, RedisStore};
use lock_test_kit::Instrumented;
use lock_test_kit::cancellation::{cut_lock_futures_at_random_points, still_held};
use lock_tests::harness::{self, RedisServer};
use lock_tests::logs::Captured;
use lock_tests::proxy::Proxy;
use tokio::time::Instant;

/// A TTL no test outlives.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound on what should happen promptly: a hang guard.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// How late a timer may fire on a busy two-core machine and still count as
/// "at" its deadline.
const SCHEDULING_MARGIN: Duration = Duration::from_millis(50);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// Every Redis key under `prefix` that is a lease (not a waiters marker or a
/// fencing counter), read with SCAN in batches, never KEYS.
async fn lease_keys_under(url: &str, prefix: &str) -> Vec<String> {
    let mut connection = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{{{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .expect("SCAN");
        found.extend(keys.into_iter().filter(|key| key.ends_with('}')));
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

/// Asking Redis itself, not the lock API: after thousands of acquires, runs
/// and waiting acquires cut off at random points (some after their `SET NX
/// PX` reached the server, before its reply was read), no lease key is left
/// under the prefix once the give-backs land, far inside the 10-minute TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_futures_cut_off_mid_request_leave_no_lease_key_in_redis() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let store = RedisStore::connect(&url).await.expect("connect");
    let prefix = unique("cut");
    let locks = LockManager::new(store).with_prefix(prefix.clone());
    let (names, cuts) = cut_lock_futures_at_random_points(&locks, 1500, 3).await;
    assert!(cuts.cut > 100, "futures were cut off: {cuts:?}");
    let held = still_held(&locks, &names).await;
    assert!(
        held.is_empty(),
        "{} names still held by leases nobody owns ({cuts:?}): {held:?}",
        held.len()
    );
    let keys = lease_keys_under(&url, &prefix).await;
    assert!(keys.is_empty(), "lease keys left in Redis: {keys:?}");
}

/// `host:port` of a `redis://host:port[/db]` URL, for the proxy's upstream.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Records when it is dropped: the moment a cancelled body stopped.
struct StopClock(Arc<Mutex<Option<Instant>>>);

impl Drop for StopClock {
    fn drop(&mut self) {
        *self.0.lock().expect("unpoisoned") = Some(Instant::now());
    }
}

/// Holder A's connection stalls half a second in (a proxy stops forwarding
/// its traffic), with `ttl` 1 s, `renew` and `on_lost = cancel`; B waits on
/// a healthy connection. A's renewal is stuck in flight, so nothing but the
/// lease's local deadline can stop A's work, and it must: by that deadline
/// (plus a scheduling margin), and before B gets the lock. Before the fix
/// A's work ran on until the stalled renewal timed out, two seconds after B
/// had the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_renewal_stalls_stops_its_work_by_the_lease_deadline_before_the_next_holder_gets_in()
 {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await.expect("proxy");
    let prefix = unique("stall");
    let config = RedisConfig::new().timeout(Duration::from_secs(3));
    let stalled = LockManager::new(
        RedisStore::connect_with(&proxy.url("redis"), config)
            .await
            .expect("connect through the proxy"),
    )
    .with_prefix(prefix.clone());
    let healthy =
        LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(prefix);
    let ttl = Duration::from_secs(1);
    let stopped = Arc::new(Mutex::new(None));
    let deadline = Arc::new(Mutex::new(None));
    let holder = {
        let lock = stalled.lock("job", ttl).renew().on_lost(OnLost::Cancel);
        let stopped = Arc::clone(&stopped);
        let deadline = Arc::clone(&deadline);
        tokio::spawn(async move {
            lock.run(async move {
                let _clock = StopClock(stopped);
                let lease = lock_core::current().expect("inside locked work");
                loop {
                    *deadline.lock().expect("unpoisoned") = Some(lease.deadline());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                #[allow(unreachable_code)]
                Ok::<_, Error>(())
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiter = {
        let lock = healthy.lock("job", ttl).wait_for(HANG_GUARD);
        tokio::spawn(async move {
            let guard = lock.acquire().await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.stall();
    let (acquired_at, guard) = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("B gets the lock once A's lease runs out")
        .expect("task ran");
    assert!(
        guard.expect("acquire").is_some(),
        "B holds the lock within its wait"
    );
    let out = tokio::time::timeout(HANG_GUARD, holder)
        .await
        .expect("A's run returns")
        .expect("task ran");
    assert!(
        matches!(out, Err(Error::LeaseLost { .. })),
        "A is told its lease was lost: {out:?}"
    );
    proxy.resume();
    let stopped = stopped
        .lock()
        .expect("unpoisoned")
        .expect("A's work was dropped");
    let deadline = deadline
        .lock()
        .expect("unpoisoned")
        .expect("A saw its lease");
    assert!(
        stopped <= deadline + SCHEDULING_MARGIN,
        "A's work stopped {:?} after its lease's local deadline",
        stopped - deadline
    );
    assert!(
        stopped < acquired_at,
        "A's work stopped before B had the lock (B got it {:?} after A stopped... or before: {:?})",
        acquired_at.checked_duration_since(stopped),
        stopped.checked_duration_since(acquired_at)
    );
}

/// The same stall, with `on_lost = continue`: the work is not dropped, but
/// `Lease::lost()` and `is_lost()` must say the lease is gone by its local
/// deadline, not when the stuck renewal finally gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lost_signal_fires_by_the_lease_deadline_while_a_renewal_is_stalled() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await.expect("proxy");
    let config = RedisConfig::new().timeout(Duration::from_secs(3));
    let locks = LockManager::new(
        RedisStore::connect_with(&proxy.url("redis"), config)
            .await
            .expect("connect through the proxy"),
    )
    .with_prefix(unique("stall-signal"));
    let out = tokio::time::timeout(
        HANG_GUARD,
        locks
            .lock("job", Duration::from_secs(1))
            .renew()
            .run(async {
                let lease = lock_core::current().expect("inside locked work");
                tokio::time::sleep(Duration::from_millis(500)).await;
                proxy.stall();
                lease.lost().await;
                let heard = Instant::now();
                Ok::<_, Error>((heard, lease.deadline(), lease.is_lost()))
            }),
    )
    .await
    .expect("the run ends");
    proxy.resume();
    let (heard, deadline, is_lost) = out.expect("run").expect("free");
    assert!(is_lost, "is_lost agrees with lost()");
    assert!(
        heard <= deadline + SCHEDULING_MARGIN,
        "lost() resolved {:?} after the deadline",
        heard - deadline
    );
}

/// A server (here a proxy in front of one) that accepts SUBSCRIBE and drops
/// the connection at once must not be hammered: the subscription backs off
/// across reconnects, not only after failed ones, and the waiters it wakes
/// after each reconnect retry at most once per pause. Before the fix: about
/// 640 reconnects a second, each waking every waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_drops_every_subscription_gets_backed_off_reconnects_not_a_tight_loop() {
    const WAITERS: usize = 20;
    let Some(url) = harness::redis_url() else {
        return;
    };
    // Not "subscribe": the proxy drops any connection whose bytes contain
    // that word, and a key holding it would cut the command connection on
    // every call, counting its reconnects as the subscription's.
    let (proxy, store, waiting, holder) = held_behind_a_proxy(&url, "resub").await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let lock = waiting.lock("held", LONG).wait_for(LONG);
            tokio::spawn(async move { lock.acquire().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let connections = proxy.connections();
    let attempts = store.acquires();
    proxy.drop_subscribers(true);
    proxy.cut_all();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reconnects = proxy.connections() - connections;
    let retries = store.acquires() - attempts;
    proxy.drop_subscribers(false);
    for waiter in &waiters {
        waiter.abort();
    }
    holder.release().await.expect("release");
    // 50 ms doubling to 1 s, plus jitter: about six attempts in 3 s (and one
    // reconnect of the command connection, cut too).
    assert!(
        reconnects <= 15,
        "{reconnects} connections in 3 s: the subscription must back off"
    );
    assert!(
        retries <= WAITERS * (reconnects + 2),
        "{retries} acquire attempts by {WAITERS} waiters over {reconnects} reconnects"
    );
}

/// A proxy in front of the Redis at `url`, a store through it (counting
/// its acquires) with the locks of a prefix of its own (`what`), and the
/// guard of `held` in that prefix, taken directly.
async fn held_behind_a_proxy(
    url: &str,
    what: &str,
) -> (Proxy, Instrumented, LockManager, lock_core::LockGuard) {
    let proxy = Proxy::start(&host_port(url)).await.expect("proxy");
    let prefix = unique(what);
    let store = Instrumented::new(Arc::new(
        RedisStore::connect(&proxy.url("redis"))
            .await
            .expect("connect through the proxy"),
    ));
    let waiting = LockManager::new(store.clone()).with_prefix(prefix.clone());
    let holder = LockManager::new(RedisStore::connect(url).await.expect("connect"))
        .with_prefix(prefix)
        .lock("held", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    (proxy, store, waiting, holder)
}

/// Waiters that come and go while the subscription is down leave a queue of
/// "first waiter of the key" and "last waiter left" changes behind them; the
/// listener, subscribed again to every key waited for now, must take that
/// queue as history, not as work: a waiter that arrives then is woken once
/// by the resubscription, not once per waiter that came and went before it.
/// Before the fix: each queued start subscribed again and woke every waiter
/// of the key (a Sentinel failover's backlog made waiters try 20 to 50
/// times in a 2 s wait, with nothing released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_came_and_went_while_unsubscribed_do_not_wake_the_next_one_again() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let (proxy, store, waiting, holder) = held_behind_a_proxy(&url, "backlog").await;
    // The subscription is dropped as soon as it is made: the listener backs
    // off, and the changes queue up meanwhile.
    proxy.drop_subscribers(true);
    proxy.cut_all();
    let brief = waiting
        .lock("held", LONG)
        .wait_for(Duration::from_millis(1));
    // The first call may meet the command connection cut, and reconnect.
    let mut busy = 0;
    for _ in 0..500 {
        if let Ok(None) = brief.acquire().await {
            busy += 1;
        }
    }
    assert!(busy >= 490, "{busy} of 500 brief waits found the lock held");
    proxy.drop_subscribers(false);
    let attempts = store.acquires();
    let waited = waiting
        .lock("held", LONG)
        .wait_for(Duration::from_secs(3))
        .acquire()
        .await
        .expect("a wait");
    assert!(waited.is_none(), "the holder holds on");
    let tries = store.acquires() - attempts;
    holder.release().await.expect("release");
    // One try, one when the subscription is back and one when the listener
    // starts listening for the key (each wakes the waiter once), one at the
    // deadline, and a margin.
    assert!(
        tries <= 8,
        "{tries} acquire attempts in a 3 s wait with nothing released"
    );
}

/// One deadline bounds a whole call: a script the server has forgotten is
/// reloaded and retried within what is left of `RedisConfig::timeout`, not
/// under a fresh timeout of its own. Here each reply takes 400 ms, so
/// NOSCRIPT, the reload and the retry need 1.2 s against a 1 s bound: the
/// call must fail at the bound. Before the fix it succeeded after 1.2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_reloads_its_script_is_still_bounded_by_one_timeout() {
    let Some((server, proxy, locks)) = behind_a_proxy().await else {
        return;
    };
    let guard = locks
        .lock("slow", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    harness::command(server.port(), &["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    proxy.set_delay(Duration::from_millis(400));
    let started = Instant::now();
    let released = guard.release().await;
    at_the_bound(
        released,
        started,
        "three 400 ms round trips do not fit in 1 s",
    );
}

/// A waiting acquire that finds the lock held sends two requests, the plain
/// `SET` and then the acquire script; both share the acquire's one bound.
/// Here each reply takes 600 ms against a 1 s bound: the acquire must fail
/// at the bound. With a fresh bound per request each would fit, and the
/// waiter would go on to wait for the holder (a minute, here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_sends_its_set_and_its_script_under_one_timeout() {
    let Some((server, proxy, slow)) = behind_a_proxy().await else {
        return;
    };
    let direct = LockManager::new(RedisStore::connect(&server.url()).await.expect("connect"));
    let _held = direct
        .lock("slow", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    proxy.set_delay(Duration::from_millis(600));
    let started = Instant::now();
    let acquired =
        tokio::time::timeout(HANG_GUARD, slow.lock("slow", LONG).wait_for(LONG).acquire())
            .await
            .expect("the acquire ends at its bound, not after the holder");
    at_the_bound(
        acquired,
        started,
        "two 600 ms round trips do not fit in 1 s",
    );
}

/// A server of the test's own, the proxy in front of it (to slow its
/// replies), and a manager reaching it through the proxy with a 1 s bound
/// on every call.
async fn behind_a_proxy() -> Option<(RedisServer, Proxy, LockManager)> {
    let server = RedisServer::start()?;
    let proxy = Proxy::start(&format!("127.0.0.1:{}", server.port()))
        .await
        .expect("proxy");
    let config = RedisConfig::new().timeout(Duration::from_secs(1));
    let locks = LockManager::new(
        RedisStore::connect_with(&proxy.url("redis"), config)
            .await
            .expect("connect through the proxy"),
    );
    Some((server, proxy, locks))
}

/// Checks that a call started at `started` failed at its 1 s bound, with a
/// cause that names it, rather than succeeding late: `why` says why it
/// cannot fit.
fn at_the_bound<T: std::fmt::Debug>(outcome: lock_core::Result<T>, started: Instant, why: &str) {
    let took = started.elapsed();
    let error = outcome.expect_err(why);
    assert!(
        error.chain().to_string().contains("within 1s"),
        "the error's cause names the bound: {}",
        error.chain()
    );
    assert!(
        took < Duration::from_millis(1200),
        "the call ended at its bound: {took:?}"
    );
}

/// A guard taken out of its runtime (returned from `block_on`, kept in a
/// struct that outlives it) and dropped where no runtime runs is given back
/// as one cut off by a shutdown is: on a thread and a connection of its
/// own, before the drop returns. Before the fix it was left to its TTL,
/// with a WARN.
#[test]
fn a_redis_guard_dropped_outside_any_runtime_is_given_back_before_the_drop_returns() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let (captured, _logging) = Captured::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let prefix = unique("no-runtime");
    let guard = runtime.block_on(async {
        let locks = LockManager::new(RedisStore::connect(&url).await.expect("connect"))
            .with_prefix(prefix.clone());
        locks
            .lock("job", LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
    });
    let key = guard.key().to_owned();
    drop(guard);
    let held = runtime.block_on(async {
        let locks =
            LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(prefix);
        let lock = locks.lock("job", LONG);
        let held = lock.is_held().await.expect("is_held");
        lock.force_release().await.expect("clean up");
        held
    });
    assert!(
        !held,
        "the lease was given back before the guard's drop returned, not left to its ttl"
    );
    assert!(
        captured.matching("WARN", &key).is_empty(),
        "no WARN: nothing was left behind"
    );
}

/// A Redis guard held by a task that its runtime's shutdown drops is given
/// back before the shutdown ends: the release task it spawns never runs on
/// that runtime, so the lease is given back on a connection of its own
/// (it was left to its ttl, with a WARN, before). Nothing is left for the
/// next run of the program to wait out.
#[test]
fn a_redis_guard_dropped_while_its_runtime_shuts_down_is_given_back_before_the_shutdown_ends() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let (captured, _logging) = Captured::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let prefix = unique("shutdown");
    let key = runtime.block_on(async {
        let locks = LockManager::new(RedisStore::connect(&url).await.expect("connect"))
            .with_prefix(prefix.clone());
        let guard = locks
            .lock("job", LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let key = guard.key().to_owned();
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        key
    });
    drop(runtime);
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let held = check.block_on(async {
        let locks =
            LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(prefix);
        let lock = locks.lock("job", LONG);
        let held = lock.is_held().await.expect("is_held");
        lock.force_release().await.expect("clean up");
        held
    });
    assert!(
        !held,
        "the lease was given back before the runtime's drop returned, not left to its ttl"
    );
    assert!(
        captured.matching("WARN", &key).is_empty(),
        "no WARN: nothing was left to its ttl: {:?}",
        captured.lines()
    );
}

/// `timeout(Duration::MAX)` is how a user asks for no time bound: every
/// call must work, not panic adding it to the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_no_time_bound_works_instead_of_panicking() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let config = RedisConfig::new().timeout(Duration::MAX);
    let store = RedisStore::connect_with(&url, config)
        .await
        .expect("connect with no time bound");
    lock_test_kit::contract::every_call_works_without_a_time_bound(LockManager::new(store)).await;
}

/// A store with `replica_acks` whose replicas do not answer, on a server
/// of the test's own (it has no replica at all), and its manager.
async fn unacknowledged(acks: Duration) -> Option<(RedisServer, LockManager)> {
    let server = RedisServer::start()?;
    let config = RedisConfig::new()
        .timeout(Duration::from_secs(1))
        .replica_acks(1, acks);
    let store = RedisStore::connect_with(&server.url(), config)
        .await
        .expect("connect");
    Some((server, LockManager::new(store).with_prefix(unique("acks"))))
}

/// `WAIT` blocks the connection it is sent on until the replicas answer or
/// its timeout passes. Sent on the store's shared command connection, it
/// would hold up every other call of every task behind it: a holder read,
/// a release, another lock's renewal. Here an acquire waits 1 s for a
/// replica that does not exist; a read of another lock meanwhile must not
/// wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_for_replicas_holds_up_no_other_call() {
    let Some((_server, locks)) = unacknowledged(Duration::from_secs(1)).await else {
        return;
    };
    let waiting = {
        let lock = locks.lock("acked", LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    locks
        .lock("other", LONG)
        .holder()
        .await
        .expect("read another lock");
    let took = started.elapsed();
    let refused = waiting.await.expect("the acquire's task");
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
    );
    assert!(
        took < Duration::from_millis(500),
        "a read of another lock waited {took:?} behind the WAIT of an acquire"
    );
}

/// Concurrent acquires whose replicas do not answer each wait out their
/// own ack timeout, at the same time: each fails as not replicated (not
/// with a time-out because it queued behind the others' WAITs) and gives
/// its lease back, so nothing is left held once they have returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_unacknowledged_acquires_each_fail_as_not_replicated_and_leave_nothing() {
    let Some((_server, locks)) = unacknowledged(Duration::from_millis(500)).await else {
        return;
    };
    let names: Vec<String> = (0..8).map(|n| format!("job-{n}")).collect();
    let acquires: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = locks.lock(name, LONG);
            tokio::spawn(async move { lock.acquire().await })
        })
        .collect();
    for (name, acquire) in names.iter().zip(acquires) {
        let refused = acquire.await.expect("the acquire's task");
        assert!(
            matches!(
                refused,
                Err(Error::NotReplicated {
                    acked: 0,
                    wanted: 1
                })
            ),
            "{name}: {refused:?}"
        );
    }
    for name in &names {
        let lock = locks.lock(name, LONG);
        let mut held = true;
        for _ in 0..20 {
            held = lock.is_held().await.expect("is_held");
            if !held {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!held, "{name}: a refused acquire's lease was left held");
    }
}

/// A reply can arrive after the lease it reports has already run out: a
/// link that queues replies, a server stalled between the `SET` and its
/// answer. Handing that caller a guard would let it work while the lock is
/// free for anyone (the fault harness saw exactly this under a 300 ms-per-
/// reply delay: a plain holder ran alongside the next one). Here every
/// reply is held back 400 ms and the lease lasts 200 ms: the acquire must
/// fail saying why, not return a guard, and another caller takes the lock
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_comes_after_its_lease_ran_out_hands_out_no_guard() {
    let Some((server, proxy, slow)) = behind_a_proxy().await else {
        return;
    };
    let prefix = unique("late-reply");
    let slow = slow.with_prefix(&prefix);
    let direct = LockManager::new(
        RedisStore::connect(&server.url())
            .await
            .expect("a direct connection"),
    )
    .with_prefix(&prefix);
    proxy.set_delay(Duration::from_millis(400));
    let ttl = Duration::from_millis(200);
    let outcome = tokio::time::timeout(HANG_GUARD, slow.lock("late", ttl).acquire())
        .await
        .expect("the acquire ends");
    proxy.set_delay(Duration::ZERO);
    match outcome {
        Ok(Some(_guard)) => {
            let other = direct.lock("late", LONG).acquire().await.expect("acquire");
            panic!(
                "a guard for a lease that ran out before its reply came (another caller {} the lock at the same time)",
                if other.is_some() {
                    "took"
                } else {
                    "did not take"
                }
            );
        }
        Ok(None) => panic!("nobody else held the lock: None says the wrong thing"),
        Err(error) => assert!(
            error.chain().to_string().contains("run out"),
            "the error says the lease ran out before the answer: {}",
            error.chain()
        ),
    }
    let other = direct
        .lock("late", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("the lock is free for the next caller");
    other.release().await.expect("release");
}
