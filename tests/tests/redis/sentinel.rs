//! Redis with replicas: what a lease survives when the primary dies behind
//! Sentinel, with and without `RedisConfig::replica_acks`, and where the
//! acknowledgement comes from on a cluster.
//!
//! Every Sentinel test starts a group of its own (one primary, one replica,
//! three sentinels; `lock_tests::sentinel`) and kills nodes with `SIGKILL`.

use std::time::{Duration, Instant};

use lock_core::{Error, LockManager, RedisConfig, RedisStore};
use lock_tests::children;
use lock_tests::harness::{RedisCluster, command};
use lock_tests::sentinel::Sentinels;
use lock_tests::server::signal;

/// Hang guard for one failover: the sentinels call the primary down after
/// 2.5 s and elect a leader within a second or two; an election that
/// splits is tried again after 4 s.
const FAILOVER_GUARD: Duration = Duration::from_secs(30);

/// Hang guard for bringing a node back and the group settling.
const SETTLE_GUARD: Duration = Duration::from_secs(30);

/// The harness the other tests stand on: a killed primary is replaced by
/// its replica, the killed node comes back as the new primary's replica,
/// and a second failover moves the primary back, so rounds can repeat.
/// Without it a failover test could "pass" on a group that never failed
/// over.
#[test]
fn the_harness_sees_a_failover_and_the_killed_node_rejoins_as_a_replica() {
    let Some(mut group) = Sentinels::start() else {
        return;
    };
    let first = group
        .primary_port()
        .expect("the sentinels report a primary");
    let replica = group.replica_port().expect("a replica");
    assert_eq!(
        group.role(replica).expect("ROLE"),
        "slave",
        "the second node starts as a replica"
    );
    group
        .data_command(first, &["SET", "written-before", "1"])
        .expect("SET");
    group
        .data_command(first, &["WAIT", "1", "1000"])
        .expect("WAIT");

    let started = Instant::now();
    let killed = group.kill_primary().expect("kill");
    assert_eq!(killed, first, "the primary was the one killed");
    let second = group
        .wait_for_failover(killed, FAILOVER_GUARD)
        .expect("a failover");
    let took = started.elapsed();
    assert_eq!(second, replica, "the replica was promoted");
    assert_eq!(
        group.role(second).expect("ROLE"),
        "master",
        "the promoted node answers as a master"
    );
    assert_eq!(
        group
            .data_command(second, &["GET", "written-before"])
            .expect("GET"),
        "1",
        "the promoted node has what was replicated before the kill"
    );

    group
        .bring_back(killed, SETTLE_GUARD)
        .expect("the killed node rejoins");
    assert_eq!(
        group.role(killed).expect("ROLE"),
        "slave",
        "the killed node came back as a replica"
    );
    assert_eq!(
        group.primary_port().expect("primary"),
        second,
        "bringing a node back does not move the primary"
    );

    // A second round on the same group: the roles trade back.
    let again = group.kill_primary().expect("kill");
    let third = group
        .wait_for_failover(again, FAILOVER_GUARD)
        .expect("a second failover");
    assert_eq!(third, first, "the primary moved back to the first node");
    group
        .bring_back(again, SETTLE_GUARD)
        .expect("the node killed second rejoins");
    eprintln!(
        "harness: a failover took {took:.2?} from SIGKILL to a promoted primary the sentinels report"
    );
}

/// A lease's time to live in the failover rounds: far longer than a
/// failover, so a second holder during the round can only come from a
/// lease the promotion lost, never from one that ran out.
const LEASE: Duration = Duration::from_secs(30);

