//! `RedisStore` on real servers: what the contract suite cannot show from
//! inside one process — other processes, killed holders, a Redis that dies
//! and comes back, awkward names, and the cluster's slots.
//!
//! Time bounds here are hang guards, far above what a healthy run needs.

use std::process::Child;
use std::time::{Duration, Instant};

use lock_core::{Error, Lock, LockManager, RedisConfig, RedisStore};
use lock_tests::children::{self, Children, read_line, reports};
use lock_tests::harness::{self, RedisServer};
use redis::AsyncCommands;

/// A TTL no test outlives: a lease that ends early was ended by the behaviour
/// under test, not by expiry.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound for things that should happen promptly.
const HANG_GUARD: Duration = Duration::from_secs(20);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// The child-process binary of this crate.
fn child(args: &[&str]) -> Child {
    children::spawn(env!("CARGO_BIN_EXE_lock-child"), args)
}

/// A plain connection for reading and cleaning up what the children wrote.
async fn data_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_contending_for_one_lock_lose_no_update() {
    // The reason Redis locks exist: several OS processes (several servers)
    // doing read-modify-write on shared data must take turns. GET then SET
    // loses updates whenever two holders overlap, so an exact total proves
    // the exclusion held across processes, not just tasks.
    let Some(url) = harness::redis_url() else {
        return;
    };
    const PROCESSES: usize = 4;
    const TASKS: usize = 8;
    const ROUNDS: usize = 8;
    let prefix = unique("exclusion");
    let counter = format!("{prefix}counter");
    let started = Instant::now();
    let mut children = Children(
        (0..PROCESSES)
            .map(|_| {
                child(&[
                    "contend",
                    &url,
                    &prefix,
                    "shared-counter",
                    &counter,
                    &TASKS.to_string(),
                    &ROUNDS.to_string(),
                ])
            })
            .collect(),
    );
    let reported: usize = reports(&mut children, Duration::from_secs(180))
        .iter()
        .map(|line| {
            line.strip_prefix("done ")
                .unwrap_or_else(|| panic!("a contender failed: {line}"))
                .parse::<usize>()
                .expect("a count")
        })
        .sum();
    let mut data = data_connection(&url).await;
    let total: u64 = data.get(&counter).await.expect("read the counter");
    let expected = (PROCESSES * TASKS * ROUNDS) as u64;
    let lost = expected.saturating_sub(total);
    println!(
        "cross-process exclusion: {PROCESSES} processes x {TASKS} tasks x {ROUNDS} rounds: \
         counter = {total}, expected {expected}, lost updates = {lost} ({:?})",
        started.elapsed()
    );
    assert_eq!(
        reported as u64, expected,
        "every task must report all its rounds done"
    );
    assert_eq!(
        total, expected,
        "GET-then-SET under the lock lost {lost} updates"
    );
    let _: () = data.del(&counter).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_over_1000_acquisitions_across_4_processes() {
    // A storage system that rejects writes carrying an older token than one it
    // has seen is only safe if tokens follow the order in which the lock was
    // held, across every process. Each child appends its token to a list while
    // holding the lock, so the list is the acquisition order.
    let Some(url) = harness::redis_url() else {
        return;
    };
    const PROCESSES: usize = 4;
    const EACH: usize = 250;
    let prefix = unique("fencing");
    let list = format!("{prefix}tokens");
    let mut children = Children(
        (0..PROCESSES)
            .map(|_| child(&["fence", &url, &prefix, "fenced", &list, &EACH.to_string()]))
            .collect(),
    );
    for line in reports(&mut children, Duration::from_secs(180)) {
        assert_eq!(line, format!("done {EACH}"), "a child failed: {line}");
    }
    let mut data = data_connection(&url).await;
    let tokens: Vec<u64> = data.lrange(&list, 0, -1).await.expect("read the tokens");
    assert_eq!(
        tokens.len(),
        PROCESSES * EACH,
        "every acquisition recorded its token"
    );
    let out_of_order = tokens.windows(2).filter(|pair| pair[0] >= pair[1]).count();
    println!(
        "fencing: {} acquisitions across {PROCESSES} processes, tokens {}..={}, {out_of_order} out of order",
        tokens.len(),
        tokens.first().copied().unwrap_or_default(),
        tokens.last().copied().unwrap_or_default(),
    );
    assert_eq!(
        out_of_order, 0,
        "tokens must strictly increase in acquisition order"
    );
    let _: () = data.del(&list).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_task_runs_once_per_slot_across_two_processes() {
    // The scheduler example's promise: two servers tick at every slot and call
    // the same `#[locked(name = "report:{minute}", at_least, shared)]` task,
    // and each slot runs exactly once. On even slots both processes fire at
    // the same instant (the lock decides); on odd slots the second fires
    // 300 ms late, after the first has finished and released, so only the
    // `at_least` claim stops it from running the slot again.
    let Some(url) = harness::redis_url() else {
        return;
    };
    const SLOTS: u64 = 4;
    const PERIOD_MS: u64 = 700;
    let prefix = unique("schedule");
    let list = format!("{prefix}runs");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    // Far enough ahead for both children to start and connect.
    let start = (now + Duration::from_secs(2)).as_millis().to_string();
    let plan = |lag: &str| {
        child(&[
            "schedule",
            &url,
            &prefix,
            &start,
            &PERIOD_MS.to_string(),
            &SLOTS.to_string(),
            lag,
            &list,
        ])
    };
    let mut children = Children(vec![plan("0"), plan("300")]);
    let mut ran_in_children = 0;
    for line in reports(&mut children, HANG_GUARD) {
        let counts: Vec<u64> = line
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("a child failed: {line}"))
            .split(' ')
            .map(|count| count.parse().expect("a count"))
            .collect();
        assert_eq!(
            counts.iter().sum::<u64>(),
            SLOTS,
            "each child called every slot: {line}"
        );
        ran_in_children += counts[0];
    }
    let mut data = data_connection(&url).await;
    let mut runs: Vec<u64> = data.lrange(&list, 0, -1).await.expect("read the runs");
    runs.sort_unstable();
    println!("scheduler: slots run {runs:?} across 2 processes");
    assert_eq!(
        runs,
        (0..SLOTS).collect::<Vec<_>>(),
        "every slot ran exactly once across both processes"
    );
    assert_eq!(ran_in_children, SLOTS, "the children agree");
    let _: () = data.del(&list).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_once_its_ttl_passes() {
    // A crashed holder cannot release: the TTL is the only thing that frees
    // the lock, and it must, or one crash blocks the job forever.
    let Some(url) = harness::redis_url() else {
        return;
    };
    let prefix = unique("sigkill");
    let ttl = Duration::from_secs(2);
    let mut holder = child(&[
        "hold",
        &url,
        &prefix,
        "crashy",
        &ttl.as_millis().to_string(),
    ]);
    let line = read_line(&mut holder, HANG_GUARD);
    assert_eq!(line, "held", "the child must take the lock first");
    let pid = holder.id();
    let mut children = Children(vec![holder]);

    let locks =
        LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(&prefix);
    let lock = locks.lock("crashy", LONG);
    let who = lock
        .holder()
        .await
        .expect("holder")
        .expect("the child holds it");
    assert!(
        who.owner().ends_with(&format!(":{pid}")),
        "the holder must be the child process {pid}, got {}",
        who.owner()
    );

    children.0[0].kill().expect("SIGKILL the holder");
    children.0[0].wait().expect("reap the holder");
    // Killed holders do not release: the lease outlives its process...
    assert!(
        lock.acquire().await.expect("acquire").is_none(),
        "the lease must stand until its ttl even though its holder is dead"
    );
    // ...until its TTL passes.
    let guard = lock
        .clone()
        .wait_for(HANG_GUARD)
        .acquire()
        .await
        .expect("acquire")
        .expect("the lock must be free once the dead holder's ttl passed");
    assert!(guard.release().await.expect("release"), "it was ours");
}

/// A server of the test's own, to restart, and a manager on it whose calls
/// are bounded by 1 s, under a fresh prefix for `what`.
async fn restartable(what: &str) -> Option<(RedisServer, LockManager)> {
    let server = RedisServer::start()?;
    let config = RedisConfig::new().timeout(Duration::from_secs(1));
    let store = RedisStore::connect_with(&server.url(), config)
        .await
        .expect("connect");
    Some((server, LockManager::new(store).with_prefix(unique(what))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_gives_errors_during_the_outage_and_the_same_store_recovers() {
    // Redis restarts (deploys, failovers, OOM kills). During the outage
    // callers must get an error quickly, not hang; afterwards the store the
    // application built at startup must simply work again, scripts and
    // release notifications included.
    let Some((mut server, locks)) = restartable("outage").await else {
        return;
    };
    let lock = locks.lock("job", LONG);
    let guard = lock.acquire().await.expect("acquire").expect("free");
    guard.release().await.expect("release");

    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = tokio::time::timeout(HANG_GUARD, lock.acquire())
            .await
            .expect("a call during the outage must not hang");
        match outcome {
            Err(Error::Store { operation, .. }) => assert_eq!(operation, "acquire"),
            other => panic!("with Redis down, acquire must fail, got {other:?}"),
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "the error must come within the configured bound"
        );
    }

    server.restart().expect("restart redis-server");
    let deadline = Instant::now() + HANG_GUARD;
    let guard = loop {
        match lock.acquire().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("the restarted server is empty; nobody can hold the lock"),
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet recovered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store did not recover within {HANG_GUARD:?}: {e}"),
        }
    };

    // Release notifications work again too: a waiter is woken by the
    // release, long before the 60 s TTL would let it in.
    let waiter = {
        let lock = lock.clone().wait_for(Duration::from_secs(45));
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.expect("release"), "still ours");
    let woken = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("after recovery, a release must wake the waiter, not the ttl")
        .expect("task")
        .expect("acquire");
    assert!(woken.is_some(), "the waiter must get the released lock");
}

/// One turn of a fenced lock: acquire, note the token, release. Retried
/// while the store is still finding a restarted server again.
async fn fenced_turn(lock: &Lock) -> u64 {
    let deadline = Instant::now() + HANG_GUARD;
    let guard = loop {
        match lock.acquire().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody else takes `{}`, yet it was held", lock.name()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet recovered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store did not recover within {HANG_GUARD:?}: {e}"),
        }
    };
    let fence = guard.fence().expect("a fenced lock has a token");
    assert!(guard.release().await.expect("release"), "it was ours");
    fence
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_token_after_a_restart_that_lost_the_counter_exceeds_every_earlier_one() {
    // A resource guarded by fencing keeps the highest token it has seen and
    // refuses writes that carry a lower one. A Redis without persistence
    // forgets the fencing counter when it restarts (and a promoted replica
    // that missed the last writes holds an older count): if counting began
    // again from 1, every new holder would carry a token below one already
    // handed out, and the resource would refuse them all until the count
    // caught up, an outage made by the very mechanism meant for safety.
    let Some((mut server, locks)) = restartable("fence-restart").await else {
        return;
    };
    let lock = locks.lock("job", LONG).fenced();
    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(fenced_turn(&lock).await);
    }
    assert!(
        before.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase while the server runs: {before:?}"
    );

    server
        .restart()
        .expect("restart redis-server with an empty dataset");
    let after = fenced_turn(&lock).await;
    let highest = before.iter().copied().max().unwrap_or_default();
    assert!(
        after > highest,
        "after a restart that lost the fencing counter, the next token ({after}) must exceed \
         every token handed out before it ({before:?}): a resource that keeps the highest \
         token it has seen would otherwise refuse every new holder"
    );
    let next = fenced_turn(&lock).await;
    assert!(
        next > after,
        "tokens go on increasing from there: {next} after {after}"
    );
}

/// The server's clock, in microseconds since the epoch (`TIME`).
async fn server_micros(data: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(data).await.expect("TIME");
    seconds * 1_000_000 + micros
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_token_from_the_servers_clock_is_exact_and_the_count_goes_on_from_it() {
    // A fenced lock whose counter is gone (here deleted; in production lost
    // to a restart) takes its next token from the server's clock in
    // microseconds, about 1.8e15. Lua numbers are doubles: the token must
    // still come back exactly, and the counter must be stored as a plain
    // integer, or the next INCR fails ("value is not an integer") and with
    // it every later acquire of the name. A counter ahead of the clock (a
    // clock stepped back) must keep counting up from itself.
    let Some(url) = harness::redis_url() else {
        return;
    };
    let prefix = unique("fence-clock");
    let locks =
        LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(&prefix);
    let counter = format!("{{{prefix}job}}:fence");
    let lock = locks.lock("job", LONG).fenced();
    let mut data = data_connection(&url).await;

    let earliest = server_micros(&mut data).await;
    let fence = fenced_turn(&lock).await;
    let latest = server_micros(&mut data).await;
    assert!(
        (earliest..=latest).contains(&fence),
        "a token issued with no counter is the server's clock in microseconds: \
         {fence} is not within {earliest}..={latest}"
    );
    let stored: String = data.get(&counter).await.expect("read the counter");
    assert_eq!(
        stored,
        fence.to_string(),
        "the counter holds the token as a plain integer, for INCR to go on from"
    );

    let ahead = latest + 3_600_000_000;
    let _: () = data
        .set(&counter, ahead)
        .await
        .expect("move the counter ahead");
    let next = fenced_turn(&lock).await;
    assert_eq!(
        next,
        ahead + 1,
        "a counter ahead of the clock counts on from itself, never back to the clock"
    );
    let _: () = data.del(&counter).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_counter_beyond_exact_counting_fails_the_acquire_and_leaves_no_lease() {
    // Tokens are Lua numbers, exact only below 2^53. A counter at or past
    // that (a foreign value, a hand edit) would make the next token round
    // down to one already handed out, or wrap to a negative read as 0: the
    // acquire must fail saying what to do, before it takes the lease, not
    // hand out a token that does not increase. The same for a counter that
    // is not a number at all.
    let Some(url) = harness::redis_url() else {
        return;
    };
    let prefix = unique("fence-beyond");
    let locks =
        LockManager::new(RedisStore::connect(&url).await.expect("connect")).with_prefix(&prefix);
    let counter = format!("{{{prefix}job}}:fence");
    let lease = format!("{{{prefix}job}}");
    let lock = locks.lock("job", LONG).fenced();
    let mut data = data_connection(&url).await;
    for bad in ["9007199254740993", "9223372036854775807", "not a number"] {
        let _: () = data.set(&counter, bad).await.expect("plant the counter");
        let outcome = lock.acquire().await;
        let error = match outcome {
            Ok(Some(guard)) => panic!(
                "counter {bad:?}: the acquire handed out token {:?}",
                guard.fence()
            ),
            Ok(None) => panic!("counter {bad:?}: nobody holds the lock"),
            Err(error) => error,
        };
        assert!(
            error.chain().to_string().contains("fencing counter"),
            "counter {bad:?}: the error names the counter: {}",
            error.chain()
        );
        let left: bool = data.exists(&lease).await.expect("EXISTS");
        assert!(!left, "counter {bad:?}: no lease is left behind");
    }
    let _: () = data.del(&counter).await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_process_is_woken_by_the_release_not_the_ttl() {
    // Two stores are two connections and two subscriptions, as in two
    // processes. The holder's TTL is a minute; only the release message can
    // wake the waiter within the hang guard.
    let Some(url) = harness::redis_url() else {
        return;
    };
    cross_store_wakeup(
        RedisStore::connect(&url).await.expect("connect"),
        RedisStore::connect(&url).await.expect("connect"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_waiter_elsewhere_is_woken_by_the_release() {
    // On a cluster the release is published on the lock's node while the
    // waiter's subscription may sit on another: it must still arrive.
    let Some(urls) = harness::cluster_urls() else {
        return;
    };
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    // Subscribe the two stores through different nodes.
    let mut reversed = seeds.clone();
    reversed.reverse();
    cross_store_wakeup(
        RedisStore::cluster(&seeds).await.expect("connect"),
        RedisStore::cluster(&reversed).await.expect("connect"),
    )
    .await;
}

/// The guard a spawned waiting acquire ends with, within [`HANG_GUARD`]:
/// `what` says what must wake it and let it have the lock.
async fn woken(
    waiting: tokio::task::JoinHandle<lock_core::Result<Option<lock_core::LockGuard>>>,
    what: &str,
) -> lock_core::LockGuard {
    tokio::time::timeout(HANG_GUARD, waiting)
        .await
        .unwrap_or_else(|_| panic!("in time: {what}"))
        .expect("task")
        .expect("acquire")
        .unwrap_or_else(|| panic!("the lock: {what}"))
}

/// The channels with at least one subscriber whose names end with
/// `suffix`, sorted, each with its number of subscribers.
async fn subscribed(
    data: &mut redis::aio::MultiplexedConnection,
    suffix: &str,
) -> Vec<(String, u64)> {
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("*{suffix}"))
        .query_async(data)
        .await
        .expect("PUBSUB CHANNELS");
    channels.sort();
    if channels.is_empty() {
        return Vec::new();
    }
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channels)
        .query_async(data)
        .await
        .expect("PUBSUB NUMSUB");
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_waiting_on_one_lock_hears_no_releases_of_another() {
    // Three stores stand for three processes: `h` holds A and B, `a` waits
    // for A, `b` waits for B. B changes hands 20 times under `b`'s waiting;
    // the server delivers a channel's messages only to its subscribers, and
    // A's waiter is subscribed to A's channel alone, so it hears none of B's
    // releases, and an idle store hears nothing at all.
    let Some(url) = harness::redis_url() else {
        return;
    };
    let channel = unique("releases");
    let store = || RedisStore::connect_with(&url, RedisConfig::new().channel(channel.clone()));
    let prefix = unique("per-lock");
    let h = LockManager::new(store().await.expect("connect")).with_prefix(&prefix);
    let a = LockManager::new(store().await.expect("connect")).with_prefix(&prefix);
    let b = LockManager::new(store().await.expect("connect")).with_prefix(&prefix);
    let _idle = store().await.expect("connect");
    let mut data = data_connection(&url).await;
    let channel_of = |name: &str| format!("{{{prefix}{name}}}:{channel}");
    assert_eq!(
        subscribed(&mut data, &channel).await,
        [],
        "nobody waits yet"
    );

    let held_a = h
        .lock("A", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiting_a = {
        let lock = a.lock("A", LONG).wait_for(Duration::from_secs(60));
        tokio::spawn(async move { lock.acquire().await })
    };
    for round in 0..20 {
        let held_b = h
            .lock("B", LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let waiting_b = {
            let lock = b.lock("B", LONG).wait_for(Duration::from_secs(60));
            tokio::spawn(async move { lock.acquire().await })
        };
        // Until both waiters' subscriptions are confirmed.
        let started = Instant::now();
        let expected = vec![(channel_of("A"), 1), (channel_of("B"), 1)];
        loop {
            let now = subscribed(&mut data, &channel).await;
            if now == expected {
                break;
            }
            assert!(
                started.elapsed() < HANG_GUARD,
                "round {round}: each waiter subscribed to its own lock's channel only, saw {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        held_b.release().await.expect("release");
        woken(waiting_b, "B's waiter is woken by B's release and gets B")
            .await
            .release()
            .await
            .expect("release");
        assert!(
            !waiting_a.is_finished(),
            "A is still held: its waiter waits on"
        );
    }
    // B's waiter is gone, and so is its subscription; A's stays.
    eventually(
        "B's channel unsubscribed once nobody waits for B",
        async || subscribed(&mut data, &channel).await == [(channel_of("A"), 1)],
    )
    .await;
    held_a.release().await.expect("release");
    woken(waiting_a, "A's waiter is woken by A's release and gets A")
        .await
        .release()
        .await
        .expect("release");
    eventually("no subscriptions once nobody waits", async || {
        subscribed(&mut data, &channel).await.is_empty()
    })
    .await;
}

async fn cross_store_wakeup(holder_store: RedisStore, waiter_store: RedisStore) {
    let prefix = unique("wakeup");
    let holding = LockManager::new(holder_store).with_prefix(&prefix);
    let waiting = LockManager::new(waiter_store).with_prefix(&prefix);
    // Several names, so on a cluster some live on other nodes than the
    // waiter's subscription.
    for name in ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"] {
        let guard = holding
            .lock(name, LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let waiter = {
            let lock = waiting.lock(name, LONG).wait_for(Duration::from_secs(45));
            tokio::spawn(async move { lock.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(guard.release().await.expect("release"), "still ours");
        let got = tokio::time::timeout(HANG_GUARD, waiter)
            .await
            .unwrap_or_else(|_| panic!("`{name}`: the release must wake the other store's waiter"))
            .expect("task")
            .expect("acquire");
        let got = got.unwrap_or_else(|| panic!("`{name}`: the waiter must get the lock"));
        got.release().await.expect("release");
    }
}

/// Names that break naive key schemes: separators, whitespace, non-ASCII,
/// the cluster's hash-tag braces, and a long one.
fn awkward_names() -> Vec<String> {
    vec![
        "with spaces in it".to_owned(),
        "ünïcödé 🔒 名前".to_owned(),
        "line\nbreak\r\nand\ttab".to_owned(),
        "{braced}".to_owned(),
        "}{".to_owned(),
        "a}b{c}d".to_owned(),
        "{".to_owned(),
        "}".to_owned(),
        "percent%7D".to_owned(),
        "x".repeat(1024),
    ]
}

async fn awkward_names_work(locks: LockManager) {
    let names = awkward_names();
    let mut guards = Vec::new();
    for name in &names {
        let lock = locks.lock(name.as_str(), LONG);
        let guard = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire {name:?}: {e}"))
            .unwrap_or_else(|| panic!("{name:?} must be free"));
        assert!(
            lock.acquire().await.expect("acquire").is_none(),
            "{name:?} must exclude a second caller"
        );
        let holder = lock.holder().await.expect("holder").expect("held");
        assert_eq!(holder.token(), guard.token(), "{name:?}: holder is us");
        assert!(
            guard.extend(LONG).await.expect("extend"),
            "{name:?}: extend must find our lease"
        );
        guards.push(guard);
    }
    // All held at once: no two names collapsed into one key.
    assert_eq!(guards.len(), names.len(), "every name is its own lock");
    for (guard, name) in guards.into_iter().zip(&names) {
        assert!(
            guard.release().await.expect("release"),
            "{name:?}: release must find our lease"
        );
        assert!(
            !locks
                .lock(name.as_str(), LONG)
                .is_held()
                .await
                .expect("holder"),
            "{name:?} must be free after release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_names_lock_and_release_on_a_single_server() {
    // Lock names come from user data (tenants, file names); any of them must
    // work and stay distinct.
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    awkward_names_work(locks.with_prefix(unique("names"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_names_lock_and_release_on_a_cluster() {
    // On a cluster, braces in a name would pick the hash tag if the store let
    // them: its two keys could land in different slots and the script would
    // fail with CROSSSLOT.
    let Some(locks) = harness::cluster_manager().await else {
        return;
    };
    awkward_names_work(locks.with_prefix(unique("names"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_lock_names_spread_over_every_cluster_node() {
    // If every lock hashed to one slot, one node would carry all the load and
    // the cluster would add nothing.
    let Some(urls) = harness::cluster_urls() else {
        return;
    };
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locks = LockManager::new(RedisStore::cluster(&seeds).await.expect("connect"))
        .with_prefix(unique("spread"));
    let mut guards = Vec::new();
    for i in 0..60 {
        guards.push(
            locks
                .lock(format!("job-{i}"), LONG)
                .acquire()
                .await
                .expect("acquire")
                .expect("free"),
        );
    }
    for url in &urls {
        let port: u16 = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let keys: u64 = harness::command(port, &["DBSIZE"])
            .expect("DBSIZE")
            .parse()
            .expect("a number");
        assert!(keys > 0, "node {url} holds none of 60 locks");
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_within_the_timeout_not_a_hang() {
    // A wrong address or a server that is down at startup must fail the
    // connect, with a message that does not leak the password in the URL.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("redis://user:hunter2@127.0.0.1:{port}");
    let config = RedisConfig::new().timeout(Duration::from_millis(500));
    let outcome = tokio::time::timeout(HANG_GUARD, RedisStore::connect_with(&url, config))
        .await
        .expect("connect must give up within its timeout");
    let error = outcome.expect_err("nothing listens there");
    let text = error.chain().to_string();
    assert!(!text.contains("hunter2"), "the password leaked: {text}");
    assert!(
        text.contains(&port.to_string()),
        "the address is missing: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_output_of_a_store_never_shows_its_password() {
    // Stores end up in logs via `{:?}`; a password there is a leak.
    let Some(server) = RedisServer::start_with(&["--requirepass", "s3cr3t-pw"]) else {
        return;
    };
    let url = format!("redis://:s3cr3t-pw@127.0.0.1:{}", server.port());
    let store = RedisStore::connect(&url)
        .await
        .expect("connect with the password");
    let debug = format!("{store:?}");
    assert!(!debug.contains("s3cr3t-pw"), "the password leaked: {debug}");
    assert!(
        debug.contains(&server.port().to_string()),
        "Debug should still say where it connects: {debug}"
    );
    let locks = LockManager::new(store);
    let guard = locks
        .lock("authenticated", LONG)
        .acquire()
        .await
        .expect("acquire with auth")
        .expect("free");
    guard.release().await.expect("release");
}

// A password may hold any character a URL's user info takes (`@`, `?`,
// `,`, `:`, a blank) written as it is: the store reads it whole, as the
// redaction does, so it both authenticates and is never shown, in `Debug`
// or in the error of a connect that fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_holding_what_a_url_treats_specially_connects_and_is_never_shown() {
    const PASSWORD: &str = "Zorro1@Quill2?Tiger3,Yak4: Emu5";
    let Some(server) = RedisServer::start_with(&["--requirepass", PASSWORD]) else {
        return;
    };
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port());
    let store = RedisStore::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("the password is read whole and authenticates: {e}"));
    let shown = format!("{store:?}\n{:?}", LockManager::new(store.clone()));
    for word in ["Zorro1", "Quill2", "Tiger3", "Yak4", "Emu5"] {
        assert!(
            !shown.contains(word),
            "a piece of the password in Debug: {shown}"
        );
    }
    let wrong = format!("redis://:{PASSWORD}X@127.0.0.1:{}", server.port());
    let config = RedisConfig::new().timeout(Duration::from_secs(2));
    let error = RedisStore::connect_with(&wrong, config)
        .await
        .expect_err("a wrong password is refused");
    let text = format!("{}\n{error:?}", error.chain());
    for word in ["Zorro1", "Quill2", "Tiger3", "Yak4", "Emu5"] {
        assert!(
            !text.contains(word),
            "a piece of the password in the error: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_store_says_it_is_shared() {
    // Boot-time checks refuse per-process stores where cross-process
    // exclusion is required; Redis must pass them.
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    assert!(
        locks.is_shared(),
        "a Redis store is visible to other processes"
    );
}

/// The ports of a cluster's nodes, from their URLs.
fn ports(urls: &[String]) -> Vec<u16> {
    urls.iter()
        .map(|url| {
            url.rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("a port")
        })
        .collect()
}

/// The node id and port of the primary that serves `slot`, read from
/// `CLUSTER NODES` on `port`.
fn owner_of(slot: u16, port: u16) -> (String, u16) {
    let nodes = harness::command(port, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let serves = fields.iter().skip(8).any(|range| {
            let (low, high) = range.split_once('-').unwrap_or((range, range));
            matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(low), Ok(high)) if (low..=high).contains(&slot))
        });
        if serves {
            let node_port = fields[1]
                .split(['@', ':'])
                .nth(1)
                .and_then(|p| p.parse().ok())
                .expect("a node address");
            return (fields[0].to_owned(), node_port);
        }
    }
    panic!("no node serves slot {slot}: {nodes}");
}

/// Moving the slot of one lease key from its owner to another primary, in
/// the steps a resharding takes.
struct SlotMove {
    slot: String,
    source: u16,
    source_id: String,
    target: u16,
    target_id: String,
    nodes: Vec<u16>,
}

impl SlotMove {
    /// The move of `lease_key`'s slot, from its owner to another primary of
    /// the cluster at `urls`; nothing is changed yet.
    fn of(lease_key: &str, urls: &[String]) -> SlotMove {
        let nodes = ports(urls);
        let slot: u16 = harness::command(nodes[0], &["CLUSTER", "KEYSLOT", lease_key])
            .expect("CLUSTER KEYSLOT")
            .parse()
            .expect("a slot");
        let (source_id, source) = owner_of(slot, nodes[0]);
        let target = *nodes
            .iter()
            .find(|port| **port != source)
            .expect("another primary");
        let target_id = harness::command(target, &["CLUSTER", "MYID"]).expect("CLUSTER MYID");
        SlotMove {
            slot: slot.to_string(),
            source,
            source_id,
            target,
            target_id,
            nodes,
        }
    }

    /// Marks the slot importing on the target and migrating on the source:
    /// keys not on the source yet are answered with ASK.
    fn start(&self) {
        harness::command(
            self.target,
            &[
                "CLUSTER",
                "SETSLOT",
                &self.slot,
                "IMPORTING",
                &self.source_id,
            ],
        )
        .expect("IMPORTING");
        harness::command(
            self.source,
            &[
                "CLUSTER",
                "SETSLOT",
                &self.slot,
                "MIGRATING",
                &self.target_id,
            ],
        )
        .expect("MIGRATING");
    }

    /// Gives the slot to the target on every node: from now on, MOVED.
    fn finish(&self) {
        for port in &self.nodes {
            harness::command(
                *port,
                &["CLUSTER", "SETSLOT", &self.slot, "NODE", &self.target_id],
            )
            .expect("SETSLOT NODE");
        }
    }
}

/// The shard channels with a subscriber on the node at `port`.
fn shard_channels(port: u16) -> Vec<String> {
    let mut node = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("connect to a node");
    redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query(&mut node)
        .expect("PUBSUB SHARDCHANNELS")
}

/// Polls until `check` holds, or fails with `what` after the hang guard.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < HANG_GUARD, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_waiter_subscribes_on_its_locks_shard_and_follows_the_slot_when_it_moves() {
    // Sharded pub/sub: the waiter's subscription sits on the primary that
    // owns the lease's slot, and on no other node. When the slot moves, that
    // primary drops the subscription; the store must subscribe again on the
    // new owner, or the release (published there) would never reach it and
    // the waiter would sleep until the holder's TTL.
    if !harness::redis_server_installed() {
        harness::unavailable::<()>(
            "the sharded subscription test",
            "redis-server is not on PATH",
        );
        return;
    }
    let cluster = harness::RedisCluster::start(3).expect("a cluster of our own");
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let holding =
        LockManager::new(RedisStore::cluster(&seeds).await.expect("connect")).with_prefix("shard:");
    let waiting =
        LockManager::new(RedisStore::cluster(&seeds).await.expect("connect")).with_prefix("shard:");
    let lease_key = "{shard:moving}";
    let channel = format!("{lease_key}:lock-core:released");
    let moving = SlotMove::of(lease_key, &urls);
    let (source, target, all) = (moving.source, moving.target, moving.nodes.clone());

    let guard = holding
        .lock("moving", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let lock = waiting
            .lock("moving", LONG)
            .wait_for(Duration::from_secs(60));
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter subscribes on the slot's owner", async || {
        shard_channels(source).contains(&channel)
    })
    .await;
    for port in &all {
        if *port != source {
            assert!(
                !shard_channels(*port).contains(&channel),
                "no subscription on a node that does not own the slot ({port})"
            );
        }
    }

    // Move the slot, with the lease and its waiters marker, to `target`.
    moving.start();
    let target_port = target.to_string();
    let marker = format!("{lease_key}:waiters");
    harness::command(
        source,
        &[
            "MIGRATE",
            "127.0.0.1",
            &target_port,
            "",
            "0",
            "5000",
            "KEYS",
            lease_key,
            &marker,
        ],
    )
    .expect("MIGRATE the lease and its marker");
    moving.finish();
    eventually(
        "the subscription follows the slot to its new owner",
        async || {
            shard_channels(target).contains(&channel) && !shard_channels(source).contains(&channel)
        },
    )
    .await;

    // The release is published on the new owner; it must wake the waiter
    // long before the holder's 60 s TTL.
    assert!(guard.release().await.expect("release"), "still ours");
    woken(waiter, "the release wakes the waiter after the slot moved")
        .await
        .release()
        .await
        .expect("release");
    eventually("no subscription once nobody waits", async || {
        all.iter()
            .all(|port| !shard_channels(*port).contains(&channel))
    })
    .await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_and_ask_redirections_are_followed_while_a_slot_migrates() {
    // Resharding a live cluster moves slots between nodes: while a slot
    // migrates, a key not yet on the old node is answered with ASK, and once
    // it has moved, every command for it with MOVED. A store that did not
    // follow them would fail every lock in that slot until restarted.
    if !harness::redis_server_installed() {
        harness::unavailable::<()>("the slot migration test", "redis-server is not on PATH");
        return;
    }
    let cluster = harness::RedisCluster::start(3).expect("a cluster of our own");
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locks = LockManager::new(RedisStore::cluster(&seeds).await.expect("connect"))
        .with_prefix("migrate:");
    let lock = locks.lock("moving", LONG);
    let lease_key = "{migrate:moving}";
    let moving = SlotMove::of(lease_key, &urls);

    // Migration under way, lease not on the old node yet: ASK to the new one.
    moving.start();
    let guard = lock
        .acquire()
        .await
        .expect("acquire during the migration")
        .expect("free");
    let on_target: u64 =
        harness::command(moving.target, &["CLUSTER", "COUNTKEYSINSLOT", &moving.slot])
            .expect("COUNTKEYSINSLOT")
            .parse()
            .expect("a count");
    assert_eq!(
        on_target, 1,
        "the ASK redirection put the lease on the new node"
    );

    // Migration done: the store's slot map is stale, so MOVED.
    moving.finish();
    assert!(
        guard.release().await.expect("release after the slot moved"),
        "the release followed MOVED and found our lease"
    );
    let again = lock.acquire().await.expect("acquire after the move");
    assert!(again.is_some(), "the lock works from its new node");
    drop(cluster);
}

/// Holds `count` locks under a fresh prefix of `locks`, lists them, and checks
/// every one is listed once with its holder: more than one `SCAN` batch per
/// node, so the walk's continuation (per node, on a cluster) is exercised.
async fn listing_finds_every_lock_past_one_scan_batch(locks: LockManager, count: usize) {
    let locks = locks.with_prefix(unique("list"));
    let names: Vec<String> = (0..count).map(|i| format!("job-{i:05}")).collect();
    let mut guards = Vec::with_capacity(count);
    for chunk in names.chunks(256) {
        let mut taking = tokio::task::JoinSet::new();
        for name in chunk {
            let lock = locks.lock(name.clone(), LONG);
            taking.spawn(async move { lock.acquire().await });
        }
        while let Some(taken) = taking.join_next().await {
            guards.push(taken.expect("task").expect("acquire").expect("free"));
        }
    }
    guards.sort_by(|a, b| a.key().cmp(b.key()));
    let started = Instant::now();
    let listed = tokio::time::timeout(HANG_GUARD, locks.list())
        .await
        .expect("listing hung")
        .expect("list");
    harness::say(&format!(
        "listed {} locks in {:?}",
        listed.len(),
        started.elapsed()
    ));
    let listed_names: Vec<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(listed_names, names, "every held lock, once, sorted by name");
    for ((_, holder), guard) in listed.iter().zip(&guards) {
        assert_eq!(holder.token(), guard.token());
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
    assert!(locks.list().await.expect("list").is_empty(), "all released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_single_server_walks_every_scan_batch() {
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    listing_finds_every_lock_past_one_scan_batch(locks, 2500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_cluster_walks_every_primary_past_its_first_batch() {
    let Some(locks) = harness::cluster_manager().await else {
        return;
    };
    // About 1,700 per primary of three: each needs a second SCAN batch.
    listing_finds_every_lock_past_one_scan_batch(locks, 5000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_3_admits_exactly_3_holders_across_4_processes() {
    // 4 processes x 8 tasks take one of 3 permits, 10 times each, and count
    // themselves in Redis while they hold it: the highest count seen is the
    // most holders at once, fleet-wide. Exactly 3: never 4 (exclusion), and
    // 3 reached (the permits are all used under load).
    let Some(url) = harness::redis_url() else {
        return;
    };
    const PROCESSES: usize = 4;
    const TASKS: usize = 8;
    const ROUNDS: usize = 10;
    let prefix = unique("semaphore");
    let count = format!("{prefix}holders");
    let started = Instant::now();
    let mut children = Children(
        (0..PROCESSES)
            .map(|_| {
                child(&[
                    "semaphore",
                    &url,
                    &prefix,
                    "payments",
                    "3",
                    &count,
                    &TASKS.to_string(),
                    &ROUNDS.to_string(),
                ])
            })
            .collect(),
    );
    let lines = reports(&mut children, Duration::from_secs(180));
    let mut total = 0;
    for line in &lines {
        let mut fields = line
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("a process failed: {line}"))
            .split(' ')
            .map(|field| field.parse::<usize>().expect("a count"));
        let (done, fewest) = (fields.next().expect("done"), fields.next().expect("fewest"));
        assert_eq!(
            fewest, ROUNDS,
            "every task of every process got all its permits"
        );
        total += done;
    }
    let mut data = data_connection(&url).await;
    let most: u64 = data
        .get(format!("{count}:max"))
        .await
        .expect("read the highest count");
    let now: i64 = data.get(&count).await.expect("read the count");
    println!(
        "semaphore of 3 across {PROCESSES} processes x {TASKS} tasks x {ROUNDS} rounds: \
         most holders at once = {most}, acquisitions = {total} ({:?})",
        started.elapsed()
    );
    assert_eq!(total, PROCESSES * TASKS * ROUNDS);
    assert_eq!(most, 3, "the most holders seen at once");
    assert_eq!(now, 0, "everyone left");
    let _: () = data
        .del(&[count.clone(), format!("{count}:max")])
        .await
        .expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_reported_to_the_caller_says_how_long_the_holder_has_left() {
    // A plain SET NX answers a held key with a bare "no"; the runtime reads
    // the holder's TTL on that path only, so the error can say it.
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    let locks = locks.with_prefix(unique("contended"));
    let _held = locks
        .lock("report", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let second = locks
        .lock("report", LONG)
        .run_or_contended(async { Ok::<_, Error>(()) })
        .await;
    match second {
        Err(Error::Contended {
            holder_remaining: Some(left),
            ..
        }) => assert!(
            left > Duration::from_secs(50) && left <= LONG,
            "about a minute left: {left:?}"
        ),
        other => panic!("expected contention with the holder's remaining ttl: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_suffix_with_quotes_brackets_and_newlines_still_wakes_waiters() {
    // The release script carries the channel suffix as a Lua literal: a
    // suffix that would end a quoted or long-bracket string early must
    // still name the channel exactly.
    let Some(url) = harness::redis_url() else {
        return;
    };
    let channel = format!("{}\"q' ]] \\ \n é", unique("odd"));
    let config = RedisConfig::new().channel(channel.clone());
    let prefix = unique("odd-channel");
    let locks = LockManager::new(
        RedisStore::connect_with(&url, config)
            .await
            .expect("connect"),
    )
    .with_prefix(&prefix);
    let mut data = data_connection(&url).await;
    let held = locks
        .lock("a", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiting = {
        let lock = locks.lock("a", LONG).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    // Until the waiter listens on the exact channel the script must name.
    let exact = format!("{{{prefix}a}}:{channel}");
    eventually("the waiter subscribed to the exact channel", async || {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&exact)
            .query_async(&mut data)
            .await
            .expect("PUBSUB NUMSUB");
        counts == [(exact.clone(), 1)]
    })
    .await;
    held.release().await.expect("release");
    // Held for a minute otherwise: only the announcement wakes it in time.
    woken(waiting, "the release was announced on the waiter's channel")
        .await
        .release()
        .await
        .expect("release");
}

/// Calls of `command` the server has served, from `INFO commandstats`.
async fn served(data: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(data)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_that_finds_the_lock_free_sends_one_plain_set() {
    // `#[locked(wait = "2s")]` calls mostly find their lock free: each
    // should cost the server what a plain acquire does (one native SET, no
    // script, no subscription), not the waiting machinery it never needs.
    // A server of this test's own, so the counts are its calls alone.
    let Some(server) = RedisServer::start() else {
        return;
    };
    let locks = LockManager::new(RedisStore::connect(&server.url()).await.expect("connect"));
    let mut data = data_connection(&server.url()).await;
    let (sets, scripts, subscribes) = (
        served(&mut data, "set").await,
        served(&mut data, "evalsha").await,
        served(&mut data, "subscribe").await,
    );
    for _ in 0..20 {
        locks
            .lock("free", LONG)
            .wait_for(Duration::from_secs(2))
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
            .release()
            .await
            .expect("release");
    }
    assert_eq!(served(&mut data, "set").await - sets, 20, "one SET each");
    assert_eq!(
        served(&mut data, "evalsha").await - scripts,
        20,
        "and the release's script: no acquire script"
    );
    assert_eq!(
        served(&mut data, "subscribe").await,
        subscribes,
        "nobody waited, so nothing was subscribed to"
    );

    // Found held, the same acquire marks the key, listens, and is woken.
    let held = locks
        .lock("free", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiting = {
        let lock = locks.lock("free", LONG).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter subscribed", async || {
        served(&mut data, "subscribe").await != subscribes
    })
    .await;
    held.release().await.expect("release");
    woken(waiting, "the release woke the waiter")
        .await
        .release()
        .await
        .expect("release");
}

/// The read side across 4 processes: in each, 2 writers update a counter
/// file in steps (read, write `writing`, write the count plus one) under the
/// lock, and 4 readers read it under its read side, 25 times each. A reader
/// that ever finds `writing` overlapped a writer; a lost update means two
/// writers overlapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_a_write_under_way_across_4_processes() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let run = children::read_write_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &url,
        &unique("read-write"),
        &[],
        (4, 2, 4, 25),
        30_000,
    );
    eprintln!("Redis, 4 processes: {run:?}");
    assert_eq!(run.torn, 0, "no read saw a write under way: {run:?}");
    assert_eq!(run.writes, 200, "every write ran: {run:?}");
    assert_eq!(run.reads, 400, "every read ran: {run:?}");
    assert_eq!(run.total, 200, "no update lost: {run:?}");
}

/// A writer that waits while readers hold a name claims their turn, so new
/// readers wait behind it. One that gives up takes its claim back as it
/// goes: a new reader gets in within a second, before the claim (2 s from
/// the writer's last attempt) would have run out. One whose process died
/// cannot: its claim runs out, and holds readers off 2 s at most. Without
/// the claim, readers could starve the writer; without its end, a writer
/// that gave up or died would shut readers out for as long as the readers
/// already in stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_takes_its_claim_back_and_a_dead_ones_runs_out_within_two_seconds() {
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    let locks = locks.with_prefix(unique("writer-waits"));
    let long = Duration::from_secs(60);
    let read = |wait: Duration| locks.lock("doc", long).read().wait_for(wait);
    let reader = read(Duration::ZERO)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = locks
        .lock("doc", long)
        .wait_for(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    assert!(writer.is_none(), "the reader holds the name for a minute");
    let next = read(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    assert!(
        next.is_some(),
        "the writer took its claim back as it gave up: a reader gets in before the claim would \
         have run out"
    );
    drop(next);

    // A writer that claims and then runs nothing more, as one whose
    // process died: its attempt's wakeup is never dropped.
    let key = locks.lock("doc", long).key().to_owned();
    let attempt = locks
        .store()
        .acquire(lock_core::store::AcquireRequest::new(&key, "a-dead-writer", long).waking())
        .await
        .expect("acquire");
    let lock_core::store::Attempt::Held {
        wakeup: Some(wakeup),
        ..
    } = attempt
    else {
        panic!("the reader holds the name: the writer waits, {attempt:?}");
    };
    std::mem::forget(wakeup);
    let died = Instant::now();
    let at_once = read(Duration::ZERO).acquire().await.expect("acquire");
    assert!(
        at_once.is_none(),
        "the dead writer's claim holds new readers off"
    );
    let later = read(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let waited = died.elapsed();
    eprintln!("a new reader got in {waited:?} after the writer died");
    assert!(later.is_some(), "the claim runs out: readers get in again");
    assert!(
        waited < Duration::from_secs(3),
        "held off {waited:?} by a writer that had died"
    );
    drop((later, reader));
}

/// A writer that waited for a reader, then got the name with a plain
/// `SET NX` and held it past the waiters marker's life, must leave no claim
/// behind when it releases: with nobody holding or waiting, a reader gets
/// in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_waited_for_readers_leaves_no_claim_when_it_releases() {
    let Some(locks) = harness::redis_manager().await else {
        return;
    };
    let locks = locks.with_prefix(unique("stale-claim"));
    let long = Duration::from_secs(60);
    let reader = locks
        .lock("n", Duration::from_millis(300))
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move {
            let lock = locks.lock("n", long).wait_for(Duration::from_secs(10));
            lock.acquire()
                .await
                .expect("acquire")
                .expect("the reader goes")
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(reader.release().await.expect("release"));
    let writer = writer.await.expect("writer task");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(writer.release().await.expect("release"));
    assert!(
        locks
            .lock("n", long)
            .holder()
            .await
            .expect("holder")
            .is_none(),
        "nobody holds the name"
    );
    let next = locks
        .lock("n", long)
        .read()
        .acquire()
        .await
        .expect("acquire");
    assert!(next.is_some(), "a claim outlived the writer that made it");
}

/// A writer that gives up waiting lets in the readers of its process it
/// stood in front of. Two stores stand for two processes, `here` and
/// `elsewhere`. A writer of `elsewhere` holds the name for 30 s. `here` has
/// a reader waiting (it naps the writer's 30 s, unless woken) and a writer
/// waiting 2 s. The release wakes one waiter of `here`, the writer first;
/// a reader of `elsewhere` got in before it, so the writer meets that
/// reader, claims the name, and gives up. `here`'s reader must then be let
/// in within a couple of seconds, not left asleep until the old writer's
/// TTL: nothing holds it off any more.
///
/// The release and the other reader's admission are put in the order a
/// race can put them, every run: the old writer's lease is deleted without
/// a word, the reader of `elsewhere` gets in, and only then is the release
/// announced, on the name's channel, as the release script announces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_lets_in_the_readers_of_its_process_it_stood_in_front_of() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let prefix = unique("gives-up");
    let channel = "gives-up:released";
    let manager = async |prefix: &str| {
        let config = RedisConfig::new().channel(channel);
        let store = RedisStore::connect_with(&url, config)
            .await
            .expect("connect");
        LockManager::new(store).with_prefix(prefix)
    };
    let (here, elsewhere) = (manager(&prefix).await, manager(&prefix).await);
    let old_ttl = Duration::from_secs(30);
    let old_writer = elsewhere
        .lock("doc", old_ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let reader = tokio::spawn({
        let lock = here.lock("doc", LONG).read().wait_for(LONG);
        async move { lock.acquire().await.expect("acquire") }
    });
    let writer = tokio::spawn({
        let lock = here.lock("doc", LONG).wait_for(Duration::from_secs(2));
        async move {
            let guard = lock.acquire().await.expect("acquire");
            (guard.is_some(), Instant::now())
        }
    });
    // Both have tried and found the old writer there.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let lease = format!("{{{}}}", old_writer.key());
    let mut data = data_connection(&url).await;
    let deleted: u64 = data.del(&lease).await.expect("DEL");
    assert_eq!(deleted, 1, "the old writer's lease was there");
    old_writer.keep();
    let other_reader = elsewhere
        .lock("doc", old_ttl)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("the name is free for readers");
    let _: u64 = data
        .publish(format!("{lease}:{channel}"), &lease)
        .await
        .expect("PUBLISH");

    let (got, gave_up) = tokio::time::timeout(HANG_GUARD, writer)
        .await
        .expect("the writer's wait ends")
        .expect("writer task");
    assert!(!got, "a reader of the other process holds the name");
    let admitted = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the reader is still asleep 5 s after the writer in front of it gave up (the old \
                 writer's TTL was 30 s)"
            )
        })
        .expect("reader task")
        .expect("only readers hold the name: the reader gets in");
    eprintln!(
        "the reader got in {:?} after the writer gave up",
        gave_up.elapsed()
    );
    drop((admitted, other_reader));
}

/// A guard dropped as `#[tokio::main]` returns (`let _guard = ...` in a cron
/// binary's `main`) is given back before the process exits, under both
/// flavors of runtime: the next run must not find the lock held for the
/// rest of its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_tokio_main_returns_is_given_back_before_the_process_exits() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let locks = LockManager::new(RedisStore::connect(&url).await.expect("connect"));
    children::main_returning_with_a_guard_gives_it_back(
        env!("CARGO_BIN_EXE_exit-child"),
        &url,
        &locks,
        &[],
        HANG_GUARD,
    )
    .await;
}

/// A fenced lock's holder, read back (`holder()`, `locks list`), shows the
/// fencing token its acquire got, as on PostgreSQL, etcd and memory: only an
/// election's leader did, and an operator read `-` as "not fenced". The
/// next fenced holder shows its own; a plain holder after them, none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_holder_is_read_back_with_its_fencing_token() {
    let Some(manager) = harness::redis_manager().await else {
        return;
    };
    let locks = manager.with_prefix(unique("fenced-holder"));
    let lock = || locks.lock("ledger", LONG).fenced();
    let first = lock().acquire().await.expect("acquire").expect("free");
    let holder = lock().holder().await.expect("holder").expect("held");
    assert_eq!(holder.fence(), first.fence(), "the holder's own token");
    let first_fence = first.fence();
    first.release().await.expect("release");
    let second = lock().acquire().await.expect("acquire").expect("free");
    let holder = lock().holder().await.expect("holder").expect("held");
    assert_eq!(
        holder.fence(),
        second.fence(),
        "the next holder's own token"
    );
    assert!(second.fence() > first_fence);
    second.release().await.expect("release");
    let plain = locks
        .lock("ledger", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let holder = locks
        .lock("ledger", LONG)
        .holder()
        .await
        .expect("holder")
        .expect("held");
    assert_eq!(holder.fence(), None, "a plain holder got no token");
    plain.release().await.expect("release");
}