/// How long a call of the store under test may take, and how long the
/// replicas have to acknowledge a lease write.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// How many failovers each mode plays: 30, or `FAILOVER_ROUNDS`.
fn rounds() -> usize {
    std::env::var("FAILOVER_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(30)
}

/// Runs a harness step (blocking I/O) without stalling the runtime's other
/// worker, which serves the store's connections meanwhile.
fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// A prefix of this run's own.
fn unique(what: &str) -> String {
    format!("{what}-{:08x}:", rand::random::<u32>())
}

/// One fenced attempt by another process, without waiting: `None` when the
/// lock is held, else the fencing token it was given (and released). A
/// child that could not reach a primary yet (the sentinels still telling
/// of the old one) is run again, for up to 20 s.
fn try_fenced_elsewhere(url: &str, prefix: &str, name: &str) -> Option<u64> {
    let started = Instant::now();
    loop {
        let mut child = children::spawn(
            env!("CARGO_BIN_EXE_lock-child"),
            &[
                "try-fenced",
                url,
                prefix,
                name,
                &LEASE.as_millis().to_string(),
            ],
        );
        let line = children::read_line(&mut child, Duration::from_secs(30));
        let _ = child.wait();
        if line == "none" {
            return None;
        }
        if let Some(fence) = line.strip_prefix("got ") {
            return Some(fence.parse().expect("a fencing token"));
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "another process could not try the lock after the failover: {line}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Calls `locks` until the store answers again: the first call after a
/// failover finds its connection dead, and the next asks the sentinels.
async fn until_the_store_answers(locks: &LockManager) {
    let started = Instant::now();
    loop {
        match locks.lock("probe", LEASE).holder().await {
            Ok(_) => return,
            Err(error) => assert!(
                started.elapsed() < Duration::from_secs(20),
                "the store did not find the new primary within 20 s: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the failover rounds of one mode saw.
#[derive(Debug, Default)]
struct Failovers {
    rounds: usize,
    /// Acquires that returned a lease.
    granted: usize,
    /// Acquires refused with `Error::NotReplicated` (with acks only).
    not_replicated: usize,
    /// Granted leases another process was granted too, right after the
    /// promotion, while the first holder still held it.
    lost: usize,
    /// Fencing tokens handed out that were not above every token handed
    /// out for the same name before them.
    fence_regressions: usize,
}

/// Notes a fencing token handed out, counting it when it is not above
/// every token handed out before it.
fn record(fences: &mut Vec<u64>, fence: u64, seen: &mut Failovers) {
    if fences.iter().any(|&earlier| earlier >= fence) {
        seen.fence_regressions += 1;
    }
    fences.push(fence);
}

/// How far behind the replica is at each grant: it is paused this long
/// from just before the acquire is sent.
const LAG: Duration = Duration::from_millis(100);

/// `rounds()` failovers on a group of their own. Each round plays a
/// replica that is behind when a lease is granted:
///
/// ```text
/// replica paused (SIGSTOP), its link cut: what the primary writes now
///   reaches the replica only once it resumes and catches up
/// A acquires a fenced lease
/// the primary is SIGKILLed as soon as the acquire returns; the replica
///   resumes then, or LAG after the acquire was sent if that is sooner
/// the sentinels promote the replica
/// B (another process) tries the same name: refused, or the lease was lost
/// A releases on the new primary; B takes the lease (its token recorded)
/// the killed node rejoins as a replica
/// ```
///
/// Without acks the acquire returns at once and the primary dies with the
/// lease unreplicated. With acks it returns only once the resumed replica
/// has the lease.
async fn failover_rounds(acks: bool) -> Option<Failovers> {
    let mut group = blocking(Sentinels::start)?;
    let url = group.url();
    let mut config = RedisConfig::new().timeout(CALL_TIMEOUT);
    if acks {
        config = config.replica_acks(1, ACK_TIMEOUT);
    }
    let prefix = unique(if acks { "failover-acks" } else { "failover" });
    let locks = LockManager::new(
        RedisStore::connect_with(&url, config)
            .await
            .expect("connect through the sentinels"),
    )
    .with_prefix(prefix.clone());
    let mut seen = Failovers::default();
    for round in 0..rounds() {
        let name = format!("round-{round}");
        // Every fencing token a caller was told it holds for this name, in
        // the order given.
        let mut fences: Vec<u64> = Vec::new();
        let primary = blocking(|| group.primary_port()).expect("a primary");
        let paused = blocking(|| group.pause_replica()).expect("SIGSTOP the replica");
        blocking(|| group.data_command(primary, &["CLIENT", "KILL", "TYPE", "replica"]))
            .expect("CLIENT KILL TYPE replica");
        let mut acquire = {
            let lock = locks.lock(&name, LEASE).fenced();
            tokio::spawn(async move { lock.acquire().await })
        };
        let early = tokio::select! {
            done = &mut acquire => Some(done),
            () = tokio::time::sleep(LAG) => None,
        };
        let (granted, killed) = match early {
            Some(done) => {
                let killed = blocking(|| group.kill_primary()).expect("SIGKILL the primary");
                blocking(|| group.resume(paused)).expect("SIGCONT the replica");
                (done, killed)
            }
            None => {
                blocking(|| group.resume(paused)).expect("SIGCONT the replica");
                let done = acquire.await;
                let killed = blocking(|| group.kill_primary()).expect("SIGKILL the primary");
                (done, killed)
            }
        };
        assert_eq!(killed, primary, "round {round}: the primary was killed");
        let guard = match granted.expect("the acquire's task") {
            Ok(Some(guard)) => {
                seen.granted += 1;
                record(
                    &mut fences,
                    guard.fence().expect("a fenced lease"),
                    &mut seen,
                );
                Some(guard)
            }
            Err(Error::NotReplicated { acked, wanted }) if acks => {
                assert!(acked < wanted, "round {round}: {acked} of {wanted}");
                seen.not_replicated += 1;
                None
            }
            other => panic!("round {round}: the acquire gave {other:?}"),
        };
        blocking(|| group.wait_for_failover(killed, FAILOVER_GUARD)).expect("a failover");
        let other = blocking(|| try_fenced_elsewhere(&url, &prefix, &name));
        if let Some(guard) = guard {
            if let Some(fence) = other {
                seen.lost += 1;
                record(&mut fences, fence, &mut seen);
            }
            until_the_store_answers(&locks).await;
            let released = guard.release().await.expect("release on the new primary");
            assert_eq!(
                released,
                other.is_none(),
                "round {round}: the release finds the lease exactly when the promotion kept it"
            );
            let next = blocking(|| try_fenced_elsewhere(&url, &prefix, &name))
                .expect("free once its holder gave it back");
            record(&mut fences, next, &mut seen);
        }
        blocking(|| group.bring_back(killed, SETTLE_GUARD)).expect("the killed node rejoins");
        until_the_store_answers(&locks).await;
        seen.rounds += 1;
    }
    Some(seen)
}

/// With `replica_acks(1, ...)`, a lease is granted only once the replica
/// has it, so the replica the sentinels promote has every lease a caller
/// was told it holds: across 30 failovers, nobody else is granted a held
/// name, and fencing tokens only grow. This is the promise the option
/// exists for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acks_no_failover_loses_a_granted_lease() {
    let Some(seen) = failover_rounds(true).await else {
        return;
    };
    eprintln!(
        "failover with replica_acks(1, {ACK_TIMEOUT:?}): {} rounds, {} leases granted, \
         {} refused as not replicated, {} lost on promotion, {} fencing tokens out of order",
        seen.rounds, seen.granted, seen.not_replicated, seen.lost, seen.fence_regressions
    );
    assert_eq!(seen.rounds, rounds(), "every round ran");
    assert!(seen.granted > 0, "some leases were granted: {seen:?}");
    assert_eq!(seen.lost, 0, "a granted lease was lost: {seen:?}");
    assert_eq!(
        seen.fence_regressions, 0,
        "fencing went backwards: {seen:?}"
    );
}

/// The same rounds without acknowledgements: how many granted leases the
/// promotion lost, a figure rather than a promise (it shows why the option
/// exists); the rounds must still all run. Fencing must not go backwards
/// with them: the promoted replica missed the counter's last write, but a
/// token is never below the server's clock, so the next holder's is still
/// above the lost one's and a resource checking tokens refuses the first
/// holder's late writes. (The nodes share one machine's clock here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replica_acks_a_failover_can_lose_a_granted_lease() {
    let Some(seen) = failover_rounds(false).await else {
        return;
    };
    eprintln!(
        "failover without replica_acks: {} rounds, {} leases granted, {} lost on promotion, \
         {} fencing tokens out of order",
        seen.rounds, seen.granted, seen.lost, seen.fence_regressions
    );
    assert_eq!(seen.rounds, rounds(), "every round ran");
    assert_eq!(
        seen.granted,
        rounds(),
        "without acks every acquire is granted"
    );
    assert_eq!(
        seen.fence_regressions, 0,
        "a promotion that lost the counter's last write must not hand out a token at or \
         below one already given: {seen:?}"
    );
}

/// A replica that is down cannot acknowledge: an acquire fails with
/// `NotReplicated` within its bound (the call's timeout plus the ack
/// timeout) and gives its lease back, and an extend of a lease taken
/// before fails the same way, which renewal treats as a failed renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_replica_down_lease_writes_fail_as_not_replicated_and_leave_nothing_held() {
    let Some(mut group) = blocking(Sentinels::start) else {
        return;
    };
    let acks = Duration::from_millis(500);
    let config = RedisConfig::new()
        .timeout(Duration::from_secs(1))
        .replica_acks(1, acks);
    let locks = LockManager::new(
        RedisStore::connect_with(&group.url(), config)
            .await
            .expect("connect through the sentinels"),
    )
    .with_prefix(unique("replica-down"));
    let earlier = locks
        .lock("earlier", LEASE)
        .acquire()
        .await
        .expect("acquire while the replica is up")
        .expect("free");
    blocking(|| group.stop_replica()).expect("stop the replica");

    let started = Instant::now();
    let refused = locks.lock("job", LEASE).fenced().acquire().await;
    let took = started.elapsed();
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "not acknowledged: {refused:?}"
    );
    assert!(
        took >= acks,
        "WAIT waited its {acks:?} for the replica before giving up ({took:?})"
    );
    assert!(
        took < Duration::from_secs(10),
        "the acquire is bounded by its timeouts, not left hanging ({took:?})"
    );
    let message = refused.expect_err("refused").to_string();
    assert!(
        message.contains("replicas are up"),
        "the message says what to check: {message}"
    );
    let mut left = true;
    for _ in 0..100 {
        left = locks.lock("job", LEASE).is_held().await.expect("is_held");
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!left, "the refused acquire gave its lease back");

    let extended = earlier.extend(LEASE).await;
    assert!(
        matches!(extended, Err(Error::NotReplicated { .. })),
        "an extend nobody acknowledged is a failure: {extended:?}"
    );
    blocking(|| group.start_replica(SETTLE_GUARD)).expect("the replica returns");
    assert!(
        earlier.release().await.expect("release"),
        "the earlier lease was still there"
    );
}

/// A waiter blocked on a name when the primary dies must not sleep until
/// its holder's TTL: its release subscription moves to the new primary,
/// and the holder's release there wakes it. Meanwhile, calls fail within
/// their bound instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_blocked_across_a_failover_is_woken_by_the_release_on_the_new_primary() {
    let Some(mut group) = blocking(Sentinels::start) else {
        return;
    };
    let url = group.url();
    let prefix = unique("failover-waiter");
    let connect = |config: RedisConfig| {
        let url = url.clone();
        let prefix = prefix.clone();
        async move {
            LockManager::new(
                RedisStore::connect_with(&url, config.timeout(CALL_TIMEOUT))
                    .await
                    .expect("connect through the sentinels"),
            )
            .with_prefix(prefix)
        }
    };
    let holder = connect(RedisConfig::new().replica_acks(1, ACK_TIMEOUT)).await;
    let waiting = connect(RedisConfig::new()).await;
    let guard = holder
        .lock("job", LEASE)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let lock = waiting.lock("job", LEASE).wait_for(Duration::from_secs(60));
        tokio::spawn(async move {
            let got = lock.acquire().await;
            (Instant::now(), got)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = blocking(|| group.kill_primary()).expect("SIGKILL the primary");
    // While there is no primary (the sentinels call it down only after
    // 2.5 s), a call fails within its bound, with an error that says so.
    let started = Instant::now();
    let during = holder.lock("probe", LEASE).holder().await;
    let took = started.elapsed();
    let error = during.expect_err("no primary to answer");
    eprintln!("failover: a call with no primary failed after {took:?}: {error}");
    assert!(
        took < CALL_TIMEOUT + Duration::from_secs(1),
        "bounded by RedisConfig::timeout ({took:?})"
    );
    blocking(|| group.wait_for_failover(killed, FAILOVER_GUARD)).expect("a failover");
    // Let the waiter's subscription find the new primary before the
    // release, so the release itself must wake it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter still waits for the holder"
    );
    until_the_store_answers(&holder).await;
    assert!(
        guard.release().await.expect("release on the new primary"),
        "the acknowledged lease survived the failover"
    );
    let released = Instant::now();
    let (got_at, got) = tokio::time::timeout(LEASE, waiter)
        .await
        .expect("the waiter returns before the holder's TTL would have run out")
        .expect("the waiter's task");
    let got = got.expect("acquire").expect("the waiter got the lock");
    let after = got_at.saturating_duration_since(released);
    eprintln!("failover: the blocked waiter got the lock {after:?} after the release");
    assert!(
        after < Duration::from_secs(10),
        "woken by the release, not by the TTL ({after:?} after the release; 28 s were left)"
    );
    drop(got);
}

/// On a cluster, `WAIT` must go to the primary that owns the key: only its
/// replicas hold the lease. With the replica of one primary paused, every
/// lease in that primary's slots must fail as not replicated and every
/// other lease must be granted; a `WAIT` sent anywhere else would count
/// another shard's replica and grant a lease nobody else has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_acknowledgement_comes_from_the_replica_of_the_keys_own_primary() {
    if !lock_tests::harness::redis_server_installed() {
        let _: Option<()> = lock_tests::harness::unavailable(
            "the cluster replica-acks test",
            "redis-server is not on PATH",
        );
        return;
    }
    let cluster = blocking(|| RedisCluster::start_with_replicas(3, 1))
        .expect("a cluster of three primaries with a replica each");
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let config = RedisConfig::new()
        .timeout(Duration::from_secs(2))
        .replica_acks(1, Duration::from_millis(300));
    let prefix = unique("cluster-acks");
    let locks = LockManager::new(
        RedisStore::cluster_with(&urls, config)
            .await
            .expect("connect to the cluster"),
    )
    .with_prefix(prefix.clone());
    let first = blocking(|| cluster.primary_ports()).expect("the primaries")[0];
    let paused = blocking(|| cluster.replica_pids(first)).expect("its replica");
    assert_eq!(paused.len(), 1, "one replica of {first}: {paused:?}");
    blocking(|| signal(paused[0], "-STOP")).expect("SIGSTOP the replica");
    let (mut refused, mut granted) = (0, 0);
    for index in 0..24 {
        let name = format!("job-{index}");
        // The first primary answers for the key's slot, or redirects.
        let owned = command(first, &["EXISTS", &format!("{{{prefix}{name}}}")]).is_ok();
        let got = locks.lock(&name, LEASE).acquire().await;
        match (owned, got) {
            (
                true,
                Err(Error::NotReplicated {
                    acked: 0,
                    wanted: 1,
                }),
            ) => refused += 1,
            (false, Ok(Some(guard))) => {
                granted += 1;
                guard.release().await.expect("release");
            }
            (owned, got) => {
                let _ = signal(paused[0], "-CONT");
                panic!("{name} (on the paused replica's primary: {owned}): {got:?}");
            }
        }
    }
    blocking(|| signal(paused[0], "-CONT")).expect("SIGCONT the replica");
    assert!(
        refused > 0 && granted > 0,
        "the names fell on both kinds of shard: {refused} refused, {granted} granted"
    );
}

/// An `at_least` claim given back early is shortened to end when the claim
/// does. With a replica that does not acknowledge, that shortening still
/// takes effect on the primary: it must count as done, not be tried again
/// and again, each try pushing the claim's end out by the whole hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_least_claim_given_back_without_acks_still_ends_when_the_claim_does() {
    let Some(group) = blocking(Sentinels::start) else {
        return;
    };
    let config = RedisConfig::new()
        .timeout(Duration::from_secs(1))
        .replica_acks(1, Duration::from_millis(300));
    let locks = LockManager::new(
        RedisStore::connect_with(&group.url(), config)
            .await
            .expect("connect through the sentinels"),
    )
    .with_prefix(unique("at-least-acks"));
    let lock = locks
        .lock("report", Duration::from_secs(6))
        .at_least(Duration::from_secs(3));
    let taken = Instant::now();
    let guard = lock
        .acquire()
        .await
        .expect("acquire while the replica is up")
        .expect("free");
    let paused = blocking(|| group.pause_replica()).expect("SIGSTOP the replica");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let released = guard.release().await;
    let held_after = lock.holder().await;
    // The claim ends at 3 s; the lease's TTL would run to 6 s.
    tokio::time::sleep_until((taken + Duration::from_secs(3)).into()).await;
    let mut left = lock.holder().await;
    while left.as_ref().is_ok_and(Option::is_some) && taken.elapsed() < Duration::from_millis(4500)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = lock.holder().await;
    }
    blocking(|| group.resume(paused)).expect("SIGCONT the replica");
    assert!(
        released.is_ok(),
        "shortening the lease took effect: {released:?}"
    );
    assert!(
        held_after.expect("holder").is_some(),
        "the claim stands until its 3 s"
    );
    assert!(
        left.expect("holder").is_none(),
        "the claim ended by 4.5 s, not pushed out toward the TTL ({:?} after the acquire)",
        taken.elapsed()
    );
}

/// A store whose first sentinel does not know the service (one being
/// replaced, one of another deployment listed by mistake) asks the others
/// before it fails: one sentinel's "no such primary" is not the group's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_asks_the_other_sentinels_when_the_first_knows_no_such_service() {
    let Some(group) = blocking(Sentinels::start) else {
        return;
    };
    let Some(stranger) = blocking(lock_tests::sentinel::sentinel_of_nothing) else {
        return;
    };
    let url = group.url().replacen(
        "redis+sentinel://",
        &format!("redis+sentinel://127.0.0.1:{},", stranger.port),
        1,
    );
    let store = RedisStore::connect_with(&url, RedisConfig::new().timeout(CALL_TIMEOUT))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "a connect through {url}, whose first sentinel knows no such service: {}",
                e.chain()
            )
        });
    let locks = LockManager::new(store).with_prefix(unique("stranger"));
    let held = locks
        .lock("first-sentinel-knows-nothing", LEASE)
        .acquire()
        .await
        .expect("an acquire on the primary the other sentinels name")
        .expect("free");
    held.release().await.expect("release");
}

/// Right after a failover, a sentinel names the promoted replica when
/// asked for the primary's address while its list of primaries still shows
/// the old one, down, until it has reconfigured the replicas; the others
/// name the old one until word reaches them. A connect made in that window
/// (once a sentinel names a new primary that answers as one) must find
/// the new primary, not fail with "Master with given name not found"
/// (it did, about one run in three of a test that connected then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_made_just_after_a_failover_finds_the_promoted_primary() {
    let Some(mut group) = blocking(Sentinels::start) else {
        return;
    };
    let url = group.url();
    for round in 0..3 {
        let killed = blocking(|| group.kill_primary()).expect("kill the primary");
        let promoted =
            blocking(|| group.wait_for_failover(killed, FAILOVER_GUARD)).expect("a failover");
        let store = RedisStore::connect_with(&url, RedisConfig::new().timeout(CALL_TIMEOUT))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: a connect once a sentinel names the promoted primary \
                     {promoted}: {}",
                    e.chain()
                )
            });
        let locks = LockManager::new(store).with_prefix(unique("just-after"));
        let held = locks
            .lock("right-after-the-failover", LEASE)
            .acquire()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: an acquire on the new primary: {}",
                    e.chain()
                )
            })
            .expect("free");
        held.release().await.expect("release");
        blocking(|| group.bring_back(killed, SETTLE_GUARD)).expect("the killed node rejoins");
    }
}
